"""Per-member views the consensus module keeps, and the small pure functions of quorum arithmetic.

Aeron keeps these fields on ``ClusterMember`` and the functions as statics of ``ClusterMember``;
we split the immutable configuration (context.ClusterMember) from the mutable view (MemberStatus).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE, ClusterMember, quorum_threshold


@dataclass(slots=True)
class MemberStatus:
    """What this node currently believes about one member (itself included)."""

    member: ClusterMember
    # Election view (reset on entering CANVASS).
    leadership_term_id: int = NULL_VALUE  # log leadership term the member reported (canvass/vote/append)
    log_position: int = NULL_POSITION  # reported append position
    candidate_term_id: int = NULL_VALUE
    vote: bool | None = None  # None = no vote for our candidate term yet
    is_ballot_sent: bool = False
    is_leader: bool = False
    # Leader's view of a follower.
    time_of_last_append_position_ns: int = NULL_VALUE
    catchup_active: bool = False  # a catch-up replay runs for it (Aeron: catchupReplaySessionId set)
    log_send_position: int = NULL_POSITION  # next position the leader sends log blocks from (NULL: not joined)
    last_progress_position: int = NULL_POSITION  # for the resend rule
    time_of_last_progress_ns: int = 0

    @property
    def member_id(self) -> int:
        return self.member.member_id

    def reset_election_view(self) -> None:
        """Aeron ``ClusterMember.reset()``: forget the election view."""
        self.leadership_term_id = NULL_VALUE
        self.log_position = NULL_POSITION
        self.candidate_term_id = NULL_VALUE
        self.vote = None
        self.is_ballot_sent = False
        self.is_leader = False

    def reset_log_send(self) -> None:
        self.catchup_active = False
        self.log_send_position = NULL_POSITION
        self.last_progress_position = NULL_POSITION


def compare_log(
    lhs_log_leadership_term_id: int, lhs_log_position: int, rhs_log_leadership_term_id: int, rhs_log_position: int
) -> int:
    """Aeron ``compareLog``: >0 if lhs is more recent, <0 if rhs is, 0 if equal.

    Lexicographic on (log leadership term, append position): Raft's "at least as up-to-date" rule.
    """
    if lhs_log_leadership_term_id != rhs_log_leadership_term_id:
        return 1 if lhs_log_leadership_term_id > rhs_log_leadership_term_id else -1
    if lhs_log_position != rhs_log_position:
        return 1 if lhs_log_position > rhs_log_position else -1
    return 0


def quorum_position(positions: Iterable[int], member_count: int) -> int:
    """The q-th highest reported position, q = quorum threshold; unknown (NULL) counts as 0."""
    q = quorum_threshold(member_count)
    ranked = [p if p > 0 else 0 for p in positions]  # a list comprehension: this runs on every duty cycle
    ranked.sort(reverse=True)
    ranked.extend([0] * (member_count - len(ranked)))
    return ranked[q - 1]


def is_unanimous_candidate(
    statuses: Iterable[MemberStatus],
    candidate: MemberStatus,
    graceful_closed_leader_id: int,
    member_count: int,
) -> bool:
    """Every member (but a gracefully closed old leader) reported, and none has a more recent log."""
    count = 0
    for s in statuses:
        if s.member_id == graceful_closed_leader_id:
            continue
        if s.log_position == NULL_POSITION:
            return False
        if compare_log(candidate.leadership_term_id, candidate.log_position, s.leadership_term_id, s.log_position) < 0:
            return False
        count += 1
    return count >= quorum_threshold(member_count)


def is_quorum_candidate(statuses: Iterable[MemberStatus], candidate: MemberStatus, member_count: int) -> bool:
    """A quorum (self included) reported and has a log no more recent than the candidate's."""
    count = 0
    for s in statuses:
        if s.log_position == NULL_POSITION:
            continue
        if compare_log(candidate.leadership_term_id, candidate.log_position, s.leadership_term_id, s.log_position) >= 0:
            count += 1
    return count >= quorum_threshold(member_count)


def is_unanimous_leader(
    statuses: Iterable[MemberStatus], candidate_term_id: int, graceful_closed_leader_id: int, member_count: int
) -> bool:
    """Every member (but a gracefully closed old leader) voted YES for exactly this candidate term."""
    count = 0
    for s in statuses:
        if s.member_id == graceful_closed_leader_id:
            continue
        if s.candidate_term_id != candidate_term_id or s.vote is not True:
            return False
        count += 1
    return count >= quorum_threshold(member_count)


def is_quorum_leader(statuses: Iterable[MemberStatus], candidate_term_id: int, member_count: int) -> bool:
    """At least a quorum of YES votes for this candidate term and no NO vote for it."""
    yes = 0
    for s in statuses:
        if s.candidate_term_id != candidate_term_id or s.vote is None:
            continue
        if s.vote is False:
            return False
        yes += 1
    return yes >= quorum_threshold(member_count)


def has_active_quorum(
    statuses: Iterable[MemberStatus], self_id: int, now_ns: int, timeout_ns: int, member_count: int
) -> bool:
    """Leader liveness: itself plus members whose last AppendPosition is within the timeout."""
    active = 0
    for s in statuses:
        if s.member_id == self_id or (
            s.time_of_last_append_position_ns != NULL_VALUE and now_ns <= s.time_of_last_append_position_ns + timeout_ns
        ):
            active += 1
    return active >= quorum_threshold(member_count)


def has_voters_at_position(
    statuses: Iterable[MemberStatus], self_id: int, leadership_term_id: int, position: int
) -> bool:
    """LEADER_READY: every member that cast a vote reports the new term at >= position."""
    for s in statuses:
        if s.member_id == self_id or s.vote is None:
            continue
        if s.leadership_term_id != leadership_term_id or s.log_position < position:
            return False
    return True


def has_quorum_at_position(
    statuses: Iterable[MemberStatus], self_id: int, leadership_term_id: int, position: int, member_count: int
) -> bool:
    """LEADER_READY fallback: a quorum (self included) reports the new term at >= position."""
    count = 0
    for s in statuses:
        if s.member_id == self_id or (s.leadership_term_id == leadership_term_id and s.log_position >= position):
            count += 1
    return count >= quorum_threshold(member_count)
