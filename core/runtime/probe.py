"""Raw frames to a process's socket, for tests and chaos: what a confused or hostile peer would send.

``send_raw(endpoint, messages, socket="push")`` connects a PUSH (to PULL sockets: ingress,
consensus, log, catch-up, archive, service links) or a DEALER (to ROUTER sockets: control), sends
each message (a list of frames) without blocking, and waits until ZeroMQ has handed them to the
connection (bounded by ``timeout_s``)."""

from __future__ import annotations

from collections.abc import Sequence

import zmq

SOCKET_KINDS = {"push": zmq.PUSH, "dealer": zmq.DEALER}


def send_raw(
    zctx: zmq.Context,
    endpoint: str,
    messages: Sequence[Sequence[bytes]],
    *,
    socket: str = "push",
    timeout_s: float = 2.0,
) -> int:
    """Send ``messages`` (each a list of frames) to ``endpoint``; returns how many were queued."""
    sock = zctx.socket(SOCKET_KINDS[socket])
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
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
