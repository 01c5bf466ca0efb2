"""Ports of Aeron's ``ClusterTest`` (aeron-system-tests/src/test/java/io/aeron/cluster) onto the
simulator: three members (five where Aeron uses five) running the Aeron test service
(tests/aeron/support.py). Each test's docstring names the Aeron test; the assertions are Aeron's.
Ports that need a capability we lack are listed in docs/aeron-parity.md."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import SECOND, ConsensusModuleContext, Role
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.recording_log import RecordingLog

from tests.aeron.support import SERVICE_NAME, AeronCluster, aeron_cluster
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

    def denying(ctx: ConsensusModuleContext) -> ConsensusModule:
        # The policy is the context's, read when the module is built (as Aeron's authorisation service).
        ctx.authorise_admin = lambda principal, request_type: False
        return ConsensusModule(ctx)

    a = aeron_cluster(sim, seed=133, member_factory=denying)
    a.await_leader()
    client = a.connect_client()
    correlation_id = client.client.send_admin_request(AdminRequestType.SNAPSHOT, a.c.now_ns)
    a.await_condition(lambda: correlation_id in client.client.admin_responses, "the AdminResponse")
    response = client.client.admin_responses[correlation_id]
    assert response.response_code == AdminResponseCode.UNAUTHORISED_ACCESS
    assert response.message == "Execution of the SNAPSHOT request was not authorised"
    a.c.run_for(SECOND)
    for m in range(3):
        assert a.snapshot_count(m) == 0


def test_should_recover_quickly_after_killing_followers_then_restarting_one(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverQuicklyAfterKillingFollowersThenRestartingOne"""
    a = aeron_cluster(sim, seed=126)
    leader = a.await_leader()
    follower_one, follower_two = a.followers()
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.stop_node(follower_one)
    a.stop_node(follower_two)
    while a.role(leader) == LEADER:
        assert a.client is not None
        a.client.client.offer(b"msg-keep-sending", a.c.now_ns)
        a.c.run_for(SECOND // 2)
    a.start_static_node(follower_two, clean_start=True)
    a.await_leader()


def test_should_recover_when_leader_has_appended_more_than_follower(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenLeaderHasAppendedMoreThanFollower"""
    a = aeron_cluster(sim, seed=127)
    leader = a.await_leader()
    follower_one, follower_two = a.followers()
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.stop_node(follower_one)
    a.send_messages(10)
    a.await_response_message_count(20)
    a.stop_node(follower_two)
    a.stop_node(leader)
    a.start_static_node(leader)
    a.start_static_node(follower_one)
    a.await_leader()


@pytest.mark.parametrize("use_response_channels", [True, False])
def test_should_recover_when_follower_is_multiple_terms_behind(sim: SimKit, use_response_channels: bool) -> None:
    """ClusterTest.shouldRecoverWhenFollowerIsMultipleTermsBehind (both values of Aeron's
    useResponseChannels run the same path here: our egress has one transport)."""
    a = aeron_cluster(sim, seed=135 if use_response_channels else 136)
    original = a.await_leader()
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.stop_node(original)
    new_leader = a.await_leader_other_than(original)
    a.reconnect_client()
    a.send_messages(10)
    a.await_response_message_count(20)
    a.stop_node(new_leader)
    a.start_static_node(new_leader)
    a.await_leader()
    a.reconnect_client()
    a.send_messages(10)
    a.await_response_message_count(30)
    a.start_static_node(original)
    a.await_service_message_count(original, 30)


@pytest.mark.parametrize("use_response_channels", [True, False])
def test_should_recover_when_follower_is_multiple_terms_behind_from_empty_log(
    sim: SimKit, use_response_channels: bool
) -> None:
    """ClusterTest.shouldRecoverWhenFollowerIsMultipleTermsBehindFromEmptyLog (four members, as Aeron)"""
    a = aeron_cluster(sim, members=4, seed=137 if use_response_channels else 138)
    original = a.await_leader()
    a.connect_client()
    a.send_messages(100)
    a.await_response_message_count(100)
    a.stop_node(original)
    new_leader = a.await_leader_other_than(original)
    a.reconnect_client()
    a.send_messages(100)
    a.await_response_message_count(200)
    a.stop_node(new_leader)
    a.start_static_node(new_leader, clean_start=True)
    a.await_leader()
    a.reconnect_client()
    a.send_messages(100)
    a.await_response_message_count(300)
    a.start_static_node(original, clean_start=True)
    a.await_service_message_count(original, 300)


def test_should_recover_when_follower_arrives_part_way_through_term(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenFollowerArrivesPartWayThroughTerm"""
    a = aeron_cluster(sim, seed=139)
    a.await_leader()
    follower_one = a.followers()[0]
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.stop_node(follower_one)
    a.send_messages(10)
    a.await_response_message_count(20)
    a.start_static_node(follower_one)
    a.await_service_message_count(follower_one, 20)
    assert a.service(follower_one).message_count == 20


def test_should_recover_when_follower_arrive_part_way_through_term_after_missing_election(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenFollowerArrivePartWayThroughTermAfterMissingElection"""
    a = aeron_cluster(sim, seed=140)
    leader = a.await_leader()
    follower_one, follower_two = a.followers()
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.stop_node(follower_one)
    a.send_messages(10)
    a.await_response_message_count(20)
    a.stop_node(follower_two)
    a.stop_node(leader)
    a.start_static_node(leader)
    a.start_static_node(follower_two)
    a.await_leader()
    a.reconnect_client()
    a.send_messages(10)
    a.await_response_message_count(30)
    a.start_static_node(follower_one)
    a.await_service_message_count(follower_one, 30)
    assert a.service(follower_one).message_count == 30


def invalidate_latest_snapshot(a: AeronCluster) -> None:
    """Aeron TestCluster.invalidateLatestSnapshot: on every (stopped) member's recording log."""
    for m in range(a.c.member_count):
        with RecordingLog.open(a.c.storage(m)) as recording_log:
            assert recording_log.invalidate_latest_snapshot()


def send_keep_alive(a: AeronCluster) -> None:
    assert a.client is not None
    a.client.client.send_keep_alive(a.c.now_ns)  # Aeron asserts the offer succeeded; ours raises if not


def test_should_recover_when_last_snapshot_is_marked_invalid(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenLastSnapshotIsMarkedInvalid"""
    a = aeron_cluster(sim, seed=129)
    leader0 = a.await_leader()
    a.connect_client()
    a.send_messages(3)
    a.await_services_message_count(3)
    a.take_snapshot()
    a.await_snapshot_count_everywhere(1)
    a.send_messages(3)
    a.await_services_message_count(6)
    a.take_snapshot()
    a.await_snapshot_count_everywhere(2)
    a.stop_node(leader0)
    a.await_leader_other_than(leader0)
    a.await_new_leadership_event(1)
    send_keep_alive(a)
    a.start_static_node(leader0)
    a.send_and_await_messages(3, 9)
    a.stop_all_nodes()
    invalidate_latest_snapshot(a)
    a.restart_all_nodes()
    a.await_leader()
    a.await_services_message_count(9)


def test_should_recover_when_last_snapshot_for_shutdown_is_marked_invalid(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenLastSnapshotForShutdownIsMarkedInvalid (one member)"""
    a = aeron_cluster(sim, members=1, seed=141)
    leader = a.await_leader()
    a.connect_client()
    a.send_messages(3)
    a.await_services_message_count(3)
    a.stop_node(leader)
    a.start_static_node(leader)
    leader = a.await_leader()
    a.shutdown_cluster()
    a.await_node_terminations()
    assert a.service(leader).was_snapshot_taken
    a.stop_node(leader)
    invalidate_latest_snapshot(a)
    a.restart_all_nodes()
    leader = a.await_leader()
    a.await_services_message_count(3)
    a.await_condition(lambda: a.service(leader).was_snapshot_taken, "the replayed snapshot was taken again")


def test_should_handle_multiple_elections(sim: SimKit) -> None:
    """ClusterTest.shouldHandleMultipleElections"""
    a = aeron_cluster(sim, seed=128)
    leader0 = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(3)
    a.stop_node(leader0)
    leader1 = a.await_leader_other_than(leader0)
    a.await_new_leadership_event(1)
    send_keep_alive(a)
    a.start_static_node(leader0)
    a.await_election_closed(leader0)
    a.connect_client()
    a.send_and_await_messages(3, 6)
    a.stop_node(leader1)
    a.await_leader_other_than(leader1)
    a.await_new_leadership_event(1)  # the second client has seen one leader change, the first two
    send_keep_alive(a)
    a.start_static_node(leader1)
    a.await_election_closed(leader1)
    a.connect_client()
    a.send_and_await_messages(3, 9)


def test_should_recover_when_last_snapshot_is_invalid_between_two_elections(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenLastSnapshotIsInvalidBetweenTwoElections"""
    a = aeron_cluster(sim, seed=142)
    leader0 = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(3)
    a.stop_node(leader0)
    leader1 = a.await_leader_other_than(leader0)
    a.await_new_leadership_event(1)
    send_keep_alive(a)
    a.start_static_node(leader0)
    a.send_and_await_messages(3, 6)
    a.take_snapshot()
    a.await_snapshot_count_everywhere(1)
    a.stop_node(leader1)
    a.await_leader_other_than(leader1)
    a.await_new_leadership_event(2)
    send_keep_alive(a)
    a.start_static_node(leader1)
    a.send_and_await_messages(3, 9)
    a.stop_all_nodes()
    invalidate_latest_snapshot(a)
    a.restart_all_nodes()
    a.await_leader()
    a.await_services_message_count(9)


def test_should_recover_when_last_twos_snapshots_are_invalid_after_election(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenLastTwosSnapshotsAreInvalidAfterElection"""
    a = aeron_cluster(sim, seed=143)
    leader0 = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(3)
    a.take_snapshot()
    a.await_snapshot_count_everywhere(1)
    a.stop_node(leader0)
    a.await_leader_other_than(leader0)
    a.await_new_leadership_event(1)
    send_keep_alive(a)
    a.start_static_node(leader0)
    a.send_and_await_messages(3, 6)
    a.take_snapshot()
    for m in range(3):
        a.await_snapshot_count(m, 1 if m == leader0 else 2)
    a.send_and_await_messages(3, 9)
    a.take_snapshot()
    for m in range(3):
        a.await_snapshot_count(m, 2 if m == leader0 else 3)
    a.send_and_await_messages(3, 12)
    a.stop_all_nodes()
    invalidate_latest_snapshot(a)
    invalidate_latest_snapshot(a)
    a.restart_all_nodes()
    a.await_leader()
    a.await_snapshot_count_everywhere(2)
    a.await_services_message_count(12)


@pytest.mark.parametrize("message", [b"msg-no-op", b"register-timer"])
def test_should_catch_up_after_follower_misses_message(sim: SimKit, message: bytes) -> None:
    """ClusterTest.shouldCatchUpAfterFollowerMissesOneMessage (NO_OP_MSG) and
    ClusterTest.shouldCatchUpAfterFollowerMissesTimerRegistration (REGISTER_TIMER_MSG)"""
    a = aeron_cluster(sim, seed=144 if message == b"msg-no-op" else 145)
    a.await_leader()
    follower = a.followers()[0]
    a.stop_node(follower)
    client = a.connect_client()
    a.await_condition(lambda: client.client.offer(message, a.c.now_ns) > 0, "message sent")
    a.await_condition(lambda: any(m.payload == message for m in client.received), "the response")
    a.start_static_node(follower)
    a.await_election_closed(follower)
    assert a.role(follower) == FOLLOWER


def test_should_handle_reusing_correlation_ids_across_a_snapshot(sim: SimKit) -> None:
    """ClusterTest.shouldHandleReusingCorrelationIdsAcrossASnapshot: REGISTER_TIMER_MSG twice (the
    test service schedules the same correlation id each time)."""
    a = aeron_cluster(sim, seed=146)
    a.await_leader()
    client = a.connect_client()
    leader = a.await_leader()
    for expected in (1, 2):
        a.await_condition(lambda: client.client.offer(b"register-timer", a.c.now_ns) > 0, "message sent")
        a.await_condition(
            lambda n=expected: sum(m.payload == b"register-timer" for m in client.received) >= n,
            f"{expected} responses",
        )
        a.await_condition(lambda: a.service(leader).timer_count >= 1, "a timer event")


def test_should_recover_when_followers_is_multiple_terms_behind_from_empty_log_and_partial_log(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhenFollowersIsMultipleTermsBehindFromEmptyLogAndPartialLogWithoutCommittedLogEntry
    (five members, four started)."""
    c = sim.cluster(members=5, seed=147, service=SERVICE_NAME)
    c.stop(4)
    a = AeronCluster(c)
    total = 0
    partial = -1
    for _ in range(3):
        old_leader = a.await_leader()
        a.connect_client()
        a.send_messages(10)
        total += 10
        a.await_response_message_count(total)
        if partial == -1:
            partial = (old_leader + 1) % 4
            a.stop_node(partial)
        a.stop_node(old_leader)
        a.start_static_node(old_leader)
        a.await_leader()
    a.start_static_node(4, clean_start=True)
    a.await_service_message_count(4, total, 20 * SECOND)
    a.start_static_node(partial)
    a.await_service_message_count(partial, total, 20 * SECOND)
    a.await_leader()
    a.connect_client()
    a.send_messages(10)
    total += 10
    a.await_response_message_count(total)
    a.await_service_message_count(partial, total)
    sim.converge(c)
    terms = []
    for m in range(5):
        with RecordingLog.open(c.storage(m)) as recording_log:
            terms.append(
                [(e.leadership_term_id, e.term_base_log_position) for e in recording_log.entries() if e.type == 0]
            )
    assert all(t == terms[0] for t in terms), terms


def send_unexpected_messages(a: AeronCluster, count: int) -> None:
    """Aeron TestCluster.sendUnexpectedMessages: messages that must never be applied (here: they are
    offered while no quorum can commit them)."""
    assert a.client is not None
    for i in range(count):
        a.await_condition(
            lambda i=i: a.client is not None and a.client.client.offer(f"unexpected-{i}".encode(), a.c.now_ns) > 0,  # type: ignore[union-attr]
            "offered",
        )


def test_should_recover_with_uncommitted_messages_after_restart_when_new_commit_pos_exceeds_previous_appended_pos(
    sim: SimKit,
) -> None:
    """ClusterTest.shouldRecoverWithUncommittedMessagesAfterRestartWhenNewCommitPosExceedsPreviousAppendedPos"""
    a = aeron_cluster(sim, members=5, seed=148)
    leader = a.await_leader()
    follower_a, follower_b, follower_c, follower_d = a.followers()
    a.connect_client()
    for f in (follower_a, follower_b, follower_c):
        a.stop_node(f)
    send_unexpected_messages(a, 10)
    commit = a.c.member(leader).commit_position
    a.await_condition(lambda: a.c.member(leader).append_position > commit, "uncommitted appends")
    target = a.c.member(leader).append_position
    a.stop_node(follower_d)
    a.stop_node(leader)
    assert a.client is not None
    a.client.client.close(a.c.now_ns)
    for f in (follower_a, follower_b, follower_c):
        a.start_static_node(f)
    a.await_leader()
    for f in (follower_a, follower_b, follower_c):
        a.await_election_closed(f)
    a.connect_client()
    count = 0
    while a.c.member(follower_a).commit_position < target:
        a.send_messages(1)
        count += 1
        a.c.run_for(10_000_000)
    a.await_response_message_count(count)
    for f in (follower_a, follower_b, follower_c):
        a.await_service_message_count(f, count)
        assert a.service(f).message_count == count, "no unexpected message was applied"
    a.start_static_node(leader)
    a.start_static_node(follower_d)
    for m in (leader, follower_d):
        a.await_service_message_count(m, count)
        assert a.service(m).message_count == count


def test_should_recover_with_uncommitted_messages_after_restart_when_new_commit_pos_is_less_than_previous_appended_pos(
    sim: SimKit,
) -> None:
    """ClusterTest.shouldRecoverWithUncommittedMessagesAfterRestartWhenNewCommitPosIsLessThanPreviousAppendedPos"""
    a = aeron_cluster(sim, members=5, seed=149)
    leader = a.await_leader()
    follower_a, follower_b, follower_c, follower_d = a.followers()
    a.connect_client()
    for f in (follower_a, follower_b, follower_c):
        a.stop_node(f)
    send_unexpected_messages(a, 10)
    commit = a.c.member(leader).commit_position
    a.await_condition(lambda: a.c.member(leader).append_position > commit, "uncommitted appends")
    a.stop_node(leader)
    a.stop_node(follower_d)
    assert a.client is not None
    a.client.client.close(a.c.now_ns)
    for f in (follower_a, follower_b, follower_c):
        a.start_static_node(f)
    a.await_leader()
    a.start_static_node(leader)
    a.start_static_node(follower_d)
    a.await_election_closed(leader)
    a.connect_client()
    a.send_and_await_messages(10)
    a.c.run_for(SECOND)
    for m in range(5):
        assert a.service(m).message_count == 10, f"member {m} applied an unexpected message"


def test_should_recover_while_messages_continue(sim: SimKit) -> None:
    """ClusterTest.shouldRecoverWhileMessagesContinue: a publisher keeps sending (here one message
    per 10 ms of simulated time) while a follower is stopped for 2 s and restarted."""
    a = aeron_cluster(sim, seed=150)
    a.await_leader()
    follower = a.followers()[1]
    a.connect_client()

    def publish_for(duration_ns: int) -> None:
        end = a.c.now_ns + duration_ns
        while a.c.now_ns < end:
            assert a.client is not None
            if a.client.client.offer(f"msg-{a.sent}".encode(), a.c.now_ns) > 0:
                a.sent += 1
            a.c.run_for(10_000_000)

    a.await_condition(lambda: a.c.member(follower).commit_position > 0, "follower committed something")
    a.stop_node(follower)
    publish_for(2 * SECOND)
    a.start_static_node(follower)
    while a.c.member(follower).election_state is not None:
        publish_for(10_000_000)
    publish_for(2 * SECOND)
    a.await_response_message_count(a.sent)
    a.await_service_message_count(follower, a.sent)
    assert a.client is not None
    a.client.client.close(a.c.now_ns)
    leader = a.await_leader()
    a.await_condition(lambda: not a.c.member(leader).sessions, "no active session")  # type: ignore[attr-defined]


LARGE_MSG = b"msg-" + b"a" * 1020  # Aeron ClusterTests.LARGE_MSG: 1 KiB


@pytest.mark.slow
def test_should_catchup_and_join_as_follower_while_sending_big_messages(sim: SimKit) -> None:
    """ClusterTest.shouldCatchupAndJoinAsFollowerWhileSendingBigMessages (1 KiB messages: 1,000, then
    one per 50 ms for 10 s with a follower down and 30 s after it restarted; no further election)."""
    a = aeron_cluster(sim, seed=151)
    leader = a.await_leader()
    assert a.election_count(leader) == 1
    followers = a.followers()
    for f in followers:
        assert a.election_count(f) == 1
    client = a.connect_client()
    count = 0

    def send_large() -> None:
        nonlocal count
        a.await_condition(lambda: client.client.offer(LARGE_MSG, a.c.now_ns) > 0, "large message sent")
        count += 1

    for _ in range(1000):
        send_large()
    # Stop the slower follower, so a quorum remains.
    follower1, follower2 = sorted(followers, key=lambda f: a.c.member(f).append_position, reverse=True)
    assert len({leader, follower1, follower2}) == 3
    a.stop_node(follower2)
    end = a.c.now_ns + 10 * SECOND
    while a.c.now_ns < end:
        send_large()
        a.c.run_for(50_000_000)
    a.start_static_node(follower2)
    assert a.await_leader() == leader, "leader changed"
    a.await_election_closed(follower2)
    end = a.c.now_ns + 30 * SECOND
    while a.c.now_ns < end:
        send_large()
        a.c.run_for(50_000_000)
    a.await_response_message_count(count, 30 * SECOND)
    a.await_services_message_count(count, 30 * SECOND)
    assert a.election_count(leader) == 1, "unexpected election on leader"
    assert a.election_count(follower1) == 1, "unexpected election on follower 1"
    assert a.election_count(follower2) == 1, "election loop detected"
