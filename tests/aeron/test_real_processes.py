"""Aeron ports that exercise processes, sockets and files, run on real processes (LocalCluster:
a node and a service process per member, ZeroMQ over ipc:// in the test's tmp_path) with the kv
service. Each docstring names the Aeron test; the same tests run in the simulator with Aeron's test
service (test_cluster.py, test_single_node.py, test_cluster_node_restart.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.core.consensus.context import Role
from clusterlab.harness.local import wait_until

from tests.cluster.helpers import LEADER_S, assert_services_agree, await_caught_up, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def test_single_node_should_replay_log_and_continue(tmp_path: Path) -> None:
    """SingleNodeTest.shouldReplayLog and ClusterNodeRestartTest.shouldRestartServiceWithReplayAndContinue
    on processes (a single member restarted with a log becomes leader again)."""
    with running_cluster(tmp_path, members=1) as c:
        client = c.client()
        for i in range(10):
            assert client.put(f"k{i}", str(i))["revision"] == i + 1
        client.close()
        c.stop(0)
        c.restart(0)
        assert c.await_leader(LEADER_S) == 0
        status = c.status(0)
        assert status is not None and status.role == Role.LEADER and status.leadership_term_id == 1
        client = c.client()
        assert client.get("k9")["value"] == "9", "the log was replayed"
        assert client.put("k10", "10")["revision"] == 11
        c.await_condition(
            lambda: (s := c.status(0)) is not None and s.commit_position == s.append_position, 10.0, "committed"
        )


def test_single_node_should_restart_service_from_snapshot_with_further_log(tmp_path: Path) -> None:
    """ClusterNodeRestartTest.shouldRestartServiceFromSnapshotWithFurtherLog on processes."""
    with running_cluster(tmp_path, members=1) as c:
        client = c.client()
        for i in range(3):
            client.put(f"k{i}", str(i))
        assert c.control("snapshot")
        c.await_condition(lambda: (s := c.status(0)) is not None and s.snapshot_count == 1, 10.0, "snapshot")
        assert client.put("k3", "3")["revision"] == 4
        client.close()
        c.stop(0)
        c.restart(0)
        assert c.await_leader(LEADER_S) == 0
        client = c.client()
        assert [client.get(f"k{i}")["value"] for i in range(4)] == ["0", "1", "2", "3"]
        assert client.put("k4", "4")["revision"] == 5


def test_should_lose_leadership_when_no_active_quorum_of_followers(tmp_path: Path) -> None:
    """ClusterTest.shouldLoseLeadershipWhenNoActiveQuorumOfFollowers on processes (the
    leader's service process is told it is no longer LEADER)."""
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        c.await_condition(
            lambda: (s := c.service_status(leader)) is not None and s.role == Role.LEADER, 10.0, "service LEADER"
        )
        for f in range(3):
            if f != leader:
                c.stop(f)
        c.await_condition(
            lambda: (s := c.status(leader)) is not None and s.role == Role.FOLLOWER, 20.0, "leader stepped down"
        )
        c.await_condition(
            lambda: (s := c.service_status(leader)) is not None and s.role == Role.FOLLOWER,
            10.0,
            "the service learned it is a FOLLOWER",
        )


def test_should_echo_messages_then_continue_on_new_leader(tmp_path: Path) -> None:
    """ClusterTest.shouldEchoMessagesThenContinueOnNewLeader on processes."""
    with running_cluster(tmp_path) as c:
        original = c.await_leader(LEADER_S)
        client = c.client()
        for i in range(10):
            client.put(f"k{i}", str(i))
        c.stop(original)
        new_leader = c.await_leader(LEADER_S, exclude=[original])
        assert new_leader != original
        for i in range(10, 17):
            client.put(f"k{i}", str(i))
        assert client.get("k16")["revision"] == 17
        followers = [m for m in range(3) if m not in (original, new_leader)]
        await_caught_up(c, [new_leader, *followers])
        assert_services_agree(c, [new_leader, *followers])


def test_should_shutdown_cluster_and_restart_with_snapshots(tmp_path: Path) -> None:
    """ClusterTest.shouldShutdownClusterAndRestartWithSnapshots on processes: SHUTDOWN snapshots and
    terminates every member; restarted from disk they load the snapshot and elect a leader."""
    with running_cluster(tmp_path) as c:
        c.await_leader(LEADER_S)
        client = c.client()
        client.put("k", "v")
        client.close()
        await_caught_up(c)
        assert c.control("shutdown")
        for m in range(3):
            c.wait_for_exit(m, 20.0)
        for m in range(3):
            c.restart(m)
        leader2 = c.await_leader(LEADER_S)

        def one_term() -> bool:
            # Aeron's awaitLeader then checks every member: a follower may still be joining the term.
            statuses = c.statuses()
            leader_status = statuses.get(leader2)
            return (
                leader_status is not None
                and all(s is not None for s in statuses.values())
                and {s.leadership_term_id for s in statuses.values() if s is not None}
                == {leader_status.leadership_term_id}
            )

        wait_until(
            one_term, LEADER_S, "every restarted member in the new leader's term", context=lambda: str(c.statuses())
        )
        assert c.client().get("k")["value"] == "v"
