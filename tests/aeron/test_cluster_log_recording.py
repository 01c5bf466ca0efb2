"""A log recording that stops unexpectedly: Aeron's
``ClusterTest.shouldEnterElectionWhenRecordingStopsUnexpectedlyOnLeader`` in the simulator and on real
processes, and the regression tests of the rule it rests on.

Aeron's ``ConsensusModuleAgent.pollArchiveEvents`` takes the log recording's ``RecordingSignal.STOP``:
it keeps the stop position (``logRecordingStopPosition``) and, ACTIVE outside an election (any role),
enters an election with the counted ClusterEvent "log recording stopped: eos=false"; the election
restarts the recording by extending it (``startLogRecording`` -> ``extendRecording``). Here the archive
lives in the node, so the stop is a fault the test injects: ``SimCluster.stop_log_recording`` and, on a
member process, the ``TestHook`` STOP_LOG_RECORDING (the module takes it as the input "the log
recording stopped at P", ``ConsensusModule.on_log_recording_stopped``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from clusterlab.core.codec.control import ControlResponseCode, TestHook, TestHookKind
from clusterlab.core.consensus.context import SECOND, ConsensusModuleState, ElectionState, Role
from clusterlab.harness.cluster_tool import read_member_counters
from clusterlab.harness.local import LocalCluster

from clusterlab.testing.intercepts import TestHooks, apply_test_hook
from tests.aeron.support import AeronCluster, aeron_cluster
from tests.cluster.helpers import CATCH_UP_S, LEADER_S, assert_services_agree, await_caught_up, running_cluster

REASON = "log recording stopped: eos=false"
ERROR = f"election: {REASON}"  # the distinct error log's key: where, then Aeron's ClusterEvent text


def _cluster(sim: Any, seed: int = 0) -> AeronCluster:
    return aeron_cluster(sim, members=3, seed=seed)


def _errors(a: AeronCluster, member_id: int) -> dict[str, int]:
    """The member's distinct error log (Aeron's mark-file error log)."""
    return dict(a.c.member(member_id).s.distinct_errors)  # type: ignore[attr-defined]


def _await_leader_and_closed_election(a: AeronCluster) -> int:
    """Aeron ``TestCluster.awaitLeaderAndClosedElection``: a leader whose election has closed."""
    a.await_condition(
        lambda: (leader := a.c.leader_id()) is not None and a.c.member(leader).election_state is None,
        "a leader with its election closed",
    )
    leader = a.c.leader_id()
    assert leader is not None
    return leader


def _await_followers(a: AeronCluster, count: int) -> list[int]:
    """Aeron ``TestCluster.followers(expectedMinimumFollowerCount)``: every live member's election
    closed, at least ``count`` of them FOLLOWER."""

    def followers() -> list[int]:
        live = a.c.members_alive()
        if any(a.c.member(m).election_state is not None for m in live):
            return []
        return [m for m in live if a.role(m) == Role.FOLLOWER]

    a.await_condition(lambda: len(followers()) >= count, f"{count} followers", 20 * SECOND)
    return followers()


@pytest.mark.sim
def test_should_enter_election_when_recording_stops_unexpectedly_on_leader(sim: Any) -> None:
    """ClusterTest.shouldEnterElectionWhenRecordingStopsUnexpectedlyOnLeader: one message sent and
    echoed, the leader's archive stops the log recording; the client sees a new leadership event, a
    leader closes its election and there are two followers. (Also: the old leader counted the
    ClusterEvent "log recording stopped: eos=false" once.)"""
    a = _cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(1)

    a.c.stop_log_recording(leader)

    a.await_new_leadership_event(1)
    _await_leader_and_closed_election(a)
    assert len(_await_followers(a, 2)) == 2
    assert _errors(a, leader) == {ERROR: 1}
    assert a.c.counters(leader).errors == 1


@pytest.mark.sim
def test_a_leader_whose_log_recording_stopped_appends_nothing_and_elects(sim: Any) -> None:
    """Without the rule the leader stays ACTIVE and keeps appending to a recording that has stopped.
    With it: at the stop the leader is in an election (role FOLLOWER) and takes no message; its
    recording ends where it stopped until the election resumes it; then a new term (higher term id)
    takes messages again and every member applies them, the recording extending past the stop."""
    a = _cluster(sim, seed=3)
    leader = a.await_leader()
    term = a.leadership_term_id(leader)
    a.connect_client()
    a.send_and_await_messages(1)
    elections = a.election_count(leader)

    stopped_at = a.c.stop_log_recording(leader)

    module = a.c.member(leader)
    assert module.election_state is not None and a.role(leader) == Role.FOLLOWER
    assert a.election_count(leader) == elections + 1
    assert module.offer(b"after the stop", a.c.now_ns) == -1
    assert module.archive.stop_position == stopped_at

    a.await_new_leadership_event(1)
    new_leader = _await_leader_and_closed_election(a)
    assert a.leadership_term_id(new_leader) > term
    a.send_and_await_messages(2)
    assert all(a.service(m).message_count == 3 for m in a.c.members_alive())
    assert module.archive.stop_position > stopped_at
    assert _errors(a, leader) == {ERROR: 1}


@pytest.mark.sim
def test_a_follower_whose_log_recording_stopped_enters_an_election_and_rejoins_its_leader(sim: Any) -> None:
    """Aeron reacts to the STOP signal in any role: a follower whose recording stops counts the same
    error, enters an election, finds the leader still leading the same term and rejoins it; the
    messages sent after it reach its service."""
    a = _cluster(sim, seed=5)
    leader = a.await_leader()
    term = a.leadership_term_id(leader)
    follower = a.followers()[0]
    a.connect_client()
    a.send_and_await_messages(1)

    a.c.stop_log_recording(follower)
    assert a.c.member(follower).election_state is not None

    a.await_election_closed(follower)
    assert (a.c.leader_id(), a.leadership_term_id(follower)) == (leader, term)
    assert a.role(follower) == Role.FOLLOWER
    a.send_and_await_messages(2)
    assert a.service(follower).message_count == 3
    assert _errors(a, follower) == {ERROR: 1}
    assert ERROR not in _errors(a, leader)


@pytest.mark.sim
def test_a_leader_whose_log_recording_stops_while_snapshotting_elects_once_active_again(sim: Any) -> None:
    """Aeron enters the election only when the STOP meets an ACTIVE module; our leader, stopped while
    it takes a snapshot, appends nothing more (neither the message it held nor one sent after the
    stop), finishes the snapshot and enters the election when it is ACTIVE again (else it would append
    to the stopped recording, or serve nothing for ever)."""
    a = _cluster(sim, seed=11)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(1)
    a.take_snapshot_on(leader)
    a.await_condition(lambda: a.c.member(leader).state == ConsensusModuleState.SNAPSHOT, "the leader snapshots")
    module = a.c.member(leader)
    a.send_messages(1)
    held = module.client_sessions.held_ingress  # type: ignore[attr-defined]
    a.await_condition(lambda: len(held) == 1, "the snapshotting leader holds it")
    assert module.state == ConsensusModuleState.SNAPSHOT

    stopped_at = a.c.stop_log_recording(leader)
    assert module.election_state is None and a.role(leader) == Role.LEADER
    a.send_messages(1)  # refused by the stopped leader
    a.await_condition(lambda: module.election_state is not None, "the leader enters an election")
    assert module.archive.stop_position == stopped_at

    a.await_new_leadership_event(1)
    _await_leader_and_closed_election(a)
    assert a.snapshot_count(leader) == 1
    assert module.archive.stop_position > stopped_at
    assert _errors(a, leader) == {ERROR: 1}


@pytest.mark.sim
def test_a_follower_whose_log_recording_stops_while_snapshotting_records_nothing_until_its_election(
    sim: Any,
) -> None:
    """A follower whose recording stops while it snapshots (its service slow to take the snapshot)
    appends none of the leader's LogBlocks meanwhile; ACTIVE again it enters the election, rejoins the
    same leader and term, and catches up on what it did not record."""
    a = _cluster(sim, seed=13)
    leader = a.await_leader()
    term = a.leadership_term_id(leader)
    follower = a.followers()[0]
    module = a.c.member(follower)
    a.connect_client()
    a.send_and_await_messages(1)
    a.c.delay_service_message(follower, 300 * SECOND // 1000)
    a.take_snapshot()
    a.await_condition(lambda: module.state == ConsensusModuleState.SNAPSHOT, "the follower snapshots")

    stopped_at = a.c.stop_log_recording(follower)
    a.send_messages(3)
    a.await_condition(lambda: module.election_state is not None, "the follower enters an election")
    assert module.archive.stop_position == stopped_at
    assert a.c.member(leader).archive.stop_position > stopped_at

    a.await_election_closed(follower)
    assert (a.c.leader_id(), a.leadership_term_id(follower)) == (leader, term)
    a.await_services_message_count(4)
    assert _errors(a, follower) == {ERROR: 1}


@pytest.mark.sim
def test_a_stop_during_an_election_elects_again_and_a_restart_recovers(sim: Any) -> None:
    """A stop met past the election's INIT (which resumes the recording) leaves the recording stopped:
    once that election closes the member elects again (the error counted twice); the cluster then takes
    messages, and the member restarted from its disk rejoins with the whole log."""
    a = _cluster(sim, seed=3)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(1)
    module = a.c.member(leader)
    a.c.stop_log_recording(leader)
    a.await_condition(lambda: module.election_state not in (None, ElectionState.INIT), "past INIT")
    elections = a.election_count(leader)

    a.c.stop_log_recording(leader)

    a.await_condition(lambda: a.election_count(leader) == elections + 1, "the member elects again")
    a.await_new_leadership_event(1)
    _await_leader_and_closed_election(a)
    assert _errors(a, leader) == {ERROR: 2}
    a.send_and_await_messages(2)

    a.stop_node(leader)
    a.start_static_node(leader)
    assert len(_await_followers(a, 1)) >= 1
    a.await_service_message_count(leader, 3)


@pytest.mark.sim
def test_the_stop_log_recording_test_hook_acts_at_the_next_duty_cycle(sim: Any) -> None:
    """The path of a member process: the TestHook STOP_LOG_RECORDING arms the member's intercepts, and
    its next duty cycle takes the stop at the recording's end (once: the hook disarms itself)."""
    a = _cluster(sim, seed=7)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(1)
    hooks = a.c.member(leader).intercepts  # type: ignore[attr-defined]
    assert isinstance(hooks, TestHooks)

    reply = apply_test_hook(hooks, TestHook(1, 0, TestHookKind.STOP_LOG_RECORDING, 0))
    assert reply.code == ControlResponseCode.OK and "stop_log_recording=True" in reply.message

    a.await_new_leadership_event(1)
    _await_leader_and_closed_election(a)
    assert hooks.log_recording_stops == 1 and not hooks.stop_log_recording
    assert _errors(a, leader) == {ERROR: 1}


# --- real processes -------------------------------------------------------------------------------------


def _stop_log_recording(c: LocalCluster, member_id: int) -> bool:
    """The member process's archive stops its log recording (the TestHook STOP_LOG_RECORDING; Aeron's
    test calls ``tryStopRecordingByIdentity(0)`` on the leader's archive). True if the node took it."""
    return c._hook(member_id, TestHookKind.STOP_LOG_RECORDING)


def _persisted_errors(c: LocalCluster, member_id: int) -> dict[str, int]:
    """The member's distinct error log as its node last persisted it (``counters.json``)."""
    try:
        return read_member_counters(c.member_dir(member_id))[1]
    except Exception:  # not written yet
        return {}


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_should_enter_election_when_recording_stops_unexpectedly_on_leader_on_processes(tmp_path: Path) -> None:
    """ClusterTest.shouldEnterElectionWhenRecordingStopsUnexpectedlyOnLeader on processes (LocalCluster,
    the kv service): one put acknowledged, the leader's log recording stopped through its control
    socket; a new term's leader closes its election with two followers, the old leader's error log has
    "log recording stopped: eos=false", and the cluster takes writes again with every service agreeing."""
    with running_cluster(tmp_path) as c:
        leader = c.await_leader(LEADER_S)
        client = c.client()
        assert client.put("k0", "0")["revision"] == 1
        before = c.status(leader)
        assert before is not None

        assert _stop_log_recording(c, leader)

        def new_term_settled() -> bool:
            statuses = [c.status(m) for m in range(c.member_count)]
            if any(s is None or s.election_state is not None for s in statuses):
                return False
            leaders = [s for s in statuses if s is not None and s.role == Role.LEADER]
            followers = [s for s in statuses if s is not None and s.role == Role.FOLLOWER]
            return (
                len(leaders) == 1 and len(followers) == 2 and leaders[0].leadership_term_id > before.leadership_term_id
            )

        c.await_condition(new_term_settled, CATCH_UP_S, "a leader of a new term, election closed, two followers")
        c.await_condition(
            lambda: _persisted_errors(c, leader).get(ERROR, 0) == 1, CATCH_UP_S, "the old leader's counted error"
        )
        assert client.put("k1", "1")["revision"] == 2
        client.close()
        await_caught_up(c)
        assert_services_agree(c)
