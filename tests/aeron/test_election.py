"""Ports of Aeron's ``ElectionTest`` (aeron-cluster/src/test/java/io/aeron/cluster).

Aeron drives an ``Election`` against mocks and verifies the election-state counter, the consensus
publisher's sends and the agent calls. Here the probe (tests/sim/probe.py) drives a real
ConsensusModule whose peers the test plays: the states it enters (``election_state`` events) stand
for the state counter, the messages it sends for the publisher, and the module's own state for the
agent calls. Time steps are Aeron's (``electionTimeoutNs >> 1`` passes any nomination back-off)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.core.codec.consensus import CanvassPosition, NewLeadershipTerm, RequestVote, Vote
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.codec.service import JoinLog
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE, PROTOCOL_VERSION, Channel, ElectionState, Role
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.runtime.storage import FileStorage

from tests.sim.probe import Probe

ES = ElectionState


def states(probe: Probe) -> list[ElectionState]:
    return probe.states_entered()


def in_order(entered: list[ElectionState], expected: list[ElectionState]) -> bool:
    """``expected`` is a subsequence of ``entered`` (Mockito's InOrder on the state counter)."""
    it = iter(entered)
    return all(any(s == e for s in it) for e in expected)


def test_should_elect_single_node_cluster_leader(tmp_path: Path) -> None:
    """ElectionTest.shouldElectSingleNodeClusterLeader"""
    probe = Probe(tmp_path, members=1)
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.cm.election is None)
    assert ES.LEADER_READY in states(probe)
    assert probe.cm.election_count == 1
    assert probe.cm.leadership_term_id == 0  # NULL_VALUE + 1
    assert probe.cm.role == Role.LEADER
    with RecordingLog.open(FileStorage(tmp_path)) as rl:
        term = rl.find_term_entry(0)
    assert term is not None and (term.term_base_log_position, term.log_position) == (0, NULL_POSITION)


def test_should_elect_appointed_leader(tmp_path: Path) -> None:
    """ElectionTest.shouldElectAppointedLeader"""
    probe = Probe(tmp_path, member_id=0, appointed_leader_id=0)
    probe.work(1)
    assert probe.state == ES.CANVASS
    probe.deliver(1, probe.canvass(1))
    probe.deliver(2, probe.canvass(2))
    probe.work(2)
    assert probe.state == ES.NOMINATE
    mark = probe.mark()
    probe.run_for(probe.timeouts.election_timeout_ns >> 1, lambda: probe.state == ES.CANDIDATE_BALLOT)
    probe.settle()
    candidate_term_id = 0
    for peer in (1, 2):
        assert probe.sent(RequestVote, dst=peer, since=mark) == [
            RequestVote(
                log_leadership_term_id=NULL_VALUE,
                log_position=0,
                candidate_term_id=candidate_term_id,
                candidate_member_id=0,
                protocol_version=PROTOCOL_VERSION,
            )
        ]
    assert probe.state == ES.CANDIDATE_BALLOT and probe.cm.role == Role.CANDIDATE
    probe.deliver(1, probe.vote(1, yes=True))
    probe.deliver(2, probe.vote(2, yes=True))
    mark = probe.mark()
    probe.settle()
    assert ES.LEADER_LOG_REPLICATION in states(probe)
    for peer in (1, 2):
        nlt = probe.sent(NewLeadershipTerm, dst=peer, since=mark)[0]
        assert (nlt.log_leadership_term_id, nlt.leadership_term_id, nlt.log_position) == (NULL_VALUE, 0, 0)
        assert (nlt.leader_member_id, nlt.term_base_log_position) == (0, 0)
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state == ES.LEADER_READY)
    assert in_order(states(probe), [ES.LEADER_LOG_REPLICATION, ES.LEADER_REPLAY, ES.LEADER_INIT, ES.LEADER_READY])
    assert probe.election.leadership_term_id == candidate_term_id
    with RecordingLog.open(FileStorage(tmp_path)) as rl:
        term = rl.find_term_entry(candidate_term_id)
    assert term is not None and term.term_base_log_position == 0
    probe.deliver(1, probe.append_position(1, candidate_term_id, 0))
    probe.deliver(2, probe.append_position(2, candidate_term_id, 0))
    probe.settle(lambda: probe.cm.election is None)
    assert states(probe)[-1] == ES.CLOSED
    assert probe.cm.role == Role.LEADER


def test_should_vote_for_appointed_leader(tmp_path: Path) -> None:
    """ElectionTest.shouldVoteForAppointedLeader"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    assert probe.state == ES.CANVASS
    mark = probe.mark()
    probe.deliver(0, probe.request_vote(0, candidate_term_id=0))
    probe.settle()
    assert probe.sent(Vote, dst=0, since=mark) == [
        Vote(
            candidate_term_id=0,
            log_leadership_term_id=NULL_VALUE,
            log_position=0,
            candidate_member_id=0,
            follower_member_id=1,
            vote=BooleanType.TRUE,
        )
    ]
    assert probe.state == ES.FOLLOWER_BALLOT
    mark = probe.mark()
    probe.deliver(0, probe.new_leadership_term(0, 0, log_session_id=-7))
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.cm.election is None)
    assert in_order(
        states(probe),
        [ES.FOLLOWER_BALLOT, ES.FOLLOWER_REPLAY, ES.FOLLOWER_LOG_INIT, ES.FOLLOWER_LOG_AWAIT, ES.FOLLOWER_READY],
    )
    appends = [a for a in probe.sends(since=mark) if type(a.msg).__name__ == "AppendPosition" and a.dst == 0]
    assert appends and (appends[0].msg.leadership_term_id, appends[0].msg.log_position) == (0, 0)  # type: ignore[attr-defined]
    assert states(probe)[-1] == ES.CLOSED
    assert probe.cm.role == Role.FOLLOWER


def test_should_canvass_members_in_successful_leadership_bid(tmp_path: Path) -> None:
    """ElectionTest.shouldCanvassMembersInSuccessfulLeadershipBid"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(0)
    probe.work(1)
    assert probe.state == ES.CANVASS
    for peer in (0, 2):
        assert CanvassPosition(
            log_leadership_term_id=NULL_VALUE,
            log_position=0,
            leadership_term_id=NULL_VALUE,
            follower_member_id=1,
            protocol_version=PROTOCOL_VERSION,
        ) in probe.sent(CanvassPosition, dst=peer)
    probe.deliver(0, probe.canvass(0))
    probe.deliver(2, probe.canvass(2))
    probe.work(2)
    assert probe.state == ES.NOMINATE


def test_should_vote_for_candidate_during_nomination(tmp_path: Path) -> None:
    """ElectionTest.shouldVoteForCandidateDuringNomination"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    assert probe.state == ES.CANVASS
    probe.work(2)
    probe.deliver(0, probe.canvass(0))
    probe.deliver(2, probe.canvass(2))
    probe.work(3)
    assert probe.state == ES.NOMINATE
    probe.deliver(0, probe.request_vote(0, candidate_term_id=0), now_ns=4)
    probe.work(4)
    assert probe.state == ES.FOLLOWER_BALLOT


def test_should_timeout_canvass_with_majority(tmp_path: Path) -> None:
    """ElectionTest.shouldTimeoutCanvassWithMajority: member 0 reports by AppendPosition, then the
    startup canvass timeout passes with a quorum."""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    assert probe.state == ES.CANVASS
    probe.deliver(0, probe.append_position(0, NULL_VALUE, 0))
    probe.work(2)
    assert probe.state == ES.CANVASS
    probe.work(2 + probe.timeouts.startup_canvass_timeout_ns)
    assert probe.state == ES.NOMINATE


def test_should_win_candidate_ballot_with_majority(tmp_path: Path) -> None:
    """ElectionTest.shouldWinCandidateBallotWithMajority"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    probe.deliver(0, probe.canvass(0))
    probe.deliver(2, probe.canvass(2))
    probe.work(2)
    assert probe.state == ES.NOMINATE
    probe.run_for(probe.timeouts.election_timeout_ns >> 1, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert probe.state == ES.CANDIDATE_BALLOT
    probe.deliver(2, probe.vote(2, yes=True))
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state != ES.CANDIDATE_BALLOT)
    assert probe.state == ES.LEADER_LOG_REPLICATION


@pytest.mark.parametrize(
    ("is_leader_start", "is_node_start"), [(True, True), (True, False), (False, False), (False, True)]
)
def test_should_base_startup_value_on_leader(tmp_path: Path, is_leader_start: bool, is_node_start: bool) -> None:
    """ElectionTest.shouldBaseStartupValueOnLeader: the follower joins the log with the leader's
    is_startup (the JoinLog its service gets), whatever its own start."""
    probe = Probe(tmp_path, member_id=1, service_count=1, start=False)
    if is_node_start:
        probe.cm.on_start(0)
    else:
        probe.cm.on_start(0)
        probe.to_follower(leader=0, leadership_term_id=0)
        probe.cm.enter_election(probe.now_ns, "test")  # a runtime election, not a node start
    probe.work()
    assert probe.state == ES.CANVASS
    term = probe.cm.leadership_term_id if not is_node_start else 0
    log_position = probe.cm.append_position
    mark = probe.mark()
    probe.deliver(
        0,
        probe.new_leadership_term(
            0,
            term,
            log_leadership_term_id=term if not is_node_start else NULL_VALUE,
            term_base_log_position=0 if is_node_start else probe.cm.election_link.term_base_of(term),
            log_position=log_position,
            is_startup=is_leader_start,
        ),
    )
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.cm.election is None)
    joins = [s.msg for s in probe.sends(JoinLog, since=mark) if s.channel == Channel.SERVICE]
    assert joins, probe.cm.describe()
    assert joins[-1].is_startup == (BooleanType.TRUE if is_leader_start else BooleanType.FALSE)


def test_should_elect_candidate_with_full_vote(tmp_path: Path) -> None:
    """ElectionTest.shouldElectCandidateWithFullVote"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    probe.deliver(0, probe.canvass(0))
    probe.deliver(2, probe.canvass(2))
    probe.work(2)
    assert probe.state == ES.NOMINATE
    probe.run_for(probe.timeouts.election_timeout_ns >> 1, lambda: probe.state == ES.CANDIDATE_BALLOT)
    probe.deliver(0, probe.vote(0, yes=True), now_ns=probe.now_ns + 1)
    probe.deliver(2, probe.vote(2, yes=True))
    probe.work()
    assert probe.state == ES.LEADER_LOG_REPLICATION


def test_should_timeout_candidate_ballot_without_majority(tmp_path: Path) -> None:
    """ElectionTest.shouldTimeoutCandidateBallotWithoutMajority"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    probe.deliver(0, probe.canvass(0))
    probe.deliver(2, probe.canvass(2))
    probe.work(2)
    probe.run_for(probe.timeouts.election_timeout_ns >> 1, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert probe.state == ES.CANDIDATE_BALLOT
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state != ES.CANDIDATE_BALLOT)
    assert in_order(states(probe), [ES.CANVASS, ES.NOMINATE, ES.CANDIDATE_BALLOT, ES.CANVASS])
    assert probe.election.leadership_term_id == NULL_VALUE


def test_should_timeout_failed_candidate_ballot_on_split_vote_then_succeed_on_retry(tmp_path: Path) -> None:
    """ElectionTest.shouldTimeoutFailedCandidateBallotOnSplitVoteThenSucceedOnRetry"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    probe.deliver(0, probe.canvass(0))
    probe.run_for(probe.timeouts.startup_canvass_timeout_ns, lambda: probe.state == ES.NOMINATE)
    assert probe.state == ES.NOMINATE
    probe.run_for(probe.timeouts.election_timeout_ns >> 1, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert probe.state == ES.CANDIDATE_BALLOT
    probe.deliver(2, probe.vote(2, yes=False), now_ns=probe.now_ns + 1)
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state != ES.CANDIDATE_BALLOT)
    assert probe.state == ES.CANVASS
    probe.deliver(0, probe.canvass(0))
    probe.run_for(probe.timeouts.leader_heartbeat_timeout_ns, lambda: probe.state == ES.NOMINATE)
    assert probe.state == ES.NOMINATE
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert probe.state == ES.CANDIDATE_BALLOT
    candidate_term_id = NULL_VALUE + 2
    assert probe.election.candidate_term_id == candidate_term_id
    probe.deliver(2, probe.vote(2, yes=True))
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state == ES.LEADER_READY)
    assert probe.election.leadership_term_id == candidate_term_id
    assert in_order(states(probe), [ES.CANDIDATE_BALLOT, ES.LEADER_LOG_REPLICATION, ES.LEADER_REPLAY, ES.LEADER_READY])


def test_should_timeout_follower_ballot_without_leader_emerging(tmp_path: Path) -> None:
    """ElectionTest.shouldTimeoutFollowerBallotWithoutLeaderEmerging"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    probe.deliver(0, probe.request_vote(0, candidate_term_id=0))
    probe.work(2)
    assert probe.state == ES.FOLLOWER_BALLOT
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state != ES.FOLLOWER_BALLOT)
    assert in_order(states(probe), [ES.CANVASS, ES.FOLLOWER_BALLOT, ES.CANVASS])
    assert probe.election.leadership_term_id == NULL_VALUE


def test_should_become_follower_if_entering_new_election(tmp_path: Path) -> None:
    """ElectionTest.shouldBecomeFollowerIfEnteringNewElection: a leader entering an election goes back
    to its commit position (prepareForNewLeadership) and is a FOLLOWER in CANVASS."""
    probe = Probe(tmp_path, member_id=0)
    probe.to_leader()
    commit = probe.cm.commit_position
    probe.cm.enter_election(probe.now_ns, "test")
    probe.work()
    assert probe.state == ES.CANVASS
    assert probe.cm.role == Role.FOLLOWER
    assert probe.election.log_position == commit


def test_leader_should_move_to_log_replication_then_wait_for_commit_position(tmp_path: Path) -> None:
    """ElectionTest.leaderShouldMoveToLogReplicationThenWaitForCommitPosition: a leader whose log (in
    term ``log_term``, ending at ``append``) is ahead of the live follower (at 96) wins after the
    startup canvass timeout, stays in LEADER_LOG_REPLICATION sending NewLeadershipTerms while the
    quorum position is behind its append position, and replays once a follower holds the whole log."""
    from clusterlab.core.codec.consensus import NewLeadershipTerm as NLT

    probe = Probe(tmp_path, member_id=0)
    log_term, append = probe.with_uncommitted_log(entries=3)
    probe.work()
    assert in_order(states(probe), [ES.INIT, ES.CANVASS])
    probe.deliver(1, probe.canvass(1, log_leadership_term_id=log_term, log_position=96))
    probe.run_for(2 * probe.timeouts.startup_canvass_timeout_ns, lambda: probe.state == ES.NOMINATE)
    assert probe.state == ES.NOMINATE
    probe.run_for(2 * probe.timeouts.election_timeout_ns, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert probe.state == ES.CANDIDATE_BALLOT
    candidate_term_id = probe.election.candidate_term_id
    assert candidate_term_id == log_term + 1
    probe.deliver(1, probe.vote(1, yes=True, log_leadership_term_id=log_term, log_position=96))
    probe.run_for(2 * probe.timeouts.election_timeout_ns, lambda: probe.state == ES.LEADER_LOG_REPLICATION)
    assert probe.state == ES.LEADER_LOG_REPLICATION
    mark = probe.mark()
    probe.run_for(probe.timeouts.election_timeout_ns)
    assert probe.state == ES.LEADER_LOG_REPLICATION, "no move while the quorum position is behind"
    for peer in (1, 2):
        nlt = probe.sent(NLT, dst=peer, since=mark)[-1]
        assert (nlt.leadership_term_id, nlt.leader_member_id) == (candidate_term_id, 0)
        assert (nlt.log_leadership_term_id, nlt.term_base_log_position, nlt.log_position) == (log_term, append, append)
    probe.deliver(1, probe.append_position(1, candidate_term_id, append))
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state != ES.LEADER_LOG_REPLICATION)
    assert ES.LEADER_REPLAY in states(probe)


def test_follower_should_replicate_and_send_append_position_when_log_replication_done(tmp_path: Path) -> None:
    """ElectionTest.followerShouldReplicateAndSendAppendPositionWhenLogReplicationDone: the leader's
    NewLeadershipTerm says our log's term ended at ``end`` and term 1 runs to ``end + 60``; the follower
    replicates up to ``end`` from the leader's archive, reports AppendPosition(term 1, end) and, once
    the leader's CommitPosition covers it, canvasses again (its second CANVASS). Our empty log is in
    term NULL_VALUE where Aeron's starts in term 0 at position 0."""
    from clusterlab.core.codec.consensus import AppendPosition
    from clusterlab.core.codec.enums import ReplayBlockFlags, ReplayPurpose
    from clusterlab.core.codec.transport import ReplayBlock, ReplayRequest

    from tests.sim.probe import session_entries

    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    assert probe.state == ES.CANVASS
    entries = b"".join(session_entries(0, 0, [b"x" * 28]))
    end = len(entries)
    leader_log_position = end + 60
    probe.deliver(
        0,
        probe.new_leadership_term(
            0,
            1,
            next_leadership_term_id=0,
            next_term_base_log_position=0,
            next_log_position=end,
            term_base_log_position=end,
            log_position=leader_log_position,
        ),
    )
    assert probe.state == ES.FOLLOWER_LOG_REPLICATION
    probe.settle()
    [request] = probe.sent(ReplayRequest, dst=0)
    assert (request.from_position, request.to_position) == (0, end)
    mark = probe.mark()
    probe.deliver(
        0,
        ReplayBlock(
            correlation_id=request.correlation_id,
            recording_id=0,
            start_position=0,
            recording_stop_position=end,
            leadership_term_id=1,
            purpose=ReplayPurpose.REPLICATION,
            flags=ReplayBlockFlags.LAST,
            entries=entries,
        ),
        channel=Channel.ARCHIVE,
    )
    probe.run_for(probe.timeouts.leader_heartbeat_interval_ns + 1, lambda: bool(probe.sent(AppendPosition, since=mark)))
    append = probe.sent(AppendPosition, dst=0, since=mark)[-1]
    assert (append.leadership_term_id, append.log_position, append.follower_member_id) == (1, end, 1)
    probe.deliver(0, probe.commit_position(0, 1, leader_log_position))
    probe.settle()
    assert states(probe).count(ES.CANVASS) == 2


def test_follower_should_timeout_leader_if_replicate_log_position_is_not_committed_by_leader(tmp_path: Path) -> None:
    """ElectionTest.followerShouldTimeoutLeaderIfReplicateLogPositionIsNotCommittedByLeader: after a
    RequestVote (FOLLOWER_BALLOT) the leader's NewLeadershipTerm sends the follower to replicate; it
    replicates and reports, never enters FOLLOWER_REPLAY, and when the leader does not commit within
    the heartbeat timeout the election fails (Aeron: TimeoutException; ours: an election error and
    INIT, as every election error)."""
    from clusterlab.core.codec.consensus import AppendPosition
    from clusterlab.core.codec.enums import ReplayBlockFlags, ReplayPurpose
    from clusterlab.core.codec.transport import ReplayBlock, ReplayRequest

    from tests.sim.probe import session_entries

    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    assert probe.state == ES.CANVASS
    entries = b"".join(session_entries(0, 0, [b"x" * 28]))
    end = len(entries)
    probe.deliver(0, probe.request_vote(0, candidate_term_id=1, log_leadership_term_id=0, log_position=end))
    probe.settle()
    assert probe.state == ES.FOLLOWER_BALLOT
    probe.deliver(
        0,
        probe.new_leadership_term(
            0,
            1,
            next_leadership_term_id=0,
            next_term_base_log_position=0,
            next_log_position=end,
            term_base_log_position=end,
        ),
    )
    assert probe.state == ES.FOLLOWER_LOG_REPLICATION
    probe.settle()
    [request] = probe.sent(ReplayRequest, dst=0)
    mark = probe.mark()
    probe.deliver(
        0,
        ReplayBlock(
            correlation_id=request.correlation_id,
            recording_id=0,
            start_position=0,
            recording_stop_position=end,
            leadership_term_id=1,
            purpose=ReplayPurpose.REPLICATION,
            flags=ReplayBlockFlags.LAST,
            entries=entries,
        ),
        channel=Channel.ARCHIVE,
    )
    probe.run_for(probe.timeouts.leader_heartbeat_interval_ns + 1, lambda: bool(probe.sent(AppendPosition, since=mark)))
    append = probe.sent(AppendPosition, dst=0, since=mark)[-1]
    assert (append.leadership_term_id, append.log_position) == (1, end)
    assert ES.FOLLOWER_REPLAY not in states(probe)
    probe.run_for(probe.timeouts.leader_heartbeat_timeout_ns + probe.timeouts.leader_heartbeat_interval_ns)
    assert ES.FOLLOWER_REPLAY not in states(probe)
    errors = probe.events_of("error")
    assert errors and errors[0]["detail"]["where"] == "FOLLOWER_LOG_REPLICATION"
    assert states(probe).count(ES.INIT) >= 2, "the election restarted at INIT"
