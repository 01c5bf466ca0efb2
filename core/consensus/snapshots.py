"""The consensus module's snapshots (PROTOCOL.md c.10-c.12): taking one at a SNAPSHOT action once
every service acked it, and loading the latest on recovery. Aeron's ``ConsensusModuleSnapshotTaker``
/ ``ConsensusModuleSnapshotLoader`` and the snapshot parts of ``ConsensusModuleAgent``."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from clusterlab.core.archive.archive import Archive
from clusterlab.core.codec.enums import CloseReason, ClusterTimeUnit, SnapshotMark, SnapshotTypeId
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.session import SessionMessageHeader, encode_session_message
from clusterlab.core.codec.snapshot import ClusterSession as ClusterSessionRecord
from clusterlab.core.codec.snapshot import ConsensusModuleSnapshot, PendingMessageTracker, SnapshotMarker
from clusterlab.core.codec.snapshot import Timer as TimerRecord
from clusterlab.core.consensus.client_sessions import ClientSessions
from clusterlab.core.consensus.context import (
    APP_VERSION,
    NULL_POSITION,
    NULL_VALUE,
    SERVICE_ID_CONSENSUS_MODULE,
    ConsensusModuleState,
    Role,
)
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.consensus.service_link import PendingServiceMessage, ServiceLink
from clusterlab.core.consensus.sessions import ClusterSession, ClusterSessionState
from clusterlab.core.consensus.termination import Termination


class Snapshots:
    """Snapshot taking and loading for one member."""

    def __init__(
        self,
        state: ModuleState,
        archive_store: Archive,
        recording_log: RecordingLog,
        sessions: ClientSessions,
        services: ServiceLink,
        termination: Termination,
        on_resumed: Callable[[int], None],
    ) -> None:
        self._s = state
        self._archive_store = archive_store
        self._recording_log = recording_log
        self._sessions = sessions
        self._services = services
        self._termination = termination
        self._on_resumed = on_resumed  # a leader back to ACTIVE after its snapshot (cluster control)
        self.snapshot_position = NULL_POSITION
        self.snapshot_leadership_term_id = NULL_VALUE
        self.snapshot_count = 0
        # Aeron's totalSnapshotDurationTracker: from the SNAPSHOT state to the snapshot written.
        self.snapshot_started_ns = NULL_VALUE
        self.last_snapshot_duration_ns = 0
        self.max_snapshot_duration_ns = 0

    def begin(self, position: int, leadership_term_id: int) -> None:
        """A SNAPSHOT action at ``position`` (appended by us, or met in the log): snapshot there."""
        self.snapshot_position = position
        self.snapshot_leadership_term_id = leadership_term_id

    def work(self, now_ns: int) -> int:
        """In SNAPSHOT: once every service acked at the action's position, write the module's snapshot."""
        st = self._s
        if st.state != ConsensusModuleState.SNAPSHOT:
            return 0
        if self.snapshot_started_ns == NULL_VALUE:
            self.snapshot_started_ns = now_ns
        if st.consumed_position < self.snapshot_position:
            return 0
        services = self._services
        acks = services.service_acks_at(self.snapshot_position) if services.service_count else []
        if acks is None:
            return 0
        if any(a.relevant_id == NULL_VALUE for a in acks):
            st.error("snapshot", "a service failed to snapshot", pos=self.snapshot_position)
        else:
            self.take_snapshot(self.snapshot_position, [a.relevant_id for a in acks], now_ns)
            self.last_snapshot_duration_ns = now_ns - self.snapshot_started_ns
            self.max_snapshot_duration_ns = max(self.max_snapshot_duration_ns, self.last_snapshot_duration_ns)
        self.snapshot_started_ns = NULL_VALUE
        self._sessions.refresh_activity(now_ns)  # a snapshot pause must not time out clients
        termination = self._termination.termination_position
        if termination != NULL_POSITION and self.snapshot_position >= termination:
            st.state = ConsensusModuleState.TERMINATING  # SHUTDOWN: snapshot first, then stop
        else:
            st.state = ConsensusModuleState.ACTIVE
            if st.role == Role.LEADER:
                self._on_resumed(now_ns)
        self.snapshot_position = NULL_POSITION
        return 1

    def take_snapshot(self, log_position: int, service_recording_ids: list[int], now_ns: int) -> None:
        """Write the module's snapshot (c.12) and the SNAPSHOT entries (services, then the module)."""
        st = self._s
        log_position = st.rules.snapshot_position(log_position, self._archive_store.recording.stop_position)
        term = self.snapshot_leadership_term_id
        records = self._snapshot_state(log_position, term)
        recording_id = self._archive_store.snapshots.write_snapshot(
            records, term, log_position, SERVICE_ID_CONSENSUS_MODULE
        )
        entry = self._recording_log.find_term_entry(term)
        base = entry.term_base_log_position if entry is not None else 0
        timestamp = st.cluster_time_ms(now_ns)
        for service_id in range(len(service_recording_ids) - 1, -1, -1):
            self._recording_log.append_snapshot(
                service_recording_ids[service_id], term, base, log_position, timestamp, service_id
            )
        self._recording_log.append_snapshot(
            recording_id, term, base, log_position, timestamp, SERVICE_ID_CONSENSUS_MODULE
        )
        self.snapshot_count += 1
        st.event(
            "snapshot",
            {"recording_id": recording_id, "services": service_recording_ids, "module_state": self.module_state()},
            term=term,
            pos=log_position,
        )

    def _snapshot_state(self, log_position: int, term: int) -> list[bytes]:
        """Aeron's ``snapshotState``: the snapshot's records between its BEGIN and END markers: the
        module's state, the sessions, the timers and each service's pending messages."""
        services = self._services
        service_count = services.service_count
        marker: dict[str, Any] = {
            "type_id": int(SnapshotTypeId.CONSENSUS_MODULE),
            "log_position": log_position,
            "leadership_term_id": term,
            "index": 0,
            "time_unit": ClusterTimeUnit.MILLIS,
            "app_version": APP_VERSION,
        }
        records = [SnapshotMarker(mark=SnapshotMark.BEGIN, **marker).encode()]
        # The committed next session id, the same on every member.
        self._sessions.commit_session_opens(log_position)
        records.append(
            ConsensusModuleSnapshot(
                next_session_id=self._sessions.log_next_session_id,
                next_service_session_id=services.next_service_session_ids[0] if service_count else 0,
                log_service_session_id=services.log_service_session_ids[0] if service_count else 0,
                pending_message_capacity=0,
            ).encode()
        )
        for s in sorted(self._sessions.sessions.values(), key=lambda x: x.cluster_session_id):
            records.append(self._snapshot_session(s))
        for correlation_id, deadline in self._s.rules.snapshot_timers(services.timer_service.snapshot()):
            records.append(TimerRecord(correlation_id=correlation_id, deadline=deadline).encode())
        for service_id, q in enumerate(services.pending_service_messages):
            records.append(
                PendingMessageTracker(
                    next_service_session_id=services.next_service_session_ids[service_id],
                    log_service_session_id=services.log_service_session_ids[service_id],
                    pending_message_capacity=0,
                    service_id=service_id,
                ).encode()
            )
            for m in q:
                records.append(encode_session_message(term, m.cluster_session_id, 0, m.payload))
        records.append(SnapshotMarker(mark=SnapshotMark.END, **marker).encode())
        return records

    @staticmethod
    def _snapshot_session(s: ClusterSession) -> bytes:
        """Aeron's ``snapshotSession``: one session's record."""
        return ClusterSessionRecord(
            cluster_session_id=s.cluster_session_id,
            correlation_id=s.correlation_id,
            opened_log_position=s.opened_log_position,
            time_of_last_activity=NULL_VALUE,  # as Aeron writes it (PROTOCOL.md g)
            close_reason=s.close_reason
            if s.state == ClusterSessionState.CLOSING and s.close_reason is not None
            else CloseReason.NULL_VAL,
            response_stream_id=s.response_stream_id,
            response_channel=s.response_channel,
        ).encode()

    def module_state(self) -> dict[str, Any]:
        """What a consensus-module snapshot holds, summarised for the trace: counts of sessions, timers
        and pending service messages, the sum and the sum of squares of the sessions' ids, and a CRC-32
        of all of it (sessions as a snapshot writes them). Taken from the live state when a snapshot is
        written and again once one is loaded, so a trace check can ask that a restore gives back what was
        taken, and that the sessions are those the committed log has open (the id sums are what SQL can
        recompute from the log: with the count they tell apart any two sets that differ in at most two
        ids each)."""
        services = self._services
        sessions = sorted(
            (
                s.cluster_session_id,
                s.correlation_id,
                s.state == ClusterSessionState.CLOSING and s.close_reason is not None,
            )
            for s in self._sessions.sessions.values()
        )
        timers = services.timer_service.snapshot()
        pending = [len(q) for q in services.pending_service_messages]
        text = repr((self._sessions.log_next_session_id, sessions, timers, pending))
        ids = [session[0] for session in sessions]
        return {
            "sessions": len(sessions),
            "session_id_sum": sum(ids),
            "session_id_square_sum": sum(i * i for i in ids),
            "timers": len(timers),
            "pending_messages": sum(pending),
            "crc": f"{zlib.crc32(text.encode()):08x}",
        }

    def load_snapshot(self, recording_id: int) -> int:
        """Restore sessions, timers, ids and pending service messages; returns the snapshot's position."""
        st = self._s
        sessions = self._sessions
        services = self._services
        position = NULL_POSITION
        service_id = -1
        for raw in self._archive_store.snapshots.read_snapshot(recording_id):
            msg = decode(raw)
            if isinstance(msg, SnapshotMarker):
                if msg.type_id != SnapshotTypeId.CONSENSUS_MODULE or (msg.app_version >> 16) != (APP_VERSION >> 16):
                    raise ValueError(f"snapshot {recording_id} is not a compatible consensus-module snapshot")
                position = msg.log_position
                st.restore_leadership_term_id(max(st.leadership_term_id, msg.leadership_term_id))
            elif isinstance(msg, ConsensusModuleSnapshot):
                sessions.next_session_id = msg.next_session_id
                sessions.log_next_session_id = msg.next_session_id
            elif isinstance(msg, ClusterSessionRecord):
                closing = msg.close_reason not in (None, CloseReason.NULL_VAL)
                sessions.sessions[msg.cluster_session_id] = ClusterSession(
                    cluster_session_id=msg.cluster_session_id,
                    response_stream_id=msg.response_stream_id,
                    response_channel=msg.response_channel,
                    correlation_id=msg.correlation_id,
                    state=ClusterSessionState.CLOSING if closing else ClusterSessionState.OPEN,
                    opened_log_position=msg.opened_log_position,
                    close_reason=msg.close_reason if closing else None,
                )
            elif isinstance(msg, TimerRecord):
                services.timer_service.schedule_timer(msg.correlation_id, msg.deadline)
            elif isinstance(msg, PendingMessageTracker):
                service_id = msg.service_id
                if 0 <= service_id < services.service_count:
                    services.next_service_session_ids[service_id] = msg.next_service_session_id
                    services.log_service_session_ids[service_id] = msg.log_service_session_id
            elif isinstance(msg, SessionMessageHeader) and 0 <= service_id < services.service_count:
                services.pending_service_messages[service_id].append(
                    PendingServiceMessage(msg.cluster_session_id, msg.payload)
                )
        return position

    def restore_uncommitted(self, log_position: int) -> None:
        """Our own SNAPSHOT/SHUTDOWN action was never committed: stop waiting for it. If the next
        leader's log has it after all, we meet it again as a follower and snapshot then. The module
        state goes back with the other uncommitted actions (ClusterControl.restore_uncommitted)."""
        if self.snapshot_position > log_position:
            self.snapshot_position = NULL_POSITION
            self.snapshot_started_ns = NULL_VALUE

    def check_invariants(self) -> None:
        """In SNAPSHOT there is a snapshot position, and the log adapter has not passed it."""
        st = self._s
        if st.state == ConsensusModuleState.SNAPSHOT:
            assert self.snapshot_position != NULL_POSITION, f"member {st.member_id}: SNAPSHOT without a position"
            assert st.consumed_position <= self.snapshot_position, (
                f"member {st.member_id}: consumed {st.consumed_position} past snapshot {self.snapshot_position}"
            )
