"""Client sessions: ingress from clients, egress to them, authentication and session timeouts.

Aeron's ``IngressAdapter`` handlers, ``EgressPublisher`` and the session parts of
``ConsensusModuleAgent`` (pending sessions, ``checkSessions``, ``SessionProxy``). The leader opens
and closes sessions by appending SessionOpenEvent / SessionCloseEvent; every member learns them
from the committed log (``on_log_*``). Handlers validate, ``ignore(reason)`` what they drop, then act.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.codec.enums import CloseReason, EventCode
from clusterlab.core.codec.log_events import SessionCloseEvent, SessionOpenEvent
from clusterlab.core.codec.session import (
    SESSION_HEADER_LENGTH,
    SESSION_TIMESTAMP,
    SESSION_TIMESTAMP_OFFSET,
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
)
from clusterlab.core.consensus.authenticator import DefaultAuthenticator
from clusterlab.core.consensus.context import (
    CLIENT_PROTOCOL_VERSION,
    NULL_VALUE,
    ConsensusModuleContext,
    ConsensusModuleState,
    Role,
)
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.sessions import SESSION_LIMIT, ClusterSession, ClusterSessionState

MAX_HELD_INGRESS = 10_000  # ingress messages held while SUSPENDED/SNAPSHOT


class _SessionProxy:
    """What the authenticator may do to one pending session (Aeron ``SessionProxy``)."""

    def __init__(self, sessions: ClientSessions, session: ClusterSession, now_ns: int) -> None:
        self._sessions = sessions
        self._session = session
        self._now_ns = now_ns

    @property
    def cluster_session_id(self) -> int:
        return self._session.cluster_session_id

    def challenge(self, encoded_challenge: bytes) -> bool:
        s = self._session
        s.state = ClusterSessionState.CHALLENGED
        s.encoded_challenge = encoded_challenge
        self._sessions.send_egress(
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


class ClientSessions:
    """The client sessions of one member (see module docstring)."""

    def __init__(self, state: ModuleState, ctx: ConsensusModuleContext, archive: RecordingStore) -> None:
        self._s = state
        self._archive = archive
        self._outbox = ctx.outbox
        self._members = ctx.members
        self._session_timeout_ns = ctx.timeouts.session_timeout_ns
        self._max_concurrent_sessions = ctx.max_concurrent_sessions
        self.authenticator = ctx.authenticator if ctx.authenticator is not None else DefaultAuthenticator()
        self.sessions: dict[int, ClusterSession] = {}
        self.pending_sessions: list[ClusterSession] = []
        # A connect request or a challenge response taken since the last pass over pending sessions: the
        # leader's next duty cycle is due at once (it answers in that pass).
        self.has_pending_input = False
        self.next_session_id = 1
        # The next session id as the committed log has it (what the snapshot holds, the same on every
        # member); next_session_id runs ahead on the leader, which also numbers rejected connects.
        self.log_next_session_id = 1
        self.appended_session_opens: deque[tuple[int, int]] = deque()  # leader: (end position, session id)
        self.uncommitted_closed_sessions: deque[tuple[int, ClusterSession]] = deque()
        self.held_ingress: list[SessionMessageHeader] = []
        self.timed_out_client_count = 0

    # ------------------------------------------------------------------ egress
    def send_egress(self, response_channel: str, payload: bytes) -> None:
        self._outbox.send_egress(response_channel, payload)

    def session_event(self, s: ClusterSession, code: EventCode, detail: str, leader_id: int | None = None) -> None:
        st = self._s
        self.send_egress(
            s.response_channel,
            SessionEvent(
                cluster_session_id=s.cluster_session_id,
                correlation_id=s.correlation_id,
                leadership_term_id=st.leadership_term_id,
                leader_member_id=st.leader_member_id if leader_id is None else leader_id,
                code=code,
                version=CLIENT_PROTOCOL_VERSION,
                detail=detail,
            ).encode(),
        )

    def ingress_endpoints(self) -> str:
        """``id=endpoint,id=endpoint`` as REDIRECT and NewLeaderEvent carry it."""
        return ",".join(f"{m.member_id}={m.ingress_endpoint}" for m in self._members)

    def open_session(self, cluster_session_id: int, leadership_term_id: int) -> ClusterSession | None:
        """The OPEN session ``cluster_session_id`` if the request is of this term, else None."""
        s = self.sessions.get(cluster_session_id)
        if s is None or s.state != ClusterSessionState.OPEN or leadership_term_id != self._s.leadership_term_id:
            return None
        return s

    # ------------------------------------------------------------------ leader appends
    def _append(self, payload: bytes) -> int:
        return self._archive.append_entry(payload, self._s.leadership_term_id)

    def append_session_close(self, s: ClusterSession, now_ns: int) -> int:
        reason = s.close_reason if s.close_reason is not None else CloseReason.CLIENT_ACTION
        end = self._append(
            SessionCloseEvent(
                leadership_term_id=self._s.leadership_term_id,
                cluster_session_id=s.cluster_session_id,
                timestamp=self._s.cluster_time_ms(now_ns),
                close_reason=reason,
            ).encode()
        )
        s.state = ClusterSessionState.CLOSED
        self.sessions.pop(s.cluster_session_id, None)
        self.uncommitted_closed_sessions.append((end, s))
        return end

    # ------------------------------------------------------------------ ingress (client -> leader)
    def on_ingress_batch(self, payloads: list[bytes], now_ns: int, dispatch: Callable[[bytes], None]) -> None:
        """Several ingress messages in arrival order (one batched ZeroMQ message from a client).

        The session messages an ACTIVE leader takes are framed and appended together, in order,
        with one write (log batching); anything else goes to ``dispatch`` where it stands, after the
        session messages before it were appended."""
        st = self._s
        taken: list[bytes] = []
        timestamp = b""  # the cluster time stamped on this batch's session messages, packed once
        for payload in payloads:
            fields = (
                session_message_fields(payload)
                if st.election is None and st.role == Role.LEADER and st.state == ConsensusModuleState.ACTIVE
                else None
            )
            if fields is not None:
                term, session_id, _ = fields
                if term != st.leadership_term_id:
                    st.ignore("SessionMessageHeader", "stale leadership term")
                    continue
                s = self.sessions.get(session_id)
                if s is None or s.state != ClusterSessionState.OPEN:
                    st.ignore("SessionMessageHeader", f"session {session_id} not open")
                    continue
                if not timestamp:
                    timestamp = SESSION_TIMESTAMP.pack(st.cluster_time_ms(now_ns))
                # The client's message with the leader's timestamp (encode_session_message's bytes).
                taken.append(b"".join((payload[:SESSION_TIMESTAMP_OFFSET], timestamp, payload[SESSION_HEADER_LENGTH:])))
                s.time_of_last_activity_ns = now_ns
                continue
            if taken:
                self._archive.append_entries(taken, st.leadership_term_id)
                taken = []
            dispatch(payload)
        if taken:
            self._archive.append_entries(taken, st.leadership_term_id)

    def on_session_connect_request(self, msg: SessionConnectRequest, now_ns: int) -> None:
        s = ClusterSession(
            cluster_session_id=NULL_VALUE,
            response_stream_id=msg.response_stream_id,
            response_channel=msg.response_channel,
            correlation_id=msg.correlation_id,
            time_of_last_activity_ns=now_ns,
        )
        if self._s.role != Role.LEADER:
            self.session_event(s, EventCode.REDIRECT, self.ingress_endpoints())
            return
        if (msg.version >> 16) != (CLIENT_PROTOCOL_VERSION >> 16):
            self.session_event(s, EventCode.ERROR, f"invalid client version {msg.version}")
            return
        if len(self.pending_sessions) + len(self.sessions) >= self._max_concurrent_sessions:
            self.session_event(s, EventCode.ERROR, SESSION_LIMIT)
            return
        s.cluster_session_id = self.next_session_id
        self.next_session_id += 1
        s.state = ClusterSessionState.CONNECTED
        self.authenticator.on_connect_request(
            s.cluster_session_id, msg.encoded_credentials, self._s.cluster_time_ms(now_ns)
        )
        self.pending_sessions.append(s)
        self.has_pending_input = True

    def on_ingress_message(self, msg: SessionMessageHeader, now_ns: int) -> None:
        st = self._s
        if msg.leadership_term_id != st.leadership_term_id:
            st.ignore("SessionMessageHeader", "stale leadership term")  # clients adopt NewLeaderEvent's term
            return
        s = self.sessions.get(msg.cluster_session_id)
        if s is None or s.state != ClusterSessionState.OPEN:
            st.ignore("SessionMessageHeader", f"session {msg.cluster_session_id} not open")
            return
        if st.state != ConsensusModuleState.ACTIVE:
            # Aeron stops polling ingress while not ACTIVE, so messages wait; we hold them (bounded).
            if len(self.held_ingress) < MAX_HELD_INGRESS:
                self.held_ingress.append(msg)
            else:
                st.ignore("SessionMessageHeader", f"module {st.state.name}, ingress hold full")
            return
        self._append(
            encode_session_message(
                st.leadership_term_id, msg.cluster_session_id, st.cluster_time_ms(now_ns), msg.payload
            )
        )
        s.time_of_last_activity_ns = now_ns

    def release_held_ingress(self, now_ns: int) -> None:
        """Back to ACTIVE: append what arrived while SUSPENDED or snapshotting, in arrival order."""
        held, self.held_ingress = self.held_ingress, []
        for msg in held:
            self.on_ingress_message(msg, now_ns)

    def on_session_keep_alive(self, msg: SessionKeepAlive, now_ns: int) -> None:
        s = self.open_session(msg.cluster_session_id, msg.leadership_term_id)
        if s is None:
            self._s.ignore("SessionKeepAlive", f"session {msg.cluster_session_id} not open in this term")
            return
        s.time_of_last_activity_ns = now_ns

    def on_session_close_request(self, msg: SessionCloseRequest, now_ns: int) -> None:
        s = self.open_session(msg.cluster_session_id, msg.leadership_term_id)
        if s is None:
            self._s.ignore("SessionCloseRequest", f"session {msg.cluster_session_id} not open in this term")
            return
        s.closing(CloseReason.CLIENT_ACTION)
        if self._s.state == ConsensusModuleState.ACTIVE:
            self.append_session_close(s, now_ns)
        # Else (a snapshot or a suspension is under way) the close waits for check_sessions, which runs when
        # ACTIVE again, as Aeron takes no ingress then: a SessionClose appended past a pending snapshot's
        # position would leave the snapshot without a session the log still has open.

    def on_challenge_response(self, msg: ChallengeResponse, now_ns: int) -> None:
        for s in self.pending_sessions:
            if s.cluster_session_id == msg.cluster_session_id and s.state == ClusterSessionState.CHALLENGED:
                s.time_of_last_activity_ns = now_ns
                s.correlation_id = msg.correlation_id  # later replies answer the response (as Aeron)
                self.has_pending_input = True
                self.authenticator.on_challenge_response(
                    s.cluster_session_id, msg.encoded_credentials, self._s.cluster_time_ms(now_ns)
                )

    def on_service_close_session(self, cluster_session_id: int, now_ns: int) -> None:
        """The service closes a session (CloseSession); the leader appends the close at once."""
        st = self._s
        s = self.sessions.get(cluster_session_id)
        if s is None or s.state != ClusterSessionState.OPEN:
            st.ignore("CloseSession", f"session {cluster_session_id} not open")
            return
        s.closing(CloseReason.SERVICE_ACTION)
        if st.role == Role.LEADER and st.election is None and st.state == ConsensusModuleState.ACTIVE:
            self.append_session_close(s, now_ns)
            self.session_event(s, EventCode.CLOSED, CloseReason.SERVICE_ACTION.name)

    # ------------------------------------------------------------------ leader duty cycle
    def process_pending_sessions(self, now_ns: int) -> int:
        st = self._s
        work = 0
        now_ms = st.cluster_time_ms(now_ns)
        self.has_pending_input = False
        for s in list(self.pending_sessions):
            proxy = _SessionProxy(self, s, now_ns)
            if s.state == ClusterSessionState.CONNECTED:
                self.authenticator.on_connected_session(proxy, now_ms)
            elif s.state == ClusterSessionState.CHALLENGED:
                self.authenticator.on_challenged_session(proxy, now_ms)
            if s.state == ClusterSessionState.AUTHENTICATED:
                end = self._append(
                    SessionOpenEvent(
                        leadership_term_id=st.leadership_term_id,
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
                self.session_event(s, EventCode.OK, "")
                work += 1
            elif s.state == ClusterSessionState.REJECTED:
                self.session_event(s, EventCode.AUTHENTICATION_REJECTED, "authentication rejected")
                self.pending_sessions.remove(s)
                work += 1
            elif now_ns > s.time_of_last_activity_ns + self._session_timeout_ns:
                self.session_event(s, EventCode.ERROR, "session timed out before it opened")
                self.pending_sessions.remove(s)
                work += 1
        return work

    def check_sessions(self, now_ns: int) -> int:
        """Aeron ``checkSessions``: time out idle sessions, append closes, send NewLeaderEvents."""
        work = 0
        timeout = self._session_timeout_ns
        for s in list(self.sessions.values()):
            if s.state == ClusterSessionState.OPEN and now_ns > s.time_of_last_activity_ns + timeout:
                s.closing(CloseReason.TIMEOUT)
                self.timed_out_client_count += 1
            if s.state == ClusterSessionState.CLOSING:
                reason = s.close_reason if s.close_reason is not None else CloseReason.CLIENT_ACTION
                self.append_session_close(s, now_ns)
                self.session_event(s, EventCode.CLOSED, reason.name)
                work += 1
            elif s.has_new_leader_event_pending:
                s.has_new_leader_event_pending = False
                self.send_egress(
                    s.response_channel,
                    NewLeaderEvent(
                        leadership_term_id=self._s.leadership_term_id,
                        cluster_session_id=s.cluster_session_id,
                        leader_member_id=self._s.member_id,
                        ingress_endpoints=self.ingress_endpoints(),
                    ).encode(),
                )
                work += 1
        return work

    def on_leader_election_complete(self, is_startup: bool, now_ns: int) -> None:
        """Leader side of e.9: keep sessions (NewLeaderEvent) or, after a whole-cluster restart, close them."""
        for s in list(self.sessions.values()):
            if s.state != ClusterSessionState.OPEN:
                continue
            if is_startup:
                s.closing(CloseReason.TIMEOUT)
            else:
                s.time_of_last_activity_ns = now_ns
                s.has_new_leader_event_pending = True

    def refresh_activity(self, now_ns: int) -> None:
        """A pause every client waits through (a snapshot) must not time it out."""
        for s in self.sessions.values():
            s.time_of_last_activity_ns = now_ns

    # ------------------------------------------------------------------ committed log
    def on_log_session_message(self, cluster_session_id: int, now_ns: int) -> None:
        s = self.sessions.get(cluster_session_id)
        if s is not None:
            s.time_of_last_activity_ns = now_ns

    def on_log_session_open(self, payload: bytes, end_position: int, now_ns: int) -> None:
        ev = SessionOpenEvent.decode(payload)
        self.sessions[ev.cluster_session_id] = ClusterSession(
            cluster_session_id=ev.cluster_session_id,
            response_stream_id=ev.response_stream_id,
            response_channel=ev.response_channel,
            correlation_id=ev.correlation_id,
            state=ClusterSessionState.OPEN,
            encoded_principal=ev.encoded_principal,
            time_of_last_activity_ns=now_ns,
            opened_log_position=end_position,
        )
        self.next_session_id = max(self.next_session_id, ev.cluster_session_id + 1)
        self.log_next_session_id = max(self.log_next_session_id, ev.cluster_session_id + 1)

    def on_log_session_close(self, payload: bytes, end_position: int) -> None:
        """A follower (or a replay): the session a SessionClose in the log names is closed."""
        cluster_session_id = SessionCloseEvent.decode(payload).cluster_session_id
        self._s.rules.on_log_session_close(self.sessions, cluster_session_id)
        self.trace_session_close(cluster_session_id, end_position)

    def trace_session_close(self, cluster_session_id: int, end_position: int) -> None:
        """The ``session_close`` event of a SessionClose the module consumed (the leader closed the
        session when it appended it): whether the session is still open, which it never is unless a
        bug keeps it. The trace check ``sessions_close_everywhere`` reads it."""
        still_open = cluster_session_id in self.sessions
        self._s.event("session_close", {"cluster_session_id": cluster_session_id, "open": still_open}, pos=end_position)

    def commit_session_opens(self, log_position: int) -> None:
        """Leader: fold the session opens appended up to ``log_position`` into log_next_session_id."""
        opens = self.appended_session_opens
        while opens and opens[0][0] <= log_position:
            self.log_next_session_id = max(self.log_next_session_id, opens.popleft()[1] + 1)

    def sweep_uncommitted(self, commit_position: int) -> None:
        self.commit_session_opens(commit_position)
        while self.uncommitted_closed_sessions and self.uncommitted_closed_sessions[0][0] <= commit_position:
            self.uncommitted_closed_sessions.popleft()

    def restore_uncommitted(self, log_position: int) -> None:
        """Undo opens and closes appended after ``log_position``; drop pending sessions and held ingress."""
        self.commit_session_opens(log_position)
        self.appended_session_opens.clear()  # opens past log_position are lost (or learned again)
        for session in list(self.sessions.values()):
            if session.opened_log_position > log_position:
                self.session_event(session, EventCode.CLOSED, "election")
                del self.sessions[session.cluster_session_id]
        for session in self.pending_sessions:
            self.session_event(session, EventCode.CLOSED, "election")
        self.pending_sessions.clear()
        self.has_pending_input = False
        for position, session in self.uncommitted_closed_sessions:
            if position > log_position:
                session.state = ClusterSessionState.CLOSING
                self.sessions[session.cluster_session_id] = session
        self.uncommitted_closed_sessions.clear()
        self.held_ingress.clear()  # never appended: the clients see no reply (outcome unknown) and retry

    # ------------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Session ids unique and below the next id (the committed one not above it); appended opens
        in log order; pending sessions are not open ones."""
        mid = self._s.member_id
        for sid, s in self.sessions.items():
            assert s.cluster_session_id == sid, f"member {mid}: session {s.cluster_session_id} filed under {sid}"
            assert 0 < sid < self.next_session_id, (
                f"member {mid}: session id {sid} not below next {self.next_session_id}"
            )
        assert self.log_next_session_id <= self.next_session_id, (
            f"member {mid}: committed next session id {self.log_next_session_id} above {self.next_session_id}"
        )
        last = 0
        for position, sid in self.appended_session_opens:
            assert position >= last, f"member {mid}: appended session opens out of log order"
            assert sid < self.next_session_id, f"member {mid}: appended open {sid} not below {self.next_session_id}"
            last = position
        if self.pending_sessions:
            pending_ids = [s.cluster_session_id for s in self.pending_sessions]
            assert len(set(pending_ids)) == len(pending_ids), f"member {mid}: duplicate pending ids {pending_ids}"
            assert not set(pending_ids) & self.sessions.keys(), f"member {mid}: a pending session id is also open"
