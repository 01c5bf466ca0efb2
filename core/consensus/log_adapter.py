"""The log adapter: processes committed log entries in order, live or replaying the local log.

Aeron's ``LogAdapter`` (and the replay of LEADER_REPLAY / FOLLOWER_REPLAY): it never runs past
commit, stops after a SNAPSHOT action until the snapshot is taken, hands each entry to the owning
subsystem (sessions, timers/service messages, cluster control, the term events) and forwards what
it consumed to the service.
"""

from __future__ import annotations

from collections.abc import Callable

from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.framing import Frame
from clusterlab.core.codec.header import HEADER_LENGTH
from clusterlab.core.codec.log_events import (
    ClusterActionRequest,
    NewLeadershipTermEvent,
    SessionCloseEvent,
    SessionOpenEvent,
    TimerEvent,
)
from clusterlab.core.codec.registry import peek_template_id
from clusterlab.core.codec.session import SessionMessageHeader, session_message_fields, session_message_ids
from clusterlab.core.consensus.client_sessions import ClientSessions
from clusterlab.core.consensus.cluster_control import ClusterControl
from clusterlab.core.consensus.context import NULL_POSITION, ConsensusModuleState, Role
from clusterlab.core.consensus.module_state import MAX_LONG, ModuleState
from clusterlab.core.consensus.service_link import ServiceLink
from clusterlab.core.consensus.snapshots import Snapshots

LOG_CONSUME_LIMIT_BYTES = 256 * 1024  # per duty cycle, so one cycle never stalls on a long log

LogListener = Callable[[Frame, bool], None]  # (entry, is_replay) in log order, only up to commit
TermEventHandler = Callable[[NewLeadershipTermEvent, int], None]  # (event, now_ns)


class LogAdapter:
    """Consumes one member's committed log (see module docstring)."""

    def __init__(
        self,
        state: ModuleState,
        archive: RecordingStore,
        sessions: ClientSessions,
        services: ServiceLink,
        control: ClusterControl,
        snapshots: Snapshots,
        on_term_event: TermEventHandler,
    ) -> None:
        self._s = state
        self._archive = archive
        self._sessions = sessions
        self._services = services
        self._control = control
        self._snapshots = snapshots
        self._on_term_event = on_term_event
        self.log_listeners: list[LogListener] = []
        self.replay_stop_position = NULL_POSITION  # local replay (LEADER_REPLAY / FOLLOWER_REPLAY)

    def consumable_limit(self) -> int:
        """How far the adapter may go now: commit, the local log, and a pending snapshot bound it."""
        limit = min(self._s.commit_position, self._archive.stop_position)
        if self._s.state == ConsensusModuleState.SNAPSHOT:
            limit = min(limit, self._snapshots.snapshot_position)  # held until the snapshot completes
        return limit

    def consume(self, limit: int, *, is_replay: bool, now_ns: int) -> None:
        """Process entries in order up to ``limit`` (never past commit)."""
        st = self._s
        if st.state == ConsensusModuleState.SNAPSHOT:
            limit = min(limit, self._snapshots.snapshot_position)  # the adapter stops after an action until done
        limit = min(limit, self._archive.stop_position)
        if limit <= st.consumed_position:
            return
        frames = self._archive.read_frames(st.consumed_position, limit, max_bytes=LOG_CONSUME_LIMIT_BYTES)
        # A client's session message (most of the log) only refreshes its session's activity, and
        # only where entries are learned from the log: that case is handled inline, the rest by
        # on_log_entry (what it does for a session message is the same).
        learn = st.role != Role.LEADER or is_replay
        sessions = self._sessions.sessions
        listeners = self.log_listeners
        fields_of = session_message_fields
        consumed = 0
        if not learn:
            # The leader consuming its own log in term: only a NewLeadershipTermEvent and a SessionClose
            # (its trace event) do anything besides the listeners (on_log_entry), found by their
            # template ids (bytes 2-3 of the header).
            nlte_low, nlte_high = NewLeadershipTermEvent.TEMPLATE_ID & 0xFF, NewLeadershipTermEvent.TEMPLATE_ID >> 8
            close_low, close_high = SessionCloseEvent.TEMPLATE_ID & 0xFF, SessionCloseEvent.TEMPLATE_ID >> 8
            for f in frames:
                p = f.payload
                if (
                    len(p) < HEADER_LENGTH
                    or (p[2] == nlte_low and p[3] == nlte_high)
                    or (p[2] == close_low and p[3] == close_high)
                ):
                    more = self.on_log_entry(f, is_replay, now_ns)
                else:
                    for listener in listeners:
                        listener(f, is_replay)
                    more = True
                st.set_consumed_position(f.end_position)
                consumed += 1
                if not more:
                    break
            self._services.forward_to_service(frames[:consumed])
            return
        for f in frames:
            fields = fields_of(f.payload)
            if fields is not None and fields[1] >= 0:
                s = sessions.get(fields[1])
                if s is not None:
                    s.time_of_last_activity_ns = now_ns
                for listener in listeners:
                    listener(f, is_replay)
                more = True
            else:
                more = self.on_log_entry(f, is_replay, now_ns)
            st.set_consumed_position(f.end_position)
            consumed += 1
            if not more:
                break
        self._services.forward_to_service(frames[:consumed])

    def on_log_entry(self, frame: Frame, is_replay: bool, now_ns: int) -> bool:
        """One entry; False when consumption must pause after it (a snapshot action)."""
        template_id = peek_template_id(frame.payload)
        more = True
        if template_id == NewLeadershipTermEvent.TEMPLATE_ID:
            try:
                ev = NewLeadershipTermEvent.decode(frame.payload)
            except DecodeError as e:
                raise AssertionError(f"committed log entry at {frame.position} does not decode: {e}") from e
            self._on_term_event(ev, now_ns)
        elif self._s.role != Role.LEADER or is_replay:
            # The leader applied what it appended when it appended it; everyone else learns from the log.
            more = self.apply_log_entry(frame, template_id, now_ns)
        elif template_id == SessionCloseEvent.TEMPLATE_ID:
            cluster_session_id = SessionCloseEvent.decode(frame.payload).cluster_session_id
            self._sessions.trace_session_close(cluster_session_id, frame.end_position)
        for listener in self.log_listeners:
            listener(frame, is_replay)
        return more

    def apply_log_entry(self, frame: Frame, template_id: int, now_ns: int) -> bool:
        """What a follower's (or a replaying) module learns from one committed entry.

        Returns False when consumption must pause after this entry (a cluster action to handle)."""
        payload = frame.payload
        if template_id == SessionMessageHeader.TEMPLATE_ID:
            _term, cluster_session_id, _timestamp = session_message_ids(payload)
            if cluster_session_id < 0:
                self._services.on_log_service_message(cluster_session_id)
            else:
                self._sessions.on_log_session_message(cluster_session_id, now_ns)
        elif template_id == TimerEvent.TEMPLATE_ID:
            self._services.on_log_timer_event(payload, frame.end_position)
        elif template_id == SessionOpenEvent.TEMPLATE_ID:
            self._sessions.on_log_session_open(payload, frame.end_position, now_ns)
        elif template_id == SessionCloseEvent.TEMPLATE_ID:
            self._sessions.on_log_session_close(payload, frame.end_position)
        elif template_id == ClusterActionRequest.TEMPLATE_ID:
            return self._control.on_log_cluster_action(payload)
        return True

    # ------------------------------------------------------------------ local replay
    def start_log_replay(self, from_position: int, to_position: int, now_ns: int) -> None:
        """Replay the local log from the consumed position (LEADER_REPLAY / FOLLOWER_REPLAY)."""
        st = self._s
        # Safety choice (PROTOCOL.md g): a follower replays only what it knows is committed; the rest
        # is consumed later when the leader's CommitPosition covers it. A leader's whole log is
        # committed once a quorum holds it (LEADER_LOG_REPLICATION), so it replays all of it.
        stop = to_position if st.role == Role.LEADER else min(to_position, st.commit_position)
        self.replay_stop_position = stop
        if stop > st.consumed_position:
            # Replayed entries were answered when first applied: the service replays as a FOLLOWER
            # (Aeron), so a new leader sends no egress for them.
            self._services.send_join_log(st.consumed_position, stop, True, Role.FOLLOWER)

    def poll_log_replay(self, now_ns: int) -> int:
        st = self._s
        if self.replay_stop_position == NULL_POSITION:
            return 0
        before = st.consumed_position
        self.consume(self.replay_stop_position, is_replay=True, now_ns=now_ns)
        if st.role == Role.LEADER:
            st.advance_commit_position(st.consumed_position)
        return 1 if st.consumed_position > before else 0

    def replay_position(self) -> int:
        """Position the local replay has reached (>= its stop when done)."""
        if self.replay_stop_position == NULL_POSITION:
            return NULL_POSITION
        if self._s.consumed_position >= self.replay_stop_position:
            return MAX_LONG  # done: the election treats this as having reached append position
        return self._s.consumed_position

    def stop_log_replay(self) -> None:
        self.replay_stop_position = NULL_POSITION

    def check_invariants(self) -> None:
        """The adapter never runs past commit (a leader's replay raises commit with it)."""
        st = self._s
        assert st.consumed_position <= st.commit_position, (
            f"member {st.member_id}: log adapter at {st.consumed_position} past commit {st.commit_position}"
        )
