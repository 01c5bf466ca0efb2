"""The consensus module: one member's replicated-log state machine (Aeron ``ConsensusModuleAgent``).

Sans-IO: it is handed bytes (``on_message``) and time (``now_ns``), sends through publishers, and
touches the disk only through its archive, recording log and node-state file. The runtime and the
simulator call ``on_start``, ``on_message``, ``do_work`` and ``next_deadline_ns``.

Log-transport stand-in (ZeroMQ for Aeron's UDP log with NAKs): the leader keeps a send position
per follower and sends ``LogBlock``s from it; a follower appends only frames that start at its own
append position and reports ``AppendPosition``; when a follower's reported position stops
advancing the leader rewinds that follower's send position to it and resends. A lost, duplicated
or reordered block therefore slows the log down but never corrupts it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clusterlab.core.archive.archive import Archive
from clusterlab.core.archive.errors import ArchiveError as StoreError
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
from clusterlab.core.codec.enums import AppendPositionFlags, BooleanType, ClusterTimeUnit, ReplayPurpose
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.framing import Frame, framed_length, walk_frames
from clusterlab.core.codec.header import HEADER_LENGTH
from clusterlab.core.codec.log_events import NewLeadershipTermEvent
from clusterlab.core.codec.registry import decode, peek_template_id
from clusterlab.core.codec.session import encode_session_message, session_message_fields
from clusterlab.core.codec.transport import ArchiveError, LogBlock, LogEndOfStream, ReplayBlock, ReplayRequest
from clusterlab.core.consensus.cluster_work import MAX_LONG, ClusterWork
from clusterlab.core.consensus.context import (
    APP_VERSION,
    NULL_POSITION,
    NULL_SESSION_ID,
    NULL_VALUE,
    PROTOCOL_VERSION,
    Channel,
    ConsensusModuleContext,
    ConsensusModuleState,
    ElectionState,
    Role,
)
from clusterlab.core.consensus.election import Election, ElectionError
from clusterlab.core.consensus.members import MemberStatus, has_active_quorum, quorum_position
from clusterlab.core.consensus.node_state import NodeState
from clusterlab.core.consensus.publishers import ArchivePublisher, ConsensusPublisher, LogPublisher
from clusterlab.core.consensus.recording_log import EntryType, RecordingLog

# Largest block of log bytes sent in one LogBlock / ReplayBlock (Aeron: MTU-sized fragments and
# term-length windows; we only need a bound on message size and on bytes in flight).
MAX_BLOCK_BYTES = 64 * 1024
MAX_BYTES_IN_FLIGHT = 512 * 1024
LOG_CONSUME_LIMIT_BYTES = 256 * 1024  # per duty cycle, so one cycle never stalls on a long log

LogListener = Callable[[Frame, bool], None]  # (entry, is_replay) in log order, only up to commit


class ConsensusModule(ClusterWork):
    """One member's consensus module. See module docstring."""

    def __init__(self, ctx: ConsensusModuleContext) -> None:
        ctx.timeouts.validate()
        self.ctx = ctx
        self.member_id = ctx.member_id
        if ctx.member(ctx.member_id) is None:
            raise ValueError(
                f"member {ctx.member_id} is not in the cluster members {[m.member_id for m in ctx.members]}"
            )
        self.statuses = [MemberStatus(m) for m in ctx.members]
        self._status_by_id = {s.member_id: s for s in self.statuses}
        self.this_member = self._status_by_id[self.member_id]
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
        self.state = ConsensusModuleState.INIT
        self.role = Role.FOLLOWER
        self.leadership_term_id = NULL_VALUE
        self.leader_member_id = NULL_VALUE
        self.commit_position = 0
        self.notified_commit_position = 0
        self.consumed_position = 0  # log adapter position: entries processed up to here
        self.election: Election | None = None
        self.election_count = 0
        self.time_of_last_leader_update_ns = 0
        self.time_of_last_log_update_ns = 0
        self.time_of_last_append_position_send_ns = 0
        self.last_append_position_sent = NULL_POSITION
        self.time_of_last_commit_publish_ns = 0
        self.last_commit_published = NULL_POSITION
        self.termination_position = NULL_POSITION
        # Leader log publication (one per term): its term and session id.
        self.log_publication_term_id = NULL_VALUE
        self.log_session_id = NULL_SESSION_ID
        self.log_term_base_position = 0
        # Follower log subscription: term and leader it accepts blocks from; catch-up flag.
        self.log_subscription_term_id = NULL_VALUE
        self._unappended_block: LogBlock | None = None  # fault_ack_before_append only
        self.is_catchup_stopped = True
        self.is_catchup_active = False
        self.catchup_log_joined = False
        self.time_of_last_catchup_progress_ns = 0
        self.catchup_progress = -1
        # Replay of the local log during LEADER_REPLAY / FOLLOWER_REPLAY.
        self.replay_stop_position = NULL_POSITION
        # Replication of earlier terms from the leader's archive (FOLLOWER_LOG_REPLICATION).
        self.replication_source = NULL_VALUE
        self.replication_stop_position = NULL_POSITION
        self.replication_correlation_id = 0
        self.time_of_last_replication_progress_ns = 0
        self.time_of_last_replication_request_ns = 0
        self.replication_progress_position = NULL_POSITION
        self.ignored: dict[str, int] = {}  # reason -> count: bad or stale peer input, never raised
        self.log_listeners: list[LogListener] = []
        self.terminated = False
        self._now_ns = 0
        self._init_cluster_work()

    # ------------------------------------------------------------------ small accessors
    def status(self, member_id: int) -> MemberStatus | None:
        return self._status_by_id.get(member_id)

    @property
    def append_position(self) -> int:
        """How far this member's log is durably recorded locally (Aeron: recording position)."""
        return self.archive.stop_position

    @property
    def election_state(self) -> ElectionState | None:
        return self.election.state if self.election is not None else None

    def cluster_time_ms(self, now_ns: int) -> int:
        """Cluster time (ClusterTimeUnit.MILLIS) for log timestamps."""
        return now_ns // 1_000_000

    def describe(self) -> str:
        """One canonical line for status tables and logs."""
        es = self.election.state.name if self.election else "-"
        return (
            f"ConsensusModule(member={self.member_id} role={self.role.name} state={self.state.name} "
            f"term={self.leadership_term_id} leader={self.leader_member_id} election={es} "
            f"append={self.append_position} commit={self.commit_position})"
        )

    def ignore(self, what: str, reason: str) -> None:
        """A peer's bad or stale message: counted and logged, never raised into the duty cycle."""
        key = f"{what}: {reason}"
        self.ignored[key] = self.ignored.get(key, 0) + 1
        self.ctx.log(f"member {self.member_id} ignored {key}")

    def _event(self, kind: str, detail: dict[str, Any], term: int | None = None, pos: int | None = None) -> None:
        self.ctx.events(kind, self.member_id, term, pos, detail)

    # ------------------------------------------------------------------ lifecycle
    def on_start(self, now_ns: int) -> None:
        """Recover from disk (recovery plan) and start the node-startup election."""
        self._now_ns = now_ns
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
                self._event(
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
            self._event(
                "truncate",
                {"recording_log": [e.describe() for e in removed], "reason": "recording shorter than recording log"},
                pos=self.archive.stop_position,
            )
        plan = self.recording_log.create_recovery_plan(self.ctx.service_count, self.archive_store.recording_extent)
        if self.archive.repair is not None:
            r = self.archive.repair
            self._event(
                "truncate",
                {"repair": "torn tail", "from": r.from_position, "to": r.to_position, "reason": r.reason},
                pos=r.to_position,
            )
        self.leadership_term_id = plan.last_leadership_term_id
        self.commit_position = 0
        if plan.snapshots:
            # Recovery = latest valid snapshot + replay of the log after it (c.10). The service loads
            # its own snapshot from the same recovery plan (Aeron's RecoveryState counter).
            cm_snapshot = plan.snapshots[0]
            self.commit_position = self.load_snapshot(cm_snapshot.recording_id)
            self._event(
                "snapshot_loaded",
                {"recording_id": cm_snapshot.recording_id},
                term=cm_snapshot.leadership_term_id,
                pos=self.commit_position,
            )
        self.consumed_position = self.commit_position
        self.notified_commit_position = self.commit_position
        self.state = ConsensusModuleState.ACTIVE
        self._event(
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

    def close(self) -> None:
        """Clean close: a leader tells followers its log ended (Aeron end-of-stream), files flushed."""
        if self.role == Role.LEADER and self.election is None and not self.terminated:
            for s in self.statuses:
                if s.member_id != self.member_id:
                    self.log_publisher.end_of_stream(
                        s.member_id, self.leadership_term_id, self.archive.stop_position, self.member_id
                    )
        self.archive_store.close()
        self.recording_log.close()
        self.node_state.close()
        self.state = ConsensusModuleState.CLOSED

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
        assert self.election is None, "an election is already running"
        self.election_count += 1
        self._event(
            "election_start",
            {"reason": reason, "election_count": self.election_count},
            term=leadership_term_id,
            pos=self.commit_position,
        )
        self.end_service_log_on_step_down()
        self.role = Role.FOLLOWER
        self.election = Election(
            self,
            is_node_startup=is_node_startup,
            leadership_term_id=leadership_term_id,
            term_base_log_position=term_base_log_position,
            log_position=self.commit_position,
            append_position=self.archive.stop_position,
            graceful_closed_leader_id=graceful_closed_leader_id,
            now_ns=now_ns,
        )

    def enter_election(self, now_ns: int, reason: str, graceful_closed_leader_id: int = NULL_VALUE) -> None:
        """Aeron ``enterElection``: leave steady state and elect (heartbeat timeout, higher term …)."""
        if self.election is not None or self.terminated:
            return
        entry = self.recording_log.find_term_entry(self.leadership_term_id)
        base = entry.term_base_log_position if entry is not None else 0
        self._enter_election(
            now_ns,
            is_node_startup=False,
            leadership_term_id=self.leadership_term_id,
            term_base_log_position=base,
            graceful_closed_leader_id=graceful_closed_leader_id,
            reason=reason,
        )

    def on_election_state(self, old: ElectionState | None, new: ElectionState, now_ns: int) -> None:
        e = self.election
        term = e.leadership_term_id if e is not None else self.leadership_term_id
        self._event(
            "election_state",
            {"from": old.name if old is not None else None, "to": new.name},
            term=term,
            pos=e.log_position if e is not None else self.commit_position,
        )

    def on_election_error(self, election: Election, reason: str, now_ns: int) -> None:
        self.ctx.log(f"member {self.member_id} election error in {election.state.name}: {reason}")
        self._event("error", {"where": election.state.name, "reason": reason}, term=election.leadership_term_id)

    def set_role(self, role: Role, now_ns: int) -> None:
        if role != self.role:
            self.role = role
            self._event("role", {"role": role.name})

    def set_leader(self, leader_member_id: int) -> None:
        self.leader_member_id = leader_member_id
        for s in self.statuses:
            s.is_leader = s.member_id == leader_member_id

    def term_base_of(self, leadership_term_id: int) -> int:
        entry = self.recording_log.find_term_entry(leadership_term_id)
        return entry.term_base_log_position if entry is not None else 0

    def end_service_log_on_step_down(self) -> None:
        """A leader or candidate becoming a follower ends its service's log (issue 16 item 2).

        Aeron's service sees every role change through the role counter; ours learns its role from
        JoinLog and from the end of its log (LogEndOfStream -> role FOLLOWER)."""
        if self.role != Role.FOLLOWER:
            self._to_service(
                LogEndOfStream(
                    leadership_term_id=self.leadership_term_id,
                    log_position=self.consumed_position,
                    leader_member_id=self.leader_member_id,
                ).encode()
            )

    def prepare_for_new_leadership(self, log_position: int, now_ns: int) -> int:
        """Aeron ``prepareForNewLeadership``: drop the log stream, go back to the commit point.

        Returns the append position (the local recording's stop position)."""
        self.end_service_log_on_step_down()
        self.role = Role.FOLLOWER
        self.log_publication_term_id = NULL_VALUE
        self.log_session_id = NULL_SESSION_ID
        self.log_subscription_term_id = NULL_VALUE
        self.is_catchup_active = False
        self.is_catchup_stopped = True
        self.catchup_log_joined = False
        self.replay_stop_position = NULL_POSITION
        self.stop_replication()
        for s in self.statuses:
            s.reset_log_send()
        self.archive.flush()
        # The log adapter never ran ahead of commit, so nothing processed needs undoing here;
        # sessions/timers restore uncommitted state in the session layer (issue 4).
        self.commit_position = max(self.commit_position, min(log_position, self.consumed_position))
        self.restore_uncommitted(self.commit_position, now_ns)
        return self.archive.stop_position

    def create_log_publication(self, leadership_term_id: int, position: int) -> int:
        """Leader: a new term's log stream starting at ``position``; returns its log session id."""
        self.log_publication_term_id = leadership_term_id
        self.log_term_base_position = position
        self.log_session_id = self.ctx.rng.randrange(1, 2**31 - 1)
        for s in self.statuses:
            s.reset_log_send()
        return self.log_session_id

    # --- local replay (LEADER_REPLAY / FOLLOWER_REPLAY)
    def start_log_replay(self, from_position: int, to_position: int, now_ns: int) -> None:
        # Safety choice (PROTOCOL.md g): a follower replays only what it knows is committed; the rest
        # is consumed later when the leader's CommitPosition covers it. A leader's whole log is
        # committed once a quorum holds it (LEADER_LOG_REPLICATION), so it replays all of it.
        stop = to_position if self.role == Role.LEADER else min(to_position, self.commit_position)
        self.replay_stop_position = stop
        if stop > self.consumed_position:
            # Replayed entries were answered when first applied: the service replays as a FOLLOWER
            # (Aeron), so a new leader sends no egress for them (issue 16 item 7).
            self.send_join_log(self.consumed_position, stop, True, Role.FOLLOWER)

    def poll_log_replay(self, now_ns: int) -> int:
        if self.replay_stop_position == NULL_POSITION:
            return 0
        before = self.consumed_position
        self._consume_log(self.replay_stop_position, is_replay=True, now_ns=now_ns)
        if self.role == Role.LEADER:
            self.commit_position = max(self.commit_position, self.consumed_position)
        return 1 if self.consumed_position > before else 0

    def replay_position(self) -> int:
        """Position the local replay has reached (>= its stop when done)."""
        if self.replay_stop_position == NULL_POSITION:
            return NULL_POSITION
        if self.consumed_position >= self.replay_stop_position:
            return 2**63 - 1  # done: the election treats this as having reached append position
        return self.consumed_position

    def stop_log_replay(self) -> None:
        self.replay_stop_position = NULL_POSITION

    # --- leader joins its own log
    def join_log_as_leader(self, leadership_term_id: int, log_position: int, log_session_id: int, now_ns: int) -> None:
        self.leadership_term_id = leadership_term_id
        self.commit_position = max(self.commit_position, log_position)
        self._event("leader", {"log_session_id": log_session_id}, term=leadership_term_id, pos=log_position)
        self.send_join_log(self.consumed_position, MAX_LONG, self.election.is_node_startup if self.election else False)

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

    def update_leader_position(self, now_ns: int, append_position: int, leadership_term_id: int) -> int:
        """Aeron ``updateLeaderPosition``: commit = min(quorum position, own position), heartbeat."""
        self.this_member.log_position = append_position
        self.this_member.leadership_term_id = leadership_term_id
        self.this_member.time_of_last_append_position_ns = now_ns
        # Only positions reported in this term count: a canvassed position from an older log term
        # (a deposed leader's uncommitted tail) describes bytes we may not hold.
        quorum = quorum_position(
            (s.log_position for s in self.statuses if s.leadership_term_id == leadership_term_id),
            len(self.statuses),
        )
        commit = min(quorum, append_position)
        if commit > self.commit_position or now_ns >= (
            self.time_of_last_commit_publish_ns + self.ctx.timeouts.leader_heartbeat_interval_ns
        ):
            if commit > self.commit_position:
                self._set_commit_position(commit)
            self.time_of_last_commit_publish_ns = now_ns
            self.publish_commit_position(leadership_term_id, self.commit_position)
            return 1
        return 0

    def _set_commit_position(self, position: int) -> None:
        assert position >= self.commit_position, f"commit position moved back {self.commit_position} -> {position}"
        self.commit_position = position
        self._event("commit", {}, term=self.leadership_term_id, pos=position)

    def publish_commit_position(self, leadership_term_id: int, position: int) -> None:
        for s in self.statuses:
            if s.member_id != self.member_id:
                self.consensus_publisher.commit_position(s.member_id, leadership_term_id, position, self.member_id)

    def append_new_leadership_term_event(self, now_ns: int) -> bool:
        """LEADER_READY: the first entry of the term."""
        e = self.election
        assert e is not None
        position = self.archive.stop_position
        event = NewLeadershipTermEvent(
            leadership_term_id=e.leadership_term_id,
            log_position=0,  # placeholder: the position after the event, computed below
            timestamp=self.cluster_time_ms(now_ns),
            term_base_log_position=e.log_position,
            leader_member_id=self.member_id,
            log_session_id=e.log_session_id,
            time_unit=ClusterTimeUnit.MILLIS,
            app_version=APP_VERSION,
        )
        end = position + framed_length(len(event.encode()))
        event = NewLeadershipTermEvent(
            leadership_term_id=e.leadership_term_id,
            log_position=end,
            timestamp=self.cluster_time_ms(now_ns),
            term_base_log_position=e.log_position,
            leader_member_id=self.member_id,
            log_session_id=e.log_session_id,
            time_unit=ClusterTimeUnit.MILLIS,
            app_version=APP_VERSION,
        )
        self.archive.append_entry(event.encode(), e.leadership_term_id)
        return True

    def election_complete(self, election: Election, now_ns: int) -> None:
        """Aeron ``electionComplete``: adopt the term, reset timers, open for business."""
        self.leadership_term_id = election.leadership_term_id
        self.set_leader(election.leader_member_id)
        self.time_of_last_leader_update_ns = now_ns
        self.time_of_last_log_update_ns = now_ns
        self.time_of_last_append_position_send_ns = 0
        if self.role == Role.LEADER:
            self.time_of_last_commit_publish_ns = 0
            for s in self.statuses:
                if s.member_id != self.member_id:
                    s.time_of_last_append_position_ns = now_ns
            self.on_leader_election_complete(election.is_node_startup, now_ns)
        self._event(
            "election_complete",
            {"leader": election.leader_member_id, "role": self.role.name},
            term=election.leadership_term_id,
            pos=election.log_position,
        )

    def _close_election(self, now_ns: int) -> None:
        self.election = None

    # --- follower joins the leader's log
    def subscribe_to_log(self, leadership_term_id: int, log_session_id: int) -> None:
        self.log_subscription_term_id = leadership_term_id
        self.log_session_id = log_session_id

    def has_log_subscription(self) -> bool:
        return self.log_subscription_term_id != NULL_VALUE

    def catchup_initiated(self, now_ns: int) -> None:
        e = self.election
        assert e is not None
        self.log_subscription_term_id = e.leadership_term_id
        self.log_session_id = e.log_session_id
        self.is_catchup_active = True
        self.is_catchup_stopped = False
        self.catchup_log_joined = False
        self.time_of_last_catchup_progress_ns = now_ns
        self.catchup_progress = -1

    def has_log_joined(self, leadership_term_id: int, log_position: int) -> bool:
        return self.catchup_log_joined

    def try_join_log_as_follower(self, log_position: int, is_startup: bool, now_ns: int) -> None:
        self.time_of_last_log_update_ns = now_ns
        self.send_join_log(self.consumed_position, MAX_LONG, is_startup)

    def catchup_poll(self, catchup_commit_position: int, now_ns: int) -> int:
        """FOLLOWER_CATCHUP: consume committed catch-up data and report progress (flag CATCHUP)."""
        work = 0
        limit = min(self.archive.stop_position, max(catchup_commit_position, self.commit_position))
        before = self.consumed_position
        self._consume_log(limit, is_replay=False, now_ns=now_ns)
        if self.consumed_position > self.commit_position:
            self._set_commit_position(self.consumed_position)
        if self.consumed_position > before:
            work += 1
        work += self._send_append_position(now_ns, AppendPositionFlags.CATCHUP)
        # Progress = bytes appended or commit advanced; without either for the heartbeat timeout the
        # catch-up has failed (e.g. its leader lost leadership after StopCatchup) and we elect again.
        progress = self.archive.stop_position + self.commit_position
        if progress > self.catchup_progress:
            self.catchup_progress = progress
            self.time_of_last_catchup_progress_ns = now_ns
        elif now_ns >= self.time_of_last_catchup_progress_ns + self.ctx.timeouts.leader_heartbeat_timeout_ns:
            raise ElectionError("no catchup progress")
        return work

    # --- replication of earlier terms (FOLLOWER_LOG_REPLICATION)
    def start_replication(
        self, leader_member_id: int, recording_id: int, from_position: int, stop_position: int, now_ns: int
    ) -> None:
        self.replication_source = leader_member_id
        self.replication_stop_position = stop_position
        self.replication_progress_position = self.archive.stop_position
        self.time_of_last_replication_progress_ns = now_ns
        self._request_replication(now_ns, recording_id)

    def _request_replication(self, now_ns: int, recording_id: int = LOG_RECORDING_ID) -> None:
        self.replication_correlation_id += 1
        self.time_of_last_replication_request_ns = now_ns
        self.archive_publisher.replay_request(
            self.replication_source,
            ReplayRequest(
                correlation_id=self.replication_correlation_id,
                recording_id=recording_id,
                from_position=self.archive.stop_position,
                to_position=self.replication_stop_position,
                requester_member_id=self.member_id,
                purpose=ReplayPurpose.REPLICATION,
                max_bytes=MAX_BYTES_IN_FLIGHT,
            ),
        )

    def poll_replication(self, now_ns: int) -> int:
        if self.replication_source == NULL_VALUE:
            return 0
        position = self.archive.stop_position
        if position > self.replication_progress_position:
            self.replication_progress_position = position
            self.time_of_last_replication_progress_ns = now_ns
            return 1
        if position >= self.replication_stop_position:
            return 0
        if now_ns >= self.time_of_last_replication_progress_ns + self.ctx.timeouts.leader_heartbeat_timeout_ns:
            raise ElectionError(f"replication made no progress from {position} within heartbeat timeout")
        if now_ns >= self.time_of_last_replication_request_ns + self.ctx.timeouts.leader_heartbeat_interval_ns:
            self._request_replication(now_ns)  # a lost request or reply: ask again from where we are
            return 1
        return 0

    def replicated_position(self) -> int:
        return self.archive.stop_position

    def stop_replication(self) -> None:
        self.replication_source = NULL_VALUE
        self.replication_stop_position = NULL_POSITION

    def stop_all_catchups(self) -> None:
        for s in self.statuses:
            s.catchup_active = False

    def truncate_log_entry(self, leadership_term_id: int, log_position: int, now_ns: int) -> None:
        """Aeron ``truncateLogEntry``: drop uncommitted bytes a new leader's history does not have."""
        assert log_position >= self.commit_position, (
            f"member {self.member_id} asked to truncate committed log: {log_position} < commit {self.commit_position}"
        )
        before = self.archive.stop_position
        self.archive_store.truncate_log(log_position)
        # Closes the truncated (last) term at log_position, as Aeron's truncateLogEntry does.
        self.recording_log.truncate_terms_after(log_position)
        self._event(
            "truncate",
            {"from": before, "to": log_position, "reason": "uncommitted entries"},
            term=leadership_term_id,
            pos=log_position,
        )

    # ------------------------------------------------------------------ inputs
    def on_message(self, src_member_id: int, channel: Channel, payload: bytes, now_ns: int) -> None:
        """Decode and dispatch one message; malformed input is ignored with a counted reason."""
        self._now_ns = now_ns
        if self.state == ConsensusModuleState.CLOSED:
            return
        try:
            msg = decode(payload)
        except DecodeError as e:
            self.ignore(f"{channel} from {src_member_id}", f"malformed: {e}")
            return
        if channel == Channel.INGRESS:
            self.on_ingress(msg, now_ns)
            return
        if channel == Channel.SERVICE:
            self.on_service_message(msg, now_ns)
            return
        handler = self._handlers.get(type(msg))
        if handler is None:
            self.ignore(f"{channel} from {src_member_id}", f"unexpected {type(msg).__name__}")
            return
        try:
            handler(self, src_member_id, msg, now_ns)
        except ElectionError as e:
            if self.election is not None:
                self.election.handle_error(now_ns, str(e))

    def on_canvass_position(self, src: int, msg: CanvassPosition, now_ns: int) -> None:
        if self.election is not None:
            self.election.on_canvass_position(msg, now_ns)
        elif self.role == Role.LEADER and msg.log_leadership_term_id <= self.leadership_term_id:
            s = self.status(msg.follower_member_id)
            if s is None:
                self.ignore("CanvassPosition", f"unknown member {msg.follower_member_id}")
                return
            s.catchup_active = False
            self._publish_tailored_new_leadership_term(s.member_id, msg.log_leadership_term_id, now_ns)

    def _publish_tailored_new_leadership_term(self, member_id: int, log_leadership_term_id: int, now_ns: int) -> None:
        if log_leadership_term_id < self.leadership_term_id:
            nxt = self.recording_log.find_term_entry(log_leadership_term_id + 1)
            if nxt is not None:
                next_term, next_base = nxt.leadership_term_id, nxt.term_base_log_position
                next_pos = nxt.log_position
                if next_pos == NULL_POSITION and nxt.leadership_term_id == self.leadership_term_id:
                    next_pos = self.archive.stop_position
            else:
                next_term, next_base, next_pos = self.leadership_term_id, self.log_term_base_position, NULL_POSITION
        else:
            next_term, next_base, next_pos = NULL_VALUE, NULL_POSITION, NULL_POSITION
        self.consensus_publisher.new_leadership_term(
            member_id,
            NewLeadershipTerm(
                log_leadership_term_id=log_leadership_term_id,
                next_leadership_term_id=next_term,
                next_term_base_log_position=next_base,
                next_log_position=next_pos,
                leadership_term_id=self.leadership_term_id,
                term_base_log_position=self.log_term_base_position,
                log_position=self.archive.stop_position,
                leader_recording_id=self.log_recording_id,
                timestamp=self.cluster_time_ms(now_ns),
                leader_member_id=self.member_id,
                log_session_id=self.log_session_id,
                app_version=APP_VERSION,
                is_startup=BooleanType.FALSE,
            ),
        )

    def on_request_vote(self, src: int, msg: RequestVote, now_ns: int) -> None:
        if self.election is not None:
            self.election.on_request_vote(msg, now_ns)
        elif msg.candidate_term_id > self.leadership_term_id:
            self.enter_election(now_ns, "unexpected vote request")

    def on_vote(self, src: int, msg: Vote, now_ns: int) -> None:
        if self.election is not None:
            self.election.on_vote(msg, now_ns)

    def on_new_leadership_term(self, src: int, msg: NewLeadershipTerm, now_ns: int) -> None:
        if (msg.app_version >> 16) != (APP_VERSION >> 16):
            self.ignore("NewLeadershipTerm", f"incompatible app_version {msg.app_version}")
            return
        if msg.leadership_term_id >= self.leadership_term_id:
            self.time_of_last_leader_update_ns = now_ns
        if self.election is not None:
            self.election.on_new_leadership_term(msg, now_ns)
        elif (
            self.role == Role.FOLLOWER
            and msg.leadership_term_id == self.leadership_term_id
            and msg.leader_member_id == self.leader_member_id
        ):
            # NLT's log_position is the leader's append position, not a commit: only a heartbeat here.
            self.time_of_last_log_update_ns = now_ns
        elif msg.leadership_term_id > self.leadership_term_id:
            self.enter_election(now_ns, "unexpected new leadership term event")

    def on_append_position(self, src: int, msg: AppendPosition, now_ns: int) -> None:
        s = self.status(msg.follower_member_id)
        if s is None:
            self.ignore("AppendPosition", f"unknown member {msg.follower_member_id}")
            return
        if self.election is not None:
            self.election.on_append_position(msg.leadership_term_id, msg.log_position, msg.follower_member_id, now_ns)
        elif self.role == Role.LEADER and msg.leadership_term_id <= self.leadership_term_id:
            s.time_of_last_append_position_ns = now_ns
            # Deviation from Aeron (which relies on in-order delivery): a position reported in an
            # older term may describe bytes since truncated, so only this term's positions count.
            if msg.leadership_term_id == self.leadership_term_id:
                s.log_position = msg.log_position
                s.leadership_term_id = msg.leadership_term_id
        else:
            return
        if self.role == Role.LEADER:
            self._on_follower_progress(s, msg, now_ns)

    def _on_follower_progress(self, s: MemberStatus, msg: AppendPosition, now_ns: int) -> None:
        """Leader: live-log join, the resend rule's progress tracking, and catch-up completion."""
        if msg.leadership_term_id != self.log_publication_term_id:
            return
        if msg.log_position > s.last_progress_position:
            s.last_progress_position = msg.log_position
            s.time_of_last_progress_ns = now_ns
        if (
            s.log_send_position == NULL_POSITION
            and msg.flags & AppendPositionFlags.CATCHUP == 0
            and msg.log_position >= self.log_term_base_position
        ):
            # Join the live log at the follower's position (Aeron: MDC destination added).
            s.log_send_position = min(msg.log_position, self.archive.stop_position)
        # trackCatchupCompletion
        if (
            s.catchup_active or msg.flags & AppendPositionFlags.CATCHUP
        ) and msg.log_position >= self.archive.stop_position:
            self.consensus_publisher.stop_catchup(s.member_id, self.log_publication_term_id, s.member_id)
            s.catchup_active = False

    def on_commit_position(self, src: int, msg: CommitPosition, now_ns: int) -> None:
        if msg.leadership_term_id >= self.leadership_term_id:
            self.time_of_last_leader_update_ns = now_ns
        if self.election is not None:
            self.election.on_commit_position(msg.leadership_term_id, msg.log_position, msg.leader_member_id, now_ns)
        elif (
            self.role == Role.FOLLOWER
            and msg.leadership_term_id == self.leadership_term_id
            and msg.leader_member_id == self.leader_member_id
        ):
            self.notified_commit_position = msg.log_position
            self.time_of_last_log_update_ns = now_ns
        elif msg.leadership_term_id > self.leadership_term_id:
            self.enter_election(now_ns, "unexpected commit position from new leader")

    def on_catchup_position(self, src: int, msg: CatchupPosition, now_ns: int) -> None:
        s = self.status(msg.follower_member_id)
        if s is None:
            self.ignore("CatchupPosition", f"unknown member {msg.follower_member_id}")
            return
        term = self.log_publication_term_id
        if self.role != Role.LEADER or term == NULL_VALUE or msg.leadership_term_id > term or s.catchup_active:
            return
        if msg.log_position > self.archive.stop_position:
            self.ignore(
                "CatchupPosition", f"position {msg.log_position} beyond leader log {self.archive.stop_position}"
            )
            return
        # Aeron starts an archive replay to the follower's catch-up endpoint; we point the follower's
        # send position at the requested position and send on the catch-up channel.
        s.catchup_active = True
        s.log_send_position = msg.log_position
        s.last_progress_position = msg.log_position
        s.time_of_last_progress_ns = now_ns

    def on_stop_catchup(self, src: int, msg: StopCatchup, now_ns: int) -> None:
        e = self.election
        term = e.leadership_term_id if e is not None else self.leadership_term_id
        if msg.leadership_term_id == term and msg.follower_member_id == self.member_id:
            self.is_catchup_active = False
            self.is_catchup_stopped = True

    def on_termination_position(self, src: int, msg: TerminationPosition, now_ns: int) -> None:
        if msg.leadership_term_id == self.leadership_term_id and self.role == Role.FOLLOWER:
            self.termination_position = msg.log_position
            self.time_of_last_log_update_ns = now_ns

    def on_termination_ack(self, src: int, msg: TerminationAck, now_ns: int) -> None:
        # Orderly termination is driven by cluster control (issue 4); record the ack for it.
        if (
            self.role == Role.LEADER
            and msg.leadership_term_id == self.leadership_term_id
            and self.termination_position != NULL_POSITION
            and msg.log_position >= self.termination_position
        ):
            s = self.status(msg.member_id)
            if s is not None:
                self.terminated_followers.add(msg.member_id)
                self._event("termination_ack", {"member": msg.member_id}, pos=msg.log_position)

    def on_log_block(self, src: int, msg: LogBlock, now_ns: int) -> None:
        """Follower: append frames that start at our append position; drop the rest."""
        if self.ctx.fault_ack_before_append:
            self._on_log_block_acked_before_append(src, msg, now_ns)
            return
        self._append_log_block(msg, now_ns)

    def _on_log_block_acked_before_append(self, src: int, msg: LogBlock, now_ns: int) -> None:
        """The deliberately broken follower of the chaos suite's fault switch: report the block's end
        as appended at once, append it only when the next block arrives."""
        held, self._unappended_block = self._unappended_block, msg
        if held is not None:
            self._append_log_block(held, now_ns)
        end = msg.start_position + len(msg.entries)
        if self.leader_member_id not in (NULL_VALUE, self.member_id) and end > self.last_append_position_sent:
            term = self.election.leadership_term_id if self.election is not None else self.leadership_term_id
            self.consensus_publisher.append_position(self.leader_member_id, term, end, self.member_id, 0)
            self.last_append_position_sent = end
            self.time_of_last_append_position_send_ns = now_ns

    def _append_log_block(self, msg: LogBlock, now_ns: int) -> None:
        e = self.election
        following_term = self.log_subscription_term_id
        if following_term == NULL_VALUE or msg.leadership_term_id != following_term:
            return  # not (yet) subscribed to this term's log: the leader resends when we report
        if msg.leader_member_id != self.leader_member_id and not (
            e is not None and msg.leader_member_id == e.leader_member_id
        ):
            self.ignore("LogBlock", f"from {msg.leader_member_id}, not our leader")
            return
        stop = self.archive.stop_position
        end = msg.start_position + len(msg.entries)
        if msg.start_position > stop or end <= stop:
            return  # a gap (lost block) or old data: wait for the leader to resend from our position
        walk = walk_frames(msg.entries, msg.start_position)
        if walk.error is not None:
            self.ignore("LogBlock", f"bad entries at {walk.end_position}: {walk.error}")
        # Keep the whole, valid frames from our stop position on; the walk above already checked them.
        fresh = [f for f in walk.frames if f.position >= stop]
        if fresh and fresh[0].position == stop:
            data = msg.entries[stop - msg.start_position : fresh[-1].end_position - msg.start_position]
            self.archive.append_walked(data, stop, fresh)
            if (e is not None and e.state == ElectionState.FOLLOWER_CATCHUP_AWAIT) or (
                self.is_catchup_active and e is not None
            ):
                self.catchup_log_joined = True
        elif self.is_catchup_active:
            self.catchup_log_joined = True
        self.time_of_last_log_update_ns = now_ns
        if e is None and self.role == Role.FOLLOWER:
            self.notified_commit_position = max(self.notified_commit_position, msg.commit_position)

    def on_log_end_of_stream(self, src: int, msg: LogEndOfStream, now_ns: int) -> None:
        if self.election is None and self.role == Role.FOLLOWER and msg.leader_member_id == self.leader_member_id:
            self.enter_election(now_ns, "leader log end of stream", graceful_closed_leader_id=msg.leader_member_id)

    def on_replay_request(self, src: int, msg: ReplayRequest, now_ns: int) -> None:
        """Archive: answer a replication/replay request with blocks of our recording."""
        if msg.recording_id != self.log_recording_id:
            self.ignore("ReplayRequest", f"unknown recording {msg.recording_id}")
            return
        stop = self.archive.stop_position
        to = stop if msg.to_position == NULL_POSITION else min(msg.to_position, stop)
        position = msg.from_position
        if position < self.archive.start_position or position > stop:
            self.ignore("ReplayRequest", f"from_position {position} outside [{self.archive.start_position}, {stop}]")
            return
        budget = max(msg.max_bytes, MAX_BLOCK_BYTES)
        sent = 0
        try:
            while position < to and sent < budget:
                data = self.archive.read(position, to, max_bytes=MAX_BLOCK_BYTES)
                if not data:
                    break
                last = position + len(data) >= to
                self.archive_publisher.replay_block(
                    src,
                    ReplayBlock(
                        correlation_id=msg.correlation_id,
                        recording_id=msg.recording_id,
                        start_position=position,
                        recording_stop_position=stop,
                        leadership_term_id=self.leadership_term_id,
                        purpose=msg.purpose,
                        flags=1 if last else 0,
                        entries=data,
                    ),
                )
                position += len(data)
                sent += len(data)
        except StoreError as e:  # a read of a bad range: say why, keep serving
            self.ignore("ReplayRequest", str(e))

    def on_replay_block(self, src: int, msg: ReplayBlock, now_ns: int) -> None:
        """Replication: append blocks that start at our stop position, up to the replication stop."""
        if self.replication_source == NULL_VALUE or src != self.replication_source:
            return
        stop = self.archive.stop_position
        if msg.start_position != stop:
            return  # out of order or duplicate: progress check re-requests from our position
        walk = walk_frames(msg.entries, msg.start_position)
        if walk.error is not None:
            self.ignore("ReplayBlock", f"bad entries at {walk.end_position}: {walk.error}")
        usable = [f for f in walk.frames if f.end_position <= self.replication_stop_position]
        if usable:
            self.archive.append_walked(msg.entries[: usable[-1].end_position - msg.start_position], stop, usable)

    def on_archive_error(self, src: int, msg: ArchiveError, now_ns: int) -> None:
        self.ignore("ArchiveError", f"from {src}: {msg.error_message}")

    _handlers: dict[type, Callable[..., None]] = {}

    # ------------------------------------------------------------------ duty cycle
    def do_work(self, now_ns: int) -> int:
        """One duty cycle: the election if one runs, else steady-state consensus work."""
        self._now_ns = now_ns
        if self.state == ConsensusModuleState.CLOSED or self.terminated:
            return 0
        work = 0
        if self.election is not None:
            # A snapshot action met while catching up or replaying is taken during the election too
            # (Aeron pauses the replay until the snapshot is done).
            work += self.snapshot_work(now_ns)
            work += self.election.do_work(now_ns)
            if self.election is not None and self.election.state == ElectionState.CLOSED:
                self._close_election(now_ns)
        else:
            work += self._consensus_work(now_ns)
        if self.role == Role.LEADER and self.log_publication_term_id != NULL_VALUE:
            work += self._send_log_blocks(now_ns)
        return work

    def _consensus_work(self, now_ns: int) -> int:
        work = 0
        if self.role == Role.LEADER:
            work += self.leader_cluster_work(now_ns)
            work += self.update_leader_position(now_ns, self.archive.stop_position, self.leadership_term_id)
            self.sweep_uncommitted(self.commit_position)
            self._consume_log(self.commit_position, is_replay=False, now_ns=now_ns)
            work += self.snapshot_work(now_ns)
            work += self.termination_work(now_ns)
            if self.terminated:
                return work
            # During an orderly termination followers stop reporting; the termination deadline governs.
            if self.termination_position == NULL_POSITION and not has_active_quorum(
                self.statuses,
                self.member_id,
                now_ns,
                self.ctx.timeouts.leader_heartbeat_timeout_ns,
                len(self.statuses),
            ):
                self.enter_election(now_ns, "inactive follower quorum")
                return work + 1
        else:
            limit = min(self.notified_commit_position, self.archive.stop_position)
            before = self.consumed_position
            self._consume_log(limit, is_replay=False, now_ns=now_ns)
            if self.consumed_position > self.commit_position:
                self._set_commit_position(self.consumed_position)
            if self.consumed_position > before:
                work += 1
            work += self.snapshot_work(now_ns)
            work += self.termination_work(now_ns)
            if self.terminated:
                return work
            work += self._send_append_position(now_ns, 0)
            if self.termination_position == NULL_POSITION and now_ns >= (
                self.time_of_last_log_update_ns + self.ctx.timeouts.leader_heartbeat_timeout_ns
            ):
                self.enter_election(now_ns, "leader heartbeat timeout")
                return work + 1
        return work

    def _send_append_position(self, now_ns: int, flags: int) -> int:
        position = self.archive.stop_position
        if self.leader_member_id == NULL_VALUE or self.leader_member_id == self.member_id:
            return 0
        if position > self.last_append_position_sent or now_ns >= (
            self.time_of_last_append_position_send_ns + self.ctx.timeouts.leader_heartbeat_interval_ns
        ):
            e = self.election
            term = e.leadership_term_id if e is not None else self.leadership_term_id
            self.consensus_publisher.append_position(self.leader_member_id, term, position, self.member_id, flags)
            self.last_append_position_sent = position
            self.time_of_last_append_position_send_ns = now_ns
            return 1
        return 0

    def _send_log_blocks(self, now_ns: int) -> int:
        """Leader: send each joined follower the log from its send position (bounded in flight)."""
        work = 0
        stop = self.archive.stop_position
        for s in self.statuses:
            if s.member_id == self.member_id or s.log_send_position == NULL_POSITION:
                continue
            acked = max(s.last_progress_position, 0)
            # Resend rule: the follower's position stopped advancing short of what we sent.
            if (
                s.log_send_position > acked
                and now_ns >= s.time_of_last_progress_ns + self.ctx.timeouts.leader_heartbeat_interval_ns
            ):
                s.log_send_position = max(acked, self.archive.start_position)
                s.time_of_last_progress_ns = now_ns
            while s.log_send_position < stop and s.log_send_position - acked < MAX_BYTES_IN_FLIGHT:
                data = self.archive.read(s.log_send_position, stop, max_bytes=MAX_BLOCK_BYTES)
                if not data:
                    break
                self.log_publisher.block(
                    s.member_id,
                    catchup=s.catchup_active,
                    leadership_term_id=self.log_publication_term_id,
                    start_position=s.log_send_position,
                    commit_position=self.commit_position,
                    leader_member_id=self.member_id,
                    log_session_id=self.log_session_id,
                    entries=data,
                )
                s.log_send_position += len(data)
                work += 1
        return work

    def _consume_log(self, limit: int, *, is_replay: bool, now_ns: int) -> None:
        """The log adapter: process entries in order up to ``limit`` (never past commit)."""
        if self.state == ConsensusModuleState.SNAPSHOT:
            limit = min(limit, self.snapshot_position)  # the adapter stops after an action until it is done
        limit = min(limit, self.archive.stop_position)
        if limit <= self.consumed_position:
            return
        frames = self.archive.read_frames(self.consumed_position, limit, max_bytes=LOG_CONSUME_LIMIT_BYTES)
        # A client's session message (most of the log) only refreshes its session's activity, and
        # only where entries are learned from the log: that case is handled inline, the rest by
        # _on_log_entry (what it does for a session message is the same).
        learn = self.role != Role.LEADER or is_replay
        sessions = self.sessions
        listeners = self.log_listeners
        fields_of = session_message_fields
        consumed = 0
        if not learn:
            # The leader consuming its own log in term: only a NewLeadershipTermEvent does anything
            # besides the listeners (_on_log_entry), found by its template id (bytes 2-3 of the header).
            nlte_low, nlte_high = NewLeadershipTermEvent.TEMPLATE_ID & 0xFF, NewLeadershipTermEvent.TEMPLATE_ID >> 8
            for f in frames:
                p = f.payload
                if len(p) < HEADER_LENGTH or (p[2] == nlte_low and p[3] == nlte_high):
                    more = self._on_log_entry(f, is_replay, now_ns)
                else:
                    for listener in listeners:
                        listener(f, is_replay)
                    more = True
                self.consumed_position = f.end_position
                consumed += 1
                if not more:
                    break
            self.forward_to_service(frames[:consumed])
            return
        for f in frames:
            fields = fields_of(f.payload)
            if fields is not None and fields[1] >= 0:
                if learn:
                    s = sessions.get(fields[1])
                    if s is not None:
                        s.time_of_last_activity_ns = now_ns
                for listener in listeners:
                    listener(f, is_replay)
                more = True
            else:
                more = self._on_log_entry(f, is_replay, now_ns)
            self.consumed_position = f.end_position
            consumed += 1
            if not more:
                break
        self.forward_to_service(frames[:consumed])

    def _on_log_entry(self, frame: Frame, is_replay: bool, now_ns: int) -> bool:
        template_id = peek_template_id(frame.payload)
        more = True
        if template_id == NewLeadershipTermEvent.TEMPLATE_ID:
            try:
                ev = NewLeadershipTermEvent.decode(frame.payload)
            except DecodeError as e:
                raise AssertionError(f"committed log entry at {frame.position} does not decode: {e}") from e
            if self.election is not None:
                self.election.on_replayed_new_leadership_term_event(
                    ev.leadership_term_id, ev.term_base_log_position, ev.log_position, now_ns
                )
            else:
                self.ensure_term_entry(ev.leadership_term_id, ev.term_base_log_position, NULL_POSITION, now_ns)
        elif self.role != Role.LEADER or is_replay:
            # The leader applied what it appended when it appended it; everyone else learns from the log.
            more = self.apply_log_entry(frame, template_id, now_ns)
        for listener in self.log_listeners:
            listener(frame, is_replay)
        return more

    def next_deadline_ns(self) -> int:
        """Absolute time at which ``do_work`` must next run."""
        now = self._now_ns
        if self.terminated or self.state == ConsensusModuleState.CLOSED:
            return now + 3600 * 1_000_000_000
        if self.election is not None:
            deadline = self.election.next_deadline_ns(now)
        else:
            deadline = now + max(self.ctx.timeouts.leader_heartbeat_interval_ns // 2, 1)
            if self.role != Role.LEADER and self.termination_position == NULL_POSITION:
                # Detect a silent leader when its heartbeat timeout expires, not up to a tick later.
                deadline = min(
                    deadline, max(now, self.time_of_last_log_update_ns + self.ctx.timeouts.leader_heartbeat_timeout_ns)
                )
            active_leader = self.role == Role.LEADER and self.state == ConsensusModuleState.ACTIVE
            timer = self.timer_service.next_deadline() if active_leader else None
            if timer is not None:
                # Timer deadlines are cluster time (ms); fire on time rather than at the next tick.
                deadline = min(deadline, max(now, timer * 1_000_000))
        if self.role == Role.LEADER and any(
            s.log_send_position != NULL_POSITION
            and s.log_send_position < self.archive.stop_position
            and s.log_send_position - max(s.last_progress_position, 0) < MAX_BYTES_IN_FLIGHT
            for s in self.statuses
            if s.member_id != self.member_id
        ):
            deadline = now
        consumable = min(self.commit_position, self.archive.stop_position)
        if self.state == ConsensusModuleState.SNAPSHOT:
            consumable = min(consumable, self.snapshot_position)  # held until the snapshot completes
        if self.consumed_position < consumable:
            deadline = now
        return deadline

    # ------------------------------------------------------------------ application input (leader)
    def offer(self, payload: bytes, now_ns: int, cluster_session_id: int = 0) -> int:
        """Leader only: append an application message; returns its end position or -1."""
        if self.role != Role.LEADER or self.election is not None or self.state != ConsensusModuleState.ACTIVE:
            return -1
        encoded = encode_session_message(
            self.leadership_term_id, cluster_session_id, self.cluster_time_ms(now_ns), payload
        )
        return self.archive.append_entry(encoded, self.leadership_term_id)


ConsensusModule._handlers = {
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
