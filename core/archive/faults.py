"""Disk faults for tests and chaos nemeses: damage a *closed* member's log recording the way a crash, a
torn write or a bad disk would, so the next open has something to repair (or to refuse).

Every helper takes either the member directory (the log is then ``<member_dir>/archive/log``) or the
segment directory itself, and returns the stream position that matters for the assertion that follows.
Randomness comes only from the ``random.Random`` passed in, so a chaos schedule replays from its seed.
"""

from __future__ import annotations

import random
from pathlib import Path

from clusterlab.core.archive import layout
from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.recording import list_segments
from clusterlab.core.codec.framing import FRAME_HEADER_LENGTH, Frame, walk_frames

# Header bytes the frame CRC protects, plus the CRC itself: flipping any bit here (or in the payload) is
# detectable. The padding and the reserved field are not covered, so a flip there would go unnoticed.
_CHECKED_HEADER_BYTES = 28


def resolve_log_dir(path: Path | str) -> Path:
    """The segment directory for ``path``: ``path`` itself if it holds segments, else its archive log dir."""
    path = Path(path)
    if list_segments(path):
        return path
    return layout.log_dir(path)


def stream_end(path: Path | str) -> int:
    """The position just after the last byte on disk (whole frames or not)."""
    segments = list_segments(resolve_log_dir(path))
    if not segments:
        return 0
    base, seg = segments[-1]
    return base + seg.stat().st_size


def truncate_at(path: Path | str, position: int) -> int:
    """Cut the log stream at byte ``position`` (mid-frame makes a torn tail). Returns the new end."""
    segments = list_segments(resolve_log_dir(path))
    if not segments:
        return 0
    position = max(position, segments[0][0])
    for i, (base, seg) in enumerate(segments):
        size = seg.stat().st_size
        if base >= position and i > 0:
            seg.unlink()
        elif base + size > position:
            with open(seg, "r+b") as f:
                f.truncate(position - base)
    return stream_end(path)


def truncate_tail(path: Path | str, n_bytes: int) -> int:
    """Remove the last ``n_bytes`` of the log stream (across segments if need be). Returns the new end."""
    if n_bytes < 0:
        raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
    return truncate_at(path, stream_end(path) - n_bytes)


def last_frame(path: Path | str) -> tuple[Path, int, Frame]:
    """(segment file, segment base, frame) of the last whole, valid frame on disk."""
    segments = list_segments(resolve_log_dir(path))
    for base, seg in reversed(segments):
        frames = walk_frames(seg.read_bytes(), base).frames
        if frames:
            return seg, base, frames[-1]
    raise ArchiveError(f"no frames in {resolve_log_dir(path)}")


def tear_last_frame(path: Path | str) -> int:
    """Cut the last frame in half, as a crash in the middle of writing it would. Returns the frame's start
    position, which is where a repaired recording will stop."""
    _seg, _base, f = last_frame(path)
    truncate_at(path, f.position + f.length // 2)
    return f.position


def flip_bits_in_tail(path: Path | str, rng: random.Random, count: int = 1) -> int:
    """Flip ``count`` distinct bits in the CRC-protected bytes of the last frame (header or payload).
    Returns the frame's start position, which is where a repaired recording will stop."""
    seg, base, f = last_frame(path)
    payload_length = len(f.payload)
    n_bits = (_CHECKED_HEADER_BYTES + payload_length) * 8
    if not 1 <= count <= n_bits:
        raise ValueError(f"count must be in [1, {n_bits}], got {count}")
    data = bytearray(seg.read_bytes())
    frame_offset = f.position - base
    for bit in rng.sample(range(n_bits), count):
        byte = bit // 8
        # Skip the unprotected reserved field: bytes 0..27 are header, then the payload at offset 32.
        file_byte = frame_offset + (
            byte if byte < _CHECKED_HEADER_BYTES else FRAME_HEADER_LENGTH + byte - _CHECKED_HEADER_BYTES
        )
        data[file_byte] ^= 1 << (bit % 8)
    seg.write_bytes(bytes(data))
    return f.position


def append_garbage(path: Path | str, garbage: bytes) -> int:
    """Append raw bytes after the last segment's data (a half-written block, a stray write).
    Returns the position where the garbage starts (the last whole frame's end)."""
    segments = list_segments(resolve_log_dir(path))
    if not segments:
        raise ArchiveError(f"no segments in {resolve_log_dir(path)}")
    base, seg = segments[-1]
    start = base + seg.stat().st_size
    with open(seg, "ab") as fh:
        fh.write(garbage)
    return start


def flip_bits_in_file(file: Path | str, rng: random.Random, count: int = 1, *, skip: int = 0) -> list[int]:
    """Flip ``count`` distinct bits in ``file`` at or after byte ``skip`` (snapshots, catalogue, node state).
    Returns the byte offsets touched. Note a flip in a frame's padding is harmless and goes unnoticed."""
    file = Path(file)
    data = bytearray(file.read_bytes())
    n_bits = (len(data) - skip) * 8
    if not 1 <= count <= n_bits:
        raise ValueError(f"count must be in [1, {n_bits}], got {count}")
    offsets = []
    for bit in rng.sample(range(n_bits), count):
        data[skip + bit // 8] ^= 1 << (bit % 8)
        offsets.append(skip + bit // 8)
    file.write_bytes(bytes(data))
    return offsets
