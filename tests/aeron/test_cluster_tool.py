"""Ports of Aeron's ``ClusterToolTest`` (aeron-system-tests/src/test/java/io/aeron/cluster) onto
``clusterlab tool`` (clusterlab/cli/tool.py over clusterlab.harness.cluster_tool): the recording-log
commands on a member directory, and describe-latest-snapshot / errors / counters / the test hooks on
real member processes (LocalCluster). Each test's docstring names the Aeron test; the assertions are
Aeron's. Aeron's ``new RecordingLog(clusterDir, true)`` is our RecordingLog on a FileStorage."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from clusterlab.core.consensus.context import SERVICE_ID_CONSENSUS_MODULE, ConsensusModuleState, ElectionState
from clusterlab.core.consensus.recording_log import RECORDING_LOG_FILE_NAME, Entry, RecordingLog
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.harness.cluster_tool import seed_recording_log_from_snapshot, sort_recording_log

from clusterlab.cli import main
from tests.aeron.test_recording_log import fields

SERVICE_ID = SERVICE_ID_CONSENSUS_MODULE


def recording_log(directory: Path) -> RecordingLog:
    return RecordingLog(FileStorage(directory))


def entries_of(directory: Path) -> list[tuple[object, ...]]:
    with recording_log(directory) as log:
        return [fields(e) for e in log.entries()]


def renumbered(e: Entry, entry_index: int, *, zero_positions: bool = False) -> tuple[object, ...]:
    """Aeron's ``new RecordingLog.Entry(...)`` built from an entry in the tests (positions 0 when seeding)."""
    base = 0 if zero_positions else e.term_base_log_position
    position = 0 if zero_positions else e.log_position
    return (
        e.recording_id,
        e.leadership_term_id,
        base,
        position,
        e.timestamp,
        e.service_id,
        e.type,
        e.is_valid,
        entry_index,
    )


def test_sort_recording_log_is_a_no_op_if_record_log_is_empty(tmp_path: Path) -> None:
    """ClusterToolTest.sortRecordingLogIsANoOpIfRecordLogIsEmpty"""
    recording_log(tmp_path).close()
    log_file = tmp_path / RECORDING_LOG_FILE_NAME
    assert log_file.exists()
    assert sort_recording_log(tmp_path) is False
    assert log_file.read_bytes() == b""


def test_sort_recording_log_is_a_no_op_if_record_does_not_exist(tmp_path: Path) -> None:
    """ClusterToolTest.sortRecordingLogIsANoOpIfRecordDoesNotExist"""
    assert sort_recording_log(tmp_path) is False
    assert not (tmp_path / RECORDING_LOG_FILE_NAME).exists()


def test_sort_recording_log_is_a_no_op_if_record_log_is_already_sorted(tmp_path: Path) -> None:
    """ClusterToolTest.sortRecordingLogIsANoOpIfRecordLogIsAlreadySorted"""
    with recording_log(tmp_path) as log:
        log.append_term(21, 0, 100, 100)
        log.append_snapshot(0, 0, 100, 0, 200, 0)
        log.append_term(21, 1, 1024, 200)
    log_file = tmp_path / RECORDING_LOG_FILE_NAME
    original = log_file.read_bytes()
    assert original != b""
    assert sort_recording_log(tmp_path) is False
    assert log_file.read_bytes() == original


def test_sort_recording_log_should_rearrange_data_on_disc(tmp_path: Path) -> None:
    """ClusterToolTest.sortRecordingLogShouldRearrangeDataOnDisc"""
    with recording_log(tmp_path) as log:
        log.append_term(21, 2, 100, 100)
        log.append_snapshot(1, 2, 50, 60, 42, 89)
        log.append_term(21, 1, 1024, 200)
        log.append_snapshot(0, 0, 0, 0, 200, 0)
        sorted_entries = []
        for i, e in enumerate(log.entries()):
            assert e.entry_index != i
            sorted_entries.append(renumbered(e, i))
    log_file = tmp_path / RECORDING_LOG_FILE_NAME
    original = log_file.read_bytes()
    assert original != b""
    assert sort_recording_log(tmp_path) is True
    assert log_file.read_bytes() != original
    assert os.listdir(tmp_path) == [RECORDING_LOG_FILE_NAME]
    assert entries_of(tmp_path) == sorted_entries


def test_seed_recording_log_from_snapshot_should_delete_original_recording_log_file_if_there_are_no_valid_snapshots(
    tmp_path: Path,
) -> None:
    """ClusterToolTest.seedRecordingLogFromSnapshotShouldDeleteOriginalRecordingLogFileIfThereAreNoValidSnapshots"""
    log_file = tmp_path / RECORDING_LOG_FILE_NAME
    backup_file = tmp_path / (RECORDING_LOG_FILE_NAME + ".bak")
    with recording_log(tmp_path) as log:
        log.append_term(1, 1, 0, 100)
        log.append_snapshot(1, 1, 1000, 256, 300, 0)
        log.append_snapshot(1, 1, 1000, 256, 300, SERVICE_ID)
        log.append_term(1, 2, 2000, 400)
        log.append_snapshot(2, 5, 56, 111, 500, 5)
        assert log.invalidate_latest_snapshot()
    assert log_file.exists()
    assert not backup_file.exists()
    contents = log_file.read_bytes()
    seed_recording_log_from_snapshot(tmp_path)
    assert not log_file.exists()
    assert backup_file.exists()
    assert backup_file.read_bytes() == contents


def _seed_from_snapshot(tmp_path: Path, truncate: object) -> None:
    """Aeron's ``testSeedRecordingLogFromSnapshot``: a stale backup is replaced, the latest valid set
    (term 2: service 1, service 0, consensus module) is kept at positions 0, the backup keeps the old
    bytes and modification time."""
    log_file = tmp_path / RECORDING_LOG_FILE_NAME
    backup_file = tmp_path / (RECORDING_LOG_FILE_NAME + ".bak")
    backup_file.write_bytes(bytes([0x1, 0x80, 0, 1, 0xFF, 127]))
    os.utime(backup_file, (0, 0))
    with recording_log(tmp_path) as log:
        log.append_term(1, 0, 0, 0)
        log.append_snapshot(1, 3, 4000, 4000, 600, 2)
        log.append_term(1, 3, 3000, 500)
        log.append_snapshot(1, 2, 2900, 2200, 400, 2)
        log.append_snapshot(1, 2, 2900, 2200, 400, 1)
        log.append_snapshot(1, 2, 2900, 2200, 400, 0)
        log.append_snapshot(1, 2, 2900, 2200, 400, SERVICE_ID)
        log.append_term(1, 2, 2000, 300)
        log.append_snapshot(1, 1, 1800, 1000, 200, SERVICE_ID)
        log.append_snapshot(1, 1, 1800, 1000, 200, 0)
        log.append_snapshot(1, 1, 1800, 1000, 200, 1)
        log.append_term(1, 1, 1000, 100)
        assert log.invalidate_latest_snapshot()
        entries = log.entries()
        truncated = [renumbered(entries[i], i - 2, zero_positions=True) for i in range(2, 5)]
    contents = log_file.read_bytes()
    mtime_ms = log_file.stat().st_mtime_ns // 1_000_000
    truncate(tmp_path)  # type: ignore[operator]
    assert entries_of(tmp_path) == truncated
    assert backup_file.read_bytes() == contents
    assert backup_file.stat().st_mtime_ns // 1_000_000 == mtime_ms


def test_seed_recording_log_from_snapshot_should_create_a_new_recording_log_from_a_latest_valid_snapshot(
    tmp_path: Path,
) -> None:
    """ClusterToolTest.seedRecordingLogFromSnapshotShouldCreateANewRecordingLogFromALatestValidSnapshot"""
    _seed_from_snapshot(tmp_path, seed_recording_log_from_snapshot)


def test_seed_recording_log_from_snapshot_should_create_a_new_recording_log_from_a_latest_valid_snapshot_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ClusterToolTest.seedRecordingLogFromSnapshotShouldCreateANewRecordingLogFromALatestValidSnapshotCommandLine"""

    def command_line(directory: Path) -> None:
        assert main(["tool", str(directory), "seed-recording-log-from-snapshot"]) == 0

    _seed_from_snapshot(tmp_path, command_line)
    assert "recording log seeded from the latest snapshot (3 entries" in capsys.readouterr().out


def test_recording_log_command_describes_every_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ClusterTool ``recording-log`` (Aeron prints ``RecordingLog.toString()``): every entry with its
    type, recording id, term, base, position, timestamp, service id and validity, in sort order."""
    with recording_log(tmp_path) as log:
        log.append_term(7, 0, 0, 10)
        log.append_snapshot(8, 0, 0, 640, 20, 0)
        log.append_snapshot(9, 0, 0, 640, 20, SERVICE_ID)
        assert log.invalidate_latest_snapshot()
    assert main(["tool", str(tmp_path), "recording-log"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith(": 3 entries")
    assert "type=TERM recording_id=7 leadership_term_id=0 term_base_log_position=0 log_position=-1" in out[1]
    assert "type=SNAPSHOT recording_id=8" in out[2] and "service_id=0 valid=false" in out[2]
    assert "type=SNAPSHOT recording_id=9" in out[3] and "service_id=-1 valid=false" in out[3]


# ------------------------------------------------------------------ real processes (LocalCluster)


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_should_describe_latest_consensus_module_snapshot_and_counters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ClusterToolTest.shouldDescribeLatestConsensusModuleSnapshot, ClusterToolTest.shouldNotSnapshotWhenSuspendedOnly
    and ClusterToolTest.shouldSuspendAndResume on processes, through ``clusterlab tool``: after a SNAPSHOT the
    leader's latest snapshot describes itself (Aeron: "Snapshot: appVersion=1 timeUnit=MILLISECONDS");
    SUSPEND is applied, a SNAPSHOT then refused and the snapshot counter unchanged; RESUME is applied.
    The counters are read live from the control socket and, once the member stopped, from the file it
    left (Aeron's CnC file)."""
    from tests.cluster.helpers import LEADER_S, running_cluster

    with running_cluster(tmp_path) as c:
        cluster_dir = str(c.config.directory)
        leader = c.await_leader(LEADER_S)
        client = c.client()
        client.put("k", "v")
        initial = c.counters(leader)
        assert initial is not None and initial.snapshot_count == 0
        assert main(["tool", cluster_dir, "snapshot"]) == 0
        assert f"snapshot: accepted by leader {leader}" in capsys.readouterr().out
        c.await_condition(
            lambda: all((n := c.counters(m)) is not None and n.snapshot_count == 1 for m in range(3)), 30.0, "snapshots"
        )
        member_dir = c.member_dir(leader)
        assert main(["tool", str(member_dir), "describe-latest-snapshot"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("Snapshot: recording_id=")
        assert "mark=BEGIN time_unit=MILLIS app_version=" in out, out  # Aeron: appVersion=1 timeUnit=MILLISECONDS
        # The client's session (one more if its first connect attempt timed out on a loaded machine).
        opened = re.search(r"ConsensusModuleSnapshot\(next_session_id=(\d+) ", out)
        assert opened is not None and int(opened.group(1)) >= 2, out
        assert "Service snapshot: service_id=0" in out
        assert main(["tool", cluster_dir, "suspend"]) == 0
        assert f"suspend: accepted by leader {leader}" in capsys.readouterr().out  # Aeron: SUSPEND applied successfully
        assert main(["tool", cluster_dir, "snapshot"]) == 1
        # Aeron: Unable to SNAPSHOT as the state of the consensus module is SUSPENDED, but needs to be ACTIVE
        assert "snapshot refused by leader" in capsys.readouterr().err
        counters = c.counters(leader)
        assert counters is not None and counters.snapshot_count == 1
        assert counters.module_state == int(ConsensusModuleState.SUSPENDED)
        assert main(["tool", cluster_dir, "resume"]) == 0
        assert f"resume: accepted by leader {leader}" in capsys.readouterr().out  # Aeron: RESUME applied successfully
        c.await_condition(
            lambda: (n := c.counters(leader)) is not None and n.module_state == int(ConsensusModuleState.ACTIVE),
            30.0,
            "ACTIVE again",
        )
        assert main(["tool", cluster_dir, "counters", "--member", str(leader)]) == 0
        out = capsys.readouterr().out
        assert f"member {leader} counters (live):" in out and "Snapshot count" in out
        client.close()
        c.stop(leader)
        stopped = c.counters(leader)
        assert stopped is not None and stopped.snapshot_count == 1 and stopped.member_id == leader
        assert main(["tool", str(member_dir), "counters"]) == 0
        assert "last values (stopped)" in capsys.readouterr().out
        assert main(["tool", str(member_dir), "errors"]) == 0
        assert f"member {leader} (stopped: signal SIGTERM): 0 errors, 0 distinct" in capsys.readouterr().out


def test_should_fail_if_mark_file_unavailable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ClusterToolTest.shouldFailIfMarkFileUnavailable: a directory without a cluster (Aeron: no
    cluster-mark.dat; ours: no cluster.json) fails the command with one line saying so."""
    assert main(["tool", str(tmp_path), "snapshot"]) == 1
    assert f"{tmp_path} is not a cluster directory: cluster.json not found" in capsys.readouterr().err


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_test_hooks_through_the_control_socket(tmp_path: Path) -> None:
    """The test hooks on real processes (Aeron's TestCluster hooks): a follower armed to stall in
    CANVASS stays there once its leader stops, while the restarted leader and the other follower elect
    and serve; released, it joins. Its counters (control socket) show each step."""
    from tests.cluster.helpers import LEADER_S, running_cluster

    def election_state(m: int) -> int | None:
        n = c.counters(m)
        return None if n is None else n.election_state

    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        stalled = next(m for m in range(3) if m != leader)
        assert c.stall_election(stalled, ElectionState.CANVASS)
        c.stop(leader)
        c.await_condition(lambda: election_state(stalled) == int(ElectionState.CANVASS), 30.0, "stalled in CANVASS")
        c.restart(leader)
        new_leader = c.await_leader(LEADER_S)
        assert new_leader != stalled
        client = c.client()
        for i in range(3):
            client.put(f"k{i}", str(i))
        assert election_state(stalled) == int(ElectionState.CANVASS)
        assert c.clear_hooks(stalled)
        c.await_condition(
            lambda: (n := c.counters(stalled)) is not None and n.election_state == -1 and n.commit_position > 0,
            30.0,
            "the released follower joined",
        )
        client.close()


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_delay_service_message_hook_through_the_control_socket(tmp_path: Path) -> None:
    """The slow-service hook on real processes (Aeron's ClusterTest sends a message that makes a
    follower's service sleep): the follower's service gets the next entry 5 s late, so it is behind
    the leader's right after the reply, and catches up afterwards; the cluster keeps committing."""
    from tests.cluster.helpers import LEADER_S, running_cluster

    def applied(m: int) -> int:
        s = c.service_status(m)
        return -1 if s is None else s.log_position

    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        slow = next(m for m in range(3) if m != leader)
        client = c.client()
        client.put("a", "1")
        c.await_condition(lambda: applied(slow) == applied(leader), 30.0, "services level")
        assert c.delay_service_message(slow, 5.0)
        assert client.put("b", "2")["revision"] == 2
        assert applied(slow) < applied(leader)  # the leader's service replied; the slow one still waits
        c.await_condition(lambda: applied(slow) == applied(leader), 30.0, "the slow service caught up")
        client.close()
