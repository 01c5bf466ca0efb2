"""Catalogue persistence, SnapshotStore write/read and corruption detection, the Archive facade."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from clusterlab.core.archive import layout
from clusterlab.core.archive.archive import Archive
from clusterlab.core.archive.catalogue import Catalogue, RecordingKind
from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.snapshots import SnapshotStore
from clusterlab.core.codec.framing import FRAME_HEADER_LENGTH, framed_length
from clusterlab.core.runtime.storage import FileStorage

from clusterlab.testing import disk_faults as faults


def test_catalogue_persists_across_reopen(tmp_path: Path) -> None:
    cat = Catalogue.open(FileStorage(tmp_path), "")
    log = cat.add_recording(RecordingKind.LOG, "log", recording_id=0, stop_position=640)
    snap = cat.add_recording(
        "snapshot", "snapshots", stop_position=96, leadership_term_id=3, log_position=512, service_id=-1
    )
    assert (log.recording_id, snap.recording_id) == (0, 1)
    cat.update_stop(0, 1024)
    cat.invalidate(1)
    again = Catalogue.open(FileStorage(tmp_path), "")
    assert again.get(0).stop_position == 1024
    assert again.get(1).kind is RecordingKind.SNAPSHOT
    assert again.get(1).valid is False
    assert (again.get(1).leadership_term_id, again.get(1).log_position, again.get(1).service_id) == (
        3,
        512,
        -1,
    )
    assert [d.recording_id for d in again.list()] == [0, 1]
    assert [d.recording_id for d in again.list("snapshot")] == [1]
    assert again.next_recording_id == 2


def test_recording_id_zero_is_reserved_for_the_log_and_ids_are_never_reused(tmp_path: Path) -> None:
    cat = Catalogue.open(FileStorage(tmp_path), "")
    assert cat.next_recording_id == 1  # even before the log recording is added
    first = cat.add_recording(RecordingKind.SNAPSHOT, "snapshots")
    assert first.recording_id == 1
    cat.ensure_log_recording("log", 0, 0)
    cat.ensure_log_recording("log", 0, 320)  # refreshes, does not duplicate
    assert cat.get(0).stop_position == 320
    # The next id survives a reopen even if the highest recording is no longer listed as valid.
    cat.invalidate(1)
    assert Catalogue.open(FileStorage(tmp_path), "").next_recording_id == 2


def test_catalogue_misuse_and_corruption(tmp_path: Path) -> None:
    cat = Catalogue.open(FileStorage(tmp_path), "")
    cat.add_recording(RecordingKind.LOG, "log", recording_id=0)
    with pytest.raises(ArchiveError, match="already exists"):
        cat.add_recording(RecordingKind.LOG, "log", recording_id=0)
    with pytest.raises(ArchiveError, match="unknown recording id 9"):
        cat.get(9)
    assert cat.find(9) is None
    with pytest.raises(ArchiveError, match="stop"):
        cat.update_stop(0, -5)
    path = tmp_path / "catalogue.json"
    path.write_text("{not json")
    with pytest.raises(ArchiveError, match=r"corrupt catalogue .*catalogue.json"):
        Catalogue.open(FileStorage(tmp_path), "")
    path.write_text(json.dumps({"version": 99, "recordings": [], "next_recording_id": 1}))
    with pytest.raises(ArchiveError, match="unsupported version"):
        Catalogue.open(FileStorage(tmp_path), "")


def test_catalogue_write_is_atomic_no_temp_left(tmp_path: Path) -> None:
    cat = Catalogue.open(FileStorage(tmp_path), "")
    cat.add_recording(RecordingKind.LOG, "log", recording_id=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalogue.json"]


def _snapshots(tmp_path: Path) -> SnapshotStore:
    storage = FileStorage(tmp_path / "archive")
    return SnapshotStore(storage, Catalogue.open(storage, ""), "snapshots")


def _file(store: SnapshotStore, recording_id: int) -> Path:
    """The real file behind a snapshot recording (FileStorage), for damaging it behind the store's back."""
    return Path(store.storage.describe(store.snapshot_path(recording_id)))


def _dir(store: SnapshotStore) -> Path:
    return Path(store.storage.describe(store.directory))


RECORDS = [b"begin-marker", b"", b"session 1" * 9, b"\x00" * 100, b"end-marker"]


def test_snapshot_write_read_round_trip_and_catalogue_row(tmp_path: Path) -> None:
    store = _snapshots(tmp_path)
    rid = store.write_snapshot(RECORDS, leadership_term_id=4, log_position=2048, service_id=0)
    rid2 = store.write_snapshot([b"cm"], leadership_term_id=4, log_position=2048, service_id=-1)
    assert (rid, rid2) == (1, 2)
    assert store.read_snapshot(rid) == RECORDS
    assert store.read_snapshot(rid2) == [b"cm"]
    d = store.catalogue.get(rid)
    assert (d.kind, d.leadership_term_id, d.log_position, d.service_id) == ("snapshot", 4, 2048, 0)
    assert d.stop_position == sum(framed_length(len(r)) for r in RECORDS)
    # A fresh store over the same directory reads the same thing.
    assert _snapshots(tmp_path).read_snapshot(rid) == RECORDS
    assert not list(_dir(store).glob("*.tmp"))


def test_snapshot_bit_flip_is_detected(tmp_path: Path) -> None:
    store = _snapshots(tmp_path)
    rid = store.write_snapshot(RECORDS, 1, 640, 0)
    path = _file(store, rid)
    data = bytearray(path.read_bytes())
    third = framed_length(len(RECORDS[0])) + framed_length(0)
    data[third + FRAME_HEADER_LENGTH + 3] ^= 0x04  # a payload byte of the third record
    path.write_bytes(bytes(data))
    with pytest.raises(ArchiveError, match=rf"corrupt snapshot recording {rid}: .*offset {third}"):
        store.read_snapshot(rid)


def test_snapshot_random_flips_in_protected_bytes_are_detected(tmp_path: Path) -> None:
    store = _snapshots(tmp_path)
    rid = store.write_snapshot([b"x" * 64], 1, 640, 0)  # 96-byte frame with no padding
    faults.flip_bits_in_file(store.storage, store.snapshot_path(rid), random.Random(7), count=3)
    with pytest.raises(ArchiveError, match="corrupt snapshot"):
        store.read_snapshot(rid)


def test_snapshot_cut_at_a_frame_boundary_is_detected_by_length(tmp_path: Path) -> None:
    store = _snapshots(tmp_path)
    rid = store.write_snapshot(RECORDS, 1, 640, 0)
    path = _file(store, rid)
    path.write_bytes(path.read_bytes()[: framed_length(len(RECORDS[0]))])
    with pytest.raises(ArchiveError, match="holds 64 bytes, catalogue says"):
        store.read_snapshot(rid)


def test_snapshot_missing_invalid_or_wrong_kind(tmp_path: Path) -> None:
    store = _snapshots(tmp_path)
    rid = store.write_snapshot([b"a"], 1, 640, 0)
    store.catalogue.add_recording(RecordingKind.LOG, "log", recording_id=0)
    with pytest.raises(ArchiveError, match="not a snapshot"):
        store.read_snapshot(0)
    _file(store, rid).unlink()
    with pytest.raises(ArchiveError, match="missing"):
        store.read_snapshot(rid)
    rid2 = store.write_snapshot([b"b"], 1, 640, 0)
    store.delete_snapshot(rid2)
    assert not _file(store, rid2).exists()
    with pytest.raises(ArchiveError, match="invalid"):
        store.read_snapshot(rid2)
    assert store.write_snapshot([b"c"], 1, 700, 0) == rid2 + 1  # ids are not reused


def test_unfinished_snapshot_temp_file_is_cleaned_up(tmp_path: Path) -> None:
    store = _snapshots(tmp_path)
    leftover = _dir(store) / "0000000000000001.snap.tmp"
    leftover.write_bytes(b"half a snapshot")
    lines: list[str] = []
    SnapshotStore(store.storage, store.catalogue, store.directory, log=lines.append)
    assert not leftover.exists()
    assert any("unfinished snapshot" in line for line in lines)


def test_archive_facade_keeps_log_extent_in_catalogue(tmp_path: Path) -> None:
    member = tmp_path / "member-0"
    archive = Archive(FileStorage(member), segment_length=256)
    for i in range(10):
        archive.recording.append_entry(bytes([i]) * 40, 0)
    stop = archive.recording.stop_position
    rid = archive.snapshots.write_snapshot([b"state"], 0, stop, -1)
    archive.close()
    assert layout.log_dir(member).is_dir() and layout.catalogue_path(member).is_file()
    archive = Archive(FileStorage(member), segment_length=256)
    assert archive.catalogue.get(0).stop_position == stop
    assert archive.recording_extent(0) == (0, stop)
    assert archive.recording_extent(rid) == (0, framed_length(5))
    archive.truncate_log(framed_length(40) * 3)
    assert archive.catalogue.get(0).stop_position == framed_length(40) * 3
    with pytest.raises(ArchiveError, match="unknown recording id"):
        archive.recording_extent(99)
    archive.close()
