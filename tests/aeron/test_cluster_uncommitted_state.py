"""Ports of Aeron's ``ClusterUncommittedStateTest`` (aeron-system-tests/src/test/java/io/aeron/cluster)
onto the simulator, and the unit-level rules behind them.

Aeron cuts the leader off with a ``ToggledLossControl`` on its media driver (every UDP frame in and
out dropped; its IPC clients still reach it); here :class:`ToggledLoss` partitions the member from the
other members in the simulated network (clients still reach it) and counts what it drops each way.

The leader appends a control action nobody acknowledges, the others elect a new leader, and once the
old leader is back its consensus module is in the state of the committed log: ``ConsensusModuleAgent``
records the state before each action it appends (``offerPositionAndPreviousState``), forgets those
that commit (``sweepUncommittedEntriesTo``) and, preparing for a new leadership, returns to the state
before the first uncommitted one (``restoreUncommittedEntries``). ``hasService=false`` runs members
without a clustered service.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.service import ScheduleTimer
from clusterlab.core.codec.session import encode_session_message
from clusterlab.core.codec.snapshot import ConsensusModuleSnapshot
from clusterlab.core.consensus.context import SECOND, Channel, ConsensusModuleState, Role
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.simnet import Delivery

from tests.aeron.support import SERVICE_NAME, AeronCluster, consensus_module_snapshots
from tests.sim.conftest import SimKit
from tests.sim.probe import Probe

pytestmark = pytest.mark.sim

ACTIVE, SUSPENDED, SNAPSHOT = ConsensusModuleState.ACTIVE, ConsensusModuleState.SUSPENDED, ConsensusModuleState.SNAPSHOT
AWAIT_NS = 20 * SECOND  # Aeron: @InterruptAfter(20)


class ToggledLoss:
    """Aeron's ``ToggledLossControl`` for one member: while on, every message between it and the other
    members is dropped; ``dropped_outbound`` / ``dropped_inbound`` count what was."""

    def __init__(self, c: SimCluster, member_id: int) -> None:
        self.c = c
        self.member_id = member_id
        self.dropped_outbound = 0
        self.dropped_inbound = 0
        c.network.on_drop.append(self._on_drop)

    def _on_drop(self, msg: Delivery, reason: str, now_ns: int) -> None:
        if msg.src == self.member_id:
            self.dropped_outbound += 1
        if msg.dst == self.member_id:
            self.dropped_inbound += 1

    def toggle_loss(self, loss: bool) -> None:
        if loss:
            others = [m for m in range(self.c.member_count) if m != self.member_id]
            self.c.partition([[self.member_id], others])
        else:
            self.c.heal()


def uncommitted_state_cluster(sim: SimKit, seed: int, has_service: bool) -> AeronCluster:
    """Three static members, with the Aeron test service or (``hasService=false``) none."""
    return AeronCluster(sim.cluster(members=3, seed=seed, service=SERVICE_NAME if has_service else None))


def state_of(a: AeronCluster, member_id: int) -> ConsensusModuleState:
    """Aeron ``TestNode.moduleState()``."""
    return a.c.member(member_id).state


def toggle_of(a: AeronCluster, member_id: int) -> ToggleState:
    """Aeron ``ClusterControl.ToggleState.get(node.consensusModule().context().controlToggleCounter())``."""
    return ToggleState(a.c.member(member_id).toggle)  # type: ignore[attr-defined]


def await_state(a: AeronCluster, member_id: int, state: ConsensusModuleState) -> None:
    a.await_condition(lambda: state_of(a, member_id) == state, f"member {member_id} {state.name}", AWAIT_NS)


def await_every_member_suspended(a: AeronCluster) -> None:
    a.await_condition(
        lambda: all(state_of(a, m) == SUSPENDED for m in range(a.c.member_count)), "every member SUSPENDED", AWAIT_NS
    )


def cut_off(a: AeronCluster, member_id: int) -> ToggledLoss:
    """``leaderLossControl.toggleLoss(true)`` and wait until frames were dropped both ways."""
    loss = ToggledLoss(a.c, member_id)
    loss.toggle_loss(True)
    a.await_condition(
        lambda: loss.dropped_outbound > 0 and loss.dropped_inbound > 0, "frames dropped both ways", AWAIT_NS
    )
    return loss


def await_other_leader(a: AeronCluster, first_leader: int) -> int:
    """``Tests.await(() -> null != cluster.findLeader(firstLeader.memberId()))``."""
    a.await_condition(lambda: a.find_leader(first_leader) is not None, "a leader other than the first", AWAIT_NS)
    leader = a.find_leader(first_leader)
    assert leader is not None
    return leader


@pytest.mark.parametrize("has_service", [True, False], ids=["hasService=true", "hasService=false"])
def test_should_rollback_uncommitted_suspend_control_toggle(sim: SimKit, has_service: bool) -> None:
    """ClusterUncommittedStateTest.shouldRollbackUncommittedSuspendControlToggle"""
    a = uncommitted_state_cluster(sim, 2101, has_service)
    first_leader = a.await_leader()

    loss = cut_off(a, first_leader)
    a.suspend_cluster(first_leader)
    await_state(a, first_leader, SUSPENDED)

    await_other_leader(a, first_leader)

    loss.toggle_loss(False)
    await_state(a, first_leader, ACTIVE)


@pytest.mark.parametrize("has_service", [True, False], ids=["hasService=true", "hasService=false"])
def test_should_rollback_uncommitted_resume_control_toggle(sim: SimKit, has_service: bool) -> None:
    """ClusterUncommittedStateTest.shouldRollbackUncommittedResumeControlToggle"""
    a = uncommitted_state_cluster(sim, 2102, has_service)
    first_leader = a.await_leader()

    a.suspend_cluster(first_leader)
    await_every_member_suspended(a)

    loss = cut_off(a, first_leader)
    a.resume_cluster(first_leader)
    await_state(a, first_leader, ACTIVE)

    await_other_leader(a, first_leader)

    loss.toggle_loss(False)
    await_state(a, first_leader, SUSPENDED)


@pytest.mark.parametrize("has_service", [True, False], ids=["hasService=true", "hasService=false"])
def test_should_rollback_uncommitted_snapshot_toggle(sim: SimKit, has_service: bool) -> None:
    """ClusterUncommittedStateTest.shouldRollbackUncommittedSnapshotToggle"""
    a = uncommitted_state_cluster(sim, 2103, has_service)
    first_leader = a.await_leader()

    a.suspend_cluster(first_leader)
    await_every_member_suspended(a)

    loss = cut_off(a, first_leader)
    a.resume_cluster(first_leader)
    await_state(a, first_leader, ACTIVE)
    a.await_condition(lambda: toggle_of(a, first_leader) == ToggleState.NEUTRAL, "toggle NEUTRAL", AWAIT_NS)

    a.suspend_cluster(first_leader)
    await_state(a, first_leader, SUSPENDED)

    a.resume_cluster(first_leader)
    await_state(a, first_leader, ACTIVE)
    a.await_condition(lambda: toggle_of(a, first_leader) == ToggleState.NEUTRAL, "toggle NEUTRAL", AWAIT_NS)

    a.take_snapshot_on(first_leader)
    await_state(a, first_leader, SNAPSHOT)

    await_other_leader(a, first_leader)

    loss.toggle_loss(False)
    await_state(a, first_leader, SUSPENDED)


# ---------------------------------------------------------------------------------------------------------
# Unit level: one ConsensusModule driven by hand (tests/sim/probe.py). The leader's peers acknowledge what
# the test says; a RequestVote of a later term makes it step down (enterElection -> prepareForNewLeadership).


def leader_probe(tmp_path: Path, service_count: int = 0) -> tuple[Probe, int]:
    """A steady-state leader whose peers both hold its log up to the NewLeadershipTermEvent."""
    probe = Probe(tmp_path, service_count=service_count)
    term = probe.to_leader()
    assert probe.cm.state == ACTIVE
    return probe, term


def append_action(probe: Probe, target: ToggleState) -> int:
    """Toggle the leader's control and run a duty cycle: it appends the action. Returns the append position."""
    assert probe.cm.toggle_control(target), f"{target.name} refused: {probe.cm.describe()}"
    probe.settle()
    return probe.cm.append_position


def acknowledge(probe: Probe, term: int, position: int) -> None:
    """Both peers report ``position`` in ``term``: the leader commits it."""
    for p in probe.peers:
        probe.deliver(p, probe.append_position(p, term, position))
    probe.settle()
    assert probe.cm.commit_position == position, probe.cm.describe()


def step_down(probe: Probe, term: int) -> None:
    """A peer asks for votes in the next term: the leader enters an election and prepares for a new
    leadership (the same path as losing its quorum)."""
    probe.deliver(1, probe.request_vote(1, term + 1, term, probe.cm.commit_position))
    probe.settle()
    assert probe.cm.role == Role.FOLLOWER and probe.cm.election is not None, probe.cm.describe()


def test_a_leader_stepping_down_rolls_back_an_uncommitted_suspend(tmp_path: Path) -> None:
    """The regression test of the rollback: SUSPEND appended, never acknowledged, leader steps down -> ACTIVE."""
    probe, term = leader_probe(tmp_path)
    committed = probe.cm.commit_position
    assert append_action(probe, ToggleState.SUSPEND) > committed
    assert probe.cm.state == SUSPENDED
    step_down(probe, term)
    assert probe.cm.commit_position == committed  # the SUSPEND is still uncommitted
    assert probe.cm.state == ACTIVE
    [rollback] = probe.events_of("state_rollback")
    assert rollback["detail"] == {"from": "SUSPENDED", "to": "ACTIVE"}


def test_a_leader_stepping_down_returns_to_the_state_of_its_committed_log(tmp_path: Path) -> None:
    """A committed SUSPEND, then RESUME, SUSPEND, RESUME and SNAPSHOT uncommitted -> SUSPENDED (the committed
    state, not the state before the last action and not ACTIVE); the snapshot is no longer awaited."""
    probe, term = leader_probe(tmp_path)
    acknowledge(probe, term, append_action(probe, ToggleState.SUSPEND))
    assert probe.cm.state == SUSPENDED
    committed = probe.cm.commit_position
    append_action(probe, ToggleState.RESUME)
    assert probe.cm.state == ACTIVE
    append_action(probe, ToggleState.SUSPEND)
    append_action(probe, ToggleState.RESUME)
    append_action(probe, ToggleState.SNAPSHOT)
    assert probe.cm.state == SNAPSHOT
    step_down(probe, term)
    assert probe.cm.commit_position == committed
    assert probe.cm.state == SUSPENDED
    assert probe.cm.snapshots.snapshot_position == -1  # NULL_POSITION: no snapshot to take
    assert probe.cm.snapshot_count == 0


def test_committed_actions_are_not_rolled_back(tmp_path: Path) -> None:
    """Once the SUSPEND is committed the leader forgets its previous state (sweepUncommittedEntriesTo):
    stepping down leaves it SUSPENDED, as every member that applied the committed SUSPEND is."""
    probe, term = leader_probe(tmp_path)
    acknowledge(probe, term, append_action(probe, ToggleState.SUSPEND))
    assert not probe.cm.control.uncommitted_previous_states
    step_down(probe, term)
    assert probe.cm.state == SUSPENDED
    assert probe.events_of("state_rollback") == []


def test_a_rolled_back_action_the_next_leader_commits_applies_again(tmp_path: Path) -> None:
    """Rolled back to ACTIVE, the old leader follows a new leader whose log holds its SUSPEND (the peers
    had it after all): when the new leader commits past it, the member is SUSPENDED again."""
    probe, term = leader_probe(tmp_path)
    suspend_end = append_action(probe, ToggleState.SUSPEND)
    step_down(probe, term)
    assert probe.cm.state == ACTIVE
    # Member 1 leads term + 1 with a log equal to ours (so nothing is truncated) ...
    probe.deliver(
        1,
        probe.new_leadership_term(
            1,
            term + 1,
            log_leadership_term_id=term,
            term_base_log_position=suspend_end,
            log_position=suspend_end,
            next_leadership_term_id=term + 1,
            next_term_base_log_position=suspend_end,
        ),
    )
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.cm.election is None)
    assert probe.cm.role == Role.FOLLOWER and probe.cm.leader_member_id == 1, probe.cm.describe()
    # ... and commits past our SUSPEND.
    probe.deliver(1, probe.commit_position(1, term + 1, suspend_end))
    probe.run_for(probe.timeouts.leader_heartbeat_interval_ns, lambda: probe.cm.consumed_position >= suspend_end)
    assert probe.cm.state == SUSPENDED


def test_an_uncommitted_timer_event_is_rescheduled_when_the_leader_steps_down(tmp_path: Path) -> None:
    """ConsensusModuleAgent.restoreUncommittedEntries: a timer whose TimerEvent was appended but not committed
    is scheduled again (deadline 0), so whoever leads next fires it; one whose TimerEvent committed is not."""
    probe, term = leader_probe(tmp_path)
    due_ms = probe.cm.cluster_time_ms(probe.now_ns)
    probe.deliver(0, ScheduleTimer(correlation_id=7, deadline=due_ms), channel=Channel.SERVICE)
    probe.deliver(0, ScheduleTimer(correlation_id=8, deadline=due_ms), channel=Channel.SERVICE)
    probe.settle()
    assert 7 not in probe.cm.timer_service and 8 not in probe.cm.timer_service  # both fired: TimerEvents
    [first_end, second_end] = [position for position, _ in probe.cm.services.uncommitted_timers]
    acknowledge(probe, term, first_end)  # timer 7's TimerEvent committed, timer 8's not
    step_down(probe, term)
    assert 7 not in probe.cm.timer_service
    assert probe.cm.timer_service.deadline(8) == 0
    assert second_end > probe.cm.commit_position


def test_an_uncommitted_service_message_is_offered_again_when_the_leader_steps_down(tmp_path: Path) -> None:
    """PendingServiceMessageTracker.restoreUncommittedMessages: a service message appended but not committed
    is pending again (appended by whoever leads next); one that committed is no longer pending."""
    probe, term = leader_probe(tmp_path, service_count=1)
    for payload in (b"first", b"second"):
        probe.deliver_bytes(0, encode_session_message(0, 0, 0, payload), channel=Channel.SERVICE)
    probe.settle()
    [first, second] = probe.cm.services.pending_service_messages[0]
    assert first.appended_position < second.appended_position <= probe.cm.append_position
    acknowledge(probe, term, first.appended_position)
    assert [m.payload for m in probe.cm.services.pending_service_messages[0]] == [b"second"]
    step_down(probe, term)
    [pending] = probe.cm.services.pending_service_messages[0]
    assert pending.payload == b"second" and pending.appended_position == -1  # NULL_POSITION: append again


def snapshot_next_session_id(a: AeronCluster, member_id: int) -> int:
    """Aeron ``ClusterTest.readSnapshot(node)``: nextSessionId in the member's latest consensus-module snapshot."""
    entry = consensus_module_snapshots(a.c, member_id)[-1]
    for raw in a.c.member(member_id).archive_store.snapshots.read_snapshot(entry.recording_id):  # type: ignore[attr-defined]
        msg = decode(raw)
        if isinstance(msg, ConsensusModuleSnapshot):
            return int(msg.next_session_id)
    raise AssertionError(f"no ConsensusModuleSnapshot in member {member_id}'s snapshot")


def connect_and_close(a: AeronCluster, member_id: int) -> None:
    """``cluster.connectIpcClient(...)`` to ``member_id``, then ``CloseHelper.close`` it."""
    client = a.c.add_client(first_member=member_id)
    client.client.connect(a.c.now_ns)
    a.await_condition(lambda: client.client.is_connected, f"a client connected to member {member_id}", AWAIT_NS)
    client.client.close(a.c.now_ns)


@pytest.mark.parametrize("has_service", [True, False], ids=["hasService=true", "hasService=false"])
def test_should_next_committed_session_id_reflect_only_committed_sessions(sim: SimKit, has_service: bool) -> None:
    """ClusterUncommittedStateTest.shouldNextCommittedSessionIdReflectOnlyCommittedSessions"""
    a = uncommitted_state_cluster(sim, 2104, has_service)
    first_leader = a.await_leader()

    loss = cut_off(a, first_leader)
    committed = a.c.member(first_leader).commit_position
    for _ in range(3):
        connect_and_close(a, first_leader)
    # Aeron: appendPosition > NewLeadershipTermEvent + 3 SessionOpenEvents (none of it committed).
    a.await_condition(
        lambda: a.c.member(first_leader).append_position > committed, "the sessions appended, uncommitted", AWAIT_NS
    )

    new_leader = await_other_leader(a, first_leader)
    a.take_snapshot_on(new_leader)
    others = [m for m in range(a.c.member_count) if m != first_leader]
    a.await_condition(lambda: all(a.snapshot_count(m) == 1 for m in others), "a snapshot on the others", AWAIT_NS)

    loss.toggle_loss(False)
    a.await_condition(lambda: a.snapshot_count(first_leader) == 1, "a snapshot on the first leader", AWAIT_NS)

    for m in range(a.c.member_count):
        assert snapshot_next_session_id(a, m) == 1

    final_leader = a.await_leader()
    connect_and_close(a, final_leader)
    a.take_snapshot_on(final_leader)
    a.await_snapshot_count_everywhere(2, AWAIT_NS)

    for m in range(a.c.member_count):
        if first_leader == final_leader:
            assert snapshot_next_session_id(a, m) == 5
        else:
            assert snapshot_next_session_id(a, m) == 2
