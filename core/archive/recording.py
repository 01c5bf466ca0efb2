"""The member's log recording: framed log entries in segment files, addressed by log position.

Aeron's Archive records the log publication into segment files named ``<recordingId>-<basePosition>.rec``;
we keep that shape with our own frames (core/codec/framing.py). A log position is a byte offset in the
*log stream*, so every segment is named by the stream position of its first byte
(``0000000000000000.seg``, ``0000000016777184.seg``, ...) and holds only whole frames: a frame that does not
fit in the current segment starts the next one. A position therefore maps to (segment, file offset) by a
bisect on segment bases, and truncating the log to a frame boundary is "delete later segments, cut one file".

Tail cache: the frames this store appended itself (validated on the way in, or framed here) are also
kept in memory, the last ``TAIL_CACHE_BYTES`` (32 MiB) or so: the appended blocks as they came (never
copied, dropped oldest first) with their Frame objects. The leader reads its
own tail once per follower, once to consume and once for its service; a follower consumes and
forwards what it just received. Those reads are served from memory, without a second CRC pass;
anything older, or after a truncate or purge, is read (and checked) from the files as before.

Durability: every file operation goes through the member's Storage (core/archive/storage.py). Writes go
straight to the OS (no Python buffer), so a killed process loses nothing it appended; ``sync`` (fsync)
happens only with ``file_sync=True`` (Aeron's file sync level 0 by default:
survives a process crash, not a power loss). On open the last segment is checked frame by frame; a torn
or corrupt tail (a crash mid-write, a chaos fault) is cut back to the last whole frame and reported as a
:class:`TailRepair`, never raised. Damage anywhere else cannot be repaired silently and raises ArchiveError.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import re
import struct
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.storage import Storage, StorageFile, join
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.framing import (
    FRAME_ALIGNMENT,
    FRAME_HEADER_LENGTH,
    HDR_TYPE_DATA,
    MAX_FRAME_LENGTH,
    Frame,
    align,
    frame,
    unframe,
    walk_frames,
)

DEFAULT_SEGMENT_LENGTH = 16 * 1024 * 1024
SEGMENT_SUFFIX = ".seg"
_SEGMENT_NAME = re.compile(r"^(\d{16})\.seg$")
# frame_length (int32) at offset 0 and position (int64) at offset 16 of the frame header.
_FRAME_LENGTH = struct.Struct("<i")
_FRAME_POSITION = struct.Struct("<q")
_FRAME_POSITION_OFFSET = 16
# Older segments are read rarely (replay, catch-up); a few cached descriptors are enough.
_READ_FD_CACHE_SIZE = 4
# A frame's start and end positions, read in C for a block's frames (the tail cache's indexes).
_START_OF = operator.attrgetter("position")
_END_OF = operator.attrgetter("end_position")
# Kept at least (a leader far ahead of its followers still reads from memory); the oldest blocks are
# dropped each time TAIL_CACHE_TRIM_BYTES more are cached.
TAIL_CACHE_BYTES = 32 * 1024 * 1024
TAIL_CACHE_TRIM_BYTES = TAIL_CACHE_BYTES // 8


def segment_file_name(base_position: int) -> str:
    """The file name of the segment whose first byte is at log position ``base_position``."""
    return f"{base_position:016d}{SEGMENT_SUFFIX}"


def list_segments(storage: Storage, directory: str = "") -> list[tuple[int, str]]:
    """(base position, storage path) of every segment file in ``directory``, in position order."""
    found: list[tuple[int, str]] = []
    for name in storage.list_dir(directory):
        m = _SEGMENT_NAME.match(name)
        if m:
            found.append((int(m.group(1)), join(directory, name)))
    found.sort()
    return found


def _noop_log(line: str) -> None:
    """Default log sink: drop the line."""


@dataclass(frozen=True, slots=True)
class TailRepair:
    """What open() cut off a torn or corrupt tail: the bytes on disk ended at ``from_position`` and the
    recording now stops at ``to_position``, the end of the last whole, valid frame."""

    recording_id: int
    from_position: int
    to_position: int
    reason: str

    def describe(self) -> str:
        return (
            f"recording {self.recording_id}: tail repaired {self.from_position} -> {self.to_position} "
            f"({self.from_position - self.to_position} bytes dropped): {self.reason}"
        )


@dataclass(slots=True)
class _Segment:
    base_position: int
    path: str  # storage path
    length: int  # bytes in the file; always a run of whole frames

    @property
    def end_position(self) -> int:
        return self.base_position + self.length


class RecordingStore:
    """One recording of framed log entries in segment files; see the module docstring.

    Positions in every argument and result are log positions. Use :meth:`open` to create one."""

    def __init__(
        self,
        storage: Storage,
        directory: str,
        recording_id: int,
        segments: list[_Segment],
        *,
        segment_length: int,
        file_sync: bool,
        log: Callable[[str], None],
        repair: TailRepair | None,
    ) -> None:
        self.storage = storage
        self.directory = directory
        self.recording_id = recording_id
        self.segment_length = segment_length
        self.file_sync = file_sync
        self.repair = repair
        self._log = log
        self._segments = segments
        self._bases = [s.base_position for s in segments]
        self._active_fd: StorageFile | None = None  # the last segment, open for writing
        self._read_fds: OrderedDict[int, StorageFile] = OrderedDict()  # base position -> older segment
        self._closed = False
        # The stop position, kept current by every write and truncate (read several times per append).
        self._stop = segments[-1].end_position if segments else 0
        if segments:
            self._active_fd = storage.open(segments[-1].path, create=False)
        self._clear_tail_cache()

    # ------------------------------------------------------------------ open / close

    @classmethod
    def open(
        cls,
        storage: Storage,
        directory: str = "",
        recording_id: int = 0,
        *,
        segment_length: int = DEFAULT_SEGMENT_LENGTH,
        file_sync: bool = False,
        log: Callable[[str], None] | None = None,
        repair_tail: bool = True,
    ) -> RecordingStore:
        """Open (creating if needed) the recording in ``storage``'s ``directory``, repairing a torn tail.

        Raises ArchiveError if a segment other than the last is damaged (a gap, missing or extra bytes)."""
        if segment_length < FRAME_ALIGNMENT or segment_length % FRAME_ALIGNMENT:
            raise ArchiveError(f"segment_length {segment_length} must be a positive multiple of {FRAME_ALIGNMENT}")
        log = log or _noop_log
        storage.make_dirs(directory)
        segments = [_Segment(base, path, storage.size(path)) for base, path in list_segments(storage, directory)]
        cls._drop_empty_tail_segments(storage, segments, log)
        cls._check_contiguous(storage, segments)
        repair = cls._repair_tail(storage, recording_id, segments, log) if repair_tail else None
        return cls(
            storage,
            directory,
            recording_id,
            segments,
            segment_length=segment_length,
            file_sync=file_sync,
            log=log,
            repair=repair,
        )

    @staticmethod
    def _drop_empty_tail_segments(storage: Storage, segments: list[_Segment], log: Callable[[str], None]) -> None:
        # A crash right after creating a segment leaves it empty; it carries no data, and dropping it keeps
        # "the last segment" equal to "the segment holding the tail frames" for the repair scan.
        while len(segments) > 1 and segments[-1].length == 0:
            empty = segments.pop()
            log(f"archive: removing empty trailing segment {storage.describe(empty.path)}")
            storage.remove(empty.path)

    @staticmethod
    def _check_contiguous(storage: Storage, segments: list[_Segment]) -> None:
        for seg, nxt in itertools.pairwise(segments):
            if seg.end_position != nxt.base_position:
                expected = nxt.base_position - seg.base_position
                what = "extra bytes" if seg.length > expected else "missing bytes"
                raise ArchiveError(
                    f"corrupt segment {storage.describe(seg.path)}: {what} at offset {min(seg.length, expected)} "
                    f"(holds {seg.length} bytes, next segment {nxt.path.rsplit('/', 1)[-1]} starts at position "
                    f"{nxt.base_position}); a segment that is not the last cannot be repaired automatically"
                )

    @staticmethod
    def _repair_tail(
        storage: Storage, recording_id: int, segments: list[_Segment], log: Callable[[str], None]
    ) -> TailRepair | None:
        """Walk the last segment; cut a torn/corrupt tail back to the last whole frame."""
        if not segments:
            return None
        original_end = segments[-1].end_position
        reasons: list[str] = []
        while True:
            seg = segments[-1]
            data = storage.read_file(seg.path)
            result = walk_frames(data, seg.base_position)
            if result.error is None and result.end_position == seg.end_position:
                break
            reasons.append(str(result.error) if result.error is not None else "trailing bytes")
            keep = result.end_position - seg.base_position
            log(
                f"archive: recording {recording_id}: torn or corrupt tail in {storage.describe(seg.path)} at offset "
                f"{keep} (position {result.end_position}): {reasons[-1]}; truncating {seg.length} -> {keep} bytes"
            )
            f = storage.open(seg.path, create=False)
            try:
                f.truncate(keep)
            finally:
                f.close()
            seg.length = keep
            if keep == 0 and len(segments) > 1:
                # The whole segment was bad: drop it, and check the new tail too.
                segments.pop()
                storage.remove(seg.path)
                continue
            break
        if not reasons:
            return None
        repair = TailRepair(recording_id, original_end, segments[-1].end_position, "; ".join(reasons))
        log(f"archive: {repair.describe()}")
        return repair

    def close(self) -> None:
        """Release file descriptors. Appended data is already in the OS; fsync only with file_sync."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._close_files()

    def _close_files(self) -> None:
        self._closed = True
        if self._active_fd is not None:
            self._active_fd.close()
            self._active_fd = None
        for fd in self._read_fds.values():
            fd.close()
        self._read_fds.clear()

    def __enter__(self) -> RecordingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"RecordingStore(recording_id={self.recording_id}, dir={self.storage.describe(self.directory)!r}, "
            f"start={self.start_position}, stop={self.stop_position}, segments={len(self._segments)})"
        )

    # ------------------------------------------------------------------ positions

    @property
    def start_position(self) -> int:
        """Position of the first byte still recorded (0 unless segments were purged or the recording was
        started later with :meth:`start_at`)."""
        return self._segments[0].base_position if self._segments else self._stop

    @property
    def stop_position(self) -> int:
        """The append position: the position after the last whole frame."""
        return self._stop

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ append

    def start_at(self, position: int) -> None:
        """Begin an empty recording at ``position`` instead of 0 (a ClusterBackup whose log starts at a
        snapshot): the first append creates the first segment there. ArchiveError unless it is empty."""
        self._check_open()
        if self._segments or position < 0:
            raise ArchiveError(f"recording {self.recording_id}: cannot start at {position}: not an empty recording")
        self._stop = position
        self._clear_tail_cache()

    def append(self, framed: bytes, start_position: int) -> int:
        """Append a block of whole frames whose first frame starts at ``start_position``.

        ``start_position`` must equal :attr:`stop_position` and every frame must be valid (CRC, position),
        otherwise ArchiveError and nothing is appended. Returns the new stop position."""
        self._check_open()
        stop = self._stop
        if start_position != stop:
            raise ArchiveError(f"recording {self.recording_id}: append at {start_position} but stop position is {stop}")
        if not framed:
            return stop
        # One validating pass; its frames give the split points if the block crosses a segment boundary.
        result = walk_frames(framed, start_position)
        if result.error is not None or result.end_position != start_position + len(framed):
            reason = str(result.error) if result.error is not None else "trailing bytes"
            raise ArchiveError(
                f"recording {self.recording_id}: rejected block at {start_position} "
                f"({len(framed)} bytes): bad frame at position {result.end_position}: {reason}"
            )
        self._write(framed, result.frames)
        self._cache_append(framed, result.frames)
        return self._stop

    def append_walked(self, framed: bytes, start_position: int, frames: list[Frame]) -> int:
        """Append a block the caller already validated with ``walk_frames``: ``frames`` are its whole frames.

        Saves the second CRC pass of :meth:`append` on the follower's hot path; the block must still
        start at the stop position and consist of exactly those frames (else ArchiveError)."""
        self._check_open()
        stop = self._stop
        if start_position != stop or not frames or frames[0].position != start_position:
            raise ArchiveError(f"recording {self.recording_id}: append at {start_position} but stop position is {stop}")
        if frames[-1].end_position != start_position + len(framed):
            raise ArchiveError(
                f"recording {self.recording_id}: block at {start_position} has {len(framed)} bytes but its frames "
                f"end at {frames[-1].end_position}"
            )
        self._write(framed, frames)
        self._cache_append(framed, frames)
        return self._stop

    def append_entry(self, payload: bytes, leadership_term_id: int) -> int:
        """Frame ``payload`` at the stop position and append it; returns the position after it."""
        return self.append_entries((payload,), leadership_term_id)

    def append_entries(self, payloads: Sequence[bytes], leadership_term_id: int) -> int:
        """Frame each payload in turn from the stop position and append them with one write; returns
        the position after the last (the leader's batched ingress)."""
        if self._closed:
            self._check_open()
        position = start = self._stop
        if len(payloads) == 1:
            # One entry (the common case): no join, no list walk.
            payload = payloads[0]
            data = frame(payload, position, leadership_term_id)
            end = position + len(data)
            f = Frame(position, leadership_term_id, HDR_TYPE_DATA, payload)
            self._write(data, (f,))
            self._cache_append_one(data, f, end)
            return end
        chunks: list[bytes] = []
        frames: list[Frame] = []
        for payload in payloads:
            data = frame(payload, position, leadership_term_id)
            f = Frame(position, leadership_term_id, HDR_TYPE_DATA, payload)
            frames.append(f)
            chunks.append(data)
            position = f.end_position
        if not chunks:
            return start
        block = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._write(block, frames)
        self._cache_append(block, frames)
        return self._stop

    # ------------------------------------------------------------------ tail cache

    def _clear_tail_cache(self) -> None:
        # The appended blocks as they came (bytes, never copied), contiguous from _cache_base, with
        # the log position of each block's first byte; and each cached frame with its start and end.
        self._cache_chunks: list[bytes] = []
        self._cache_chunk_starts: list[int] = []
        self._cache_bytes = 0
        self._cache_base = self._stop
        self._cache_frames: list[Frame] = []
        self._cache_starts: list[int] = []
        self._cache_ends: list[int] = []

    def _cache_append(self, data: bytes, frames: Sequence[Frame]) -> None:
        if type(data) is not bytes:
            data = bytes(data)  # a caller's buffer may change; the cache keeps an immutable copy
        if self._cache_base + self._cache_bytes != frames[0].position:
            self._clear_tail_cache()  # not contiguous with what is cached (cannot happen: appends are at stop)
            self._cache_base = frames[0].position
        self._cache_chunks.append(data)
        self._cache_chunk_starts.append(frames[0].position)
        self._cache_bytes += len(data)
        self._cache_frames += frames
        self._cache_starts += map(_START_OF, frames)
        self._cache_ends += map(_END_OF, frames)
        if self._cache_bytes > TAIL_CACHE_BYTES + TAIL_CACHE_TRIM_BYTES:
            self._trim_tail_cache()

    def _cache_append_one(self, data: bytes, f: Frame, end_position: int) -> None:
        """:meth:`_cache_append` of one frame ending at ``end_position`` (the leader's single offer)."""
        position = f.position
        size = self._cache_bytes
        if self._cache_base + size != position or size + len(data) > TAIL_CACHE_BYTES + TAIL_CACHE_TRIM_BYTES:
            self._cache_append(data, (f,))
            return
        self._cache_chunks.append(data)
        self._cache_chunk_starts.append(position)
        self._cache_bytes = size + len(data)
        self._cache_frames.append(f)
        self._cache_starts.append(position)
        self._cache_ends.append(end_position)

    def _trim_tail_cache(self) -> None:
        """Drop the oldest whole blocks, keeping at least ``TAIL_CACHE_BYTES``. It runs every
        ``TAIL_CACHE_TRIM_BYTES`` appended, so each trim frees a small part of the cache's frames (one
        large trim would free hundreds of thousands at once, a pause of several milliseconds) and no
        byte is copied (the blocks are kept as they came)."""
        chunk_starts = self._cache_chunk_starts
        keep_from = self._cache_base + self._cache_bytes - TAIL_CACHE_BYTES
        k = bisect.bisect_right(chunk_starts, keep_from) - 1  # the block that holds keep_from stays
        if k <= 0:
            return
        new_base = chunk_starts[k]
        del self._cache_chunks[:k]
        del chunk_starts[:k]
        i = bisect.bisect_left(self._cache_starts, new_base)
        del self._cache_frames[:i]
        del self._cache_starts[:i]
        del self._cache_ends[:i]
        self._cache_bytes -= new_base - self._cache_base
        self._cache_base = new_base

    def _cached_bytes(self, start: int, end: int) -> bytes:
        """The cached bytes of ``[start, end)`` (frame boundaries in the cache): a block returned as it
        is, a part of one block sliced, a range across blocks joined."""
        chunk_starts = self._cache_chunk_starts
        chunks = self._cache_chunks
        c = bisect.bisect_right(chunk_starts, start) - 1
        chunk = chunks[c]
        base = chunk_starts[c]
        if end - base <= len(chunk):
            if start == base and end - base == len(chunk):
                return chunk
            return chunk[start - base : end - base]
        parts: list[bytes | memoryview] = [memoryview(chunk)[start - base :]]
        c += 1
        while end - chunk_starts[c] > len(chunks[c]):
            parts.append(chunks[c])
            c += 1
        last = chunks[c]
        parts.append(last if end - chunk_starts[c] == len(last) else memoryview(last)[: end - chunk_starts[c]])
        return b"".join(parts)

    def _cached(self, from_position: int, to_position: int, max_bytes: int | None) -> tuple[int, int] | None:
        """Indices ``[i, j)`` of the cached frames :meth:`read` would return, or None if the range is not
        (wholly) in the cache. Same rules as a read from the files."""
        starts = self._cache_starts
        if not starts or from_position < starts[0]:
            return None
        i = bisect.bisect_left(starts, from_position)
        if i == len(starts) or starts[i] != from_position:
            return None  # not a frame boundary we know: the file read says why
        ends = self._cache_ends
        to = min(to_position, self._stop)
        if ends[i] > to:
            return i, i
        limit = to if max_bytes is None else min(to, max(from_position + max_bytes, ends[i]))
        return i, bisect.bisect_right(ends, limit, lo=i)

    def _write(self, data: bytes, frames: Sequence[Frame]) -> None:
        """Write whole frames (``data`` holds exactly ``frames``), rolling segments.

        If the storage refuses (ENOSPC, EIO) the OSError propagates; the stop position covers only the
        chunks written whole, and a torn chunk's bytes are cut off again so that a later, shorter write
        at the same position cannot leave stale frames behind it."""
        try:
            self._write_chunks(data, frames)
        except OSError:
            self._clear_tail_cache()
            if self._active_fd is not None and self._segments:
                try:
                    self._active_fd.truncate(self._segments[-1].length)
                except OSError as e:
                    self._log(f"archive: recording {self.recording_id}: cannot cut a failed write back: {e}")
            raise

    def _write_chunks(self, data: bytes, frames: Sequence[Frame]) -> None:
        segments = self._segments
        if segments:
            seg = segments[-1]
            if len(data) <= self.segment_length - seg.length:
                # Fits the active segment (nearly every append): one write, no slicing.
                assert self._active_fd is not None
                self._active_fd.write(seg.length, data)
                seg.length += len(data)
                self._stop = seg.base_position + seg.length
                return
        # Crossing into a new segment: split at frame ends (offsets in ``data``).
        start = frames[0].position
        frame_ends = [f.end_position - start for f in frames]
        view = memoryview(data)
        offset = 0
        while offset < len(data):
            if not self._segments:
                self._new_segment(self.stop_position)
            seg = self._segments[-1]
            room = self.segment_length - seg.length
            if len(data) - offset <= room:
                end = len(data)
            else:
                # Take the whole frames that fit; a frame never spans two segments.
                i = bisect.bisect_right(frame_ends, offset + room) - 1
                end = frame_ends[i] if i >= 0 and frame_ends[i] > offset else offset
                if end == offset:
                    if seg.length > 0:
                        self._new_segment(seg.end_position)
                        continue
                    # An empty segment takes one frame even if it is longer than segment_length.
                    end = frame_ends[bisect.bisect_right(frame_ends, offset)]
            self._pwrite_all(view[offset:end], seg.length)
            seg.length += end - offset
            self._stop = seg.base_position + seg.length
            offset = end

    def _pwrite_all(self, data: memoryview, file_offset: int) -> None:
        assert self._active_fd is not None
        self._active_fd.write(file_offset, data)

    def _new_segment(self, base_position: int) -> None:
        path = join(self.directory, segment_file_name(base_position))
        if self.storage.exists(path):
            raise ArchiveError(f"recording {self.recording_id}: segment {self.storage.describe(path)} already exists")
        if self._active_fd is not None and self.file_sync:
            self._active_fd.sync()
        new = self.storage.open(path)  # may raise (ENOSPC): the old segment stays the active one
        if self._active_fd is not None:
            self._active_fd.close()
        self._active_fd = new
        self._segments.append(_Segment(base_position, path, 0))
        self._bases.append(base_position)
        if self.file_sync:
            self._sync_directory()

    # ------------------------------------------------------------------ read

    def read(self, from_position: int, to_position: int, max_bytes: int | None = None) -> bytes:
        """Framed bytes from the frame boundary ``from_position`` up to ``to_position``.

        ``to_position`` is clipped to the stop position; the result ends at the last frame boundary at or
        before it (so a ``to_position`` inside a frame is rounded down). With ``max_bytes`` the result stops
        at the last whole frame within the limit, but always holds at least one frame. Raises ArchiveError
        if ``from_position`` is out of range or not a frame boundary, or if a frame read is corrupt."""
        if from_position >= self._cache_base and to_position >= from_position and not self._closed:
            hit = self._cached(from_position, to_position, max_bytes)
            if hit is not None:
                i, j = hit
                if i == j:
                    return b""
                return self._cached_bytes(from_position, self._cache_ends[j - 1])
        chunks, _frames, _end = self._collect(from_position, to_position, max_bytes, want_frames=False)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def holds(self, position: int, data: bytes | memoryview) -> bool:
        """Whether the recording holds exactly ``data`` at ``position``, answered from the tail cache
        (False for a range that is not wholly cached): each cached block is compared where it lies
        (``bytes.startswith`` at an offset is a memcmp), nothing is joined or read from the files."""
        end = position + len(data)
        if self._closed or position < self._cache_base or end > self._cache_base + self._cache_bytes:
            return False
        view = memoryview(data)
        chunk_starts = self._cache_chunk_starts
        chunks = self._cache_chunks
        c = bisect.bisect_right(chunk_starts, position) - 1
        at = position
        while at < end:
            chunk = chunks[c]
            offset = at - chunk_starts[c]
            n = min(len(chunk) - offset, end - at)
            if not chunk.startswith(view[at - position : at - position + n], offset):
                return False
            at += n
            c += 1
        return True

    def read_frames(self, from_position: int, to_position: int, max_bytes: int | None = None) -> list[Frame]:
        """Like :meth:`read` but decoded into frames."""
        if from_position >= self._cache_base and to_position >= from_position and not self._closed:
            hit = self._cached(from_position, to_position, max_bytes)
            if hit is not None:
                return self._cache_frames[hit[0] : hit[1]]
        _chunks, frames, _end = self._collect(from_position, to_position, max_bytes, want_frames=True)
        return frames

    def frame_at(self, position: int) -> Frame:
        """The frame starting at ``position``; ArchiveError if there is none."""
        self._check_open()
        if not self.start_position <= position < self.stop_position:
            raise ArchiveError(
                f"recording {self.recording_id}: no frame at {position} "
                f"(recording spans [{self.start_position}, {self.stop_position}))"
            )
        seg = self._segment_for(position)
        return self._frame_at(seg, position)

    def is_frame_boundary(self, position: int) -> bool:
        """True if ``position`` is the start of a frame or the stop position."""
        self._check_open()
        if position == self.stop_position or position == self.start_position:
            return True
        if not self.start_position < position < self.stop_position:
            return False
        try:
            self._frame_at(self._segment_for(position), position)
        except ArchiveError:
            return False
        return True

    def _collect(
        self, from_position: int, to_position: int, max_bytes: int | None, *, want_frames: bool
    ) -> tuple[list[bytes], list[Frame], int]:
        self._check_open()
        start, stop = self.start_position, self.stop_position
        if not start <= from_position <= stop:
            raise ArchiveError(f"recording {self.recording_id}: read from {from_position} outside [{start}, {stop}]")
        if to_position < from_position:
            raise ArchiveError(f"recording {self.recording_id}: read to {to_position} is before from {from_position}")
        to = min(to_position, stop)
        if from_position == stop:
            return [b""], [], from_position
        seg = self._segment_for(from_position)
        # The boundary check: the frame at from_position must be a whole, valid frame that says it starts
        # there. Frames are CRC-protected, so a payload cannot pass for a frame header by accident.
        first = self._frame_at(seg, from_position)
        if first.end_position > to:
            return [b""], [], from_position  # to_position falls inside the first frame
        limit = to
        if max_bytes is not None:
            limit = min(to, max(from_position + max_bytes, first.end_position))
        chunks: list[bytes] = []
        frames: list[Frame] = []
        pos = from_position
        index = bisect.bisect_right(self._bases, from_position) - 1
        while pos < limit and index < len(self._segments):
            seg = self._segments[index]
            if pos >= seg.end_position:
                index += 1
                continue
            read_end = min(seg.end_position, limit)
            buf = self._pread(seg, pos - seg.base_position, read_end - pos)
            used = self._walk_read(
                seg,
                buf,
                pos,
                cut_by_limit=read_end < seg.end_position,
                frames=frames,
                want_frames=want_frames,
            )
            if used == 0:
                break
            chunks.append(buf if used == len(buf) else buf[:used])
            pos += used
            if used < len(buf):
                break
            index += 1
        return chunks, frames, pos

    def _walk_read(
        self,
        seg: _Segment,
        buf: bytes,
        base_position: int,
        *,
        cut_by_limit: bool,
        frames: list[Frame],
        want_frames: bool,
    ) -> int:
        """Validate the frames in ``buf`` (read from ``seg``); returns how many bytes are whole frames."""
        off = 0
        n = len(buf)
        while off < n:
            if n - off < FRAME_HEADER_LENGTH:
                if cut_by_limit:
                    break
                self._corrupt(seg, base_position + off, "torn frame header")
            (frame_length,) = _FRAME_LENGTH.unpack_from(buf, off)
            if not FRAME_HEADER_LENGTH <= frame_length <= MAX_FRAME_LENGTH:
                self._corrupt(seg, base_position + off, f"bad frame_length {frame_length}")
            if off + align(frame_length) > n:
                if cut_by_limit:
                    break
                self._corrupt(seg, base_position + off, "torn frame")
            try:
                f = unframe(buf, off, expected_position=base_position + off)
            except DecodeError as e:
                self._corrupt(seg, base_position + off, str(e))
            if want_frames:
                frames.append(f)
            off += f.length
        return off

    def _frame_at(self, seg: _Segment, position: int) -> Frame:
        """Decode the frame at ``position`` in ``seg``, or raise ArchiveError naming why it is not one."""
        offset = position - seg.base_position
        if position % FRAME_ALIGNMENT:
            raise ArchiveError(f"recording {self.recording_id}: position {position} is not a frame boundary")
        header = self._pread(seg, offset, FRAME_HEADER_LENGTH)
        if len(header) < FRAME_HEADER_LENGTH:
            raise ArchiveError(f"recording {self.recording_id}: position {position} is not a frame boundary")
        (frame_length,) = _FRAME_LENGTH.unpack_from(header, 0)
        (header_position,) = _FRAME_POSITION.unpack_from(header, _FRAME_POSITION_OFFSET)
        if header_position != position or not FRAME_HEADER_LENGTH <= frame_length <= MAX_FRAME_LENGTH:
            raise ArchiveError(f"recording {self.recording_id}: position {position} is not a frame boundary")
        data = header + self._pread(seg, offset + FRAME_HEADER_LENGTH, align(frame_length) - FRAME_HEADER_LENGTH)
        try:
            return unframe(data, 0, expected_position=position)
        except DecodeError as e:
            raise ArchiveError(
                f"recording {self.recording_id}: position {position} is not a valid frame boundary "
                f"({self.storage.describe(seg.path)} offset {offset}: {e})"
            ) from e

    def _corrupt(self, seg: _Segment, position: int, reason: str) -> NoReturn:
        raise ArchiveError(
            f"corrupt recording {self.recording_id}: {self.storage.describe(seg.path)} offset "
            f"{position - seg.base_position} "
            f"(position {position}): {reason}"
        )

    def _segment_for(self, position: int) -> _Segment:
        index = bisect.bisect_right(self._bases, position) - 1
        assert index >= 0, f"position {position} below the first segment"
        return self._segments[index]

    def _pread(self, seg: _Segment, file_offset: int, length: int) -> bytes:
        return self._fd_for(seg).read(file_offset, length)

    def _fd_for(self, seg: _Segment) -> StorageFile:
        if seg is self._segments[-1]:
            assert self._active_fd is not None
            return self._active_fd
        fd = self._read_fds.get(seg.base_position)
        if fd is not None:
            self._read_fds.move_to_end(seg.base_position)
            return fd
        fd = self.storage.open(seg.path, create=False)
        self._read_fds[seg.base_position] = fd
        if len(self._read_fds) > _READ_FD_CACHE_SIZE:
            _base, old = self._read_fds.popitem(last=False)
            old.close()
        return fd

    # ------------------------------------------------------------------ truncate / purge / flush

    def truncate(self, position: int) -> None:
        """Cut the recording back to the frame boundary ``position`` (start <= position <= stop).

        Used when a follower holds uncommitted entries the new leader's log does not have (PROTOCOL e.6)."""
        self._check_open()
        start, stop = self.start_position, self.stop_position
        if not start <= position <= stop:
            raise ArchiveError(f"recording {self.recording_id}: truncate to {position} outside [{start}, {stop}]")
        if position == stop:
            return
        if position != start and position not in self._bases:
            self._frame_at(self._segment_for(position), position)  # raises unless a frame starts there
        index = bisect.bisect_right(self._bases, position) - 1
        if position == self._bases[index] and index > 0:
            index -= 1  # the previous segment ends exactly here: keep it whole, drop this one
        self._drop_segments_after(index)
        seg = self._segments[index]
        keep = position - seg.base_position
        if keep != seg.length:
            assert self._active_fd is not None
            self._active_fd.truncate(keep)
            seg.length = keep
        self._stop = seg.end_position
        if self.file_sync:
            assert self._active_fd is not None
            self._active_fd.sync()
            self._sync_directory()
        self._clear_tail_cache()
        self._log(f"archive: recording {self.recording_id} truncated {stop} -> {position}")

    def purge_segments(self, new_start_position: int) -> int:
        """Delete whole segments that end at or before ``new_start_position`` (never the last one).

        Returns the new start position (a segment base, so possibly below the one asked for)."""
        self._check_open()
        while len(self._segments) > 1 and self._segments[0].end_position <= new_start_position:
            seg = self._segments.pop(0)
            self._bases.pop(0)
            fd = self._read_fds.pop(seg.base_position, None)
            if fd is not None:
                fd.close()
            self.storage.remove(seg.path)
        if self.file_sync:
            self._sync_directory()
        self._clear_tail_cache()
        return self.start_position

    def flush(self) -> None:
        """Make appended data durable to the level configured: it is always in the OS already (writes are
        unbuffered); with ``file_sync`` it is also fsynced."""
        if self._closed:
            return
        if self.file_sync and self._active_fd is not None:
            self._active_fd.sync()

    def _drop_segments_after(self, index: int) -> None:
        while len(self._segments) - 1 > index:
            seg = self._segments.pop()
            self._bases.pop()
            fd = self._read_fds.pop(seg.base_position, None)
            if fd is not None:
                fd.close()
            self.storage.remove(seg.path)
        if self._active_fd is not None:
            self._active_fd.close()
        fd = self._read_fds.pop(self._segments[index].base_position, None)
        if fd is not None:
            fd.close()
        self._active_fd = self.storage.open(self._segments[index].path, create=False)

    def _sync_directory(self) -> None:
        self.storage.sync_dir(self.directory)

    def _check_open(self) -> None:
        if self._closed:
            raise ArchiveError(f"recording {self.recording_id} in {self.storage.describe(self.directory)} is closed")

    # ------------------------------------------------------------------ whole-recording check

    def verify(self) -> None:
        """Check every frame of every segment (CRC, positions); raises ArchiveError naming the first damage.

        open() only walks the last segment (older ones are checked for size and continuity, and frames are
        CRC-checked again whenever they are read); this is the full scan, for tools and tests."""
        self._check_open()
        for seg in self._segments:
            data = self._pread(seg, 0, seg.length)
            result = walk_frames(data, seg.base_position)
            if result.error is not None or result.end_position != seg.end_position:
                self._corrupt(seg, result.end_position, str(result.error or "trailing bytes"))
