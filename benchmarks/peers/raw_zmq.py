"""The raw ZeroMQ replication bound: what replication over ZeroMQ in Python costs with no protocol.

One leader process and two follower processes (started by
:class:`benchmarks.cluster_bench.RawZmqSubject`)::

    python -m benchmarks.peers.raw_zmq leader   --dir D --parent-pid PID
    python -m benchmarks.peers.raw_zmq follower --dir D --id N --leader tcp://127.0.0.1:P --parent-pid PID

* The leader binds two ROUTER sockets on OS-picked loopback ports: one for clients, one for its
  followers (each follower's DEALER says ``HELLO`` first).
* A client (:class:`RawZmqClient`, a DEALER) pipelines requests: ``request id (8 bytes LE) + payload``.
* Per poll the leader drains what has arrived (at most :data:`MAX_BATCH` requests), appends each
  payload as a length-prefixed record to its file (one ``os.write`` per batch), and sends the same
  bytes with the batch's end sequence to both followers.
* A follower appends each batch it drains to its own file and acks the highest sequence it holds.
* The leader acks a client's requests once its own append and one follower's ack cover them (quorum
  of 3): one reply per client per ack, the 8-byte request ids concatenated.

No terms, no elections, no retransmission, no fsync: nothing beyond appending and counting — that is
the point of a bound. The leader also answers a 1-byte ``?`` with ``F`` + the number of followers
that said hello, so the bench knows when both are there.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from array import array
from collections import defaultdict, deque
from pathlib import Path

import zmq

from benchmarks.peers.common import ChildLife, add_child_args, announce_ready, bind_loopback

MAX_BATCH = 4096
HELLO = b"HELLO"
QUERY = b"?"


def _open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def run_leader(life: ChildLife, directory: Path) -> None:
    ctx = zmq.Context.instance()
    clients = ctx.socket(zmq.ROUTER)
    followers = ctx.socket(zmq.ROUTER)
    for s in (clients, followers):
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.setsockopt(zmq.RCVHWM, 0)
    client_ep = bind_loopback(clients)
    follower_ep = bind_loopback(followers)
    fd = _open_append(directory / "leader.log")
    follower_ids: list[bytes] = []
    seq = 0
    acked = 0
    pending: deque[tuple[int, list[tuple[bytes, bytes]]]] = deque()
    poller = zmq.Poller()
    poller.register(clients, zmq.POLLIN)
    poller.register(followers, zmq.POLLIN)
    announce_ready({"client": client_ep, "followers": follower_ep})
    try:
        while not life.should_stop():
            events = dict(poller.poll(100))
            if followers in events:
                while True:
                    try:
                        ident, body = followers.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if body == HELLO:
                        if ident not in follower_ids:
                            follower_ids.append(ident)
                    else:
                        acked = max(acked, int.from_bytes(body, "little"))
                if pending and pending[0][0] <= acked:
                    replies: dict[bytes, list[bytes]] = defaultdict(list)
                    while pending and pending[0][0] <= acked:
                        for ident, rid in pending.popleft()[1]:
                            replies[ident].append(rid)
                    for ident, rids in replies.items():
                        clients.send_multipart([ident, b"".join(rids)])
            if clients in events:
                records: list[bytes] = []
                waiters: list[tuple[bytes, bytes]] = []
                for _ in range(MAX_BATCH):
                    try:
                        ident, body = clients.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if body == QUERY:
                        clients.send_multipart([ident, b"F" + bytes([len(follower_ids)])])
                        continue
                    payload = body[8:]
                    records.append(len(payload).to_bytes(4, "little") + payload)
                    waiters.append((ident, body[:8]))
                if records:
                    data = b"".join(records)
                    os.write(fd, data)
                    seq += len(records)
                    header = seq.to_bytes(8, "little")
                    for f in follower_ids:
                        followers.send_multipart([f, header, data])
                    pending.append((seq, waiters))
    finally:
        os.close(fd)
        clients.close(0)
        followers.close(0)


def run_follower(life: ChildLife, directory: Path, member: int, leader: str) -> None:
    ctx = zmq.Context.instance()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.SNDHWM, 0)
    dealer.setsockopt(zmq.RCVHWM, 0)
    dealer.connect(leader)
    dealer.send(HELLO)
    fd = _open_append(directory / f"follower-{member}.log")
    announce_ready({"member": member})
    try:
        while not life.should_stop():
            if not dealer.poll(100):
                continue
            chunks: list[bytes] = []
            last = b""
            for _ in range(MAX_BATCH):
                try:
                    last, data = dealer.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                chunks.append(data)
            if chunks:
                os.write(fd, b"".join(chunks))
                dealer.send(last)
    finally:
        os.close(fd)
        dealer.close(0)


class RawZmqClient:
    """:class:`benchmarks.peers.common.AckClient` for the raw bound: a pipelining DEALER."""

    def __init__(self, endpoint: str) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.connect(endpoint)

    def followers(self, timeout_s: float = 2.0) -> int:
        """How many followers the leader has heard from (only while no request is outstanding)."""
        self.sock.send(QUERY)
        if not self.sock.poll(int(timeout_s * 1000)):
            return 0
        reply = self.sock.recv()
        return reply[1] if reply[:1] == b"F" else 0

    def offer(self, rid: int, payload: bytes) -> bool:
        self.sock.send(rid.to_bytes(8, "little") + payload, zmq.NOBLOCK)
        return True

    def poll(self, timeout_s: float) -> tuple[list[int], list[int]]:
        acked: list[int] = []
        if timeout_s > 0 and not self.sock.poll(math.ceil(timeout_s * 1000)):
            return acked, []
        ids = array("Q")
        while True:
            try:
                ids.frombytes(self.sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                break
        if ids:
            if sys.byteorder != "little":
                ids.byteswap()
            acked = ids.tolist()
        return acked, []

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sock.close(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["leader", "follower"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--id", type=int, default=0)
    parser.add_argument("--leader", default="")
    add_child_args(parser)
    args = parser.parse_args()
    life = ChildLife(args.parent_pid, args.max_seconds)
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    if args.role == "leader":
        run_leader(life, directory)
    else:
        run_follower(life, directory, args.id, args.leader)


if __name__ == "__main__":
    main()
