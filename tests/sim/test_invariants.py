"""The consensus subsystems' invariant checks (ConsensusModule.check_invariants): on in the simulator
and the probe, off by default elsewhere, and each catches the broken state it names. A state is
broken by hand here (as a bug would) and the next input (a duty cycle) must raise AssertionError
naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.consensus.context import ConsensusModuleContext, ElectionState, Role
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.sessions import ClusterSession, ClusterSessionState

from tests.sim.conftest import SimKit
from tests.sim.probe import Probe

GuardedField = Literal["commit_position", "leadership_term_id", "consumed_position", "notified_commit_position"]


def plant(state: ModuleState, field: GuardedField, value: int) -> None:
    """Write one of ModuleState's guarded fields behind its writer method's back, as a bug would
    (the writers assert what a bug breaks; tests/unit/test_single_writer.py scans no tests)."""
    setattr(state, field, value)


def test_checking_is_on_in_the_simulator_and_off_by_default(sim: SimKit, tmp_path: Path) -> None:
    c = sim.cluster(members=3, seed=1)
    leader = c.await_leader()
    assert c.member(leader).check_invariants_enabled
    assert ConsensusModuleContext.__dataclass_fields__["check_invariants"].default is False


def test_a_healthy_leader_passes_every_check(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_leader()
    probe.cm.offer(b"entry", probe.now_ns)
    probe.run_for(10_000_000)
    probe.cm.check_invariants()  # no AssertionError


def test_commit_position_moving_back_is_caught(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader()
    end = probe.cm.offer(b"entry", probe.now_ns)
    probe.deliver(1, probe.append_position(1, term, end))
    probe.work()
    assert probe.cm.commit_position == end
    probe.cm.check_invariants()  # the baseline: this commit position
    plant(probe.cm.s, "commit_position", end - 1)  # (a leader's next duty cycle would raise it again)
    with pytest.raises(AssertionError, match="commit position went back"):
        probe.cm.check_invariants()


def test_leadership_term_going_back_is_caught(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=3)
    plant(probe.cm.s, "leadership_term_id", 2)
    with pytest.raises(AssertionError, match="leadership_term_id went back"):
        probe.work()


def test_the_consumed_position_moving_back_is_refused_by_its_writer(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader()
    end = probe.cm.offer(b"entry", probe.now_ns)
    probe.deliver(1, probe.append_position(1, term, end))
    probe.work()
    assert probe.cm.consumed_position == end
    with pytest.raises(AssertionError, match=f"consumed position moved back {end} -> {end - 1}"):
        probe.cm.s.set_consumed_position(end - 1)


def test_recovered_state_is_restored_only_at_start(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    st = probe.cm.s
    for restore in (
        st.restore_commit_position,
        st.restore_leadership_term_id,
        st.restore_consumed_position,
        st.restore_notified_commit_position,
    ):
        with pytest.raises(AssertionError, match="restored in state ACTIVE"):
            restore(0)


def test_commit_beyond_the_local_log_is_caught(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    plant(probe.cm.s, "commit_position", probe.cm.append_position + 64)
    with pytest.raises(AssertionError, match="beyond append position"):
        probe.work()


def test_role_disagreeing_with_the_election_state_is_caught(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_candidate_ballot()
    assert probe.state == ElectionState.CANDIDATE_BALLOT
    probe.cm.s.role = Role.FOLLOWER
    with pytest.raises(AssertionError, match="role FOLLOWER in election state CANDIDATE_BALLOT"):
        probe.work()


def test_a_session_filed_under_another_id_is_caught(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_leader()
    sessions = probe.cm.client_sessions
    sessions.next_session_id = 10
    sessions.sessions[5] = ClusterSession(7, 1, "egress", state=ClusterSessionState.OPEN)
    with pytest.raises(AssertionError, match="session 7 filed under 5"):
        probe.work()


def test_a_follower_holding_a_control_toggle_is_caught(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    probe.cm.control.toggle = ToggleState.SNAPSHOT
    with pytest.raises(AssertionError, match="follower toggle SNAPSHOT"):
        probe.work()
