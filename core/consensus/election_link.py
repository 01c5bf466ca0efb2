"""The consensus module's side of an election (Aeron: the ``ConsensusModuleAgent`` methods its
``Election`` calls): entering an election, and every log operation an election state performs,
composed from the subsystems that own the state (term replication, catch-up, log replication,
the log adapter, sessions, timers, snapshots, termination, cluster control).

``ElectionLink`` is the ``ElectionHost`` an ``Election`` is given, so the election reaches the
module through this one narrow surface.
"""

from __future__ import annotations

from clusterlab.core.archive.archive import Archive
from clusterlab.core.archive.layout import LOG_RECORDING_ID
from clusterlab.core.codec.consensus import CanvassPosition, CommitPosition, NewLeadershipTerm, RequestVote, Vote
from clusterlab.core.codec.enums import AppendPositionFlags, BooleanType, ClusterTimeUnit
from clusterlab.core.codec.framing import framed_length
from clusterlab.core.codec.log_events import NewLeadershipTermEvent
from clusterlab.core.codec.transport import LogEndOfStream
from clusterlab.core.consensus.catchup import Catchup
from clusterlab.core.consensus.client_sessions import ClientSessions
from clusterlab.core.consensus.cluster_control import ClusterControl
from clusterlab.core.consensus.context import (
    APP_VERSION,
    NULL_POSITION,
    NULL_VALUE,
    ConsensusModuleContext,
    ConsensusModuleState,
    ElectionState,
    Role,
)
from clusterlab.core.consensus.election import Election, cluster_time_ms
from clusterlab.core.consensus.leadership_term import new_leadership_term
from clusterlab.core.consensus.log_adapter import LogAdapter
from clusterlab.core.consensus.log_replication import LogReplication
from clusterlab.core.consensus.module_state import MAX_LONG, ModuleState
from clusterlab.core.consensus.node_state import NodeState
from clusterlab.core.consensus.publishers import ConsensusPublisher
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.consensus.service_link import ServiceLink
from clusterlab.core.consensus.snapshots import Snapshots
from clusterlab.core.consensus.term_replication import TermReplication
from clusterlab.core.consensus.termination import Termination


class ElectionLink:
    """Implements ``ElectionHost`` over the subsystems (see module docstring)."""

    def __init__(
        self,
        state: ModuleState,
        ctx: ConsensusModuleContext,
        archive_store: Archive,
        recording_log: RecordingLog,
        node_state: NodeState,
        publisher: ConsensusPublisher,
        term_replication: TermReplication,
        catchup: Catchup,
        log_replication: LogReplication,
        log_adapter: LogAdapter,
        services: ServiceLink,
        client_sessions: ClientSessions,
        snapshots: Snapshots,
        termination: Termination,
        control: ClusterControl,
    ) -> None:
        self._s = state
        self._ctx = ctx
        self._archive_store = archive_store
        self._archive = archive_store.recording
        self._recording_log = recording_log
        self._node_state = node_state
        # After a restart the persisted candidate term stands in for the vote promise: who got that
        # vote is not kept, so it may have gone to another member.
        state.vote_promise_term_id = max(state.vote_promise_term_id, node_state.candidate_term_id)
        self._publisher = publisher
        self._term_replication = term_replication
        self._catchup = catchup
        self._log_replication = log_replication
        self._log_adapter = log_adapter
        self._services = services
        self._client_sessions = client_sessions
        self._snapshots = snapshots
        self._termination = termination
        self._control = control
        self.election_count = 0
        # Where the log recording stopped unexpectedly (Aeron logRecordingStopPosition after a STOP
        # signal); None while it records. Nothing is appended while it is set.
        self.log_recording_stop_position: int | None = None

    # ------------------------------------------------------------------ state the election reads
    @property
    def role(self) -> Role:
        return self._s.role

    @property
    def leadership_term_id(self) -> int:
        return self._s.leadership_term_id

    @property
    def commit_position(self) -> int:
        return self._s.commit_position

    @property
    def time_of_last_leader_update_ns(self) -> int:
        return self._s.time_of_last_leader_update_ns

    @property
    def vote_promise_term_id(self) -> int:
        """The term below which this member follows no leader (ModuleState.vote_promise_term_id)."""
        return self._s.vote_promise_term_id

    def promise_vote(self, candidate_term_id: int) -> None:
        st = self._s
        st.vote_promise_term_id = max(st.vote_promise_term_id, candidate_term_id)

    @property
    def is_catchup_stopped(self) -> bool:
        return self._catchup.is_catchup_stopped

    def ignore(self, what: str, reason: str) -> None:
        self._s.ignore(what, reason)

    def on_vote_placed(self, request: RequestVote, vote: Vote) -> None:
        """A ``vote`` event: the ballot and both logs as the voter compared them (the trace's vote checks)."""
        self._s.event(
            "vote",
            {
                "candidate": request.candidate_member_id,
                "vote": vote.vote == BooleanType.TRUE,
                "log_leadership_term_id": vote.log_leadership_term_id,
                "candidate_log_leadership_term_id": request.log_leadership_term_id,
                "candidate_log_position": request.log_position,
            },
            term=request.candidate_term_id,
            pos=vote.log_position,
        )

    # ------------------------------------------------------------------ entering an election
    def start_election(
        self,
        now_ns: int,
        *,
        is_node_startup: bool,
        leadership_term_id: int,
        term_base_log_position: int,
        graceful_closed_leader_id: int,
        reason: str,
    ) -> None:
        """Create the election (node startup or ``enter_election``); the member is a follower meanwhile."""
        st = self._s
        assert st.election is None, "an election is already running"
        self.election_count += 1
        st.event(
            "election_start",
            {"reason": reason, "election_count": self.election_count},
            term=leadership_term_id,
            pos=st.commit_position,
        )
        self._services.end_log_on_step_down()
        st.role = Role.FOLLOWER
        st.election = Election(
            self,
            self._ctx,
            st.statuses,
            self._node_state,
            self._recording_log,
            self._publisher,
            is_node_startup=is_node_startup,
            leadership_term_id=leadership_term_id,
            term_base_log_position=term_base_log_position,
            log_position=st.commit_position,
            append_position=self._archive.stop_position,
            graceful_closed_leader_id=graceful_closed_leader_id,
            now_ns=now_ns,
        )

    def enter_election(self, now_ns: int, reason: str, graceful_closed_leader_id: int = NULL_VALUE) -> None:
        """Aeron ``enterElection``: leave steady state and elect (heartbeat timeout, higher term …)."""
        st = self._s
        if st.election is not None or st.terminated:
            return
        self.start_election(
            now_ns,
            is_node_startup=False,
            leadership_term_id=st.leadership_term_id,
            term_base_log_position=self.term_base_of(st.leadership_term_id),
            graceful_closed_leader_id=graceful_closed_leader_id,
            reason=reason,
        )

    # ------------------------------------------------------------------ the log recording stops
    @property
    def is_log_recording_stopped(self) -> bool:
        return self.log_recording_stop_position is not None

    def on_log_recording_stopped(self, position: int, now_ns: int) -> None:
        """Aeron ``pollArchiveEvents`` on the log recording's STOP signal: remember where it stopped and,
        ACTIVE outside an election, enter one (any role). An election whose INIT is still to come resumes
        the recording; one past INIT closes first, then the member elects again. A stop at a position the
        recording does not end at is not this recording's and is ignored."""
        st = self._s
        if st.terminated or st.state == ConsensusModuleState.CLOSED:
            return
        if position != self._archive.stop_position:
            st.ignore(
                "log recording stopped", f"at {position}, but the recording ends at {self._archive.stop_position}"
            )
            return
        self.log_recording_stop_position = position
        st.log(f"member {st.member_id} log recording stopped at {position} ({st.role.name} {st.state.name})")
        self.enter_election_if_log_recording_stopped(now_ns)

    def enter_election_if_log_recording_stopped(self, now_ns: int) -> int:
        """Aeron ``enterElection(isEos, "log recording stopped: eos=" + isEos)``, counted as a ClusterEvent
        error, when the recording is stopped and the module is ACTIVE with no election (a stop met while
        SUSPENDED or snapshotting waits for ACTIVE: the member appends nothing meanwhile). Returns 1 if it
        entered the election. ``eos`` is false: a follower whose leader's stream ended has entered its
        election on the LogEndOfStream already, and a leader has no log image."""
        st = self._s
        if (
            self.log_recording_stop_position is None
            or st.election is not None
            or st.state != ConsensusModuleState.ACTIVE
            or st.terminated
            or self._termination.is_pending
        ):
            return 0
        reason = "log recording stopped: eos=false"
        st.error("election", reason, st.leadership_term_id, self.log_recording_stop_position)
        self.enter_election(now_ns, reason)
        return 1

    def term_base_of(self, leadership_term_id: int) -> int:
        entry = self._recording_log.find_term_entry(leadership_term_id)
        return entry.term_base_log_position if entry is not None else 0

    # ------------------------------------------------------------------ election messages
    # Routed to the running election, or, outside one, answered or taken as a reason to elect.
    def on_canvass_position(self, src: int, msg: CanvassPosition, now_ns: int) -> None:
        st = self._s
        if st.election is not None:
            st.election.on_canvass_position(msg, now_ns)
            return
        if st.role != Role.LEADER or msg.log_leadership_term_id > st.leadership_term_id:
            # Only a leader answers, and only canvasses it can place in its history.
            st.ignore("CanvassPosition", f"not a leader of log term {msg.log_leadership_term_id}")
            return
        s = st.status(msg.follower_member_id)
        if s is None:
            st.ignore("CanvassPosition", f"unknown member {msg.follower_member_id}")
            return
        s.catchup_active = False
        term_replication = self._term_replication
        self._publisher.new_leadership_term(
            s.member_id,
            new_leadership_term(
                self._recording_log.find_term_entry,
                log_leadership_term_id=msg.log_leadership_term_id,
                leadership_term_id=st.leadership_term_id,
                term_base_log_position=term_replication.log_term_base_position,
                log_position=self._archive.stop_position,
                leader_recording_id=LOG_RECORDING_ID,
                timestamp=cluster_time_ms(now_ns),
                leader_member_id=self._s.member_id,
                log_session_id=term_replication.log_session_id,
                is_startup=False,
            ),
        )

    def on_request_vote(self, src: int, msg: RequestVote, now_ns: int) -> None:
        st = self._s
        if st.election is not None:
            st.election.on_request_vote(msg, now_ns)
        elif msg.candidate_term_id > st.leadership_term_id:
            self.enter_election(now_ns, "unexpected vote request")
        else:
            st.ignore("RequestVote", f"candidate term {msg.candidate_term_id} not above ours")

    def on_vote(self, src: int, msg: Vote, now_ns: int) -> None:
        e = self._s.election
        if e is None:
            self._s.ignore("Vote", "no election runs")  # a late vote: our ballot is over
            return
        e.on_vote(msg, now_ns)

    def _followable_term(self) -> int:
        """The lowest term whose leader counts as heard from. In an election, a leader of a term below the one
        this member voted in is one it will not follow (Election.on_new_leadership_term); that leader must not
        hold off its own nomination either, or both sides wait for ever."""
        st = self._s
        e = st.election
        return st.leadership_term_id if e is None else max(st.leadership_term_id, st.vote_promise_term_id)

    def on_new_leadership_term(self, src: int, msg: NewLeadershipTerm, now_ns: int) -> None:
        st = self._s
        if (msg.app_version >> 16) != (APP_VERSION >> 16):
            st.ignore("NewLeadershipTerm", f"incompatible app_version {msg.app_version}")
            return
        if msg.leadership_term_id >= self._followable_term():
            st.time_of_last_leader_update_ns = now_ns
        if st.election is not None:
            st.election.on_new_leadership_term(msg, now_ns)
        elif (
            st.role == Role.FOLLOWER
            and msg.leadership_term_id == st.leadership_term_id
            and msg.leader_member_id == st.leader_member_id
        ):
            # NLT's log_position is the leader's append position, not a commit: only a heartbeat here.
            st.time_of_last_log_update_ns = now_ns
        elif msg.leadership_term_id > st.leadership_term_id:
            self.enter_election(now_ns, "unexpected new leadership term event")
        else:
            st.ignore("NewLeadershipTerm", f"stale term {msg.leadership_term_id} from {msg.leader_member_id}")

    def on_commit_position(self, src: int, msg: CommitPosition, now_ns: int) -> None:
        st = self._s
        if msg.leadership_term_id >= self._followable_term():
            st.time_of_last_leader_update_ns = now_ns
        if st.election is not None:
            st.election.on_commit_position(msg.leadership_term_id, msg.log_position, msg.leader_member_id, now_ns)
        elif self._term_replication.on_commit_position(msg, now_ns):
            pass  # a follower's commit notification from its leader
        elif msg.leadership_term_id > st.leadership_term_id:
            self.enter_election(now_ns, "unexpected commit position from new leader")
        else:
            st.ignore("CommitPosition", f"not from our leader in term {msg.leadership_term_id}")

    def on_log_end_of_stream(self, src: int, msg: LogEndOfStream, now_ns: int) -> None:
        st = self._s
        if st.election is not None or st.role != Role.FOLLOWER or msg.leader_member_id != st.leader_member_id:
            st.ignore("LogEndOfStream", f"not our leader's stream ({msg.leader_member_id})")
            return
        self.enter_election(now_ns, "leader log end of stream", graceful_closed_leader_id=msg.leader_member_id)

    # ------------------------------------------------------------------ notifications
    def on_election_state(self, old: ElectionState | None, new: ElectionState, now_ns: int) -> None:
        st = self._s
        e = st.election
        term = e.leadership_term_id if e is not None else st.leadership_term_id
        st.event(
            "election_state",
            {"from": old.name if old is not None else None, "to": new.name},
            term=term,
            pos=e.log_position if e is not None else st.commit_position,
        )

    def on_election_error(self, election: Election, reason: str, now_ns: int) -> None:
        self._s.log(f"member {self._s.member_id} election error in {election.state.name}: {reason}")
        self._s.error(election.state.name, reason, term=election.leadership_term_id)

    def set_role(self, role: Role, now_ns: int) -> None:
        self._s.set_role(role)

    def set_leader(self, leader_member_id: int) -> None:
        self._s.set_leader(leader_member_id)

    def election_complete(self, election: Election, now_ns: int) -> None:
        """Aeron ``electionComplete``: adopt the term, reset timers, open for business."""
        st = self._s
        st.set_leadership_term_id(election.leadership_term_id)
        st.set_leader(election.leader_member_id)
        st.time_of_last_leader_update_ns = now_ns
        self._term_replication.on_election_complete(now_ns)
        if st.role == Role.LEADER:
            # Leader side of e.9: keep sessions (NewLeaderEvent) or, after a whole-cluster restart, close them.
            self._control.on_leader_election_complete()
            self._client_sessions.on_leader_election_complete(election.is_node_startup, now_ns)
        # The module state, and how far the log adapter has applied the committed log that decides it
        # (the trace check module_state_follows_committed_log compares the two).
        st.event(
            "election_complete",
            {
                "leader": election.leader_member_id,
                "role": st.role.name,
                "module_state": st.state.name,
                "consumed_position": st.consumed_position,
            },
            term=election.leadership_term_id,
            pos=election.log_position,
        )

    # ------------------------------------------------------------------ the log, leader side
    def prepare_for_new_leadership(self, log_position: int, now_ns: int) -> int:
        """Aeron ``prepareForNewLeadership``: drop the log stream, go back to the commit point.

        Returns the append position (the local recording's stop position). A log recording that
        stopped unexpectedly resumes from where it stopped (Aeron's election restarts it with
        ``startLogRecording``, which extends the last term's recording)."""
        st = self._s
        if self.log_recording_stop_position is not None:
            st.log(f"member {st.member_id} log recording resumed at {self.log_recording_stop_position}")
            self.log_recording_stop_position = None
        self._services.end_log_on_step_down()
        st.role = Role.FOLLOWER
        self._term_replication.reset()
        self._catchup.reset()
        self._log_adapter.stop_log_replay()
        self._log_replication.stop()
        self._archive.flush()
        # The log adapter never ran ahead of commit, so nothing processed needs undoing here;
        # each subsystem restores the state it kept for uncommitted entries.
        st.advance_commit_position(min(log_position, st.consumed_position))
        position = st.commit_position
        self._client_sessions.restore_uncommitted(position)
        self._services.restore_uncommitted(position)
        self._snapshots.restore_uncommitted(position)
        self._termination.restore_uncommitted(position)
        self._control.restore_uncommitted(position)
        return self._archive.stop_position

    def create_log_publication(self, leadership_term_id: int, position: int) -> int:
        return self._term_replication.create_log_publication(leadership_term_id, position)

    def stop_all_catchups(self) -> None:
        self._term_replication.stop_all_catchups()

    def join_log_as_leader(
        self, leadership_term_id: int, log_position: int, log_session_id: int, is_startup: bool, now_ns: int
    ) -> None:
        st = self._s
        st.set_leadership_term_id(leadership_term_id)
        st.advance_commit_position(log_position)
        st.event("leader", {"log_session_id": log_session_id}, term=leadership_term_id, pos=log_position)
        self._services.send_join_log(st.consumed_position, MAX_LONG, is_startup)

    def update_leader_position(self, now_ns: int, append_position: int, leadership_term_id: int) -> int:
        return self._term_replication.update_leader_position(now_ns, append_position, leadership_term_id)

    def publish_commit_position(self, leadership_term_id: int, position: int) -> None:
        self._term_replication.publish_commit_position(leadership_term_id, position)

    def append_new_leadership_term_event(
        self, leadership_term_id: int, term_base_log_position: int, log_session_id: int, now_ns: int
    ) -> bool:
        """LEADER_READY: the first entry of the term (its log_position is the position after it)."""
        position = self._archive.stop_position

        def event(log_position: int) -> NewLeadershipTermEvent:
            return NewLeadershipTermEvent(
                leadership_term_id=leadership_term_id,
                log_position=log_position,
                timestamp=cluster_time_ms(now_ns),
                term_base_log_position=term_base_log_position,
                leader_member_id=self._s.member_id,
                log_session_id=log_session_id,
                time_unit=ClusterTimeUnit.MILLIS,
                app_version=APP_VERSION,
            )

        end = position + framed_length(len(event(0).encode()))
        self._archive.append_entry(event(end).encode(), leadership_term_id)
        return True

    # ------------------------------------------------------------------ the log, both sides
    def ensure_term_entry(
        self,
        initial_log_leadership_term_id: int,
        initial_term_base_log_position: int,
        leadership_term_id: int,
        term_base_log_position: int,
        log_position: int,
        now_ns: int,
    ) -> None:
        self._recording_log.ensure_coherent(
            LOG_RECORDING_ID,
            initial_log_leadership_term_id,
            initial_term_base_log_position,
            leadership_term_id,
            term_base_log_position,
            log_position,
            cluster_time_ms(now_ns),
        )

    def truncate_log_entry(self, leadership_term_id: int, log_position: int, now_ns: int) -> None:
        """Aeron ``truncateLogEntry``: drop uncommitted bytes a new leader's history does not have."""
        st = self._s
        assert log_position >= st.commit_position, (
            f"member {self._s.member_id} asked to truncate committed log: {log_position} < commit {st.commit_position}"
        )
        before = self._archive.stop_position
        self._archive_store.truncate_log(log_position)
        self._term_replication.truncations += 1
        # Closes the truncated (last) term at log_position, as Aeron's truncateLogEntry does.
        self._recording_log.truncate_terms_after(log_position)
        st.event(
            "truncate",
            {"from": before, "to": log_position, "reason": "uncommitted entries"},
            term=leadership_term_id,
            pos=log_position,
        )

    def start_log_replay(self, from_position: int, to_position: int, now_ns: int) -> None:
        self._log_adapter.start_log_replay(from_position, to_position, now_ns)

    def poll_log_replay(self, now_ns: int) -> int:
        return self._log_adapter.poll_log_replay(now_ns)

    def replay_position(self) -> int:
        return self._log_adapter.replay_position()

    def stop_log_replay(self) -> None:
        self._log_adapter.stop_log_replay()

    # ------------------------------------------------------------------ the log, follower side
    def start_replication(self, leader_member_id: int, recording_id: int, stop_position: int, now_ns: int) -> None:
        self._log_replication.start(leader_member_id, recording_id, stop_position, now_ns)

    def poll_replication(self, now_ns: int) -> int:
        return self._log_replication.poll(now_ns)

    def replicated_position(self) -> int:
        return self._log_replication.replicated_position()

    def stop_replication(self) -> None:
        self._log_replication.stop()

    def catchup_initiated(self, leadership_term_id: int, log_session_id: int, now_ns: int) -> None:
        self._term_replication.subscribe_to_log(leadership_term_id, log_session_id)
        self._catchup.initiated(now_ns)

    def has_log_joined(self) -> bool:
        return self._catchup.has_log_joined()

    def catchup_poll(self, catchup_commit_position: int, now_ns: int) -> int:
        """FOLLOWER_CATCHUP: consume committed catch-up data and report progress (flag CATCHUP)."""
        st = self._s
        work = 0
        limit = min(self._archive.stop_position, max(catchup_commit_position, st.commit_position))
        before = st.consumed_position
        self._log_adapter.consume(limit, is_replay=False, now_ns=now_ns)
        if st.consumed_position > st.commit_position:
            st.set_commit_position(st.consumed_position)
        if st.consumed_position > before:
            work += 1
        work += self._term_replication.send_append_position(now_ns, AppendPositionFlags.CATCHUP)
        self._catchup.track_progress(self._archive.stop_position + st.commit_position, now_ns)
        return work

    def subscribe_to_log(self, leadership_term_id: int, log_session_id: int) -> None:
        self._term_replication.subscribe_to_log(leadership_term_id, log_session_id)

    def has_log_subscription(self) -> bool:
        return self._term_replication.has_log_subscription()

    def try_join_log_as_follower(self, log_position: int, is_startup: bool, now_ns: int) -> None:
        self._s.time_of_last_log_update_ns = now_ns
        self._services.send_join_log(self._s.consumed_position, MAX_LONG, is_startup)

    def on_term_event(self, ev: NewLeadershipTermEvent, now_ns: int) -> None:
        """A NewLeadershipTermEvent in the committed log: the recording log learns the term."""
        e = self._s.election
        if e is not None:
            e.on_replayed_new_leadership_term_event(
                ev.leadership_term_id, ev.term_base_log_position, ev.log_position, now_ns
            )
        else:
            self.ensure_term_entry(
                NULL_VALUE, 0, ev.leadership_term_id, ev.term_base_log_position, NULL_POSITION, now_ns
            )
