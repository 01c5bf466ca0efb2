"""Cluster control on a real cluster (ClusterTool's toggle): snapshot, suspend/resume, shutdown,
abort, and full restarts from disk with the same state."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.core.consensus.context import ConsensusModuleState
from clusterlab.core.consensus.recording_log import EntryType, RecordingLog
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.harness.local import LocalCluster
from clusterlab.harness.services import kv

from tests.cluster.helpers import (
    assert_no_process_outlives,
    assert_services_agree,
    await_caught_up,
    running_cluster,
    service_log,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def _write(client: object, prefix: str, n: int) -> None:
    ids = [client.submit(lambda rid, i=i: kv.put(rid, f"{prefix}{i}", f"{prefix}{i}!")) for i in range(n)]
    assert len(client.wait(ids, 15.0)) == n


def _snapshots(cluster: LocalCluster, member_id: int) -> list[tuple[int, int]]:
    """(service id, log position) of the member's valid snapshot entries."""
    with RecordingLog.open(FileStorage(cluster.member_dir(member_id))) as log:
        return [(e.service_id, e.log_position) for e in log.entries() if e.type is EntryType.SNAPSHOT and e.is_valid]


def test_snapshot_then_full_restart_recovers_the_same_state(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        _write(client, "s", 100)
        assert c.control("snapshot")
        c.await_condition(
            lambda: all((s := c.status(i)) is not None and s.snapshot_count == 1 for i in range(3)),
            10.0,
            "every member took the snapshot",
        )
        _write(client, "t", 20)  # after the snapshot: replayed from the log on restart
        position = await_caught_up(c)
        digest = assert_services_agree(c)
    for i in range(3):
        snapshot_position = _snapshots(c, i)[0][1]
        assert 0 < snapshot_position < position

    # The whole cluster again, from its directory and configuration.
    with running_cluster(tmp_path) as again:
        assert await_caught_up(again) >= position
        assert assert_services_agree(again)[1] == digest[1]
        for i in range(3):
            assert "snapshot=None" not in service_log(again, i), "services recover from their snapshot"
        client = again.client()
        assert client.get("s99")["value"] == "s99!"
        assert client.get("t19")["value"] == "t19!"


def test_suspend_and_resume(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        assert client.put("k", "1")["ok"]
        assert c.control("suspend")
        leader = c.leader_id()
        c.await_condition(
            lambda: c.status(leader).module_state == ConsensusModuleState.SUSPENDED, 5.0, "leader suspended"
        )
        rid = client.submit(lambda rid: kv.put(rid, "k", "2"))
        assert client.wait([rid], 1.0) == {}, "a suspended cluster takes no client messages"
        assert not c.control("suspend"), "the toggle is busy until resumed"
        assert c.control("resume")
        assert client.put("k", "3")["ok"]
        assert client.get("k")["value"] == "3"


@pytest.mark.parametrize("action", ["shutdown", "abort"])
def test_shutdown_and_abort_stop_every_member_and_the_cluster_restarts_from_disk(tmp_path: Path, action: str) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        _write(client, "x", 50)
        position = await_caught_up(c)
        digest = assert_services_agree(c)
        assert c.control(action)
        for i in range(3):
            assert c.wait_for_exit(i, 15.0) == {"node": 0, "service": 0}, c.log_tail(i)
        assert not c.running_pids()
    assert_no_process_outlives(c)
    for i in range(3):
        snapshots = _snapshots(c, i)
        if action == "shutdown":
            assert [service_id for service_id, _ in snapshots] == [0, -1], "service then module snapshot"
            assert snapshots[0][1] >= position
        else:
            assert snapshots == [], "abort takes no snapshot"

    with running_cluster(tmp_path) as again:
        await_caught_up(again)
        assert assert_services_agree(again)[1] == digest[1]
        assert again.client().get("x49")["value"] == "x49!"
