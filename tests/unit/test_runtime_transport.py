"""Transport framing: the batching channels' messages (a header, then 1..MAX_BATCH payloads)."""

from __future__ import annotations

from core.consensus.context import Channel
from core.runtime.transport import HEADER, MAX_BATCH, NO_MEMBER, header, parse, parse_batch


def anyone(_src: int) -> bool:
    return True


def test_a_batch_is_a_header_then_its_payloads_in_order() -> None:
    head = header(Channel.INGRESS, NO_MEMBER)
    assert parse_batch([head, b"a"], Channel.INGRESS, anyone) == (NO_MEMBER, [b"a"])
    assert parse_batch([head, b"a", b"b", b"c"], Channel.INGRESS, anyone) == (NO_MEMBER, [b"a", b"b", b"c"])
    assert parse_batch([head, *[b"x"] * MAX_BATCH], Channel.INGRESS, anyone) == (NO_MEMBER, [b"x"] * MAX_BATCH)


def test_a_malformed_batch_says_what_is_wrong() -> None:
    head = header(Channel.EGRESS, NO_MEMBER)
    assert "got 1 frames" in parse_batch([head], Channel.EGRESS, anyone)
    assert f"got {MAX_BATCH + 2} frames" in parse_batch([head, *[b"x"] * (MAX_BATCH + 1)], Channel.EGRESS, anyone)
    assert "on the egress socket" in parse_batch([header(Channel.INGRESS, NO_MEMBER), b"x"], Channel.EGRESS, anyone)
    assert "unknown channel code 250" in parse_batch([HEADER.pack(250, 0), b"x"], Channel.EGRESS, anyone)
    assert "header of 1 bytes" in parse_batch([b"\x01", b"x"], Channel.EGRESS, anyone)
    assert "may not send" in parse_batch([head, b"x"], Channel.EGRESS, lambda src: src == 1)


def test_member_channels_still_take_exactly_one_payload() -> None:
    head = header(Channel.CONSENSUS, 1)
    assert parse([head, b"a"], Channel.CONSENSUS, anyone) == (1, b"a")
    assert "expected 2 frames" in parse([head, b"a", b"b"], Channel.CONSENSUS, anyone)
