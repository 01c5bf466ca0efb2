"""The state every consensus subsystem shares: who we are, our role and term, and the log positions.

TigerBeetle's ``Replica`` fields / Aeron's ``ConsensusModuleAgent`` fields that every part reads.
Each subsystem (log replication, catch-up, sessions, snapshots …) receives this object plus only
the collaborators it needs; it owns its own state. ``ignore`` and ``event`` are the one way a
subsystem reports a dropped input or a trace event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clusterlab.core.consensus.context import (
    NULL_VALUE,
    ConsensusModuleContext,
    ConsensusModuleState,
    ElectionState,
    Role,
)
from clusterlab.core.consensus.members import MemberStatus
from clusterlab.core.consensus.senders import BODY_MEMBER_MISMATCH

if TYPE_CHECKING:
    from clusterlab.core.consensus.election import Election

MAX_LONG = (1 << 63) - 1

# The role each election state implies (INIT and FOLLOWER_BALLOT may still carry the role of the
# state the election came from; CLOSED hands over to election_complete).
_ROLE_OF_ELECTION_STATE = {
    ElectionState.CANVASS: Role.FOLLOWER,
    ElectionState.NOMINATE: Role.FOLLOWER,
    ElectionState.CANDIDATE_BALLOT: Role.CANDIDATE,
    ElectionState.LEADER_LOG_REPLICATION: Role.LEADER,
    ElectionState.LEADER_REPLAY: Role.LEADER,
    ElectionState.LEADER_INIT: Role.LEADER,
    ElectionState.LEADER_READY: Role.LEADER,
    ElectionState.FOLLOWER_LOG_REPLICATION: Role.FOLLOWER,
    ElectionState.FOLLOWER_REPLAY: Role.FOLLOWER,
    ElectionState.FOLLOWER_CATCHUP_INIT: Role.FOLLOWER,
    ElectionState.FOLLOWER_CATCHUP_AWAIT: Role.FOLLOWER,
    ElectionState.FOLLOWER_CATCHUP: Role.FOLLOWER,
    ElectionState.FOLLOWER_LOG_INIT: Role.FOLLOWER,
    ElectionState.FOLLOWER_LOG_AWAIT: Role.FOLLOWER,
    ElectionState.FOLLOWER_READY: Role.FOLLOWER,
}


class ModuleState:
    """Shared consensus state of one member (see module docstring)."""

    def __init__(self, ctx: ConsensusModuleContext) -> None:
        if ctx.member(ctx.member_id) is None:
            raise ValueError(
                f"member {ctx.member_id} is not in the cluster members {[m.member_id for m in ctx.members]}"
            )
        self.member_id = ctx.member_id
        self.rules = ctx.rules  # the protocol's rules (clusterlab.core.consensus.rules)
        self.statuses = [MemberStatus(m) for m in ctx.members]
        self._status_by_id = {s.member_id: s for s in self.statuses}
        self.this_member = self._status_by_id[self.member_id]
        self._followers = tuple(s for s in self.statuses if s.member_id != self.member_id)
        self.state = ConsensusModuleState.INIT
        self.role = Role.FOLLOWER
        self.leadership_term_id = NULL_VALUE
        self.leader_member_id = NULL_VALUE
        self.commit_position = 0
        self.notified_commit_position = 0  # the leader's commit as a follower last heard it
        self.consumed_position = 0  # log adapter position: entries processed up to here
        self.election: Election | None = None
        self.time_of_last_leader_update_ns = 0
        # The highest term this member voted yes for another member in: it follows no leader of an earlier
        # term (a self-vote or a denial promises nothing). ElectionLink seeds it from the persisted
        # candidate term at start.
        self.vote_promise_term_id = NULL_VALUE
        self.time_of_last_log_update_ns = 0  # last sign of life of the leader's log (follower)
        self.terminated = False
        self.ignored: dict[str, int] = {}  # reason -> count: bad or stale peer input, never raised
        # Member messages whose body named a sender other than their proven source (senders.py): dropped.
        self.body_member_mismatch_count = 0
        # Aeron's "Cluster errors" counter and distinct error log: each distinct error once, with a count.
        self.error_count = 0
        self.distinct_errors: dict[str, int] = {}
        self._log = ctx.log
        self._events = ctx.events
        self.timeouts = ctx.timeouts  # the start event records them: trace checks judge timing by them
        # Invariant baselines (check_invariants).
        self._checked_term = NULL_VALUE
        self._checked_commit = 0

    # ------------------------------------------------------------------ accessors
    def status(self, member_id: int) -> MemberStatus | None:
        return self._status_by_id.get(member_id)

    def followers(self) -> tuple[MemberStatus, ...]:
        """Every member but this one (the membership is fixed for the module's life)."""
        return self._followers

    @property
    def in_election(self) -> bool:
        return self.election is not None

    def election_term(self) -> int:
        """The term messages are sent in: the election's while one runs, else ours."""
        e = self.election
        return e.leadership_term_id if e is not None else self.leadership_term_id

    @staticmethod
    def cluster_time_ms(now_ns: int) -> int:
        """Cluster time (ClusterTimeUnit.MILLIS) for log timestamps."""
        return now_ns // 1_000_000

    # ------------------------------------------------------------------ reporting
    def ignore(self, what: str, reason: str) -> None:
        """A peer's bad or stale message: counted and logged, never raised into the duty cycle."""
        key = f"{what}: {reason}"
        self.ignored[key] = self.ignored.get(key, 0) + 1
        self._log(f"member {self.member_id} ignored {key}")

    def reject_body_member(self, message: str, body_member_id: int, src_member_id: int) -> None:
        """A member message whose body names a sender other than its proven source (senders.py):
        dropped, counted (``body_member_mismatch_count`` and ``ignored``), logged and traced."""
        self.body_member_mismatch_count += 1
        self.ignore(message, f"body names member {body_member_id}, sent by member {src_member_id}")
        self.event(
            BODY_MEMBER_MISMATCH,
            {"message": message, "body_member_id": body_member_id, "source": src_member_id},
            self.leadership_term_id,
        )

    def event(self, kind: str, detail: dict[str, Any], term: int | None = None, pos: int | None = None) -> None:
        self._events(kind, self.member_id, term, pos, detail)

    def log(self, line: str) -> None:
        self._log(line)

    def error(self, where: str, reason: str, term: int | None = None, pos: int | None = None) -> None:
        """An error Aeron's counted error handler would see: counted (the errors counter), kept in the
        distinct error log, logged and traced (an ``error`` event); never raised into the duty cycle."""
        self.error_count += 1
        key = f"{where}: {reason}"
        self.distinct_errors[key] = self.distinct_errors.get(key, 0) + 1
        self._log(f"member {self.member_id} error {key}")
        self.event("error", {"where": where, "reason": reason}, term=term, pos=pos)

    # ------------------------------------------------------------------ shared transitions
    def set_commit_position(self, position: int) -> None:
        assert position >= self.commit_position, f"commit position moved back {self.commit_position} -> {position}"
        self.commit_position = position
        self.event("commit", {}, term=self.leadership_term_id, pos=position)

    def advance_commit_position(self, position: int) -> None:
        """Raise the commit position to ``position`` if that is higher (a ``commit`` event); never lower it."""
        if position > self.commit_position:
            self.set_commit_position(position)

    def restore_commit_position(self, position: int) -> None:
        """At start, before any input: the commit position the recovered state holds (the latest
        snapshot's, or 0). Every later change goes through :meth:`set_commit_position`."""
        assert self.state == ConsensusModuleState.INIT, f"commit position restored in state {self.state.name}"
        self.commit_position = position

    def set_leadership_term_id(self, leadership_term_id: int) -> None:
        """Adopt the term an election ends in: ElectionLink's ``join_log_as_leader`` (the new leader's
        term) and ``election_complete`` (the elected term), as Aeron's ``leadershipTermId(long)`` does
        for ``joinLogAsLeader`` and ``electionComplete``. The term comes from the election (a peer's
        NewLeadershipTerm for a follower), so no assert here; ``check_invariants`` asserts it never
        goes back where invariant checking is on."""
        self.leadership_term_id = leadership_term_id

    def restore_leadership_term_id(self, leadership_term_id: int) -> None:
        """At start, before any input: the term the recovered state holds. Recovery sets the recording
        log's last term, then the consensus-module snapshot it loads raises it to the snapshot's term
        (Aeron's ``loadSnapshot``). Every later change goes through :meth:`set_leadership_term_id`."""
        assert self.state == ConsensusModuleState.INIT, f"term restored in state {self.state.name}"
        self.leadership_term_id = leadership_term_id

    def set_consumed_position(self, position: int) -> None:
        """The log adapter has processed the log entry ending at ``position`` (LogAdapter ``consume``,
        once per entry, so the listeners and ``on_log_entry`` of the next entry read it). Consumption
        reads the log forward from the consumed position, so it never moves back outside recovery."""
        assert position >= self.consumed_position, (
            f"member {self.member_id}: consumed position moved back {self.consumed_position} -> {position}"
        )
        self.consumed_position = position

    def restore_consumed_position(self, position: int) -> None:
        """At start, before any input: recovery resumes consuming the log at the recovered commit
        position. Every later change goes through :meth:`set_consumed_position`."""
        assert self.state == ConsensusModuleState.INIT, f"consumed position restored in state {self.state.name}"
        self.consumed_position = position

    def set_notified_commit_position(self, position: int) -> None:
        """A follower's leader, in our term, sent its commit position (TermReplication
        ``on_commit_position``): taken as sent, as Aeron's ``onCommitPosition`` does. It is peer input,
        so it may be lower than the last one heard; no assert."""
        self.notified_commit_position = position

    def advance_notified_commit_position(self, position: int) -> None:
        """A follower outside an election appended a log block carrying its leader's commit position
        (TermReplication ``append_log_block``): raise the notified commit position to it if that is
        higher, never lower it (a resent block may carry an older commit position than the last heard)."""
        if position > self.notified_commit_position:
            self.notified_commit_position = position

    def restore_notified_commit_position(self, position: int) -> None:
        """At start, before any input: recovery knows no leader's commit yet; it holds the recovered
        commit position. Every later change goes through :meth:`set_notified_commit_position` or
        :meth:`advance_notified_commit_position`."""
        assert self.state == ConsensusModuleState.INIT, f"notified commit position restored in state {self.state.name}"
        self.notified_commit_position = position

    def set_role(self, role: Role) -> None:
        if role != self.role:
            self.role = role
            self.event("role", {"role": role.name})

    def set_leader(self, leader_member_id: int) -> None:
        self.leader_member_id = leader_member_id
        for s in self.statuses:
            s.is_leader = s.member_id == leader_member_id

    # ------------------------------------------------------------------ invariants
    def check_invariants(self, append_position: int) -> None:
        """Term and commit never go back; commit never passes the local log; role matches the election."""
        assert self.leadership_term_id >= self._checked_term, (
            f"member {self.member_id}: leadership_term_id went back {self._checked_term} -> {self.leadership_term_id}"
        )
        assert self.commit_position >= self._checked_commit, (
            f"member {self.member_id}: commit position went back {self._checked_commit} -> {self.commit_position}"
        )
        assert self.commit_position <= append_position, (
            f"member {self.member_id}: commit {self.commit_position} beyond append position {append_position}"
        )
        assert self.consumed_position <= append_position, (
            f"member {self.member_id}: consumed {self.consumed_position} beyond append position {append_position}"
        )
        self._checked_term = self.leadership_term_id
        self._checked_commit = self.commit_position
        e = self.election
        if e is None:
            assert self.role != Role.CANDIDATE, f"member {self.member_id}: CANDIDATE outside an election"
        else:
            expected = _ROLE_OF_ELECTION_STATE.get(e.state)
            assert expected is None or self.role == expected, (
                f"member {self.member_id}: role {self.role.name} in election state {e.state.name}"
            )
        if self.terminated:
            assert self.state == ConsensusModuleState.CLOSED, f"member {self.member_id}: terminated but {self.state}"
