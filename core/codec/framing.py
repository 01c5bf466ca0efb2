"""Log framing: how a log entry occupies bytes in the log stream, so a log position is a byte offset.

Aeron prefixes every log message with a 32-byte data frame header and pads it to 32 bytes; the
framed length defines log positions. We keep the size and alignment but choose our own header
fields: Aeron's term_offset/session_id/stream_id/term_id only make sense for term buffers, so we
store the entry's leadership term, its start position, and a CRC32 that lets the archive tell a
torn or bit-flipped tail from a good frame.

Frame header (little-endian, 32 bytes):

| offset | size | field |
|---|---|---|
| 0 | 4 | frame_length: int32, header + payload, unpadded |
| 4 | 1 | version: uint8 (= FRAME_VERSION) |
| 5 | 1 | flags: uint8 (BEGIN|END = 0xC0: every entry is one unfragmented frame) |
| 6 | 2 | type: uint16 (HDR_TYPE_DATA = 1, HDR_TYPE_PAD = 0) |
| 8 | 8 | leadership_term_id: int64 |
| 16 | 8 | position: int64, the log position at which this frame starts |
| 24 | 4 | checksum: uint32, CRC32 of header bytes 0..23 and the payload |
| 28 | 4 | reserved: int32 (= 0) |
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from clusterlab.core.codec.errors import DecodeError

FRAME_HEADER_LENGTH = 32
FRAME_ALIGNMENT = 32
FRAME_VERSION = 1
FRAME_FLAGS_UNFRAGMENTED = 0xC0
HDR_TYPE_PAD = 0
HDR_TYPE_DATA = 1
# Upper bound on one entry: a sanity check so a corrupt length field cannot ask for gigabytes.
MAX_FRAME_LENGTH = 16 * 1024 * 1024

_HEADER = struct.Struct("<iBBHqqIi")
_HEADER_PREFIX = struct.Struct("<iBBHqq")
_HEADER_TAIL = struct.Struct("<Ii")
_HEADER_ROUNDING = FRAME_HEADER_LENGTH + FRAME_ALIGNMENT - 1
_ALIGN_MASK = ~(FRAME_ALIGNMENT - 1)
_PADDING = bytes(FRAME_ALIGNMENT)


def align(length: int, alignment: int = FRAME_ALIGNMENT) -> int:
    """Round ``length`` up to a multiple of ``alignment`` (a power of two)."""
    return (length + alignment - 1) & ~(alignment - 1)


def framed_length(payload_length: int) -> int:
    """Bytes a payload of ``payload_length`` occupies in the log, header and padding included."""
    return align(FRAME_HEADER_LENGTH + payload_length)


class Frame:
    """One framed log entry as found in a buffer (a value: treat it as immutable).

    A plain slotted class rather than a frozen dataclass: a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``, and every log entry makes one of these on every member."""

    __slots__ = ("end_position", "frame_type", "leadership_term_id", "payload", "position")

    def __init__(self, position: int, leadership_term_id: int, frame_type: int, payload: bytes) -> None:
        self.position = position  # log position at which the frame starts
        self.leadership_term_id = leadership_term_id
        self.frame_type = frame_type
        self.payload = payload
        # The log position *after* this entry: what Aeron reports as the message's position.
        self.end_position = position + ((len(payload) + _HEADER_ROUNDING) & _ALIGN_MASK)

    @property
    def length(self) -> int:
        """Framed (aligned) length: how far the log position advances past this entry."""
        return self.end_position - self.position

    def _key(self) -> tuple[int, int, int, bytes]:
        return (self.position, self.leadership_term_id, self.frame_type, self.payload)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Frame:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Frame(position={self.position}, leadership_term_id={self.leadership_term_id}, "
            f"frame_type={self.frame_type}, payload={self.payload!r})"
        )


def _checksum(prefix: bytes, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(prefix)) & 0xFFFFFFFF


def frame(payload: bytes, position: int, leadership_term_id: int, frame_type: int = HDR_TYPE_DATA) -> bytes:
    """Frame ``payload`` (an encoded message) as a log entry starting at ``position``."""
    if position % FRAME_ALIGNMENT:
        raise ValueError(f"frame position {position} is not {FRAME_ALIGNMENT}-byte aligned")
    frame_length = FRAME_HEADER_LENGTH + len(payload)
    if frame_length > MAX_FRAME_LENGTH:
        raise ValueError(f"frame of {frame_length} bytes exceeds MAX_FRAME_LENGTH {MAX_FRAME_LENGTH}")
    prefix = _HEADER_PREFIX.pack(
        frame_length, FRAME_VERSION, FRAME_FLAGS_UNFRAGMENTED, frame_type, leadership_term_id, position
    )
    checksum = zlib.crc32(payload, zlib.crc32(prefix)) & 0xFFFFFFFF
    padding = _PADDING[: -frame_length & (FRAME_ALIGNMENT - 1)]
    return b"".join((prefix, _HEADER_TAIL.pack(checksum, 0), payload, padding))


def unframe(buffer: bytes | memoryview, offset: int = 0, expected_position: int | None = None) -> Frame:
    """Decode the one frame at ``offset`` in ``buffer``; raises DecodeError if it is torn or corrupt."""
    available = len(buffer) - offset
    if available < FRAME_HEADER_LENGTH:
        raise DecodeError("Frame", f"torn header: {available} of {FRAME_HEADER_LENGTH} bytes at offset {offset}")
    frame_length, version, _flags, frame_type, term_id, position, checksum, _reserved = _HEADER.unpack_from(
        buffer, offset
    )
    if version != FRAME_VERSION:
        raise DecodeError("Frame", f"bad version {version} at offset {offset}")
    if frame_length < FRAME_HEADER_LENGTH or frame_length > MAX_FRAME_LENGTH:
        raise DecodeError("Frame", f"bad frame_length {frame_length} at offset {offset}")
    if frame_type not in (HDR_TYPE_DATA, HDR_TYPE_PAD):
        raise DecodeError("Frame", f"bad type {frame_type} at offset {offset}")
    if available < align(frame_length):
        raise DecodeError("Frame", f"torn frame: {available} of {align(frame_length)} bytes at offset {offset}")
    payload = bytes(buffer[offset + FRAME_HEADER_LENGTH : offset + frame_length])
    prefix = bytes(buffer[offset : offset + 24])
    if _checksum(prefix, payload) != checksum:
        raise DecodeError("Frame", f"checksum mismatch at offset {offset} (position {position})")
    if expected_position is not None and position != expected_position:
        raise DecodeError("Frame", f"frame says position {position}, expected {expected_position}")
    return Frame(position, term_id, frame_type, payload)


@dataclass(frozen=True, slots=True)
class WalkResult:
    """Frames found by :func:`walk_frames`, and why the walk stopped early if it did."""

    frames: list[Frame]
    end_position: int  # position after the last whole, valid frame
    error: DecodeError | None  # set when trailing bytes were torn or corrupt


def walk_frames(buffer: bytes | memoryview, base_position: int = 0) -> WalkResult:
    """Walk a buffer of consecutive frames whose first starts at ``base_position``.

    Stops at the first torn or corrupt frame and reports it instead of raising: callers (the
    archive on start, the log receiver) keep every whole frame before it. The checks are
    :func:`unframe`'s, inlined (this runs once per log entry on every member); a frame that fails
    one is handed to :func:`unframe` for the precise error.
    """
    frames: list[Frame] = []
    append = frames.append
    unpack = _HEADER.unpack_from
    crc32 = zlib.crc32
    if type(buffer) is not bytes:
        buffer = bytes(buffer)  # one copy: slicing bytes is cheaper per frame than memoryview + bytes()
    n = len(buffer)
    offset = 0
    position = base_position
    error: DecodeError | None = None
    while offset < n:
        if n - offset >= FRAME_HEADER_LENGTH:
            frame_length, version, _flags, frame_type, term_id, frame_position, checksum, _r = unpack(buffer, offset)
            end = offset + ((frame_length + FRAME_ALIGNMENT - 1) & ~(FRAME_ALIGNMENT - 1))
            if (
                version == FRAME_VERSION
                and FRAME_HEADER_LENGTH <= frame_length <= MAX_FRAME_LENGTH
                and frame_type in (HDR_TYPE_DATA, HDR_TYPE_PAD)
                and end <= n
                and frame_position == position
            ):
                payload = buffer[offset + FRAME_HEADER_LENGTH : offset + frame_length]
                if crc32(payload, crc32(buffer[offset : offset + 24])) == checksum:  # crc32 is unsigned
                    append(Frame(position, term_id, frame_type, payload))
                    position += end - offset
                    offset = end
                    continue
        try:
            unframe(buffer, offset, expected_position=position)
            raise AssertionError(f"walk_frames and unframe disagree at offset {offset}")  # pragma: no cover
        except DecodeError as e:
            error = e
        break
    return WalkResult(frames, position, error)


def iter_frames(buffer: bytes | memoryview, base_position: int = 0) -> Iterator[Frame]:
    """Strict version of :func:`walk_frames`: yields frames, raises DecodeError on a bad one."""
    result = walk_frames(buffer, base_position)
    yield from result.frames
    if result.error is not None:
        raise result.error
