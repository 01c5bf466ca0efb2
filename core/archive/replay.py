"""Replay and replication, the sans-IO halves.

Aeron's Archive replays a recording range to a follower's catch-up endpoint and replicates earlier terms
archive to archive (PROTOCOL e.13). Here both become "fetch range [from, to) in chunks of whole frames":

* :class:`ReplaySession` is the sending side (the leader answering catch-up or a replication request, or a
  member replaying its own log locally): each :meth:`~ReplaySession.poll` reads the next chunk from a
  :class:`~clusterlab.core.archive.recording.RecordingStore`.
* :class:`Replicator` is the receiving side: it appends chunks that start exactly at the local stop
  position and says when a target position has been reached.

Neither knows the wire messages; the consensus module wraps chunks in its replay/replication messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.codec.framing import walk_frames

DEFAULT_REPLAY_CHUNK_BYTES = 64 * 1024


def _noop_log(line: str) -> None:
    """Default log sink: drop the line."""


@dataclass(frozen=True, slots=True)
class ReplayChunk:
    """Framed bytes of a recording starting at ``start_position`` (always whole frames)."""

    start_position: int
    data: bytes

    @property
    def end_position(self) -> int:
        return self.start_position + len(self.data)


class ReplaySession:
    """Reads ``[from_position, to_position)`` of a recording in chunks of at most ``max_bytes`` (a single
    frame larger than that is sent whole). With ``to_position=None`` the session follows the recording as it
    grows (Aeron's open-ended replay used for catch-up) and only ends when :meth:`stop` is called."""

    def __init__(
        self,
        store: RecordingStore,
        from_position: int,
        to_position: int | None = None,
        *,
        max_bytes: int = DEFAULT_REPLAY_CHUNK_BYTES,
        session_id: int = 0,
    ) -> None:
        if max_bytes <= 0:
            raise ArchiveError(f"replay max_bytes must be > 0, got {max_bytes}")
        if to_position is not None and to_position < from_position:
            raise ArchiveError(f"replay to {to_position} is before from {from_position}")
        if not store.is_frame_boundary(from_position):
            raise ArchiveError(
                f"replay of recording {store.recording_id} from {from_position}: not a frame boundary "
                f"(recording spans [{store.start_position}, {store.stop_position}])"
            )
        self.store = store
        self.session_id = session_id
        self.from_position = from_position
        self.to_position = to_position
        self.max_bytes = max_bytes
        self._position = from_position
        self._stopped = False

    @property
    def position(self) -> int:
        """The position the next chunk starts at."""
        return self._position

    @property
    def done(self) -> bool:
        """True once ``to_position`` was reached or the session was stopped."""
        return self._stopped or (self.to_position is not None and self._position >= self.to_position)

    def stop(self) -> None:
        """End the session (Aeron's stopReplay); later polls return None."""
        self._stopped = True

    def poll(self) -> ReplayChunk | None:
        """The next chunk, or None if done or nothing new is recorded yet."""
        if self.done:
            return None
        stop = self.store.stop_position
        if self._position > stop:
            # Aeron stops replays before truncating a recording; reaching here means a caller did not.
            raise ArchiveError(
                f"replay session {self.session_id}: recording {self.store.recording_id} was truncated to "
                f"{stop}, below the replay position {self._position}"
            )
        target = stop if self.to_position is None else min(self.to_position, stop)
        if target <= self._position:
            return None
        data = self.store.read(self._position, target, self.max_bytes)
        if not data:
            # The next frame crosses to_position: the range does not end on a frame boundary.
            raise ArchiveError(
                f"replay session {self.session_id}: to_position {self.to_position} is not a frame boundary "
                f"of recording {self.store.recording_id} (next frame starts at {self._position})"
            )
        chunk = ReplayChunk(self._position, data)
        self._position = chunk.end_position
        return chunk

    def __iter__(self) -> Iterator[ReplayChunk]:
        """Chunks until done or until the recorded data runs out."""
        while (chunk := self.poll()) is not None:
            yield chunk


class Replicator:
    """Appends chunks arriving from another member to the local recording, in order.

    A chunk is accepted only if it starts at the local stop position, or overlaps it with the stop on one
    of its frame boundaries (a resend of data partly held: the held part is skipped). Anything else is a
    stale, duplicate or out-of-order chunk from the peer and is rejected with a logged reason, never
    raised: the sender resends from the position this member reports. With ``stop_position`` set, frames
    beyond it are not appended and :attr:`done` turns true when it is reached."""

    def __init__(
        self,
        store: RecordingStore,
        stop_position: int | None = None,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if stop_position is not None and stop_position < store.stop_position:
            raise ArchiveError(
                f"replication target {stop_position} is below recording {store.recording_id}'s "
                f"stop position {store.stop_position}; truncate first"
            )
        self.store = store
        self.stop_position = stop_position
        self._log = log or _noop_log
        self.blocks_appended = 0
        self.blocks_rejected = 0
        self.last_reject_reason: str | None = None

    @property
    def position(self) -> int:
        """How far the local recording reaches: what to report to the sender."""
        return self.store.stop_position

    @property
    def done(self) -> bool:
        return self.stop_position is not None and self.store.stop_position >= self.stop_position

    def on_block(self, start_position: int, entries: bytes) -> bool:
        """Append ``entries`` (whole frames starting at ``start_position``) if they continue the recording.
        Returns True if anything was appended."""
        if self.done:
            return self._reject(start_position, entries, "replication already complete")
        stop = self.store.stop_position
        end = start_position + len(entries)
        if start_position > stop:
            return self._reject(start_position, entries, f"gap: local recording stops at {stop}")
        if end <= stop:
            return self._reject(start_position, entries, f"duplicate: local recording already reaches {stop}")
        data = entries[stop - start_position :] if start_position < stop else entries
        if self.stop_position is not None and stop + len(data) > self.stop_position:
            data = self._clip(data, stop, self.stop_position)
            if not data:
                return self._reject(start_position, entries, f"first frame crosses target {self.stop_position}")
        try:
            self.store.append(data, stop)
        except ArchiveError as e:
            return self._reject(start_position, entries, str(e))
        self.blocks_appended += 1
        return True

    @staticmethod
    def _clip(data: bytes, base_position: int, limit: int) -> bytes:
        """The prefix of ``data`` made of whole frames ending at or before ``limit``."""
        end = base_position
        for f in walk_frames(data, base_position).frames:
            if f.end_position > limit:
                break
            end = f.end_position
        return data[: end - base_position]

    def _reject(self, start_position: int, entries: bytes, reason: str) -> bool:
        self.blocks_rejected += 1
        self.last_reject_reason = reason
        self._log(
            f"archive: replication into recording {self.store.recording_id} ignored block "
            f"[{start_position}, {start_position + len(entries)}): {reason}"
        )
        return False
