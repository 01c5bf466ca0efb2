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

from clusterlab.core.codec import framewalk
from clusterlab.core.codec.errors import DecodeError

# The layout constants live with the compiled per-frame loop; MAX_FRAME_LENGTH is a sanity bound so a
# corrupt length field cannot ask for gigabytes.
from clusterlab.core.codec.framewalk import (
    FRAME_ALIGNMENT,
    FRAME_HEADER_LENGTH,
    FRAME_VERSION,
    HDR_TYPE_DATA,
    HDR_TYPE_PAD,
    MAX_FRAME_LENGTH,
    Frame,
)

FRAME_FLAGS_UNFRAGMENTED = 0xC0

_HEADER = struct.Struct("<iBBHqqIi")
_HEADER_PREFIX = struct.Struct("<iBBHqq")
_HEADER_TAIL = struct.Struct("<Ii")
_PADDING = bytes(FRAME_ALIGNMENT)


def align(length: int, alignment: int = FRAME_ALIGNMENT) -> int:
    """Round ``length`` up to a multiple of ``alignment`` (a power of two)."""
    return (length + alignment - 1) & ~(alignment - 1)


def framed_length(payload_length: int) -> int:
    """Bytes a payload of ``payload_length`` occupies in the log, header and padding included."""
    return align(FRAME_HEADER_LENGTH + payload_length)


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
    archive on start, the log receiver) keep every whole frame before it. This runs once per log
    entry on every member: the loop is :func:`clusterlab.core.codec.framewalk.scan_frames` when that
    module is compiled (mypyc, setup.py), else :func:`walk_frames_py`; a frame that fails a check is
    handed to :func:`unframe` for the precise error.
    """
    if type(buffer) is not bytes:
        buffer = bytes(buffer)  # one copy: slicing bytes is cheaper per frame than memoryview + bytes()
    if not _COMPILED:
        return walk_frames_py(buffer, base_position)
    frames, position, bad_offset = _scan_frames(buffer, base_position)
    return WalkResult(frames, position, None if bad_offset < 0 else _error_at(buffer, bad_offset, position))


def _error_at(buffer: bytes, offset: int, position: int) -> DecodeError:
    try:
        unframe(buffer, offset, expected_position=position)
    except DecodeError as e:
        return e
    raise AssertionError(f"walk_frames and unframe disagree at offset {offset}")  # pragma: no cover


_COMPILED = framewalk.COMPILED
_scan_frames = framewalk.scan_frames


def walk_frames_py(buffer: bytes | memoryview, base_position: int = 0) -> WalkResult:
    """:func:`walk_frames` in plain Python (struct unpack per header): used when
    :mod:`clusterlab.core.codec.framewalk` is not compiled. The checks are :func:`unframe`'s, inlined."""
    frames: list[Frame] = []
    append = frames.append
    unpack = _HEADER.unpack_from
    crc32 = zlib.crc32
    if type(buffer) is not bytes:
        buffer = bytes(buffer)
    n = len(buffer)
    offset = 0
    position = base_position
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
        return WalkResult(frames, position, _error_at(buffer, offset, position))
    return WalkResult(frames, position, None)


def iter_frames(buffer: bytes | memoryview, base_position: int = 0) -> Iterator[Frame]:
    """Strict version of :func:`walk_frames`: yields frames, raises DecodeError on a bad one."""
    result = walk_frames(buffer, base_position)
    yield from result.frames
    if result.error is not None:
        raise result.error
