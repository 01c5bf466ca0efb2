"""The harness side of a process's control socket: request/response over a ZeroMQ DEALER.

Used by LocalCluster and ``clusterlab tool``. A request carries a correlation id; answers to
earlier, timed-out requests (a paused process answers them when it resumes) are discarded."""

from __future__ import annotations

import dataclasses
import time
from typing import TypeVar

import zmq
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import decode
from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.transport import NO_MEMBER, SocketSetup, header, parse

M = TypeVar("M", bound=Message)


class ControlClient:
    """Requests to one process's control endpoint. Not thread-safe (one ZeroMQ socket)."""

    def __init__(self, zctx: zmq.Context, endpoint: str, setup: SocketSetup | None = None) -> None:
        """``setup`` sets socket options before connecting (a secured cluster's CURVE keys)."""
        self.endpoint = endpoint
        self._setup = setup
        self._zctx = zctx
        self._sock: zmq.Socket | None = None
        self._seq = 0
        self._head = header(Channel.CONTROL, NO_MEMBER)
        self.discarded = 0

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            sock = self._zctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 100)
            sock.setsockopt(zmq.RECONNECT_IVL, 10)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 200)
            if self._setup is not None:
                self._setup(sock)
            sock.connect(self.endpoint)
            self._sock = sock
        return self._sock

    def request(self, msg: Message, timeout_s: float) -> Message | None:
        """Send ``msg`` (its correlation_id is replaced) and return the answer, or None on timeout."""
        self._seq += 1
        correlation_id = self._seq
        request = dataclasses.replace(msg, correlation_id=correlation_id)  # type: ignore[type-var]
        sock = self._socket()
        try:
            sock.send_multipart((self._head, request.encode()), zmq.NOBLOCK)
        except zmq.Again:
            return None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0 or not sock.poll(remaining_ms):
                return None
            frames = sock.recv_multipart()
            parsed = parse(frames, Channel.CONTROL, lambda _src: True)
            if isinstance(parsed, str):
                self.discarded += 1
                continue
            try:
                reply = decode(parsed[1])
            except DecodeError:
                self.discarded += 1
                continue
            if getattr(reply, "correlation_id", None) == correlation_id:
                return reply
            self.discarded += 1

    def reset(self) -> None:
        """Drop the socket (and whatever is queued on it); the next request connects afresh."""
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def close(self) -> None:
        self.reset()
