"""Ports of Aeron's ``ClusterTimerTest`` (aeron-cluster; run there for PriorityHeapTimerService and
WheelTimerService): one member whose service reschedules timers across snapshots and restarts. We
have one timer service (the priority heap), so each test runs once."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import SECOND
from clusterlab.harness.sim import SimCluster

from tests.aeron.services import (
    TIMER_RESCHEDULE_SAME_ID,
    TIMER_RESCHEDULING,
    TimerReschedulingService,
    TimerSameIdService,
)
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim


def triggered(c: SimCluster) -> int:
    s = c.service(0).service
    assert isinstance(s, TimerReschedulingService)
    return s.triggered_timers


def await_triggered(c: SimCluster, count: int) -> None:
    c.await_condition(lambda: triggered(c) >= count, 5 * SECOND, f"{count} timer firings")


def restart(c: SimCluster) -> None:
    c.stop(0)  # forceCloseForRestart
    c.restart(0)
    c.await_leader()


def test_should_restart_service_with_timer_from_snapshot_with_further_log(sim: SimKit) -> None:
    """ClusterTimerTest.shouldRestartServiceWithTimerFromSnapshotWithFurtherLog"""
    c = sim.cluster(members=1, seed=601, service=TIMER_RESCHEDULING)
    c.await_leader()
    c.connect_client()
    await_triggered(c, 2)
    assert c.control("snapshot")
    c.await_condition(lambda: c.member(0).snapshot_count == 1, 5 * SECOND, "snapshot")  # type: ignore[attr-defined]
    await_triggered(c, 4)
    restart(c)
    c.connect_client()
    await_triggered(c, 2 + 4)
    triggered_since_start = triggered(c)
    restart(c)
    c.connect_client()
    await_triggered(c, triggered_since_start + 4)


def test_should_trigger_rescheduled_timer_after_replay(sim: SimKit) -> None:
    """ClusterTimerTest.shouldTriggerRescheduledTimerAfterReplay"""
    c = sim.cluster(members=1, seed=602, service=TIMER_RESCHEDULING)
    c.await_leader()
    c.connect_client()
    await_triggered(c, 2)
    triggered_since_start = triggered(c)
    restart(c)
    await_triggered(c, triggered_since_start + 2)
    triggered_since_start = triggered(c)
    restart(c)
    await_triggered(c, triggered_since_start + 4)


def test_should_reschedule_timer_when_scheduling_with_existing_correlation_id(sim: SimKit) -> None:
    """ClusterTimerTest.shouldRescheduleTimerWhenSchedulingWithExistingCorrelationId"""
    c = sim.cluster(members=1, seed=603, service=TIMER_RESCHEDULE_SAME_ID)
    c.await_leader()
    c.connect_client()
    service = c.service(0).service
    assert isinstance(service, TimerSameIdService)
    c.await_condition(lambda: service.timer_counts[2] >= 1, 5 * SECOND, "timer 2 fired")
    assert service.timer_counts[1] == 1
