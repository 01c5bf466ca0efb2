"""Ports of Aeron's ``ConsensusModuleAgentTest`` (aeron-cluster).

Aeron builds a bare ConsensusModuleAgent with mocked publishers; here the module is a real member:
a one-member simulator cluster (its log, egress and state are observable) or the probe for the
follower-side handlers. "verify(mockLogPublisher).appendSessionClose(...)" becomes the entry in the
committed log, "verify(mockEgressPublisher).sendEvent(...)" the SessionEvent the client was sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.core.codec.enums import ClusterAction, EventCode, ToggleState
from clusterlab.core.codec.log_events import ClusterActionRequest, SessionCloseEvent, SessionOpenEvent
from clusterlab.core.codec.session import SessionEvent
from clusterlab.core.consensus.context import SECOND, ConsensusModuleContext, ConsensusModuleState
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.harness.sim import SimCluster

from tests.sim.conftest import SimKit
from tests.sim.digests import logged
from tests.sim.probe import Probe

pytestmark = pytest.mark.sim


def session_events(sim: SimKit, c: SimCluster, code: EventCode) -> list[SessionEvent]:
    return [msg for _, msg in sim.sent(c, SessionEvent, src=0) if msg.code == code]


def limited_to_one_session(ctx: ConsensusModuleContext) -> ConsensusModule:
    ctx.max_concurrent_sessions = 1
    return ConsensusModule(ctx)


def test_should_limit_active_sessions(sim: SimKit) -> None:
    """ConsensusModuleAgentTest.shouldLimitActiveSessions"""
    c = sim.cluster(members=1, seed=801, service="echo", member_factory=limited_to_one_session)
    c.await_leader()
    c.connect_client()
    c.await_condition(lambda: len(logged(c, 0, SessionOpenEvent)) == 1, SECOND, "appendSessionOpen")
    second = c.add_client()
    second.client.connect(c.now_ns)
    c.await_condition(lambda: bool(second.errors), SECOND, "the second connect refused")
    errors = session_events(sim, c, EventCode.ERROR)
    assert [e.detail for e in errors] == ["concurrent session limit"]
    assert len(logged(c, 0, SessionOpenEvent)) == 1


def test_should_close_inactive_session(sim: SimKit) -> None:
    """ConsensusModuleAgentTest.shouldCloseInactiveSession"""
    from clusterlab.core.codec.enums import CloseReason

    c = sim.cluster(members=1, seed=802, service="echo")
    c.await_leader()
    client = c.add_client(keepalive_interval_ns=None)
    client.client.connect(c.now_ns)
    c.await_condition(lambda: len(logged(c, 0, SessionOpenEvent)) == 1, SECOND, "appendSessionOpen")
    c.await_condition(
        lambda: bool(logged(c, 0, SessionCloseEvent)), c.timeouts.session_timeout_ns + 2 * SECOND, "appendSessionClose"
    )
    ((_, close),) = logged(c, 0, SessionCloseEvent)
    assert close.close_reason == CloseReason.TIMEOUT
    closed = session_events(sim, c, EventCode.CLOSED)
    assert [e.detail for e in closed] == [CloseReason.TIMEOUT.name]


def test_should_close_terminated_session(sim: SimKit) -> None:
    """ConsensusModuleAgentTest.shouldCloseTerminatedSession: the service closes the session."""
    from clusterlab.core.codec.enums import CloseReason

    c = sim.cluster(members=1, seed=803, service="echo")
    c.await_leader()
    client = c.connect_client()
    assert client.client.offer(b"close", c.now_ns) > 0  # the echo service calls close_client_session
    c.await_condition(lambda: bool(logged(c, 0, SessionCloseEvent)), SECOND, "appendSessionClose")
    ((_, close),) = logged(c, 0, SessionCloseEvent)
    assert close.close_reason == CloseReason.SERVICE_ACTION
    closed = session_events(sim, c, EventCode.CLOSED)
    assert [e.detail for e in closed] == [CloseReason.SERVICE_ACTION.name]


def test_should_suspend_then_resume(sim: SimKit) -> None:
    """ConsensusModuleAgentTest.shouldSuspendThenResume"""
    c = sim.cluster(members=1, seed=804, service="echo")
    c.await_leader()
    m = c.member(0)
    assert m.state == ConsensusModuleState.ACTIVE
    assert c.control("suspend")
    c.await_condition(lambda: m.state == ConsensusModuleState.SUSPENDED, SECOND, "SUSPENDED")
    assert m.toggle == ToggleState.SUSPEND  # type: ignore[attr-defined]
    assert c.control("resume")
    c.await_condition(lambda: m.state == ConsensusModuleState.ACTIVE, SECOND, "ACTIVE")
    c.await_condition(lambda: m.toggle == ToggleState.NEUTRAL, SECOND, "NEUTRAL")  # type: ignore[attr-defined]
    actions = [ev.action for _, ev in logged(c, 0, ClusterActionRequest)]
    assert actions == [ClusterAction.SUSPEND, ClusterAction.RESUME]


def test_on_new_leadership_term_should_update_time_of_last_leader_message_received(tmp_path: Path) -> None:
    """ConsensusModuleAgentTest.onNewLeadershipTermShouldUpdateTimeOfLastLeaderMessageReceived"""
    probe = Probe(tmp_path, member_id=1)
    probe.to_follower(leader=0, leadership_term_id=0)
    t = probe.now_ns + 12345
    probe.deliver(0, probe.new_leadership_term(0, 0), now_ns=t)
    assert probe.cm.s.time_of_last_leader_update_ns == t


def test_on_commit_position_should_update_time_of_last_leader_message_received(tmp_path: Path) -> None:
    """ConsensusModuleAgentTest.onCommitPositionShouldUpdateTimeOfLastLeaderMessageReceived"""
    probe = Probe(tmp_path, member_id=1)
    probe.to_follower(leader=0, leadership_term_id=0)
    t = probe.now_ns + 444
    probe.deliver(0, probe.commit_position(0, 0, 0), now_ns=t)
    assert probe.cm.s.time_of_last_leader_update_ns == t
