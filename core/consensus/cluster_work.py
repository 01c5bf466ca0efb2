"""The consensus module's application-facing work: client sessions, timers, service messages,
cluster control, snapshots and termination (the parts of Aeron's ``ConsensusModuleAgent`` that
are not elections or log replication). ``ConsensusModule`` inherits this; it is split out only so
each file stays readable. Everything here is sans-IO like the rest of the module.

Which side does what (PROTOCOL.md b.12-b.15, e.7-e.11):
- the leader turns ingress, timer expiry, service offers and control toggles into log entries
  and applies their effect when it appends them;
- every member (leader included, when replaying) applies committed log entries through
  ``apply_log_entry`` — followers learn sessions, timer firings and actions from the log only;
- the service sees committed entries only, forwarded in log order (``ServiceProxy``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clusterlab.core.codec.enums import (
    AdminRequestType,
    AdminResponseCode,
    BooleanType,
    CloseReason,
    ClusterAction,
    ClusterTimeUnit,
    EventCode,
    SnapshotMark,
    SnapshotTypeId,
    ToggleState,
)
from clusterlab.core.codec.framing import Frame, framed_length
from clusterlab.core.codec.log_events import ClusterActionRequest, SessionCloseEvent, SessionOpenEvent, TimerEvent
from clusterlab.core.codec.service import (
    CancelTimer,
    CloseSession,
    ClusterMembersQuery,
    ClusterMembersResponse,
    JoinLog,
    ScheduleTimer,
    ServiceAck,
    ServiceTerminationPosition,
)
from clusterlab.core.codec.session import (
    SESSION_HEADER_LENGTH,
    SESSION_TIMESTAMP,
    SESSION_TIMESTAMP_OFFSET,
    AdminRequest,
    AdminResponse,
    Challenge,
    ChallengeResponse,
    NewLeaderEvent,
    SessionCloseRequest,
    SessionConnectRequest,
    SessionEvent,
    SessionKeepAlive,
    SessionMessageHeader,
    encode_session_message,
    session_message_fields,
    session_message_ids,
)
from clusterlab.core.codec.snapshot import ClusterSession as ClusterSessionRecord
from clusterlab.core.codec.snapshot import (
    ConsensusModuleSnapshot,
    PendingMessageTracker,
    SnapshotMarker,
)
from clusterlab.core.codec.snapshot import Timer as TimerRecord
from clusterlab.core.codec.transport import LogBlock
from clusterlab.core.consensus.authenticator import DefaultAuthenticator
from clusterlab.core.consensus.context import (
    APP_VERSION,
    CLIENT_PROTOCOL_VERSION,
    NULL_POSITION,
    NULL_VALUE,
    SERVICE_ID_CONSENSUS_MODULE,
    Channel,
    ConsensusModuleState,
    Role,
)
from clusterlab.core.consensus.sessions import ClusterSession, ClusterSessionState
from clusterlab.core.consensus.timers import TimerService

if TYPE_CHECKING:
    from clusterlab.core.consensus.module import ConsensusModule

MAX_LONG = (1 << 63) - 1
PENDING_SERVICE_MESSAGES_PER_CYCLE = 20
TIMERS_PER_CYCLE = 20
SERVICE_LOG_BLOCK_BYTES = 64 * 1024
MAX_HELD_INGRESS = 10_000  # ingress messages held while SUSPENDED/SNAPSHOT


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


class _SessionProxy:
    """What the authenticator may do to one pending session (Aeron ``SessionProxy``)."""

    def __init__(self, cm: ClusterWork, session: ClusterSession, now_ns: int) -> None:
        self._cm = cm
        self._session = session
        self._now_ns = now_ns

    @property
    def cluster_session_id(self) -> int:
        return self._session.cluster_session_id

    def challenge(self, encoded_challenge: bytes) -> bool:
        s = self._session
        s.state = ClusterSessionState.CHALLENGED
        s.encoded_challenge = encoded_challenge
        self._cm.send_egress(
            s.response_channel,
            Challenge(
                correlation_id=s.correlation_id,
                cluster_session_id=s.cluster_session_id,
                encoded_challenge=encoded_challenge,
            ).encode(),
        )
        return True

    def authenticate(self, encoded_principal: bytes) -> bool:
        self._session.state = ClusterSessionState.AUTHENTICATED
        self._session.encoded_principal = encoded_principal
        return True

    def reject(self) -> None:
        self._session.state = ClusterSessionState.REJECTED


class ClusterWork:
    """Mixin of ConsensusModule: see the module docstring."""

    def _init_cluster_work(self: ConsensusModule) -> None:
        ctx = self.ctx
        self.authenticator = ctx.authenticator if ctx.authenticator is not None else DefaultAuthenticator()
        self.sessions: dict[int, ClusterSession] = {}
        self.pending_sessions: list[ClusterSession] = []
        self.next_session_id = 1
        # The next session id as the committed log has it (what the snapshot holds, the same on every
        # member); next_session_id runs ahead on the leader, which also numbers rejected connects.
        self.log_next_session_id = 1
        self.appended_session_opens: deque[tuple[int, int]] = deque()  # leader: (end position, session id)
        self.timer_service = TimerService()
        self.uncommitted_timers: deque[tuple[int, int]] = deque()  # (log position, correlation id)
        self.uncommitted_closed_sessions: deque[tuple[int, ClusterSession]] = deque()
        self.pending_service_messages: list[deque[PendingServiceMessage]] = [deque() for _ in range(ctx.service_count)]
        self.next_service_session_ids = [service_session_id_base(i) + 1 for i in range(ctx.service_count)]
        self.log_service_session_ids = [service_session_id_base(i) for i in range(ctx.service_count)]
        self.toggle = ToggleState.INACTIVE
        self.expected_ack_ids = [0] * ctx.service_count
        self.service_acks: list[deque[ServiceAck]] = [deque() for _ in range(ctx.service_count)]
        self.snapshot_position = NULL_POSITION
        self.snapshot_leadership_term_id = NULL_VALUE
        self.snapshot_count = 0
        self.termination_deadline_ns = 0
        self.time_of_last_termination_send_ns = 0
        self.held_ingress: list[SessionMessageHeader] = []
        self.termination_is_shutdown = False
        self.service_termination_sent = False
        self.services_terminated = False
        self.terminated_followers: set[int] = set()
        self.terminated_reason = ""
        self.service_joined_position = NULL_POSITION
        self.timed_out_client_count = 0

    # ------------------------------------------------------------------ egress / service proxy
    def send_egress(self: ConsensusModule, response_channel: str, payload: bytes) -> None:
        self.ctx.outbox.send_egress(response_channel, payload)

    def _session_event(
        self: ConsensusModule, s: ClusterSession, code: EventCode, detail: str, leader_id: int | None = None
    ) -> None:
        self.send_egress(
            s.response_channel,
            SessionEvent(
                cluster_session_id=s.cluster_session_id,
                correlation_id=s.correlation_id,
                leadership_term_id=self.leadership_term_id,
                leader_member_id=self.leader_member_id if leader_id is None else leader_id,
                code=code,
                version=CLIENT_PROTOCOL_VERSION,
                detail=detail,
            ).encode(),
        )

    def ingress_endpoints(self: ConsensusModule) -> str:
        """``id=endpoint,id=endpoint`` as REDIRECT and NewLeaderEvent carry it."""
        return ",".join(f"{m.member_id}={m.ingress_endpoint}" for m in self.ctx.members)

    def _to_service(self: ConsensusModule, payload: bytes) -> None:
        if self.ctx.service_count > 0:
            self.ctx.outbox.send(self.member_id, Channel.SERVICE, payload)

    def send_join_log(
        self: ConsensusModule, log_position: int, max_log_position: int, is_startup: bool, role: Role | None = None
    ) -> None:
        """Tell the service which log it now follows (live: max = Long.MAX; replay: its stop).

        ``role`` defaults to the module's own."""
        self._to_service(
            JoinLog(
                log_position=log_position,
                max_log_position=max_log_position,
                member_id=self.member_id,
                log_session_id=self.log_session_id,
                log_stream_id=100,
                is_startup=BooleanType.TRUE if is_startup else BooleanType.FALSE,
                role=int(self.role if role is None else role),
                log_channel=f"log:{self.leadership_term_id}",
            ).encode()
        )

    def forward_to_service(self: ConsensusModule, frames: list[Frame]) -> None:
        """Committed entries to the service, in order (the service's BoundedLogAdapter stand-in)."""
        if self.ctx.service_count == 0 or not frames:
            return
        start = frames[0].position
        data = self.archive.read(start, frames[-1].end_position)
        self._to_service(
            LogBlock(
                leadership_term_id=self.leadership_term_id,
                start_position=start,
                # Only committed entries are consumed, so everything in the block is committed.
                commit_position=max(self.commit_position, frames[-1].end_position),
                leader_member_id=self.leader_member_id,
                log_session_id=self.log_session_id,
                entries=data,
            ).encode()
        )

    # ------------------------------------------------------------------ leader appends
    def _append(self: ConsensusModule, payload: bytes) -> int:
        return self.archive.append_entry(payload, self.leadership_term_id)

    def _position_after(self: ConsensusModule, encoded_length: int) -> int:
        return self.archive.stop_position + framed_length(encoded_length)

    def append_cluster_action(self: ConsensusModule, action: ClusterAction, now_ns: int, flags: int = 0) -> int:
        """ClusterActionRequest whose log_position is the position just after it (Aeron's rule)."""
        probe = ClusterActionRequest(
            leadership_term_id=self.leadership_term_id,
            log_position=0,
            timestamp=self.cluster_time_ms(now_ns),
            action=action,
            flags=flags,
        )
        position = self._position_after(len(probe.encode()))
        msg = ClusterActionRequest(
            leadership_term_id=self.leadership_term_id,
            log_position=position,
            timestamp=probe.timestamp,
            action=action,
            flags=flags,
        )
        end = self._append(msg.encode())
        assert end == position
        self._event("cluster_action", {"action": action.name}, term=self.leadership_term_id, pos=position)
        return position

    def _append_session_close(self: ConsensusModule, s: ClusterSession, now_ns: int) -> int:
        reason = s.close_reason if s.close_reason is not None else CloseReason.CLIENT_ACTION
        end = self._append(
            SessionCloseEvent(
                leadership_term_id=self.leadership_term_id,
                cluster_session_id=s.cluster_session_id,
                timestamp=self.cluster_time_ms(now_ns),
                close_reason=reason,
            ).encode()
        )
        s.state = ClusterSessionState.CLOSED
        self.sessions.pop(s.cluster_session_id, None)
        self.uncommitted_closed_sessions.append((end, s))
        return end

    # ------------------------------------------------------------------ ingress (client -> leader)
    def on_ingress_batch(self: ConsensusModule, payloads: list[bytes], now_ns: int) -> None:
        """Several ingress messages in arrival order (one batched ZeroMQ message from a client).

        The same as :meth:`on_message` for each, except that the session messages an ACTIVE leader
        takes are framed and appended together, in order, with one write (log batching). Anything
        else is handled where it stands, after the session messages before it were appended."""
        self._now_ns = now_ns
        if self.state == ConsensusModuleState.CLOSED:
            return
        taken: list[bytes] = []
        timestamp = b""  # the cluster time stamped on this batch's session messages, packed once
        for payload in payloads:
            fields = (
                session_message_fields(payload)
                if self.election is None and self.role == Role.LEADER and self.state == ConsensusModuleState.ACTIVE
                else None
            )
            if fields is not None:
                term, session_id, _ = fields
                if term != self.leadership_term_id:
                    self.ignore("SessionMessageHeader", "stale leadership term")
                    continue
                s = self.sessions.get(session_id)
                if s is None or s.state != ClusterSessionState.OPEN:
                    self.ignore("SessionMessageHeader", f"session {session_id} not open")
                    continue
                if not timestamp:
                    timestamp = SESSION_TIMESTAMP.pack(self.cluster_time_ms(now_ns))
                # The client's message with the leader's timestamp (encode_session_message's bytes).
                taken.append(b"".join((payload[:SESSION_TIMESTAMP_OFFSET], timestamp, payload[SESSION_HEADER_LENGTH:])))
                s.time_of_last_activity_ns = now_ns
                continue
            if taken:
                self.archive.append_entries(taken, self.leadership_term_id)
                taken = []
            self.on_message(NULL_VALUE, Channel.INGRESS, payload, now_ns)
        if taken:
            self.archive.append_entries(taken, self.leadership_term_id)

    def on_ingress(self: ConsensusModule, msg: Any, now_ns: int) -> None:
        """Ingress is only served outside elections; a follower answers connects with REDIRECT."""
        if self.election is not None or self.state in (ConsensusModuleState.CLOSED, ConsensusModuleState.INIT):
            self.ignore(type(msg).__name__, "ingress during an election")
            return
        if isinstance(msg, SessionConnectRequest):
            self.on_session_connect_request(msg, now_ns)
            return
        if self.role != Role.LEADER:
            self.ignore(type(msg).__name__, "ingress on a follower")
            return
        if isinstance(msg, SessionMessageHeader):
            self.on_ingress_message(msg, now_ns)
        elif isinstance(msg, SessionKeepAlive):
            s = self.sessions.get(msg.cluster_session_id)
            if (
                s is not None
                and s.state == ClusterSessionState.OPEN
                and msg.leadership_term_id == self.leadership_term_id
            ):
                s.time_of_last_activity_ns = now_ns
        elif isinstance(msg, SessionCloseRequest):
            s = self.sessions.get(msg.cluster_session_id)
            if (
                s is not None
                and s.state == ClusterSessionState.OPEN
                and msg.leadership_term_id == self.leadership_term_id
            ):
                s.closing(CloseReason.CLIENT_ACTION)
                self._append_session_close(s, now_ns)
        elif isinstance(msg, ChallengeResponse):
            for s in self.pending_sessions:
                if s.cluster_session_id == msg.cluster_session_id and s.state == ClusterSessionState.CHALLENGED:
                    s.time_of_last_activity_ns = now_ns
                    s.correlation_id = msg.correlation_id  # later replies answer the response (as Aeron)
                    self.authenticator.on_challenge_response(
                        s.cluster_session_id, msg.encoded_credentials, self.cluster_time_ms(now_ns)
                    )
        elif isinstance(msg, AdminRequest):
            self.on_admin_request(msg, now_ns)
        else:
            self.ignore("ingress", f"unexpected {type(msg).__name__}")

    def on_session_connect_request(self: ConsensusModule, msg: SessionConnectRequest, now_ns: int) -> None:
        s = ClusterSession(
            cluster_session_id=NULL_VALUE,
            response_stream_id=msg.response_stream_id,
            response_channel=msg.response_channel,
            correlation_id=msg.correlation_id,
            time_of_last_activity_ns=now_ns,
        )
        if self.role != Role.LEADER:
            self._session_event(s, EventCode.REDIRECT, self.ingress_endpoints())
            return
        if (msg.version >> 16) != (CLIENT_PROTOCOL_VERSION >> 16):
            self._session_event(s, EventCode.ERROR, f"invalid client version {msg.version}")
            return
        if len(self.pending_sessions) + len(self.sessions) >= self.ctx.max_concurrent_sessions:
            self._session_event(s, EventCode.ERROR, "concurrent session limit")
            return
        s.cluster_session_id = self.next_session_id
        self.next_session_id += 1
        s.state = ClusterSessionState.CONNECTED
        self.authenticator.on_connect_request(
            s.cluster_session_id, msg.encoded_credentials, self.cluster_time_ms(now_ns)
        )
        self.pending_sessions.append(s)

    def on_ingress_message(self: ConsensusModule, msg: SessionMessageHeader, now_ns: int) -> None:
        if msg.leadership_term_id != self.leadership_term_id:
            self.ignore("SessionMessageHeader", "stale leadership term")  # clients adopt NewLeaderEvent's term
            return
        s = self.sessions.get(msg.cluster_session_id)
        if s is None or s.state != ClusterSessionState.OPEN:
            self.ignore("SessionMessageHeader", f"session {msg.cluster_session_id} not open")
            return
        if self.state != ConsensusModuleState.ACTIVE:
            # Aeron stops polling ingress while not ACTIVE, so messages wait; we hold them (bounded).
            if len(self.held_ingress) < MAX_HELD_INGRESS:
                self.held_ingress.append(msg)
            else:
                self.ignore("SessionMessageHeader", f"module {self.state.name}, ingress hold full")
            return
        self._append(
            encode_session_message(
                self.leadership_term_id, msg.cluster_session_id, self.cluster_time_ms(now_ns), msg.payload
            )
        )
        s.time_of_last_activity_ns = now_ns

    def on_admin_request(self: ConsensusModule, msg: AdminRequest, now_ns: int) -> None:
        s = self.sessions.get(msg.cluster_session_id)
        if s is None or s.state != ClusterSessionState.OPEN or msg.leadership_term_id != self.leadership_term_id:
            self.ignore("AdminRequest", "no open session in this term")
            return

        def respond(code: AdminResponseCode, text: str) -> None:
            self.send_egress(
                s.response_channel,
                AdminResponse(
                    cluster_session_id=s.cluster_session_id,
                    correlation_id=msg.correlation_id,
                    request_type=msg.request_type,
                    response_code=code,
                    message=text,
                    payload=b"",
                ).encode(),
            )

        # Aeron's order: authorise first (whatever the type), then an unknown type is an ERROR response.
        if not self.ctx.authorise_admin(s.encoded_principal, msg.request_type):
            respond(
                AdminResponseCode.UNAUTHORISED_ACCESS,
                f"Execution of the {msg.request_type.name} request was not authorised",
            )
        elif msg.request_type != AdminRequestType.SNAPSHOT:
            respond(AdminResponseCode.ERROR, f"Unknown request type: {msg.request_type.name}")
        elif self.toggle_control(ToggleState.SNAPSHOT):
            respond(AdminResponseCode.OK, "")
        else:
            respond(AdminResponseCode.ERROR, f"Failed to switch ClusterControl to SNAPSHOT from {self.toggle.name}")

    # ------------------------------------------------------------------ service -> consensus module
    def on_service_message(self: ConsensusModule, msg: Any, now_ns: int) -> None:
        if isinstance(msg, ServiceAck):
            self.on_service_ack(msg, now_ns)
        elif isinstance(msg, ScheduleTimer):
            self.timer_service.on_schedule_timer(msg.correlation_id, msg.deadline)
        elif isinstance(msg, CancelTimer):
            self.timer_service.cancel_timer(msg.correlation_id)
        elif isinstance(msg, CloseSession):
            s = self.sessions.get(msg.cluster_session_id)
            if s is not None and s.state == ClusterSessionState.OPEN:
                s.closing(CloseReason.SERVICE_ACTION)
                if self.role == Role.LEADER and self.election is None and self.state == ConsensusModuleState.ACTIVE:
                    self._append_session_close(s, now_ns)
                    self._session_event(s, EventCode.CLOSED, CloseReason.SERVICE_ACTION.name)
        elif isinstance(msg, SessionMessageHeader):
            service_id = msg.cluster_session_id  # on this path the field carries the service id (c.8)
            if not 0 <= service_id < self.ctx.service_count:
                self.ignore("SessionMessageHeader", f"service offer from unknown service {service_id}")
                return
            sid = self.next_service_session_ids[service_id]
            self.next_service_session_ids[service_id] += 1
            # Aeron PendingServiceMessageTracker.enqueueMessage: an id the log already holds was
            # appended by an earlier leader (this member replayed it ahead of its service) - drop it.
            if sid > self.log_service_session_ids[service_id]:
                self.pending_service_messages[service_id].append(PendingServiceMessage(sid, msg.payload))
        elif isinstance(msg, ClusterMembersQuery):
            self._to_service(
                ClusterMembersResponse(
                    correlation_id=msg.correlation_id,
                    leader_member_id=self.leader_member_id,
                    active_members="|".join(m.describe() for m in self.ctx.members),
                    passive_followers="",
                ).encode()
            )
        else:
            self.ignore("service", f"unexpected {type(msg).__name__}")

    def on_service_ack(self: ConsensusModule, msg: ServiceAck, now_ns: int) -> None:
        sid = msg.service_id
        if not 0 <= sid < self.ctx.service_count:
            self.ignore("ServiceAck", f"unknown service {sid}")
            return
        if msg.ack_id != self.expected_ack_ids[sid]:
            # Aeron treats this as fatal; here the error is logged and counted, and the ack dropped.
            self.ignore("ServiceAck", f"ack out of sequence: expected {self.expected_ack_ids[sid]}, got {msg.ack_id}")
            self._event("error", {"where": "service", "reason": "ack out of sequence"}, pos=msg.log_position)
            return
        self.expected_ack_ids[sid] += 1
        self.service_acks[sid].append(msg)

    def _service_acks_at(self: ConsensusModule, position: int) -> list[ServiceAck] | None:
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

    # ------------------------------------------------------------------ applying committed entries
    def apply_log_entry(self: ConsensusModule, frame: Frame, template_id: int, now_ns: int) -> bool:
        """Aeron ``LogAdapter``: what a follower's (or a replaying) module learns from one committed entry.

        Returns False when consumption must pause after this entry (a cluster action to handle)."""
        payload = frame.payload
        if template_id == SessionMessageHeader.TEMPLATE_ID:
            _term, cluster_session_id, _timestamp = session_message_ids(payload)
            if cluster_session_id < 0:
                sid = service_id_of(cluster_session_id)
                if 0 <= sid < self.ctx.service_count:
                    q = self.pending_service_messages[sid]
                    while q and q[0].cluster_session_id <= cluster_session_id:
                        q.popleft()
                    # Only the log id moves here; the offer counter advances with the service's own
                    # offers, so a service that lags the log re-offers ids the log already holds.
                    self.log_service_session_ids[sid] = max(self.log_service_session_ids[sid], cluster_session_id)
            else:
                s = self.sessions.get(cluster_session_id)
                if s is not None:
                    s.time_of_last_activity_ns = now_ns
        elif template_id == TimerEvent.TEMPLATE_ID:
            self.timer_service.on_replay_timer_event(TimerEvent.decode(payload).correlation_id)
        elif template_id == SessionOpenEvent.TEMPLATE_ID:
            ev = SessionOpenEvent.decode(payload)
            self.sessions[ev.cluster_session_id] = ClusterSession(
                cluster_session_id=ev.cluster_session_id,
                response_stream_id=ev.response_stream_id,
                response_channel=ev.response_channel,
                correlation_id=ev.correlation_id,
                state=ClusterSessionState.OPEN,
                encoded_principal=ev.encoded_principal,
                time_of_last_activity_ns=now_ns,
                opened_log_position=frame.end_position,
            )
            self.next_session_id = max(self.next_session_id, ev.cluster_session_id + 1)
            self.log_next_session_id = max(self.log_next_session_id, ev.cluster_session_id + 1)
        elif template_id == SessionCloseEvent.TEMPLATE_ID:
            self.sessions.pop(SessionCloseEvent.decode(payload).cluster_session_id, None)
        elif template_id == ClusterActionRequest.TEMPLATE_ID:
            ev = ClusterActionRequest.decode(payload)
            return self.on_replayed_cluster_action(ev, now_ns)
        return True

    def on_replayed_cluster_action(self: ConsensusModule, ev: ClusterActionRequest, now_ns: int) -> bool:
        # Every committed action is handled, whatever its term (issue 16 item 3): Aeron's module
        # tracks the log's term while it replays (so its "same term" check always holds), and our
        # follower consumes an earlier term's committed tail after the election; skipping a SNAPSHOT
        # there left the services' snapshots without the module's.
        if ev.action == ClusterAction.SUSPEND:
            self.state = ConsensusModuleState.SUSPENDED
        elif ev.action == ClusterAction.RESUME:
            self.state = ConsensusModuleState.ACTIVE
        elif ev.action == ClusterAction.SNAPSHOT and ev.flags == 0:
            self.state = ConsensusModuleState.SNAPSHOT
            self.snapshot_position = ev.log_position
            self.snapshot_leadership_term_id = ev.leadership_term_id  # ours may lag while catching up
            return False
        return True

    def _commit_session_opens(self: ConsensusModule, log_position: int) -> None:
        """Leader: fold the session opens appended up to ``log_position`` into log_next_session_id."""
        opens = self.appended_session_opens
        while opens and opens[0][0] <= log_position:
            self.log_next_session_id = max(self.log_next_session_id, opens.popleft()[1] + 1)

    def sweep_uncommitted(self: ConsensusModule, commit_position: int) -> None:
        """Leader: forget bookkeeping for entries that are now committed."""
        self._commit_session_opens(commit_position)
        while self.uncommitted_timers and self.uncommitted_timers[0][0] <= commit_position:
            self.uncommitted_timers.popleft()
        while self.uncommitted_closed_sessions and self.uncommitted_closed_sessions[0][0] <= commit_position:
            self.uncommitted_closed_sessions.popleft()
        for q in self.pending_service_messages:
            while q and q[0].appended_position != NULL_POSITION and q[0].appended_position <= commit_position:
                q.popleft()

    def restore_uncommitted(self: ConsensusModule, log_position: int, now_ns: int) -> None:
        """Aeron ``prepareForNewLeadership`` bookkeeping: undo what was appended but not committed."""
        self._commit_session_opens(log_position)
        self.appended_session_opens.clear()  # opens past log_position are lost (or learned again)
        for session in list(self.sessions.values()):
            if session.opened_log_position > log_position:
                self._session_event(session, EventCode.CLOSED, "election")
                del self.sessions[session.cluster_session_id]
        for session in self.pending_sessions:
            self._session_event(session, EventCode.CLOSED, "election")
        self.pending_sessions.clear()
        for position, correlation_id in self.uncommitted_timers:
            if position > log_position:
                self.timer_service.schedule_timer(correlation_id, 0)  # fires as soon as a leader exists
        self.uncommitted_timers.clear()
        for q in self.pending_service_messages:
            for m in q:
                if m.appended_position > log_position:
                    m.appended_position = NULL_POSITION
        for position, session in self.uncommitted_closed_sessions:
            if position > log_position:
                session.state = ClusterSessionState.CLOSING
                self.sessions[session.cluster_session_id] = session
        self.uncommitted_closed_sessions.clear()
        self.held_ingress.clear()  # never appended: the clients see no reply (outcome unknown) and retry
        if self.snapshot_position > log_position:
            # Our own SNAPSHOT/SHUTDOWN action was never committed: stop waiting for it. If the next
            # leader's log has it after all, we meet it again as a follower and snapshot then.
            self.snapshot_position = NULL_POSITION
            if self.state == ConsensusModuleState.SNAPSHOT:
                self.state = ConsensusModuleState.ACTIVE
        if self.termination_position > log_position and self.leader_member_id == self.member_id:
            self.termination_position = NULL_POSITION
        self.toggle = ToggleState.INACTIVE

    # ------------------------------------------------------------------ leader duty cycle
    def leader_cluster_work(self: ConsensusModule, now_ns: int) -> int:
        """Timers, service messages, pending sessions, the session checker and the control toggle."""
        work = 0
        now_ms = self.cluster_time_ms(now_ns)
        if self.state == ConsensusModuleState.ACTIVE:
            for correlation_id, _deadline in self.timer_service.poll(now_ms, TIMERS_PER_CYCLE):
                end = self._append(
                    TimerEvent(
                        leadership_term_id=self.leadership_term_id, correlation_id=correlation_id, timestamp=now_ms
                    ).encode()
                )
                self.uncommitted_timers.append((end, correlation_id))
                work += 1
            for q in self.pending_service_messages:
                appended = 0
                for m in q:
                    if appended >= PENDING_SERVICE_MESSAGES_PER_CYCLE:
                        break
                    if m.appended_position == NULL_POSITION:
                        m.appended_position = self._append(
                            encode_session_message(self.leadership_term_id, m.cluster_session_id, now_ms, m.payload)
                        )
                        appended += 1
                work += appended
            work += self._process_pending_sessions(now_ns)
            work += self._check_sessions(now_ns)
        work += self._check_control_toggle(now_ns)
        return work

    def _process_pending_sessions(self: ConsensusModule, now_ns: int) -> int:
        work = 0
        now_ms = self.cluster_time_ms(now_ns)
        for s in list(self.pending_sessions):
            proxy = _SessionProxy(self, s, now_ns)
            if s.state == ClusterSessionState.CONNECTED:
                self.authenticator.on_connected_session(proxy, now_ms)
            elif s.state == ClusterSessionState.CHALLENGED:
                self.authenticator.on_challenged_session(proxy, now_ms)
            if s.state == ClusterSessionState.AUTHENTICATED:
                end = self._append(
                    SessionOpenEvent(
                        leadership_term_id=self.leadership_term_id,
                        correlation_id=s.correlation_id,
                        cluster_session_id=s.cluster_session_id,
                        timestamp=now_ms,
                        response_stream_id=s.response_stream_id,
                        response_channel=s.response_channel,
                        encoded_principal=s.encoded_principal,
                    ).encode()
                )
                s.state = ClusterSessionState.OPEN
                s.opened_log_position = end
                self.appended_session_opens.append((end, s.cluster_session_id))
                s.time_of_last_activity_ns = now_ns
                self.sessions[s.cluster_session_id] = s
                self.pending_sessions.remove(s)
                # Aeron answers OK before the open is committed.
                self._session_event(s, EventCode.OK, "")
                work += 1
            elif s.state == ClusterSessionState.REJECTED:
                self._session_event(s, EventCode.AUTHENTICATION_REJECTED, "authentication rejected")
                self.pending_sessions.remove(s)
                work += 1
            elif now_ns > s.time_of_last_activity_ns + self.ctx.timeouts.session_timeout_ns:
                self._session_event(s, EventCode.ERROR, "session timed out before it opened")
                self.pending_sessions.remove(s)
                work += 1
        return work

    def _check_sessions(self: ConsensusModule, now_ns: int) -> int:
        work = 0
        timeout = self.ctx.timeouts.session_timeout_ns
        for s in list(self.sessions.values()):
            if s.state == ClusterSessionState.OPEN and now_ns > s.time_of_last_activity_ns + timeout:
                s.closing(CloseReason.TIMEOUT)
                self.timed_out_client_count += 1
            if s.state == ClusterSessionState.CLOSING:
                reason = s.close_reason if s.close_reason is not None else CloseReason.CLIENT_ACTION
                self._append_session_close(s, now_ns)
                self._session_event(s, EventCode.CLOSED, reason.name)
                work += 1
            elif s.has_new_leader_event_pending:
                s.has_new_leader_event_pending = False
                self.send_egress(
                    s.response_channel,
                    NewLeaderEvent(
                        leadership_term_id=self.leadership_term_id,
                        cluster_session_id=s.cluster_session_id,
                        leader_member_id=self.member_id,
                        ingress_endpoints=self.ingress_endpoints(),
                    ).encode(),
                )
                work += 1
        return work

    def on_leader_election_complete(self: ConsensusModule, is_startup: bool, now_ns: int) -> None:
        """Leader side of e.9: keep sessions (NewLeaderEvent) or, after a whole-cluster restart, close them."""
        self.toggle = ToggleState.NEUTRAL
        for s in list(self.sessions.values()):
            if s.state != ClusterSessionState.OPEN:
                continue
            if is_startup:
                s.closing(CloseReason.TIMEOUT)
            else:
                s.time_of_last_activity_ns = now_ns
                s.has_new_leader_event_pending = True

    # ------------------------------------------------------------------ cluster control
    def toggle_control(self: ConsensusModule, target: ToggleState) -> bool:
        """ClusterControl compare-and-set: from NEUTRAL to ``target``; RESUME only from SUSPEND.

        Refused on followers and during elections (the toggle is INACTIVE then)."""
        expected = ToggleState.SUSPEND if target == ToggleState.RESUME else ToggleState.NEUTRAL
        if self.role != Role.LEADER or self.election is not None:
            return False
        # A leader elected while the cluster was suspended inherits SUSPENDED with a NEUTRAL toggle:
        # RESUME must still be possible, or nothing could ever resume the cluster.
        inherited_suspend = (
            target == ToggleState.RESUME
            and self.toggle == ToggleState.NEUTRAL
            and self.state == ConsensusModuleState.SUSPENDED
        )
        if self.toggle != expected and not inherited_suspend:
            return False
        self.toggle = target
        return True

    def _check_control_toggle(self: ConsensusModule, now_ns: int) -> int:
        t = self.toggle
        if t in (ToggleState.NEUTRAL, ToggleState.INACTIVE):
            return 0
        state = self.state
        if t == ToggleState.SUSPEND and state == ConsensusModuleState.ACTIVE:
            self.append_cluster_action(ClusterAction.SUSPEND, now_ns)
            self.state = ConsensusModuleState.SUSPENDED
        elif t == ToggleState.RESUME and state == ConsensusModuleState.SUSPENDED:
            self.append_cluster_action(ClusterAction.RESUME, now_ns)
            self.state = ConsensusModuleState.ACTIVE
            self.toggle = ToggleState.NEUTRAL
            held, self.held_ingress = self.held_ingress, []
            for msg in held:
                self.on_ingress_message(msg, now_ns)
        elif t == ToggleState.SNAPSHOT and state == ConsensusModuleState.ACTIVE:
            self.snapshot_leadership_term_id = self.leadership_term_id
            self.snapshot_position = self.append_cluster_action(ClusterAction.SNAPSHOT, now_ns)
            self.state = ConsensusModuleState.SNAPSHOT
        elif t == ToggleState.STANDBY_SNAPSHOT and state == ConsensusModuleState.ACTIVE:
            self.append_cluster_action(ClusterAction.SNAPSHOT, now_ns, flags=1)
            self.toggle = ToggleState.NEUTRAL
        elif t == ToggleState.SHUTDOWN and state == ConsensusModuleState.ACTIVE:
            position = self.append_cluster_action(ClusterAction.SNAPSHOT, now_ns)
            self.snapshot_position = position
            self.snapshot_leadership_term_id = self.leadership_term_id
            self._begin_termination(position, now_ns, shutdown=True)
            self.state = ConsensusModuleState.SNAPSHOT
        elif t == ToggleState.ABORT and state in (ConsensusModuleState.ACTIVE, ConsensusModuleState.SUSPENDED):
            self._begin_termination(self.archive.stop_position, now_ns, shutdown=False)
            self.state = ConsensusModuleState.TERMINATING
        else:
            return 0
        return 1

    def _begin_termination(self: ConsensusModule, position: int, now_ns: int, *, shutdown: bool) -> None:
        self.termination_position = position
        self.termination_is_shutdown = shutdown
        self.termination_deadline_ns = now_ns + self.ctx.timeouts.termination_timeout_ns
        self.time_of_last_termination_send_ns = now_ns
        self.terminated_followers.clear()
        for s in self.statuses:
            if s.member_id != self.member_id:
                self.consensus_publisher.termination_position(s.member_id, self.leadership_term_id, position)
        self._event("termination", {"shutdown": shutdown}, term=self.leadership_term_id, pos=position)

    # ------------------------------------------------------------------ snapshots
    def snapshot_work(self: ConsensusModule, now_ns: int) -> int:
        """In SNAPSHOT: once every service acked at the action's position, write the module's snapshot."""
        if self.state != ConsensusModuleState.SNAPSHOT or self.consumed_position < self.snapshot_position:
            return 0
        acks = self._service_acks_at(self.snapshot_position) if self.ctx.service_count else []
        if acks is None:
            return 0
        if any(a.relevant_id == NULL_VALUE for a in acks):
            self._event(
                "error", {"where": "snapshot", "reason": "a service failed to snapshot"}, pos=self.snapshot_position
            )
        else:
            self.take_snapshot(self.snapshot_position, [a.relevant_id for a in acks], now_ns)
        for s in self.sessions.values():
            s.time_of_last_activity_ns = now_ns  # a snapshot pause must not time out clients
        if self.termination_position != NULL_POSITION and self.snapshot_position >= self.termination_position:
            self.state = ConsensusModuleState.TERMINATING  # SHUTDOWN: snapshot first, then stop
        else:
            self.state = ConsensusModuleState.ACTIVE
            if self.role == Role.LEADER:
                self.toggle = ToggleState.NEUTRAL
                held, self.held_ingress = self.held_ingress, []
                for msg in held:
                    self.on_ingress_message(msg, now_ns)
        self.snapshot_position = NULL_POSITION
        return 1

    def take_snapshot(self: ConsensusModule, log_position: int, service_recording_ids: list[int], now_ns: int) -> None:
        """Write the module's snapshot (c.12) and the SNAPSHOT entries (services, then the module)."""
        term = self.snapshot_leadership_term_id
        marker = {
            "type_id": int(SnapshotTypeId.CONSENSUS_MODULE),
            "log_position": log_position,
            "leadership_term_id": term,
            "index": 0,
            "time_unit": ClusterTimeUnit.MILLIS,
            "app_version": APP_VERSION,
        }
        records = [SnapshotMarker(mark=SnapshotMark.BEGIN, **marker).encode()]
        self._commit_session_opens(log_position)
        records.append(
            ConsensusModuleSnapshot(
                next_session_id=self.log_next_session_id,
                next_service_session_id=self.next_service_session_ids[0] if self.ctx.service_count else 0,
                log_service_session_id=self.log_service_session_ids[0] if self.ctx.service_count else 0,
                pending_message_capacity=0,
            ).encode()
        )
        for s in sorted(self.sessions.values(), key=lambda x: x.cluster_session_id):
            records.append(
                ClusterSessionRecord(
                    cluster_session_id=s.cluster_session_id,
                    correlation_id=s.correlation_id,
                    opened_log_position=s.opened_log_position,
                    time_of_last_activity=NULL_VALUE,  # as Aeron writes it (PROTOCOL.md g)
                    close_reason=s.close_reason if s.state == ClusterSessionState.CLOSING else CloseReason.NULL_VAL,
                    response_stream_id=s.response_stream_id,
                    response_channel=s.response_channel,
                ).encode()
            )
        for correlation_id, deadline in self.timer_service.snapshot():
            records.append(TimerRecord(correlation_id=correlation_id, deadline=deadline).encode())
        for service_id, q in enumerate(self.pending_service_messages):
            records.append(
                PendingMessageTracker(
                    next_service_session_id=self.next_service_session_ids[service_id],
                    log_service_session_id=self.log_service_session_ids[service_id],
                    pending_message_capacity=0,
                    service_id=service_id,
                ).encode()
            )
            for m in q:
                records.append(encode_session_message(term, m.cluster_session_id, 0, m.payload))
        records.append(SnapshotMarker(mark=SnapshotMark.END, **marker).encode())
        recording_id = self.archive_store.snapshots.write_snapshot(
            records, term, log_position, SERVICE_ID_CONSENSUS_MODULE
        )
        base = self.term_base_of(term)
        timestamp = self.cluster_time_ms(now_ns)
        for service_id in range(len(service_recording_ids) - 1, -1, -1):
            self.recording_log.append_snapshot(
                service_recording_ids[service_id], term, base, log_position, timestamp, service_id
            )
        self.recording_log.append_snapshot(
            recording_id, term, base, log_position, timestamp, SERVICE_ID_CONSENSUS_MODULE
        )
        self.snapshot_count += 1
        self._event(
            "snapshot", {"recording_id": recording_id, "services": service_recording_ids}, term=term, pos=log_position
        )

    def load_snapshot(self: ConsensusModule, recording_id: int) -> int:
        """Restore sessions, timers, ids and pending service messages; returns the snapshot's position."""
        from clusterlab.core.codec.registry import decode

        position = NULL_POSITION
        service_id = -1
        for raw in self.archive_store.snapshots.read_snapshot(recording_id):
            msg = decode(raw)
            if isinstance(msg, SnapshotMarker):
                if msg.type_id != SnapshotTypeId.CONSENSUS_MODULE or (msg.app_version >> 16) != (APP_VERSION >> 16):
                    raise ValueError(f"snapshot {recording_id} is not a compatible consensus-module snapshot")
                position = msg.log_position
                self.leadership_term_id = max(self.leadership_term_id, msg.leadership_term_id)
            elif isinstance(msg, ConsensusModuleSnapshot):
                self.next_session_id = msg.next_session_id
                self.log_next_session_id = msg.next_session_id
            elif isinstance(msg, ClusterSessionRecord):
                closing = msg.close_reason not in (None, CloseReason.NULL_VAL)
                self.sessions[msg.cluster_session_id] = ClusterSession(
                    cluster_session_id=msg.cluster_session_id,
                    response_stream_id=msg.response_stream_id,
                    response_channel=msg.response_channel,
                    correlation_id=msg.correlation_id,
                    state=ClusterSessionState.CLOSING if closing else ClusterSessionState.OPEN,
                    opened_log_position=msg.opened_log_position,
                    close_reason=msg.close_reason if closing else None,
                )
            elif isinstance(msg, TimerRecord):
                self.timer_service.schedule_timer(msg.correlation_id, msg.deadline)
            elif isinstance(msg, PendingMessageTracker):
                service_id = msg.service_id
                if 0 <= service_id < self.ctx.service_count:
                    self.next_service_session_ids[service_id] = msg.next_service_session_id
                    self.log_service_session_ids[service_id] = msg.log_service_session_id
            elif isinstance(msg, SessionMessageHeader) and 0 <= service_id < self.ctx.service_count:
                self.pending_service_messages[service_id].append(
                    PendingServiceMessage(msg.cluster_session_id, msg.payload)
                )
        return position

    # ------------------------------------------------------------------ termination
    def termination_work(self: ConsensusModule, now_ns: int) -> int:
        """Drive an orderly SHUTDOWN/ABORT once the termination position is reached (e.8)."""
        if self.termination_position == NULL_POSITION or self.terminated:
            return 0
        if (
            self.role == Role.FOLLOWER
            and self.state
            not in (
                ConsensusModuleState.TERMINATING,
                ConsensusModuleState.SNAPSHOT,
            )
            and self.consumed_position >= self.termination_position
        ):
            self.state = ConsensusModuleState.TERMINATING
        if self.state != ConsensusModuleState.TERMINATING:
            return 0
        if not self.service_termination_sent:
            self.service_termination_sent = True
            self._to_service(ServiceTerminationPosition(log_position=self.termination_position).encode())
        if not self.services_terminated:
            if self.ctx.service_count and self._service_acks_at(self.termination_position) is None:
                return 0
            self.services_terminated = True  # latched: the acks are consumed from the queue
        if self.role == Role.LEADER:
            followers = {s.member_id for s in self.statuses if s.member_id != self.member_id}
            if not followers <= self.terminated_followers and now_ns < self.termination_deadline_ns:
                # Consensus messages may be lost: resend until each follower acks (or the deadline).
                if now_ns >= self.time_of_last_termination_send_ns + self.ctx.timeouts.leader_heartbeat_interval_ns:
                    self.time_of_last_termination_send_ns = now_ns
                    for member_id in followers - self.terminated_followers:
                        self.consensus_publisher.termination_position(
                            member_id, self.leadership_term_id, self.termination_position
                        )
                return 0
        else:
            self.consensus_publisher.termination_ack(
                self.leader_member_id, self.leadership_term_id, self.termination_position, self.member_id
            )
        self.recording_log.commit_log_position(self.leadership_term_id, self.termination_position)
        self.terminated = True
        self.terminated_reason = "expected termination"
        self.state = ConsensusModuleState.CLOSED
        self._event("stop", {"reason": "termination"}, term=self.leadership_term_id, pos=self.termination_position)
        return 1
