"""Service-container lifecycle on real processes (LocalCluster: a node and a service process per member,
ZeroMQ over ipc:// in the test's tmp_path, the kv service or a variant of it): Aeron's ``ClusterTest``
ports of a service that cannot load its snapshot and of a follower stopped gracefully and restarted,
and the regression tests of the rules they rest on (tests/aeron/test_cluster_lifecycle.py has the
same in the simulator):

* a service process that fails to start exits 5 (``EXIT_SERVICE_FAILED``) after its recovery ack with
  a NULL client id; its node counts "service=N failed to start clustered service" and exits 3
  (``EXIT_SERVICE_GONE``); restarted after the snapshot is invalidated, the member recovers;
* a service process stopped without a crash (SIGTERM, its node gone, SHUTDOWN) tells its service
  ``on_terminate`` exactly once (Aeron ``ClusteredServiceAgent.onClose``); SIGKILL cannot.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clusterlab.core.consensus.context import Role
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.runtime.node import EXIT_SERVICE_GONE
from clusterlab.core.runtime.service import EXIT_OK, EXIT_SERVICE_FAILED
from clusterlab.harness.local import LocalCluster

from tests.aeron.support import EXCEPTION_ON_LOAD_KV, TERMINATE_MARKER, TERMINATE_MARKING_KV
from tests.cluster.helpers import CATCH_UP_S, LEADER_S, assert_services_agree, await_caught_up, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def _put_and_snapshot(c: LocalCluster, count: int = 10) -> None:
    """Aeron ``sendAndAwaitMessages(10)``, ``takeSnapshot(leader)``, ``awaitSnapshotCount(1)``."""
    client = c.client()
    for i in range(count):
        assert client.put(f"k{i}", str(i))["revision"] == i + 1
    client.close()
    await_caught_up(c)
    assert c.control("snapshot")
    c.await_condition(
        lambda: all((s := c.status(m)) is not None and s.snapshot_count == 1 for m in range(c.member_count)),
        CATCH_UP_S,
        "every member took the snapshot",
    )


def _error_log(c: LocalCluster, member_id: int) -> str:
    """The stopped member's persisted counters and distinct error log (Aeron's mark-file error log)."""
    return (c.member_dir(member_id) / "counters.json").read_text()


def _invalidate_latest_snapshot(c: LocalCluster, member_id: int) -> bool:
    """Aeron ``ClusterTool.invalidateLatestSnapshot(out, clusterDir)`` on the stopped member."""
    with RecordingLog.open(c.storage(member_id)) as recording_log:
        return recording_log.invalidate_latest_snapshot()


def _await_followers(c: LocalCluster, count: int) -> list[int]:
    """Aeron ``TestCluster.followers(expectedMinimumFollowerCount)``: every member's election closed,
    at least ``count`` of them FOLLOWER."""
    found: list[list[int]] = []

    def enough() -> bool:
        statuses = [c.status(m) for m in range(c.member_count)]
        if any(s is None or s.election_state is not None for s in statuses):
            return False
        found.append([s.member_id for s in statuses if s is not None and s.role == Role.FOLLOWER])
        return len(found[-1]) >= count

    c.await_condition(enough, CATCH_UP_S, f"{count} followers")
    return found[-1]


def _terminate_calls(c: LocalCluster, member_id: int) -> int:
    marker = c.directory / TERMINATE_MARKER.format(member_id=member_id)
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def test_should_terminate_node_with_invalid_snapshot_and_recovery_after_invalidation(tmp_path: Path) -> None:
    """ClusterTest.shouldTerminateNodeWithInvalidSnapshotAndRecoveryAfterInvalidation on processes: the
    restarted follower's service cannot load its snapshot; its service process and node exit (5 and 3)
    with the error "failed to start service=0"; with the latest snapshot invalidated it starts again
    and there are two followers. (Also: it replayed the log, its service agrees with the others.)"""
    with running_cluster(tmp_path, service=EXCEPTION_ON_LOAD_KV) as c:
        leader = c.await_leader(LEADER_S)
        follower = next(m for m in range(3) if m != leader)
        _put_and_snapshot(c)

        c.stop(follower)
        c.restart(follower)
        codes = c.wait_for_exit(follower, CATCH_UP_S)
        assert codes == {"node": EXIT_SERVICE_GONE, "service": EXIT_SERVICE_FAILED}, c.log_tail(follower, "service")
        assert "service=0 failed to start" in _error_log(c, follower)
        counters = c.counters(follower)
        assert counters is not None and counters.errors == 1

        assert _invalidate_latest_snapshot(c, follower)
        c.restart(follower)
        assert len(_await_followers(c, 2)) == 2
        await_caught_up(c)
        assert_services_agree(c)


def test_should_terminate_node_with_multiple_services_with_single_service_invalid_snapshot(tmp_path: Path) -> None:
    """ClusterTest.shouldTerminateNodeWithMultipleServicesWithSingleServiceInvalidSnapshot on processes:
    the restarted follower's service 1 cannot load its snapshot; it exits (5), its node closes (3) and
    its healthy service 0 stops (0), with the error "failed to start service=1"."""
    with running_cluster(tmp_path, services=["kv", EXCEPTION_ON_LOAD_KV]) as c:
        leader = c.await_leader(LEADER_S)
        follower = next(m for m in range(3) if m != leader)
        _put_and_snapshot(c)

        c.stop(follower)
        c.restart(follower)
        codes = c.wait_for_exit(follower, CATCH_UP_S)
        assert codes == {"node": EXIT_SERVICE_GONE, "service": EXIT_OK, "service-s1": EXIT_SERVICE_FAILED}, codes
        assert "service=1 failed to start" in _error_log(c, follower)


def test_should_stop_follower_and_restart_follower(tmp_path: Path) -> None:
    """ClusterTest.shouldStopFollowerAndRestartFollower on processes: one election on the leader and the
    follower; the follower stopped (gracefully) and started again is a FOLLOWER after one election of
    its own (a new counter), the leader still after one."""
    with running_cluster(tmp_path, service=TERMINATE_MARKING_KV) as c:
        leader = c.await_leader(LEADER_S)
        follower = next(m for m in range(3) if m != leader)
        for m in (leader, follower):
            counters = c.counters(m)
            assert counters is not None and counters.election_count == 1
        c.stop(follower)
        c.restart(follower)
        c.await_condition(
            lambda: (s := c.status(follower)) is not None and s.election_state is None, LEADER_S, "election closed"
        )
        status = c.status(follower)
        assert status is not None and status.role == Role.FOLLOWER
        follower_counters, leader_counters = c.counters(follower), c.counters(leader)
        assert follower_counters is not None and follower_counters.election_count == 1
        assert leader_counters is not None and leader_counters.election_count == 1


def test_a_gracefully_stopped_service_process_tells_its_service_on_terminate_once(tmp_path: Path) -> None:
    """Aeron ``ClusteredServiceAgent.onClose`` on processes: a member stopped gracefully (SIGTERM to its
    node, then its service), a service process sent SIGTERM alone, a cluster SHUTDOWN: each service is
    told ``on_terminate`` exactly once; a member killed (SIGKILL) cannot be."""
    with running_cluster(tmp_path, service=TERMINATE_MARKING_KV) as c:
        leader = c.await_leader(LEADER_S)
        follower, other = (m for m in range(3) if m != leader)
        client = c.client()
        assert client.put("k", "v")["revision"] == 1
        client.close()
        await_caught_up(c)

        c.stop(follower)
        assert _terminate_calls(c, follower) == 1, "a graceful stop of the member"

        c.kill(other)
        assert _terminate_calls(c, other) == 0, "SIGKILL runs no close"

        service = c.service_status(leader)
        assert service is not None
        os.kill(service.pid, signal.SIGTERM)  # the service process alone, by its PID
        codes = c.wait_for_exit(leader, CATCH_UP_S)
        assert codes == {"node": EXIT_SERVICE_GONE, "service": EXIT_OK}, codes
        assert _terminate_calls(c, leader) == 1, "SIGTERM to the service process"

        for m in range(3):
            c.restart(m)
        c.await_leader(LEADER_S)
        await_caught_up(c)
        assert c.control("shutdown")
        for m in range(3):
            assert c.wait_for_exit(m, CATCH_UP_S) == {"node": EXIT_OK, "service": EXIT_OK}
        calls = {m: _terminate_calls(c, m) for m in range(3)}
        assert calls == {follower: 2, other: 1, leader: 2}, "SHUTDOWN tells each service once more"


def test_a_service_started_after_its_node_is_gone_stops(tmp_path: Path) -> None:
    """A service process whose node closed while it started (in the multi-service port: the node closes
    when the other service fails to start) finds the node's socket refusing it and exits 0, as when
    its node goes away, instead of waiting for a node that never comes."""
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        follower = next(m for m in range(3) if m != leader)
        c.stop(follower)
        command = [sys.executable, "-m", "clusterlab.core.runtime.service", "--dir", str(c.directory)]
        proc = subprocess.Popen(
            [*command, "--member-id", str(follower)],
            cwd=c.directory,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            out, _ = proc.communicate(timeout=CATCH_UP_S)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.returncode == EXIT_OK, out.decode(errors="replace")
        assert b"node process went away (its socket refuses connections)" in out
