"""Snapshot recordings: one file per snapshot, holding the snapshot's records as log frames.

In Aeron every snapshot is a separate Archive recording whose id goes into the recording log (PROTOCOL
c.12). Ours is a single file ``<member_dir>/archive/snapshots/<recording id>.snap``: the records framed with
core/codec/framing.py (positions counted from 0 inside the snapshot, the snapshot's leadership term in
every header) so each record is CRC-checked on read. A snapshot is written to a temp file and renamed into
place, then catalogued with its exact length, so a crash leaves either no snapshot or a whole one, and a
file that was cut short at a frame boundary is still caught (its length no longer matches the catalogue).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from clusterlab.core.archive.catalogue import Catalogue, RecordingDescriptor, RecordingKind
from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.layout import SNAPSHOT_DIR, SNAPSHOT_DIR_NAME
from clusterlab.core.archive.storage import Storage, join
from clusterlab.core.codec.framing import frame, walk_frames

SNAPSHOT_SUFFIX = ".snap"


def _noop_log(line: str) -> None:
    """Default log sink: drop the line."""


class SnapshotStore:
    """Writes and reads snapshot recordings in ``storage``'s ``directory`` and keeps the catalogue in step."""

    def __init__(
        self,
        storage: Storage,
        catalogue: Catalogue,
        directory: str = SNAPSHOT_DIR,
        *,
        file_sync: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.storage = storage
        self.directory = directory
        self.catalogue = catalogue
        self.file_sync = file_sync
        self._log = log or _noop_log
        storage.make_dirs(directory)
        for name in storage.list_dir(directory):
            if name.endswith(f"{SNAPSHOT_SUFFIX}.tmp"):
                # A crash between writing and renaming: the snapshot was never recorded anywhere, drop it.
                self._log(f"archive: removing unfinished snapshot {storage.describe(join(directory, name))}")
                storage.remove(join(directory, name))

    def snapshot_path(self, recording_id: int) -> str:
        """The storage path of the file holding snapshot recording ``recording_id``."""
        return join(self.directory, f"{recording_id:016d}{SNAPSHOT_SUFFIX}")

    def write_snapshot(
        self, records: Iterable[bytes], leadership_term_id: int, log_position: int, service_id: int
    ) -> int:
        """Write ``records`` as a new snapshot recording; returns its recording id."""
        parts: list[bytes] = []
        position = 0
        for record in records:
            framed = frame(record, position, leadership_term_id)
            parts.append(framed)
            position += len(framed)
        recording_id = self.catalogue.next_recording_id
        self.storage.replace(self.snapshot_path(recording_id), b"".join(parts), sync=self.file_sync)
        self.catalogue.add_recording(
            RecordingKind.SNAPSHOT,
            SNAPSHOT_DIR_NAME,
            start_position=0,
            stop_position=position,
            leadership_term_id=leadership_term_id,
            log_position=log_position,
            service_id=service_id,
            recording_id=recording_id,
        )
        self._log(
            f"archive: snapshot recording {recording_id} written: service {service_id} "
            f"term {leadership_term_id} log_position {log_position}, {len(parts)} records, {position} bytes"
        )
        return recording_id

    def descriptor(self, recording_id: int) -> RecordingDescriptor:
        """The catalogue row of a snapshot recording; ArchiveError if it is not a usable snapshot."""
        d = self.catalogue.get(recording_id)
        if d.kind is not RecordingKind.SNAPSHOT:
            raise ArchiveError(f"recording {recording_id} is a {d.kind.value} recording, not a snapshot")
        if not d.valid:
            raise ArchiveError(f"snapshot recording {recording_id} is marked invalid in {self.catalogue.path}")
        return d

    def read_snapshot(self, recording_id: int) -> list[bytes]:
        """The records of snapshot ``recording_id``; ArchiveError if missing, cut short or corrupt."""
        d = self.descriptor(recording_id)
        path = self.storage.describe(self.snapshot_path(recording_id))
        try:
            data = self.storage.read_file(self.snapshot_path(recording_id))
        except FileNotFoundError as e:
            raise ArchiveError(f"snapshot recording {recording_id}: file {path} is missing") from e
        expected = d.stop_position - d.start_position
        result = walk_frames(data, d.start_position)
        if result.error is not None:
            raise ArchiveError(
                f"corrupt snapshot recording {recording_id}: {path} offset "
                f"{result.end_position - d.start_position}: {result.error}"
            )
        if len(data) != expected:
            raise ArchiveError(
                f"corrupt snapshot recording {recording_id}: {path} holds {len(data)} bytes, catalogue says {expected}"
            )
        return [f.payload for f in result.frames]

    def delete_snapshot(self, recording_id: int) -> None:
        """Remove a snapshot's file and mark it invalid in the catalogue (its id is not reused)."""
        self.descriptor(recording_id)
        self.storage.remove(self.snapshot_path(recording_id), missing_ok=True)
        self.catalogue.invalidate(recording_id)
