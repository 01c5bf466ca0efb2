"""The consensus module: one member's replicated-log state machine (Aeron ``ConsensusModuleAgent``).

Sans-IO: it is handed bytes (``on_message``) and time (``now_ns``), sends through publishers, and
touches the disk only through its archive, recording log and node-state file. The runtime and the
simulator call ``on_start``, ``on_message``, ``on_ingress_batch``, ``do_work`` and ``next_deadline_ns``.

A thin dispatcher over one object per concern (TigerBeetle's replica split, Aeron's agent and
adapters), each owning its state and receiving only what it needs:

- ``ModuleState`` (module_state.py): role, term, leader, commit/consumed positions — shared;
- ``LogReplication``: the term's log publication, LogBlocks, AppendPosition, quorum commit;
- ``Catchup`` and ``ArchiveReplication``: catching up in an election, replicating earlier terms;
- ``LogAdapter``: committed entries in order, live or replaying the local log;
- ``ClientSessions``: ingress, egress, authentication, session timeouts;
- ``ServiceLink``: timers, service offers and acks, the service proxy;
- ``Snapshots``, ``Termination``, ``ClusterControl``;
- ``Election`` (election.py), which reaches the module only through ``ElectionHost``.

Decode → dispatch to the owning subsystem's ``on_<message>``; ``do_work`` runs their duty-cycle
work. With ``ConsensusModuleContext.check_invariants`` every subsystem checks its invariants after
every input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clusterlab.core.archive.archive import Archive
from clusterlab.core.archive.layout import LOG_RECORDING_ID
from clusterlab.core.codec.consensus import (
    AppendPosition,
    CanvassPosition,
    CatchupPosition,
    CommitPosition,
    NewLeadershipTerm,
    RequestVote,
    StopCatchup,
    TerminationAck,
    TerminationPosition,
    Vote,
)
from clusterlab.core.codec.enums import AppendPositionFlags, ClusterTimeUnit, ToggleState
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.framing import framed_length
from clusterlab.core.codec.log_events import NewLeadershipTermEvent
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.service import (
    CancelTimer,
    CloseSession,
    ClusterMembersQuery,
    ScheduleTimer,
    ServiceAck,
)
from clusterlab.core.codec.session import (
    AdminRequest,
    ChallengeResponse,
    SessionCloseRequest,
    SessionConnectRequest,
    SessionKeepAlive,
    SessionMessageHeader,
    encode_session_message,
)
from clusterlab.core.codec.transport import ArchiveError, LogBlock, LogEndOfStream, ReplayBlock, ReplayRequest
from clusterlab.core.consensus.archive_replication import ArchiveReplication
from clusterlab.core.consensus.catchup import Catchup
from clusterlab.core.consensus.client_sessions import ClientSessions
from clusterlab.core.consensus.cluster_control import ClusterControl
from clusterlab.core.consensus.context import (
    APP_VERSION,
    NULL_POSITION,
    NULL_VALUE,
    PROTOCOL_VERSION,
    Channel,
    ConsensusModuleContext,
    ConsensusModuleState,
    ElectionState,
    Role,
)
from clusterlab.core.consensus.election import Election, ElectionError
from clusterlab.core.consensus.leadership_term import new_leadership_term
from clusterlab.core.consensus.log_adapter import LogAdapter, LogListener
from clusterlab.core.consensus.log_replication import LogReplication
from clusterlab.core.consensus.members import MemberStatus, has_active_quorum
from clusterlab.core.consensus.module_state import MAX_LONG, ModuleState
from clusterlab.core.consensus.node_state import NodeState
from clusterlab.core.consensus.publishers import ArchivePublisher, ConsensusPublisher, LogPublisher
from clusterlab.core.consensus.recording_log import EntryType, RecordingLog
from clusterlab.core.consensus.service_link import ServiceLink
from clusterlab.core.consensus.sessions import ClusterSession
from clusterlab.core.consensus.snapshots import Snapshots
from clusterlab.core.consensus.termination import Termination
from clusterlab.core.consensus.timers import TimerService

__all__ = ["ConsensusModule", "LogListener"]

Handler = Callable[["ConsensusModule", int, Any, int], None]


class ConsensusModule:
    """One member's consensus module. See module docstring."""

    def __init__(self, ctx: ConsensusModuleContext) -> None:
        ctx.timeouts.validate()
        self.ctx = ctx
        self.member_id = ctx.member_id
        self.s = ModuleState(ctx)
        self.check_invariants_enabled = ctx.check_invariants
        self.protocol_version = PROTOCOL_VERSION
        self.log_recording_id = LOG_RECORDING_ID
        ctx.cluster_dir.mkdir(parents=True, exist_ok=True)
        self.archive_store = Archive(ctx.cluster_dir, log=ctx.log)
        self.archive = self.archive_store.recording  # the log recording: append, read, truncate
        self.recording_log = RecordingLog.open(ctx.cluster_dir, log=ctx.log)
        self.node_state = NodeState.open(ctx.cluster_dir)
        self.consensus_publisher = ConsensusPublisher(ctx.outbox)
        self.log_publisher = LogPublisher(ctx.outbox)
        self.archive_publisher = ArchivePublisher(ctx.outbox)
        st = self.s
        self.catchup = Catchup(st, ctx.timeouts)
        self.replication = LogReplication(
            st,
            self.archive,
            ctx.timeouts,
            ctx.rng,
            self.log_publisher,
            self.consensus_publisher,
            self.catchup,
            ctx.fault_ack_before_append,
        )
        self.archive_replication = ArchiveReplication(
            st, self.archive, ctx.timeouts, self.archive_publisher, self.log_recording_id
        )
        self.services = ServiceLink(
            st, self.archive, ctx.outbox, ctx.service_count, ctx.members, lambda: self.replication.log_session_id
        )
        self.client_sessions = ClientSessions(st, ctx, self.archive)
        self.termination = Termination(st, ctx.timeouts, self.consensus_publisher, self.services, self.recording_log)
        self.snapshots = Snapshots(
            st,
            self.archive_store,
            self.recording_log,
            self.client_sessions,
            self.services,
            self.termination,
            on_resumed=lambda now_ns: self.control.resume_after_snapshot(now_ns),
        )
        self.control = ClusterControl(st, ctx, self.archive, self.client_sessions, self.snapshots, self.termination)
        self.log_adapter = LogAdapter(
            st, self.archive, self.client_sessions, self.services, self.control, self.snapshots, self._on_term_event
        )
        self.election_count = 0
        self._now_ns = 0

    # ------------------------------------------------------------------ state other layers read
    @property
    def role(self) -> Role:
        return self.s.role

    @role.setter
    def role(self, role: Role) -> None:
        self.s.role = role

    @property
    def state(self) -> ConsensusModuleState:
        return self.s.state

    @property
    def leadership_term_id(self) -> int:
        return self.s.leadership_term_id

    @property
    def leader_member_id(self) -> int:
        return self.s.leader_member_id

    @property
    def commit_position(self) -> int:
        return self.s.commit_position

    @commit_position.setter
    def commit_position(self, position: int) -> None:
        self.s.commit_position = position

    @property
    def consumed_position(self) -> int:
        return self.s.consumed_position

    @property
    def election(self) -> Election | None:
        return self.s.election

    @property
    def terminated(self) -> bool:
        return self.s.terminated

    @property
    def ignored(self) -> dict[str, int]:
        return self.s.ignored

    @property
    def statuses(self) -> list[MemberStatus]:
        return self.s.statuses

    @property
    def this_member(self) -> MemberStatus:
        return self.s.this_member

    def status(self, member_id: int) -> MemberStatus | None:
        return self.s.status(member_id)

    @property
    def time_of_last_leader_update_ns(self) -> int:
        return self.s.time_of_last_leader_update_ns

    @property
    def append_position(self) -> int:
        """How far this member's log is durably recorded locally (Aeron: recording position)."""
        return self.archive.stop_position

    @property
    def election_state(self) -> ElectionState | None:
        e = self.s.election
        return e.state if e is not None else None

    @property
    def log_session_id(self) -> int:
        return self.replication.log_session_id

    @property
    def is_catchup_stopped(self) -> bool:
        return self.catchup.is_catchup_stopped

    @is_catchup_stopped.setter
    def is_catchup_stopped(self, stopped: bool) -> None:
        self.catchup.is_catchup_stopped = stopped

    @property
    def sessions(self) -> dict[int, ClusterSession]:
        return self.client_sessions.sessions

    @property
    def pending_sessions(self) -> list[ClusterSession]:
        return self.client_sessions.pending_sessions

    @property
    def timed_out_client_count(self) -> int:
        return self.client_sessions.timed_out_client_count

    @property
    def timer_service(self) -> TimerService:
        return self.services.timer_service

    @property
    def pending_service_messages(self) -> Any:
        return self.services.pending_service_messages

    @property
    def snapshot_count(self) -> int:
        return self.snapshots.snapshot_count

    @property
    def termination_position(self) -> int:
        return self.termination.termination_position

    @property
    def terminated_reason(self) -> str:
        return self.termination.terminated_reason

    @property
    def toggle(self) -> ToggleState:
        return self.control.toggle

    @property
    def log_listeners(self) -> list[LogListener]:
        return self.log_adapter.log_listeners

    def toggle_control(self, target: ToggleState) -> bool:
        """ClusterControl compare-and-set (see ClusterControl.toggle_control)."""
        return self.control.toggle_control(target)

    def ingress_endpoints(self) -> str:
        """``id=endpoint,id=endpoint`` as REDIRECT and NewLeaderEvent carry it."""
        return self.client_sessions.ingress_endpoints()

    @staticmethod
    def cluster_time_ms(now_ns: int) -> int:
        """Cluster time (ClusterTimeUnit.MILLIS) for log timestamps."""
        return ModuleState.cluster_time_ms(now_ns)

    def describe(self) -> str:
        """One canonical line for status tables and logs."""
        st = self.s
        es = st.election.state.name if st.election else "-"
        return (
            f"ConsensusModule(member={self.member_id} role={st.role.name} state={st.state.name} "
            f"term={st.leadership_term_id} leader={st.leader_member_id} election={es} "
            f"append={self.append_position} commit={st.commit_position})"
        )

    def ignore(self, what: str, reason: str) -> None:
        """A peer's bad or stale message: counted and logged, never raised into the duty cycle."""
        self.s.ignore(what, reason)

    # ------------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Every subsystem's invariants (asserts); run after each input when enabled."""
        append = self.archive.stop_position
        self.s.check_invariants(append)
        self.replication.check_invariants()
        self.catchup.check_invariants()
        self.archive_replication.check_invariants()
        self.log_adapter.check_invariants()
        self.client_sessions.check_invariants()
        self.services.check_invariants()
        self.snapshots.check_invariants()
        self.termination.check_invariants()
        self.control.check_invariants()

    # ------------------------------------------------------------------ lifecycle
    def on_start(self, now_ns: int) -> None:
        """Recover from disk (recovery plan) and start the node-startup election."""
        self._now_ns = now_ns
        st = self.s
        # The recording log may describe more log than the archive holds (a torn tail repaired on
        # open, or a recording truncated while the member was down): make it describe what we have,
        # so we canvass with a true (log term, append position) and the leader walks us forward.
        # A snapshot beyond the end of the recorded log (the log behind it was lost) cannot anchor a
        # recovery: this member must refetch that log and replay it from the start (issue 4: "a follower
        # that lacks the snapshot's log replays from the start"). Invalidated here, before the service
        # process reads the recovery plan, so node and service agree.
        for entry in self.recording_log.entries():
            if entry.type == EntryType.SNAPSHOT and entry.is_valid and entry.log_position > self.archive.stop_position:
                self.recording_log.invalidate_entry(entry.leadership_term_id, entry.entry_index)
                st.event(
                    "snapshot_invalidated",
                    {
                        "recording_id": entry.recording_id,
                        "service_id": entry.service_id,
                        "reason": "log behind the snapshot is missing",
                    },
                    pos=entry.log_position,
                )
        last = self.recording_log.find_last_term()
        stop = self.archive.stop_position
        removed = []
        if last is not None and (
            last.term_base_log_position > stop or (last.log_position != NULL_POSITION and last.log_position > stop)
        ):
            removed = self.recording_log.truncate_terms_after(stop)
        if removed:
            st.event(
                "truncate",
                {"recording_log": [e.describe() for e in removed], "reason": "recording shorter than recording log"},
                pos=self.archive.stop_position,
            )
        plan = self.recording_log.create_recovery_plan(self.ctx.service_count, self.archive_store.recording_extent)
        if self.archive.repair is not None:
            r = self.archive.repair
            st.event(
                "truncate",
                {"repair": "torn tail", "from": r.from_position, "to": r.to_position, "reason": r.reason},
                pos=r.to_position,
            )
        st.leadership_term_id = plan.last_leadership_term_id
        st.commit_position = 0
        if plan.snapshots:
            # Recovery = latest valid snapshot + replay of the log after it (c.10). The service loads
            # its own snapshot from the same recovery plan (Aeron's RecoveryState counter).
            cm_snapshot = plan.snapshots[0]
            st.commit_position = self.snapshots.load_snapshot(cm_snapshot.recording_id)
            st.event(
                "snapshot_loaded",
                {"recording_id": cm_snapshot.recording_id},
                term=cm_snapshot.leadership_term_id,
                pos=st.commit_position,
            )
        st.consumed_position = st.commit_position
        st.notified_commit_position = st.commit_position
        st.state = ConsensusModuleState.ACTIVE
        st.event(
            "start",
            {"append_position": self.archive.stop_position, "last_leadership_term_id": plan.last_leadership_term_id},
        )
        self._enter_election(
            now_ns,
            is_node_startup=True,
            leadership_term_id=plan.last_leadership_term_id,
            term_base_log_position=plan.last_term_base_log_position,
            graceful_closed_leader_id=NULL_VALUE,
            reason="node startup",
        )
        self._after_input()

    def close(self) -> None:
        """Clean close: a leader tells followers its log ended (Aeron end-of-stream), files flushed."""
        st = self.s
        if st.role == Role.LEADER and st.election is None and not st.terminated:
            for s in st.followers():
                self.log_publisher.end_of_stream(
                    s.member_id, st.leadership_term_id, self.archive.stop_position, self.member_id
                )
        self.archive_store.close()
        self.recording_log.close()
        self.node_state.close()
        st.state = ConsensusModuleState.CLOSED

    def _after_input(self) -> None:
        if self.check_invariants_enabled:
            self.check_invariants()

    # ------------------------------------------------------------------ election plumbing
    def _enter_election(
        self,
        now_ns: int,
        *,
        is_node_startup: bool,
        leadership_term_id: int,
        term_base_log_position: int,
        graceful_closed_leader_id: int,
        reason: str,
    ) -> None:
        st = self.s
        assert st.election is None, "an election is already running"
        self.election_count += 1
        st.event(
            "election_start",
            {"reason": reason, "election_count": self.election_count},
            term=leadership_term_id,
            pos=st.commit_position,
        )
        st.role = Role.FOLLOWER
        st.election = Election(
            self,
            self.ctx,
            st.statuses,
            self.node_state,
            self.recording_log,
            self.consensus_publisher,
            is_node_startup=is_node_startup,
            leadership_term_id=leadership_term_id,
            term_base_log_position=term_base_log_position,
            log_position=st.commit_position,
            append_position=self.archive.stop_position,
            graceful_closed_leader_id=graceful_closed_leader_id,
            now_ns=now_ns,
        )

    def enter_election(self, now_ns: int, reason: str, graceful_closed_leader_id: int = NULL_VALUE) -> None:
        """Aeron ``enterElection``: leave steady state and elect (heartbeat timeout, higher term …)."""
        st = self.s
        if st.election is not None or st.terminated:
            return
        self._enter_election(
            now_ns,
            is_node_startup=False,
            leadership_term_id=st.leadership_term_id,
            term_base_log_position=self.term_base_of(st.leadership_term_id),
            graceful_closed_leader_id=graceful_closed_leader_id,
            reason=reason,
        )

    def term_base_of(self, leadership_term_id: int) -> int:
        entry = self.recording_log.find_term_entry(leadership_term_id)
        return entry.term_base_log_position if entry is not None else 0

    # --- ElectionHost: notifications
    def on_election_state(self, old: ElectionState | None, new: ElectionState, now_ns: int) -> None:
        st = self.s
        e = st.election
        term = e.leadership_term_id if e is not None else st.leadership_term_id
        st.event(
            "election_state",
            {"from": old.name if old is not None else None, "to": new.name},
            term=term,
            pos=e.log_position if e is not None else st.commit_position,
        )

    def on_election_error(self, election: Election, reason: str, now_ns: int) -> None:
        self.s.log(f"member {self.member_id} election error in {election.state.name}: {reason}")
        self.s.event("error", {"where": election.state.name, "reason": reason}, term=election.leadership_term_id)

    def set_role(self, role: Role, now_ns: int) -> None:
        self.s.set_role(role)

    def set_leader(self, leader_member_id: int) -> None:
        self.s.set_leader(leader_member_id)

    def election_complete(self, election: Election, now_ns: int) -> None:
        """Aeron ``electionComplete``: adopt the term, reset timers, open for business."""
        st = self.s
        st.leadership_term_id = election.leadership_term_id
        st.set_leader(election.leader_member_id)
        st.time_of_last_leader_update_ns = now_ns
        self.replication.on_election_complete(now_ns)
        if st.role == Role.LEADER:
            # Leader side of e.9: keep sessions (NewLeaderEvent) or, after a whole-cluster restart, close them.
            self.control.on_leader_election_complete()
            self.client_sessions.on_leader_election_complete(election.is_node_startup, now_ns)
        st.event(
            "election_complete",
            {"leader": election.leader_member_id, "role": st.role.name},
            term=election.leadership_term_id,
            pos=election.log_position,
        )

    # --- ElectionHost: the log, leader side
    def prepare_for_new_leadership(self, log_position: int, now_ns: int) -> int:
        """Aeron ``prepareForNewLeadership``: drop the log stream, go back to the commit point.

        Returns the append position (the local recording's stop position)."""
        st = self.s
        st.role = Role.FOLLOWER
        self.replication.reset()
        self.catchup.reset()
        self.log_adapter.stop_log_replay()
        self.archive_replication.stop()
        self.archive.flush()
        # The log adapter never ran ahead of commit, so nothing processed needs undoing here;
        # each subsystem restores the state it kept for uncommitted entries (issue 4).
        st.commit_position = max(st.commit_position, min(log_position, st.consumed_position))
        position = st.commit_position
        self.client_sessions.restore_uncommitted(position)
        self.services.restore_uncommitted(position)
        self.snapshots.restore_uncommitted(position)
        self.termination.restore_uncommitted(position)
        self.control.restore_uncommitted()
        return self.archive.stop_position

    def create_log_publication(self, leadership_term_id: int, position: int) -> int:
        return self.replication.create_log_publication(leadership_term_id, position)

    def stop_all_catchups(self) -> None:
        self.replication.stop_all_catchups()

    def join_log_as_leader(
        self, leadership_term_id: int, log_position: int, log_session_id: int, is_startup: bool, now_ns: int
    ) -> None:
        st = self.s
        st.leadership_term_id = leadership_term_id
        st.commit_position = max(st.commit_position, log_position)
        st.event("leader", {"log_session_id": log_session_id}, term=leadership_term_id, pos=log_position)
        self.services.send_join_log(st.consumed_position, MAX_LONG, is_startup)

    def update_leader_position(self, now_ns: int, append_position: int, leadership_term_id: int) -> int:
        return self.replication.update_leader_position(now_ns, append_position, leadership_term_id)

    def publish_commit_position(self, leadership_term_id: int, position: int) -> None:
        self.replication.publish_commit_position(leadership_term_id, position)

    def append_new_leadership_term_event(
        self, leadership_term_id: int, term_base_log_position: int, log_session_id: int, now_ns: int
    ) -> bool:
        """LEADER_READY: the first entry of the term (its log_position is the position after it)."""
        position = self.archive.stop_position

        def event(log_position: int) -> NewLeadershipTermEvent:
            return NewLeadershipTermEvent(
                leadership_term_id=leadership_term_id,
                log_position=log_position,
                timestamp=self.cluster_time_ms(now_ns),
                term_base_log_position=term_base_log_position,
                leader_member_id=self.member_id,
                log_session_id=log_session_id,
                time_unit=ClusterTimeUnit.MILLIS,
                app_version=APP_VERSION,
            )

        end = position + framed_length(len(event(0).encode()))
        self.archive.append_entry(event(end).encode(), leadership_term_id)
        return True

    # --- ElectionHost: the log, both sides
    def ensure_term_entry(
        self, leadership_term_id: int, term_base_log_position: int, log_position: int, now_ns: int
    ) -> None:
        self.recording_log.ensure_coherent(
            self.log_recording_id,
            NULL_VALUE,
            0,
            leadership_term_id,
            term_base_log_position,
            log_position,
            self.cluster_time_ms(now_ns),
        )

    def truncate_log_entry(self, leadership_term_id: int, log_position: int, now_ns: int) -> None:
        """Aeron ``truncateLogEntry``: drop uncommitted bytes a new leader's history does not have."""
        st = self.s
        assert log_position >= st.commit_position, (
            f"member {self.member_id} asked to truncate committed log: {log_position} < commit {st.commit_position}"
        )
        before = self.archive.stop_position
        self.archive_store.truncate_log(log_position)
        self.replication.truncations += 1
        # Closes the truncated (last) term at log_position, as Aeron's truncateLogEntry does.
        self.recording_log.truncate_terms_after(log_position)
        st.event(
            "truncate",
            {"from": before, "to": log_position, "reason": "uncommitted entries"},
            term=leadership_term_id,
            pos=log_position,
        )

    def start_log_replay(self, from_position: int, to_position: int, now_ns: int) -> None:
        self.log_adapter.start_log_replay(from_position, to_position, now_ns)

    def poll_log_replay(self, now_ns: int) -> int:
        return self.log_adapter.poll_log_replay(now_ns)

    def replay_position(self) -> int:
        return self.log_adapter.replay_position()

    def stop_log_replay(self) -> None:
        self.log_adapter.stop_log_replay()

    # --- ElectionHost: the log, follower side
    def start_replication(self, leader_member_id: int, recording_id: int, stop_position: int, now_ns: int) -> None:
        self.archive_replication.start(leader_member_id, recording_id, stop_position, now_ns)

    def poll_replication(self, now_ns: int) -> int:
        return self.archive_replication.poll(now_ns)

    def replicated_position(self) -> int:
        return self.archive_replication.replicated_position()

    def stop_replication(self) -> None:
        self.archive_replication.stop()

    def catchup_initiated(self, leadership_term_id: int, log_session_id: int, now_ns: int) -> None:
        self.replication.subscribe_to_log(leadership_term_id, log_session_id)
        self.catchup.initiated(now_ns)

    def has_log_joined(self) -> bool:
        return self.catchup.has_log_joined()

    def catchup_poll(self, catchup_commit_position: int, now_ns: int) -> int:
        """FOLLOWER_CATCHUP: consume committed catch-up data and report progress (flag CATCHUP)."""
        st = self.s
        work = 0
        limit = min(self.archive.stop_position, max(catchup_commit_position, st.commit_position))
        before = st.consumed_position
        self.log_adapter.consume(limit, is_replay=False, now_ns=now_ns)
        if st.consumed_position > st.commit_position:
            st.set_commit_position(st.consumed_position)
        if st.consumed_position > before:
            work += 1
        work += self.replication.send_append_position(now_ns, AppendPositionFlags.CATCHUP)
        self.catchup.track_progress(self.archive.stop_position + st.commit_position, now_ns)
        return work

    def subscribe_to_log(self, leadership_term_id: int, log_session_id: int) -> None:
        self.replication.subscribe_to_log(leadership_term_id, log_session_id)

    def has_log_subscription(self) -> bool:
        return self.replication.has_log_subscription()

    def try_join_log_as_follower(self, log_position: int, is_startup: bool, now_ns: int) -> None:
        self.replication.time_of_last_log_update_ns = now_ns
        self.services.send_join_log(self.s.consumed_position, MAX_LONG, is_startup)

    def _on_term_event(self, ev: NewLeadershipTermEvent, now_ns: int) -> None:
        """A NewLeadershipTermEvent in the committed log: the recording log learns the term."""
        e = self.s.election
        if e is not None:
            e.on_replayed_new_leadership_term_event(
                ev.leadership_term_id, ev.term_base_log_position, ev.log_position, now_ns
            )
        else:
            self.ensure_term_entry(ev.leadership_term_id, ev.term_base_log_position, NULL_POSITION, now_ns)

    # ------------------------------------------------------------------ inputs
    def on_message(self, src_member_id: int, channel: Channel, payload: bytes, now_ns: int) -> None:
        """Decode and dispatch one message; malformed input is ignored with a counted reason."""
        self._dispatch(src_member_id, channel, payload, now_ns)
        self._after_input()

    def _dispatch(self, src_member_id: int, channel: Channel, payload: bytes, now_ns: int) -> None:
        self._now_ns = now_ns
        if self.s.state == ConsensusModuleState.CLOSED:
            return
        try:
            msg = decode(payload)
        except DecodeError as e:
            self.s.ignore(f"{channel} from {src_member_id}", f"malformed: {e}")
            return
        if channel == Channel.INGRESS:
            self.on_ingress(msg, now_ns)
            return
        if channel == Channel.SERVICE:
            self.on_service_message(msg, now_ns)
            return
        handler = _HANDLERS.get(type(msg))
        if handler is None:
            self.s.ignore(f"{channel} from {src_member_id}", f"unexpected {type(msg).__name__}")
            return
        try:
            handler(self, src_member_id, msg, now_ns)
        except ElectionError as e:
            if self.s.election is not None:
                self.s.election.handle_error(now_ns, str(e))

    def on_ingress_batch(self, payloads: list[bytes], now_ns: int) -> None:
        """Several ingress messages in arrival order (one batched ZeroMQ message from a client).

        The same as :meth:`on_message` for each, except that the session messages an ACTIVE leader
        takes are framed and appended together, in order, with one write (log batching)."""
        self._now_ns = now_ns
        if self.s.state == ConsensusModuleState.CLOSED:
            return
        self.client_sessions.on_ingress_batch(
            payloads, now_ns, lambda payload: self._dispatch(NULL_VALUE, Channel.INGRESS, payload, now_ns)
        )
        self._after_input()

    # --- ingress (clients)
    def on_ingress(self, msg: Any, now_ns: int) -> None:
        """Ingress is only served outside elections; a follower answers connects with REDIRECT."""
        st = self.s
        sessions = self.client_sessions
        if st.election is not None or st.state in (ConsensusModuleState.CLOSED, ConsensusModuleState.INIT):
            st.ignore(type(msg).__name__, "ingress during an election")
            return
        if isinstance(msg, SessionConnectRequest):
            sessions.on_session_connect_request(msg, now_ns)
            return
        if st.role != Role.LEADER:
            st.ignore(type(msg).__name__, "ingress on a follower")
            return
        if isinstance(msg, SessionMessageHeader):
            sessions.on_ingress_message(msg, now_ns)
        elif isinstance(msg, SessionKeepAlive):
            sessions.on_session_keep_alive(msg, now_ns)
        elif isinstance(msg, SessionCloseRequest):
            sessions.on_session_close_request(msg, now_ns)
        elif isinstance(msg, ChallengeResponse):
            sessions.on_challenge_response(msg, now_ns)
        elif isinstance(msg, AdminRequest):
            self.control.on_admin_request(msg, now_ns)
        else:
            st.ignore("ingress", f"unexpected {type(msg).__name__}")

    # --- the service
    def on_service_message(self, msg: Any, now_ns: int) -> None:
        services = self.services
        if isinstance(msg, ServiceAck):
            services.on_service_ack(msg)
        elif isinstance(msg, ScheduleTimer):
            services.timer_service.on_schedule_timer(msg.correlation_id, msg.deadline)
        elif isinstance(msg, CancelTimer):
            services.timer_service.cancel_timer(msg.correlation_id)
        elif isinstance(msg, CloseSession):
            self.client_sessions.on_service_close_session(msg.cluster_session_id, now_ns)
        elif isinstance(msg, SessionMessageHeader):
            services.on_service_offer(msg)
        elif isinstance(msg, ClusterMembersQuery):
            services.on_cluster_members_query(msg)
        else:
            self.s.ignore("service", f"unexpected {type(msg).__name__}")

    # --- members (consensus, log and archive channels)
    def on_canvass_position(self, src: int, msg: CanvassPosition, now_ns: int) -> None:
        st = self.s
        if st.election is not None:
            st.election.on_canvass_position(msg, now_ns)
            return
        if st.role != Role.LEADER or msg.log_leadership_term_id > st.leadership_term_id:
            return  # only a leader answers, and only canvasses it can place in its history
        s = st.status(msg.follower_member_id)
        if s is None:
            st.ignore("CanvassPosition", f"unknown member {msg.follower_member_id}")
            return
        s.catchup_active = False
        replication = self.replication
        self.consensus_publisher.new_leadership_term(
            s.member_id,
            new_leadership_term(
                self.recording_log.find_term_entry,
                log_leadership_term_id=msg.log_leadership_term_id,
                leadership_term_id=st.leadership_term_id,
                term_base_log_position=replication.log_term_base_position,
                log_position=self.archive.stop_position,
                leader_recording_id=self.log_recording_id,
                timestamp=self.cluster_time_ms(now_ns),
                leader_member_id=self.member_id,
                log_session_id=replication.log_session_id,
                is_startup=False,
            ),
        )

    def on_request_vote(self, src: int, msg: RequestVote, now_ns: int) -> None:
        st = self.s
        if st.election is not None:
            st.election.on_request_vote(msg, now_ns)
        elif msg.candidate_term_id > st.leadership_term_id:
            self.enter_election(now_ns, "unexpected vote request")

    def on_vote(self, src: int, msg: Vote, now_ns: int) -> None:
        e = self.s.election
        if e is None:
            return  # a late vote: our ballot is over
        e.on_vote(msg, now_ns)

    def on_new_leadership_term(self, src: int, msg: NewLeadershipTerm, now_ns: int) -> None:
        st = self.s
        if (msg.app_version >> 16) != (APP_VERSION >> 16):
            st.ignore("NewLeadershipTerm", f"incompatible app_version {msg.app_version}")
            return
        if msg.leadership_term_id >= st.leadership_term_id:
            st.time_of_last_leader_update_ns = now_ns
        if st.election is not None:
            st.election.on_new_leadership_term(msg, now_ns)
        elif (
            st.role == Role.FOLLOWER
            and msg.leadership_term_id == st.leadership_term_id
            and msg.leader_member_id == st.leader_member_id
        ):
            # NLT's log_position is the leader's append position, not a commit: only a heartbeat here.
            self.replication.time_of_last_log_update_ns = now_ns
        elif msg.leadership_term_id > st.leadership_term_id:
            self.enter_election(now_ns, "unexpected new leadership term event")

    def on_append_position(self, src: int, msg: AppendPosition, now_ns: int) -> None:
        self.replication.on_append_position(msg, now_ns)

    def on_commit_position(self, src: int, msg: CommitPosition, now_ns: int) -> None:
        st = self.s
        if msg.leadership_term_id >= st.leadership_term_id:
            st.time_of_last_leader_update_ns = now_ns
        if st.election is not None:
            st.election.on_commit_position(msg.leadership_term_id, msg.log_position, msg.leader_member_id, now_ns)
        elif not self.replication.on_commit_position(msg, now_ns) and msg.leadership_term_id > st.leadership_term_id:
            self.enter_election(now_ns, "unexpected commit position from new leader")

    def on_catchup_position(self, src: int, msg: CatchupPosition, now_ns: int) -> None:
        self.replication.on_catchup_position(msg, now_ns)

    def on_stop_catchup(self, src: int, msg: StopCatchup, now_ns: int) -> None:
        self.catchup.on_stop_catchup(msg)

    def on_termination_position(self, src: int, msg: TerminationPosition, now_ns: int) -> None:
        if self.termination.on_termination_position(msg, now_ns):
            self.replication.time_of_last_log_update_ns = now_ns

    def on_termination_ack(self, src: int, msg: TerminationAck, now_ns: int) -> None:
        self.termination.on_termination_ack(msg, now_ns)

    def on_log_block(self, src: int, msg: LogBlock, now_ns: int) -> None:
        self.replication.on_log_block(msg, now_ns)

    def on_log_end_of_stream(self, src: int, msg: LogEndOfStream, now_ns: int) -> None:
        st = self.s
        if st.election is not None or st.role != Role.FOLLOWER or msg.leader_member_id != st.leader_member_id:
            return  # not our leader's stream, or we are electing already
        self.enter_election(now_ns, "leader log end of stream", graceful_closed_leader_id=msg.leader_member_id)

    def on_replay_request(self, src: int, msg: ReplayRequest, now_ns: int) -> None:
        self.archive_replication.on_replay_request(src, msg)

    def on_replay_block(self, src: int, msg: ReplayBlock, now_ns: int) -> None:
        self.archive_replication.on_replay_block(src, msg)

    def on_archive_error(self, src: int, msg: ArchiveError, now_ns: int) -> None:
        self.archive_replication.on_archive_error(src, msg)

    # ------------------------------------------------------------------ duty cycle
    def do_work(self, now_ns: int) -> int:
        """One duty cycle: the election if one runs, else steady-state consensus work."""
        work = self._do_work(now_ns)
        self._after_input()
        return work

    def _do_work(self, now_ns: int) -> int:
        self._now_ns = now_ns
        st = self.s
        if st.state == ConsensusModuleState.CLOSED or st.terminated:
            return 0
        work = 0
        if st.election is not None:
            # A snapshot action met while catching up or replaying is taken during the election too
            # (Aeron pauses the replay until the snapshot is done).
            work += self.snapshots.work(now_ns)
            work += st.election.do_work(now_ns)
            if st.election is not None and st.election.state == ElectionState.CLOSED:
                st.election = None
        elif st.role == Role.LEADER:
            work += self._leader_work(now_ns)
        else:
            work += self._follower_work(now_ns)
        if st.role == Role.LEADER and self.replication.log_publication_term_id != NULL_VALUE:
            work += self.replication.send_log_blocks(now_ns)
        return work

    def _leader_work(self, now_ns: int) -> int:
        st = self.s
        work = 0
        if st.state == ConsensusModuleState.ACTIVE:
            # Timers, service messages, pending sessions and the session checker, in that order.
            now_ms = self.cluster_time_ms(now_ns)
            work += self.services.append_expired_timers(now_ms)
            work += self.services.append_pending_service_messages(now_ms)
            work += self.client_sessions.process_pending_sessions(now_ns)
            work += self.client_sessions.check_sessions(now_ns)
        work += self.control.check_toggle(now_ns)
        work += self.replication.update_leader_position(now_ns, self.archive.stop_position, st.leadership_term_id)
        self.services.sweep_uncommitted(st.commit_position)
        self.client_sessions.sweep_uncommitted(st.commit_position)
        self.log_adapter.consume(st.commit_position, is_replay=False, now_ns=now_ns)
        work += self.snapshots.work(now_ns)
        work += self.termination.work(now_ns)
        if st.terminated:
            return work
        # During an orderly termination followers stop reporting; the termination deadline governs.
        if not self.termination.is_pending and not has_active_quorum(
            st.statuses,
            self.member_id,
            now_ns,
            self.ctx.timeouts.leader_heartbeat_timeout_ns,
            len(st.statuses),
        ):
            self.enter_election(now_ns, "inactive follower quorum")
            return work + 1
        return work

    def _follower_work(self, now_ns: int) -> int:
        st = self.s
        work = 0
        limit = min(st.notified_commit_position, self.archive.stop_position)
        before = st.consumed_position
        self.log_adapter.consume(limit, is_replay=False, now_ns=now_ns)
        if st.consumed_position > st.commit_position:
            st.set_commit_position(st.consumed_position)
        if st.consumed_position > before:
            work += 1
        work += self.snapshots.work(now_ns)
        work += self.termination.work(now_ns)
        if st.terminated:
            return work
        work += self.replication.send_append_position(now_ns, 0)
        if not self.termination.is_pending and self.replication.leader_heartbeat_expired(now_ns):
            self.enter_election(now_ns, "leader heartbeat timeout")
            return work + 1
        return work

    def next_deadline_ns(self) -> int:
        """Absolute time at which ``do_work`` must next run."""
        now = self._now_ns
        st = self.s
        if st.terminated or st.state == ConsensusModuleState.CLOSED:
            return now + 3600 * 1_000_000_000
        timeouts = self.ctx.timeouts
        if st.election is not None:
            deadline = st.election.next_deadline_ns(now)
        else:
            deadline = now + max(timeouts.leader_heartbeat_interval_ns // 2, 1)
            if st.role != Role.LEADER and not self.termination.is_pending:
                # Detect a silent leader when its heartbeat timeout expires, not up to a tick later.
                silent = self.replication.time_of_last_log_update_ns + timeouts.leader_heartbeat_timeout_ns
                deadline = min(deadline, max(now, silent))
            active_leader = st.role == Role.LEADER and st.state == ConsensusModuleState.ACTIVE
            timer = self.services.timer_service.next_deadline() if active_leader else None
            if timer is not None:
                # Timer deadlines are cluster time (ms); fire on time rather than at the next tick.
                deadline = min(deadline, max(now, timer * 1_000_000))
        if st.role == Role.LEADER and self.replication.has_blocks_to_send():
            deadline = now
        if st.consumed_position < self.log_adapter.consumable_limit():
            deadline = now
        return deadline

    # ------------------------------------------------------------------ application input (leader)
    def offer(self, payload: bytes, now_ns: int, cluster_session_id: int = 0) -> int:
        """Leader only: append an application message; returns its end position or -1."""
        st = self.s
        if st.role != Role.LEADER or st.election is not None or st.state != ConsensusModuleState.ACTIVE:
            return -1
        encoded = encode_session_message(
            st.leadership_term_id, cluster_session_id, self.cluster_time_ms(now_ns), payload
        )
        position = self.archive.append_entry(encoded, st.leadership_term_id)
        self._after_input()
        return position


_HANDLERS: dict[type, Handler] = {
    CanvassPosition: ConsensusModule.on_canvass_position,
    RequestVote: ConsensusModule.on_request_vote,
    Vote: ConsensusModule.on_vote,
    NewLeadershipTerm: ConsensusModule.on_new_leadership_term,
    AppendPosition: ConsensusModule.on_append_position,
    CommitPosition: ConsensusModule.on_commit_position,
    CatchupPosition: ConsensusModule.on_catchup_position,
    StopCatchup: ConsensusModule.on_stop_catchup,
    TerminationPosition: ConsensusModule.on_termination_position,
    TerminationAck: ConsensusModule.on_termination_ack,
    LogBlock: ConsensusModule.on_log_block,
    LogEndOfStream: ConsensusModule.on_log_end_of_stream,
    ReplayRequest: ConsensusModule.on_replay_request,
    ReplayBlock: ConsensusModule.on_replay_block,
    ArchiveError: ConsensusModule.on_archive_error,
}
