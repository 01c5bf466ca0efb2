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
from clusterlab.core.codec.transport import ReplayBlock
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE, PROTOCOL_VERSION, Channel, ElectionState, Role
from clusterlab.core.consensus.recording_log import EntryType, RecordingLog
from clusterlab.core.runtime.storage import FileStorage

from tests.sim.probe import Probe

ES = ElectionState


def states(probe: Probe) -> list[ElectionState]:
    return probe.states_entered()


def state(probe: Probe) -> ElectionState | None:
    """The election state now (a call, so that type checkers do not narrow it across duty cycles)."""
    return probe.state


def role(probe: Probe) -> Role:
    """The member's role now (a call, as ``state``)."""
    return probe.cm.role


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
    assert state(probe) == ES.CANVASS
    probe.deliver(1, probe.canvass(1))
    probe.deliver(2, probe.canvass(2))
    probe.work(2)
    assert state(probe) == ES.NOMINATE
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
    assert (state(probe), role(probe)) == (ES.CANDIDATE_BALLOT, Role.CANDIDATE)
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
    assert role(probe) == Role.LEADER


def test_should_vote_for_appointed_leader(tmp_path: Path) -> None:
    """ElectionTest.shouldVoteForAppointedLeader"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    assert state(probe) == ES.CANVASS
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
    assert state(probe) == ES.FOLLOWER_BALLOT
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
    assert state(probe) == ES.CANVASS
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
    assert state(probe) == ES.NOMINATE


def test_should_vote_for_candidate_during_nomination(tmp_path: Path) -> None:
    """ElectionTest.shouldVoteForCandidateDuringNomination"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    assert state(probe) == ES.CANVASS
    probe.work(2)
    probe.deliver(0, probe.canvass(0))
    probe.deliver(2, probe.canvass(2))
    probe.work(3)
    assert state(probe) == ES.NOMINATE
    probe.deliver(0, probe.request_vote(0, candidate_term_id=0), now_ns=4)
    probe.work(4)
    assert state(probe) == ES.FOLLOWER_BALLOT


def test_should_timeout_canvass_with_majority(tmp_path: Path) -> None:
    """ElectionTest.shouldTimeoutCanvassWithMajority: member 0 reports by AppendPosition, then the
    startup canvass timeout passes with a quorum."""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    assert state(probe) == ES.CANVASS
    probe.deliver(0, probe.append_position(0, NULL_VALUE, 0))
    probe.work(2)
    assert state(probe) == ES.CANVASS
    probe.work(2 + probe.timeouts.startup_canvass_timeout_ns)
    assert state(probe) == ES.NOMINATE


def test_should_win_candidate_ballot_with_majority(tmp_path: Path) -> None:
    """ElectionTest.shouldWinCandidateBallotWithMajority"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    probe.deliver(0, probe.canvass(0))
    probe.deliver(2, probe.canvass(2))
    probe.work(2)
    assert state(probe) == ES.NOMINATE
    probe.run_for(probe.timeouts.election_timeout_ns >> 1, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert state(probe) == ES.CANDIDATE_BALLOT
    probe.deliver(2, probe.vote(2, yes=True))
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state != ES.CANDIDATE_BALLOT)
    assert state(probe) == ES.LEADER_LOG_REPLICATION


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
    assert state(probe) == ES.CANVASS
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
    joins = [
        s.msg for s in probe.sends(JoinLog, since=mark) if s.channel == Channel.SERVICE and isinstance(s.msg, JoinLog)
    ]
    assert joins, probe.cm.describe()
    assert joins[-1].is_startup == (BooleanType.TRUE if is_leader_start else BooleanType.FALSE)


def test_should_elect_candidate_with_full_vote(tmp_path: Path) -> None:
    """ElectionTest.shouldElectCandidateWithFullVote"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    probe.deliver(0, probe.canvass(0))
    probe.deliver(2, probe.canvass(2))
    probe.work(2)
    assert state(probe) == ES.NOMINATE
    probe.run_for(probe.timeouts.election_timeout_ns >> 1, lambda: probe.state == ES.CANDIDATE_BALLOT)
    probe.deliver(0, probe.vote(0, yes=True), now_ns=probe.now_ns + 1)
    probe.deliver(2, probe.vote(2, yes=True))
    probe.work()
    assert state(probe) == ES.LEADER_LOG_REPLICATION


def test_should_timeout_candidate_ballot_without_majority(tmp_path: Path) -> None:
    """ElectionTest.shouldTimeoutCandidateBallotWithoutMajority"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    probe.deliver(0, probe.canvass(0))
    probe.deliver(2, probe.canvass(2))
    probe.work(2)
    probe.run_for(probe.timeouts.election_timeout_ns >> 1, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert state(probe) == ES.CANDIDATE_BALLOT
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state != ES.CANDIDATE_BALLOT)
    assert in_order(states(probe), [ES.CANVASS, ES.NOMINATE, ES.CANDIDATE_BALLOT, ES.CANVASS])
    assert probe.election.leadership_term_id == NULL_VALUE


def test_should_timeout_failed_candidate_ballot_on_split_vote_then_succeed_on_retry(tmp_path: Path) -> None:
    """ElectionTest.shouldTimeoutFailedCandidateBallotOnSplitVoteThenSucceedOnRetry"""
    probe = Probe(tmp_path, member_id=1)
    probe.work(1)
    probe.deliver(0, probe.canvass(0))
    probe.run_for(probe.timeouts.startup_canvass_timeout_ns, lambda: probe.state == ES.NOMINATE)
    assert state(probe) == ES.NOMINATE
    probe.run_for(probe.timeouts.election_timeout_ns >> 1, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert state(probe) == ES.CANDIDATE_BALLOT
    probe.deliver(2, probe.vote(2, yes=False), now_ns=probe.now_ns + 1)
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state != ES.CANDIDATE_BALLOT)
    assert state(probe) == ES.CANVASS
    probe.deliver(0, probe.canvass(0))
    probe.run_for(probe.timeouts.leader_heartbeat_timeout_ns, lambda: probe.state == ES.NOMINATE)
    assert state(probe) == ES.NOMINATE
    probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert state(probe) == ES.CANDIDATE_BALLOT
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
    assert state(probe) == ES.FOLLOWER_BALLOT
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
    assert state(probe) == ES.CANVASS
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
    assert state(probe) == ES.NOMINATE
    probe.run_for(2 * probe.timeouts.election_timeout_ns, lambda: probe.state == ES.CANDIDATE_BALLOT)
    assert state(probe) == ES.CANDIDATE_BALLOT
    candidate_term_id = probe.election.candidate_term_id
    assert candidate_term_id == log_term + 1
    probe.deliver(1, probe.vote(1, yes=True, log_leadership_term_id=log_term, log_position=96))
    probe.run_for(2 * probe.timeouts.election_timeout_ns, lambda: probe.state == ES.LEADER_LOG_REPLICATION)
    assert state(probe) == ES.LEADER_LOG_REPLICATION
    mark = probe.mark()
    probe.run_for(probe.timeouts.election_timeout_ns)
    assert state(probe) == ES.LEADER_LOG_REPLICATION, "no move while the quorum position is behind"
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
    assert state(probe) == ES.CANVASS
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
    assert state(probe) == ES.FOLLOWER_LOG_REPLICATION
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
    assert state(probe) == ES.CANVASS
    entries = b"".join(session_entries(0, 0, [b"x" * 28]))
    end = len(entries)
    probe.deliver(0, probe.request_vote(0, candidate_term_id=1, log_leadership_term_id=0, log_position=end))
    probe.settle()
    assert state(probe) == ES.FOLLOWER_BALLOT
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
    assert state(probe) == ES.FOLLOWER_LOG_REPLICATION
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


# ---------------------------------------------------------------------------- a follower with a log
# Aeron's positions 60 and 120 are not 32-byte frame aligned: ours are 64 and 128 (one, two entries).
TERM_BASE_60 = 64
TERM_BASE_120 = 128
LOG_SESSION_ID = 777


def entries_between(start: int, end: int, leadership_term_id: int) -> bytes:
    """Framed application entries filling ``[start, end)`` of the log in ``leadership_term_id``."""
    from tests.sim.probe import session_entries

    one = len(session_entries(0, leadership_term_id, [b""])[0])
    assert (end - start) % one == 0, (start, end)
    return b"".join(session_entries(start, leadership_term_id, [b""] * ((end - start) // one)))


def follower_with_log(directory: Path, log_term: int, term_base: int, append: int) -> Probe:
    """Member 1 whose log ends in ``log_term`` (begun at ``term_base``) at ``append``, all of it committed
    under leader 0, restarted: its node-startup election (Aeron ``new Election(true, ..)``) starts from
    (log term ``log_term``, append position ``append``). With no snapshot its log position is 0."""
    probe = Probe(directory, member_id=1)
    probe.to_follower(leader=0, leadership_term_id=log_term if term_base == 0 else log_term - 1)
    first_end = term_base if term_base > 0 else append
    if first_end > 0:
        entries = entries_between(0, first_end, probe.cm.leadership_term_id)
        probe.deliver(0, probe.log_block(0, probe.cm.leadership_term_id, 0, entries, first_end), channel=Channel.LOG)
        probe.settle()
    if term_base > 0:
        probe.cm.enter_election(probe.now_ns, "test")  # leader 0 starts term log_term at term_base
        probe.settle()
        assert state(probe) == ES.CANVASS, probe.cm.describe()
        nlt = probe.new_leadership_term(
            0, log_term, log_leadership_term_id=log_term - 1, term_base_log_position=term_base
        )
        probe.deliver(0, nlt)
        probe.run_for(probe.timeouts.election_timeout_ns, lambda: probe.cm.election is None)
        assert probe.cm.election is None and probe.cm.leadership_term_id == log_term, probe.cm.describe()
        if append > term_base:
            entries = entries_between(term_base, append, log_term)
            probe.deliver(0, probe.log_block(0, log_term, term_base, entries, append), channel=Channel.LOG)
            probe.settle()
    assert (probe.cm.append_position, probe.cm.commit_position) == (append, append), probe.cm.describe()
    probe.restart()
    return probe


def aeron_nlt(
    log_term: int,
    next_term: int,
    next_base: int,
    next_log_position: int,
    term: int,
    base: int,
    log_position: int,
    log_session_id: int,
    is_startup: bool,
) -> NewLeadershipTerm:
    """Leader 0's NewLeadershipTerm in the argument order of Aeron's ``Election.onNewLeadershipTerm``
    (logLeadershipTermId, nextLeadershipTermId, nextTermBaseLogPosition, nextLogPosition, leadershipTermId,
    termBaseLogPosition, logPosition, .., logSessionId, isStartup)."""
    return Probe.new_leadership_term(
        0,
        term,
        log_leadership_term_id=log_term,
        next_leadership_term_id=next_term,
        next_term_base_log_position=next_base,
        next_log_position=next_log_position,
        term_base_log_position=base,
        log_position=log_position,
        log_session_id=log_session_id,
        is_startup=is_startup,
    )


def incarnation_states(probe: Probe) -> list[ElectionState]:
    """The election states the probe's current incarnation entered (Aeron's state counter)."""
    return [
        ElectionState[e["detail"]["to"]]
        for e in probe.events
        if e["kind"] == "election_state" and e["incarnation"] == probe.incarnation
    ]


def replay_block(request_correlation_id: int, start: int, end: int, leadership_term_id: int) -> ReplayBlock:
    """The leader archive's answer to our ReplayRequest: the whole of ``[start, end)`` in one block."""
    from clusterlab.core.codec.enums import ReplayBlockFlags, ReplayPurpose

    return ReplayBlock(
        correlation_id=request_correlation_id,
        recording_id=0,
        start_position=start,
        recording_stop_position=end,
        leadership_term_id=leadership_term_id,
        purpose=ReplayPurpose.REPLICATION,
        flags=ReplayBlockFlags.LAST,
        entries=entries_between(start, end, leadership_term_id),
    )


def test_follower_should_replicate_log_before_replay_during_election(tmp_path: Path) -> None:
    """ElectionTest.followerShouldReplicateLogBeforeReplayDuringElection: a follower whose log ends in
    term 0 at 60 votes for candidate term 2 (whose log is in term 1 at 120); the leader's NewLeadershipTerm
    for a log in term 1 sends it back to CANVASS (its second), where it canvasses (0, 60, term 0); the
    NewLeadershipTerm tailored to term 0 (term 1 ran 60..120) sends it to replicate term 1 up to 120 from
    the leader's archive. While nothing arrives it stays; once replicated it reports AppendPosition(term 2,
    120) and stays until the leader's CommitPosition covers it, then canvasses (its third CANVASS).
    Positions 60/120 are ours 64/128; our log position at node start is 0 (no snapshot), Aeron's 60: the
    replication path does not read it. Aeron's mocked RecordingReplication (four polls without an end,
    then ended/stopped at 120) is our ReplayRequest and the leader's ReplayBlock; ``pollArchiveEvents``
    has no counterpart beyond those duty cycles."""
    from clusterlab.core.codec.consensus import AppendPosition
    from clusterlab.core.codec.transport import ReplayRequest

    term0_id, term1_id, term2_id = 0, 1, 2
    term1_base, term2_base = TERM_BASE_60, TERM_BASE_120
    probe = follower_with_log(tmp_path, log_term=term0_id, term_base=0, append=term1_base)
    probe.work(probe.now_ns + 1)
    assert incarnation_states(probe).count(ES.CANVASS) == 1

    probe.deliver(
        0, probe.request_vote(0, candidate_term_id=term2_id, log_leadership_term_id=term1_id, log_position=term2_base)
    )
    assert state(probe) == ES.FOLLOWER_BALLOT
    probe.deliver(
        0,
        aeron_nlt(term1_id, term2_id, term2_base, term2_base, term2_id, term2_base, term2_base, 0, True),
    )
    assert incarnation_states(probe).count(ES.CANVASS) == 2

    mark = probe.mark()
    probe.work(probe.now_ns + 1)
    assert probe.canvass(1, term0_id, term1_base, term0_id) in probe.sent(CanvassPosition, dst=0, since=mark)

    probe.deliver(
        0,
        aeron_nlt(term0_id, term1_id, term1_base, term2_base, term2_id, term2_base, term2_base, 0, True),
    )
    mark = probe.mark()
    probe.work(probe.now_ns + 1)
    [request] = probe.sent(ReplayRequest, dst=0, since=mark)
    assert (request.recording_id, request.from_position, request.to_position) == (0, term1_base, term2_base)

    for _ in range(4):  # the replication has not ended
        probe.work(probe.now_ns + 1)
    assert state(probe) == ES.FOLLOWER_LOG_REPLICATION

    probe.deliver(0, replay_block(request.correlation_id, term1_base, term2_base, term1_id), channel=Channel.ARCHIVE)
    mark = probe.mark()
    probe.run_for(
        probe.timeouts.leader_heartbeat_interval_ns + 1,
        lambda: any(a.log_position == term2_base for a in probe.sent(AppendPosition, since=mark)),
    )
    append = probe.sent(AppendPosition, dst=0, since=mark)[-1]
    assert (append.leadership_term_id, append.log_position, append.follower_member_id, append.flags) == (
        term2_id,
        term2_base,
        1,
        0,
    )
    assert incarnation_states(probe).count(ES.CANVASS) == 2
    assert state(probe) == ES.FOLLOWER_LOG_REPLICATION

    probe.deliver(0, probe.commit_position(0, term2_id, term2_base))
    probe.work(probe.now_ns + 1)
    assert incarnation_states(probe).count(ES.CANVASS) == 3
    entry = probe.cm.recording_log.find_term_entry(term1_id)
    assert entry is not None and (entry.term_base_log_position, entry.log_position) == (term1_base, term2_base)


def test_follower_should_progress_through_failed_elections_terms_immediately_prior_to_current(
    tmp_path: Path,
) -> None:
    """ElectionTest.followerShouldProgressThroughFailedElectionsTermsImmediatelyPriorToCurrent: a follower
    whose log is in term 1 (begun at 60, ending there) votes for candidate term 10 (log in term 1 at 120);
    terms 2..9 were failed elections, so the leader's NewLeadershipTerm says term 1 ran to 120 and term 10
    begins there: the follower goes straight to FOLLOWER_LOG_REPLICATION of term 1 and asks the leader's
    archive for its recording up to 120. Positions 60/120 are ours 64/128."""
    from clusterlab.core.codec.transport import ReplayRequest

    term1_id, term10_id = 1, 10
    term1_base, term10_base = TERM_BASE_60, TERM_BASE_120
    probe = follower_with_log(tmp_path, log_term=term1_id, term_base=term1_base, append=term1_base)
    probe.work(probe.now_ns + 1)
    assert incarnation_states(probe) == [ES.INIT, ES.CANVASS]

    probe.deliver(
        0, probe.request_vote(0, candidate_term_id=term10_id, log_leadership_term_id=term1_id, log_position=term10_base)
    )
    assert state(probe) == ES.FOLLOWER_BALLOT
    probe.deliver(
        0,
        aeron_nlt(term1_id, term10_id, term10_base, term10_base, term10_id, term10_base, term10_base, 0, True),
    )
    assert state(probe) == ES.FOLLOWER_LOG_REPLICATION

    mark = probe.mark()
    probe.work(probe.now_ns + 1)
    [request] = probe.sent(ReplayRequest, dst=0, since=mark)
    assert (request.recording_id, request.from_position, request.to_position) == (0, term1_base, term10_base)


def test_follower_should_progress_through_interim_elections_terms(tmp_path: Path) -> None:
    """ElectionTest.followerShouldProgressThroughInterimElectionsTerms: a follower with an empty log in
    term 0 votes for candidate term 10 (log in term 9 at 120); the leader's NewLeadershipTerm for a log in
    term 9 sends it back to CANVASS, where it canvasses (0, 0, term 0). The leader then walks it through
    the empty terms 1..8 one NewLeadershipTerm at a time (term i ended at 0, term i + 1 begins and ends at
    0): each enters FOLLOWER_LOG_REPLICATION, needs nothing replicated, records the term and canvasses
    again with (i + 1, 0, term 10). Term 8's NewLeadershipTerm (term 9 began at 60) sends it to replicate
    term 8 up to 60. Positions 60/120 are ours 64/128."""
    from clusterlab.core.codec.transport import ReplayRequest

    term9_id, term10_id = 9, 10
    term9_base, term10_base = TERM_BASE_60, TERM_BASE_120
    probe = follower_with_log(tmp_path, log_term=0, term_base=0, append=0)
    probe.work(probe.now_ns + 1)
    assert incarnation_states(probe) == [ES.INIT, ES.CANVASS]

    probe.deliver(
        0, probe.request_vote(0, candidate_term_id=term10_id, log_leadership_term_id=term9_id, log_position=term10_base)
    )
    assert state(probe) == ES.FOLLOWER_BALLOT

    def nlt(log_term: int, next_term: int, next_base: int, next_log_position: int) -> NewLeadershipTerm:
        return aeron_nlt(
            log_term, next_term, next_base, next_log_position, term10_id, term10_base, term10_base, 0, True
        )

    seen = len(incarnation_states(probe))
    probe.deliver(0, nlt(term9_id, term10_id, term10_base, term10_base))
    assert incarnation_states(probe)[seen:] == [ES.CANVASS]
    mark = probe.mark()
    probe.work(probe.now_ns + 1)
    assert probe.canvass(1, 0, 0, 0) in probe.sent(CanvassPosition, dst=0, since=mark)

    for i in range(term9_id - 1):
        seen = len(incarnation_states(probe))
        mark = probe.mark()
        probe.deliver(0, nlt(i, i + 1, 0, 0))
        probe.work(probe.now_ns + 1)
        assert ES.FOLLOWER_LOG_REPLICATION in incarnation_states(probe)[seen:]
        probe.work(probe.now_ns + 1)
        assert incarnation_states(probe)[seen:] == [ES.FOLLOWER_LOG_REPLICATION, ES.CANVASS]
        probe.work(probe.now_ns + 1)
        assert probe.canvass(1, i + 1, 0, term10_id) in probe.sent(CanvassPosition, dst=0, since=mark)
        assert probe.sent(ReplayRequest, since=mark) == [], "nothing to replicate in an empty term"

    seen = len(incarnation_states(probe))
    mark = probe.mark()
    probe.deliver(0, nlt(term9_id - 1, term9_id, term9_base, term10_base))
    probe.work(probe.now_ns + 1)
    assert incarnation_states(probe)[seen:] == [ES.FOLLOWER_LOG_REPLICATION]
    probe.work(probe.now_ns + 1)
    [request] = probe.sent(ReplayRequest, dst=0, since=mark)
    assert (request.recording_id, request.from_position, request.to_position) == (0, 0, term9_base)
    with RecordingLog.open(FileStorage(tmp_path)) as rl:
        terms = [(t, e.term_base_log_position, e.log_position) for t in range(term9_id) if (e := rl.find_term_entry(t))]
    assert terms == [(t, 0, 0) for t in range(term9_id)], "each empty term recorded as begun and ended at 0"


def test_follower_should_replay_and_catchup_when_late_joining_cluster_in_same_term(tmp_path: Path) -> None:
    """ElectionTest.followerShouldReplayAndCatchupWhenLateJoiningClusterInSameTerm: a follower whose log is
    in term 1 (begun at 60, ending there) gets the leader's NewLeadershipTerm for term 1 itself (no next
    term) with the leader's log at 120: FOLLOWER_REPLAY, then, its local replay done, FOLLOWER_CATCHUP_INIT
    (the leader is ahead: it asks for a catch-up from 60). Positions 60/120 are ours 64/128. Our log
    position at node start is 0 (no snapshot; Aeron's is 60); a follower replays only what it knows is
    committed (PROTOCOL.md g: nothing after a restart without a snapshot), so its replay ends at once,
    as Aeron's stubbed ``newLogReplay``/``isDone`` do."""
    from clusterlab.core.codec.consensus import CatchupPosition

    leadership_term_id = 1
    follower_log_position, leader_log_position = TERM_BASE_60, TERM_BASE_120
    probe = follower_with_log(
        tmp_path, log_term=leadership_term_id, term_base=follower_log_position, append=follower_log_position
    )
    probe.work(probe.now_ns + 1)
    assert incarnation_states(probe) == [ES.INIT, ES.CANVASS]

    probe.deliver(
        0,
        aeron_nlt(
            leadership_term_id,
            NULL_VALUE,
            NULL_POSITION,
            NULL_POSITION,
            leadership_term_id,
            follower_log_position,
            leader_log_position,
            LOG_SESSION_ID,
            True,
        ),
    )
    assert state(probe) == ES.FOLLOWER_REPLAY
    mark = probe.mark()
    probe.run_for(
        probe.timeouts.leader_heartbeat_interval_ns, lambda: ES.FOLLOWER_CATCHUP_INIT in incarnation_states(probe)
    )
    assert in_order(incarnation_states(probe), [ES.CANVASS, ES.FOLLOWER_REPLAY, ES.FOLLOWER_CATCHUP_INIT])
    assert probe.election.log_position == follower_log_position
    probe.work(probe.now_ns + 1)
    [catchup] = probe.sent(CatchupPosition, dst=0, since=mark)
    assert (catchup.leadership_term_id, catchup.log_position) == (leadership_term_id, follower_log_position)


def test_follower_should_replicate_replay_and_catchup_when_late_joining_cluster_in_later_term(tmp_path: Path) -> None:
    """ElectionTest.followerShouldReplicateReplayAndCatchupWhenLateJoiningClusterInLaterTerm: a follower
    with an empty log in term 0 gets the leader's NewLeadershipTerm for term 1 (term 0 ran to 60, the
    leader's log is at 120): FOLLOWER_LOG_REPLICATION of term 0 up to 60 from the leader's archive; once
    replicated it reports AppendPosition(term 1, 60) and, when the leader's CommitPosition (term 1, 120)
    arrives, canvasses again (its second CANVASS). Positions 60/120 are ours 64/128."""
    from clusterlab.core.codec.consensus import AppendPosition
    from clusterlab.core.codec.transport import ReplayRequest

    leadership_term_id = 1
    term_base, leader_log_position = TERM_BASE_60, TERM_BASE_120
    probe = follower_with_log(tmp_path, log_term=0, term_base=0, append=0)
    probe.work(probe.now_ns + 1)
    assert incarnation_states(probe) == [ES.INIT, ES.CANVASS]

    probe.deliver(
        0,
        aeron_nlt(0, 1, term_base, leader_log_position, leadership_term_id, term_base, leader_log_position, 0, False),
    )
    assert state(probe) == ES.FOLLOWER_LOG_REPLICATION
    mark = probe.mark()
    probe.work(probe.now_ns + 1)
    [request] = probe.sent(ReplayRequest, dst=0, since=mark)
    assert (request.recording_id, request.from_position, request.to_position) == (0, 0, term_base)

    probe.deliver(0, replay_block(request.correlation_id, 0, term_base, 0), channel=Channel.ARCHIVE)
    mark = probe.mark()
    probe.run_for(
        probe.timeouts.leader_heartbeat_interval_ns + 1,
        lambda: any(a.log_position == term_base for a in probe.sent(AppendPosition, since=mark)),
    )
    append = probe.sent(AppendPosition, dst=0, since=mark)[-1]
    assert (append.leadership_term_id, append.log_position, append.follower_member_id, append.flags) == (
        leadership_term_id,
        term_base,
        1,
        0,
    )

    probe.deliver(0, probe.commit_position(0, leadership_term_id, leader_log_position))
    probe.work(probe.now_ns + 1)
    assert incarnation_states(probe).count(ES.CANVASS) == 2
    entry = probe.cm.recording_log.find_term_entry(0)
    assert entry is not None and (entry.term_base_log_position, entry.log_position) == (0, term_base)


def member_restarted_from_a_snapshot_alone(directory: Path) -> tuple[Probe, int, int]:
    """Member 1, leader of term 0 then of term 2 (term 1 a failed ballot), snapshots in term 2; its
    recording log is then cut down to that snapshot alone (no TERM entry, as Aeron's recording log after
    ``seedRecordingLogFromSnapshot`` or a backup) and it restarts: its node-startup election starts in
    term 2 at the term's base, from the snapshot's position. Returns (probe, term 2's base, snapshot
    position)."""
    import shutil

    from clusterlab.core.codec.enums import ToggleState
    from clusterlab.core.consensus.context import SERVICE_ID_CONSENSUS_MODULE
    from clusterlab.core.consensus.recording_log import RECORDING_LOG_FILE_NAME

    probe = Probe(directory, member_id=1)
    term0 = probe.to_leader()
    probe.cm.offer(b"term 0", probe.now_ns)
    for p in probe.peers:
        probe.deliver(p, probe.append_position(p, term0, probe.cm.append_position))
    probe.settle()
    probe.restart()
    probe.to_canvass()
    probe.deliver(2, probe.request_vote(2, candidate_term_id=1))  # refused, but term 1 is spent
    term2 = probe.to_leader_ready(log_leadership_term_id=term0, log_position=probe.cm.append_position)
    term2_base = probe.election.log_position
    assert term2 == 2
    for p in probe.peers:
        probe.deliver(p, probe.append_position(p, term2, term2_base))
    probe.settle(lambda: probe.cm.election is None)
    probe.cm.offer(b"term 2", probe.now_ns)
    assert probe.cm.toggle_control(ToggleState.SNAPSHOT)
    probe.settle()
    for p in probe.peers:
        probe.deliver(p, probe.append_position(p, term2, probe.cm.append_position))
    probe.settle()
    assert probe.cm.snapshot_count == 1, probe.cm.describe()
    probe.cm.close()
    with RecordingLog.open(FileStorage(directory)) as old:
        snapshot = old.latest_snapshot(SERVICE_ID_CONSENSUS_MODULE)
    assert snapshot is not None and snapshot.leadership_term_id == term2
    scratch = directory / "seeded"
    scratch.mkdir()
    with RecordingLog(FileStorage(scratch)) as seeded:
        seeded.append_snapshot(
            snapshot.recording_id,
            snapshot.leadership_term_id,
            snapshot.term_base_log_position,
            snapshot.log_position,
            snapshot.timestamp,
            snapshot.service_id,
        )
    shutil.copyfile(scratch / RECORDING_LOG_FILE_NAME, directory / RECORDING_LOG_FILE_NAME)
    return Probe(directory, member_id=1), term2_base, snapshot.log_position


def replicate_initial_term_without_term_entry(directory: Path) -> tuple[Probe, int, int]:
    """The steps of ElectionTest.followerShouldUseInitialLeadershipTermIdAndInitialTermBaseLogPositionWhen-
    RecordingLogIsEmpty up to its last doWork, with Aeron's assertions on the way: a member whose recording
    log holds no TERM entry (only a snapshot in term 2 at 150, term 2 having begun at 120) gets the leader's
    NewLeadershipTerm for term 3 (term 2 ran to 500, the leader's log is at 600), replicates term 2 up to
    500 and, the leader's CommitPosition covering it, records term 2 and canvasses again. Positions
    120/150/500/600 are ours: term 2's base and the snapshot position as a real leader made them, then two
    and four entries further. Aeron's election here is a runtime one with an unstubbed
    ``prepareForNewLeadership`` (append position 0); ours is the node-startup election of the restarted
    member (append position at the snapshot). Returns (probe, term 2's base, the leader's term 3 base)."""
    from clusterlab.core.codec.consensus import AppendPosition
    from clusterlab.core.codec.transport import ReplayRequest

    initial_term_id, leader_term_id = 2, 3
    probe, initial_term_base, snapshot_position = member_restarted_from_a_snapshot_alone(directory)
    leader_term_base = snapshot_position + 2 * TERM_BASE_60
    leader_log_position = leader_term_base + 2 * TERM_BASE_60
    probe.work(probe.now_ns + 1)
    assert incarnation_states(probe) == [ES.INIT, ES.CANVASS]
    assert (probe.election.log_leadership_term_id, probe.election.append_position) == (
        initial_term_id,
        snapshot_position,
    )
    assert probe.cm.recording_log.find_last_term() is None

    probe.deliver(
        0,
        aeron_nlt(
            initial_term_id,
            leader_term_id,
            leader_term_base,
            leader_log_position,
            leader_term_id,
            leader_term_base,
            leader_log_position,
            0,
            False,
        ),
    )
    assert state(probe) == ES.FOLLOWER_LOG_REPLICATION
    mark = probe.mark()
    probe.work(probe.now_ns + 1)
    [request] = probe.sent(ReplayRequest, dst=0, since=mark)
    assert (request.from_position, request.to_position) == (snapshot_position, leader_term_base)
    probe.deliver(
        0,
        replay_block(request.correlation_id, snapshot_position, leader_term_base, initial_term_id),
        channel=Channel.ARCHIVE,
    )
    probe.deliver(0, probe.commit_position(0, leader_term_id, leader_term_base))
    probe.work(probe.now_ns + 1)
    assert probe.sent(AppendPosition, dst=0, since=mark)[-1].log_position == leader_term_base
    assert incarnation_states(probe).count(ES.CANVASS) == 2
    return probe, initial_term_base, leader_term_base


def test_follower_should_use_initial_leadership_term_id_and_initial_term_base_log_position_when_recording_log_is_empty(
    tmp_path: Path,
) -> None:
    """ElectionTest.followerShouldUseInitialLeadershipTermIdAndInitialTermBaseLogPositionWhenRecordingLogIsEmpty
    (steps in ``replicate_initial_term_without_term_entry``): term 2 is recorded with the election's initial
    term base (120) and ends at 500, as Aeron's ``ensureCoherent(RECORDING_ID, 2, 120, 2, 120, 500, ..)``
    makes it. Aeron's initial term id argument (no TERM entry for the terms before it) is the next test."""
    probe, initial_term_base, leader_term_base = replicate_initial_term_without_term_entry(tmp_path)
    assert initial_term_base > 0, "a base that 0 (the recording log's default) cannot stand in for"
    entry = probe.cm.recording_log.find_term_entry(2)
    assert entry is not None
    assert (entry.term_base_log_position, entry.log_position) == (initial_term_base, leader_term_base)


def test_follower_should_use_initial_leadership_term_id_when_recording_log_is_empty(tmp_path: Path) -> None:
    """ElectionTest.followerShouldUseInitialLeadershipTermIdAndInitialTermBaseLogPositionWhenRecordingLogIsEmpty,
    its initial term id: Aeron's ``ensureCoherent(RECORDING_ID, 2, 120, 2, ..)`` on an empty recording log
    appends terms from the initial term 2 on, none before it."""
    probe, _, _ = replicate_initial_term_without_term_entry(tmp_path)
    terms = [e.leadership_term_id for e in probe.cm.recording_log.entries() if e.type == EntryType.TERM]
    assert terms == [2]
