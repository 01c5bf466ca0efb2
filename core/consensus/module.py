"""The consensus module: one member's replicated-log state machine (Aeron ``ConsensusModuleAgent``).

Sans-IO: it is handed bytes (``on_message``) and time (``now_ns``), sends through publishers, and
touches the disk only through its archive, recording log and node-state file. The runtime and the
simulator call ``on_start``, ``on_message``, ``on_ingress_batch``, ``do_work`` and ``next_deadline_ns``.

A thin dispatcher over one object per concern (TigerBeetle's replica split, Aeron's agent and
adapters), each owning its state and receiving only what it needs:

- ``ModuleState`` (module_state.py): role, term, leader, commit/consumed positions — shared;
- ``LogReplication``: the term's log publication, LogBlocks, AppendPosition, quorum commit;
- ``Catchup`` and ``LogReplication``: catching up in an election, replicating earlier terms;
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

import errno
from collections.abc import Callable, Sequence
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
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.codec.errors import DecodeError
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
from clusterlab.core.consensus.catchup import Catchup
from clusterlab.core.consensus.client_sessions import ClientSessions
from clusterlab.core.consensus.cluster_control import ClusterControl
from clusterlab.core.consensus.context import (
    NULL_VALUE,
    PROTOCOL_VERSION,
    SERVICE_ID_CONSENSUS_MODULE,
    Channel,
    ConsensusModuleContext,
    ConsensusModuleState,
    ElectionState,
    Role,
)
from clusterlab.core.consensus.counters import ClusterCounters, read_counters
from clusterlab.core.consensus.election import Election, ElectionError
from clusterlab.core.consensus.election_link import ElectionLink
from clusterlab.core.consensus.intercepts import Intercepts
from clusterlab.core.consensus.log_adapter import LogAdapter, LogListener
from clusterlab.core.consensus.log_replication import LogReplication
from clusterlab.core.consensus.members import MemberStatus, has_active_quorum
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.node_state import NodeState
from clusterlab.core.consensus.publishers import ArchivePublisher, ConsensusPublisher, LogPublisher
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.consensus.recovery import recover
from clusterlab.core.consensus.senders import body_sender
from clusterlab.core.consensus.service_link import ServiceLink
from clusterlab.core.consensus.sessions import ClusterSession
from clusterlab.core.consensus.snapshots import Snapshots
from clusterlab.core.consensus.term_replication import TermReplication
from clusterlab.core.consensus.termination import Termination
from clusterlab.core.consensus.timers import TimerService

__all__ = ["ConsensusModule", "LogListener"]

Handler = Callable[[int, Any, int], None]  # (source member, message, now_ns)


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
        if ctx.storage is None:
            raise ValueError("ConsensusModuleContext.storage is required (FileStorage or MemoryStorage)")
        self.archive_store = Archive(
            ctx.storage,
            segment_length=ctx.archive_segment_length,
            log=ctx.log,
            repair_tail=ctx.rules.repairs_torn_tail(),
        )
        self.archive = self.archive_store.recording  # the log recording: append, read, truncate
        self.recording_log = RecordingLog.open(ctx.storage, log=ctx.log)
        self.node_state = NodeState.open(ctx.storage)
        self.storage_failure: str | None = None  # why the storage refused a write; then fenced until restart
        # Where a test intercepts this member (none in production: clusterlab.core.consensus.intercepts).
        self.intercepts: Intercepts = ctx.intercepts
        self.outbox = self.intercepts.outbox(ctx.outbox)
        self.consensus_publisher = ConsensusPublisher(self.outbox)
        self.log_publisher = LogPublisher(ctx.outbox)
        self.archive_publisher = ArchivePublisher(ctx.outbox)
        self._create_subsystems(ctx)
        # Member-to-member messages: the subsystem that owns each (validate, ignore(reason), act).
        self._handlers: dict[type, Handler] = self._message_handlers()
        # The subsystems' invariant checks after ModuleState's, bound once: they run after every input.
        self._invariant_checks: tuple[Callable[[], None], ...] = self._subsystem_invariant_checks()
        self._now_ns = 0

    def _create_subsystems(self, ctx: ConsensusModuleContext) -> None:
        """The module's subsystems over its state, archive and publishers (Aeron keeps them as the
        ConsensusModuleAgent's fields and adapters)."""
        st = self.s
        self.catchup = Catchup(st, ctx.timeouts)
        self.term_replication = TermReplication(
            st,
            self.archive,
            ctx.timeouts,
            ctx.rng,
            self.log_publisher,
            self.consensus_publisher,
            self.catchup,
        )
        self.log_replication = LogReplication(
            st, self.archive, ctx.timeouts, self.archive_publisher, self.log_recording_id
        )
        self.services = ServiceLink(
            st, self.archive, self.outbox, ctx.service_count, ctx.members, lambda: self.term_replication.log_session_id
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
            on_resumed=self._on_resumed_after_snapshot,
        )
        self.control = ClusterControl(st, ctx, self.archive, self.client_sessions, self.snapshots, self.termination)
        self.log_adapter = LogAdapter(
            st,
            self.archive,
            self.client_sessions,
            self.services,
            self.control,
            self.snapshots,
            on_term_event=lambda ev, now_ns: self.election_link.on_term_event(ev, now_ns),
        )
        self.election_link = ElectionLink(
            st,
            ctx,
            self.archive_store,
            self.recording_log,
            self.node_state,
            self.consensus_publisher,
            self.term_replication,
            self.catchup,
            self.log_replication,
            self.log_adapter,
            self.services,
            self.client_sessions,
            self.snapshots,
            self.termination,
            self.control,
        )

    def _message_handlers(self) -> dict[type, Handler]:
        """Each member-to-member message type and the subsystem handler that owns it."""
        link, term_replication, log_replication = self.election_link, self.term_replication, self.log_replication
        return {
            CanvassPosition: link.on_canvass_position,
            RequestVote: link.on_request_vote,
            Vote: link.on_vote,
            NewLeadershipTerm: link.on_new_leadership_term,
            CommitPosition: link.on_commit_position,
            LogEndOfStream: link.on_log_end_of_stream,
            AppendPosition: term_replication.on_append_position,
            CatchupPosition: term_replication.on_catchup_position,
            LogBlock: term_replication.on_log_block,
            StopCatchup: self.catchup.on_stop_catchup,
            TerminationPosition: self.termination.on_termination_position,
            TerminationAck: self.termination.on_termination_ack,
            ReplayRequest: log_replication.on_replay_request,
            ReplayBlock: log_replication.on_replay_block,
            ArchiveError: log_replication.on_archive_error,
        }

    def _subsystem_invariant_checks(self) -> tuple[Callable[[], None], ...]:
        """The subsystems' ``check_invariants``, in the order they run after ModuleState's."""
        return (
            self.term_replication.check_invariants,
            self.catchup.check_invariants,
            self.log_replication.check_invariants,
            self.log_adapter.check_invariants,
            self.client_sessions.check_invariants,
            self.services.check_invariants,
            self.snapshots.check_invariants,
            self.termination.check_invariants,
            self.control.check_invariants,
        )

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

    def status(self, member_id: int) -> MemberStatus | None:
        return self.s.status(member_id)

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
        return self.term_replication.log_session_id

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
        self.s.check_invariants(self.archive.stop_position)
        for check in self._invariant_checks:
            check()

    # ------------------------------------------------------------------ lifecycle
    def on_start(self, now_ns: int) -> None:
        """Recover from storage and start the node-startup election (fenced if the storage fails)."""
        try:
            self._start(now_ns)
        except OSError as e:
            self.on_storage_failure(e, now_ns)

    def _fenced(self) -> bool:
        """Whether a storage failure has fenced this member (until restart)."""
        return self.storage_failure is not None

    def on_storage_failure(self, error: OSError, now_ns: int) -> None:
        """The storage refused a write (ENOSPC, EIO): stop appending and acknowledging, step down if
        leader, and say so (a ``storage_error`` event and a counted reason). The process keeps serving
        (status, control); a restart once the disk is healthy recovers from what was written."""
        st = self.s
        code = errno.errorcode.get(error.errno or 0, str(error.errno))
        reason = f"{code}: {error.strerror or error}{f' ({error.filename})' if error.filename else ''}"
        action = "step_down" if st.role == Role.LEADER else "stop_acknowledging"
        self.storage_failure = reason
        st.ignore("storage", reason)
        st.error_count += 1  # Aeron counts it as an error too (the storage_error event below traces it)
        st.distinct_errors[f"storage: {reason}"] = st.distinct_errors.get(f"storage: {reason}", 0) + 1
        st.log(f"member {self.member_id} storage failure: {reason}; {action.replace('_', ' ')}")
        st.event(
            "storage_error",
            {"errno": code, "reason": reason, "role": st.role.name, "action": action},
            st.leadership_term_id,
            self.archive.stop_position,
        )
        st.election = None
        st.set_leader(NULL_VALUE)
        self.control.restore_uncommitted(st.commit_position)  # a fenced member holds no control toggle
        self.services.end_log_on_step_down()  # its service learns it is no longer leading
        self.election_link.set_role(Role.FOLLOWER, now_ns)

    def on_service_closed(self, reason: str, now_ns: int) -> None:
        """The service went away outside a termination (it raised ClusterTerminationException, its
        process exited): Aeron's module counts "Aeron client in service closed unexpectedly" and
        closes, and the member terminates (its termination hook runs). A leader's followers then
        elect a new leader."""
        st = self.s
        if st.terminated or st.state == ConsensusModuleState.CLOSED or self.termination.is_pending:
            return  # closed already, or an orderly termination in progress (the service's exit is expected)
        st.error("service", f"service closed unexpectedly: {reason}", st.leadership_term_id, st.commit_position)
        self.termination.terminate_now(f"service closed: {reason}", now_ns)

    def on_log_recording_stopped(self, position: int, now_ns: int) -> None:
        """The archive stopped the log recording at ``position`` (Aeron: the RecordingSignal STOP of the
        log recording). ACTIVE outside an election the member enters one with the counted error "log
        recording stopped: eos=false", whatever its role; until an election resumes the recording it
        appends nothing: no ingress, toggles or service closes, no LogBlocks (ElectionLink)."""
        self._now_ns = now_ns
        self.intercepts.on_input(now_ns)
        if self.storage_failure is not None:
            return
        self.election_link.on_log_recording_stopped(position, now_ns)
        self._after_input()

    def _on_resumed_after_snapshot(self, now_ns: int) -> None:
        """The leader is ACTIVE again after its snapshot: it takes the ingress held meanwhile, or, when its
        log recording stopped during the snapshot, enters the election instead (the held ingress is
        dropped with the leadership: the clients retry)."""
        if self.election_link.enter_election_if_log_recording_stopped(now_ns) == 0:
            self.control.resume_after_snapshot(now_ns)

    def _start(self, now_ns: int) -> None:
        self._now_ns = now_ns
        self.intercepts.on_input(now_ns)
        plan = recover(self.s, self.archive_store, self.recording_log, self.snapshots, self.ctx.service_count)
        self.election_link.start_election(
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
        try:
            self.archive_store.close()
        except OSError as e:  # the catalogue could not be refreshed: the segments are the truth on open
            st.log(f"member {self.member_id} archive close: {e}")
        self.recording_log.close()
        self.node_state.close()
        st.state = ConsensusModuleState.CLOSED

    def _after_input(self) -> None:
        if self.check_invariants_enabled:
            self.check_invariants()

    # ------------------------------------------------------------------ elections
    def enter_election(self, now_ns: int, reason: str, graceful_closed_leader_id: int = NULL_VALUE) -> None:
        """Aeron ``enterElection``: leave steady state and elect (heartbeat timeout, higher term …)."""
        self.election_link.enter_election(now_ns, reason, graceful_closed_leader_id)

    @property
    def election_count(self) -> int:
        return self.election_link.election_count

    def counters(self, now_ns: int) -> ClusterCounters:
        """Aeron's consensus-module counters now (clusterlab.core.consensus.counters)."""
        return read_counters(self, now_ns)

    # Local replay, for tools that drive the log adapter directly (harness/replay.py).
    def start_log_replay(self, from_position: int, to_position: int, now_ns: int) -> None:
        self.log_adapter.start_log_replay(from_position, to_position, now_ns)

    def poll_log_replay(self, now_ns: int) -> int:
        return self.log_adapter.poll_log_replay(now_ns)

    def purge_log_to_last_snapshot(self) -> int:
        """Aeron's ``purgeSegments`` to the latest snapshot (TestCluster.purgeLogToLastSnapshot): delete
        the log recording's whole segments below the latest valid snapshot's position, which a restart
        never replays. Returns the recording's new start position (unchanged without a snapshot)."""
        entry = self.recording_log.latest_snapshot(SERVICE_ID_CONSENSUS_MODULE)
        if entry is None:
            return self.archive.start_position
        start = self.archive.purge_segments(min(entry.log_position, self.s.commit_position))
        self.archive_store.sync_catalogue()
        self.s.log(f"member {self.member_id} purged the log below the snapshot at {entry.log_position}: start {start}")
        return start

    def snapshot_work(self, now_ns: int) -> int:
        """A replayed SNAPSHOT action holds the log adapter until this writes the snapshot."""
        return self.snapshots.work(now_ns)

    # ------------------------------------------------------------------ inputs
    def on_message(self, src_member_id: int, channel: Channel, payload: bytes, now_ns: int) -> None:
        """Decode and dispatch one message; malformed input is ignored with a counted reason."""
        if self.storage_failure is not None:
            return
        try:
            self._dispatch(src_member_id, channel, payload, now_ns)
        except OSError as e:
            self.on_storage_failure(e, now_ns)
        self._after_input()

    def on_message_and_work(self, src_member_id: int, channel: Channel, payload: bytes, now_ns: int) -> int:
        """:meth:`on_message`, then :meth:`do_work` at the same instant (how the simulator delivers), with
        the invariants checked once, after both: the pair is one input. Returns do_work's work count."""
        if self.storage_failure is not None:
            return 0
        work = 0
        try:
            self._dispatch(src_member_id, channel, payload, now_ns)
        except OSError as e:
            self.on_storage_failure(e, now_ns)
        if not self._fenced():  # a method, not the attribute: mypyc would trust its narrowing to None above
            work = self._guarded_work(now_ns)
        self._after_input()
        return work

    def _dispatch(self, src_member_id: int, channel: Channel, payload: bytes, now_ns: int) -> None:
        self._now_ns = now_ns
        self.intercepts.on_input(now_ns)
        if self.s.state == ConsensusModuleState.CLOSED:
            return
        election = self.s.election
        if (
            election is not None
            and channel != Channel.SERVICE
            and self.intercepts.stalls(election.state, now_ns, election.leadership_term_id)
        ):
            self.s.ignore(f"{channel} from {src_member_id}", f"test hook: stalled in {election.state.name}")
            return
        try:
            msg = decode(payload)
        except DecodeError as e:
            self.s.ignore(f"{channel} from {src_member_id}", f"malformed: {e}")
            return
        if (
            isinstance(msg, RequestVote)
            and self.intercepts.fails_request_vote(msg.candidate_term_id)
            and msg.candidate_member_id != self.member_id
        ):  # test hook (Aeron's FailFirstElectionIntercept): the vote handler fails
            st = self.s
            st.error("election", f"Forced failure: memberId={self.member_id}, candidateTermId={msg.candidate_term_id}")
            return
        if channel == Channel.INGRESS:
            self.on_ingress(msg, now_ns)
            return
        if channel == Channel.SERVICE:
            self.on_service_message(msg, now_ns)
            return
        handler = self._handlers.get(type(msg))
        if handler is None:
            self.s.ignore(f"{channel} from {src_member_id}", f"unexpected {type(msg).__name__}")
            return
        if isinstance(msg, LogBlock) and self.election_link.is_log_recording_stopped:
            self.s.ignore(f"LogBlock from {src_member_id}", "log recording stopped")
            return
        claimed = body_sender(msg)
        if claimed is not None and claimed != src_member_id and self.s.rules.rejects_body_member_id():
            self.s.reject_body_member(type(msg).__name__, claimed, src_member_id)
            return
        try:
            handler(src_member_id, msg, now_ns)
        except ElectionError as e:
            if self.s.election is not None:
                self.s.election.handle_error(now_ns, str(e))

    def on_ingress_batch(self, payloads: list[bytes], now_ns: int) -> None:
        """Several ingress messages in arrival order (one batched ZeroMQ message from a client).

        The same as :meth:`on_message` for each, except that the session messages an ACTIVE leader
        takes are framed and appended together, in order, with one write (log batching)."""
        self._now_ns = now_ns
        self.intercepts.on_input(now_ns)
        if self.s.state == ConsensusModuleState.CLOSED or self.storage_failure is not None:
            return
        try:
            self.client_sessions.on_ingress_batch(
                payloads, now_ns, lambda payload: self._dispatch(NULL_VALUE, Channel.INGRESS, payload, now_ns)
            )
        except OSError as e:
            self.on_storage_failure(e, now_ns)
        self._after_input()

    # --- ingress (clients)
    def on_ingress(self, msg: Any, now_ns: int) -> None:
        """Ingress is only served outside elections; a follower answers connects with REDIRECT."""
        st = self.s
        sessions = self.client_sessions
        if st.election is not None or st.state in (ConsensusModuleState.CLOSED, ConsensusModuleState.INIT):
            st.ignore(type(msg).__name__, "ingress during an election")
            return
        if self.election_link.is_log_recording_stopped:
            st.ignore(type(msg).__name__, "log recording stopped")
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
            failed_start = services.on_service_ack(msg)
            if failed_start is not None:  # Aeron: "failed to start clustered service(s)", the module closes
                self.on_service_closed(failed_start, now_ns)
        elif isinstance(msg, ScheduleTimer):
            services.timer_service.on_schedule_timer(msg.correlation_id, msg.deadline)
        elif isinstance(msg, CancelTimer):
            services.on_cancel_timer(msg.correlation_id)
        elif isinstance(msg, CloseSession):
            if self.election_link.is_log_recording_stopped:
                self.s.ignore("CloseSession", "log recording stopped")
                return
            self.client_sessions.on_service_close_session(msg.cluster_session_id, now_ns)
        elif isinstance(msg, SessionMessageHeader):
            services.on_service_offer(msg)
        elif isinstance(msg, ClusterMembersQuery):
            services.on_cluster_members_query(msg)
        else:
            self.s.ignore("service", f"unexpected {type(msg).__name__}")

    # --- members (consensus, log and archive channels)
    # ------------------------------------------------------------------ duty cycle
    def do_work(self, now_ns: int) -> int:
        """One duty cycle: the election if one runs, else steady-state consensus work."""
        if self.storage_failure is not None:
            return 0
        work = self._guarded_work(now_ns)
        self._after_input()
        return work

    def _guarded_work(self, now_ns: int) -> int:
        """_do_work, a storage failure fencing the member instead of escaping the duty cycle."""
        try:
            return self._do_work(now_ns)
        except OSError as e:
            self.on_storage_failure(e, now_ns)
            return 1

    def _do_work(self, now_ns: int) -> int:
        self._now_ns = now_ns
        self.intercepts.on_input(now_ns)
        st = self.s
        if st.state == ConsensusModuleState.CLOSED or st.terminated:
            return 0
        work = self.intercepts.release_due(now_ns)
        if self.intercepts.stops_log_recording():  # test hook: the archive stops the log recording
            self.election_link.on_log_recording_stopped(self.archive.stop_position, now_ns)
        work += self.election_link.enter_election_if_log_recording_stopped(now_ns)
        if st.election is not None:
            # A snapshot action met while catching up or replaying is taken during the election too
            # (Aeron pauses the replay until the snapshot is done).
            work += self.snapshots.work(now_ns)
            state = st.election.state
            if self.intercepts.stalls(state, now_ns, st.election.leadership_term_id):
                pass  # test hook: the member is stuck in this state until the hook is cleared
            elif self.intercepts.fails_catchup(state):
                st.election.handle_error(now_ns, "test hook: catch-up failed")
                work += 1
            else:
                work += st.election.do_work(now_ns)
            if st.election is not None and st.election.state == ElectionState.CLOSED:
                st.election = None
        elif st.role == Role.LEADER:
            work += self._leader_work(now_ns)
        else:
            work += self._follower_work(now_ns)
        if st.role == Role.LEADER and self.term_replication.log_publication_term_id != NULL_VALUE:
            work += self.term_replication.send_log_blocks(now_ns)
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
        if not self.election_link.is_log_recording_stopped:  # a toggle appends its action
            work += self.control.check_toggle(now_ns)
        work += self.term_replication.update_leader_position(now_ns, self.archive.stop_position, st.leadership_term_id)
        self.control.sweep_uncommitted(st.commit_position)
        self.services.sweep_uncommitted(st.commit_position)
        self.client_sessions.sweep_uncommitted(st.commit_position)
        self.log_adapter.consume(st.commit_position, is_replay=False, now_ns=now_ns)
        work += self.snapshots.work(now_ns)
        work += self.termination.work(now_ns)
        if st.terminated:
            return work
        # During an orderly termination followers stop reporting; the termination deadline governs.
        if not self.ctx.rules.steps_down_without_quorum():
            return work
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
        if st.state == ConsensusModuleState.ACTIVE:
            work += self.ctx.rules.follower_duties(self, now_ns)  # the protocol's: none
        work += self.snapshots.work(now_ns)
        work += self.termination.work(now_ns)
        if st.terminated:
            return work
        work += self.term_replication.send_append_position(now_ns, 0)
        if not self.termination.is_pending and self.term_replication.leader_heartbeat_expired(now_ns):
            self.enter_election(now_ns, "leader heartbeat timeout")
            return work + 1
        return work

    def next_deadline_ns(self) -> int:
        """Absolute time at which ``do_work`` must next run."""
        now = self._now_ns
        st = self.s
        if st.terminated or st.state == ConsensusModuleState.CLOSED or self.storage_failure is not None:
            return now + 3600 * 1_000_000_000
        timeouts = self.ctx.timeouts
        election = st.election
        is_leader = st.role == Role.LEADER
        if election is not None:
            deadline = election.next_deadline_ns(now)
            if is_leader and self.term_replication.has_blocks_to_send():
                deadline = now
            if st.consumed_position < st.commit_position and st.consumed_position < self.log_adapter.consumable_limit():
                deadline = now
        else:
            # Work due now (log to send, committed log to consume): nothing below can make it earlier.
            if is_leader and self.term_replication.has_blocks_to_send():
                return now
            if st.consumed_position < st.commit_position and st.consumed_position < self.log_adapter.consumable_limit():
                return now
            if is_leader and st.state == ConsensusModuleState.ACTIVE and self.client_sessions.has_pending_input:
                return now  # a connect request or challenge response to answer
            deadline = now + max(timeouts.leader_heartbeat_interval_ns // 2, 1)
            if not is_leader and not self.termination.is_pending:
                # Detect a silent leader when its heartbeat timeout expires, not up to a tick later.
                silent = st.time_of_last_log_update_ns + timeouts.leader_heartbeat_timeout_ns
                deadline = min(deadline, max(now, silent))
            if is_leader and st.state == ConsensusModuleState.ACTIVE:
                timer = self.services.timer_service.next_deadline()
                if timer is not None:
                    # Timer deadlines are cluster time (ms); fire on time rather than at the next tick.
                    deadline = min(deadline, max(now, timer * 1_000_000))
        held = self.intercepts.next_due_ns()
        if held is not None:
            deadline = min(deadline, max(now, held))
        if election is not None and self.intercepts.stalls(election.state, now, election.leadership_term_id):
            stall_end = self.intercepts.stall_deadline_ns()  # stalled: nothing to do until it ends
            deadline = (
                stall_end if stall_end is not None else max(deadline, now + timeouts.leader_heartbeat_interval_ns)
            )
        return deadline

    # ------------------------------------------------------------------ application input (leader)
    def offer(self, payload: bytes, now_ns: int, cluster_session_id: int = 0) -> int:
        """Leader only: append an application message; returns its end position or -1."""
        return self.offer_batch((payload,), now_ns, cluster_session_id)

    def offer_batch(self, payloads: Sequence[bytes], now_ns: int, cluster_session_id: int = 0) -> int:
        """Leader only: append application messages in order with one write, as Aeron's leader appends
        the ingress of one duty cycle; returns the end position of the last, or -1 (none appended)."""
        st = self.s
        if st.role != Role.LEADER or st.election is not None or st.state != ConsensusModuleState.ACTIVE:
            return -1
        if not payloads:
            return -1
        term = st.leadership_term_id
        timestamp = self.cluster_time_ms(now_ns)
        encoded = [encode_session_message(term, cluster_session_id, timestamp, p) for p in payloads]
        try:
            position = self.archive.append_entries(encoded, term)
        except OSError as e:
            self.on_storage_failure(e, now_ns)
            self._after_input()
            return -1
        if self.check_invariants_enabled:
            # An append changes only the log: check what it can break (the append position's history).
            self.term_replication.check_invariants()
        return position
