"""ZeroMQ plumbing shared by every clusterlab process: framing, socket options, links, the egress cache.

Every message on every socket is two ZeroMQ frames: a 3-byte header ``[channel u8][src int16 LE]``
and the encoded payload (a ``clusterlab.core.codec`` message). Client ingress and egress may batch several
messages (session messages, replies) into one: the header's channel code then has ``BATCH_FLAG``
set and the payload frame is a sequence of records ``[length u32 LE][message]`` (1..MAX_BATCH).
One ZeroMQ frame for the lot: pyzmq's per-frame cost (~1.7 us per message sent and received as
a frame of a multipart message, ~0.2 us packed) is most of what a Python process pays per message.

Sending never blocks (``zmq.NOBLOCK``): a full queue or an absent peer drops the message and
counts it, like a UDP datagram to a dead host; the protocol resends what matters. The one
exception is the node <-> service link, which is lossless (unbounded queue, same host): the
service must see the committed log without gaps (Aeron: an IPC publication).

Member links are DEALERs announcing a routing id (``node-<i>``) into ROUTERs, so a receiver knows
which connection a message came on (:func:`drain_routed`); clients' ingress and egress stay
PUSH -> PULL. Socket options (CURVE keys) come from clusterlab.core.runtime.security through a
``setup`` hook on :func:`bind` and :class:`Link`.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections import OrderedDict
from collections.abc import Callable
from typing import cast

import zmq
from clusterlab.core.consensus.context import Channel

HEADER = struct.Struct("<Bh")
HEADER_LENGTH = HEADER.size
# With recording on, member-to-member messages carry a message id after the header (the trace's
# ``msg_id``, the same on the sender's ``send`` row and the receiver's ``recv`` row).
ID_HEADER = struct.Struct("<Bhq")
ID_HEADER_LENGTH = ID_HEADER.size
NO_MEMBER = -1  # src of clients and the harness

CHANNEL_CODES: dict[Channel, int] = {
    Channel.CONSENSUS: 1,
    Channel.LOG: 2,
    Channel.CATCHUP: 3,
    Channel.ARCHIVE: 4,
    Channel.SERVICE: 5,
    Channel.INGRESS: 6,
    Channel.EGRESS: 7,
    Channel.CONTROL: 8,
}
CODE_CHANNELS: dict[int, Channel] = {code: ch for ch, code in CHANNEL_CODES.items()}
MEMBER_CHANNELS = (Channel.CONSENSUS, Channel.LOG, Channel.CATCHUP, Channel.ARCHIVE)

# Largest message a bound socket accepts (a LogBlock/ReplayBlock carries <= 64 KiB of log): bigger
# frames make ZeroMQ drop the connection instead of allocating whatever a stranger announces.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
PEER_SNDHWM = 10_000
INBOUND_RCVHWM = 10_000
EGRESS_SNDHWM = 10_000
EGRESS_CACHE_SIZE = 128
RECONNECT_IVL_MS = 10
# Zero-copy sends only above this: pyzmq frees a zero-copy buffer through its garbage-collector thread
# (a cross-thread wake-up per message), dearer than copying a log block of up to 64 KiB.
ZERO_COPY_BYTES = 256 * 1024
RECONNECT_IVL_MAX_MS = 200
# Flags as plain ints: pyzmq's are IntFlag members, and ``SNDMORE | flags`` inside send_multipart builds
# a new one per frame through the enum machinery (~0.5 us). Sending the two frames with Socket.send
# and these constants costs a third of send_multipart for our small messages.
_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE_NOBLOCK = int(zmq.SNDMORE | zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)

Logger = Callable[[str], None]
SocketSetup = Callable[[zmq.Socket], None]  # options set before bind/connect (CURVE keys: runtime.security)


def header(channel: Channel, src: int) -> bytes:
    return HEADER.pack(CHANNEL_CODES[channel], src)


def new_context() -> zmq.Context:
    """One I/O thread is plenty for a member's message rates."""
    ctx = zmq.Context(io_threads=1)
    ctx.setsockopt(zmq.LINGER, 0)
    return ctx


def _common(sock: zmq.Socket) -> zmq.Socket:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
    return sock


def bind(
    ctx: zmq.Context, kind: int, endpoint: str, *, rcvhwm: int = INBOUND_RCVHWM, setup: SocketSetup | None = None
) -> tuple[zmq.Socket, str]:
    """A bound socket and the endpoint it actually bound (a tcp ``:0`` / ``:*`` gets its OS port).

    Raises zmq.ZMQError when the address is taken or invalid."""
    sock = _common(ctx.socket(kind))
    sock.setsockopt(zmq.RCVHWM, rcvhwm)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    if setup is not None:
        setup(sock)
    address = endpoint[:-2] + ":*" if endpoint.startswith("tcp://") and endpoint.endswith(":0") else endpoint
    try:
        sock.bind(address)
    except zmq.ZMQError:
        sock.close(0)
        raise
    bound = sock.getsockopt_string(zmq.LAST_ENDPOINT) if address.startswith("tcp://") else endpoint
    return sock, bound


def connect_push(
    ctx: zmq.Context,
    endpoint: str,
    *,
    sndhwm: int,
    immediate: bool,
    routing_id: bytes | None = None,
    setup: SocketSetup | None = None,
) -> zmq.Socket:
    """A PUSH socket connected to ``endpoint``. ``immediate``: queue only on a live connection (a
    peer that is down drops messages instead of receiving a stale burst when it comes back).
    With a ``routing_id`` a DEALER announcing it instead, for a ROUTER that checks who sends."""
    sock = _common(ctx.socket(zmq.PUSH if routing_id is None else zmq.DEALER))
    sock.setsockopt(zmq.SNDHWM, sndhwm)
    if routing_id is not None:
        sock.setsockopt(zmq.ROUTING_ID, routing_id)
    if immediate:
        sock.setsockopt(zmq.IMMEDIATE, 1)
    if setup is not None:
        setup(sock)
    sock.connect(endpoint)
    return sock


def parse(frames: list[bytes], channel: Channel, allowed_src: Callable[[int], bool]) -> tuple[int, bytes] | str:
    """``(src, payload)`` of a well-framed message for ``channel``, or why it is not one."""
    if len(frames) != 2:
        return f"expected 2 frames (header, payload), got {len(frames)}"
    checked = _check_header(frames[0], channel, allowed_src)
    return checked if isinstance(checked, str) else (checked, frames[1])


MAX_BATCH = 1024  # messages in one batch
BATCH_FLAG = 0x80  # on the header's channel code: the payload frame packs several messages
_RECORD_LENGTH = struct.Struct("<I")


def pack_batch(payloads: list[bytes]) -> bytes:
    """The payload frame of a batch: each message as ``[length u32 LE][bytes]``."""
    pack = _RECORD_LENGTH.pack
    parts: list[bytes] = []
    for p in payloads:  # two parts each, joined once: a concatenation per record would copy each twice
        parts.append(pack(len(p)))
        parts.append(p)
    return b"".join(parts)


def batch_header(channel: Channel, src: int) -> bytes:
    """The header of a batch for ``channel`` (see :func:`pack_batch`)."""
    return HEADER.pack(CHANNEL_CODES[channel] | BATCH_FLAG, src)


def parse_batch(
    frames: list[bytes], channel: Channel, allowed_src: Callable[[int], bool]
) -> tuple[int, list[bytes]] | str:
    """``(src, messages)`` of a message on a batching channel — one message, or a batch of 1..MAX_BATCH
    (:func:`pack_batch`) — or why it is not one."""
    if len(frames) != 2:
        return f"expected 2 frames (header, payload), got {len(frames)}"
    head, data = frames
    batched = len(head) == HEADER_LENGTH and head[0] & BATCH_FLAG
    checked = _check_header(head, channel, allowed_src, strip=BATCH_FLAG if batched else 0)
    if isinstance(checked, str):
        return checked
    if not batched:
        return checked, [data]
    out: list[bytes] = []
    unpack = _RECORD_LENGTH.unpack_from
    offset, n = 0, len(data)
    while offset < n:
        if n - offset < 4:
            return f"batch record at offset {offset}: torn length ({n - offset} of 4 bytes)"
        (length,) = unpack(data, offset)
        end = offset + 4 + length
        if end > n:
            return f"batch record at offset {offset}: {length} bytes announced, {n - offset - 4} left"
        out.append(data[offset + 4 : end])
        offset = end
    if not 1 <= len(out) <= MAX_BATCH:
        return f"a batch holds 1 to {MAX_BATCH} messages, this one {len(out)}"
    return checked, out


def _check_header(head: bytes, channel: Channel, allowed_src: Callable[[int], bool], strip: int = 0) -> int | str:
    """The source named by a header frame for ``channel``, or why the header is wrong."""
    if len(head) == HEADER_LENGTH:
        code, src = HEADER.unpack(head)
        code &= ~strip
    elif len(head) == ID_HEADER_LENGTH:
        code, src, _msg_id = ID_HEADER.unpack(head)
    else:
        return f"header of {len(head)} bytes, expected {HEADER_LENGTH} or {ID_HEADER_LENGTH}"
    got = CODE_CHANNELS.get(code)
    if got is None:
        return f"unknown channel code {code}"
    if got is not channel:
        return f"channel {got} on the {channel} socket"
    if not allowed_src(src):
        return f"source {src} may not send on {channel}"
    return src


class Link:
    """A non-blocking PUSH to one endpoint; counts what it could not send."""

    __slots__ = ("dropped", "endpoint", "sent", "sock")

    def __init__(
        self,
        ctx: zmq.Context,
        endpoint: str,
        *,
        sndhwm: int = PEER_SNDHWM,
        immediate: bool = True,
        routing_id: bytes | None = None,
        setup: SocketSetup | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.sock = connect_push(ctx, endpoint, sndhwm=sndhwm, immediate=immediate, routing_id=routing_id, setup=setup)
        self.sent = 0
        self.dropped = 0

    def send(self, head: bytes, payload: bytes) -> bool:
        sock = self.sock
        try:
            # As send_multipart: once the first frame is taken the second goes too (ZeroMQ counts its
            # high-water mark in whole messages); a pipe closing in between fails the second, caught here.
            sock.send(head, _SNDMORE_NOBLOCK)
            sock.send(payload, _NOBLOCK, copy=len(payload) < ZERO_COPY_BYTES)
        except zmq.Again:
            self.dropped += 1
            return False
        self.sent += 1
        return True

    def send_batch(self, head: bytes, payloads: list[bytes]) -> bool:
        """Several payloads as one message (``head`` from :func:`batch_header`, :func:`pack_batch`);
        the batching channels only."""
        packed = pack_batch(payloads)
        sock = self.sock
        try:
            sock.send(head, _SNDMORE_NOBLOCK)
            sock.send(packed, _NOBLOCK, copy=len(packed) < ZERO_COPY_BYTES)
        except zmq.Again:
            self.dropped += len(payloads)
            return False
        self.sent += len(payloads)
        return True

    def close(self, linger_ms: int = 0) -> None:
        self.sock.close(linger_ms)


class EgressCache:
    """Lazily connected PUSH sockets to clients' response channels, least recently used first out.

    A client binds its response channel and puts its address in SessionConnectRequest; the node
    (session events) and the service process (replies) connect to it on first use."""

    def __init__(
        self, ctx: zmq.Context, log: Logger, capacity: int = EGRESS_CACHE_SIZE, setup: SocketSetup | None = None
    ) -> None:
        """``setup`` sets each link's options before it connects (a secured cluster's CURVE keys)."""
        self._ctx = ctx
        self._setup = setup
        self._log = log
        self._capacity = capacity
        self._links: OrderedDict[str, Link] = OrderedDict()
        self._head = header(Channel.EGRESS, NO_MEMBER)
        self._batch_head = batch_header(Channel.EGRESS, NO_MEMBER)
        self.sent = 0
        self.dropped = 0
        self.bad_channels = 0

    def send(self, response_channel: str, payload: bytes) -> bool:
        return self.send_batch(response_channel, [payload])

    def send_batch(self, response_channel: str, payloads: list[bytes]) -> bool:
        """Egress messages for one client, batched: at most MAX_BATCH per ZeroMQ message."""
        link = self._links.get(response_channel)
        if link is None:
            if not response_channel.startswith(("ipc://", "tcp://")):
                # A client's own address, from its connect request: bad input, not our error.
                self.bad_channels += 1
                self._log(f"egress: ignored response channel {response_channel!r:.80}: not ipc:// or tcp://")
                return False
            try:
                # Not "immediate": the first message (the connect answer) is sent right after
                # connect(), before the connection completes, and must wait for it.
                link = Link(self._ctx, response_channel, sndhwm=EGRESS_SNDHWM, immediate=False, setup=self._setup)
            except zmq.ZMQError as e:
                self.bad_channels += 1
                self._log(f"egress: ignored response channel {response_channel!r:.80}: {e}")
                return False
            self._links[response_channel] = link
            if len(self._links) > self._capacity:
                _, old = self._links.popitem(last=False)
                old.close()
        else:
            self._links.move_to_end(response_channel)
        ok = True
        for i in range(0, len(payloads), MAX_BATCH):
            chunk = payloads[i : i + MAX_BATCH]
            sent = link.send(self._head, chunk[0]) if len(chunk) == 1 else link.send_batch(self._batch_head, chunk)
            if sent:
                self.sent += len(chunk)
            else:
                self.dropped += len(chunk)
                ok = False
        return ok

    def close(self, linger_ms: int = 0) -> None:
        for link in self._links.values():
            link.close(linger_ms)
        self._links.clear()


def drain(sock: zmq.Socket, limit: int) -> list[list[bytes]]:
    """Up to ``limit`` messages already queued on ``sock``, without blocking. After the first message
    the socket's ZMQ_EVENTS says whether another is queued: most wake-ups carry one message, and a
    receive that fails costs pyzmq an exception, about twice a received message's CPU."""
    out = []
    recv, more = sock.recv, sock.getsockopt
    events = cast(Callable[[int], int], more)  # ZMQ_EVENTS is an int option
    try:
        for _ in range(limit):
            # recv_multipart, with int flags (see _NOBLOCK): a whole message is queued once its
            # first frame is, so only the first recv can raise Again.
            frames = [recv(_NOBLOCK)]
            while more(_RCVMORE):
                frames.append(recv(_NOBLOCK))
            out.append(frames)
            if len(out) == 1 and not events(_EVENTS) & _POLLIN:
                break
    except zmq.Again:
        pass
    return out


def drain_routed(sock: zmq.Socket, limit: int, *, user_ids: bool) -> list[tuple[bytes, str | None, list[bytes]]]:
    """Up to ``limit`` messages queued on a ROUTER, as ``(routing id, User-Id, frames)``; the ZAP
    User-Id (runtime.security) only with ``user_ids`` (it costs a zero-copy receive), else None."""
    out: list[tuple[bytes, str | None, list[bytes]]] = []
    try:
        if not user_ids:
            recv, more = sock.recv, sock.getsockopt
            events = cast(Callable[[int], int], more)  # ZMQ_EVENTS is an int option
            for _ in range(limit):
                routing_id = recv(_NOBLOCK)  # as in drain()
                frames = []
                while more(_RCVMORE):
                    frames.append(recv(_NOBLOCK))
                out.append((routing_id, None, frames))
                if len(out) == 1 and not events(_EVENTS) & _POLLIN:
                    break
        else:
            for _ in range(limit):
                parts = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                try:
                    user = parts[0].get("User-Id")
                except zmq.ZMQError:  # not authenticated by ZAP: never a member
                    user = ""
                out.append((parts[0].bytes, str(user), [p.bytes for p in parts[1:]]))
    except zmq.Again:
        pass
    return out


def msg_id_of(head: bytes) -> int | None:
    """The message id of a header frame that carries one (see ID_HEADER), else None."""
    return ID_HEADER.unpack(head)[2] if len(head) == ID_HEADER_LENGTH else None


def remove_ipc_files(*endpoints: str) -> None:
    """Unlink the socket files of ``ipc://`` endpoints this process bound (ZeroMQ leaves them), so a
    cleanly stopped member leaves no socket behind and tools can tell it is not running."""
    for endpoint in endpoints:
        if endpoint.startswith("ipc://"):
            with contextlib.suppress(OSError):
                os.unlink(endpoint[len("ipc://") :])
