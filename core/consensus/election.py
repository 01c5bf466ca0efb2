"""The Aeron Cluster election: every ``ElectionState``, one method per state, one ``_transition``.

Mirrors ``io.aeron.cluster.Election``. The election owns the ballot and the per-term join
choreography; the consensus module owns the log, archive and recording log, and the election
calls into it through ``ElectionHost`` exactly where Aeron's election calls
``ConsensusModuleAgent``. Protocol anomalies and timeouts raise ``ElectionError``; ``do_work``
catches it and restarts the election at INIT with ``log_position = commit position`` (Aeron's
``handleError``).

ZeroMQ stand-ins (see docs/architecture.md): Aeron's log subscription, images and MDC destinations
become "the leader sends LogBlocks to a follower from the position the follower reports"; a
follower's "image available at join position" becomes "the leader's NewLeadershipTerm for this
term is known and our log is level with its join position".
"""

from __future__ import annotations

from typing import Protocol

from clusterlab.core.archive.layout import LOG_RECORDING_ID
from clusterlab.core.codec.consensus import CanvassPosition, NewLeadershipTerm, RequestVote, Vote
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.consensus.context import (
    NULL_POSITION,
    NULL_SESSION_ID,
    NULL_VALUE,
    PROTOCOL_VERSION,
    ConsensusModuleContext,
    ElectionState,
    Role,
)
from clusterlab.core.consensus.leadership_term import new_leadership_term
from clusterlab.core.consensus.members import (
    MemberStatus,
    has_quorum_at_position,
    has_voters_at_position,
    is_quorum_leader,
    is_unanimous_candidate,
    is_unanimous_leader,
    quorum_position,
)
from clusterlab.core.consensus.node_state import NodeState
from clusterlab.core.consensus.publishers import ConsensusPublisher
from clusterlab.core.consensus.recording_log import RecordingLog


def cluster_time_ms(now_ns: int) -> int:
    """Cluster time (ClusterTimeUnit.MILLIS) for timestamps in messages and node state."""
    return now_ns // 1_000_000


class ElectionHost(Protocol):
    """What an election does to its consensus module: exactly the calls Aeron's ``Election`` makes
    on ``ConsensusModuleAgent``. Everything else it needs is passed to it explicitly."""

    @property
    def role(self) -> Role: ...
    @property
    def leadership_term_id(self) -> int: ...
    @property
    def commit_position(self) -> int: ...
    @property
    def time_of_last_leader_update_ns(self) -> int: ...
    @property
    def is_catchup_stopped(self) -> bool: ...
    @property
    def vote_promise_term_id(self) -> int: ...
    def promise_vote(self, candidate_term_id: int) -> None: ...

    # notifications
    def on_election_state(self, old: ElectionState | None, new: ElectionState, now_ns: int) -> None: ...
    def on_election_error(self, election: Election, reason: str, now_ns: int) -> None: ...
    def ignore(self, what: str, reason: str) -> None: ...
    def on_vote_placed(self, request: RequestVote, vote: Vote) -> None: ...
    def set_role(self, role: Role, now_ns: int) -> None: ...
    def set_leader(self, leader_member_id: int) -> None: ...
    def election_complete(self, election: Election, now_ns: int) -> None: ...

    # the log, leader side
    def prepare_for_new_leadership(self, log_position: int, now_ns: int) -> int: ...
    def create_log_publication(self, leadership_term_id: int, position: int) -> int: ...
    def stop_all_catchups(self) -> None: ...
    def join_log_as_leader(
        self, leadership_term_id: int, log_position: int, log_session_id: int, is_startup: bool, now_ns: int
    ) -> None: ...
    def update_leader_position(self, now_ns: int, append_position: int, leadership_term_id: int) -> int: ...
    def publish_commit_position(self, leadership_term_id: int, position: int) -> None: ...
    def append_new_leadership_term_event(
        self, leadership_term_id: int, term_base_log_position: int, log_session_id: int, now_ns: int
    ) -> bool: ...

    # the log, both sides
    def ensure_term_entry(
        self,
        initial_log_leadership_term_id: int,
        initial_term_base_log_position: int,
        leadership_term_id: int,
        term_base_log_position: int,
        log_position: int,
        now_ns: int,
    ) -> None: ...
    def truncate_log_entry(self, leadership_term_id: int, log_position: int, now_ns: int) -> None: ...
    def start_log_replay(self, from_position: int, to_position: int, now_ns: int) -> None: ...
    def poll_log_replay(self, now_ns: int) -> int: ...
    def replay_position(self) -> int: ...
    def stop_log_replay(self) -> None: ...

    # the log, follower side
    def start_replication(self, leader_member_id: int, recording_id: int, stop_position: int, now_ns: int) -> None: ...
    def poll_replication(self, now_ns: int) -> int: ...
    def replicated_position(self) -> int: ...
    def stop_replication(self) -> None: ...
    def catchup_initiated(self, leadership_term_id: int, log_session_id: int, now_ns: int) -> None: ...
    def has_log_joined(self) -> bool: ...
    def catchup_poll(self, catchup_commit_position: int, now_ns: int) -> int: ...
    def subscribe_to_log(self, leadership_term_id: int, log_session_id: int) -> None: ...
    def has_log_subscription(self) -> bool: ...
    def try_join_log_as_follower(self, log_position: int, is_startup: bool, now_ns: int) -> None: ...


FAR_PAST_NS = -(86_400 * 1_000_000_000)  # "one day in the past" so the first send in a state is immediate


E = ElectionState
# docs/protocol.md a.3 as data: (from, to) -> condition. ``_transition`` refuses anything else (an
# assert: a transition outside the table is our bug, not a peer's), and docs/election.md is
# generated from it (``python -m clusterlab.core.consensus.election``). Any state -> INIT on an error.
TRANSITIONS: dict[tuple[ElectionState, ElectionState], str] = {
    (E.INIT, E.CANVASS): "multi-member cluster, same cycle",
    (E.INIT, E.LEADER_LOG_REPLICATION): "single-member cluster",
    (E.CANVASS, E.NOMINATE): "unanimous candidate, or deadline passed and quorum candidate",
    (E.CANVASS, E.FOLLOWER_BALLOT): "RequestVote granted",
    (E.NOMINATE, E.FOLLOWER_BALLOT): "RequestVote granted",
    (E.CANDIDATE_BALLOT, E.FOLLOWER_BALLOT): "RequestVote granted (higher candidate term)",
    (E.NOMINATE, E.CANDIDATE_BALLOT): "nomination deadline reached; candidate term + 1 persisted",
    (E.CANDIDATE_BALLOT, E.LEADER_LOG_REPLICATION): "unanimous YES, or at election timeout quorum YES and no NO",
    (E.CANDIDATE_BALLOT, E.CANVASS): "election timeout without winning; or NLT for another log term",
    (E.FOLLOWER_BALLOT, E.CANVASS): "election timeout; or NLT for another log term",
    (E.CANVASS, E.FOLLOWER_LOG_REPLICATION): "NLT: missing whole terms before the leader's term",
    (E.CANDIDATE_BALLOT, E.FOLLOWER_LOG_REPLICATION): "NLT for our candidate term: missing whole terms",
    (E.FOLLOWER_BALLOT, E.FOLLOWER_LOG_REPLICATION): "NLT for our candidate term: missing whole terms",
    (E.CANVASS, E.FOLLOWER_REPLAY): "NLT: our log reaches the leader's term base",
    (E.CANDIDATE_BALLOT, E.FOLLOWER_REPLAY): "NLT for our candidate term: log reaches term base",
    (E.FOLLOWER_BALLOT, E.FOLLOWER_REPLAY): "NLT for our candidate term: log reaches term base",
    (E.LEADER_LOG_REPLICATION, E.LEADER_REPLAY): "quorum position >= append position",
    (E.LEADER_REPLAY, E.LEADER_INIT): "local replay done (or nothing to replay)",
    (E.LEADER_INIT, E.LEADER_READY): "log joined as leader, TERM entry ensured; same cycle",
    (E.LEADER_READY, E.CLOSED): "voters (or a quorum after heartbeat timeout) at position; term event appended",
    (E.FOLLOWER_LOG_REPLICATION, E.CANVASS): "replicated to stop position and leader commit covers it",
    (E.FOLLOWER_REPLAY, E.FOLLOWER_CATCHUP_INIT): "replay done, leader's log ahead of ours",
    (E.FOLLOWER_REPLAY, E.FOLLOWER_LOG_INIT): "replay done, level with the leader",
    (E.FOLLOWER_CATCHUP_INIT, E.FOLLOWER_CATCHUP_AWAIT): "CatchupPosition sent",
    (E.FOLLOWER_CATCHUP_AWAIT, E.FOLLOWER_CATCHUP): "catch-up stream joined at our position",
    (E.FOLLOWER_CATCHUP, E.FOLLOWER_LOG_INIT): "commit reached catch-up targets and StopCatchup received",
    (E.FOLLOWER_LOG_INIT, E.FOLLOWER_LOG_AWAIT): "no log subscription yet: subscribe to the live log",
    (E.FOLLOWER_LOG_INIT, E.FOLLOWER_READY): "subscription exists (catch-up path)",
    (E.FOLLOWER_LOG_AWAIT, E.FOLLOWER_READY): "live log joined at our log position",
    (E.FOLLOWER_READY, E.CLOSED): "AppendPosition sent to the leader",
}


def transition_diagram() -> str:
    """The election state diagram (Mermaid), generated from TRANSITIONS."""
    lines = ["stateDiagram-v2", "    [*] --> INIT"]
    for (src, dst), why in TRANSITIONS.items():
        lines.append(f"    {src.name} --> {dst.name}: {why}")
    lines.append("    note right of INIT: any state --> INIT on an election error or timeout")
    lines.append("    CLOSED --> [*]")
    return "\n".join(lines) + "\n"


class ElectionError(Exception):
    """A timeout or protocol anomaly inside an election: restarts it at INIT (Aeron ``ClusterEvent``)."""


class Election:
    """One election. Created at node start and whenever the module enters an election."""

    def __init__(
        self,
        host: ElectionHost,
        ctx: ConsensusModuleContext,
        statuses: list[MemberStatus],
        node_state: NodeState,
        recording_log: RecordingLog,
        publisher: ConsensusPublisher,
        *,
        is_node_startup: bool,
        leadership_term_id: int,
        term_base_log_position: int,
        log_position: int,
        append_position: int,
        graceful_closed_leader_id: int,
        now_ns: int,
    ) -> None:
        self.host = host
        self.ctx = ctx
        self.timeouts = ctx.timeouts
        self.member_id = ctx.member_id
        self._statuses = statuses
        self._status_by_id = {s.member_id: s for s in statuses}
        self._this_member = self._status_by_id[ctx.member_id]
        self.node_state = node_state
        self.recording_log = recording_log  # read only: the leader's term history for NewLeadershipTerm
        self.publisher = publisher
        self.is_node_startup = is_node_startup
        self.is_extended_canvass = is_node_startup
        self.is_first_init = True
        self.is_leader_startup = False
        self.graceful_closed_leader_id = graceful_closed_leader_id
        self.leadership_term_id = leadership_term_id
        self.log_leadership_term_id = leadership_term_id
        self.candidate_term_id = leadership_term_id
        self.term_base_log_position = term_base_log_position
        # Aeron ``initialTermBaseLogPosition``: the base of the term our log ended in when the election
        # began, for a term the recording log has no entry for (it holds only a snapshot).
        self.initial_term_base_log_position = term_base_log_position
        self.initial_log_leadership_term_id = leadership_term_id  # Aeron ``initialLogLeadershipTermId``
        self.log_position = log_position
        self.append_position = append_position
        self.leader_member_id = NULL_VALUE
        self.log_session_id = NULL_SESSION_ID
        self.leader_recording_id = NULL_VALUE
        self._init_catchup_and_replication()
        self.nomination_deadline_ns = 0
        # A live leader's term this member refused in CANVASS because it voted in a later term: it then
        # stands itself once the canvass deadline passes, even behind (Raft's answer: its higher-term
        # RequestVote pulls the refused leader and its followers into a new election). Else it waits for
        # ever for a term nobody starts (random seed 374, 5 members).
        self.refused_leader_term_id = NULL_VALUE
        self.time_of_last_state_change_ns = now_ns
        self.time_of_last_update_ns = FAR_PAST_NS
        self.time_of_last_commit_publish_ns = FAR_PAST_NS
        self.last_published_commit_position = NULL_POSITION
        self.last_append_position_sent = NULL_POSITION
        self.state = ElectionState.INIT
        self.is_state_entered = True
        self.host.on_election_state(None, ElectionState.INIT, now_ns)
        if self._is_single_member():
            self._start_single_member_leadership(leadership_term_id, log_position, now_ns)

    def _init_catchup_and_replication(self) -> None:
        """No catch-up, log replication or log replay in flight (Aeron's field initialisers)."""
        self.catchup_join_position = NULL_POSITION
        self.catchup_commit_position = 0
        self.replication_leadership_term_id = NULL_VALUE
        self.replication_stop_position = NULL_POSITION
        self.replication_term_base_log_position = NULL_POSITION
        self.replication_commit_position = 0
        self.replication_deadline_ns = 0
        self.replication_started = False
        self.replay_started = False

    def _start_single_member_leadership(self, leadership_term_id: int, log_position: int, now_ns: int) -> None:
        """Aeron: the constructor of a single-member election goes straight to leadership."""
        self.candidate_term_id = max(leadership_term_id + 1, self.node_state.candidate_term_id + 1)
        self.leadership_term_id = self.candidate_term_id
        self.leader_member_id = self.member_id
        self.node_state.update_candidate_term_id(self.candidate_term_id, log_position, cluster_time_ms(now_ns))
        self._transition(ElectionState.LEADER_LOG_REPLICATION, now_ns)

    # ------------------------------------------------------------------ helpers
    @property
    def statuses(self) -> list[MemberStatus]:
        return self._statuses

    @property
    def this_member(self) -> MemberStatus:
        return self._this_member

    def _is_single_member(self) -> bool:
        return len(self.ctx.members) == 1 and self.ctx.members[0].member_id == self.member_id

    def _member_count(self) -> int:
        return len(self.ctx.members)

    def _is_quorum_candidate(self, n: int) -> bool:
        return self.ctx.rules.is_quorum_candidate(self.statuses, self.this_member, n)

    def _quorum_member_count(self, n: int) -> int:
        """The member count a quorum of this election is counted from."""
        return self.ctx.rules.quorum_member_count(n)

    def _status(self, member_id: int) -> MemberStatus | None:
        return self._status_by_id.get(member_id)

    def _term_base_of(self, leadership_term_id: int) -> int:
        """The term's base from the recording log; without an entry, the election's initial term base
        (Aeron: a NULL replication term base stands for ``initialTermBaseLogPosition``)."""
        entry = self.recording_log.find_term_entry(leadership_term_id)
        return entry.term_base_log_position if entry is not None else self.initial_term_base_log_position

    def describe(self) -> str:
        """One canonical line for logs and reports."""
        return (
            f"Election(member={self.member_id} state={self.state.name} term={self.leadership_term_id} "
            f"candidate_term={self.candidate_term_id} log_term={self.log_leadership_term_id} "
            f"log_position={self.log_position} append_position={self.append_position} "
            f"leader={self.leader_member_id})"
        )

    def _transition(self, new_state: ElectionState, now_ns: int) -> None:
        """Aeron ``state(newState)``: the one place a state changes, with its entry actions."""
        if new_state == self.state:
            return
        old_state = self.state
        assert new_state == ElectionState.INIT or (old_state, new_state) in TRANSITIONS, (
            f"election transition {old_state.name} -> {new_state.name} is not in TRANSITIONS"
        )
        if old_state == ElectionState.CANVASS:
            self.is_extended_canvass = False
        if new_state == ElectionState.CANVASS:
            for s in self.statuses:
                s.reset_election_view()
            self.this_member.leadership_term_id = self.log_leadership_term_id
            self.this_member.log_position = self.append_position
            self.leader_member_id = NULL_VALUE
            self.host.set_role(Role.FOLLOWER, now_ns)
        elif new_state == ElectionState.CANDIDATE_BALLOT:
            self.host.set_role(Role.CANDIDATE, now_ns)
        elif new_state == ElectionState.LEADER_LOG_REPLICATION:
            self.host.set_role(Role.LEADER, now_ns)
            self.log_session_id = self.host.create_log_publication(self.leadership_term_id, self.append_position)
        elif new_state in (ElectionState.FOLLOWER_LOG_REPLICATION, ElectionState.FOLLOWER_REPLAY):
            self.host.set_role(Role.FOLLOWER, now_ns)
        self.state = new_state
        self.is_state_entered = True  # the new state's first action runs at once (a.2: "first send immediately")
        self.time_of_last_state_change_ns = now_ns
        self.time_of_last_update_ns = FAR_PAST_NS
        self.time_of_last_commit_publish_ns = FAR_PAST_NS
        self.host.on_election_state(old_state, new_state, now_ns)

    # ------------------------------------------------------------------ duty cycle
    def do_work(self, now_ns: int) -> int:
        """Run the current state's work; an ElectionError restarts the election at INIT."""
        try:
            return self._dispatch(now_ns)
        except ElectionError as e:
            self.handle_error(now_ns, str(e))
            return 1

    def handle_error(self, now_ns: int, reason: str) -> None:
        """Aeron ``handleError``: log, reset ``log_position`` to commit, force INIT."""
        self.host.on_election_error(self, reason, now_ns)
        self.log_position = self.host.commit_position
        self._transition(ElectionState.INIT, now_ns)

    def _dispatch(self, now_ns: int) -> int:
        self.is_state_entered = False
        match self.state:
            case ElectionState.INIT:
                return self._init(now_ns)
            case ElectionState.CANVASS:
                return self._canvass(now_ns)
            case ElectionState.NOMINATE:
                return self._nominate(now_ns)
            case ElectionState.CANDIDATE_BALLOT:
                return self._candidate_ballot(now_ns)
            case ElectionState.FOLLOWER_BALLOT:
                return self._follower_ballot(now_ns)
            case ElectionState.LEADER_LOG_REPLICATION:
                return self._leader_log_replication(now_ns)
            case ElectionState.LEADER_REPLAY:
                return self._leader_replay(now_ns)
            case ElectionState.LEADER_INIT:
                return self._leader_init(now_ns)
            case ElectionState.LEADER_READY:
                return self._leader_ready(now_ns)
            case ElectionState.FOLLOWER_LOG_REPLICATION:
                return self._follower_log_replication(now_ns)
            case ElectionState.FOLLOWER_REPLAY:
                return self._follower_replay(now_ns)
            case ElectionState.FOLLOWER_CATCHUP_INIT:
                return self._follower_catchup_init(now_ns)
            case ElectionState.FOLLOWER_CATCHUP_AWAIT:
                return self._follower_catchup_await(now_ns)
            case ElectionState.FOLLOWER_CATCHUP:
                return self._follower_catchup(now_ns)
            case ElectionState.FOLLOWER_LOG_INIT:
                return self._follower_log_init(now_ns)
            case ElectionState.FOLLOWER_LOG_AWAIT:
                return self._follower_log_await(now_ns)
            case ElectionState.FOLLOWER_READY:
                return self._follower_ready(now_ns)
            case ElectionState.CLOSED:
                return 0
        raise AssertionError(f"unknown election state {self.state}")

    def next_deadline_ns(self, now_ns: int) -> int:
        """When this election next needs ``do_work``: the tick, or an exact deadline that is sooner."""
        tick = min(self.timeouts.election_status_interval_ns, self.timeouts.leader_heartbeat_interval_ns) // 2
        deadline = now_ns + max(tick, 1)
        if self.state == ElectionState.NOMINATE:
            deadline = min(deadline, max(self.nomination_deadline_ns, now_ns))
        elif self.state == ElectionState.CANDIDATE_BALLOT:
            # The ballot ends on its timeout exactly (with a member down it always runs that long).
            deadline = min(deadline, max(self.time_of_last_state_change_ns + self.timeouts.election_timeout_ns, now_ns))
        if self.is_state_entered or self.state in (ElectionState.INIT, ElectionState.LEADER_INIT):
            deadline = now_ns  # a state just entered acts at once; these two always move on
        return deadline

    # ------------------------------------------------------------------ states
    def _init(self, now_ns: int) -> int:
        if self.is_first_init:
            self.is_first_init = False
            if not self.is_node_startup:
                self.append_position = self.host.prepare_for_new_leadership(self.log_position, now_ns)
        else:
            # We came back after an error: tear down whatever was in flight.
            self.host.stop_all_catchups()
            self.replication_started = False
            self.replay_started = False
            self.log_session_id = NULL_SESSION_ID
            self.append_position = self.host.prepare_for_new_leadership(self.log_position, now_ns)
        self.candidate_term_id = max(self.node_state.candidate_term_id, self.leadership_term_id)
        if self._is_single_member():
            self.candidate_term_id = max(self.leadership_term_id + 1, self.candidate_term_id + 1)
            self.leadership_term_id = self.candidate_term_id
            self.leader_member_id = self.member_id
            self.node_state.update_candidate_term_id(self.candidate_term_id, self.log_position, cluster_time_ms(now_ns))
            self._transition(ElectionState.LEADER_LOG_REPLICATION, now_ns)
        else:
            self._transition(ElectionState.CANVASS, now_ns)
        return 1

    def _canvass(self, now_ns: int) -> int:
        work = 0
        if now_ns >= self.time_of_last_update_ns + self.timeouts.election_status_interval_ns:
            self.time_of_last_update_ns = now_ns
            self._publish_canvass_position()
            work += 1
        if self.ctx.appointed_leader_id not in (NULL_VALUE, self.member_id):
            return work  # only the appointed leader may stand
        if self.is_extended_canvass:
            deadline = self.time_of_last_state_change_ns + self.timeouts.startup_canvass_timeout_ns
        else:
            deadline = self.host.time_of_last_leader_update_ns + self.timeouts.leader_heartbeat_timeout_ns
        n = self._member_count()
        if is_unanimous_candidate(self.statuses, self.this_member, self.graceful_closed_leader_id, n) or (
            now_ns >= deadline and (self._is_quorum_candidate(n) or self.refused_leader_term_id != NULL_VALUE)
        ):
            self.refused_leader_term_id = NULL_VALUE
            backoff = self.ctx.rng.randrange(max(self.timeouts.election_timeout_ns // 2, 1))
            self.nomination_deadline_ns = now_ns + backoff
            self._transition(ElectionState.NOMINATE, now_ns)
            work += 1
        return work

    def _nominate(self, now_ns: int) -> int:
        if now_ns >= self.nomination_deadline_ns:
            self.candidate_term_id = self.node_state.propose_max_candidate_term_id(
                self.candidate_term_id + 1, self.log_position, cluster_time_ms(now_ns)
            )
            for s in self.statuses:
                s.vote = None
                s.candidate_term_id = NULL_VALUE
                s.is_ballot_sent = False
            me = self.this_member
            me.candidate_term_id = self.candidate_term_id
            me.vote = True
            me.is_ballot_sent = True
            self._transition(ElectionState.CANDIDATE_BALLOT, now_ns)
            return 1
        if now_ns >= self.time_of_last_update_ns + self.timeouts.election_status_interval_ns:
            self.time_of_last_update_ns = now_ns
            self._publish_canvass_position()
            return 1
        return 0

    def _candidate_ballot(self, now_ns: int) -> int:
        n = self._member_count()
        if is_unanimous_leader(self.statuses, self.candidate_term_id, self.graceful_closed_leader_id, n):
            self._become_leader(now_ns)
            return 1
        if now_ns >= self.time_of_last_state_change_ns + self.timeouts.election_timeout_ns:
            if is_quorum_leader(self.statuses, self.candidate_term_id, self._quorum_member_count(n)):
                self._become_leader(now_ns)
            else:
                self._transition(ElectionState.CANVASS, now_ns)
            return 1
        work = 0
        for s in self.statuses:
            if s.member_id != self.member_id and not s.is_ballot_sent:
                self.publisher.request_vote(
                    s.member_id,
                    RequestVote(
                        log_leadership_term_id=self.log_leadership_term_id,
                        log_position=self.append_position,
                        candidate_term_id=self.candidate_term_id,
                        candidate_member_id=self.member_id,
                        protocol_version=PROTOCOL_VERSION,
                    ),
                )
                s.is_ballot_sent = True
                work += 1
        return work

    def _become_leader(self, now_ns: int) -> None:
        self.leader_member_id = self.member_id
        self.leadership_term_id = self.candidate_term_id
        self._transition(ElectionState.LEADER_LOG_REPLICATION, now_ns)

    def _follower_ballot(self, now_ns: int) -> int:
        if now_ns >= self.time_of_last_state_change_ns + self.timeouts.election_timeout_ns:
            self._transition(ElectionState.CANVASS, now_ns)
            return 1
        return 0

    def _leader_log_replication(self, now_ns: int) -> int:
        me = self.this_member
        me.log_position = self.append_position
        # Our own log ends in our log's term. A single member never canvasses (where this is set),
        # so without it the leader would not count itself below.
        me.leadership_term_id = self.log_leadership_term_id
        me.time_of_last_append_position_ns = now_ns
        # Deviation from Aeron (safety): only count members whose reported log ends in our log's
        # term (canvass) or who report in the new term (AppendPosition after accepting our NLT). A
        # member at the same position in an older term does not hold our bytes.
        rules, log_term, term = self.ctx.rules, self.log_leadership_term_id, self.leadership_term_id
        quorum = quorum_position(
            (s.log_position for s in self.statuses if rules.counts_reported_log(s.leadership_term_id, log_term, term)),
            self._member_count(),
        )
        work = self._publish_new_leadership_term_on_interval(now_ns)
        work += self._publish_commit_position_on_interval(quorum, now_ns)
        if quorum >= self.append_position:
            self._transition(ElectionState.LEADER_REPLAY, now_ns)
            work += 1
        return work

    def _leader_replay(self, now_ns: int) -> int:
        work = 0
        if not self.replay_started:
            self.replay_started = True
            self.is_leader_startup = self.is_node_startup
            for s in self.statuses:
                s.log_position = NULL_POSITION
                s.leadership_term_id = NULL_VALUE if s.member_id != self.member_id else self.leadership_term_id
            self.this_member.log_position = self.append_position
            self.this_member.leadership_term_id = self.leadership_term_id
            if self.log_position < self.append_position:
                self.host.start_log_replay(self.log_position, self.append_position, now_ns)
            work += 1
        if self.host.replay_position() >= self.append_position or self.log_position >= self.append_position:
            self.host.stop_log_replay()
            self.log_position = self.append_position
            self._transition(ElectionState.LEADER_INIT, now_ns)
            return work + 1
        work += self.host.poll_log_replay(now_ns)
        work += self._publish_new_leadership_term_on_interval(now_ns)
        quorum = quorum_position(
            (s.log_position for s in self.statuses if s.leadership_term_id == self.leadership_term_id),
            self._member_count(),
        )
        work += self._publish_commit_position_on_interval(quorum, now_ns)
        return work

    def _leader_init(self, now_ns: int) -> int:
        self.host.join_log_as_leader(
            self.leadership_term_id, self.log_position, self.log_session_id, self.is_node_startup, now_ns
        )
        self._ensure_term_entry(self.leadership_term_id, self.log_position, NULL_POSITION, now_ns)
        self.term_base_log_position = self.log_position
        self.log_leadership_term_id = self.leadership_term_id
        self._transition(ElectionState.LEADER_READY, now_ns)
        return 1

    def _leader_ready(self, now_ns: int) -> int:
        work = self.host.update_leader_position(now_ns, self.append_position, self.leadership_term_id)
        work += self._publish_new_leadership_term_on_interval(now_ns)
        followers_ready = has_voters_at_position(
            self.statuses, self.member_id, self.leadership_term_id, self.log_position
        ) or (
            now_ns >= self.time_of_last_state_change_ns + self.timeouts.leader_heartbeat_timeout_ns
            and has_quorum_at_position(
                self.statuses, self.member_id, self.leadership_term_id, self.log_position, self._member_count()
            )
        )
        if followers_ready and self.host.append_new_leadership_term_event(
            self.leadership_term_id, self.log_position, self.log_session_id, now_ns
        ):
            self.host.election_complete(self, now_ns)
            self._transition(ElectionState.CLOSED, now_ns)
            work += 1
        return work

    def _follower_log_replication(self, now_ns: int) -> int:
        work = 0
        if not self.replication_started:
            self.replication_started = True
            if self.append_position >= self.replication_stop_position:
                self._update_recording_log_for_replication(now_ns)
                self._transition(ElectionState.CANVASS, now_ns)
                return 1
            self.replication_deadline_ns = now_ns + self.timeouts.leader_heartbeat_timeout_ns
            self.host.start_replication(
                self.leader_member_id, self.leader_recording_id, self.replication_stop_position, now_ns
            )
            work += 1
        work += self.host.poll_replication(now_ns)  # raises ElectionError when it stops progressing
        replicated = self.host.replicated_position()
        if replicated > self.last_append_position_sent or (
            now_ns >= self.time_of_last_update_ns + self.timeouts.leader_heartbeat_interval_ns
        ):
            self.publisher.append_position(
                self.leader_member_id, self.leadership_term_id, replicated, self.member_id, 0
            )
            self.last_append_position_sent = replicated
            self.time_of_last_update_ns = now_ns
            work += 1
        if replicated >= self.replication_stop_position:
            if self.replication_commit_position >= replicated:
                self.append_position = replicated
                self.host.stop_replication()
                self._update_recording_log_for_replication(now_ns)
                self._transition(ElectionState.CANVASS, now_ns)
                return work + 1
            if now_ns >= self.replication_deadline_ns:
                raise ElectionError("timeout waiting for leader commit of replicated log")
        return work

    def _ensure_term_entry(
        self, leadership_term_id: int, term_base_log_position: int, log_position: int, now_ns: int
    ) -> None:
        """Aeron ``Election.ensureRecordingLogCoherent``: a TERM entry for ``leadership_term_id``; an empty
        recording log is back-filled from the term and base the election started from."""
        self.host.ensure_term_entry(
            self.initial_log_leadership_term_id,
            self.initial_term_base_log_position,
            leadership_term_id,
            term_base_log_position,
            log_position,
            now_ns,
        )

    def _update_recording_log_for_replication(self, now_ns: int) -> None:
        self._ensure_term_entry(
            self.replication_leadership_term_id,
            self.replication_term_base_log_position,
            self.replication_stop_position,
            now_ns,
        )
        self.log_leadership_term_id = self.replication_leadership_term_id
        self.this_member.leadership_term_id = self.log_leadership_term_id
        self.this_member.log_position = self.append_position

    def _follower_replay(self, now_ns: int) -> int:
        work = 0
        if not self.replay_started:
            self.replay_started = True
            if self.log_position < self.append_position:
                self.host.start_log_replay(self.log_position, self.append_position, now_ns)
            work += 1
        if self.host.replay_position() >= self.append_position or self.log_position >= self.append_position:
            self.host.stop_log_replay()
            self.log_position = self.append_position
            if self.catchup_join_position != NULL_POSITION:
                self._transition(ElectionState.FOLLOWER_CATCHUP_INIT, now_ns)
            else:
                self._transition(ElectionState.FOLLOWER_LOG_INIT, now_ns)
            return work + 1
        return work + self.host.poll_log_replay(now_ns)

    def _follower_catchup_init(self, now_ns: int) -> int:
        self.publisher.catchup_position(
            self.leader_member_id,
            self.leadership_term_id,
            self.log_position,
            self.member_id,
            self._this_member.member.catchup_endpoint,
        )
        self.host.catchup_initiated(self.leadership_term_id, self.log_session_id, now_ns)
        self._transition(ElectionState.FOLLOWER_CATCHUP_AWAIT, now_ns)
        return 1

    def _follower_catchup_await(self, now_ns: int) -> int:
        # The catch-up "image" is available once the first catch-up block landed at our position.
        if self.host.has_log_joined():
            self.host.try_join_log_as_follower(self.log_position, self.is_leader_startup, now_ns)
            self._transition(ElectionState.FOLLOWER_CATCHUP, now_ns)
            return 1
        if now_ns >= self.time_of_last_state_change_ns + self.timeouts.leader_heartbeat_timeout_ns:
            raise ElectionError("failed to join catchup log as follower")
        return 0

    def _follower_catchup(self, now_ns: int) -> int:
        work = self.host.catchup_poll(self.catchup_commit_position, now_ns)
        commit = self.host.commit_position
        if (
            commit >= self.catchup_join_position
            and commit >= self.catchup_commit_position
            and self.host.is_catchup_stopped
        ):
            self.append_position = commit
            self.log_position = commit
            self._transition(ElectionState.FOLLOWER_LOG_INIT, now_ns)
            return work + 1
        return work

    def _follower_log_init(self, now_ns: int) -> int:
        if self.host.has_log_subscription():
            self._transition(ElectionState.FOLLOWER_READY, now_ns)
            return 1
        if self.log_session_id != NULL_SESSION_ID:
            self.host.subscribe_to_log(self.leadership_term_id, self.log_session_id)
            self._transition(ElectionState.FOLLOWER_LOG_AWAIT, now_ns)
            return 1
        return 0

    def _follower_log_await(self, now_ns: int) -> int:
        # ZeroMQ stand-in for "the live image appeared at our position": the leader starts sending
        # from the position we report, so joining is possible as soon as the subscription exists.
        if self.host.has_log_subscription():
            self.host.try_join_log_as_follower(self.log_position, self.is_leader_startup, now_ns)
            self.append_position = self.log_position
            self._ensure_term_entry(self.leadership_term_id, self.log_position, NULL_POSITION, now_ns)
            self.log_leadership_term_id = self.leadership_term_id
            self._transition(ElectionState.FOLLOWER_READY, now_ns)
            return 1
        if now_ns >= self.time_of_last_state_change_ns + self.timeouts.leader_heartbeat_timeout_ns:
            raise ElectionError("failed to join live log as follower")
        return 0

    def _follower_ready(self, now_ns: int) -> int:
        self.publisher.append_position(
            self.leader_member_id, self.leadership_term_id, self.log_position, self.member_id, 0
        )
        self.host.election_complete(self, now_ns)
        self._transition(ElectionState.CLOSED, now_ns)
        return 1

    # ------------------------------------------------------------------ publishing
    def _publish_canvass_position(self) -> None:
        msg = CanvassPosition(
            log_leadership_term_id=self.log_leadership_term_id,
            log_position=self.append_position,
            leadership_term_id=self.leadership_term_id,
            follower_member_id=self.member_id,
            protocol_version=PROTOCOL_VERSION,
        )
        for s in self.statuses:
            if s.member_id != self.member_id:
                self.publisher.canvass_position(s.member_id, msg)

    def _publish_new_leadership_term_on_interval(self, now_ns: int) -> int:
        if now_ns < self.time_of_last_update_ns + self.timeouts.leader_heartbeat_interval_ns:
            return 0
        self.time_of_last_update_ns = now_ns
        for s in self.statuses:
            if s.member_id != self.member_id:
                self._publish_new_leadership_term(s.member_id, self.log_leadership_term_id, now_ns)
        return 1

    def _publish_new_leadership_term(self, member_id: int, log_leadership_term_id: int, now_ns: int) -> None:
        """The NLT a new leader sends; tailored to the recipient's ``log_leadership_term_id`` (b.4).
        During the election the new term starts at our append position: base = log = append."""
        self.publisher.new_leadership_term(
            member_id,
            new_leadership_term(
                self.recording_log.find_term_entry,
                log_leadership_term_id=log_leadership_term_id,
                leadership_term_id=self.leadership_term_id,
                term_base_log_position=self.append_position,
                log_position=self.append_position,
                leader_recording_id=LOG_RECORDING_ID,
                timestamp=cluster_time_ms(now_ns),
                leader_member_id=self.member_id,
                log_session_id=self.log_session_id,
                is_startup=self.is_node_startup,
            ),
        )

    def _publish_commit_position_on_interval(self, quorum_position_: int, now_ns: int) -> int:
        if quorum_position_ > self.last_published_commit_position or (
            now_ns >= self.time_of_last_commit_publish_ns + self.timeouts.leader_heartbeat_interval_ns
        ):
            self.last_published_commit_position = quorum_position_
            self.time_of_last_commit_publish_ns = now_ns
            self.host.publish_commit_position(self.host.leadership_term_id, quorum_position_)
            return 1
        return 0

    # ------------------------------------------------------------------ handlers
    def on_canvass_position(self, msg: CanvassPosition, now_ns: int) -> None:
        if self.state == ElectionState.INIT:
            self.host.ignore("CanvassPosition", "election in INIT")
            return
        if msg.follower_member_id == self.graceful_closed_leader_id:
            self.graceful_closed_leader_id = NULL_VALUE
        s = self._status(msg.follower_member_id)
        if s is None or s.member_id == self.member_id:
            self.host.ignore("CanvassPosition", f"from member {msg.follower_member_id}")
            return
        s.leadership_term_id = msg.log_leadership_term_id
        s.log_position = msg.log_position
        if self.host.role == Role.LEADER and msg.log_leadership_term_id < self.leadership_term_id:
            if self.log_session_id != NULL_SESSION_ID:
                self._publish_new_leadership_term(s.member_id, msg.log_leadership_term_id, now_ns)
        elif msg.log_leadership_term_id > self.leadership_term_id and self.state in (
            ElectionState.LEADER_LOG_REPLICATION,
            ElectionState.LEADER_READY,
        ):
            raise ElectionError("potential new election in progress")

    def on_request_vote(self, msg: RequestVote, now_ns: int) -> None:
        if self.state == ElectionState.INIT or msg.candidate_member_id == self.member_id:
            self.host.ignore("RequestVote", f"from {msg.candidate_member_id} in {self.state.name}")
            return
        if self._status(msg.candidate_member_id) is None:
            self.host.ignore("RequestVote", f"unknown candidate {msg.candidate_member_id}")
            return
        if msg.candidate_term_id <= self.candidate_term_id:
            self._place_vote(msg, False)
        elif self.ctx.rules.refuses_vote_for_log(
            self.log_leadership_term_id, self.append_position, msg.log_leadership_term_id, msg.log_position
        ):
            self.candidate_term_id = self.node_state.propose_max_candidate_term_id(
                msg.candidate_term_id, self.log_position, cluster_time_ms(now_ns)
            )
            self._place_vote(msg, False)
            if self.host.role == Role.LEADER and self.log_session_id != NULL_SESSION_ID:
                self._publish_new_leadership_term(msg.candidate_member_id, msg.log_leadership_term_id, now_ns)
            if self._left_by_its_quorum():
                # A leader whose election has not finished and whose quorum is not with it, asked to
                # vote in a later term: members that voted in that term will not follow it (their vote
                # promise), and its more recent log refuses every candidate, so nobody could win. Stand
                # again in a later term instead (the restart a CanvassPosition of a later log term causes
                # in these states). Aeron, without the vote promise, stays; seed 103 of a random counter
                # sweep on 5 members stalled that way in LEADER_LOG_REPLICATION, and buggified random
                # seeds (stalls made the followers of a leader in LEADER_READY vote in later terms) in
                # LEADER_READY.
                raise ElectionError("potential new election in progress: a later candidate term")
        elif self.state in (
            ElectionState.CANVASS,
            ElectionState.NOMINATE,
            ElectionState.CANDIDATE_BALLOT,
            ElectionState.FOLLOWER_BALLOT,
        ):
            # Durable before the vote leaves: a restarted node never votes twice in one term.
            self.candidate_term_id = self.ctx.rules.record_vote(
                self.node_state, msg.candidate_term_id, self.log_position, cluster_time_ms(now_ns)
            )
            self.host.promise_vote(msg.candidate_term_id)
            self._place_vote(msg, True)
            self._transition(ElectionState.FOLLOWER_BALLOT, now_ns)

    def _left_by_its_quorum(self) -> bool:
        """In LEADER_LOG_REPLICATION (its quorum has not replicated its log), or in LEADER_READY without a
        quorum at its log position in its term (its followers went elsewhere)."""
        if self.state == ElectionState.LEADER_LOG_REPLICATION:
            return True
        return self.state == ElectionState.LEADER_READY and not has_quorum_at_position(
            self.statuses, self.member_id, self.leadership_term_id, self.log_position, self._member_count()
        )

    def _place_vote(self, request: RequestVote, vote: bool) -> None:
        answer = Vote(
            candidate_term_id=request.candidate_term_id,
            log_leadership_term_id=self.log_leadership_term_id,
            log_position=self.append_position,
            candidate_member_id=request.candidate_member_id,
            follower_member_id=self.member_id,
            vote=BooleanType.TRUE if vote else BooleanType.FALSE,
        )
        self.host.on_vote_placed(request, answer)
        self.publisher.vote(request.candidate_member_id, answer)

    def on_vote(self, msg: Vote, now_ns: int) -> None:
        if (
            self.state != ElectionState.CANDIDATE_BALLOT
            or not self.ctx.rules.counts_vote(self.candidate_term_id, msg.candidate_term_id)
            or msg.candidate_member_id != self.member_id
        ):
            self.host.ignore("Vote", f"not for our ballot of term {self.candidate_term_id} ({self.state.name})")
            return
        s = self._status(msg.follower_member_id)
        if s is None:
            self.host.ignore("Vote", f"unknown member {msg.follower_member_id}")
            return
        s.candidate_term_id = self.candidate_term_id  # the vote's own ballot: counts_vote holds them equal
        s.leadership_term_id = msg.log_leadership_term_id
        s.log_position = msg.log_position
        s.vote = msg.vote == BooleanType.TRUE

    def on_new_leadership_term(self, msg: NewLeadershipTerm, now_ns: int) -> None:
        if self.state == ElectionState.INIT:
            self.host.ignore("NewLeadershipTerm", "election in INIT")
            return
        leader = self._status(msg.leader_member_id)
        if leader is None:
            self.host.ignore("NewLeadershipTerm", f"unknown leader {msg.leader_member_id}")
            return
        if msg.leader_member_id == self.member_id and msg.leadership_term_id == self.leadership_term_id:
            return
        if msg.leader_member_id == self.graceful_closed_leader_id:
            self.graceful_closed_leader_id = NULL_VALUE
        if self.state == ElectionState.FOLLOWER_LOG_REPLICATION and msg.leader_member_id == self.leader_member_id:
            self.replication_deadline_ns = now_ns + self.timeouts.leader_heartbeat_timeout_ns
        # In CANVASS only a term at least the one this member last voted for another member in: that vote
        # for term T promises to follow no leader of an earlier term (Raft's rule). A stalled leader of an
        # older term would otherwise make it commit entries the new leader lacks. Its own lost candidacy,
        # or a vote it denied, promises nothing: holding off then would wait for ever for a term nobody
        # starts (random seed 216: a member behind, in CANVASS below its candidate term).
        keeps_promise = self.ctx.rules.keeps_vote_promise(msg.leadership_term_id, self.host.vote_promise_term_id)
        acceptable = (self.state == ElectionState.CANVASS and keeps_promise) or (
            self.state in (ElectionState.FOLLOWER_BALLOT, ElectionState.CANDIDATE_BALLOT)
            and msg.leadership_term_id == self.candidate_term_id
        )
        if not acceptable:
            if self.state == ElectionState.CANVASS and not keeps_promise:
                self.refused_leader_term_id = msg.leadership_term_id
            self.host.ignore("NewLeadershipTerm", f"term {msg.leadership_term_id} in {self.state.name}")
            return
        if msg.log_leadership_term_id != self.log_leadership_term_id:
            # Different view of which term our log ends in: keep canvassing; the leader answers
            # our CanvassPosition with an NLT tailored to our log_leadership_term_id.
            self._transition(ElectionState.CANVASS, now_ns)
            return
        if (
            msg.next_term_base_log_position != NULL_POSITION
            and msg.next_term_base_log_position < self.append_position
            and self.ctx.rules.truncates_divergent_tail()
        ):
            self.host.truncate_log_entry(self.log_leadership_term_id, msg.next_term_base_log_position, now_ns)
            self.append_position = msg.next_term_base_log_position
            raise ElectionError(
                f"truncated log to {msg.next_term_base_log_position} for term {self.log_leadership_term_id}"
            )
        self.leader_member_id = msg.leader_member_id
        self.is_leader_startup = msg.is_startup == BooleanType.TRUE
        self.leadership_term_id = msg.leadership_term_id
        self.candidate_term_id = max(self.candidate_term_id, msg.leadership_term_id)
        self.log_session_id = msg.log_session_id
        self.leader_recording_id = msg.leader_recording_id
        self.catchup_join_position = msg.log_position if self.append_position < msg.log_position else NULL_POSITION
        self.host.set_leader(msg.leader_member_id)
        if self.append_position < msg.term_base_log_position:
            if msg.next_leadership_term_id == NULL_VALUE:
                raise ElectionError("missing next leadership term in NewLeadershipTerm")
            if self.append_position < msg.next_term_base_log_position:
                self.replication_leadership_term_id = self.log_leadership_term_id
                self.replication_stop_position = msg.next_term_base_log_position
                self.replication_term_base_log_position = self._term_base_of(self.log_leadership_term_id)
                self._enter_follower_log_replication(now_ns)
            elif self.append_position == msg.next_term_base_log_position and msg.next_log_position != NULL_POSITION:
                self.replication_leadership_term_id = msg.next_leadership_term_id
                self.replication_stop_position = msg.next_log_position
                self.replication_term_base_log_position = msg.next_term_base_log_position
                self._enter_follower_log_replication(now_ns)
        else:
            self.replay_started = False
            self._transition(ElectionState.FOLLOWER_REPLAY, now_ns)

    def _enter_follower_log_replication(self, now_ns: int) -> None:
        self.replication_started = False
        self.replication_commit_position = 0
        self.last_append_position_sent = NULL_POSITION
        self._transition(ElectionState.FOLLOWER_LOG_REPLICATION, now_ns)

    def on_append_position(self, leadership_term_id: int, log_position: int, member_id: int, now_ns: int) -> None:
        if self.state == ElectionState.INIT:
            self.host.ignore("AppendPosition", "election in INIT")
            return
        s = self._status(member_id)
        if s is None or leadership_term_id > self.leadership_term_id:
            self.host.ignore("AppendPosition", f"from {member_id} in term {leadership_term_id}")
            return
        s.time_of_last_append_position_ns = now_ns
        if leadership_term_id != self.leadership_term_id:
            return  # a stale term's position may describe truncated bytes (see module.on_append_position)
        s.leadership_term_id = leadership_term_id
        s.log_position = log_position
        s.time_of_last_append_position_ns = now_ns

    def on_commit_position(
        self, leadership_term_id: int, log_position: int, leader_member_id: int, now_ns: int
    ) -> None:
        if self.state == ElectionState.INIT:
            self.host.ignore("CommitPosition", "election in INIT")
            return
        if (
            self.state == ElectionState.FOLLOWER_CATCHUP
            and leadership_term_id == self.leadership_term_id
            and leader_member_id == self.leader_member_id
            and self.catchup_join_position != NULL_POSITION
        ):
            self.catchup_commit_position = max(self.catchup_commit_position, log_position)
        elif self.state == ElectionState.FOLLOWER_LOG_REPLICATION and leader_member_id == self.leader_member_id:
            self.replication_commit_position = max(self.replication_commit_position, log_position)
            self.replication_deadline_ns = now_ns + self.timeouts.leader_heartbeat_timeout_ns
        elif self.state == ElectionState.LEADER_READY and leadership_term_id > self.leadership_term_id:
            raise ElectionError("new leader detected due to commit position")

    def on_replayed_new_leadership_term_event(
        self, leadership_term_id: int, term_base_log_position: int, log_position: int, now_ns: int
    ) -> None:
        """A NewLeadershipTermEvent met while replaying the local log (FOLLOWER_REPLAY / LEADER_REPLAY)."""
        self._ensure_term_entry(leadership_term_id, term_base_log_position, NULL_POSITION, now_ns)
        if self.state in (ElectionState.FOLLOWER_REPLAY, ElectionState.FOLLOWER_CATCHUP):
            # Our log now ends in this term: canvass and NLT matching must say so, or a later NLT
            # for the older term would ask us to truncate what we just committed.
            self.log_leadership_term_id = max(self.log_leadership_term_id, leadership_term_id)


if __name__ == "__main__":  # python -m clusterlab.core.consensus.election > docs/election.md (the body)
    print(transition_diagram(), end="")
