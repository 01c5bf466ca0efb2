"""Raw frames to a process's socket, for tests and chaos: what a confused or hostile peer would send.

``send_raw(endpoint, messages, socket="push")`` connects a PUSH (to PULL sockets: ingress) or a
DEALER (to ROUTER sockets: consensus, log, catch-up, archive, service links, control), sends each
message (a list of frames) without blocking, and waits until ZeroMQ has handed them to the
connection (bounded by ``timeout_s``). A DEALER may announce a ``routing_id`` (as a member's links
do); ``setup`` sets other options first (CURVE keys, clusterlab.core.runtime.security)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import zmq

SOCKET_KINDS = {"push": zmq.PUSH, "dealer": zmq.DEALER}


def send_raw(
    zctx: zmq.Context,
    endpoint: str,
    messages: Sequence[Sequence[bytes]],
    *,
    socket: str = "push",
    timeout_s: float = 2.0,
    routing_id: bytes | None = None,
    setup: Callable[[zmq.Socket], None] | None = None,
) -> int:
    """Send ``messages`` (each a list of frames) to ``endpoint``; returns how many were queued."""
    sock = zctx.socket(SOCKET_KINDS[socket])
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
    if routing_id is not None:
        sock.setsockopt(zmq.ROUTING_ID, routing_id)
    if setup is not None:
        setup(sock)
    sock.connect(endpoint)
    sent = 0
    try:
        for frames in messages:
            sock.send_multipart(list(frames))
            sent += 1
    except zmq.Again:
        pass
    finally:
        sock.close(int(timeout_s * 1000))  # linger: deliver what is queued, bounded
    return sent
