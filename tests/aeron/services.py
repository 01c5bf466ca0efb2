"""The services of Aeron's ClusterNodeRestartTest, ClusterNodeTest, ClusterTimerTest and
ServiceIpcIngressMessageTest, for the simulator (tests/aeron/conftest.py registers them).

``aeron-numbered`` is ``launchService``: every message carries an int the service expects to equal
its counter (a replay that skipped or repeated an entry fails the service), a timer message also
schedules a timer; the snapshot holds (next correlation id, counter, counter as text).
``aeron-rescheduling`` is ``launchReschedulingService``: a message schedules timer 7 at +200 ms and
every firing reschedules it; the snapshot holds the firing count."""

from __future__ import annotations

import json
import struct

from clusterlab.core.codec import CloseReason, ClusterTimeUnit
from clusterlab.core.service.api import ClientSession, Cluster, ClusteredService, Role, SnapshotImage, SnapshotWriter
from clusterlab.harness.services.digest import MultisetDigest

NUMBERED = "aeron-numbered"
RESCHEDULING = "aeron-rescheduling"
MESSAGE = struct.Struct("<i")  # MESSAGE_VALUE_OFFSET 0: the value
TIMER_MESSAGE = struct.Struct("<iqq")  # value, TIMER_MESSAGE_ID_OFFSET, TIMER_MESSAGE_DELAY_OFFSET


def numbered(value: int) -> bytes:
    return MESSAGE.pack(value)


def timer_message(value: int, correlation_id: int, delay_ms: int) -> bytes:
    return TIMER_MESSAGE.pack(value, correlation_id, delay_ms)


class _Base(ClusteredService):
    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self._digest = MultisetDigest(b"aeron-restart")

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        pass

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        pass

    def on_role_change(self, new_role: Role) -> None:
        pass

    def on_terminate(self, cluster: Cluster) -> None:
        pass

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        pass

    def state_digest(self) -> bytes:
        return self._digest.digest()


class NumberedService(_Base):
    """ClusterNodeRestartTest.launchService."""

    def __init__(self) -> None:
        super().__init__()
        self.next_correlation_id = 0
        self.counter_value = 0
        self.service_state: str | None = None
        self.message_count = 0  # the test's serviceMsgCount, per incarnation

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        if snapshot is not None and snapshot.records:
            self.next_correlation_id, self.counter_value, self.service_state = json.loads(snapshot.records[0])
        self._digest.add("counter", self.counter_value)

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        sent_value = MESSAGE.unpack_from(payload)[0]
        assert sent_value == self.counter_value, f"expected value {self.counter_value}, got {sent_value}"
        self._digest.replace(("counter", self.counter_value), ("counter", self.counter_value + 1))
        self.counter_value += 1
        self.service_state = str(self.counter_value)
        self.message_count += 1
        if len(payload) == TIMER_MESSAGE.size and self.cluster is not None:
            _value, _id, delay_ms = TIMER_MESSAGE.unpack(payload)
            correlation_id = self.next_correlation_id
            self.next_correlation_id += 1
            assert self.cluster.schedule_timer(correlation_id, timestamp + delay_ms)
        if session is not None:
            session.offer(self.service_state.encode())

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        writer.write(json.dumps([self.next_correlation_id, self.counter_value, str(self.counter_value)]).encode())


class ReschedulingService(_Base):
    """ClusterNodeRestartTest.launchReschedulingService."""

    def __init__(self) -> None:
        super().__init__()
        self.triggered_timers = 0

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        if snapshot is not None and snapshot.records:
            self.triggered_timers = int(json.loads(snapshot.records[0]))

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        assert self.cluster is not None and self.cluster.schedule_timer(7, timestamp + 200)

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        self._digest.replace(("fired", self.triggered_timers), ("fired", self.triggered_timers + 1))
        self.triggered_timers += 1
        assert self.cluster is not None and self.cluster.schedule_timer(correlation_id, timestamp + 200)

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        writer.write(json.dumps(self.triggered_timers).encode())


TIMED = "aeron-timed"
ECHO_SERVICE_IPC_INGRESS_MSG_SKIP_FOLLOWER = b"echo-service-ipc-ingress-skip-follower"
SERVICE_INGRESS = "aeron-service-ingress"


class TimedService(_Base):
    """ClusterNodeTest.launchTimedService: a message schedules a timer at +100 ms whose firing
    answers ``<msg>-scheduled`` to the session."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster_session_id = -1
        self.next_correlation_id = 0
        self.msg = b""

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        assert session is not None and self.cluster is not None
        self.cluster_session_id = session.id
        self.msg = payload
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        assert self.cluster.schedule_timer(correlation_id, timestamp + 100)

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        assert self.cluster is not None
        session = self.cluster.get_client_session(self.cluster_session_id)
        assert session is not None
        session.offer(self.msg + b"-scheduled")

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        writer.write(b"{}")


class ServiceMessageIngressService(_Base):
    """ClusterNodeTest.launchServiceMessageIngressService: a client's message is offered back to the
    log as a service message, which is then echoed to every client session."""

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        assert self.cluster is not None
        if session is not None:
            # Aeron ECHO_SERVICE_IPC_INGRESS_MSG_SKIP_FOLLOWER: only the leader's service offers this one.
            if payload != ECHO_SERVICE_IPC_INGRESS_MSG_SKIP_FOLLOWER or self.cluster.role == Role.LEADER:
                assert self.cluster.offer(payload)
        else:
            for s in self.cluster.client_sessions():
                s.offer(payload)

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        writer.write(b"{}")


TIMER_RESCHEDULING = "aeron-timer-rescheduling"
TIMER_RESCHEDULE_SAME_ID = "aeron-timer-same-id"
INTERVAL_MS = 20  # ClusterTimerTest.INTERVAL_MS


class TimerReschedulingService(_Base):
    """ClusterTimerTest.launchReschedulingService: every new leadership term and every firing
    schedules the next timer (a new correlation id) 20 ms later; the snapshot holds the next id."""

    def __init__(self) -> None:
        super().__init__()
        self.timer_correlation_id = 1
        self.triggered_timers = 0

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        if snapshot is not None and snapshot.records:
            self.timer_correlation_id = int(json.loads(snapshot.records[0]))

    def _schedule_next(self, timestamp: int) -> None:
        assert self.cluster is not None
        correlation_id = self.timer_correlation_id
        self.timer_correlation_id += 1
        assert self.cluster.schedule_timer(correlation_id, timestamp + INTERVAL_MS)

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        pass

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        self.triggered_timers += 1
        self._schedule_next(timestamp)

    def on_new_leadership_term_event(
        self,
        leadership_term_id: int,
        log_position: int,
        timestamp: int,
        term_base_log_position: int,
        leader_member_id: int,
        log_session_id: int,
        time_unit: ClusterTimeUnit,
        app_version: int,
    ) -> None:
        self._schedule_next(timestamp)

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        writer.write(json.dumps(self.timer_correlation_id).encode())


class TimerSameIdService(_Base):
    """ClusterTimerTest.shouldRescheduleTimerWhenSchedulingWithExistingCorrelationId's service."""

    def __init__(self) -> None:
        super().__init__()
        self.timer_counts = {1: 0, 2: 0}

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        assert self.cluster is not None
        assert self.cluster.schedule_timer(1, timestamp + 1_000_000)  # too far in the future
        assert self.cluster.schedule_timer(1, timestamp + 20)
        assert self.cluster.schedule_timer(2, timestamp + 30)

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        pass

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        self.timer_counts[1 if correlation_id == 1 else 2] += 1

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        writer.write(b"{}")


MESSAGE_TRACKING = "aeron-message-tracking"
SERVICE_MESSAGES_PER_INGRESS = 3
TIMER_MESSAGES_PER_INGRESS = 2


class MessageTrackingService(_Base):
    """Aeron TestNode.MessageTrackingService (service id 1): each client message (an int) is recorded,
    offers 3 service messages and schedules 2 timers due at once, and is echoed; service messages and
    timer firings are recorded. Everything is snapshotted."""

    service_id = 1

    def __init__(self) -> None:
        super().__init__()
        self.client_messages: list[int] = []
        self.service_messages: list[int] = []
        self.timers: list[int] = []
        self.message_count = 0
        self.next_service_message_number = 1_000_000 * self.service_id
        self.next_timer_correlation_id = -1_000_000 * self.service_id
        self.was_snapshot_loaded = False

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        if snapshot is not None and snapshot.records:
            state = json.loads(snapshot.records[0])
            assert state["service_id"] == self.service_id, "Invalid snapshot!"
            self.message_count = state["message_count"]
            self.next_service_message_number = state["next_service_message_number"]
            self.next_timer_correlation_id = state["next_timer_correlation_id"]
            self.client_messages = state["client_messages"]
            self.service_messages = state["service_messages"]
            self.timers = state["timers"]
            self.was_snapshot_loaded = True

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        assert self.cluster is not None
        (number,) = MESSAGE.unpack_from(payload)
        if session is not None:
            self.client_messages.append(number)
            for _ in range(SERVICE_MESSAGES_PER_INGRESS):
                self.next_service_message_number += 1
                assert self.cluster.offer(MESSAGE.pack(self.next_service_message_number))
            for _ in range(TIMER_MESSAGES_PER_INGRESS):
                self.next_timer_correlation_id -= 1
                assert self.cluster.schedule_timer(self.next_timer_correlation_id, self.cluster.time - 1)
            session.offer(payload)
        else:
            self.service_messages.append(number)
        self.message_count += 1
        self._digest.replace(("count", self.message_count - 1), ("count", self.message_count))

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        self.timers.append(correlation_id)

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        writer.write(
            json.dumps(
                {
                    "service_id": self.service_id,
                    "message_count": self.message_count,
                    "next_service_message_number": self.next_service_message_number,
                    "next_timer_correlation_id": self.next_timer_correlation_id,
                    "client_messages": self.client_messages,
                    "service_messages": self.service_messages,
                    "timers": self.timers,
                }
            ).encode()
        )


# Registered into clusterlab.harness.services.SERVICES for the tests of tests/aeron only (conftest).
AERON_SERVICES: dict[str, type[ClusteredService]] = {
    NUMBERED: NumberedService,
    RESCHEDULING: ReschedulingService,
    TIMED: TimedService,
    SERVICE_INGRESS: ServiceMessageIngressService,
    TIMER_RESCHEDULING: TimerReschedulingService,
    TIMER_RESCHEDULE_SAME_ID: TimerSameIdService,
    MESSAGE_TRACKING: MessageTrackingService,
}
