"""The CPU cost of authentication per message, on one member link: plain vs CURVE + ZAP + User-Id check.

One process, two real ZeroMQ sockets as a member's link uses them (a DEALER announcing ``node-1``
into a ROUTER, clusterlab.core.runtime.transport), with the same receive path as a node:
``drain_routed`` and ``source_rejection``. Secured: both ends with the cluster's CURVE keys and the
ROUTER behind pyzmq's ZAP handler (clusterlab.core.runtime.security), the User-Id read per message.
The figure is CPU time (``time.process_time``: every thread, ZeroMQ's I/O threads included) per
message, which a machine loaded by other work distorts much less than a throughput figure.
Run: ``python -m benchmarks.auth_cost [--messages N] [--out FILE]``; prints a table, writes JSON
(default benchmarks/results/auth_cost.json). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import zmq
from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.runner import BATCH_LIMIT
from clusterlab.core.runtime.security import (
    DOMAIN_MEMBER,
    ProcessSecurity,
    create_keys,
    member_key_name,
    node_routing_id,
    source_rejection,
)
from clusterlab.core.runtime.transport import Link, bind, drain_routed, header, parse

from benchmarks import write_results

SIZES = (64, 1024)


def measure(secure: bool, size: int, messages: int, directory: Path) -> dict[str, Any]:
    """CPU µs and wall µs per message sent and received over one member link."""
    ctx = zmq.Context(io_threads=1)
    server = ProcessSecurity(directory, secure, member_key_name(0), ctx, authenticate=True)
    peer = ProcessSecurity(directory, secure, member_key_name(1), None, authenticate=False)
    sock, _ = bind(ctx, zmq.ROUTER, f"ipc://{directory}/link-{int(secure)}-{size}.sock", rcvhwm=0,
                   setup=lambda s: server.serve(s, DOMAIN_MEMBER))  # fmt: skip
    link = Link(ctx, sock.getsockopt_string(zmq.LAST_ENDPOINT), sndhwm=0, immediate=False,
                routing_id=node_routing_id(1), setup=peer.connector(member_key_name(0)))  # fmt: skip
    head, payload = header(Channel.CONSENSUS, 1), bytes(size)
    try:
        link.send(head, payload)  # connect and authenticate before the clock starts
        sock.poll(10_000)
        drain_routed(sock, 1, user_ids=secure)
        received = rejected = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        sent = 0
        while received < messages:
            while sent < messages and sent - received < 1000:
                link.send(head, payload)
                sent += 1
            if not sock.poll(10_000):
                raise RuntimeError(f"no message in 10 s ({received} of {messages})")
            for routing_id, user_id, frames in drain_routed(sock, BATCH_LIMIT, user_ids=secure):
                parsed = parse(frames, Channel.CONSENSUS, lambda _src: True)
                assert not isinstance(parsed, str), parsed
                if source_rejection(routing_id, user_id, parsed[0], node_routing_id) is not None:
                    rejected += 1
                received += 1
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        link.close()
        sock.close(0)
        server.close()
        ctx.term()
    return {
        "secure": secure,
        "size": size,
        "messages": messages,
        "rejected": rejected,
        "cpu_us_per_message": round(cpu / messages * 1e6, 3),
        "wall_us_per_message": round(wall / messages * 1e6, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000, help="messages per measurement")
    parser.add_argument("--out", default="benchmarks/results/auth_cost.json", help="JSON output file")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="auth-cost-") as tmp:
        directory = Path(tmp)
        create_keys(directory, range(2))
        for size in SIZES:
            for secure in (False, True):
                rows.append(measure(secure, size, args.messages, directory))
    print(f"{'size':>6} {'auth':>5} {'cpu us/msg':>11} {'wall us/msg':>12}")
    for r in rows:
        auth = "on" if r["secure"] else "off"
        print(f"{r['size']:>6} {auth:>5} {r['cpu_us_per_message']:>11.3f} {r['wall_us_per_message']:>12.3f}")
    out = write_results(args.out, {"benchmark": "auth_cost", "rows": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
