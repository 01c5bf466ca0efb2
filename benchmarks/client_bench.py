"""The client's CPU per operation: what the pipelined benchmark client pays per put and per reply.

Run: ``python -m benchmarks.client_bench [--ops N] [--window W] [--repeat R] [--out FILE]``.

A ``ClusterConnection`` (the client library on ZeroMQ, as ``LocalCluster.client()`` builds it) talks to
a stand-in leader in the same process: a PULL socket bound as the member's ingress, and a PUSH to
the client's response channel that sends prebuilt reply batches (what a leader's service sends: one
ZeroMQ message of up to ``MAX_BATCH`` SessionMessageHeader replies). Timed, with ``time.process_time``,
only the client's side, in windows of ``--window`` requests as the saturation driver does:

* **offer**: ``kv.put`` + ``ClusterConnection.offer`` per request, then the flush (one ZeroMQ send);
* **reply**: ``pump`` until the window's replies arrived + ``take_messages`` + ``kv.reply_outcome``.

Prints microseconds per operation (best of ``--repeat``) and writes JSON (default
``benchmarks/results/client.json``). Nothing asserts these figures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq
from clusterlab.core.codec.enums import EventCode
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.session import SessionConnectRequest, SessionEvent, encode_session_message
from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.client import ClusterConnection
from clusterlab.core.runtime.transport import (
    MAX_BATCH,
    NO_MEMBER,
    batch_header,
    bind,
    connect_push,
    drain,
    header,
    pack_batch,
)
from clusterlab.harness.services import kv

from benchmarks import write_results

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "client.json"
SESSION_ID = 7
TERM = 3


def _reply_batches(first_rid: int, count: int) -> list[bytes]:
    """The leader service's replies to ``count`` puts, packed as the transport's egress batches."""
    replies = [
        encode_session_message(
            TERM, SESSION_ID, 123, kv.encode_reply({"id": rid, "ok": True, "revision": rid, "value": None})
        )
        for rid in range(first_rid, first_rid + count)
    ]
    return [pack_batch(replies[i : i + MAX_BATCH]) for i in range(0, count, MAX_BATCH)]


def run(ops: int, window: int, repeat: int) -> dict[str, Any]:
    """Best-of-``repeat`` microseconds per op for the offer side and the reply side."""
    ctx = zmq.Context(io_threads=1)
    with tempfile.TemporaryDirectory(prefix="client-bench-") as tmp:
        ingress, ingress_endpoint = bind(ctx, zmq.PULL, f"ipc://{tmp}/ingress", rcvhwm=0)
        conn = ClusterConnection({0: ingress_endpoint}, f"ipc://{tmp}/egress", zctx=ctx, keepalive_interval_ns=None)
        egress = connect_push(ctx, conn.response_channel, sndhwm=0, immediate=False)
        try:
            client = conn.client
            client.connect(conn.clock.now_ns())
            # The ingress link is "immediate": pump retries the connect until the link is up.
            if not conn.run_until(lambda: ingress.poll(0) != 0, 10.0):
                raise SystemExit("the connect request never arrived")
            connect = ingress.recv_multipart()
            request = decode(connect[1])
            assert isinstance(request, SessionConnectRequest), request
            ok = SessionEvent(SESSION_ID, request.correlation_id, TERM, 0, EventCode.OK, 1, "")
            egress.send_multipart((header(Channel.EGRESS, NO_MEMBER), ok.encode()))
            if not conn.run_until(lambda: client.is_connected, 10.0):
                raise SystemExit(f"the client never connected: {client.describe()}")
            batch_head = batch_header(Channel.EGRESS, NO_MEMBER)
            best_offer = best_reply = float("inf")
            rid = 0
            for _ in range(repeat):
                offer_s = reply_s = 0.0
                done = 0
                while done < ops:
                    first = rid + 1
                    batches = _reply_batches(first, window)
                    t0 = time.process_time()
                    for _ in range(window):
                        rid += 1
                        if not client.is_connected:
                            raise SystemExit("the session closed")
                        conn.offer(kv.put(rid, f"k{rid % 256}", "x" * 20, prev=False))
                    conn.flush()
                    offer_s += time.process_time() - t0
                    received = 0
                    give_up = time.monotonic() + 30.0
                    while received < window:  # the stand-in leader: not timed
                        if time.monotonic() > give_up:
                            raise SystemExit(f"{window - received} of {window} requests never reached the leader")
                        received += sum(_count(frames) for frames in drain_all(ingress))
                    for packed in batches:
                        egress.send_multipart((batch_head, packed))
                    t0 = time.process_time()
                    acked = 0
                    give_up = time.monotonic() + 30.0
                    while acked < window:
                        if time.monotonic() > give_up:
                            raise SystemExit(f"{window - acked} of {window} replies never reached the client")
                        conn.pump(0.05)
                        for m in conn.take_messages():
                            got, error = kv.reply_outcome(m.payload)
                            if isinstance(got, int) and not error:
                                acked += 1
                    reply_s += time.process_time() - t0
                    done += window
                best_offer = min(best_offer, offer_s / done * 1e6)
                best_reply = min(best_reply, reply_s / done * 1e6)
            ignored = client.ignored_count
        finally:
            egress.close(0)
            conn.close()
            ingress.close(0)
            ctx.term()
    return {
        "ops": ops,
        "window": window,
        "repeat": repeat,
        "offer_us_per_op": round(best_offer, 3),
        "reply_us_per_op": round(best_reply, 3),
        "client_us_per_op": round(best_offer + best_reply, 3),
        "ignored": ignored,
    }


def drain_all(sock: zmq.Socket) -> list[list[bytes]]:
    sock.poll(1000)
    return drain(sock, 64)


def _count(frames: list[bytes]) -> int:
    """Messages in one ingress ZeroMQ message (a batch header flags several)."""
    head, data = frames
    if not head[0] & 0x80:
        return 1
    n, offset = 0, 0
    while offset < len(data):
        offset += 4 + int.from_bytes(data[offset : offset + 4], "little")
        n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=100_000, help="requests per repetition (default 100000)")
    parser.add_argument("--window", type=int, default=2_000, help="requests offered before replies (default 2000)")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions, best taken (default 5)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="JSON output file")
    args = parser.parse_args(argv)
    for name in ("ops", "window", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    result = run(args.ops, args.window, args.repeat)
    print(
        f"client: offer {result['offer_us_per_op']:.2f} us/op, reply {result['reply_us_per_op']:.2f} us/op, "
        f"total {result['client_us_per_op']:.2f} us/op (window {args.window}, best of {args.repeat})"
    )
    write_results(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
