"""The archive's catalogue: every recording a member holds, by recording id.

Aeron's Archive keeps a binary ``archive.catalog`` of recording descriptors. Ours is a small JSON file,
``<member_dir>/archive/catalogue.json``, rewritten whole (temp file + rename, so a crash leaves the old or
the new version, never a mix) on every change. It changes rarely: a snapshot, a truncation, a close. The log
recording is id 0 by convention (:data:`clusterlab.core.archive.layout.LOG_RECORDING_ID`); snapshots get fresh ids
that are never reused, so a recording id in the recording log always names one recording.

For the log recording the segment files are the truth about how much is recorded; its ``stop_position``
here is refreshed on open/close/truncate rather than on every append (that would be a file rewrite per
log block).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.layout import ARCHIVE_DIR_NAME, CATALOGUE_FILE_NAME, LOG_RECORDING_ID
from clusterlab.core.archive.storage import Storage, join

NULL_VALUE = (
    -1
)  # same sentinel as clusterlab.core.consensus.context.NULL_VALUE (kept local: archive sits below consensus)
CATALOGUE_VERSION = 1


class RecordingKind(StrEnum):
    """What a recording holds."""

    LOG = "log"
    SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True)
class RecordingDescriptor:
    """One catalogue row. ``directory`` is relative to the archive directory, so a member dir can move."""

    recording_id: int
    kind: RecordingKind
    directory: str
    start_position: int
    stop_position: int
    leadership_term_id: int = NULL_VALUE
    log_position: int = NULL_VALUE  # snapshots: the log position the snapshot represents
    service_id: int = NULL_VALUE  # snapshots: the service (-1 = consensus module)
    valid: bool = True

    def describe(self) -> str:
        return (
            f"recording {self.recording_id} {self.kind.value} dir={self.directory} "
            f"[{self.start_position}, {self.stop_position}) term={self.leadership_term_id} "
            f"log_position={self.log_position} service={self.service_id}{'' if self.valid else ' INVALID'}"
        )


def _noop_log(line: str) -> None:
    """Default log sink: drop the line."""


class Catalogue:
    """Recording id -> descriptor, persisted in ``<archive_dir>/catalogue.json``. Use :meth:`open`."""

    def __init__(
        self,
        storage: Storage,
        file_path: str,
        recordings: dict[int, RecordingDescriptor],
        next_recording_id: int,
        *,
        file_sync: bool,
        log: Callable[[str], None],
    ) -> None:
        self.storage = storage
        self.file_path = file_path
        self.path = storage.describe(file_path)  # for messages
        self.file_sync = file_sync
        self._log = log
        self._recordings = recordings
        self._next_recording_id = next_recording_id

    @classmethod
    def open(
        cls,
        storage: Storage,
        archive_dir: str = ARCHIVE_DIR_NAME,
        *,
        file_sync: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> Catalogue:
        """Load the catalogue in ``storage``'s ``archive_dir`` (creating an empty one). ArchiveError if
        it is corrupt."""
        storage.make_dirs(archive_dir)
        file_path = join(archive_dir, CATALOGUE_FILE_NAME)
        path = storage.describe(file_path)
        recordings: dict[int, RecordingDescriptor] = {}
        next_id = LOG_RECORDING_ID + 1
        if storage.exists(file_path):
            try:
                doc = json.loads(storage.read_file(file_path).decode("utf-8"))
                if doc.get("version") != CATALOGUE_VERSION:
                    raise ValueError(f"unsupported version {doc.get('version')!r}")
                for row in doc["recordings"]:
                    d = RecordingDescriptor(**{**row, "kind": RecordingKind(row["kind"])})
                    recordings[d.recording_id] = d
                next_id = int(doc["next_recording_id"])
            except (ValueError, KeyError, TypeError) as e:
                raise ArchiveError(f"corrupt catalogue {path}: {e}") from e
        catalogue = cls(storage, file_path, recordings, next_id, file_sync=file_sync, log=log or _noop_log)
        catalogue._next_recording_id = max(next_id, catalogue._min_next_id())
        return catalogue

    def _min_next_id(self) -> int:
        # Id 0 is reserved for the log recording even before it is added.
        return max([LOG_RECORDING_ID, *self._recordings]) + 1

    @property
    def next_recording_id(self) -> int:
        """The id the next :meth:`add_recording` without an explicit id will get."""
        return self._next_recording_id

    def add_recording(
        self,
        kind: RecordingKind | str,
        directory: str,
        *,
        start_position: int = 0,
        stop_position: int = 0,
        leadership_term_id: int = NULL_VALUE,
        log_position: int = NULL_VALUE,
        service_id: int = NULL_VALUE,
        recording_id: int | None = None,
    ) -> RecordingDescriptor:
        """Add a recording; without ``recording_id`` it gets :attr:`next_recording_id`. Persisted at once."""
        if recording_id is None:
            recording_id = self._next_recording_id
        if recording_id in self._recordings:
            raise ArchiveError(f"catalogue {self.path}: recording {recording_id} already exists")
        if stop_position < start_position:
            raise ArchiveError(f"recording {recording_id}: stop {stop_position} < start {start_position}")
        d = RecordingDescriptor(
            recording_id,
            RecordingKind(kind),
            directory,
            start_position,
            stop_position,
            leadership_term_id,
            log_position,
            service_id,
        )
        self._commit({**self._recordings, recording_id: d}, max(self._next_recording_id, recording_id + 1))
        return d

    def ensure_log_recording(self, directory: str, start_position: int, stop_position: int) -> RecordingDescriptor:
        """Add the log recording (id 0) if missing, else refresh its extent."""
        existing = self._recordings.get(LOG_RECORDING_ID)
        if existing is None:
            return self.add_recording(
                RecordingKind.LOG,
                directory,
                start_position=start_position,
                stop_position=stop_position,
                recording_id=LOG_RECORDING_ID,
            )
        return self.update_stop(LOG_RECORDING_ID, stop_position, start_position=start_position)

    def update_stop(
        self, recording_id: int, stop_position: int, *, start_position: int | None = None
    ) -> RecordingDescriptor:
        """Record a recording's new stop (and optionally start) position."""
        d = self.get(recording_id)
        start = d.start_position if start_position is None else start_position
        if stop_position < start:
            raise ArchiveError(f"recording {recording_id}: stop {stop_position} < start {start}")
        if d.stop_position == stop_position and d.start_position == start:
            return d
        d = replace(d, stop_position=stop_position, start_position=start)
        self._commit({**self._recordings, recording_id: d}, self._next_recording_id)
        return d

    def invalidate(self, recording_id: int) -> RecordingDescriptor:
        """Mark a recording unusable (deleted or damaged); its id is never reused."""
        d = replace(self.get(recording_id), valid=False)
        self._commit({**self._recordings, recording_id: d}, self._next_recording_id)
        return d

    def get(self, recording_id: int) -> RecordingDescriptor:
        """The descriptor for ``recording_id``; ArchiveError if unknown."""
        d = self._recordings.get(recording_id)
        if d is None:
            raise ArchiveError(f"catalogue {self.path}: unknown recording id {recording_id}")
        return d

    def find(self, recording_id: int) -> RecordingDescriptor | None:
        """The descriptor for ``recording_id``, or None."""
        return self._recordings.get(recording_id)

    def list(self, kind: RecordingKind | str | None = None) -> list[RecordingDescriptor]:
        """All descriptors (optionally of one kind), by recording id."""
        rows = sorted(self._recordings.values(), key=lambda d: d.recording_id)
        if kind is not None:
            rows = [d for d in rows if d.kind == RecordingKind(kind)]
        return rows

    def __contains__(self, recording_id: object) -> bool:
        return recording_id in self._recordings

    def __len__(self) -> int:
        return len(self._recordings)

    def _commit(self, recordings: dict[int, RecordingDescriptor], next_recording_id: int) -> None:
        """Persist the new rows, then adopt them: a refused write (ENOSPC) leaves memory equal to disk."""
        doc: dict[str, Any] = {
            "version": CATALOGUE_VERSION,
            "next_recording_id": next_recording_id,
            "recordings": [
                {**asdict(d), "kind": d.kind.value} for d in sorted(recordings.values(), key=lambda d: d.recording_id)
            ],
        }
        self.storage.replace(
            self.file_path, json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"), sync=self.file_sync
        )
        self._recordings = recordings
        self._next_recording_id = next_recording_id
