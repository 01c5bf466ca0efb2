"""A member's archive in one object: the log recording, the snapshot store and the catalogue.

Aeron runs the Archive as a separate agent the consensus module talks to; here it is a plain object the
consensus module owns, on the member's Storage (files under ``<member_dir>/archive`` for real processes,
MemoryStorage in the simulator)."""

from __future__ import annotations

from collections.abc import Callable

from clusterlab.core.archive import layout
from clusterlab.core.archive.catalogue import Catalogue
from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.recording import DEFAULT_SEGMENT_LENGTH, RecordingStore, TailRepair
from clusterlab.core.archive.snapshots import SnapshotStore
from clusterlab.core.archive.storage import Storage


class Archive:
    """Opens (creating if needed) ``archive/`` in the member's storage; see :mod:`clusterlab.core.archive.layout`."""

    def __init__(
        self,
        storage: Storage,
        *,
        segment_length: int = DEFAULT_SEGMENT_LENGTH,
        file_sync: bool = False,
        log: Callable[[str], None] | None = None,
        repair_tail: bool = True,
    ) -> None:
        self.storage = storage
        self.catalogue = Catalogue.open(storage, layout.ARCHIVE_DIR_NAME, file_sync=file_sync, log=log)
        self.recording = RecordingStore.open(
            storage,
            layout.LOG_DIR,
            layout.LOG_RECORDING_ID,
            segment_length=segment_length,
            file_sync=file_sync,
            log=log,
            repair_tail=repair_tail,  # False only under rules that keep a torn tail (core/consensus/rules.py)
        )
        self.snapshots = SnapshotStore(storage, self.catalogue, layout.SNAPSHOT_DIR, file_sync=file_sync, log=log)
        try:
            self.sync_catalogue()
        except OSError as e:
            # The log row is only a cache of the segments' extent (they are the truth on open): a full
            # disk must not stop a restart; the first append that needs space reports it.
            (log or (lambda line: None))(f"archive: catalogue not refreshed on open: {e}")

    @property
    def repair(self) -> TailRepair | None:
        """The log recording's tail repair done on open, if any."""
        return self.recording.repair

    def sync_catalogue(self) -> None:
        """Copy the log recording's extent into the catalogue (after open, truncation, purge, close)."""
        self.catalogue.ensure_log_recording(
            layout.LOG_DIR_NAME, self.recording.start_position, self.recording.stop_position
        )

    def recording_extent(self, recording_id: int) -> tuple[int, int]:
        """(start, stop) of a recording: what RecordingLog.create_recovery_plan asks the archive."""
        if recording_id == self.recording.recording_id:
            return self.recording.start_position, self.recording.stop_position
        d = self.catalogue.find(recording_id)
        if d is None:
            raise ArchiveError(f"unknown recording id {recording_id}")
        return d.start_position, d.stop_position

    def truncate_log(self, position: int) -> None:
        """Truncate the log recording (PROTOCOL e.6) and record the new stop in the catalogue."""
        self.recording.truncate(position)
        self.sync_catalogue()

    def close(self) -> None:
        """Refresh the catalogue and release the recording (released even if the storage refuses)."""
        try:
            if not self.recording.closed:
                self.sync_catalogue()
        finally:
            self.recording.close()
