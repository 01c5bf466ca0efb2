"""Transport framing: the batching channels' messages (one message, or a packed batch of 1..MAX_BATCH)."""

from __future__ import annotations

import struct
from pathlib import Path

import tenacity
import zmq
from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.transport import (
    HEADER,
    MAX_BATCH,
    NO_MEMBER,
    Link,
    batch_header,
    bind,
    drain,
    drain_routed,
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


def _receive(sock: zmq.Socket, count: int) -> list[list[bytes]]:
    """``count`` messages from ``sock`` through :func:`drain`, waiting (bounded) for them to arrive."""
    got: list[list[bytes]] = []
    for attempt in tenacity.Retrying(stop=tenacity.stop_after_delay(10), wait=tenacity.wait_fixed(0.01)):
        with attempt:
            if sock.poll(100):
                got += drain(sock, 64)
            assert len(got) >= count, f"{len(got)} of {count} messages arrived"
    return got


def test_links_send_two_frames_and_drain_takes_whole_messages(tmp_path: Path) -> None:
    """Link.send / send_batch (two Socket.send calls) and drain / drain_routed (frame by frame) keep
    ZeroMQ's message boundaries, whatever the number of frames a sender used."""
    ctx = zmq.Context(io_threads=1)
    try:
        pull, endpoint = bind(ctx, zmq.PULL, f"ipc://{tmp_path}/pull")
        link = Link(ctx, endpoint, immediate=False)
        head = batch_header(Channel.EGRESS, NO_MEMBER)
        assert link.send(header(Channel.EGRESS, NO_MEMBER), b"one")
        assert link.send_batch(head, [b"a", b"bb"])
        link.sock.send_multipart([b"x", b"y", b"z"])  # a stranger's three frames: one message of three
        link.sock.send(b"single")
        got = _receive(pull, 4)
        assert got == [
            [header(Channel.EGRESS, NO_MEMBER), b"one"],
            [head, pack_batch([b"a", b"bb"])],
            [b"x", b"y", b"z"],
            [b"single"],
        ]
        assert parse_batch(got[1], Channel.EGRESS, anyone) == (NO_MEMBER, [b"a", b"bb"])
        assert (link.sent, link.dropped) == (3, 0)

        router, router_endpoint = bind(ctx, zmq.ROUTER, f"ipc://{tmp_path}/router")
        dealer = Link(ctx, router_endpoint, immediate=False, routing_id=b"node-1")
        assert dealer.send(header(Channel.LOG, 1), b"block")
        routed: list[tuple[bytes, str | None, list[bytes]]] = []
        for attempt in tenacity.Retrying(stop=tenacity.stop_after_delay(10), wait=tenacity.wait_fixed(0.01)):
            with attempt:
                router.poll(100)
                routed += drain_routed(router, 8, user_ids=False)
                assert routed
        assert routed == [(b"node-1", None, [header(Channel.LOG, 1), b"block"])]
        for sock in (pull, router, link.sock, dealer.sock):
            sock.close(0)
    finally:
        ctx.term()


def test_a_link_without_a_peer_drops_and_counts(tmp_path: Path) -> None:
    """``immediate``: nothing is queued for a peer that is not there; the send fails at once and counts."""
    ctx = zmq.Context(io_threads=1)
    try:
        link = Link(ctx, f"ipc://{tmp_path}/nobody")
        assert not link.send(header(Channel.LOG, 0), b"lost")
        assert not link.send_batch(batch_header(Channel.INGRESS, NO_MEMBER), [b"a", b"b"])
        assert (link.sent, link.dropped) == (0, 3)
        link.close()
    finally:
        ctx.term()
