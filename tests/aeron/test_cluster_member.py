"""Ports of Aeron's ``ClusterMemberTest`` onto clusterlab.core.consensus.members (MemberStatus and the
election's quorum predicates) and the member-string parser of the runtime configuration.

Aeron's static helpers take the member array (whose length is the cluster size); ours take the
statuses and the member count, which here is the array's length."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE, ClusterMember, quorum_threshold
from clusterlab.core.consensus.members import (
    MemberStatus,
    compare_log,
    is_quorum_candidate,
    is_quorum_leader,
    is_unanimous_candidate,
    is_unanimous_leader,
    quorum_position,
)
from clusterlab.core.runtime.config import parse_members


def new_member(member_id: int, leadership_term_id: int = NULL_VALUE, log_position: int = NULL_POSITION) -> MemberStatus:
    s = MemberStatus(ClusterMember(member_id))
    s.leadership_term_id = leadership_term_id
    s.log_position = log_position
    return s


def voted(member_id: int, candidate_term_id: int, vote: bool | None) -> MemberStatus:
    s = new_member(member_id)
    s.candidate_term_id = candidate_term_id
    s.vote = vote
    return s


def test_should_parse_correctly() -> None:
    """ClusterMemberTest.shouldParseCorrectly (the five-endpoint form; Aeron's optional archive-response
    and egress-response endpoints do not exist here)."""
    text = "|".join(
        f"{i},ingressEndpoint,consensusEndpoint,logEndpoint,catchupEndpoint,archiveEndpoint" for i in range(3)
    )
    members = parse_members(text)
    assert [m.member_id for m in members] == [0, 1, 2]
    for m in members:
        assert (m.ingress_endpoint, m.consensus_endpoint, m.log_endpoint, m.catchup_endpoint, m.archive_endpoint) == (
            "ingressEndpoint",
            "consensusEndpoint",
            "logEndpoint",
            "catchupEndpoint",
            "archiveEndpoint",
        )
        assert (
            m.describe()
            == f"{m.member_id},ingressEndpoint,consensusEndpoint,logEndpoint,catchupEndpoint,archiveEndpoint"
        )


def test_should_determine_quorum_size() -> None:
    """ClusterMemberTest.shouldDetermineQuorumSize"""
    assert [quorum_threshold(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [1, 2, 2, 3, 3, 4, 4]


def test_should_rank_cluster_start() -> None:
    """ClusterMemberTest.shouldRankClusterStart"""
    assert quorum_position([new_member(i).log_position for i in range(3)], 3) == 0


@pytest.mark.parametrize(
    ("positions", "expected"),
    [
        ((0, 0, 0), 0),
        ((123, 0, 0), 0),
        ((123, 123, 0), 123),
        ((123, 123, 123), 123),
        ((0, 123, 123), 123),
        ((0, 0, 123), 0),
        ((0, 123, 200), 123),
    ],
)
def test_should_determine_quorum_position(positions: tuple[int, int, int], expected: int) -> None:
    """ClusterMemberTest.shouldDetermineQuorumPosition"""
    assert quorum_position(positions, 3) == expected


def test_is_unanimous_candidate_return_false_if_there_is_a_member_without_log_position() -> None:
    """ClusterMemberTest.isUnanimousCandidateReturnFalseIfThereIsAMemberWithoutLogPosition"""
    candidate = new_member(4, 100, 1000)
    members = [new_member(1, 2, 100), new_member(2, 8, NULL_POSITION), new_member(3, 1, 1)]
    assert not is_unanimous_candidate(members, candidate, NULL_VALUE, len(members))


def test_is_unanimous_candidate_return_false_if_there_is_a_member_with_more_up_to_date_log() -> None:
    """ClusterMemberTest.isUnanimousCandidateReturnFalseIfThereIsAMemberWithMoreUpToDateLog"""
    candidate = new_member(4, 10, 800)
    members = [new_member(1, 2, 100), new_member(2, 8, 6), new_member(3, 11, 1000)]
    assert not is_unanimous_candidate(members, candidate, NULL_VALUE, len(members))


def test_is_unanimous_candidate_return_false_if_leader_closes_gracefully() -> None:
    """ClusterMemberTest.isUnanimousCandidateReturnFalseIfLeaderClosesGracefully"""
    candidate = new_member(2, 2, 100)
    members = [new_member(1, 2, 100), new_member(2, 2, 100)]
    assert not is_unanimous_candidate(members, candidate, 1, len(members))


def test_is_unanimous_candidate_return_true_if_the_candidate_has_the_most_up_to_date_log() -> None:
    """ClusterMemberTest.isUnanimousCandidateReturnTrueIfTheCandidateHasTheMostUpToDateLog"""
    candidate = new_member(2, 10, 800)
    members = [new_member(10, 2, 100), new_member(20, 8, 6), new_member(30, 10, 800)]
    assert is_unanimous_candidate(members, candidate, NULL_VALUE, len(members))


def test_is_quorum_candidate_return_false_when_quorum_is_not_reached() -> None:
    """ClusterMemberTest.isQuorumCandidateReturnFalseWhenQuorumIsNotReached"""
    candidate = new_member(2, 10, 800)
    members = [
        new_member(10, 2, 100),
        new_member(20, 18, 6),
        new_member(30, 10, 800),
        new_member(40, 19, 800),
        new_member(50, 10, 1000),
    ]
    assert not is_quorum_candidate(members, candidate, len(members))


def test_is_quorum_candidate_return_true_when_quorum_is_reached() -> None:
    """ClusterMemberTest.isQuorumCandidateReturnTrueWhenQuorumIsReached"""
    candidate = new_member(2, 10, 800)
    members = [
        new_member(10, 2, 100),
        new_member(20, 18, 6),
        new_member(30, 10, 800),
        new_member(40, 9, 800),
        new_member(50, 10, 700),
    ]
    assert is_quorum_candidate(members, candidate, len(members))


def test_is_quorum_leader_returns_true_when_quorum_is_reached() -> None:
    """ClusterMemberTest.isQuorumLeaderReturnsTrueWhenQuorumIsReached"""
    t = -5
    members = [voted(1, t, True), voted(2, t * 2, False), voted(3, t, None), voted(4, t, True), voted(5, t, True)]
    assert is_quorum_leader(members, t, len(members))


def test_is_quorum_leader_returns_false_if_at_least_one_negative_vote_is_detected() -> None:
    """ClusterMemberTest.isQuorumLeaderReturnsFalseIfAtLeastOneNegativeVoteIsDetected"""
    t = 8
    members = [voted(1, t, True), voted(2, t, False), voted(3, t, True)]
    assert not is_quorum_leader(members, t, len(members))


def test_is_quorum_leader_returns_false_when_quorum_is_not_reached() -> None:
    """ClusterMemberTest.isQuorumLeaderReturnsFalseWhenQuorumIsNotReached"""
    t = 2
    members = [voted(1, t, True), voted(2, t, None), voted(3, t + 5, True)]
    assert not is_quorum_leader(members, t, len(members))


def test_is_unanimous_leader_returns_false_if_there_is_at_least_one_negative_vote_for_a_given_candidate_term() -> None:
    """ClusterMemberTest.isUnanimousLeaderReturnsFalseIfThereIsAtLeastOneNegativeVoteForAGivenCandidateTerm"""
    t = 42
    members = [voted(1, t, True), voted(2, t, True), voted(3, t, False)]
    assert not is_unanimous_leader(members, t, NULL_VALUE, len(members))


def test_is_unanimous_leader_returns_false_if_leader_closes_gracefully() -> None:
    """ClusterMemberTest.isUnanimousLeaderReturnsFalseIfLeaderClosesGracefully"""
    t = 7
    members = [voted(1, t, True), voted(2, t, True)]
    assert not is_unanimous_leader(members, t, 1, len(members))


def test_is_unanimous_leader_returns_false_if_not_all_nodes_voted_positively() -> None:
    """ClusterMemberTest.isUnanimousLeaderReturnsFalseIfNotAllNodesVotedPositively"""
    t = 2
    members = [voted(1, t, True), voted(2, t, None), voted(3, t, True)]
    assert not is_unanimous_leader(members, t, NULL_VALUE, len(members))


def test_is_unanimous_leader_returns_false_if_not_all_nodes_had_the_expected_candidate_term_id() -> None:
    """ClusterMemberTest.isUnanimousLeaderReturnsFalseIfNotAllNodesHadTheExpectedCandidateTermId"""
    t = 2
    members = [voted(1, t, True), voted(2, t + 1, True), voted(3, t, True)]
    assert not is_unanimous_leader(members, t, NULL_VALUE, len(members))


def test_is_unanimous_leader_returns_true_if_all_nodes_voted_with_true() -> None:
    """ClusterMemberTest.isUnanimousLeaderReturnsTrueIfAllNodesVotedWithTrue"""
    t = 42
    members = [voted(1, t, True), voted(2, t, True), voted(3, t, True)]
    assert is_unanimous_leader(members, t, NULL_VALUE, len(members))


@pytest.mark.parametrize(
    ("lhs_term", "lhs_position", "rhs_term", "rhs_position", "expected"),
    [
        (5, 1000, 3, 999999, 1),
        (-100, 99999, 4, 0, -1),
        (42, 371239192371239, 42, 1001, 1),
        (3, -777, 3, 273291846723894, -1),
        (1, 1024, 1, 1024, 0),
    ],
)
def test_compare_log_returns_result(
    lhs_term: int, lhs_position: int, rhs_term: int, rhs_position: int, expected: int
) -> None:
    """ClusterMemberTest.compareLogReturnsResult"""
    assert compare_log(lhs_term, lhs_position, rhs_term, rhs_position) == expected
    lhs, rhs = new_member(5, lhs_term, lhs_position), new_member(100, rhs_term, rhs_position)
    assert compare_log(lhs.leadership_term_id, lhs.log_position, rhs.leadership_term_id, rhs.log_position) == expected
