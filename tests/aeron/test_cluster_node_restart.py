"""Ports of Aeron's ``ClusterNodeRestartTest`` (aeron-cluster/src/test/java/io/aeron/cluster): one
member, restarted from its directory (``forceCloseForRestart`` then a new launch), with the test's
own services (tests/aeron/services.py). Run in the simulator; the process/file side of the same
behaviour runs on real processes in test_real_processes.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clusterlab.core.consensus.context import SECOND
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_parts import SimClient

from tests.aeron.services import NUMBERED, RESCHEDULING, NumberedService, ReschedulingService, numbered, timer_message
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim

HOUR_MS = 3_600_000


class Node:
    """One member with a ClusterNodeRestartTest service and its client."""

    def __init__(self, sim: SimKit, service: str, seed: int) -> None:
        self.c: SimCluster = sim.cluster(members=1, seed=seed, service=service)
        self.c.await_leader()
        self.client: SimClient | None = None

    def service(self) -> NumberedService:
        s = self.c.service(0).service
        assert isinstance(s, NumberedService)
        return s

    def rescheduling(self) -> ReschedulingService:
        s = self.c.service(0).service
        assert isinstance(s, ReschedulingService)
        return s

    def connect_client(self) -> None:
        if self.client is not None and self.client.client.is_connected:
            self.client.client.close(self.c.now_ns)
        self.client = self.c.connect_client()

    def send(self, payload: bytes) -> None:
        assert self.client is not None
        self.c.await_condition(lambda: self.client.client.offer(payload, self.c.now_ns) > 0, SECOND, "offered")  # type: ignore[union-attr]

    def await_value(self, value: Callable[[], int], expected: int, what: str) -> None:
        self.c.await_condition(lambda: value() >= expected, 5 * SECOND, what)
        assert value() == expected, what

    def snapshot(self, count: int = 1) -> None:
        assert self.c.control("snapshot")
        self.c.await_condition(
            lambda: self.c.member(0).snapshot_count == count,
            5 * SECOND,
            f"snapshot counter {count}",  # type: ignore[attr-defined]
        )

    def force_close_for_restart(self) -> None:
        self.c.stop(0)

    def launch(self) -> None:
        self.c.restart(0)
        self.c.await_leader()


def test_should_restart_service_with_replay(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldRestartServiceWithReplay"""
    n = Node(sim, NUMBERED, 201)
    n.connect_client()
    n.send(numbered(0))
    n.await_value(lambda: n.service().message_count, 1, "serviceMsgCount")
    n.force_close_for_restart()
    n.launch()
    n.connect_client()
    n.await_value(lambda: n.service().message_count, 1, "restartServiceMsgCount")


def test_should_restart_service_with_replay_and_continue(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldRestartServiceWithReplayAndContinue"""
    n = Node(sim, NUMBERED, 202)
    n.connect_client()
    n.send(numbered(0))
    n.await_value(lambda: n.service().message_count, 1, "serviceMsgCount")
    n.force_close_for_restart()
    n.launch()
    n.connect_client()
    n.send(numbered(1))
    # The replayed message and the new one (Aeron's counter starts at 0 and awaits >= 1).
    n.await_value(lambda: n.service().message_count, 2, "restartServiceMsgCounter")
    assert n.service().service_state == "2"


def test_should_restart_service_from_empty_snapshot(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldRestartServiceFromEmptySnapshot"""
    n = Node(sim, NUMBERED, 203)
    n.connect_client()
    n.snapshot()
    n.force_close_for_restart()
    n.launch()
    n.connect_client()
    assert n.service().service_state == "0"


def test_should_restart_service_from_snapshot(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldRestartServiceFromSnapshot"""
    n = Node(sim, NUMBERED, 204)
    n.connect_client()
    for i in range(3):
        n.send(numbered(i))
    n.await_value(lambda: n.service().message_count, 3, "serviceMsgCount")
    n.snapshot()
    n.force_close_for_restart()
    n.launch()
    n.connect_client()
    assert n.service().service_state == "3"
    assert n.service().message_count == 0, "nothing replayed after the snapshot"


def test_should_restart_service_from_snapshot_with_further_log(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldRestartServiceFromSnapshotWithFurtherLog"""
    n = Node(sim, NUMBERED, 205)
    n.connect_client()
    for i in range(3):
        n.send(numbered(i))
    n.await_value(lambda: n.service().message_count, 3, "serviceMsgCount")
    n.snapshot()
    n.send(numbered(3))
    n.await_value(lambda: n.service().message_count, 4, "serviceMsgCount")
    n.force_close_for_restart()
    n.launch()
    n.connect_client()
    n.await_value(lambda: n.service().message_count, 1, "serviceMsgCount after restart")
    assert n.service().service_state == "4"


def test_should_take_multiple_snapshots(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldTakeMultipleSnapshots"""
    from clusterlab.core.codec.enums import ToggleState

    n = Node(sim, NUMBERED, 206)
    n.connect_client()
    for _ in range(3):
        assert n.c.control("snapshot")
        n.c.await_condition(lambda: n.c.member(0).toggle == ToggleState.NEUTRAL, 5 * SECOND, "NEUTRAL toggle")  # type: ignore[attr-defined]
    assert n.c.member(0).snapshot_count == 3  # type: ignore[attr-defined]


def test_should_restart_service_with_timer_from_snapshot_with_further_log(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldRestartServiceWithTimerFromSnapshotWithFurtherLog"""
    n = Node(sim, NUMBERED, 207)
    n.connect_client()
    for i in range(3):
        n.send(numbered(i))
    n.send(timer_message(3, 1, 10 * HOUR_MS))
    n.await_value(lambda: n.service().message_count, 4, "serviceMsgCount")
    n.snapshot()
    n.send(numbered(4))
    n.await_value(lambda: n.service().message_count, 5, "serviceMsgCount")
    n.force_close_for_restart()
    n.launch()
    n.connect_client()
    n.await_value(lambda: n.service().message_count, 1, "serviceMsgCount after restart")
    assert n.service().service_state == "5"
    assert n.c.member(0).timer_service.snapshot(), "the 10 h timer survived the restart"  # type: ignore[attr-defined]


def test_should_trigger_rescheduled_timer_after_replay(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldTriggerRescheduledTimerAfterReplay"""
    n = Node(sim, RESCHEDULING, 208)
    n.connect_client()
    n.send(b"go")
    n.c.await_condition(lambda: n.rescheduling().triggered_timers >= 2, 5 * SECOND, "two firings")
    triggered_since_start = n.rescheduling().triggered_timers
    n.force_close_for_restart()
    n.launch()
    # A new service object counts from 0: the replay re-fires the logged timer events, then the
    # rescheduled timer fires once more live.
    n.c.await_condition(
        lambda: n.rescheduling().triggered_timers >= triggered_since_start + 1, 5 * SECOND, "one more firing"
    )


def test_should_restart_service_twice_with_invalid_snapshot_and_further_log(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldRestartServiceTwiceWithInvalidSnapshotAndFurtherLog"""
    n = Node(sim, NUMBERED, 209)
    n.connect_client()
    for i in range(3):
        n.send(numbered(i))
    n.await_value(lambda: n.service().message_count, 3, "serviceMsgCount")
    n.snapshot()
    n.send(numbered(3))
    n.await_value(lambda: n.service().message_count, 4, "serviceMsgCount")
    n.force_close_for_restart()
    with RecordingLog.open(n.c.storage(0)) as recording_log:
        assert recording_log.invalidate_latest_snapshot()
    n.launch()
    n.await_value(lambda: n.service().message_count, 4, "the whole log replayed")
    assert n.service().service_state == "4"
    n.connect_client()
    n.send(numbered(4))
    n.await_value(lambda: n.service().message_count, 5, "serviceMsgCount")
    n.force_close_for_restart()
    n.launch()
    n.connect_client()
    assert n.service().service_state == "5"


def test_should_restart_service_after_shutdown_with_invalidated_snapshot(sim: SimKit) -> None:
    """ClusterNodeRestartTest.shouldRestartServiceAfterShutdownWithInvalidatedSnapshot"""
    n = Node(sim, NUMBERED, 210)
    n.connect_client()
    for i in range(3):
        n.send(numbered(i))
    n.await_value(lambda: n.service().message_count, 3, "serviceMsgCount")
    assert n.c.control("shutdown")
    n.c.await_condition(lambda: n.c.member(0).terminated, 5 * SECOND, "terminated")  # type: ignore[attr-defined]
    n.force_close_for_restart()
    with RecordingLog.open(n.c.storage(0)) as recording_log:
        assert recording_log.invalidate_latest_snapshot()
    n.launch()
    n.await_value(lambda: n.service().message_count, 3, "the whole log replayed")
    assert n.service().service_state == "3"
    n.connect_client()
    n.send(numbered(3))
    n.await_value(lambda: n.service().message_count, 4, "serviceMsgCount")
