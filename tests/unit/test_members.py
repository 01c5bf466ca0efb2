"""Table tests of the pure quorum and position functions (core/consensus/members.py, docs/protocol.md a.2, e.1).

Each row is a small cluster written as member views: ``v(id, log_term, position, ...)``. NULL (-1)
means "not reported"."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE, ClusterMember, quorum_threshold
from clusterlab.core.consensus.members import (
    MemberStatus,
    compare_log,
    has_active_quorum,
    has_quorum_at_position,
    has_voters_at_position,
    is_quorum_candidate,
    is_quorum_leader,
    is_unanimous_candidate,
    is_unanimous_leader,
    quorum_position,
)

N = NULL_VALUE
NP = NULL_POSITION


def v(
    member_id: int,
    log_term: int = NULL_VALUE,
    position: int = NULL_POSITION,
    *,
    candidate_term: int = NULL_VALUE,
    vote: bool | None = None,
    last_append_ns: int = NULL_VALUE,
) -> MemberStatus:
    """One member's view as the election keeps it."""
    return MemberStatus(
        ClusterMember(member_id),
        leadership_term_id=log_term,
        log_position=position,
        candidate_term_id=candidate_term,
        vote=vote,
        time_of_last_append_position_ns=last_append_ns,
    )


# ----------------------------------------------------------------------------- quorum_threshold


@pytest.mark.parametrize(("members", "threshold"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4), (9, 5)])
def test_quorum_threshold_is_floor_half_plus_one(members: int, threshold: int) -> None:
    assert quorum_threshold(members) == threshold


# ----------------------------------------------------------------------------- quorum_position


@pytest.mark.parametrize(
    ("positions", "members", "expected"),
    [
        ([100, 50, 0], 3, 50),  # the 2nd highest of 3
        ([0, 50, 100], 3, 50),  # order does not matter
        ([100, 100, 100], 3, 100),
        ([100, NP, NP], 3, 0),  # unknown counts as 0
        ([NP, NP, NP], 3, 0),
        ([100, 60, NP], 3, 60),
        ([5, 4, 3, 2, 1], 5, 3),  # the 3rd highest of 5
        ([10, NP, NP, 10, 10], 5, 10),
        ([10, NP, NP, 10, 9], 5, 9),
        ([40, 30, 20, 10], 4, 20),  # 4 members: quorum 3
        ([42], 1, 42),
        ([100, 50], 3, 50),  # a member missing from the list counts as 0
        ([100], 3, 0),
    ],
)
def test_quorum_position_is_the_quorum_th_highest(positions: list[int], members: int, expected: int) -> None:
    assert quorum_position(positions, members) == expected


# ----------------------------------------------------------------------------- compare_log


@pytest.mark.parametrize(
    ("lhs", "rhs", "expected"),
    [
        ((1, 100), (1, 100), 0),
        ((1, 200), (1, 100), 1),  # same term: longer is more recent
        ((1, 100), (1, 200), -1),
        ((2, 0), (1, 10_000), 1),  # the term decides before the position
        ((1, 10_000), (2, 0), -1),
        ((N, 0), (0, 0), -1),  # an empty log is older than any term
        ((N, 0), (N, 0), 0),
        ((0, 96), (N, 0), 1),
    ],
)
def test_compare_log_is_term_then_position(lhs: tuple[int, int], rhs: tuple[int, int], expected: int) -> None:
    assert compare_log(*lhs, *rhs) == expected
    assert compare_log(*rhs, *lhs) == -expected


# ----------------------------------------------------------------------------- candidates (CANVASS exit)

ME = 0


@pytest.mark.parametrize(
    ("statuses", "graceful", "expected", "why"),
    [
        ([v(0, 1, 100), v(1, 1, 100), v(2, 1, 100)], N, True, "all reported, equal logs"),
        ([v(0, 1, 100), v(1, 1, 50), v(2, 0, 500)], N, True, "all reported, older logs"),
        ([v(0, 1, 100), v(1, 1, 100), v(2)], N, False, "one member has not reported"),
        ([v(0, 1, 100), v(1, 1, 101), v(2, 1, 100)], N, False, "a peer holds a longer log in the same term"),
        ([v(0, 1, 100), v(1, 2, 0), v(2, 1, 100)], N, False, "a peer's log ends in a later term"),
        ([v(0, 1, 100), v(1, 1, 100), v(2)], 2, True, "the silent member is the gracefully closed leader"),
        ([v(0, 1, 100), v(1, 1, 100), v(2, 5, 999)], 2, True, "the gracefully closed leader is not compared"),
        ([v(0, 1, 100), v(1), v(2)], 2, False, "excluding the closed leader, member 1 is still missing"),
        (
            [v(0, 1, 100), v(1, 1, 100), v(2, 1, 100), v(3, 1, 100), v(4)],
            N,
            False,
            "5 members: one missing is enough to deny unanimity",
        ),
    ],
)
def test_is_unanimous_candidate(statuses: list[MemberStatus], graceful: int, expected: bool, why: str) -> None:
    assert is_unanimous_candidate(statuses, statuses[ME], graceful, len(statuses)) is expected, why


def test_is_unanimous_candidate_needs_a_quorum_even_when_everyone_else_is_excluded() -> None:
    # A 2-member cluster whose other member closed gracefully: 1 counted < quorum 2.
    statuses = [v(0, 1, 100), v(1)]
    assert not is_unanimous_candidate(statuses, statuses[0], 1, 2)


@pytest.mark.parametrize(
    ("statuses", "expected", "why"),
    [
        ([v(0, 1, 100), v(1, 1, 50), v(2)], True, "self plus one older log is a quorum of 3"),
        ([v(0, 1, 100), v(1, 1, 100), v(2)], True, "an equal log counts"),
        ([v(0, 1, 100), v(1), v(2)], False, "self alone is not a quorum of 3"),
        ([v(0, 1, 100), v(1, 1, 200), v(2)], False, "the only other report is more recent"),
        ([v(0, 1, 100), v(1, 2, 0), v(2, 1, 10)], True, "one more recent peer does not matter if a quorum is older"),
        (
            [v(0, 1, 100), v(1, 1, 10), v(2, 0, 900), v(3, 2, 0), v(4, 1, 101)],
            True,
            "5 members: self and two older logs",
        ),
        (
            [v(0, 1, 100), v(1, 1, 10), v(2), v(3, 2, 0), v(4, 1, 101)],
            False,
            "5 members: only self and one older log",
        ),
    ],
)
def test_is_quorum_candidate(statuses: list[MemberStatus], expected: bool, why: str) -> None:
    assert is_quorum_candidate(statuses, statuses[ME], len(statuses)) is expected, why


# ----------------------------------------------------------------------------- leaders (CANDIDATE_BALLOT exit)

CT = 7  # the candidate term in the ballot tables


def yes(member_id: int, term: int = CT) -> MemberStatus:
    return v(member_id, candidate_term=term, vote=True)


def no(member_id: int, term: int = CT) -> MemberStatus:
    return v(member_id, candidate_term=term, vote=False)


def silent(member_id: int) -> MemberStatus:
    return v(member_id)


@pytest.mark.parametrize(
    ("statuses", "graceful", "expected", "why"),
    [
        ([yes(0), yes(1), yes(2)], N, True, "everyone voted YES for this term"),
        ([yes(0), yes(1), silent(2)], N, False, "one member has not voted"),
        ([yes(0), yes(1), no(2)], N, False, "one NO"),
        ([yes(0), yes(1), yes(2, CT - 1)], N, False, "a YES for another term is not for this ballot"),
        ([yes(0), yes(1), silent(2)], 2, True, "the silent member is the gracefully closed leader"),
        ([yes(0), silent(1), silent(2)], 2, False, "member 1 is still missing"),
        ([yes(0), yes(1), yes(2), yes(3), silent(4)], 4, True, "5 members, closed leader excluded"),
        ([yes(0), yes(1), yes(2), no(3), silent(4)], 4, False, "5 members, one NO"),
    ],
)
def test_is_unanimous_leader(statuses: list[MemberStatus], graceful: int, expected: bool, why: str) -> None:
    assert is_unanimous_leader(statuses, CT, graceful, len(statuses)) is expected, why


@pytest.mark.parametrize(
    ("statuses", "expected", "why"),
    [
        ([yes(0), yes(1), silent(2)], True, "a quorum of YES, no NO"),
        ([yes(0), yes(1), no(2)], False, "a NO vote blocks a quorum win"),
        ([yes(0), silent(1), silent(2)], False, "self alone is not a quorum"),
        ([yes(0), yes(1, CT + 1), silent(2)], False, "a YES for another term does not count"),
        ([yes(0), yes(1), no(2, CT - 1)], True, "a NO for another term does not block"),
        ([yes(0), yes(1), yes(2), silent(3), silent(4)], True, "5 members: 3 YES"),
        ([yes(0), yes(1), yes(2), no(3), silent(4)], False, "5 members: 3 YES but one NO"),
        ([yes(0), yes(1), silent(2), silent(3), silent(4)], False, "5 members: 2 YES"),
    ],
)
def test_is_quorum_leader(statuses: list[MemberStatus], expected: bool, why: str) -> None:
    assert is_quorum_leader(statuses, CT, len(statuses)) is expected, why


# ----------------------------------------------------------------------------- leader liveness

TIMEOUT = 1_000


@pytest.mark.parametrize(
    ("last_appends", "now", "expected", "why"),
    [
        ([N, 500, N], 1_000, True, "self plus one recent follower"),
        ([N, N, N], 1_000, False, "nobody has reported"),
        ([N, 0, N], 1_000, True, "exactly at the timeout still counts"),
        ([N, 0, N], 1_001, False, "one nanosecond past the timeout does not"),
        ([N, 0, 900], 1_001, True, "the other follower is recent"),
        ([N, 500, 0, 0, 0], 1_200, False, "5 members: self plus one recent"),
        ([N, 500, 600, 0, 0], 1_200, True, "5 members: self plus two recent"),
    ],
)
def test_has_active_quorum(last_appends: list[int], now: int, expected: bool, why: str) -> None:
    statuses = [v(i, last_append_ns=t) for i, t in enumerate(last_appends)]
    assert has_active_quorum(statuses, 0, now, TIMEOUT, len(statuses)) is expected, why


def test_has_active_quorum_counts_self_without_an_append_position() -> None:
    statuses = [v(0), v(1, last_append_ns=10)]
    assert has_active_quorum(statuses, 0, 10, TIMEOUT, 2)
    assert not has_active_quorum(statuses, 0, 10 + TIMEOUT + 1, TIMEOUT, 2)


# ----------------------------------------------------------------------------- LEADER_READY exit

TERM = 4
POS = 960


@pytest.mark.parametrize(
    ("statuses", "expected", "why"),
    [
        ([v(0, TERM, POS, vote=True), v(1, TERM, POS, vote=True), v(2, TERM, POS + 32, vote=True)], True, "all there"),
        (
            [v(0, TERM, POS, vote=True), v(1, TERM, POS, vote=True), v(2, TERM - 1, POS, vote=True)],
            False,
            "a voter still reports the old term",
        ),
        (
            [v(0, TERM, POS, vote=True), v(1, TERM, POS, vote=True), v(2, TERM, POS - 32, vote=True)],
            False,
            "a voter is behind the position",
        ),
        (
            [v(0, TERM, POS, vote=True), v(1, TERM, POS, vote=False), v(2, TERM, POS, vote=True)],
            True,
            "a NO voter that joined counts as joined",
        ),
        (
            [v(0, TERM, POS, vote=True), v(1, TERM, POS, vote=True), v(2, TERM, 0, vote=False)],
            False,
            "a NO voter is a voter too: it must join",
        ),
        (
            [v(0, TERM, POS, vote=True), v(1, TERM, POS, vote=True), v(2)],
            True,
            "a member that did not vote is not waited for",
        ),
        ([v(0, N, NP, vote=True), v(1, TERM, POS, vote=True), v(2, TERM, POS, vote=True)], True, "self is not checked"),
    ],
)
def test_has_voters_at_position(statuses: list[MemberStatus], expected: bool, why: str) -> None:
    assert has_voters_at_position(statuses, 0, TERM, POS) is expected, why


@pytest.mark.parametrize(
    ("statuses", "expected", "why"),
    [
        ([v(0), v(1, TERM, POS), v(2)], True, "self plus one follower at the position in the new term"),
        ([v(0), v(1, TERM - 1, POS), v(2)], False, "the follower reports the old term"),
        ([v(0), v(1, TERM, POS - 32), v(2)], False, "the follower is behind"),
        ([v(0), v(1), v(2)], False, "self alone"),
        ([v(0), v(1, TERM, POS), v(2, TERM, POS), v(3), v(4)], True, "5 members: self plus two"),
        ([v(0), v(1, TERM, POS), v(2, TERM, 0), v(3), v(4)], False, "5 members: self plus one"),
    ],
)
def test_has_quorum_at_position(statuses: list[MemberStatus], expected: bool, why: str) -> None:
    assert has_quorum_at_position(statuses, 0, TERM, POS, len(statuses)) is expected, why
