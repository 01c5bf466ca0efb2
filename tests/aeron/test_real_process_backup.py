"""Aeron's ``ClusterBackupTest`` on real processes (LocalCluster: a node and a kv service process per
member, ZeroMQ over ``ipc://`` in the test's tmp_path, and a ClusterBackup process,
``python -m clusterlab.core.runtime.backup``, asking the members on their control sockets).
tests/aeron/test_cluster_backup.py has the same ports in the simulator.

Aeron's ``startStaticNodeFromBackup`` starts a node on the backup's directory; here every member is
stopped and restored from a copy of the backup (``LocalCluster.restore_from_backup``), then the
restored cluster elects a leader. Aeron's ``service().messageCount()`` is the kv store's revision
(each put is one message); ``wasSnapshotLoaded()`` is the snapshot the restored service process
started from (its log line ``snapshot=<recording id>``). Every process is stopped by PID and checked
gone (tests/cluster/helpers.running_cluster); every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clusterlab.core.archive.layout import ARCHIVE_DIR_NAME, CATALOGUE_FILE_NAME, LOG_RECORDING_ID
from clusterlab.core.consensus.recording_log import EntryType
from clusterlab.harness.cluster_tool import load_recording_log_entries
from clusterlab.harness.local import LocalCluster, LocalClusterError, pid_alive, wait_until

from tests.cluster.helpers import CATCH_UP_S, LEADER_S, assert_services_agree, running_cluster, service_log

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
BACKUP_S = 30.0  # a backup catching up on a loaded 2-core machine; a healthy run takes well under a second


def _send_and_await_messages(c: LocalCluster, first: int, count: int) -> None:
    """Aeron ``sendAndAwaitMessages``: ``count`` puts, each answered with the store's next revision,
    then every member's service caught up."""
    client = c.client()
    try:
        for i in range(first, first + count):
            assert client.put(f"k{i}", str(i))["revision"] == i + 1
    finally:
        client.close()


def _service_log_position(c: LocalCluster, member_id: int) -> int:
    """Aeron ``leader.service().cluster().logPosition()``."""
    status = c.service_status(member_id)
    assert status is not None, f"service of member {member_id} does not answer"
    return status.log_position


def _take_snapshot(c: LocalCluster) -> None:
    """Aeron ``takeSnapshot(leader)`` + ``awaitSnapshotCount(1)``."""
    assert c.control("snapshot")
    c.await_condition(
        lambda: all((s := c.status(m)) is not None and s.snapshot_count == 1 for m in range(c.member_count)),
        CATCH_UP_S,
        "every member took the snapshot",
    )


def _start_from_backup(c: LocalCluster) -> int:
    """Aeron ``stopAllNodes()`` + ``startStaticNodeFromBackup()`` + ``awaitLeader()``, for every member."""
    for m in range(c.member_count):
        c.stop(m)
    c.restore_from_backup()
    leader = c.await_leader(LEADER_S)
    c.await_services()
    return leader


def _message_count(c: LocalCluster) -> int:
    """The restored services' message count: the store revision every service agrees on."""
    client = c.client()
    try:
        revision = client.get("k0")["revision"]
    finally:
        client.close()
    assert_services_agree(c)
    return int(revision)


def _snapshot_loaded(c: LocalCluster, member_id: int) -> bool:
    """Aeron ``service().wasSnapshotLoaded()``: the current service process started from a snapshot."""
    found = re.search(r" started pid=\d+ .* snapshot=(\w+)", service_log(c, member_id))
    assert found is not None, service_log(c, member_id)
    return found.group(1) != "None"


def _backup_log_start(backup_dir: Path) -> int:
    """The backup's log recording start position (its archive catalogue)."""
    doc = json.loads((backup_dir / ARCHIVE_DIR_NAME / CATALOGUE_FILE_NAME).read_text())
    [log] = [r for r in doc["recordings"] if r["recording_id"] == LOG_RECORDING_ID]
    return int(log["start_position"])


def test_should_backup_cluster_no_snapshots_and_empty_log(tmp_path: Path) -> None:
    """ClusterBackupTest.shouldBackupClusterNoSnapshotsAndEmptyLog on processes."""
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        c.start_backup()
        c.await_backup(state="BACKING_UP", live_log_position=_service_log_position(c, leader), timeout_s=BACKUP_S)

        restored = _start_from_backup(c)
        assert _message_count(c) == 0
        assert not _snapshot_loaded(c, restored)


def test_should_backup_cluster_no_snapshots_and_non_empty_log(tmp_path: Path) -> None:
    """ClusterBackupTest.shouldBackupClusterNoSnapshotsAndNonEmptyLog on processes (Aeron's source types
    are which endpoint a backup asks first; ours asks every member's control socket in turn)."""
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        _send_and_await_messages(c, 0, 10)
        log_position = _service_log_position(c, leader)

        c.start_backup()
        status = c.await_backup(state="BACKING_UP", live_log_position=log_position, timeout_s=BACKUP_S)
        assert status["snapshots_retrieved_count"] == 0 and status["errors"] == 0, status

        restored = _start_from_backup(c)
        assert _message_count(c) == 10
        assert not _snapshot_loaded(c, restored)


def test_should_backup_cluster_no_snapshots_and_then_send_messages(tmp_path: Path) -> None:
    """ClusterBackupTest.shouldBackupClusterNoSnapshotsAndThenSendMessages on processes: the backup
    follows messages sent after it reached BACKING_UP."""
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        c.start_backup()
        c.await_backup(state="BACKING_UP", timeout_s=BACKUP_S)

        _send_and_await_messages(c, 0, 10)
        log_position = _service_log_position(c, leader)
        c.await_backup(live_log_position=log_position, timeout_s=BACKUP_S)

        restored = _start_from_backup(c)
        assert _message_count(c) == 10
        assert not _snapshot_loaded(c, restored)


def test_should_backup_cluster_with_snapshot_and_non_empty_log(tmp_path: Path) -> None:
    """ClusterBackupTest.shouldBackupClusterWithSnapshotAndNonEmptyLog on processes: the snapshot is
    retrieved, the restored members start from it and replay the 7 later messages."""
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        _send_and_await_messages(c, 0, 10)
        _take_snapshot(c)
        _send_and_await_messages(c, 10, 7)
        log_position = _service_log_position(c, leader)

        c.start_backup()
        status = c.await_backup(live_log_position=log_position, snapshots_retrieved=1, timeout_s=BACKUP_S)
        assert status["snapshots_retrieved_count"] == 1, status

        restored = _start_from_backup(c)
        assert _message_count(c) == 17
        assert all(_snapshot_loaded(c, m) for m in range(c.member_count)), restored


def test_should_backup_cluster_with_snapshot_and_non_empty_log_with_simple_authentication(tmp_path: Path) -> None:
    """ClusterBackupTest.shouldBackupClusterWithSnapshotAndNonEmptyLogWithSimpleAuthentication on
    processes: a secured cluster (CURVE keys and ZAP on every socket, client credentials); the backup
    reaches the members' control sockets with the operator's admin key."""
    with running_cluster(tmp_path, secure=True) as c:
        assert c.config.secure
        leader = c.await_leader(LEADER_S)
        _send_and_await_messages(c, 0, 10)
        _take_snapshot(c)
        _send_and_await_messages(c, 10, 7)
        log_position = _service_log_position(c, leader)

        c.start_backup()
        c.await_backup(live_log_position=log_position, snapshots_retrieved=1, timeout_s=BACKUP_S)

        _start_from_backup(c)
        assert _message_count(c) == 17
        assert all(_snapshot_loaded(c, m) for m in range(c.member_count))


def test_should_backup_cluster_with_from_latest_snapshot_log_position(tmp_path: Path) -> None:
    """ClusterBackupTest.shouldBackupClusterWithFromLatestSnapshotLogPosition on processes: with replay
    start ``latest-snapshot`` the backup's log starts at the snapshot's position; restored from it,
    the members hold all 17 messages (10 only through the snapshot)."""
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        _send_and_await_messages(c, 0, 10)
        _take_snapshot(c)
        [snapshot] = [
            e
            for e in load_recording_log_entries(c.member_dir(leader))
            if e.type is EntryType.SNAPSHOT and e.service_id < 0
        ]
        _send_and_await_messages(c, 10, 7)
        log_position = _service_log_position(c, leader)

        c.start_backup(replay_start="latest-snapshot")
        c.await_backup(live_log_position=log_position, snapshots_retrieved=1, timeout_s=BACKUP_S)
        assert c.stop_backup() == 0
        assert c.backup_dir is not None
        assert _backup_log_start(c.backup_dir) == snapshot.log_position > 0

        _start_from_backup(c)
        assert _message_count(c) == 17
        assert all(_snapshot_loaded(c, m) for m in range(c.member_count))


def test_should_be_able_to_get_time_of_next_backup_query(tmp_path: Path) -> None:
    """ClusterBackupTest.shouldBeAbleToGetTimeOfNextBackupQuery on processes: in BACKING_UP the next
    query is due after now (the backup's clock is the node processes' monotonic clock)."""
    with running_cluster(tmp_path) as c:
        c.start_backup(query_interval_s=30.0)
        status = c.await_backup(state="BACKING_UP", timeout_s=BACKUP_S)
        assert status["time_of_next_backup_query_ns"] > _monotonic_ns_of_backup_clock(), status


def _monotonic_ns_of_backup_clock() -> int:
    """Now on the clock the backup process reads (clusterlab.core.runtime.clock: monotonic, no offset)."""
    from clusterlab.core.runtime.clock import Clock

    return Clock().now_ns()


def test_restore_replaces_every_members_state_with_the_backup(tmp_path: Path) -> None:
    """LocalCluster.restore_from_backup refuses while a member runs; the backup process stops on
    SIGTERM with exit 0 and state CLOSED in its status file; restored, the members hold what the
    backup holds and nothing written after it stopped."""
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        _send_and_await_messages(c, 0, 3)
        pid = c.start_backup()
        c.await_backup(live_log_position=_service_log_position(c, leader), timeout_s=BACKUP_S)
        with pytest.raises(LocalClusterError, match="running"):
            c.restore_from_backup()
        assert c.stop_backup() == 0
        assert not pid_alive(pid)
        status = c.backup_status()
        assert status is not None and status["state"] == "CLOSED" and status["pid"] == pid
        assert c.status(leader) is not None, "a refused restore leaves the cluster running"
        _send_and_await_messages(c, 3, 2)  # after the backup stopped: not in it

        _start_from_backup(c)
        assert _message_count(c) == 3
        events = [e for e in c.events if e["kind"] == "restore_from_backup"]
        assert len(events) == 1 and events[0]["detail"]["live_log_position"] == status["live_log_position"]


# ---------------------------------------------------------------------------------- the CLI
def _cli(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "clusterlab.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        cwd=ROOT,
    )


def test_cli_cluster_backup_tool_backup_query_and_cluster_restore(tmp_path: Path) -> None:
    """``clusterlab cluster backup`` follows a running cluster until SIGTERM (exit 0), ``clusterlab tool
    B backup-query`` prints its state, ``clusterlab cluster restore`` refuses while members run and,
    once they are stopped, restores them: restarted, the cluster holds the backed-up writes."""
    backup_dir = tmp_path / "bk"
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        _send_and_await_messages(c, 0, 5)
        log_position = _service_log_position(c, leader)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        backup = subprocess.Popen(
            [
                *(sys.executable, "-m", "clusterlab.cli", "cluster", "backup", "--dir", str(c.directory)),
                *("--backup-dir", str(backup_dir), "--query-interval", "0.5"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        try:

            def backed_up() -> bool:
                assert backup.poll() is None, backup.communicate()
                query = _cli("tool", str(backup_dir), "backup-query")
                position = re.search(r"live log position\s+(\d+)", query.stdout)
                return "BACKING_UP" in query.stdout and position is not None and int(position[1]) >= log_position

            wait_until(backed_up, BACKUP_S, "the CLI backup caught up")
            query = _cli("tool", str(backup_dir), "backup-query")
            assert "(running)" in query.stdout, query.stdout

            refused = _cli("cluster", "restore", "--dir", str(c.directory), "--from", str(backup_dir))
            assert refused.returncode == 1 and "running" in refused.stderr, refused
            assert len(refused.stderr.splitlines()) == 1 and "Traceback" not in refused.stderr
        finally:
            os.kill(backup.pid, signal.SIGTERM)
            out, err = backup.communicate(timeout=30)
        assert backup.returncode == 0, err
        assert "stopped; the backup is in" in out and "state=CLOSED" in out, out
        stopped = _cli("tool", str(backup_dir), "backup-query")
        assert stopped.returncode == 0 and "CLOSED" in stopped.stdout and "(stopped)" in stopped.stdout

        for m in range(c.member_count):
            c.stop(m)
        still_locked = _cli("cluster", "restore", "--dir", str(c.directory), "--from", str(backup_dir))
        assert still_locked.returncode == 1 and "in use" in still_locked.stderr, still_locked  # LocalCluster's lock
    directory = c.directory
    restored = _cli("cluster", "restore", "--dir", str(directory), "--from", str(backup_dir))
    assert restored.returncode == 0, restored.stderr
    assert "restored 3 members" in restored.stdout
    with running_cluster(tmp_path, name=directory.name, members=None) as again:
        again.await_leader(LEADER_S)
        assert _message_count(again) == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tool", "{missing}", "backup-query"), "no backup directory"),
        (("tool", "{empty}", "backup-query"), "does not exist"),
        (("tool", "{corrupt}", "backup-query"), "unreadable"),
        (("tool", "{partial}", "backup-query"), "not a backup status"),
        (("cluster", "restore", "--dir", "{missing}", "--from", "{empty}"), "no cluster directory"),
        (("cluster", "backup", "--dir", "{missing}", "--backup-dir", "{empty}"), "no cluster directory"),
        (
            ("cluster", "backup", "--dir", "{empty}", "--backup-dir", "{empty}", "--progress-timeout", "x"),
            "not a number",
        ),
    ],
)
def test_cli_backup_bad_input_is_one_line_without_a_traceback(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """Wrong arguments and a missing or corrupt status file: one line on stderr, no traceback."""
    paths = {name: tmp_path / name for name in ("missing", "empty", "corrupt", "partial")}
    for name in ("empty", "corrupt", "partial"):
        paths[name].mkdir()
    (paths["corrupt"] / "backup-status.json").write_text("{not json")
    (paths["partial"] / "backup-status.json").write_text('{"state": "BACKING_UP"}')
    done = _cli(*(a.format(**{k: str(v) for k, v in paths.items()}) for a in args))
    assert done.returncode in (1, 2), done
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
