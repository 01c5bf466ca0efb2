"""Ports of Aeron's ``ClusterTest`` cases that need the test hooks, counters or segment length
(aeron-system-tests/src/test/java/io/aeron/cluster/ClusterTest.java), on the
simulator (and, marked ``cluster``, on real processes). Each test's docstring names the Aeron test; the
assertions are Aeron's. The hooks through a real node's control socket are in
tests/aeron/test_cluster_tool.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.core.consensus.context import SECOND, ConsensusModuleState, ElectionState

from tests.aeron.support import TERMINATE_MSG, aeron_cluster
from tests.sim.conftest import SimKit

MS = SECOND // 1000


def percent90(value_ns: int) -> int:
    """Aeron's ``percent90``: timing tolerance of its snapshot-duration assertions."""
    return value_ns * 9 // 10


@pytest.mark.sim
def test_should_track_snapshot_duration(sim: SimKit) -> None:
    """ClusterTest.shouldTrackSnapshotDuration: the consensus module's snapshot-duration counter
    covers the slowest service (Aeron's SleepOnSnapshotTestService: 222 ms; here the service gets the
    SNAPSHOT action 222 ms late through the delay hook), on the leader and on every follower."""
    delay_ns = 222 * MS
    a = aeron_cluster(sim, seed=301)
    leader = a.await_leader()
    a.connect_client()
    for m in range(3):
        counters = a.c.counters(m)
        assert counters.snapshot_count == 0
        assert counters.max_snapshot_duration_ns == 0
    a.send_and_await_messages(3)  # every member applied everything: the next service message is the action
    for m in range(3):
        a.c.delay_service_message(m, delay_ns)
    a.take_snapshot()
    a.await_snapshot_count_everywhere(1)
    assert a.c.leader_id() == leader
    for m in range(3):
        counters = a.c.counters(m)
        assert counters.snapshot_count == 1
        assert counters.max_snapshot_duration_ns >= percent90(delay_ns), (m, counters)
        assert counters.last_snapshot_duration_ns == counters.max_snapshot_duration_ns


@pytest.mark.sim
def test_should_remain_stable_when_there_is_a_slow_follower(sim: SimKit) -> None:
    """ClusterTest.shouldRemainStableWhenThereIsASlowFollower: one follower stopped, the other's
    service slowed down 15 s (Aeron: a message that makes the service sleep), 1000 messages, the stopped
    follower restarts: its election closes, and is still closed after the slow service caught up."""
    a = aeron_cluster(sim, seed=302)
    leader = a.await_leader()
    follower_to_restart, live_follower = a.followers()
    a.await_election_closed(follower_to_restart)
    a.stop_node(follower_to_restart)
    a.connect_client()
    a.c.delay_service_message(live_follower, 15 * SECOND)
    a.send_messages(1000)
    a.start_static_node(follower_to_restart)
    a.await_election_closed(follower_to_restart, timeout_ns=30 * SECOND)
    a.c.run_for(15 * SECOND)
    a.await_election_closed(follower_to_restart)
    assert a.c.leader_id() == leader
    a.await_services_message_count(1000, timeout_ns=30 * SECOND)


@pytest.mark.sim
def test_should_stall_member_in_chosen_election_state(sim: SimKit) -> None:
    """Aeron's election-state hook as ClusterTest uses it: a restarted follower held in CANVASS stays
    there (the others keep serving), and joins and catches up once released."""
    a = aeron_cluster(sim, seed=304)
    leader = a.await_leader()
    follower, other = a.followers()
    a.await_election_closed(follower)
    a.stop_node(follower)
    a.start_static_node(follower)
    a.c.stall_election(follower, ElectionState.CANVASS)
    a.connect_client()
    a.send_messages(5)
    a.await_response_message_count(5)
    a.await_service_message_count(other, 5)
    a.c.run_for(5 * SECOND)
    assert a.service(follower).message_count == 0
    assert a.c.member(follower).election_state == ElectionState.CANVASS
    assert a.c.counters(follower).election_state == int(ElectionState.CANVASS)
    assert a.c.leader_id() == leader
    a.c.stall_election(follower, None)
    a.await_election_closed(follower)
    a.await_service_message_count(follower, 5)


# Aeron ClusterTests.LARGE_MSG (1 KiB), "msg-" first as the support module counts echoes by it.
LARGE_MSG = b"msg-" + b"a" * 1020


@pytest.mark.sim
def test_should_handle_trimming_cluster_from_the_front(sim: SimKit) -> None:
    """ClusterTest.shouldHandleTrimmingClusterFromTheFront: 512 KiB segments, 1024 large messages,
    a snapshot, the log purged below it on every member, an abort, and a restart of every member that
    recovers all 1024 messages from the snapshot and what is left of the log."""
    segment = 512 * 1024
    a = aeron_cluster(sim, seed=305, archive_segment_length=segment)
    a.await_leader()
    client = a.connect_client()
    for _ in range(1024):
        a.c.await_condition(lambda: client.client.offer(LARGE_MSG, a.c.now_ns) > 0, 5 * SECOND, "message offered")
        a.sent += 1
    a.await_response_message_count(1024, timeout_ns=60 * SECOND)
    a.await_services_message_count(1024, timeout_ns=60 * SECOND)
    a.take_snapshot()
    a.await_snapshot_count_everywhere(1)
    starts = a.c.purge_log_to_last_snapshot()
    assert sorted(starts) == [0, 1, 2]
    for member_id, start in starts.items():
        # Whole segments went (a frame never spans two, so a segment base is a frame boundary).
        assert segment <= start <= a.c.member(member_id).commit_position, (member_id, start)
        assert a.c.member(member_id).archive.start_position == start
    a.abort_cluster()
    a.await_node_terminations()
    a.stop_all_nodes()
    a.restart_all_nodes()
    a.await_services_message_count(1024, timeout_ns=30 * SECOND)


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_should_handle_trimming_cluster_from_the_front_on_processes(tmp_path: Path) -> None:
    """ClusterTest.shouldHandleTrimmingClusterFromTheFront on real processes (kv service, 64 KiB
    segments from cluster.json): after a snapshot every member purges its segment files below it;
    stopped and restarted, every member still has every key."""
    from tests.cluster.helpers import LEADER_S, running_cluster

    segment = 64 * 1024
    with running_cluster(tmp_path, archive_segment_length=segment) as c:
        assert c.config.archive_segment_length == segment
        c.await_leader(LEADER_S)
        client = c.client()
        value = "v" * 200
        for i in range(600):
            client.put(f"k{i}", value)
        assert c.control("snapshot")
        c.await_condition(
            lambda: all((n := c.counters(m)) is not None and n.snapshot_count == 1 for m in range(3)), 30.0, "snapshots"
        )
        before = {m: sorted((c.member_dir(m) / "archive" / "log").glob("*.seg")) for m in range(3)}
        assert all(len(files) >= 3 for files in before.values()), before
        starts = c.purge_log_to_last_snapshot()
        assert sorted(starts) == [0, 1, 2]
        for m in range(3):
            after = sorted((c.member_dir(m) / "archive" / "log").glob("*.seg"))
            assert starts[m] >= segment and len(after) < len(before[m]), (m, starts[m], after)
        client.close()
        for m in range(3):
            c.stop(m)
        for m in range(3):
            c.restart(m)
        c.await_leader(LEADER_S)
        client = c.client()
        assert client.get("k0")["value"] == value
        assert client.get("k599")["value"] == value
        assert client.put("k600", "x")["revision"] == 601
        client.close()


@pytest.mark.sim
def test_should_stop_clustered_services_on_appropriate_message(sim: SimKit) -> None:
    """ClusterTest.shouldStopClusteredServicesOnAppropriateMessage: the test service raises
    ClusterTerminationException on the TERMINATE message; every member applies it, its service stops
    and the member terminates (Aeron: "Aeron client in service closed unexpectedly", a counted error)."""
    a = aeron_cluster(sim, seed=306)
    leader = a.await_leader()
    a.await_election_closed(leader)
    for f in a.followers():
        a.await_election_closed(f)
    client = a.connect_client()
    a.c.await_condition(lambda: client.client.offer(TERMINATE_MSG, a.c.now_ns) > 0, 5 * SECOND, "message offered")
    a.await_node_terminations([0, 1, 2])
    for m in range(3):
        counters = a.c.counters(m)
        assert counters.errors == 1 and counters.module_state == int(ConsensusModuleState.CLOSED), counters


@pytest.mark.sim
def test_should_terminate_leader_when_service_stops(sim: SimKit) -> None:
    """ClusterTest.shouldTerminateLeaderWhenServiceStops: the leader's service container closes, the
    leader terminates, and the client hears of a new leader (awaitNewLeadershipEvent(1))."""
    a = aeron_cluster(sim, seed=307)
    leader = a.await_leader()
    a.connect_client()
    a.c.stop_service(leader)
    a.await_condition(lambda: a.is_terminated(leader), f"member {leader} terminated")
    a.await_new_leadership_event(1)
    assert a.await_leader_other_than(leader) != leader


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_should_stop_clustered_services_on_appropriate_message_on_processes(tmp_path: Path) -> None:
    """ClusterTest.shouldStopClusteredServicesOnAppropriateMessage on real processes: the echo service
    raises ClusterTerminationException on ``terminate``; every member's service and node exit, and
    each node's last counters (counters.json) show the module CLOSED with the one counted error."""
    from tests.cluster.helpers import LEADER_S, running_cluster

    with running_cluster(tmp_path, service="echo") as c:
        c.await_leader(LEADER_S)
        client = c.client()
        client.submit(lambda _rid: b"terminate")
        c.await_condition(  # the client is pumped meanwhile: its offer leaves, its session stays alive
            lambda: client.pump(0.05) or not any(c.is_alive(m) for m in range(3)), 30.0, "every member terminated"
        )
        for m in range(3):
            codes = c.wait_for_exit(m, timeout_s=5.0)
            assert codes["service"] == 0, codes  # the service stopped as asked, not failed
        client.close()
        for m in range(3):
            counters = c.counters(m)
            assert counters is not None and counters.errors == 1, (m, counters)
            assert counters.module_state == int(ConsensusModuleState.CLOSED)
            assert "service closed unexpectedly" in (c.member_dir(m) / "counters.json").read_text()


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_should_terminate_leader_when_service_stops_on_processes(tmp_path: Path) -> None:
    """ClusterTest.shouldTerminateLeaderWhenServiceStops on real processes: the leader's service
    process goes away, the leader's node terminates, the others elect a new leader that serves."""
    from tests.cluster.helpers import LEADER_S, running_cluster

    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        client = c.client()  # Aeron: cluster.connectClient() (the services are up)
        assert client.put("k", "v")["revision"] == 1
        client.close()
        c.kill_service(leader)
        c.wait_for_exit(leader, timeout_s=30.0)
        new_leader = c.await_leader(LEADER_S, exclude=[leader])
        assert new_leader != leader
        client = c.client()
        assert client.put("k", "w")["revision"] == 2
        client.close()
        counters = c.counters(leader)
        assert counters is not None and counters.errors >= 1


@pytest.mark.sim
def test_should_handle_replay_after_shutdown(sim: SimKit) -> None:
    """ClusterTest.shouldHandleReplayAfterShutdown: a single member whose service container closes
    terminates; started again it replays its log, leads, and takes 10 more messages."""
    a = aeron_cluster(sim, members=1, seed=308)
    a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.c.stop_service(0)  # Aeron: leader.container().close() - "will cause shutdown in consensus module"
    a.await_condition(lambda: a.is_terminated(0), "member 0 terminated")
    a.stop_node(0)
    a.start_static_node(0)
    a.await_leader()
    a.reconnect_client()
    a.send_and_await_messages(10)
    assert a.service(0).message_count == 20
