"""Timers and the clustered service: what the module sends its service and what the service asks of it.

Aeron's ``ServiceProxy`` (JoinLog, committed log blocks, termination), ``ConsensusModuleAdapter``
(ServiceAck, ScheduleTimer, CancelTimer, service offers, members query), ``TimerService`` and
``PendingServiceMessageTracker``. The leader turns expired timers and service offers into log
entries; every member learns timer firings and service messages from the committed log.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.codec.framing import Frame
from clusterlab.core.codec.log_events import TimerEvent
from clusterlab.core.codec.service import (
    ClusterMembersQuery,
    ClusterMembersResponse,
    JoinLog,
    ServiceAck,
)
from clusterlab.core.codec.session import SessionMessageHeader, encode_session_message
from clusterlab.core.codec.transport import LogBlock, LogEndOfStream
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE, Channel, ClusterMember, Outbox, Role
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.timers import TimerService

PENDING_SERVICE_MESSAGES_PER_CYCLE = 20
TIMERS_PER_CYCLE = 20


def service_session_id_base(service_id: int) -> int:
    """Aeron: ``Long.MIN_VALUE | (serviceId << 56)``; service-originated messages count up from it."""
    return -(1 << 63) + (service_id << 56)


def service_id_of(cluster_session_id: int) -> int:
    """The service id encoded in a service-originated (negative) cluster session id."""
    return (cluster_session_id + (1 << 63)) >> 56


@dataclass(slots=True)
class PendingServiceMessage:
    """A message a service offered into the log (Aeron ``PendingServiceMessageTracker`` entry)."""

    cluster_session_id: int  # negative: service-originated
    payload: bytes
    appended_position: int = NULL_POSITION  # set by the leader once appended


class ServiceLink:
    """Timers, service offers, service acks and the service proxy of one member."""

    def __init__(
        self,
        state: ModuleState,
        archive: RecordingStore,
        outbox: Outbox,
        service_count: int,
        members: list[ClusterMember],
        log_session_id: Callable[[], int],
    ) -> None:
        self._s = state
        self._archive = archive
        self._outbox = outbox
        self._members = members
        self._log_session_id = log_session_id
        self.service_count = service_count
        self.timer_service = TimerService()
        self.uncommitted_timers: deque[tuple[int, int]] = deque()  # (log position, correlation id)
        self.pending_service_messages: list[deque[PendingServiceMessage]] = [deque() for _ in range(service_count)]
        self.next_service_session_ids = [service_session_id_base(i) + 1 for i in range(service_count)]
        self.log_service_session_ids = [service_session_id_base(i) for i in range(service_count)]
        self.expected_ack_ids = [0] * service_count
        self.service_acks: list[deque[ServiceAck]] = [deque() for _ in range(service_count)]

    # ------------------------------------------------------------------ service proxy
    def to_service(self, payload: bytes) -> None:
        if self.service_count > 0:
            self._outbox.send(self._s.member_id, Channel.SERVICE, payload)

    def send_join_log(
        self, log_position: int, max_log_position: int, is_startup: bool, role: Role | None = None
    ) -> None:
        """Tell the service which log it now follows (live: max = Long.MAX; replay: its stop).

        ``role`` defaults to the module's own."""
        s = self._s
        self.to_service(
            JoinLog(
                log_position=log_position,
                max_log_position=max_log_position,
                member_id=s.member_id,
                log_session_id=self._log_session_id(),
                log_stream_id=100,
                is_startup=BooleanType.TRUE if is_startup else BooleanType.FALSE,
                role=int(s.role if role is None else role),
                log_channel=f"log:{s.leadership_term_id}",
            ).encode()
        )

    def end_log_on_step_down(self) -> None:
        """A leader or candidate becoming a follower ends its service's log.

        Aeron's service sees every role change through the role counter; ours learns its role from
        JoinLog and from the end of its log (LogEndOfStream -> role FOLLOWER)."""
        s = self._s
        if s.role == Role.FOLLOWER:
            return  # the service already follows: nothing to tell it
        self.to_service(
            LogEndOfStream(
                leadership_term_id=s.leadership_term_id,
                log_position=s.consumed_position,
                leader_member_id=s.leader_member_id,
            ).encode()
        )

    def forward_to_service(self, frames: list[Frame]) -> None:
        """Committed entries to the service, in order (the service's BoundedLogAdapter stand-in)."""
        if self.service_count == 0 or not frames:
            return
        s = self._s
        start = frames[0].position
        data = self._archive.read(start, frames[-1].end_position)
        self.to_service(
            LogBlock(
                leadership_term_id=s.leadership_term_id,
                start_position=start,
                # Only committed entries are consumed, so everything in the block is committed.
                commit_position=max(s.commit_position, frames[-1].end_position),
                leader_member_id=s.leader_member_id,
                log_session_id=self._log_session_id(),
                entries=data,
            ).encode()
        )

    # ------------------------------------------------------------------ service -> consensus module
    def on_service_offer(self, msg: SessionMessageHeader) -> None:
        service_id = msg.cluster_session_id  # on this path the field carries the service id (c.8)
        if not 0 <= service_id < self.service_count:
            self._s.ignore("SessionMessageHeader", f"service offer from unknown service {service_id}")
            return
        sid = self.next_service_session_ids[service_id]
        self.next_service_session_ids[service_id] += 1
        # Aeron PendingServiceMessageTracker.enqueueMessage: an id the log already holds was
        # appended by an earlier leader (this member replayed it ahead of its service) - drop it.
        if sid > self.log_service_session_ids[service_id]:
            self.pending_service_messages[service_id].append(PendingServiceMessage(sid, msg.payload))

    def on_cluster_members_query(self, msg: ClusterMembersQuery) -> None:
        self.to_service(
            ClusterMembersResponse(
                correlation_id=msg.correlation_id,
                leader_member_id=self._s.leader_member_id,
                active_members="|".join(m.describe() for m in self._members),
                passive_followers="",
            ).encode()
        )

    def on_service_ack(self, msg: ServiceAck) -> str | None:
        """Queue a service's ack. Returns why the member must close when the ack is a service's
        recovery ack (ack id 0) without a client id: that service failed to start (Aeron
        ``recoverFromSnapshotAndLog``: "failed to start clustered service(s)"); else None."""
        sid = msg.service_id
        if not 0 <= sid < self.service_count:
            self._s.ignore("ServiceAck", f"unknown service {sid}")
            return None
        if msg.ack_id != self.expected_ack_ids[sid]:
            # Aeron treats this as fatal; here the error is logged and counted, and the ack dropped.
            self._s.ignore(
                "ServiceAck", f"ack out of sequence: expected {self.expected_ack_ids[sid]}, got {msg.ack_id}"
            )
            self._s.error("service", "ack out of sequence", pos=msg.log_position)
            return None
        self.expected_ack_ids[sid] += 1
        self.service_acks[sid].append(msg)
        if msg.ack_id == 0 and msg.relevant_id == NULL_VALUE:
            return f"service={sid} failed to start clustered service"
        return None

    def service_acks_at(self, position: int) -> list[ServiceAck] | None:
        """The head acks of every service if all are at ``position`` (consumed), else None."""
        heads: list[ServiceAck] = []
        for q in self.service_acks:
            while q and q[0].log_position < position:
                q.popleft()  # acks for earlier positions (joins, recovery) are no longer awaited
            if not q or q[0].log_position != position:
                return None
            heads.append(q[0])
        for q in self.service_acks:
            q.popleft()
        return heads

    # ------------------------------------------------------------------ leader appends
    def append_expired_timers(self, now_ms: int) -> int:
        work = 0
        term = self._s.leadership_term_id
        for correlation_id, _deadline in self.timer_service.poll(now_ms, TIMERS_PER_CYCLE):
            end = self._archive.append_entry(
                TimerEvent(leadership_term_id=term, correlation_id=correlation_id, timestamp=now_ms).encode(), term
            )
            self.uncommitted_timers.append((end, correlation_id))
            work += 1
        return work

    def append_pending_service_messages(self, now_ms: int) -> int:
        work = 0
        term = self._s.leadership_term_id
        for q in self.pending_service_messages:
            appended = 0
            for m in q:
                if appended >= PENDING_SERVICE_MESSAGES_PER_CYCLE:
                    break
                if m.appended_position == NULL_POSITION:
                    m.appended_position = self._archive.append_entry(
                        encode_session_message(term, m.cluster_session_id, now_ms, m.payload), term
                    )
                    appended += 1
            work += appended
        return work

    # ------------------------------------------------------------------ committed log
    def on_log_timer_event(self, payload: bytes, end_position: int) -> None:
        """A follower (or a replay) reads a TimerEvent: that timer fired, so it is no longer scheduled
        here (a next leader must not fire it again). The ``timer_event`` event says whether it still is
        (never, unless a bug keeps it): the trace check ``timers_fire_once`` reads it."""
        correlation_id = TimerEvent.decode(payload).correlation_id
        self._s.rules.on_log_timer_event(self.timer_service, correlation_id)
        still_scheduled = correlation_id in self.timer_service
        self._s.event("timer_event", {"correlation_id": correlation_id, "scheduled": still_scheduled}, pos=end_position)

    def on_cancel_timer(self, correlation_id: int) -> None:
        """A service's CancelTimer: that timer leaves this module's schedule. When it was scheduled, the
        ``timer_cancel`` event says whether it still is (never, unless a bug keeps it): the trace check
        ``cancelled_timers_stay_cancelled`` reads it."""
        if correlation_id not in self.timer_service:
            return  # already fired (or never scheduled): nothing to cancel
        self._s.rules.on_cancel_timer(self.timer_service, correlation_id)
        still_scheduled = correlation_id in self.timer_service
        self._s.event("timer_cancel", {"correlation_id": correlation_id, "scheduled": still_scheduled})

    def on_log_service_message(self, cluster_session_id: int) -> None:
        """A service-originated message met in the committed log: it is no longer pending."""
        sid = service_id_of(cluster_session_id)
        if 0 <= sid < self.service_count:
            q = self.pending_service_messages[sid]
            while q and q[0].cluster_session_id <= cluster_session_id:
                q.popleft()
            # Only the log id moves here; the offer counter advances with the service's own
            # offers, so a service that lags the log re-offers ids the log already holds.
            self.log_service_session_ids[sid] = max(self.log_service_session_ids[sid], cluster_session_id)

    def sweep_uncommitted(self, commit_position: int) -> None:
        """Leader: forget bookkeeping for timers and service messages now committed."""
        while self.uncommitted_timers and self.uncommitted_timers[0][0] <= commit_position:
            self.uncommitted_timers.popleft()
        for q in self.pending_service_messages:
            while q and q[0].appended_position != NULL_POSITION and q[0].appended_position <= commit_position:
                q.popleft()

    def restore_uncommitted(self, log_position: int) -> None:
        """Re-arm timers whose firing was never committed; re-offer uncommitted service messages."""
        for position, correlation_id in self.uncommitted_timers:
            if position > log_position:
                self.timer_service.schedule_timer(correlation_id, 0)  # fires as soon as a leader exists
        self.uncommitted_timers.clear()
        for q in self.pending_service_messages:
            for m in q:
                if m.appended_position > log_position:
                    m.appended_position = NULL_POSITION

    # ------------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Uncommitted timers in log order; each service's pending ids strictly increasing."""
        last = NULL_POSITION
        for position, _ in self.uncommitted_timers:
            assert position >= last, f"member {self._s.member_id}: uncommitted timers out of log order"
            last = position
        for service_id, q in enumerate(self.pending_service_messages):
            prev = None
            for m in q:
                assert prev is None or m.cluster_session_id > prev, (
                    f"member {self._s.member_id}: service {service_id} pending ids not increasing"
                )
                prev = m.cluster_session_id
            assert self.expected_ack_ids[service_id] >= 0
