"""Transport framing: the batching channels' messages (one message, or a packed batch of 1..MAX_BATCH)."""

from __future__ import annotations

import struct

from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.transport import (
    HEADER,
    MAX_BATCH,
    NO_MEMBER,
    batch_header,
    header,
    pack_batch,
    parse,
    parse_batch,
)


def anyone(_src: int) -> bool:
    return True


def test_a_batch_carries_its_messages_in_order() -> None:
    head = batch_header(Channel.INGRESS, NO_MEMBER)
    messages = [b"a", b"", b"b" * 300, bytes(range(256))]
    assert parse_batch([head, pack_batch(messages)], Channel.INGRESS, anyone) == (NO_MEMBER, messages)
    full = [b"x%d" % i for i in range(MAX_BATCH)]
    assert parse_batch([head, pack_batch(full)], Channel.INGRESS, anyone) == (NO_MEMBER, full)
    # One message without the flag: the usual two frames.
    assert parse_batch([header(Channel.INGRESS, NO_MEMBER), b"one"], Channel.INGRESS, anyone) == (NO_MEMBER, [b"one"])


def test_a_malformed_batch_says_what_is_wrong() -> None:
    head = batch_header(Channel.EGRESS, NO_MEMBER)
    assert "got 1" in parse_batch([head], Channel.EGRESS, anyone)
    assert "got 3" in parse_batch([head, b"x", b"y"], Channel.EGRESS, anyone)
    assert "torn length" in parse_batch([head, pack_batch([b"ok"]) + b"\x01\x00"], Channel.EGRESS, anyone)
    assert "7 bytes announced, 3 left" in parse_batch([head, struct.pack("<I", 7) + b"abc"], Channel.EGRESS, anyone)
    assert "this one 0" in parse_batch([head, b""], Channel.EGRESS, anyone)
    too_many = pack_batch([b"x"] * (MAX_BATCH + 1))
    assert f"this one {MAX_BATCH + 1}" in parse_batch([head, too_many], Channel.EGRESS, anyone)
    ingress_batch = batch_header(Channel.INGRESS, NO_MEMBER)
    assert "on the egress socket" in parse_batch([ingress_batch, pack_batch([b"x"])], Channel.EGRESS, anyone)
    assert "unknown channel code 122" in parse_batch([HEADER.pack(250, 0), b"x"], Channel.EGRESS, anyone)
    assert "header of 1 bytes" in parse_batch([b"\x01", b"x"], Channel.EGRESS, anyone)
    assert "may not send" in parse_batch([head, pack_batch([b"x"])], Channel.EGRESS, lambda src: src == 1)


def test_member_channels_take_exactly_one_payload_and_no_batch() -> None:
    head = header(Channel.CONSENSUS, 1)
    assert parse([head, b"a"], Channel.CONSENSUS, anyone) == (1, b"a")
    assert "expected 2 frames" in parse([head, b"a", b"b"], Channel.CONSENSUS, anyone)
    assert "unknown channel code" in parse([batch_header(Channel.CONSENSUS, 1), b"a"], Channel.CONSENSUS, anyone)
