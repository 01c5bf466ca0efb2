"""Ports of Aeron's ``ClusterTest`` (aeron-system-tests/src/test/java/io/aeron/cluster) onto the
simulator: three members (five where Aeron uses five) running the Aeron test service
(tests/aeron/support.py). Each test's docstring names the Aeron test; the assertions are Aeron's.
Ports that need a capability we lack are listed in docs/aeron-parity.md."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import SECOND, Role

from tests.aeron.support import aeron_cluster, consensus_module_snapshots
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim

FOLLOWER, LEADER = Role.FOLLOWER, Role.LEADER


def test_should_stop_follower_and_restart_follower(sim: SimKit) -> None:
    """ClusterTest.shouldStopFollowerAndRestartFollower"""
    a = aeron_cluster(sim, seed=101)
    leader = a.await_leader()
    assert a.election_count(leader) == 1
    follower = a.followers()[0]
    assert a.election_count(follower) == 1
    a.await_election_closed(follower)
    a.stop_node(follower)
    a.start_static_node(follower)
    a.await_election_closed(follower)
    assert a.role(follower) == FOLLOWER
    assert a.election_count(follower) == 1  # a new counter in the new incarnation
    assert a.election_count(leader) == 1


def test_should_notify_client_of_new_leader(sim: SimKit) -> None:
    """ClusterTest.shouldNotifyClientOfNewLeader"""
    a = aeron_cluster(sim, seed=102)
    leader = a.await_leader()
    assert a.election_count(leader) == 1
    term = a.leadership_term_id(leader)
    assert term != -1
    followers = a.followers()
    for f in followers:
        assert a.election_count(f) == 1
        assert a.leadership_term_id(f) == term
    a.connect_client()
    a.stop_node(leader)
    a.await_new_leadership_event(1)
    leader2 = a.await_leader()
    for f in followers:
        assert a.election_count(f) == 2
        assert a.leadership_term_id(f) == a.leadership_term_id(leader2)


def test_should_stop_leader_and_followers_then_restart_all_with_snapshot(sim: SimKit) -> None:
    """ClusterTest.shouldStopLeaderAndFollowersThenRestartAllWithSnapshot"""
    a = aeron_cluster(sim, seed=103)
    a.await_leader()
    a.connect_client()
    a.take_snapshot()
    for m in range(3):
        a.await_snapshot_count(m, 1)
    a.stop_all_nodes()
    a.restart_all_nodes()
    a.await_leader()
    assert len(a.followers()) == 2
    a.await_snapshots_loaded()


def test_should_shutdown_cluster_and_restart_with_snapshots(sim: SimKit) -> None:
    """ClusterTest.shouldShutdownClusterAndRestartWithSnapshots"""
    a = aeron_cluster(sim, seed=104)
    a.await_leader()
    for f in a.followers():
        a.await_election_closed(f)
    a.shutdown_cluster()
    a.await_node_terminations()
    for m in range(3):
        assert a.service(m).was_snapshot_taken
    a.stop_all_nodes()
    a.restart_all_nodes()
    leader2 = a.await_leader()
    assert len(a.followers()) == 2
    for f in a.followers():
        assert a.leadership_term_id(f) == a.leadership_term_id(leader2)
    a.await_snapshots_loaded()


def test_should_abort_cluster_and_restart(sim: SimKit) -> None:
    """ClusterTest.shouldAbortClusterAndRestart"""
    a = aeron_cluster(sim, seed=105)
    a.await_leader()
    for m in range(3):
        a.await_election_closed(m)
    a.abort_cluster()
    a.await_node_terminations()
    for m in range(3):
        assert not a.service(m).was_snapshot_taken
    a.stop_all_nodes()
    a.restart_all_nodes()
    a.await_leader()
    assert len(a.followers()) == 2
    for m in range(3):
        assert not a.service(m).was_snapshot_loaded


def test_should_abort_cluster_on_termination_timeout(sim: SimKit) -> None:
    """ClusterTest.shouldAbortClusterOnTerminationTimeout: with one follower down the leader and the
    other follower still terminate (the leader stops waiting for the dead member's ack)."""
    a = aeron_cluster(sim, seed=106)
    leader = a.await_leader()
    follower_a, follower_b = a.followers()
    a.stop_node(follower_b)
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.abort_cluster()
    a.await_node_terminations([leader, follower_a])


def test_should_echo_messages(sim: SimKit) -> None:
    """ClusterTest.shouldEchoMessages"""
    a = aeron_cluster(sim, seed=107)
    a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    assert a.service(a.await_leader()).message_count <= 10
    assert a.response_count() == 10


def test_should_elect_same_leader_after_loosing_quorum(sim: SimKit) -> None:
    """ClusterTest.shouldElectSameLeaderAfterLoosingQuorum"""
    a = aeron_cluster(sim, seed=108)
    leader = a.await_leader()
    follower_one, follower_two = a.followers()
    a.await_election_closed(follower_one)
    a.await_election_closed(follower_two)
    a.stop_node(follower_one)
    a.connect_client()
    a.send_and_await_messages(10)
    a.stop_node(follower_two)
    a.await_condition(lambda: a.service(leader).role_changes[-1] != LEADER, "the leader's service lost leadership")
    a.start_static_node(follower_one)
    a.await_election_closed(follower_one)
    new_leader = a.await_leader()
    a.await_new_leadership_event(1)
    assert a.role(follower_one) == FOLLOWER
    assert new_leader == leader
    a.send_and_await_messages(10, 20)


def test_should_elect_new_leader_after_graceful_leader_close(sim: SimKit) -> None:
    """ClusterTest.shouldElectNewLeaderAfterGracefulLeaderClose"""
    a = aeron_cluster(sim, seed=109)
    leader = a.await_leader()
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.stop_node(leader)  # a clean close: Aeron's gracefulClose
    new_leader = a.await_leader()
    a.await_new_leadership_event(1)
    assert new_leader != leader


def test_should_echo_messages_then_continue_on_new_leader(sim: SimKit) -> None:
    """ClusterTest.shouldEchoMessagesThenContinueOnNewLeader"""
    a = aeron_cluster(sim, seed=110)
    original = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    assert a.client is not None and a.client.client.leader_member_id == original
    a.stop_node(original)
    new_leader = a.await_leader_other_than(original)
    a.await_new_leadership_event(1)
    assert a.client.client.leader_member_id == new_leader
    a.send_messages(7)
    a.await_response_message_count(17)
    follower = a.followers()[0]
    a.await_service_message_count(new_leader, 17)
    a.await_service_message_count(follower, 17)


def test_should_stop_leader_and_restart_as_follower(sim: SimKit) -> None:
    """ClusterTest.shouldStopLeaderAndRestartAsFollower"""
    a = aeron_cluster(sim, seed=111)
    original = a.await_leader()
    a.stop_node(original)
    a.await_leader_other_than(original)
    a.start_static_node(original)
    a.await_election_closed(original)
    assert a.role(original) == FOLLOWER


def test_should_stop_leader_and_restart_as_follower_with_sending_after(sim: SimKit) -> None:
    """ClusterTest.shouldStopLeaderAndRestartAsFollowerWithSendingAfter"""
    a = aeron_cluster(sim, seed=112)
    original = a.await_leader()
    a.stop_node(original)
    a.await_leader_other_than(original)
    a.start_static_node(original)
    a.await_election_closed(original)
    assert a.role(original) == FOLLOWER
    a.connect_client()
    a.send_and_await_messages(10)


def test_should_stop_leader_and_restart_as_follower_with_sending_after_then_stop_leader(sim: SimKit) -> None:
    """ClusterTest.shouldStopLeaderAndRestartAsFollowerWithSendingAfterThenStopLeader"""
    a = aeron_cluster(sim, seed=113)
    original = a.await_leader()
    a.stop_node(original)
    a.await_leader_other_than(original)
    a.start_static_node(original)
    a.await_election_closed(original)
    assert a.role(original) == FOLLOWER
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    leader = a.await_leader()
    a.stop_node(leader)
    a.await_leader_other_than(leader)


def test_should_accept_messages_after_single_node_clean_restart(sim: SimKit) -> None:
    """ClusterTest.shouldAcceptMessagesAfterSingleNodeCleanRestart"""
    a = aeron_cluster(sim, seed=114)
    a.await_leader()
    follower = a.followers()[0]
    a.await_election_closed(follower)
    a.stop_node(follower)
    a.start_static_node(follower, clean_start=True)
    a.await_election_closed(follower)
    assert a.role(follower) == FOLLOWER
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.await_service_message_count(follower, 10)


def test_should_replay_snapshot_taken_while_down(sim: SimKit) -> None:
    """ClusterTest.shouldReplaySnapshotTakenWhileDown"""
    a = aeron_cluster(sim, seed=115)
    leader = a.await_leader()
    a.connect_client()
    follower_a, follower_b = a.followers()
    a.await_election_closed(follower_b)
    a.stop_node(follower_b)
    a.take_snapshot()
    a.await_snapshot_count(leader, 1)
    a.await_snapshot_count(follower_a, 1)
    a.send_messages(10)
    a.await_response_message_count(10)
    a.start_static_node(follower_b)
    a.await_snapshot_count(follower_b, 1)
    assert a.role(follower_b) == FOLLOWER
    a.await_service_message_count(follower_b, 10)


def test_should_tolerate_multiple_leader_failures(sim: SimKit) -> None:
    """ClusterTest.shouldTolerateMultipleLeaderFailures"""
    a = aeron_cluster(sim, seed=116)
    first = a.await_leader()
    a.stop_node(first)
    second = a.await_leader_other_than(first)
    commit = a.c.member(second).commit_position
    a.start_static_node(first)
    a.await_commit_position(first, commit)
    a.await_election_closed(first)
    a.stop_node(second)
    a.await_leader_other_than(second)
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)


def test_should_recover_after_two_leader_nodes_fail_and_come_back_up_at_same_time(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverAfterTwoLeaderNodesFailAndComeBackUpAtSameTime (1,000 messages where
    Aeron sends 1,000,000 "sufficient for replay": the simulator replays any amount the same way)."""
    a = aeron_cluster(sim, seed=117)
    first = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(1000)
    assert a.client is not None
    a.client.client.close(a.c.now_ns)
    a.await_condition(lambda: not a.c.member(first).sessions, "no active session")  # type: ignore[attr-defined]
    a.stop_node(first)
    second = a.await_leader_other_than(first)
    a.stop_node(second)
    a.start_static_node(first)
    a.start_static_node(second)
    a.await_leader()
    a.client = None
    a.connect_client()
    a.send_and_await_messages(10, 1010)


def test_should_accept_messages_after_two_node_clean_restart(sim: SimKit) -> None:
    """ClusterTest.shouldAcceptMessagesAfterTwoNodeCleanRestart"""
    a = aeron_cluster(sim, seed=118)
    a.await_leader()
    follower_a, follower_b = a.followers()
    a.await_election_closed(follower_a)
    a.await_election_closed(follower_b)
    a.stop_node(follower_a)
    a.stop_node(follower_b)
    a.start_static_node(follower_a, clean_start=True)
    a.start_static_node(follower_b, clean_start=True)
    a.await_election_closed(follower_a)
    a.await_election_closed(follower_b)
    assert a.role(follower_a) == FOLLOWER and a.role(follower_b) == FOLLOWER
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.await_service_message_count(follower_a, 10)
    a.await_service_message_count(follower_b, 10)


def test_should_call_on_role_change_on_becoming_leader(sim: SimKit) -> None:
    """ClusterTest.shouldCallOnRoleChangeOnBecomingLeader"""
    a = aeron_cluster(sim, seed=119)
    leader_one = a.await_leader()
    follower_a, follower_b = a.followers()
    a.await_election_closed(follower_a)
    a.await_election_closed(follower_b)
    assert a.service(leader_one).role_changes[-1] == LEADER
    assert a.service(follower_a).role_changes == []
    assert a.service(follower_b).role_changes == []
    a.stop_node(leader_one)
    leader_two = a.await_leader_other_than(leader_one)
    follower = a.followers()[0]
    assert a.service(leader_two).role_changes[-1] == LEADER
    assert a.service(follower).role_changes == []


def test_should_lose_leadership_when_no_active_quorum_of_followers(sim: SimKit) -> None:
    """ClusterTest.shouldLoseLeadershipWhenNoActiveQuorumOfFollowers"""
    a = aeron_cluster(sim, seed=120)
    leader = a.await_leader()
    follower_a, follower_b = a.followers()
    assert a.role(leader) == LEADER
    assert a.service(leader).role_changes[-1] == LEADER
    a.await_election_closed(follower_a)
    a.await_election_closed(follower_b)
    a.stop_node(follower_a)
    a.stop_node(follower_b)
    a.await_condition(lambda: a.service(leader).role_changes[-1] != LEADER, "the service lost leadership")
    assert a.role(leader) == FOLLOWER


def test_should_close_client_on_timeout(sim: SimKit) -> None:
    """ClusterTest.shouldCloseClientOnTimeout: a client that stops sending keep-alives is closed by
    the leader after the session timeout (Aeron's timedOutClientCounter goes 0 -> 1; ours is the
    leader's CLOSED session event with reason TIMEOUT)."""
    a = aeron_cluster(sim, seed=121)
    leader = a.await_leader()
    client = a.c.add_client(keepalive_interval_ns=None)
    client.client.connect(a.c.now_ns)
    a.await_condition(lambda: client.client.is_connected, "client connected")
    session_id = client.client.cluster_session_id
    assert session_id in a.c.member(leader).sessions  # type: ignore[attr-defined]
    a.c.run_for(a.c.timeouts.session_timeout_ns)
    a.await_condition(lambda: client.client.is_closed, "the client was closed by the cluster", 5 * SECOND)
    assert session_id not in a.c.member(leader).sessions  # type: ignore[attr-defined]


def test_should_catchup_from_empty_log(sim: SimKit) -> None:
    """ClusterTest.shouldCatchupFromEmptyLog"""
    a = aeron_cluster(sim, seed=122)
    a.await_leader()
    follower = a.followers()[1]
    a.await_election_closed(follower)
    a.stop_node(follower)
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.start_static_node(follower, clean_start=True)
    a.await_service_message_count(follower, 10)


def test_should_catchup_from_empty_log_then_snapshot_after_shutdown_and_follower_clean_start(sim: SimKit) -> None:
    """ClusterTest.shouldCatchupFromEmptyLogThenSnapshotAfterShutdownAndFollowerCleanStart"""
    a = aeron_cluster(sim, seed=123)
    a.await_leader()
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.shutdown_cluster()
    a.await_node_terminations()
    for m in range(3):
        assert a.service(m).was_snapshot_taken
    a.stop_all_nodes()
    a.start_static_node(0)
    a.start_static_node(1)
    a.start_static_node(2, clean_start=True)
    new_leader = a.await_leader()
    assert new_leader != 2
    a.await_condition(lambda: a.service(0).was_snapshot_loaded and a.service(1).was_snapshot_loaded, "loaded")
    assert not a.service(2).was_snapshot_loaded
    a.await_service_message_count(2, 10)
    a.await_snapshot_count(2, 1)
    assert a.service(2).was_snapshot_taken


def test_should_catch_up_two_fresh_nodes_after_restart(sim: SimKit) -> None:
    """ClusterTest.shouldCatchUpTwoFreshNodesAfterRestart (500 messages where Aeron sends 5,000)"""
    a = aeron_cluster(sim, seed=124)
    leader = a.await_leader()
    followers = a.followers()
    a.connect_client()
    a.send_messages(500)
    a.await_response_message_count(500)
    a.await_services_message_count(500)
    a.abort_cluster()
    a.await_node_terminations()
    a.stop_all_nodes()
    a.start_static_node(leader)
    a.start_static_node(followers[0], clean_start=True)
    a.start_static_node(followers[1], clean_start=True)
    new_leader = a.await_leader()
    assert new_leader == leader
    assert len(a.followers()) == 2
    a.await_services_message_count(500, 20 * SECOND)


def test_should_replay_multiple_snapshots_with_empty_follower_log(sim: SimKit) -> None:
    """ClusterTest.shouldReplayMultipleSnapshotsWithEmptyFollowerLog"""
    a = aeron_cluster(sim, seed=125)
    a.await_leader()
    a.connect_client()
    a.send_and_await_messages(2)
    a.take_snapshot()
    for m in range(3):
        a.await_snapshot_count(m, 1)
        assert a.service(m).was_snapshot_taken
        a.service(m).was_snapshot_taken = False
    a.send_messages(1)
    a.await_response_message_count(3)
    a.await_services_message_count(3)
    a.await_condition(lambda: a.c.control("shutdown"), "SHUTDOWN accepted")
    a.await_node_terminations()
    for m in range(3):
        assert a.service(m).was_snapshot_taken
    a.stop_all_nodes()
    a.start_static_node(0)
    a.start_static_node(1)
    a.start_static_node(2, clean_start=True)
    new_leader = a.await_leader()
    assert new_leader != 2
    a.await_condition(lambda: a.service(0).was_snapshot_loaded and a.service(1).was_snapshot_loaded, "loaded")
    assert not a.service(2).was_snapshot_loaded
    assert a.service(0).message_count == 3 and a.service(1).message_count == 3
    a.await_service_message_count(2, 3)
    assert a.service(2).message_count == 3
    a.reconnect_client()
    a.sent = 0
    a.send_messages(4)
    a.await_services_message_count(7)


def test_should_recover_quickly_after_killing_followers_then_restarting_one(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverQuicklyAfterKillingFollowersThenRestartingOne"""
    a = aeron_cluster(sim, seed=126)
    leader = a.await_leader()
    follower, follower_b = a.followers()
    a.connect_client()
    a.send_and_await_messages(10)
    a.kill_node(follower)
    a.kill_node(follower_b)
    a.await_condition(lambda: a.role(leader) != LEADER, "the leader stepped down")
    a.start_static_node(follower)
    a.await_leader()


def test_should_recover_when_leader_has_appended_more_than_follower(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenLeaderHasAppendedMoreThanFollower"""
    a = aeron_cluster(sim, seed=127)
    leader = a.await_leader()
    follower_a, follower_b = a.followers()
    a.connect_client()
    a.send_and_await_messages(10)
    a.stop_node(follower_a)
    a.send_messages(10)
    a.await_response_message_count(20)
    a.stop_node(follower_b)
    a.send_messages(10)  # appended by the leader, never committed
    a.c.run_for(SECOND)
    a.stop_node(leader)
    a.start_static_node(leader)
    a.start_static_node(follower_a)
    a.await_leader()
    a.await_condition(lambda: a.c.leader_id() is not None, "a leader")
    a.await_service_message_count(follower_a, 20)


def test_should_handle_multiple_elections(sim: SimKit) -> None:
    """ClusterTest.shouldHandleMultipleElections"""
    a = aeron_cluster(sim, seed=128)
    leader0 = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.stop_node(leader0)
    leader1 = a.await_leader_other_than(leader0)
    a.await_new_leadership_event(1)
    a.send_and_await_messages(10, 20)
    a.start_static_node(leader0)
    a.await_service_message_count(leader0, 20)
    a.stop_node(leader1)
    a.await_leader_other_than(leader1)
    a.await_new_leadership_event(2)
    a.send_and_await_messages(10, 30)


def test_should_recover_when_last_snapshot_is_marked_invalid(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenLastSnapshotIsMarkedInvalid"""
    a = aeron_cluster(sim, seed=129)
    leader0 = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.take_snapshot()
    for m in range(3):
        a.await_snapshot_count(m, 1)
    a.send_and_await_messages(10, 20)
    a.take_snapshot()
    for m in range(3):
        a.await_snapshot_count(m, 2)
    a.stop_node(leader0)
    a.await_leader_other_than(leader0)
    a.await_new_leadership_event(1)
    a.stop_all_nodes()
    from clusterlab.core.consensus.recording_log import RecordingLog

    for m in range(3):
        with RecordingLog.open(a.c.member_dir(m)) as recording_log:
            assert recording_log.invalidate_latest_snapshot()
    a.restart_all_nodes()
    a.await_leader()
    a.await_services_message_count(20)
    a.reconnect_client()
    a.sent = 20
    a.send_messages(10)
    a.await_services_message_count(30)


def test_should_handle_reusing_correlation_ids_across_a_snapshot(sim: SimKit) -> None:
    """ClusterTest.shouldHandleReusingCorrelationIdsAcrossASnapshot: timers scheduled with the same
    correlation id before and after a snapshot all fire (the Aeron test service's timer messages are
    the echo service's ``timer`` command here)."""
    c = sim.cluster(members=3, seed=130, service="echo")
    c.await_leader()
    client = c.connect_client()
    client.client.offer(b"timer t1 0", c.now_ns)
    c.await_condition(lambda: any(m.payload.startswith(b"timer t1 fired") for m in client.received), SECOND, "t1")
    assert c.control("snapshot")
    c.await_condition(lambda: all(c.member(m).snapshot_count == 1 for m in range(3)), 2 * SECOND, "snapshot")
    client.client.offer(b"timer t1 0", c.now_ns)
    c.await_condition(
        lambda: sum(m.payload.startswith(b"timer t1 fired") for m in client.received) == 2, SECOND, "t1 again"
    )


def test_should_handle_replay_after_shutdown(sim: SimKit) -> None:
    """ClusterTest.shouldHandleReplayAfterShutdown"""
    a = aeron_cluster(sim, seed=131)
    a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.shutdown_cluster()
    a.await_node_terminations()
    a.stop_all_nodes()
    a.restart_all_nodes()
    a.await_leader()
    a.await_snapshots_loaded()
    for m in range(3):
        assert a.service(m).message_count == 10
        assert len(consensus_module_snapshots(a.c, m)) == 1


def test_should_take_a_snapshot_after_receiving_admin_request_of_type_snapshot(sim: SimKit) -> None:
    """ClusterTest.shouldTakeASnapshotAfterReceivingAdminRequestOfTypeSnapshot"""
    from clusterlab.core.codec.enums import AdminRequestType, AdminResponseCode

    a = aeron_cluster(sim, seed=132)
    a.await_leader()
    client = a.connect_client()
    correlation_id = client.client.send_admin_request(AdminRequestType.SNAPSHOT, a.c.now_ns)
    a.await_condition(lambda: correlation_id in client.client.admin_responses, "the AdminResponse")
    response = client.client.admin_responses[correlation_id]
    assert (response.request_type, response.response_code, response.message) == (
        AdminRequestType.SNAPSHOT,
        AdminResponseCode.OK,
        "",
    )
    for m in range(3):
        a.await_snapshot_count(m, 1)


def test_should_reject_take_snapshot_request_with_an_authorisation_error(sim: SimKit) -> None:
    """ClusterTest.shouldRejectTakeSnapshotRequestWithAnAuthorisationError"""
    from clusterlab.core.codec.enums import AdminRequestType, AdminResponseCode

    a = aeron_cluster(sim, seed=133)
    leader = a.await_leader()
    a.c.member(leader).ctx.authorise_admin = lambda principal, request_type: False  # type: ignore[attr-defined]
    client = a.connect_client()
    correlation_id = client.client.send_admin_request(AdminRequestType.SNAPSHOT, a.c.now_ns)
    a.await_condition(lambda: correlation_id in client.client.admin_responses, "the AdminResponse")
    response = client.client.admin_responses[correlation_id]
    assert response.response_code == AdminResponseCode.UNAUTHORISED_ACCESS
    assert response.message == "Execution of the SNAPSHOT request was not authorised"
    a.c.run_for(SECOND)
    for m in range(3):
        assert a.snapshot_count(m) == 0


def test_should_remain_stable_when_there_is_a_slow_follower(sim: SimKit) -> None:
    """ClusterTest.shouldRemainStableWhenThereIsASlowFollower (a follower whose links are slow: the
    leader keeps its leadership and the election count stays at 1)."""
    a = aeron_cluster(sim, seed=134)
    leader = a.await_leader()
    slow = a.followers()[0]
    for other in range(3):
        if other != slow:
            a.c.set_link(other, slow, latency_ns=(50_000_000, 80_000_000))
            a.c.set_link(slow, other, latency_ns=(50_000_000, 80_000_000))
    a.connect_client()
    a.send_and_await_messages(50)
    assert a.c.leader_id() == leader
    assert a.election_count(leader) == 1
