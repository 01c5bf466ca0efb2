"""RecordingLog: every rule of docs/protocol.md c.9, the recovery plan of c.10, truncation (e.6), torn records."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.consensus.recording_log import (
    ENTRY_TYPE_INVALID_FLAG,
    RECORD_ALIGNMENT,
    RECORDING_LOG_FILE_NAME,
    EntryType,
    Log,
    RecordingLog,
    RecordingLogError,
    RecoveryPlan,
    Snapshot,
)
from clusterlab.core.runtime.storage import FileStorage

CM = -1
LOG_ID = 0


def reopen(rl: RecordingLog) -> RecordingLog:
    rl.close()
    return RecordingLog.open(FileStorage(Path(rl.path).parent))


def terms(rl: RecordingLog) -> list[tuple[int, int, int]]:
    """(term, base, end) of the valid TERM entries in sort order."""
    return [
        (e.leadership_term_id, e.term_base_log_position, e.log_position)
        for e in rl.entries()
        if e.type is EntryType.TERM and e.is_valid
    ]


def extent(stop: int, start: int = 0):
    return lambda recording_id: (start, stop)


def snapshot_set(rl: RecordingLog, term: int, base: int, pos: int, ts: int, first_id: int, services: int) -> None:
    """Append a set the way the CM does (e.4): services highest id first, then the CM."""
    for service_id in range(services - 1, -1, -1):
        rl.append_snapshot(first_id + service_id + 1, term, base, pos, ts, service_id)
    rl.append_snapshot(first_id, term, base, pos, ts, CM)


@pytest.fixture
def rl(tmp_path: Path) -> RecordingLog:
    log = RecordingLog.open(FileStorage(tmp_path))
    yield log
    log.close()


# ---------------------------------------------------------------- file format


def test_file_layout_is_64_byte_little_endian_records_per_c9(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 1000)
    rl.append_snapshot(7, 0, 0, 640, 1001, CM)
    data = Path(rl.path).read_bytes()
    assert Path(rl.path).name == RECORDING_LOG_FILE_NAME == "recording.log"
    assert len(data) == 2 * RECORD_ALIGNMENT
    assert struct.unpack_from("<qqqqqii", data, 0) == (LOG_ID, 0, 0, -1, 1000, -1, 0)
    assert struct.unpack_from("<qqqqqii", data, 64) == (7, 0, 0, 640, 1001, -1, 1)
    assert data[48:64] == b"\x00" * 16


def test_entries_persist_across_reopen(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 10)
    rl.append_term(LOG_ID, 1, 320, 20)
    snapshot_set(rl, 1, 320, 640, 30, 5, 2)
    before = rl.entries()
    rl = reopen(rl)
    assert rl.entries() == before
    assert rl.next_entry_index == 5
    rl.close()


# ---------------------------------------------------------------- c.9 rules


def test_all_term_entries_reference_the_same_recording_id(rl: RecordingLog, tmp_path: Path) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    with pytest.raises(RecordingLogError, match="invalid TERM recording_id=3, expected 0"):
        rl.append_term(3, 1, 64, 0)
    with pytest.raises(RecordingLogError, match="invalid recording_id=-1"):
        RecordingLog.open(FileStorage(tmp_path / "other")).append_term(-1, 0, 0, 0)
    # A file whose TERM entries disagree is refused on load.
    rl.append_term(LOG_ID, 1, 64, 0)
    raw = bytearray(Path(rl.path).read_bytes())
    struct.pack_into("<q", raw, 64, 9)
    Path(rl.path).write_bytes(bytes(raw))
    with pytest.raises(RecordingLogError, match="expected 0"):
        RecordingLog.open(FileStorage(tmp_path))


def test_at_most_one_valid_term_entry_per_term(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    with pytest.raises(RecordingLogError, match="duplicate TERM entry for leadership_term_id=0"):
        rl.append_term(LOG_ID, 0, 64, 0)
    # Once invalidated, the term may be recorded again.
    rl.invalidate_entry(0, 0)
    rl.append_term(LOG_ID, 0, 0, 5)
    assert rl.get_term_entry(0).timestamp == 5


def test_append_term_commits_previous_term_end_to_new_base(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    assert terms(rl) == [(0, 0, -1)]
    rl.append_term(LOG_ID, 1, 1024, 0)
    assert terms(rl) == [(0, 0, 1024), (1, 1024, -1)]
    assert terms(reopen(rl)) == [(0, 0, 1024), (1, 1024, -1)]


def test_append_term_with_next_term_present_ends_at_next_base(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.append_term(LOG_ID, 2, 512, 0)
    rl.append_term(LOG_ID, 1, 256, 0)  # filled in later, e.g. after replication of term 1
    assert terms(rl) == [(0, 0, 256), (1, 256, 512), (2, 512, -1)]


def test_commit_log_position_overwrites_term_end_in_place(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.append_term(LOG_ID, 1, 96, 0)
    before = Path(rl.path).read_bytes()
    rl.commit_log_position(1, 4096)
    after = Path(rl.path).read_bytes()
    assert len(after) == len(before)
    changed = [i for i in range(len(after)) if after[i] != before[i]]
    assert changed and min(changed) >= 64 + 24 and max(changed) < 64 + 32  # only the 8-byte end field
    assert rl.get_term_entry(1).log_position == 4096
    assert reopen(rl).get_term_entry(1).log_position == 4096


def test_commit_log_position_of_unknown_term_raises(rl: RecordingLog) -> None:
    with pytest.raises(RecordingLogError, match="unknown leadership_term_id=4"):
        rl.commit_log_position(4, 100)


def test_snapshot_ordering_services_then_cm(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    # Written out of order on purpose: the sorted view is what matters.
    rl.append_snapshot(11, 0, 0, 640, 9, CM)
    rl.append_snapshot(12, 0, 0, 640, 9, 0)
    rl.append_snapshot(13, 0, 0, 640, 9, 2)
    rl.append_snapshot(14, 0, 0, 640, 9, 1)
    rl.append_snapshot(20, 0, 0, 320, 8, CM)  # an earlier position sorts first
    kinds = [(e.type, e.log_position, e.service_id) for e in rl.entries()]
    assert kinds == [
        (EntryType.TERM, -1, -1),
        (EntryType.SNAPSHOT, 320, CM),
        (EntryType.SNAPSHOT, 640, 2),
        (EntryType.SNAPSHOT, 640, 1),
        (EntryType.SNAPSHOT, 640, 0),
        (EntryType.SNAPSHOT, 640, CM),
    ]


def test_entries_sort_by_term_then_base_then_term_before_snapshot_then_file_order(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 1, 100 * 32, 0)
    rl.append_snapshot(5, 0, 0, 64, 0, CM)  # a snapshot of term 0 written after term 1's entry
    rl.append_term(LOG_ID, 0, 0, 0)
    order = [(e.leadership_term_id, e.type) for e in rl.entries()]
    assert order == [(0, EntryType.TERM), (0, EntryType.SNAPSHOT), (1, EntryType.TERM)]
    # TERM entries of the same term and base keep file order (an invalidated one then its replacement).
    rl.invalidate_entry(0, 2)
    rl.append_term(LOG_ID, 0, 0, 77)
    same = [e for e in rl.entries() if e.leadership_term_id == 0 and e.type is EntryType.TERM]
    assert [(e.entry_index, e.is_valid) for e in same] == [(2, False), (3, True)]


def test_append_snapshot_revalidates_matching_invalidated_entry_in_place(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    snapshot_set(rl, 0, 0, 640, 5, 10, 1)
    assert rl.invalidate_latest_snapshot()
    size = Path(rl.path).stat().st_size
    # The same snapshot taken again (e.g. re-taken during replay) reuses the invalidated records.
    rl.append_snapshot(21, 0, 0, 640, 6, 0)
    rl.append_snapshot(20, 0, 0, 640, 6, CM)
    assert Path(rl.path).stat().st_size == size
    snaps = [e for e in rl.entries() if e.type is EntryType.SNAPSHOT]
    assert [(e.recording_id, e.is_valid, e.entry_index, e.timestamp) for e in snaps] == [
        (21, True, 1, 6),
        (20, True, 2, 6),
    ]
    assert [(e.recording_id, e.is_valid) for e in reopen(rl).entries()][1:] == [(21, True), (20, True)]


def test_append_snapshot_without_matching_invalid_entry_appends(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    snapshot_set(rl, 0, 0, 640, 5, 10, 1)
    rl.invalidate_latest_snapshot()
    rl.append_snapshot(30, 0, 0, 960, 6, CM)  # different position: a new record
    assert len(rl.entries()) == 4
    with pytest.raises(RecordingLogError, match="invalid recording_id"):
        rl.append_snapshot(-1, 0, 0, 960, 6, CM)


def test_ensure_coherent_back_fill_on_empty_log(rl: RecordingLog) -> None:
    # A member that joins term 3 at position 1000 with no history: terms 0..2 get entries too.
    rl.ensure_coherent(LOG_ID, 0, 0, 3, 1024, -1, 42)
    assert terms(rl) == [(0, 0, 0), (1, 0, 0), (2, 0, 1024), (3, 1024, -1)]
    assert all(e.timestamp == 42 for e in rl.entries())


def test_ensure_coherent_on_empty_log_starts_at_initial_term_and_commits(rl: RecordingLog) -> None:
    rl.ensure_coherent(LOG_ID, 2, 512, 2, 512, 2048, 0)
    assert terms(rl) == [(2, 512, 2048)]


def test_ensure_coherent_closes_open_last_term_and_back_fills_skipped_ids(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 2, 128, 0)
    rl.ensure_coherent(LOG_ID, 0, 0, 5, 640, -1, 9)
    assert terms(rl) == [(2, 128, 640), (3, 640, 640), (4, 640, 640), (5, 640, -1)]


def test_ensure_coherent_after_closed_last_term_bases_new_term_at_its_end(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.commit_log_position(0, 320)
    # Aeron uses the last term's end, not the base passed in, once the last term is closed.
    rl.ensure_coherent(LOG_ID, 0, 0, 2, 999_999, 640, 0)
    assert terms(rl) == [(0, 0, 320), (1, 320, 320), (2, 320, 640)]


def test_ensure_coherent_open_last_term_without_base_raises(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    with pytest.raises(RecordingLogError, match="prior term was not committed"):
        rl.ensure_coherent(LOG_ID, 0, 0, 1, -1, -1, 0)


def test_ensure_coherent_existing_term_only_commits_log_position(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.append_term(LOG_ID, 1, 64, 0)
    rl.ensure_coherent(LOG_ID, 0, 0, 1, 64, -1, 0)
    assert terms(rl) == [(0, 0, 64), (1, 64, -1)]
    rl.ensure_coherent(LOG_ID, 0, 0, 1, 64, 960, 0)
    assert terms(rl) == [(0, 0, 64), (1, 64, 960)]


def test_invalidate_latest_snapshot_recovery_plan_falls_back_to_previous(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    snapshot_set(rl, 0, 0, 640, 1, 10, 2)
    rl.append_term(LOG_ID, 1, 1280, 2)
    snapshot_set(rl, 1, 1280, 1920, 3, 20, 2)
    plan = rl.create_recovery_plan(2, extent(2560))
    assert [s.recording_id for s in plan.snapshots] == [20, 21, 22]
    assert rl.invalidate_latest_snapshot()
    invalid = [e for e in rl.entries() if not e.is_valid]
    assert sorted(e.recording_id for e in invalid) == [20, 21, 22]
    plan = reopen(rl).create_recovery_plan(2, extent(2560))
    assert [s.recording_id for s in plan.snapshots] == [10, 11, 12]
    assert [s.service_id for s in plan.snapshots] == [CM, 0, 1]
    assert plan.log is not None and plan.log.start_position == 640


def test_invalidate_latest_snapshot_twice_then_none_left(rl: RecordingLog) -> None:
    assert not rl.invalidate_latest_snapshot()
    rl.append_term(LOG_ID, 0, 0, 0)
    snapshot_set(rl, 0, 0, 320, 1, 10, 1)
    snapshot_set(rl, 0, 0, 640, 1, 20, 1)
    assert rl.invalidate_latest_snapshot() and rl.invalidate_latest_snapshot()
    assert not rl.invalidate_latest_snapshot()
    assert rl.create_recovery_plan(1, extent(960)).snapshots == ()


def test_invalidate_latest_snapshot_requires_term_entry(rl: RecordingLog) -> None:
    rl.append_snapshot(10, 4, 0, 640, 0, CM)
    with pytest.raises(RecordingLogError, match="no matching term for snapshot"):
        rl.invalidate_latest_snapshot()


def test_latest_snapshot_per_service(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    snapshot_set(rl, 0, 0, 320, 1, 10, 2)
    snapshot_set(rl, 0, 0, 640, 1, 20, 2)
    assert rl.latest_snapshot(CM).recording_id == 20
    assert rl.latest_snapshot(0).recording_id == 21
    assert rl.latest_snapshot(1).recording_id == 22
    assert rl.latest_snapshot(2) is None
    rl.invalidate_latest_snapshot()
    assert rl.latest_snapshot(1).recording_id == 12


def test_invalidate_entry_hides_a_term_and_remove_entry_drops_it(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.append_term(LOG_ID, 1, 64, 0)
    rl.invalidate_entry(1, 1)
    assert rl.find_term_entry(1) is None and rl.is_unknown(1)
    assert rl.find_last_term().leadership_term_id == 0
    raw = Path(rl.path).read_bytes()
    assert struct.unpack_from("<I", raw, 64 + 44)[0] == ENTRY_TYPE_INVALID_FLAG | 0
    rl.remove_entry(0, 0)
    assert [e.entry_index for e in rl.entries()] == [1]
    rl = reopen(rl)
    assert [e.entry_index for e in rl.entries()] == [1]  # entry indexes survive removal
    assert rl.next_entry_index == 2
    with pytest.raises(RecordingLogError, match="unknown entry index"):
        rl.remove_entry(0, 0)
    rl.close()


def test_term_queries(rl: RecordingLog) -> None:
    assert rl.find_last_term() is None and rl.find_last_term_recording_id() == -1
    rl.append_term(LOG_ID, 0, 0, 111)
    rl.append_term(LOG_ID, 1, 64, 222)
    assert rl.get_term_timestamp(1) == 222 and rl.get_term_timestamp(7) == -1
    assert rl.find_last_term().leadership_term_id == 1
    assert rl.find_last_term_recording_id() == LOG_ID
    with pytest.raises(RecordingLogError, match="unknown leadership_term_id=7"):
        rl.get_term_entry(7)


# ---------------------------------------------------------------- c.10 recovery plan


def test_recovery_plan_of_empty_log(rl: RecordingLog) -> None:
    assert rl.create_recovery_plan(1, extent(0)) == RecoveryPlan((), None, -1, 0, 0, 0)


def test_recovery_plan_log_only_open_term(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.append_term(LOG_ID, 1, 640, 0)
    plan = rl.create_recovery_plan(1, extent(1000 * 32))
    assert plan.snapshots == ()
    assert plan.log == Log(LOG_ID, 1, 640, -1, 0, 32000)
    assert (plan.last_leadership_term_id, plan.last_term_base_log_position) == (1, 640)
    assert plan.appended_log_position == 32000  # what is on disk
    assert plan.committed_log_position == 0  # the open term's end is unknown and there is no snapshot


def test_recovery_plan_with_snapshot_and_closed_term(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    snapshot_set(rl, 0, 0, 640, 7, 10, 2)
    rl.commit_log_position(0, 960)
    plan = rl.create_recovery_plan(2, extent(1280))
    assert plan.snapshots == (
        Snapshot(10, 0, 0, 640, 7, CM),
        Snapshot(11, 0, 0, 640, 7, 0),
        Snapshot(12, 0, 0, 640, 7, 1),
    )
    assert plan.log == Log(LOG_ID, 0, 0, 960, 640, 1280)  # replay starts at the snapshot
    assert (plan.appended_log_position, plan.committed_log_position) == (1280, 960)


def test_recovery_plan_open_term_commits_from_snapshot(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    snapshot_set(rl, 0, 0, 640, 7, 10, 1)
    plan = rl.create_recovery_plan(1, extent(1280))
    assert plan.committed_log_position == 640


def test_recovery_plan_snapshot_without_log_term(rl: RecordingLog) -> None:
    rl.append_snapshot(10, 3, 320, 640, 0, CM)
    plan = rl.create_recovery_plan(0, extent(0))
    assert plan.log is None
    assert (plan.last_leadership_term_id, plan.last_term_base_log_position) == (3, 320)
    assert (plan.appended_log_position, plan.committed_log_position) == (640, 640)


def test_recovery_plan_missing_service_snapshot_is_an_error(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    snapshot_set(rl, 0, 0, 640, 7, 10, 1)
    with pytest.raises(RecordingLogError, match="snapshot missing for service 1"):
        rl.create_recovery_plan(2, extent(640))


def test_recovery_plan_reads_the_recording_store(rl: RecordingLog, tmp_path: Path) -> None:
    with RecordingStore.open(FileStorage(tmp_path / "archive" / "log")) as store:
        for _ in range(5):
            store.append_entry(b"x" * 20, 0)
        rl.append_term(store.recording_id, 0, 0, 0)
        plan = rl.create_recovery_plan(1, store)
        assert plan.appended_log_position == store.stop_position == 320
        assert plan.log is not None and plan.log.stop_position == 320


# ---------------------------------------------------------------- truncation (e.6)


def test_truncate_terms_after_commits_last_term_end_like_aeron(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.append_term(LOG_ID, 1, 640, 0)  # open: this member appended up to, say, 1280
    assert rl.truncate_terms_after(960) == []
    assert terms(rl) == [(0, 0, 640), (1, 640, 960)]


def test_truncate_terms_after_removes_terms_starting_beyond_position(rl: RecordingLog) -> None:
    lines: list[str] = []
    rl = RecordingLog.open(FileStorage(Path(rl.path).parent), log=lines.append)
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.append_term(LOG_ID, 1, 640, 0)
    rl.append_term(LOG_ID, 2, 1280, 0)
    removed = rl.truncate_terms_after(320)
    assert [e.leadership_term_id for e in removed] == [2, 1]
    assert terms(rl) == [(0, 0, 320)]
    assert terms(reopen(rl)) == [(0, 0, 320)]
    assert lines


# ---------------------------------------------------------------- damage


def test_torn_last_record_is_truncated_on_open(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.append_term(LOG_ID, 1, 64, 0)
    rl.close()
    with open(Path(rl.path), "ab") as f:
        f.write(b"\x01" * 30)  # a crash part-way through a third record
    lines: list[str] = []
    rl2 = RecordingLog.open(FileStorage(Path(rl.path).parent), log=lines.append)
    assert terms(rl2) == [(0, 0, 64), (1, 64, -1)]
    assert Path(rl2.path).stat().st_size == 128
    assert any("partial record" in line and "truncating" in line for line in lines)
    rl2.append_term(LOG_ID, 2, 128, 0)  # appends land on the 64-byte grid again
    assert reopen(rl2).find_term_entry(2).file_offset == 128


def test_unknown_entry_type_is_refused(rl: RecordingLog) -> None:
    rl.append_term(LOG_ID, 0, 0, 0)
    rl.close()
    raw = bytearray(Path(rl.path).read_bytes())
    struct.pack_into("<i", raw, 44, 7)
    Path(rl.path).write_bytes(bytes(raw))
    with pytest.raises(RecordingLogError, match="unknown entry type"):
        RecordingLog.open(FileStorage(Path(rl.path).parent))


def test_open_without_create(tmp_path: Path) -> None:
    with pytest.raises(RecordingLogError, match="does not exist"):
        RecordingLog(FileStorage(tmp_path / "nowhere"), create_new=False)
