"""Ports of Aeron's ``RecordingLogTest`` (aeron-cluster/src/test/java/io/aeron/cluster) onto
clusterlab.core.consensus.recording_log.RecordingLog.

Aeron's ``Entry(recordingId, leadershipTermId, termBaseLogPosition, logPosition, timestamp, serviceId,
type, archiveEndpoint, isValid, entryIndex)`` is compared field by field (our Entry also carries its
file offset, which Aeron's equality ignores). ``SERVICE_ID`` is the consensus module's service id
(-1), as in Aeron's test. Standby-snapshot tests are listed in docs/aeron-parity.md ("needs standby
snapshots")."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE, SERVICE_ID_CONSENSUS_MODULE
from clusterlab.core.consensus.recording_log import (
    Entry,
    EntryType,
    RecordingLog,
    RecordingLogError,
    is_invalid_snapshot,
)
from clusterlab.core.runtime.storage import FileStorage

SERVICE_ID = SERVICE_ID_CONSENSUS_MODULE
RECORDING_ID = 9234236
TERM, SNAPSHOT = EntryType.TERM, EntryType.SNAPSHOT


def fields(e: Entry) -> tuple[object, ...]:
    """Aeron's Entry equality: every field but the file offset."""
    return (
        e.recording_id,
        e.leadership_term_id,
        e.term_base_log_position,
        e.log_position,
        e.timestamp,
        e.service_id,
        e.type,
        e.is_valid,
        e.entry_index,
    )


def aeron_entry(
    recording_id: int,
    leadership_term_id: int,
    term_base_log_position: int,
    log_position: int,
    timestamp: int,
    service_id: int,
    entry_type: EntryType,
    is_valid: bool,
    entry_index: int,
) -> tuple[object, ...]:
    """The fields of Aeron's ``new RecordingLog.Entry(...)`` (archive endpoint null) in our order."""
    return (
        recording_id,
        leadership_term_id,
        term_base_log_position,
        log_position,
        timestamp,
        service_id,
        entry_type,
        is_valid,
        entry_index,
    )


def extent_of(start: int = 0, stop: int = 1000):  # type: ignore[no-untyped-def]
    """A recording-extent function standing in for Aeron's mocked AeronArchive.listRecording."""
    return lambda recording_id: (start, stop)


def test_should_create_new_index(tmp_path: Path) -> None:
    """RecordingLogTest.shouldCreateNewIndex"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        assert len(rl.entries()) == 0


def test_should_append_and_then_reload_latest_snapshot(tmp_path: Path) -> None:
    """RecordingLogTest.shouldAppendAndThenReloadLatestSnapshot"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_snapshot(1, 3, 2, 777, 4, SERVICE_ID)
    with RecordingLog(FileStorage(tmp_path)) as rl:
        assert len(rl.entries()) == 1
        snapshot = rl.latest_snapshot(SERVICE_ID)
        assert snapshot is not None
        assert fields(snapshot) == aeron_entry(1, 3, 2, 777, 4, SERVICE_ID, SNAPSHOT, True, 0)


def test_should_ignore_incomplete_snapshot_in_recovery_plan(tmp_path: Path) -> None:
    """RecordingLogTest.shouldIgnoreIncompleteSnapshotInRecoveryPlan"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_snapshot(1, 1, 0, 777, 0, 0)
        rl.append_snapshot(2, 1, 0, 777, 0, SERVICE_ID)
        rl.append_snapshot(3, 1, 0, 888, 0, 0)
    with RecordingLog(FileStorage(tmp_path)) as rl:
        assert len(rl.entries()) == 3
        plan = rl.create_recovery_plan(1, extent_of())
        assert len(plan.snapshots) == 2
        assert (plan.snapshots[0].service_id, plan.snapshots[0].recording_id) == (SERVICE_ID, 2)
        assert (plan.snapshots[1].service_id, plan.snapshots[1].recording_id) == (0, 1)


def test_should_ignore_invalid_mid_snapshot_in_recovery_plan(tmp_path: Path) -> None:
    """RecordingLogTest.shouldIgnoreInvalidMidSnapshotInRecoveryPlan"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        for i, position in enumerate((777, 888, 999)):
            rl.append_snapshot(2 * i + 1, 1, 0, position, 0, 0)
            rl.append_snapshot(2 * i + 2, 1, 0, position, 0, SERVICE_ID)
        rl.invalidate_entry(1, 2)
        rl.invalidate_entry(1, 3)
    with RecordingLog(FileStorage(tmp_path)) as rl:
        plan = rl.create_recovery_plan(1, extent_of())
        assert len(plan.snapshots) == 2
        assert (plan.snapshots[0].service_id, plan.snapshots[0].recording_id) == (SERVICE_ID, 6)
        assert (plan.snapshots[1].service_id, plan.snapshots[1].recording_id) == (0, 5)


def test_should_ignore_invalid_term_in_recovery_plan(tmp_path: Path) -> None:
    """RecordingLogTest.shouldIgnoreInvalidTermInRecoveryPlan"""
    removed_leadership_term = 11
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(0, 9, 444, 0)
        rl.append_term(0, 10, 666, 0)
        rl.append_snapshot(1, 10, 666, 777, 0, 0)
        rl.append_snapshot(2, 10, 666, 777, 0, SERVICE_ID)
        rl.append_snapshot(3, 10, 666, 888, 0, 0)
        rl.append_snapshot(4, 10, 666, 888, 0, SERVICE_ID)
        rl.append_term(0, removed_leadership_term, 999, 0)
        last = rl.find_last_term()
        assert last is not None and last.term_base_log_position == 999
        rl.invalidate_entry(removed_leadership_term, 6)
    with RecordingLog(FileStorage(tmp_path)) as rl:
        plan = rl.create_recovery_plan(1, extent_of())
        assert plan.log is not None
        assert (plan.log.recording_id, plan.log.leadership_term_id, plan.log.term_base_log_position) == (0, 10, 666)
        last = rl.find_last_term()
        assert last is not None and last.recording_id == 0
        assert rl.find_last_term_recording_id() == 0
        assert rl.is_unknown(removed_leadership_term)
        assert rl.get_term_timestamp(removed_leadership_term) == NULL_VALUE
        with pytest.raises(RecordingLogError):
            rl.get_term_entry(removed_leadership_term)
        with pytest.raises(RecordingLogError):
            rl.commit_log_position(removed_leadership_term, 99)


def test_should_append_and_then_commit_term_position(tmp_path: Path) -> None:
    """RecordingLogTest.shouldAppendAndThenCommitTermPosition"""
    new_position = 9999
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(1, 1111, 2222, 3333)
        rl.commit_log_position(1111, new_position)
    with RecordingLog(FileStorage(tmp_path)) as rl:
        assert len(rl.entries()) == 1
        assert rl.entries()[0].log_position == new_position


def test_should_remove_entry(tmp_path: Path) -> None:
    """RecordingLogTest.shouldRemoveEntry"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(1, 3, 2, 4)
        rl.append_term(1, 4, 3, 5)
        rl.remove_entry(4, rl.next_entry_index - 1)
        assert len(rl.entries()) == 1
    with RecordingLog(FileStorage(tmp_path)) as rl:
        assert len(rl.entries()) == 1
        assert rl.next_entry_index == 2


def test_should_correctly_order_snapshots(tmp_path: Path) -> None:
    """RecordingLogTest.shouldCorrectlyOrderSnapshots: a set is [module, service 0, 1, 2] in the plan
    (Aeron's addSnapshots, here through create_recovery_plan on entries appended services-first)."""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(0, 0, 0, 0)
        rl.append_snapshot(4, 0, 0, 100, 0, 2)
        rl.append_snapshot(5, 0, 0, 100, 0, 1)
        rl.append_snapshot(6, 0, 0, 100, 0, 0)
        rl.append_snapshot(7, 0, 0, 100, 0, SERVICE_ID)
        plan = rl.create_recovery_plan(3, extent_of())
    assert [s.service_id for s in plan.snapshots] == [SERVICE_ID, 0, 1, 2]
    assert [s.recording_id for s in plan.snapshots] == [7, 6, 5, 4]


def test_should_invalidate_latest_snapshot(tmp_path: Path) -> None:
    """RecordingLogTest.shouldInvalidateLatestSnapshot"""
    term_base, increment = 0, 640
    term, position, timestamp = 7, 0, 1000
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(1, term, term_base, timestamp)
        timestamp += 1
        position += increment
        rl.append_snapshot(2, term, term_base, position, timestamp, 0)
        rl.append_snapshot(3, term, term_base, position, timestamp, SERVICE_ID)
        timestamp += 1
        position += increment
        rl.append_snapshot(4, term, term_base, position, timestamp, 0)
        rl.append_snapshot(5, term, term_base, position, timestamp, SERVICE_ID)
        term += 1
        rl.append_term(1, term, position, timestamp)
        assert rl.invalidate_latest_snapshot()
        assert len(rl.entries()) == 6
    with RecordingLog(FileStorage(tmp_path)) as rl:
        entries = rl.entries()
        assert len(entries) == 6
        assert [e.is_valid for e in entries] == [True, True, True, False, False, True]
        assert rl.latest_snapshot(0) == entries[1]
        assert rl.latest_snapshot(SERVICE_ID) == entries[2]
        assert rl.invalidate_latest_snapshot()
        assert len(rl.entries()) == 6
    with RecordingLog(FileStorage(tmp_path)) as rl:
        entries = rl.entries()
        assert [e.is_valid for e in entries] == [True, False, False, False, False, True]
        assert not rl.invalidate_latest_snapshot()
        assert rl.get_term_entry(term) == entries[5]


def test_should_recover_snapshots_mid_log_marked_invalid(tmp_path: Path) -> None:
    """RecordingLogTest.shouldRecoverSnapshotsMidLogMarkedInvalid"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        for i, position in enumerate((555, 777, 888)):
            rl.append_snapshot(2 * i + 1, 1, 10, position, 0, 0)
            rl.append_snapshot(2 * i + 2, 1, 10, position, 0, SERVICE_ID)
        rl.invalidate_entry(1, 2)
        rl.invalidate_entry(1, 3)
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_snapshot(7, 1, 10, 777, 555, 0)
        rl.append_snapshot(8, 1, 10, 777, -999, SERVICE_ID)
        entries = rl.entries()
        assert len(entries) == 6
        assert entries[2].is_valid and entries[2].recording_id == 7
        assert entries[3].is_valid and entries[3].recording_id == 8
    with RecordingLog(FileStorage(tmp_path)) as rl:
        entries = rl.entries()
        assert len(entries) == 6
        assert entries[2].is_valid and entries[2].recording_id == 7
        assert entries[3].is_valid and entries[3].recording_id == 8


def test_should_recover_snapshots_last_in_log_marked_with_invalid(tmp_path: Path) -> None:
    """RecordingLogTest.shouldRecoverSnapshotsLastInLogMarkedWithInvalid"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_snapshot(-10, 1, 0, 777, 0, 0)
        rl.append_snapshot(-11, 1, 0, 777, 0, SERVICE_ID)
        rl.append_term(1, 2, 10, 0)
        rl.append_snapshot(-12, 2, 10, 888, 0, 0)
        rl.append_snapshot(-13, 2, 10, 888, 0, SERVICE_ID)
        rl.append_term(1, 3, 20, 0)
        rl.append_snapshot(-14, 3, 20, 999, 0, 0)
        rl.append_snapshot(-15, 3, 20, 999, 0, SERVICE_ID)
        rl.invalidate_latest_snapshot()
        rl.invalidate_latest_snapshot()
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_snapshot(1, 2, 10, 888, 0, 0)
        rl.append_snapshot(2, 2, 10, 888, 0, SERVICE_ID)
        rl.append_snapshot(3, 3, 20, 999, 0, 0)
        rl.append_snapshot(4, 3, 20, 999, 0, SERVICE_ID)
        entries = rl.entries()
        assert len(entries) == 8
        assert entries[2].is_valid
        assert entries[3].recording_id == 1 and entries[3].is_valid
        assert entries[4].recording_id == 2 and entries[4].is_valid
        assert entries[6].recording_id == 3 and entries[5].is_valid
        assert entries[7].recording_id == 4


def test_should_not_allow_invalidate_of_snapshot_without_parent_term(tmp_path: Path) -> None:
    """RecordingLogTest.shouldNotAllowInvalidateOfSnapshotWithoutParentTerm"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_snapshot(-10, 1, 0, 777, 0, 0)
        rl.append_snapshot(-11, 1, 0, 777, 0, SERVICE_ID)
        with pytest.raises(RecordingLogError, match="no matching term for snapshot: leadership_term_id=1"):
            rl.invalidate_latest_snapshot()


def test_should_fail_to_recover_snapshots_marked_invalid_if_fields_do_not_match_correctly(tmp_path: Path) -> None:
    """RecordingLogTest.shouldFailToRecoverSnapshotsMarkedInvalidIfFieldsDoNotMatchCorrectly"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(10, 0, 0, 0)
        rl.append_term(10, 1, 500, 0)
        for i, position in enumerate((777, 888, 999)):
            rl.append_snapshot(2 * i, 1, 500, position, 0, 0)
            rl.append_snapshot(2 * i + 1, 1, 500, position, 0, SERVICE_ID)
        rl.append_term(10, 2, 1000, 5)
        assert rl.invalidate_latest_snapshot()
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_snapshot(6, 2, 500, 999, 0, SERVICE_ID)
        rl.append_snapshot(7, 1, 501, 999, 0, SERVICE_ID)
        rl.append_snapshot(8, 1, 500, 998, 0, SERVICE_ID)
        rl.append_snapshot(9, 1, 500, 999, 0, 42)
        entries = [fields(e) for e in rl.entries()]
        assert entries[6] == aeron_entry(8, 1, 500, 998, 0, SERVICE_ID, SNAPSHOT, True, 11)
        assert entries[7] == aeron_entry(9, 1, 500, 999, 0, 42, SNAPSHOT, True, 12)
        assert entries[8] == aeron_entry(4, 1, 500, 999, 0, 0, SNAPSHOT, False, 6)
        assert entries[9] == aeron_entry(5, 1, 500, 999, 0, SERVICE_ID, SNAPSHOT, False, 7)
        assert entries[10] == aeron_entry(7, 1, 501, 999, 0, SERVICE_ID, SNAPSHOT, True, 10)
        assert entries[11] == aeron_entry(6, 2, 500, 999, 0, SERVICE_ID, SNAPSHOT, True, 9)
        assert entries[12] == aeron_entry(10, 2, 1000, NULL_POSITION, 5, NULL_VALUE, TERM, True, 8)
        latest = rl.latest_snapshot(SERVICE_ID)
        assert latest is not None and latest.recording_id == 6


def test_should_append_term_with_leadership_term_id_out_of_order(tmp_path: Path) -> None:
    """RecordingLogTest.shouldAppendTermWithLeadershipTermIdOutOfOrder"""
    expected = [
        aeron_entry(0, 0, 0, 700, 0, NULL_VALUE, TERM, True, 0),
        aeron_entry(0, 1, 700, 2048, 0, NULL_VALUE, TERM, True, 3),
        aeron_entry(0, 2, 2048, 5000, 0, NULL_VALUE, TERM, True, 1),
        aeron_entry(0, 3, 5000, NULL_POSITION, 100, NULL_VALUE, TERM, True, 2),
    ]
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(0, 0, 0, 0)
        rl.append_term(0, 2, 2048, 0)
        rl.append_term(0, 3, 5000, 100)
        rl.append_term(0, 1, 700, 0)
        assert rl.next_entry_index == 4
        entries = rl.entries()
        assert [fields(e) for e in entries] == expected
        for term in range(4):
            assert rl.get_term_entry(term) == entries[term]
    with RecordingLog(FileStorage(tmp_path)) as rl:
        assert [fields(e) for e in rl.entries()] == expected


def test_should_append_snapshot_with_leadership_term_id_out_of_order(tmp_path: Path) -> None:
    """RecordingLogTest.shouldAppendSnapshotWithLeadershipTermIdOutOfOrder"""
    expected = [
        aeron_entry(3, 1, 0, 200, 0, NULL_VALUE, TERM, True, 0),
        aeron_entry(10, 1, 0, 56, 42, SERVICE_ID, SNAPSHOT, True, 1),
        aeron_entry(3, 2, 200, 2048, 555, NULL_VALUE, TERM, True, 2),
        aeron_entry(11, 2, 200, 250, 100, 1, SNAPSHOT, True, 4),
        aeron_entry(100, 2, 200, 250, 100, 0, SNAPSHOT, True, 5),
        aeron_entry(3, 3, 2048, NULL_POSITION, 0, NULL_VALUE, TERM, True, 3),
    ]
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(3, 1, 0, 0)
        rl.append_snapshot(10, 1, 0, 56, 42, SERVICE_ID)
        rl.invalidate_entry(1, 1)
        rl.commit_log_position(1, 200)
        rl.append_term(3, 2, 200, 555)
        rl.commit_log_position(2, 2048)
        rl.append_term(3, 3, 2048, 0)
        rl.append_snapshot(11, 2, 200, 250, 100, 1)
        rl.append_snapshot(10, 1, 0, 56, 42, SERVICE_ID)
        rl.append_snapshot(100, 2, 200, 250, 100, 0)
        entries = rl.entries()
        assert [fields(e) for e in entries] == expected
        assert rl.next_entry_index == 6
        assert rl.get_term_entry(1) == entries[0]
        assert rl.find_term_entry(0) is None
        assert rl.get_term_entry(2) == entries[2]
        assert rl.get_term_entry(3) == entries[5]
        assert rl.latest_snapshot(SERVICE_ID) == entries[1]
    with RecordingLog(FileStorage(tmp_path)) as rl:
        assert [fields(e) for e in rl.entries()] == expected


def test_append_term_should_reject_null_value_as_recording_id(tmp_path: Path) -> None:
    """RecordingLogTest.appendTermShouldRejectNullValueAsRecordingId"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        with pytest.raises(RecordingLogError, match="invalid recording_id=-1"):
            rl.append_term(NULL_VALUE, 0, 0, 0)
        assert len(rl.entries()) == 0


def test_append_snapshot_should_reject_null_value_as_recording_id(tmp_path: Path) -> None:
    """RecordingLogTest.appendSnapshotShouldRejectNullValueAsRecordingId"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        with pytest.raises(RecordingLogError, match="invalid recording_id=-1"):
            rl.append_snapshot(NULL_VALUE, 0, 0, 0, 0, 0)
        assert len(rl.entries()) == 0


def test_append_term_should_not_accept_different_recording_ids(tmp_path: Path) -> None:
    """RecordingLogTest.appendTermShouldNotAcceptDifferentRecordingIds"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(42, 0, 0, 0)
        with pytest.raises(RecordingLogError, match="invalid TERM recording_id=21, expected 42"):
            rl.append_term(21, 1, 0, 0)
        assert len(rl.entries()) == 1
    with RecordingLog(FileStorage(tmp_path)) as rl:
        with pytest.raises(RecordingLogError, match="invalid TERM recording_id=-5, expected 42"):
            rl.append_term(-5, -5, -5, -5)
        assert len(rl.entries()) == 1


def test_append_term_should_only_allow_a_single_valid_term_for_the_same_leadership_term_id(tmp_path: Path) -> None:
    """RecordingLogTest.appendTermShouldOnlyAllowASingleValidTermForTheSameLeadershipTermId"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(8, 0, 0, 0)
        rl.append_term(8, 1, 1, 1)
        rl.invalidate_entry(0, 0)
        rl.append_term(8, 0, 100, 100)
        with pytest.raises(RecordingLogError, match="duplicate TERM entry for leadership_term_id=1"):
            rl.append_term(8, 1, 5, 5)
        assert len(rl.entries()) == 3


@pytest.mark.parametrize(
    ("initial_log_leadership_term_id", "initial_term_base_log_position", "leadership_term_id"),
    [(0, 0, 4), (2, 500, 4), (100, 1_000_000, 200)],
)
def test_should_create_initial_empty_terms_with_an_empty_recording_log(
    tmp_path: Path, initial_log_leadership_term_id: int, initial_term_base_log_position: int, leadership_term_id: int
) -> None:
    """RecordingLogTest.shouldCreateInitialEmptyTermsWithAnEmptyRecordingLog"""
    log_position = initial_term_base_log_position + 500
    timestamp_ms = 10_000
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.ensure_coherent(
            RECORDING_ID,
            initial_log_leadership_term_id,
            initial_term_base_log_position,
            leadership_term_id,
            initial_term_base_log_position,
            log_position,
            timestamp_ms,
        )
        for term in range(initial_log_leadership_term_id + 1, leadership_term_id):
            e = rl.find_term_entry(term)
            assert e is not None
            assert (e.term_base_log_position, e.log_position, e.timestamp) == (
                initial_term_base_log_position,
                initial_term_base_log_position,
                timestamp_ms,
            )
        e = rl.find_term_entry(leadership_term_id)
        assert e is not None
        assert (e.term_base_log_position, e.log_position, e.timestamp) == (
            initial_term_base_log_position,
            log_position,
            timestamp_ms,
        )


def test_should_not_create_initial_term_with_minus_one_term_id(tmp_path: Path) -> None:
    """RecordingLogTest.shouldNotCreateInitialTermWithMinusOneTermId"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.ensure_coherent(RECORDING_ID, -1, 0, 4, 0, 500, 1)
        assert rl.entries()
        assert all(e.leadership_term_id != -1 for e in rl.entries())


@pytest.mark.parametrize(
    ("initial_log_leadership_term_id", "initial_term_base_log_position", "leadership_term_id"),
    [(0, 0, 4), (2, 500, 4), (100, 1_000_000, 200)],
)
def test_should_back_fill_empty_leadership_terms_in_a_nonempty_recording_log(
    tmp_path: Path, initial_log_leadership_term_id: int, initial_term_base_log_position: int, leadership_term_id: int
) -> None:
    """RecordingLogTest.shouldBackFillEmptyLeadershipTermsInANonemptyRecordingLog"""
    term_base_log_position = initial_term_base_log_position + 100
    log_position = initial_term_base_log_position + 500
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(RECORDING_ID, initial_log_leadership_term_id, initial_term_base_log_position, 1)
        rl.ensure_coherent(
            RECORDING_ID,
            initial_log_leadership_term_id,
            initial_term_base_log_position,
            leadership_term_id,
            term_base_log_position,
            log_position,
            1,
        )
        for term in range(initial_log_leadership_term_id + 1, leadership_term_id):
            e = rl.find_term_entry(term)
            assert e is not None
            assert (e.term_base_log_position, e.log_position) == (term_base_log_position, term_base_log_position)
        e = rl.find_term_entry(leadership_term_id)
        assert e is not None
        assert (e.term_base_log_position, e.log_position) == (term_base_log_position, log_position)


@pytest.mark.parametrize(
    ("initial_log_leadership_term_id", "initial_term_base_log_position", "leadership_term_id"),
    [(0, 0, 4), (2, 500, 4), (100, 1_000_000, 200)],
)
def test_should_complete_existing_term(
    tmp_path: Path, initial_log_leadership_term_id: int, initial_term_base_log_position: int, leadership_term_id: int
) -> None:
    """RecordingLogTest.shouldCompleteExistingTerm"""
    term_base_log_position = initial_term_base_log_position + 100
    log_position = initial_term_base_log_position + 500
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(RECORDING_ID, leadership_term_id, term_base_log_position, 1)
        rl.ensure_coherent(
            RECORDING_ID,
            initial_log_leadership_term_id,
            initial_term_base_log_position,
            leadership_term_id,
            term_base_log_position,
            log_position,
            1,
        )
        e = rl.find_term_entry(leadership_term_id)
        assert e is not None
        assert (e.term_base_log_position, e.log_position) == (term_base_log_position, log_position)
        assert len(rl.entries()) == 1


def test_should_back_fill_prior_term(tmp_path: Path) -> None:
    """RecordingLogTest.shouldBackFillPriorTerm"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.ensure_coherent(RECORDING_ID, 0, 0, 1, 10_000, -1, 1)
        e0 = rl.find_term_entry(0)
        assert e0 is not None
        assert (e0.term_base_log_position, e0.log_position) == (0, 10_000)
        e1 = rl.find_term_entry(1)
        assert e1 is not None
        assert (e1.leadership_term_id, e1.term_base_log_position, e1.log_position) == (1, 10_000, -1)
        assert len(rl.entries()) == 2


def test_should_throw_if_last_term_is_unfinished_and_term_base_log_position_is_not_specified(tmp_path: Path) -> None:
    """RecordingLogTest.shouldThrowIfLastTermIsUnfinishedAndTermBaseLogPositionIsNotSpecified"""
    with RecordingLog(FileStorage(tmp_path)) as rl:
        rl.append_term(RECORDING_ID, 3, 0, 1)
        with pytest.raises(RecordingLogError, match="prior term was not committed"):
            rl.ensure_coherent(RECORDING_ID, 0, 0, 4, NULL_POSITION, 500, 1)


@pytest.mark.parametrize(("value", "name"), [(0, "TERM"), (1, "SNAPSHOT")])
def test_type_as_string(value: int, name: str) -> None:
    """RecordingLogTest.typeAsString (the defined types; an unknown type is refused when the file is
    read, see tests/unit/test_recording_log.py::test_unknown_entry_type_is_refused)."""
    assert EntryType(value).name == name


def test_entry_to_string() -> None:
    """RecordingLogTest.entryToString (our describe(), every field Aeron's toString names)."""
    e = Entry(42, 5, 1024, 701, 1_000_000_000_000, 16, SNAPSHOT, 2, True)
    assert e.describe() == (
        "SNAPSHOT #2 recording=42 term=5 base=1024 log_position=701 timestamp=1000000000000 service=16"
    )
    assert "INVALID" in Entry(42, 5, 1024, 701, 1, 16, SNAPSHOT, 2, False).describe()


def test_should_handle_entries_straddling_page_boundary(tmp_path: Path) -> None:
    """RecordingLogTest.shouldHandleEntriesStraddlingPageBoundary: enough entries that the file
    crosses a 4 KiB page; every one reloads intact."""
    count = 4096 // 64 + 10
    with RecordingLog(FileStorage(tmp_path)) as rl:
        for term in range(count):
            rl.append_term(1, term, term * 100, term)
    with RecordingLog(FileStorage(tmp_path)) as rl:
        entries = rl.entries()
        assert len(entries) == count
        for term, e in enumerate(entries):
            assert (e.leadership_term_id, e.term_base_log_position, e.timestamp) == (term, term * 100, term)
            expected_end = (term + 1) * 100 if term + 1 < count else NULL_POSITION
            assert e.log_position == expected_end


def test_should_determine_if_snapshot_is_invalid() -> None:
    """RecordingLogTest.shouldDetermineIfSnapshotIsInvalid"""
    valid_snapshot = Entry(42, 5, 1024, 701, 1_000_000_000_000, 16, SNAPSHOT, 2, True)
    invalid_snapshot = Entry(42, 5, 1024, 701, 1_000_000_000_000, 16, SNAPSHOT, 2, False)
    term = Entry(42, 5, 1024, 701, 1_000_000_000_000, 16, TERM, 2, True)
    assert not is_invalid_snapshot(valid_snapshot)
    assert is_invalid_snapshot(invalid_snapshot)
    assert not is_invalid_snapshot(term)
