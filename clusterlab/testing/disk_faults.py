"""Disk faults for tests and chaos nemeses: damage a *closed* member's log recording the way a crash, a
torn write or a bad disk would, so the next open has something to repair (or to refuse).

Every helper works through a Storage (core/archive/storage.py): the member's MemoryStorage in the
simulator, a FileStorage opened on the stopped member's directory for real processes. The storage's
root is either the member directory (the log is then ``archive/log``) or the segment directory itself.
Each returns the stream position that matters for the assertion that follows. Randomness comes only
from the ``random.Random`` passed in, so a chaos schedule replays from its seed. Faults on a *running*
member (ENOSPC, EIO, torn writes) are rules on a FaultyStorage instead.
"""

from __future__ import annotations

import random

from clusterlab.core.archive import layout
from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.layout import service_snapshot_store_dirs
from clusterlab.core.archive.recording import list_segments
from clusterlab.core.archive.snapshots import SNAPSHOT_SUFFIX
from clusterlab.core.archive.storage import MemoryStorage, Storage, join
from clusterlab.core.codec.framing import FRAME_HEADER_LENGTH, Frame, walk_frames
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.testing.faulty_storage import unwrap

# Header bytes the frame CRC protects, plus the CRC itself: flipping any bit here (or in the payload) is
# detectable. The padding and the reserved field are not covered, so a flip there would go unnoticed.
_CHECKED_HEADER_BYTES = 28


def resolve_log_dir(storage: Storage) -> str:
    """The segment directory in ``storage``: its root if that holds segments, else ``archive/log``."""
    if list_segments(storage, ""):
        return ""
    return layout.LOG_DIR


def _truncate_file(storage: Storage, path: str, length: int) -> None:
    f = storage.open(path, create=False)
    try:
        f.truncate(length)
    finally:
        f.close()


def stream_end(storage: Storage) -> int:
    """The position just after the last byte stored (whole frames or not)."""
    segments = list_segments(storage, resolve_log_dir(storage))
    if not segments:
        return 0
    base, seg = segments[-1]
    return base + storage.size(seg)


def truncate_at(storage: Storage, position: int) -> int:
    """Cut the log stream at byte ``position`` (mid-frame makes a torn tail). Returns the new end."""
    segments = list_segments(storage, resolve_log_dir(storage))
    if not segments:
        return 0
    position = max(position, segments[0][0])
    for i, (base, seg) in enumerate(segments):
        size = storage.size(seg)
        if base >= position and i > 0:
            storage.remove(seg)
        elif base + size > position:
            _truncate_file(storage, seg, position - base)
    return stream_end(storage)


def truncate_tail(storage: Storage, n_bytes: int) -> int:
    """Remove the last ``n_bytes`` of the log stream (across segments if need be). Returns the new end."""
    if n_bytes < 0:
        raise ValueError(f"n_bytes must be >= 0, got {n_bytes}")
    return truncate_at(storage, stream_end(storage) - n_bytes)


def lose_unflushed_tail(storage: Storage, rng: random.Random, max_bytes: int = 4096) -> int:
    """A power loss on the log's last segment: lose a random tail of 1..``max_bytes``-1 bytes, but
    never bytes that were synced (on a MemoryStorage the synced prefix is known; a FileStorage of a
    stopped member cannot tell, so any tail bytes may go). Returns the new end of the stream."""
    segments = list_segments(storage, resolve_log_dir(storage))
    if not segments:
        return 0
    base, seg = segments[-1]
    size = storage.size(seg)
    inner = unwrap(storage)
    floor = inner.unsynced_floor(seg) if isinstance(inner, MemoryStorage) else 0
    keep = max(floor, size - rng.randrange(1, max_bytes))
    return truncate_at(storage, base + min(keep, size))


def last_frame(storage: Storage) -> tuple[str, int, Frame]:
    """(segment storage path, segment base, frame) of the last whole, valid frame stored."""
    segments = list_segments(storage, resolve_log_dir(storage))
    for base, seg in reversed(segments):
        frames = walk_frames(storage.read_file(seg), base).frames
        if frames:
            return seg, base, frames[-1]
    raise ArchiveError(f"no frames in {storage.describe(resolve_log_dir(storage))}")


def tear_last_frame(storage: Storage) -> int:
    """Cut the last frame in half, as a crash in the middle of writing it would. Returns the frame's start
    position, which is where a repaired recording will stop."""
    _seg, _base, f = last_frame(storage)
    truncate_at(storage, f.position + f.length // 2)
    return f.position


def flip_bits_in_tail(storage: Storage, rng: random.Random, count: int = 1) -> int:
    """Flip ``count`` distinct bits in the CRC-protected bytes of the last frame (header or payload).
    Returns the frame's start position, which is where a repaired recording will stop."""
    seg, base, f = last_frame(storage)
    payload_length = len(f.payload)
    n_bits = (_CHECKED_HEADER_BYTES + payload_length) * 8
    if not 1 <= count <= n_bits:
        raise ValueError(f"count must be in [1, {n_bits}], got {count}")
    data = bytearray(storage.read_file(seg))
    frame_offset = f.position - base
    for bit in rng.sample(range(n_bits), count):
        byte = bit // 8
        # Skip the unprotected reserved field: bytes 0..27 are header, then the payload at offset 32.
        file_byte = frame_offset + (
            byte if byte < _CHECKED_HEADER_BYTES else FRAME_HEADER_LENGTH + byte - _CHECKED_HEADER_BYTES
        )
        data[file_byte] ^= 1 << (bit % 8)
    _overwrite(storage, seg, bytes(data))
    return f.position


def _overwrite(storage: Storage, path: str, data: bytes) -> None:
    f = storage.open(path, create=False)
    try:
        f.write(0, data)
        f.truncate(len(data))
    finally:
        f.close()


def append_garbage(storage: Storage, garbage: bytes) -> int:
    """Append raw bytes after the last segment's data (a half-written block, a stray write).
    Returns the position where the garbage starts (the last whole frame's end)."""
    segments = list_segments(storage, resolve_log_dir(storage))
    if not segments:
        raise ArchiveError(f"no segments in {storage.describe(resolve_log_dir(storage))}")
    base, seg = segments[-1]
    size = storage.size(seg)
    f = storage.open(seg, create=False)
    try:
        f.write(size, garbage)
    finally:
        f.close()
    return base + size


def flip_bits_in_file(storage: Storage, path: str, rng: random.Random, count: int = 1, *, skip: int = 0) -> list[int]:
    """Flip ``count`` distinct bits in the file ``path`` at or after byte ``skip`` (snapshots, catalogue,
    node state). Returns the byte offsets touched. Note a flip in a frame's padding goes unnoticed."""
    data = bytearray(storage.read_file(path))
    n_bits = (len(data) - skip) * 8
    if not 1 <= count <= n_bits:
        raise ValueError(f"count must be in [1, {n_bits}], got {count}")
    offsets = []
    for bit in rng.sample(range(n_bits), count):
        data[skip + bit // 8] ^= 1 << (bit % 8)
        offsets.append(skip + bit // 8)
    _overwrite(storage, path, bytes(data))
    return offsets


def corrupt_latest_service_snapshot(storage: Storage, rng: random.Random, service_id: int = 0) -> int | None:
    """Make service ``service_id``'s latest snapshot (by the recording log) unloadable, as a bad disk under
    its file would: flip one bit in the payload of its first record with one (the frame CRC then fails),
    or cut its last byte when no record has a payload (its length no longer matches the catalogue).
    Returns the snapshot's recording id (None: the service has no snapshot)."""
    with RecordingLog.open(storage) as recording_log:
        entry = recording_log.latest_snapshot(service_id)
    if entry is None:
        return None
    path = join(service_snapshot_store_dirs(service_id)[1], f"{entry.recording_id:016d}{SNAPSHOT_SUFFIX}")
    data = bytearray(storage.read_file(path))
    frame = next((f for f in walk_frames(bytes(data), 0).frames if f.payload), None)
    if frame is None:
        _truncate_file(storage, path, max(0, len(data) - 1))
        return entry.recording_id
    bit = rng.randrange(len(frame.payload) * 8)
    data[frame.position + FRAME_HEADER_LENGTH + bit // 8] ^= 1 << (bit % 8)
    _overwrite(storage, path, bytes(data))
    return entry.recording_id
