"""One test per rule of docs/protocol.md a (election states) and b (handlers), named after the rule.

Single-member handler rules use the probe (tests/sim/probe.py): one real ConsensusModule whose
peers the test plays message by message. Rules that need several members use the simulator."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from clusterlab.core.codec.consensus import (
    AppendPosition,
    CanvassPosition,
    CatchupPosition,
    CommitPosition,
    NewLeadershipTerm,
    RequestVote,
    StopCatchup,
    TerminationPosition,
    Vote,
)
from clusterlab.core.codec.enums import AppendPositionFlags, BooleanType, ReplayBlockFlags, ReplayPurpose
from clusterlab.core.codec.framing import walk_frames
from clusterlab.core.codec.log_events import NewLeadershipTermEvent
from clusterlab.core.codec.session import SessionEvent
from clusterlab.core.codec.transport import LogBlock, LogEndOfStream, ReplayBlock, ReplayRequest
from clusterlab.core.consensus.context import (
    MS,
    NULL_POSITION,
    NULL_VALUE,
    PROTOCOL_VERSION,
    SECOND,
    Channel,
    ElectionState,
    Role,
    Timeouts,
)
from clusterlab.core.consensus.node_state import NodeState
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.harness.simnet import NetworkConfig

from tests.sim.conftest import SimKit
from tests.sim.probe import Probe, Sent, scripted_backoffs, session_entries

pytestmark = pytest.mark.sim

ES = ElectionState
T = Timeouts.fast()
MEMBER_CHANNELS = (Channel.CONSENSUS, Channel.LOG, Channel.CATCHUP, Channel.ARCHIVE)
TICK = min(T.election_status_interval_ns, T.leader_heartbeat_interval_ns) // 2  # the election's poll tick


def entered_at(probe: Probe, state: ElectionState) -> list[int]:
    """Times at which the probe entered ``state``."""
    return [e["time_ns"] for e in probe.events_of("election_state") if e["detail"]["to"] == state.name]


# ============================================================================ a.1 / a.2 INIT


def test_init_goes_to_canvass(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    assert probe.state == ES.INIT
    assert probe.states_entered() == [ES.INIT]

    probe.work()

    assert probe.state == ES.CANVASS
    assert probe.states_entered() == [ES.INIT, ES.CANVASS]
    assert probe.cm.role == Role.FOLLOWER

    # A runtime election (here: the leader's heartbeat stops) also passes INIT -> CANVASS in one instant.
    probe.to_follower()
    probe.run_for(2 * T.leader_heartbeat_timeout_ns, lambda: probe.state == ES.CANVASS)
    inits, canvasses = entered_at(probe, ES.INIT), entered_at(probe, ES.CANVASS)
    assert len(inits) == 2 and len(canvasses) == 2
    assert inits[1] == canvasses[1]


def test_single_member_cluster_goes_straight_to_leader_log_replication(tmp_path: Path) -> None:
    probe = Probe(tmp_path, members=1)

    # The constructor of a single-member election already chose the term and made itself leader.
    assert probe.state == ES.LEADER_LOG_REPLICATION
    assert probe.states_entered() == [ES.INIT, ES.LEADER_LOG_REPLICATION]
    assert probe.cm.role == Role.LEADER
    assert probe.election.leadership_term_id == 0
    assert probe.candidate_term_on_disk() == 0

    probe.run_for(T.election_timeout_ns, lambda: probe.cm.election is None)
    assert probe.cm.election is None and probe.cm.role == Role.LEADER
    assert probe.cm.leadership_term_id == 0
    assert [s for s in probe.sends() if s.channel in MEMBER_CHANNELS] == [], "a single member talks to nobody"
    assert ES.CANVASS not in probe.states_entered()
    # Alone, it is its own quorum: its first entry (the NewLeadershipTermEvent) commits at once.
    assert probe.cm.append_position > 0
    probe.run_for(T.leader_heartbeat_interval_ns)
    assert probe.cm.commit_position == probe.cm.append_position

    # Restarted, it takes the next term straight away.
    probe.restart()
    assert probe.state == ES.LEADER_LOG_REPLICATION
    assert probe.election.leadership_term_id == 1
    assert probe.candidate_term_on_disk() == 1


# ============================================================================ a.2 CANVASS


def test_canvass_sends_canvass_position_on_status_interval(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()
    entered = entered_at(probe, ES.CANVASS)[0]

    probe.run_for(TICK, lambda: bool(probe.sent(CanvassPosition)))
    first = probe.sends(CanvassPosition)
    assert {s.dst: s.msg for s in first} == {
        p: CanvassPosition(
            log_leadership_term_id=NULL_VALUE,
            log_position=0,
            leadership_term_id=NULL_VALUE,
            follower_member_id=0,
            protocol_version=PROTOCOL_VERSION,
        )
        for p in (1, 2)
    }, "sent to every other member on the first duty cycle in CANVASS"
    t_first = first[0].time_ns
    assert t_first - entered <= TICK

    interval = T.election_status_interval_ns
    probe.run_until(t_first + interval - 1)
    assert len(probe.sent(CanvassPosition)) == 2, "nothing more before the interval"
    probe.run_until(t_first + interval)
    assert len(probe.sent(CanvassPosition)) == 4
    probe.run_until(t_first + 10 * interval)
    assert len(probe.sent(CanvassPosition, dst=1)) == 11
    assert len(probe.sent(CanvassPosition, dst=2)) == 11


def test_first_send_of_a_state_is_immediate_after_entering_it(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.settle()  # INIT -> CANVASS, and whatever else is due at t=0
    assert probe.state == ES.CANVASS
    assert {s.time_ns for s in probe.sends(CanvassPosition)} == {0}

    probe.to_nominate()
    probe.run_until(probe.election.nomination_deadline_ns, lambda: probe.state != ES.NOMINATE)
    entered = entered_at(probe, ES.CANDIDATE_BALLOT)[0]
    probe.run_until(probe.now_ns)  # only what is due at the instant of the transition
    assert [s.time_ns for s in probe.sends(RequestVote)] == [entered, entered]


def test_request_vote_reaches_a_peer_whose_backoff_ends_later_than_the_network_latency(sim: SimKit) -> None:
    # Latency 1 ms; member 0 stands at once, member 1 6 ms later, member 2 much later. Member 0's
    # RequestVote reaches member 1 while it is still in NOMINATE, so member 1 votes instead of standing.
    c = sim.cluster(
        members=3,
        seed=1,
        network=NetworkConfig(min_latency_ns=1 * MS, max_latency_ns=1 * MS),
        member_factory=scripted_backoffs({0: [0], 1: [6 * MS], 2: [100 * MS]}),
    )
    assert c.await_leader(2 * SECOND) == 0
    assert {e["source"] for e in sim.entries(c, ES.CANDIDATE_BALLOT)} == {"node-0"}
    assert set(sim.safety(c).leaders_by_term) == {0}


def test_unanimous_candidate_nominates_before_startup_canvass_timeout(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()

    probe.deliver(1, probe.canvass(1), now_ns=1 * MS)
    probe.settle()
    assert probe.state == ES.CANVASS, "one peer of two is not unanimity, and the startup deadline is far"

    probe.deliver(2, probe.canvass(2), now_ns=3 * MS)
    probe.settle()
    assert probe.state == ES.NOMINATE
    assert entered_at(probe, ES.NOMINATE) == [3 * MS]


def test_peer_with_more_recent_log_denies_unanimity_until_the_canvass_deadline(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()
    probe.deliver(1, probe.canvass(1))
    probe.deliver(2, probe.canvass(2, log_leadership_term_id=0, log_position=96))  # more recent than ours

    probe.run_until(T.startup_canvass_timeout_ns - 1, lambda: probe.state != ES.CANVASS)
    assert probe.state == ES.CANVASS
    # Self and member 1 are a quorum no more recent than us: at the deadline we may stand.
    probe.run_for(TICK, lambda: probe.state != ES.CANVASS)
    assert probe.state == ES.NOMINATE
    assert entered_at(probe, ES.NOMINATE)[0] >= T.startup_canvass_timeout_ns


def test_quorum_candidate_waits_for_startup_canvass_timeout(sim: SimKit) -> None:
    # Start 3 members; member 2 dies before it says anything: unanimity is impossible.
    c = sim.cluster(members=3, seed=11)
    c.kill(2)

    leader = c.await_leader(T.startup_canvass_timeout_ns + 2 * SECOND)

    assert leader in (0, 1)
    nominations = sim.entries(c, ES.NOMINATE)
    assert nominations, "somebody stood"
    assert min(e["time_ns"] for e in nominations) >= T.startup_canvass_timeout_ns
    assert c.now_ns >= T.startup_canvass_timeout_ns
    sim.check(c)


# ============================================================================ a.2 NOMINATE


@pytest.mark.parametrize("seed", range(8))
def test_nomination_backoff_within_half_election_timeout_from_seeded_random(tmp_path: Path, seed: int) -> None:
    expected_backoff = random.Random(seed).randrange(T.election_timeout_ns // 2)
    probe = Probe(tmp_path, rng=random.Random(seed))
    probe.to_canvass()
    probe.run_until(5 * MS)
    probe.all_peers_canvass()
    probe.settle()
    assert probe.state == ES.NOMINATE
    entered = entered_at(probe, ES.NOMINATE)[0]

    deadline = probe.election.nomination_deadline_ns
    assert deadline - entered == expected_backoff, "the back-off is the context rng's draw"
    assert 0 <= deadline - entered < T.election_timeout_ns // 2

    if deadline > entered:
        probe.run_until(deadline - 1, lambda: probe.state != ES.NOMINATE)
        assert probe.state == ES.NOMINATE
    probe.run_until(deadline, lambda: probe.state != ES.NOMINATE)
    assert probe.state == ES.CANDIDATE_BALLOT
    assert entered_at(probe, ES.CANDIDATE_BALLOT) == [deadline]


def test_nomination_backoffs_differ_between_seeds(tmp_path: Path) -> None:
    backoffs = set()
    for seed in range(8):
        probe = Probe(tmp_path / str(seed), rng=random.Random(seed))
        probe.to_nominate()
        backoffs.add(probe.election.nomination_deadline_ns - probe.now_ns)
    assert len(backoffs) > 1


def test_new_leadership_term_ignored_in_nominate(tmp_path: Path) -> None:
    probe = Probe(tmp_path, rng=random.Random(3))
    probe.to_nominate()
    assert probe.election.nomination_deadline_ns > probe.now_ns, "test needs a non-zero back-off"

    probe.deliver(1, probe.new_leadership_term(1, 0))
    assert probe.state == ES.NOMINATE
    assert probe.election.leader_member_id == NULL_VALUE
    assert probe.election.leadership_term_id == NULL_VALUE

    probe.run_until(probe.election.nomination_deadline_ns, lambda: probe.state != ES.NOMINATE)
    assert probe.state == ES.CANDIDATE_BALLOT


# ============================================================================ b.2 RequestVote / e.5


def test_candidate_term_persisted_before_request_vote(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    at_send: list[tuple[int, int]] = []  # (candidate term in the RequestVote, candidate term on disk then)

    def on_send(s: Sent) -> None:
        if isinstance(s.msg, RequestVote):
            at_send.append((s.msg.candidate_term_id, probe.candidate_term_on_disk()))

    probe.outbox.on_send.append(on_send)
    assert probe.candidate_term_on_disk() == NULL_VALUE

    probe.to_candidate_ballot()
    assert at_send == [(0, 0), (0, 0)]

    # The ballot fails (nobody answers); the next nomination persists the next term before asking.
    probe.run_for(T.election_timeout_ns, lambda: probe.state == ES.CANVASS)
    probe.to_candidate_ballot()
    assert at_send[2:] == [(1, 1), (1, 1)]


def test_request_vote_with_stale_candidate_term_gets_no(tmp_path: Path) -> None:
    NodeState.open(FileStorage(tmp_path)).update_candidate_term_id(5, 0, 0)  # voted in term 5 before a restart
    probe = Probe(tmp_path)
    probe.to_canvass()

    for stale in (4, 5):
        mark = probe.mark()
        probe.deliver(1, probe.request_vote(1, candidate_term_id=stale))
        assert probe.sent(Vote, since=mark) == [
            Vote(
                candidate_term_id=stale,
                log_leadership_term_id=NULL_VALUE,
                log_position=0,
                candidate_member_id=1,
                follower_member_id=0,
                vote=BooleanType.FALSE,
            )
        ]
        assert probe.state == ES.CANVASS
    assert probe.candidate_term_on_disk() == 5


def test_request_vote_never_granted_twice_in_one_term(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()
    probe.deliver(1, probe.request_vote(1, candidate_term_id=6))
    assert probe.state == ES.FOLLOWER_BALLOT

    mark = probe.mark()
    probe.deliver(2, probe.request_vote(2, candidate_term_id=6))
    [vote] = probe.sent(Vote, since=mark)
    assert (vote.candidate_member_id, vote.candidate_term_id, vote.vote) == (2, 6, BooleanType.FALSE)

    # ... and not after a restart either: the term is on disk.
    probe.restart()
    probe.to_canvass()
    mark = probe.mark()
    probe.deliver(2, probe.request_vote(2, candidate_term_id=6))
    [vote] = probe.sent(Vote, since=mark)
    assert vote.vote == BooleanType.FALSE


def test_request_vote_from_less_recent_log_gets_no_and_persists_candidate_term(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    log_term, append = probe.with_uncommitted_log()
    probe.to_canvass()
    assert probe.candidate_term_on_disk() == 0
    at_send: list[int] = []
    probe.outbox.on_send.append(
        lambda s: at_send.append(probe.candidate_term_on_disk()) if isinstance(s.msg, Vote) else None
    )

    # Same log term, shorter log.
    probe.deliver(1, probe.request_vote(1, candidate_term_id=3, log_leadership_term_id=log_term, log_position=96))
    [vote] = probe.sent(Vote)
    assert vote == Vote(
        candidate_term_id=3,
        log_leadership_term_id=log_term,
        log_position=append,
        candidate_member_id=1,
        follower_member_id=0,
        vote=BooleanType.FALSE,
    )
    assert at_send == [3], "candidate term persisted before the NO left"
    assert probe.election.candidate_term_id == 3
    assert probe.state == ES.CANVASS

    # An older log term, however long.
    probe.deliver(
        2, probe.request_vote(2, candidate_term_id=4, log_leadership_term_id=NULL_VALUE, log_position=10 * append)
    )
    assert probe.sent(Vote, dst=2)[0].vote == BooleanType.FALSE
    assert probe.candidate_term_on_disk() == 4
    assert probe.state == ES.CANVASS


def test_request_vote_from_less_recent_log_to_a_new_leader_also_gets_a_tailored_new_leadership_term(
    tmp_path: Path,
) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader_ready()
    probe.deliver(2, probe.append_position(2, term, probe.election.log_position))  # a quorum at its position
    mark = probe.mark()
    probe.deliver(
        1, probe.request_vote(1, candidate_term_id=term + 1, log_leadership_term_id=NULL_VALUE, log_position=0)
    )
    [vote] = probe.sent(Vote, since=mark)
    assert vote.vote == BooleanType.FALSE
    [nlt] = probe.sent(NewLeadershipTerm, dst=1, since=mark)
    assert (nlt.leadership_term_id, nlt.log_leadership_term_id, nlt.leader_member_id) == (term, NULL_VALUE, 0)
    assert probe.candidate_term_on_disk() == term + 1
    assert probe.state == ES.LEADER_READY


def test_a_leader_ready_without_its_quorum_stands_again_when_asked_to_vote_in_a_later_term(tmp_path: Path) -> None:
    """Its followers left to vote in later terms (their vote promise keeps them from following it) and its
    more recent log refuses every candidate: it refuses this one too, then restarts its election."""
    probe = Probe(tmp_path)
    term = probe.to_leader_ready()
    mark = probe.mark()
    probe.deliver(
        1, probe.request_vote(1, candidate_term_id=term + 1, log_leadership_term_id=NULL_VALUE, log_position=0)
    )
    [vote] = probe.sent(Vote, since=mark)
    assert vote.vote == BooleanType.FALSE
    assert probe.candidate_term_on_disk() == term + 1
    assert probe.state not in (ES.LEADER_READY, ES.CLOSED)


def _to_state(probe: Probe, state: ElectionState) -> None:
    if state == ES.CANVASS:
        probe.to_canvass()
    elif state == ES.NOMINATE:
        probe.to_nominate()
    elif state == ES.CANDIDATE_BALLOT:
        probe.to_candidate_ballot()
    elif state == ES.FOLLOWER_BALLOT:
        probe.to_canvass()
        probe.deliver(2, probe.request_vote(2, candidate_term_id=0))
    assert probe.state == state


@pytest.mark.parametrize("state", [ES.CANVASS, ES.NOMINATE, ES.CANDIDATE_BALLOT, ES.FOLLOWER_BALLOT])
def test_request_vote_granted_moves_to_follower_ballot_and_vote_is_persisted_before_send(
    tmp_path: Path, state: ElectionState
) -> None:
    probe = Probe(tmp_path, rng=random.Random(3))  # a non-zero nomination back-off
    _to_state(probe, state)
    candidate_term = probe.election.candidate_term_id + 1
    at_send: list[tuple[Vote, int]] = []
    probe.outbox.on_send.append(
        lambda s: at_send.append((s.msg, probe.candidate_term_on_disk())) if isinstance(s.msg, Vote) else None
    )

    probe.deliver(1, probe.request_vote(1, candidate_term_id=candidate_term))

    assert at_send == [
        (
            Vote(
                candidate_term_id=candidate_term,
                log_leadership_term_id=NULL_VALUE,
                log_position=0,
                candidate_member_id=1,
                follower_member_id=0,
                vote=BooleanType.TRUE,
            ),
            candidate_term,
        )
    ]
    assert probe.state == ES.FOLLOWER_BALLOT
    # a.1: FOLLOWER_BALLOT has no entry action on the role (a candidate stays CANDIDATE until CANVASS or
    # it follows a leader).
    assert probe.cm.role == (Role.CANDIDATE if state == ES.CANDIDATE_BALLOT else Role.FOLLOWER)


def test_request_vote_in_leader_states_is_not_answered(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader_ready()
    mark = probe.mark()
    # Log as recent as the new leader's, a higher term: rule 4 (no reply, no change).
    probe.deliver(1, probe.request_vote(1, candidate_term_id=term + 1, log_leadership_term_id=term, log_position=0))
    assert probe.sent(Vote, since=mark) == []
    assert probe.state == ES.LEADER_READY


def test_request_vote_outside_election_with_higher_term_enters_election(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    mark = probe.mark()

    probe.deliver(2, probe.request_vote(2, candidate_term_id=0))
    assert probe.cm.election is None, "not a higher term: ignored"

    probe.deliver(2, probe.request_vote(2, candidate_term_id=1))
    assert probe.state == ES.INIT
    assert probe.events_of("election_start")[-1]["detail"]["reason"] == "unexpected vote request"
    assert probe.sent(Vote, since=mark) == [], "the request itself is not answered"


# ============================================================================ b.3 Vote, a.2 CANDIDATE_BALLOT


def test_vote_counted_only_in_candidate_ballot_for_own_term(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_candidate_ballot()
    mine = probe.election.candidate_term_id
    ignored = [
        probe.vote(1, yes=True, candidate_term_id=mine + 1),  # another term
        probe.vote(2, yes=True, candidate_term_id=mine - 1),
        probe.vote(1, yes=True, candidate_member_id=2),  # a vote for someone else
        probe.vote(2, yes=True, candidate_member_id=1),
    ]
    for v in ignored:
        probe.deliver(v.follower_member_id, v)
    probe.settle()
    assert probe.state == ES.CANDIDATE_BALLOT
    assert [probe.cm.status(i).vote for i in (1, 2)] == [None, None]

    # Votes arriving outside CANDIDATE_BALLOT are not counted either.
    probe.run_for(T.election_timeout_ns, lambda: probe.state == ES.CANVASS)
    assert probe.state == ES.CANVASS
    probe.deliver(1, probe.vote(1, yes=True, candidate_term_id=mine))
    assert probe.cm.status(1).vote is None

    # The right vote in the ballot is counted.
    probe.to_candidate_ballot()
    probe.deliver(1, probe.vote(1, yes=True))
    assert probe.cm.status(1).vote is True
    assert probe.cm.status(1).candidate_term_id == probe.election.candidate_term_id


def test_candidate_ballot_unanimous_wins_immediately(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_candidate_ballot()
    started = probe.now_ns
    candidate_term = probe.election.candidate_term_id

    probe.deliver(1, probe.vote(1, yes=True))
    probe.work()
    assert probe.state == ES.CANDIDATE_BALLOT, "one YES of two is not unanimity"
    probe.deliver(2, probe.vote(2, yes=True))
    probe.work()

    assert probe.state == ES.LEADER_LOG_REPLICATION
    assert entered_at(probe, ES.LEADER_LOG_REPLICATION) == [started]
    assert probe.election.leadership_term_id == candidate_term
    assert probe.election.leader_member_id == 0
    assert probe.cm.role == Role.LEADER


def test_candidate_ballot_quorum_wins_at_election_timeout_without_no_votes(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_candidate_ballot()
    started = entered_at(probe, ES.CANDIDATE_BALLOT)[0]
    probe.deliver(1, probe.vote(1, yes=True))  # member 2 never answers

    probe.run_until(started + T.election_timeout_ns - 1, lambda: probe.state != ES.CANDIDATE_BALLOT)
    assert probe.state == ES.CANDIDATE_BALLOT
    probe.run_for(TICK + 1, lambda: probe.state != ES.CANDIDATE_BALLOT)
    assert probe.state == ES.LEADER_LOG_REPLICATION
    assert entered_at(probe, ES.LEADER_LOG_REPLICATION)[0] >= started + T.election_timeout_ns


def test_candidate_ballot_no_vote_blocks_quorum_win(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_candidate_ballot()
    started = entered_at(probe, ES.CANDIDATE_BALLOT)[0]
    probe.deliver(1, probe.vote(1, yes=True))
    probe.deliver(2, probe.vote(2, yes=False))

    probe.run_for(T.election_timeout_ns + TICK, lambda: probe.state != ES.CANDIDATE_BALLOT)

    assert probe.state == ES.CANVASS
    assert entered_at(probe, ES.CANVASS)[-1] >= started + T.election_timeout_ns
    assert ES.LEADER_LOG_REPLICATION not in probe.states_entered()
    assert probe.cm.role == Role.FOLLOWER


def test_candidate_ballot_without_quorum_returns_to_canvass(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_candidate_ballot()
    probe.run_for(T.election_timeout_ns + TICK, lambda: probe.state != ES.CANDIDATE_BALLOT)
    assert probe.state == ES.CANVASS
    assert probe.cm.role == Role.FOLLOWER


# ============================================================================ a.2 FOLLOWER_BALLOT


def test_follower_ballot_times_out_to_canvass(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()
    probe.deliver(1, probe.request_vote(1, candidate_term_id=0), now_ns=7 * MS)
    assert probe.state == ES.FOLLOWER_BALLOT
    mark = probe.mark()

    probe.run_until(7 * MS + T.election_timeout_ns - 1, lambda: probe.state != ES.FOLLOWER_BALLOT)
    assert probe.state == ES.FOLLOWER_BALLOT
    assert probe.sends(since=mark) == [], "FOLLOWER_BALLOT sends nothing"
    probe.run_for(TICK + 1, lambda: probe.state != ES.FOLLOWER_BALLOT)
    assert probe.state == ES.CANVASS
    assert entered_at(probe, ES.CANVASS)[-1] >= 7 * MS + T.election_timeout_ns


# ============================================================================ b.4 NewLeadershipTerm


def test_new_leadership_term_with_other_log_term_sends_follower_back_to_canvass(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()
    probe.deliver(1, probe.request_vote(1, candidate_term_id=4))
    assert probe.state == ES.FOLLOWER_BALLOT

    # An NLT for a term other than the one we voted in is not acceptable in FOLLOWER_BALLOT.
    probe.deliver(1, probe.new_leadership_term(1, 3))
    assert probe.state == ES.FOLLOWER_BALLOT

    # The right term, but built for a log that ends in another term than ours: wait for a tailored one.
    probe.deliver(1, probe.new_leadership_term(1, 4, log_leadership_term_id=2, term_base_log_position=0))
    assert probe.state == ES.CANVASS
    assert probe.election.leader_member_id == NULL_VALUE
    assert probe.cm.role == Role.FOLLOWER

    # The tailored NLT (for our empty log) is accepted in CANVASS.
    probe.deliver(1, probe.new_leadership_term(1, 4, log_leadership_term_id=NULL_VALUE))
    assert probe.state == ES.FOLLOWER_REPLAY
    assert probe.election.leader_member_id == 1


def test_new_leadership_term_truncates_uncommitted_entries_then_init(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    log_term, append = probe.with_uncommitted_log(entries=3)
    probe.to_canvass()
    committed_part = probe.cm.archive.read(0, 96)
    assert probe.cm.commit_position == 0 and append > 96

    # The new leader's history says our term ended at 96: everything after it was never committed.
    nlt = probe.new_leadership_term(
        1,
        1,
        log_leadership_term_id=log_term,
        next_leadership_term_id=1,
        next_term_base_log_position=96,
        term_base_log_position=96,
    )
    probe.deliver(1, nlt)

    assert probe.state == ES.INIT
    assert probe.cm.append_position == 96
    assert probe.cm.archive.read(0, 96) == committed_part
    [truncate] = probe.events_of("truncate")
    assert (truncate["detail"]["from"], truncate["detail"]["to"]) == (append, 96)
    term_entry = probe.cm.recording_log.find_term_entry(log_term)
    assert term_entry is not None and term_entry.log_position == 96

    # INIT -> CANVASS with the shorter log; the same NLT now leads on (no second truncation).
    mark = probe.mark()
    probe.settle()
    assert probe.state == ES.CANVASS
    probe.run_for(T.election_status_interval_ns)
    assert {(m.log_leadership_term_id, m.log_position) for m in probe.sent(CanvassPosition, since=mark)} == {
        (log_term, 96)
    }
    probe.deliver(1, nlt)
    assert probe.state == ES.FOLLOWER_REPLAY
    assert len(probe.events_of("truncate")) == 1


def test_new_leadership_term_without_next_term_for_a_lagging_log_is_an_error(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()
    probe.deliver(
        1,
        probe.new_leadership_term(
            1,
            2,
            term_base_log_position=960,
            next_leadership_term_id=NULL_VALUE,
            next_term_base_log_position=NULL_POSITION,
        ),
    )
    assert probe.state == ES.INIT
    assert probe.events_of("error")[-1]["detail"]["where"] == "CANVASS"


def test_new_leadership_term_for_a_missing_term_goes_to_follower_log_replication(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()
    # Our log is empty (term -1); the leader's term 0 ran from 0 to 640 and term 1 started there.
    probe.deliver(
        1,
        probe.new_leadership_term(
            1,
            1,
            log_leadership_term_id=NULL_VALUE,
            next_leadership_term_id=0,
            next_term_base_log_position=0,
            next_log_position=640,
            term_base_log_position=640,
        ),
    )
    assert probe.state == ES.FOLLOWER_LOG_REPLICATION
    assert (probe.election.replication_leadership_term_id, probe.election.replication_stop_position) == (0, 640)
    assert probe.cm.role == Role.FOLLOWER


def test_new_leadership_term_higher_term_outside_election_enters_election(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    probe.deliver(1, probe.new_leadership_term(1, 0, log_leadership_term_id=0))
    assert probe.cm.election is None, "same term from our leader: a heartbeat"
    probe.deliver(2, probe.new_leadership_term(2, 1, log_leadership_term_id=0))
    assert probe.state == ES.INIT
    assert probe.events_of("election_start")[-1]["detail"]["reason"] == "unexpected new leadership term event"


# ============================================================================ a.2 FOLLOWER_LOG_REPLICATION


def _to_follower_log_replication(probe: Probe, entries: list[bytes]) -> int:
    """A fresh member learns the leader's term 0 ran over ``entries`` and term 1 began after them:
    FOLLOWER_LOG_REPLICATION of term 0. Returns the end of term 0."""
    end = sum(len(e) for e in entries)
    probe.to_canvass()
    probe.deliver(
        1,
        probe.new_leadership_term(
            1,
            1,
            next_leadership_term_id=0,
            next_term_base_log_position=0,
            next_log_position=end,
            term_base_log_position=end,
        ),
    )
    assert probe.state == ES.FOLLOWER_LOG_REPLICATION
    return end


def _replay_block(start: int, entries: bytes) -> ReplayBlock:
    return ReplayBlock(
        correlation_id=1,
        recording_id=0,
        start_position=start,
        recording_stop_position=start + len(entries),
        leadership_term_id=1,
        purpose=ReplayPurpose.REPLICATION,
        flags=ReplayBlockFlags.LAST,
        entries=entries,
    )


def test_follower_log_replication_copies_the_missing_term_and_canvasses_once_the_leader_commits_it(
    tmp_path: Path,
) -> None:
    probe = Probe(tmp_path)
    entries = session_entries(0, 0, [b"x" * 50, b"y" * 70, b"z" * 10])
    end = _to_follower_log_replication(probe, entries)
    probe.settle()
    [request] = probe.sent(ReplayRequest, dst=1)
    assert (request.from_position, request.to_position, request.requester_member_id) == (0, end, 0)

    probe.deliver(1, _replay_block(0, b"".join(entries)), channel=Channel.ARCHIVE)
    probe.settle()
    assert probe.cm.append_position == end
    assert probe.sent(AppendPosition, dst=1)[-1].log_position == end
    # Replicated, but the leader has not said it is committed: keep waiting.
    probe.run_for(T.leader_heartbeat_interval_ns)
    assert probe.state == ES.FOLLOWER_LOG_REPLICATION

    probe.deliver(1, probe.commit_position(1, 0, end))
    probe.settle()
    assert probe.state == ES.CANVASS
    entry = probe.cm.recording_log.find_term_entry(0)
    assert entry is not None and (entry.term_base_log_position, entry.log_position) == (0, end)
    assert probe.election.log_leadership_term_id == 0
    probe.run_for(T.election_status_interval_ns)
    assert probe.sent(CanvassPosition, dst=1)[-1].log_leadership_term_id == 0


def test_follower_log_replication_without_leader_commit_times_out_to_init(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    entries = session_entries(0, 0, [b"x" * 50])
    _to_follower_log_replication(probe, entries)
    probe.settle()
    probe.deliver(1, _replay_block(0, b"".join(entries)), channel=Channel.ARCHIVE)
    started = probe.now_ns

    probe.run_for(T.leader_heartbeat_timeout_ns + TICK, lambda: probe.state != ES.FOLLOWER_LOG_REPLICATION)

    assert probe.state == ES.INIT
    [error] = probe.events_of("error")
    assert error["detail"]["where"] == "FOLLOWER_LOG_REPLICATION"
    assert error["time_ns"] >= started + T.leader_heartbeat_timeout_ns


def test_new_leadership_term_from_the_leader_during_log_replication_extends_the_replication_deadline(
    tmp_path: Path,
) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()
    nlt = probe.new_leadership_term(
        1,
        1,
        next_leadership_term_id=0,
        next_term_base_log_position=0,
        next_log_position=640,
        term_base_log_position=640,
    )
    probe.deliver(1, nlt)
    assert probe.state == ES.FOLLOWER_LOG_REPLICATION
    probe.settle()
    first_deadline = probe.election.replication_deadline_ns
    probe.run_for(T.leader_heartbeat_interval_ns)
    probe.deliver(1, nlt)
    assert probe.election.replication_deadline_ns == probe.now_ns + T.leader_heartbeat_timeout_ns > first_deadline


# ============================================================================ a.2 LEADER_* states


def test_leader_log_replication_waits_for_quorum_of_whole_log(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    log_term, append = probe.with_uncommitted_log(entries=3)
    # Both peers hold only the first 96 bytes of our term: we are the most recent and win.
    probe.to_candidate_ballot(log_leadership_term_id=log_term, log_position=96)
    for p in (1, 2):
        probe.deliver(p, probe.vote(p, yes=True, log_leadership_term_id=log_term, log_position=96))
    probe.settle()
    assert probe.state == ES.LEADER_LOG_REPLICATION
    new_term = probe.election.leadership_term_id
    mark = probe.mark()

    # No timeout: it waits for as long as a quorum lacks part of its log.
    probe.run_for(5 * T.election_timeout_ns)
    assert probe.state == ES.LEADER_LOG_REPLICATION
    commits = probe.sent(CommitPosition, since=mark)
    assert commits and {c.log_position for c in commits} == {96}, "the raw quorum position is published"
    nlts = probe.sent(NewLeadershipTerm, dst=1, since=mark)
    assert nlts and nlts[-1].leadership_term_id == new_term
    assert (nlts[-1].log_leadership_term_id, nlts[-1].term_base_log_position, nlts[-1].log_position) == (
        log_term,
        append,
        append,
    )

    # A follower part of the way there is not enough, nor is a report in the old term, nor a canvass
    # of a log as long as ours that ends in an older term (it does not hold our bytes).
    probe.deliver(1, probe.append_position(1, new_term, append - 32))
    probe.deliver(2, probe.append_position(2, log_term, append))
    probe.deliver(2, probe.canvass(2, log_leadership_term_id=log_term - 1, log_position=append))
    probe.run_for(T.leader_heartbeat_interval_ns)
    assert probe.state == ES.LEADER_LOG_REPLICATION

    probe.deliver(1, probe.append_position(1, new_term, append))
    probe.settle()
    probe.run_for(TICK, lambda: probe.state != ES.LEADER_LOG_REPLICATION)
    assert probe.state in (ES.LEADER_REPLAY, ES.LEADER_INIT, ES.LEADER_READY)


def test_leader_ready_waits_for_voters_then_appends_new_leadership_term_event(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader_ready()
    assert probe.cm.append_position == 0
    probe.deliver(1, probe.append_position(1, term, 0))
    probe.run_for(T.leader_heartbeat_interval_ns)
    assert probe.state == ES.LEADER_READY, "member 2 voted too and has not joined"
    assert probe.cm.append_position == 0

    probe.deliver(2, probe.append_position(2, term, 0))
    probe.settle()
    assert probe.cm.election is None
    [f] = probe.cm.archive.read_frames(0, probe.cm.append_position)
    event = NewLeadershipTermEvent.decode(f.payload)
    assert (event.leadership_term_id, event.term_base_log_position, event.log_position, event.leader_member_id) == (
        term,
        0,
        f.end_position,
        0,
    )


def test_leader_ready_without_every_voter_completes_with_a_quorum_after_heartbeat_timeout(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader_ready()
    entered = entered_at(probe, ES.LEADER_READY)[0]
    probe.deliver(1, probe.append_position(1, term, 0))  # member 2 voted but never joins

    probe.run_until(entered + T.leader_heartbeat_timeout_ns - 1, lambda: probe.cm.election is None)
    assert probe.state == ES.LEADER_READY
    probe.run_for(TICK + 1, lambda: probe.cm.election is None)
    assert probe.cm.election is None and probe.cm.role == Role.LEADER
    assert entered_at(probe, ES.CLOSED)[0] >= entered + T.leader_heartbeat_timeout_ns


def test_leader_ready_appends_new_leadership_term_event_as_first_entry_of_term(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=5)
    first = c.await_leader()
    for i in range(5):
        c.offer(f"entry-{i}".encode())
    sim.converge(c)

    c.kill(first)
    second = c.await_leader(5 * SECOND)
    c.restart(first)
    sim.converge(c)

    for leader in (first, second):
        term = next(e["leadership_term_id"] for e in sim.events(c, "leader", leader))
        for m in range(3):
            entry = c.member(m).recording_log.find_term_entry(term)
            assert entry is not None, f"member {m} has no entry for term {term}"
            frame = c.member(m).archive.frame_at(entry.term_base_log_position)
            event = NewLeadershipTermEvent.decode(frame.payload)
            assert (event.leadership_term_id, event.term_base_log_position, event.leader_member_id) == (
                term,
                entry.term_base_log_position,
                leader,
            )
            assert event.log_position == frame.end_position


@pytest.mark.parametrize("state", [ES.LEADER_LOG_REPLICATION, ES.LEADER_READY])
def test_canvass_position_with_higher_log_term_restarts_a_new_leaders_election(
    tmp_path: Path, state: ElectionState
) -> None:
    probe = Probe(tmp_path)
    if state == ES.LEADER_LOG_REPLICATION:
        log_term, _append = probe.with_uncommitted_log()  # peers lack part of our log: we wait here
        probe.to_candidate_ballot(log_leadership_term_id=log_term, log_position=96)
        for p in (1, 2):
            probe.deliver(p, probe.vote(p, yes=True, log_leadership_term_id=log_term, log_position=96))
        probe.settle()
    else:
        probe.to_leader_ready()
    assert probe.state == state
    term = probe.election.leadership_term_id

    probe.deliver(2, probe.canvass(2, log_leadership_term_id=term, log_position=10_000))
    assert probe.state == state, "a peer in our term is no threat"
    probe.deliver(2, probe.canvass(2, log_leadership_term_id=term + 1, log_position=0))
    assert probe.state == ES.INIT
    assert "potential new election" in probe.events_of("error")[-1]["detail"]["reason"]


def test_commit_position_with_higher_term_in_leader_ready_restarts_election(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader_ready()
    probe.deliver(2, probe.commit_position(2, term, 0))
    assert probe.state == ES.LEADER_READY, "same term: not a new leader"
    probe.deliver(2, probe.commit_position(2, term + 1, 0))
    assert probe.state == ES.INIT


def test_canvass_position_to_steady_leader_gets_tailored_new_leadership_term(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader()
    probe.cm.offer(b"entry", probe.now_ns)
    stop = probe.cm.append_position
    mark = probe.mark()

    probe.deliver(1, probe.canvass(1, log_leadership_term_id=NULL_VALUE, log_position=0))  # an empty log
    probe.deliver(2, probe.canvass(2, log_leadership_term_id=term, log_position=96))  # in our term
    probe.deliver(2, probe.canvass(2, log_leadership_term_id=term + 1, log_position=0))  # ahead of us: no answer

    [older] = probe.sent(NewLeadershipTerm, dst=1, since=mark)
    assert older == NewLeadershipTerm(
        log_leadership_term_id=NULL_VALUE,
        next_leadership_term_id=term,
        next_term_base_log_position=0,
        next_log_position=stop,
        leadership_term_id=term,
        term_base_log_position=0,
        log_position=stop,
        leader_recording_id=probe.cm.log_recording_id,
        timestamp=older.timestamp,
        leader_member_id=0,
        log_session_id=probe.cm.log_session_id,
        app_version=older.app_version,
        is_startup=BooleanType.FALSE,
    )
    [same] = probe.sent(NewLeadershipTerm, dst=2, since=mark)
    assert (
        same.log_leadership_term_id,
        same.next_leadership_term_id,
        same.next_term_base_log_position,
        same.next_log_position,
    ) == (term, NULL_VALUE, NULL_POSITION, NULL_POSITION)
    assert (same.leadership_term_id, same.log_position) == (term, stop)


def test_canvass_position_to_steady_follower_is_ignored(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    mark = probe.mark()
    probe.deliver(2, probe.canvass(2, log_leadership_term_id=NULL_VALUE))
    assert probe.sent(NewLeadershipTerm, since=mark) == []
    assert probe.cm.election is None


# ============================================================================ e.12 failure detection


def test_follower_heartbeat_timeout_enters_election(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    joined = probe.now_ns

    probe.run_until(joined + T.leader_heartbeat_timeout_ns - 1, lambda: probe.cm.election is not None)
    assert probe.cm.election is None
    # A CommitPosition from the leader is a heartbeat: the timeout restarts from it.
    heartbeat = probe.now_ns
    probe.deliver(1, probe.commit_position(1, 0, 0))
    probe.run_until(heartbeat + T.leader_heartbeat_timeout_ns - 1, lambda: probe.cm.election is not None)
    assert probe.cm.election is None

    probe.run_for(TICK + 1, lambda: probe.cm.election is not None)
    assert probe.cm.election is not None
    start = probe.events_of("election_start")[-1]
    assert start["detail"]["reason"] == "leader heartbeat timeout"
    assert start["time_ns"] >= heartbeat + T.leader_heartbeat_timeout_ns


def test_leader_without_active_quorum_steps_down(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader()
    position = probe.cm.append_position

    # One follower keeps reporting: with the leader that is a quorum of 3.
    for _ in range(3 * T.leader_heartbeat_timeout_ns // T.leader_heartbeat_interval_ns):
        probe.deliver(1, probe.append_position(1, term, position))
        probe.run_for(T.leader_heartbeat_interval_ns)
        assert probe.cm.election is None and probe.cm.role == Role.LEADER
    last_report = probe.now_ns
    probe.deliver(1, probe.append_position(1, term, position))

    probe.run_until(last_report + T.leader_heartbeat_timeout_ns, lambda: probe.cm.election is not None)
    assert probe.cm.election is None, "still within the timeout"
    probe.run_for(T.leader_heartbeat_interval_ns, lambda: probe.cm.election is not None)
    assert probe.cm.election is not None
    assert probe.events_of("election_start")[-1]["detail"]["reason"] == "inactive follower quorum"
    assert probe.cm.role == Role.FOLLOWER


def test_commit_position_with_higher_term_outside_election_enters_election(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    probe.deliver(2, probe.commit_position(2, 0, 0))
    assert probe.cm.election is None, "not our leader, not a higher term"
    probe.deliver(2, probe.commit_position(2, 1, 0))
    assert probe.state == ES.INIT


# ============================================================================ e.1 commit position


def test_commit_position_is_quorum_position_capped_by_leader_position(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader()
    ends = [probe.cm.offer(f"op-{i}".encode(), probe.now_ns) for i in range(3)]
    leader_position = probe.cm.append_position
    assert ends[-1] == leader_position

    mark = probe.mark()
    probe.deliver(1, probe.append_position(1, term, ends[1]))
    probe.deliver(2, probe.append_position(2, term, ends[0]))
    probe.settle()
    assert probe.cm.commit_position == ends[1], "the 2nd highest of (leader, 1, 2)"
    assert {
        (m.log_position, m.leadership_term_id, m.leader_member_id) for m in probe.sent(CommitPosition, since=mark)
    } >= {(ends[1], term, 0)}

    # Followers claiming more than the leader holds cannot push commit past the leader's own log.
    probe.deliver(1, probe.append_position(1, term, leader_position + 4096))
    probe.deliver(2, probe.append_position(2, term, leader_position + 4096))
    probe.settle()
    assert probe.cm.commit_position == leader_position

    # And commit never moves back.
    probe.deliver(1, probe.append_position(1, term, ends[0]))
    probe.deliver(2, probe.append_position(2, term, ends[0]))
    probe.run_for(T.leader_heartbeat_interval_ns)
    assert probe.cm.commit_position == leader_position
    assert probe.sent(CommitPosition, dst=1)[-1].log_position == leader_position


def test_commit_ignores_a_position_canvassed_in_an_older_log_term(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    log_term, append = probe.with_uncommitted_log(entries=3)
    # Member 1 votes for us; member 2 (a deposed leader with a longer, uncommitted tail of the old term)
    # is silent: we win term 1 by quorum at the ballot timeout.
    probe.to_candidate_ballot(log_leadership_term_id=log_term, log_position=96)
    probe.deliver(1, probe.vote(1, yes=True, log_leadership_term_id=log_term, log_position=96))
    probe.run_for(T.election_timeout_ns + TICK, lambda: probe.state == ES.LEADER_LOG_REPLICATION)
    term = probe.election.leadership_term_id
    probe.deliver(1, probe.append_position(1, term, append))
    probe.run_for(T.election_timeout_ns, lambda: probe.state == ES.LEADER_READY)
    assert probe.state == ES.LEADER_READY

    # Member 2 reappears and canvasses its old-term log, which is longer than ours.
    probe.deliver(2, probe.canvass(2, log_leadership_term_id=log_term, log_position=append + 4096))
    probe.deliver(1, probe.append_position(1, term, append))
    probe.run_for(T.election_timeout_ns, lambda: probe.cm.election is None)
    assert probe.cm.election is None
    assert probe.cm.append_position > append, "the NewLeadershipTermEvent is appended"

    probe.run_for(5 * T.leader_heartbeat_interval_ns)
    # Only the leader holds [append, append + event): member 1 is at `append`, member 2's bytes are another
    # term's. A quorum holds `append` and no more.
    assert probe.cm.commit_position == append
    assert max(m.log_position for m in probe.sent(CommitPosition)) <= append


def test_follower_commits_only_what_the_leader_committed_and_it_holds(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    f = session_entries(0, 0, [b"a" * 20, b"b" * 20, b"c" * 20])
    ends = [sum(len(x) for x in f[: i + 1]) for i in range(3)]
    probe.deliver(1, probe.log_block(1, 0, 0, b"".join(f[:2]), commit_position=0), channel=Channel.LOG)
    probe.settle()
    assert (probe.cm.append_position, probe.cm.commit_position) == (ends[1], 0), "appended, not committed"

    probe.deliver(1, probe.commit_position(1, 0, ends[0]))
    probe.settle()
    assert probe.cm.commit_position == ends[0]
    probe.deliver(1, probe.commit_position(1, 0, ends[2]))  # the leader is ahead of what we hold
    probe.settle()
    assert probe.cm.commit_position == ends[1]
    probe.deliver(1, probe.log_block(1, 0, ends[1], f[2], commit_position=ends[2]), channel=Channel.LOG)
    probe.settle()
    assert probe.cm.commit_position == ends[2]
    assert probe.sent(AppendPosition, dst=1)[-1].log_position == ends[2]


# ============================================================================ appointed leader


def test_appointed_leader_only_appointed_member_nominates(sim: SimKit) -> None:
    for seed in (1, 2):
        c = sim.cluster(members=3, seed=seed, appointed_leader_id=2)
        assert c.await_leader() == 2
        assert {e["source"] for e in sim.entries(c, ES.NOMINATE)} == {"node-2"}
        sim.check(c)

        # Without the appointed member the others canvass forever.
        c.kill(2)
        c.run_for(3 * T.leader_heartbeat_timeout_ns)
        assert c.leader_id() is None
        assert {e["source"] for e in sim.entries(c, ES.NOMINATE)} == {"node-2"}
        assert {c.member(m).election_state for m in (0, 1)} == {ES.CANVASS}


def test_member_that_is_not_the_appointed_leader_never_nominates(tmp_path: Path) -> None:
    probe = Probe(tmp_path, appointed_leader_id=1)
    probe.to_canvass()
    probe.all_peers_canvass()
    probe.run_for(2 * T.startup_canvass_timeout_ns, lambda: probe.state != ES.CANVASS)
    assert probe.state == ES.CANVASS
    assert len(probe.sent(CanvassPosition, dst=1)) > 10, "it keeps canvassing"


# ============================================================================ a.1 error path


def test_election_error_restarts_at_init_with_log_position_at_commit(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    log_term, append = probe.with_uncommitted_log(entries=2)
    probe.to_canvass()
    # The leader's log is ahead of ours in our own term: replay, then ask for a catch-up.
    probe.deliver(
        1,
        probe.new_leadership_term(
            1,
            1,
            log_leadership_term_id=log_term,
            next_leadership_term_id=1,
            next_term_base_log_position=append,
            term_base_log_position=append,
            log_position=append + 320,
        ),
    )
    probe.run_for(T.leader_heartbeat_interval_ns, lambda: probe.state == ES.FOLLOWER_CATCHUP_AWAIT)
    assert probe.state == ES.FOLLOWER_CATCHUP_AWAIT
    assert probe.election.log_position == append != probe.cm.commit_position == 0
    awaiting_since = probe.now_ns

    # No catch-up stream ever arrives: a timeout inside the election.
    probe.run_for(T.leader_heartbeat_timeout_ns + TICK, lambda: probe.state != ES.FOLLOWER_CATCHUP_AWAIT)
    probe.run_until(probe.now_ns)  # the rest of that instant

    [error] = probe.events_of("error")
    assert error["detail"]["where"] == "FOLLOWER_CATCHUP_AWAIT"
    assert error["time_ns"] >= awaiting_since + T.leader_heartbeat_timeout_ns
    assert probe.states_entered()[-2:] == [ES.INIT, ES.CANVASS]
    assert entered_at(probe, ES.INIT)[-1] == entered_at(probe, ES.CANVASS)[-1]
    assert probe.election.log_position == probe.cm.commit_position == 0
    assert probe.cm.append_position == append, "the log itself is kept"


# ============================================================================ b.7 / b.8 catch-up


def test_catchup_position_starts_catchup_and_stop_catchup_sent_when_follower_reaches_leader(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader()
    base = probe.cm.append_position
    for i in range(4):
        probe.cm.offer(f"op-{i}".encode(), probe.now_ns)
    top = probe.cm.append_position
    mark = probe.mark()

    probe.deliver(
        1,
        CatchupPosition(leadership_term_id=term, log_position=base, follower_member_id=1, catchup_endpoint="catchup-1"),
    )
    probe.settle()
    assert probe.cm.status(1).catchup_active
    blocks = [s for s in probe.sends(LogBlock, since=mark) if s.dst == 1]
    assert blocks and all(s.channel == Channel.CATCHUP for s in blocks)
    assert blocks[0].msg.start_position == base
    assert blocks[-1].msg.end_position == top
    assert b"".join(s.msg.entries for s in blocks) == probe.cm.archive.read(base, top)

    # A second CatchupPosition while one runs is ignored.
    probe.deliver(
        1, CatchupPosition(leadership_term_id=term, log_position=0, follower_member_id=1, catchup_endpoint="catchup-1")
    )
    assert probe.cm.status(1).log_send_position == top

    probe.deliver(1, probe.append_position(1, term, top - 32, flags=AppendPositionFlags.CATCHUP))
    assert probe.sent(StopCatchup, since=mark) == []
    probe.deliver(1, probe.append_position(1, term, top, flags=AppendPositionFlags.CATCHUP))
    assert probe.sent(StopCatchup, since=mark) == [StopCatchup(leadership_term_id=term, follower_member_id=1)]
    assert not probe.cm.status(1).catchup_active

    # From now on member 1 gets the live log.
    probe.cm.offer(b"after catch-up", probe.now_ns)
    mark = probe.mark()
    probe.settle()
    assert [s.channel for s in probe.sends(LogBlock, since=mark) if s.dst == 1] == [Channel.LOG]


def test_follower_behind_in_current_term_catches_up_and_is_stopped_by_the_leader(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=2)
    leader = c.await_leader()
    follower = (leader + 1) % 3
    c.kill(follower)
    for i in range(20):
        c.offer(f"while-down-{i}".encode() * 10)
        c.run_for(2 * MS)
    sim.converge(c)

    c.restart(follower)
    sim.converge(c)

    states = sim.states(c, follower, incarnation=1)
    assert states[states.index(ES.FOLLOWER_CATCHUP_INIT) :] == [
        ES.FOLLOWER_CATCHUP_INIT,
        ES.FOLLOWER_CATCHUP_AWAIT,
        ES.FOLLOWER_CATCHUP,
        ES.FOLLOWER_LOG_INIT,
        ES.FOLLOWER_READY,
        ES.CLOSED,
    ]
    assert [m for _, m in sim.sent(c, CatchupPosition, src=follower, dst=leader)]
    stops = [m for _, m in sim.sent(c, StopCatchup, src=leader, dst=follower)]
    assert stops and stops[-1].follower_member_id == follower
    assert c.member(follower).archive.read(0, c.member(leader).commit_position) == sim.committed_log(c, leader)


def test_stop_catchup_only_for_own_member_and_term(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    probe.cm.is_catchup_stopped = False  # as after CatchupPosition was sent
    probe.deliver(1, StopCatchup(leadership_term_id=0, follower_member_id=2))
    probe.deliver(1, StopCatchup(leadership_term_id=1, follower_member_id=0))
    assert probe.cm.is_catchup_stopped is False
    probe.deliver(1, StopCatchup(leadership_term_id=0, follower_member_id=0))
    assert probe.cm.is_catchup_stopped is True


# ============================================================================ log transport stand-in


def test_log_block_appended_only_at_append_position(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    f = session_entries(0, 0, [b"a" * 10, b"b" * 40, b"c" * 70, b"d" * 5, b"e" * 33])
    starts = [0]
    for x in f:
        starts.append(starts[-1] + len(x))

    def block(first: int, last: int, leader: int = 1, term: int = 0) -> LogBlock:
        return probe.log_block(leader, term, starts[first], b"".join(f[first:last]))

    probe.deliver(1, block(0, 2), channel=Channel.LOG)
    assert probe.cm.append_position == starts[2]
    probe.deliver(1, block(0, 2), channel=Channel.LOG)  # duplicate
    probe.deliver(1, block(0, 1), channel=Channel.LOG)  # old
    probe.deliver(1, block(3, 5), channel=Channel.LOG)  # a gap: block 2 was lost
    probe.deliver(1, block(2, 3, term=1), channel=Channel.LOG)  # another term's log
    assert probe.cm.append_position == starts[2]
    before = dict(probe.cm.ignored)
    probe.deliver(2, block(2, 3, leader=2), channel=Channel.LOG)  # not our leader
    assert probe.cm.append_position == starts[2]
    assert sum(probe.cm.ignored.values()) == sum(before.values()) + 1

    probe.deliver(1, block(1, 4), channel=Channel.LOG)  # overlaps what we have: only the new part
    assert probe.cm.append_position == starts[4]

    # A corrupt frame: the good frames before it are kept, the rest waits for a resend.
    bad = bytearray(f[4])
    bad[40] ^= 0xFF
    probe.deliver(1, probe.log_block(1, 0, starts[4], bytes(bad)), channel=Channel.LOG)
    assert probe.cm.append_position == starts[4]
    assert any("LogBlock" in reason and "bad entries" in reason for reason in probe.cm.ignored)

    probe.deliver(1, block(4, 5), channel=Channel.LOG)
    assert probe.cm.archive.read(0, starts[5]) == b"".join(f)
    assert [fr.position for fr in walk_frames(probe.cm.archive.read(0, starts[5])).frames] == starts[:5]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "malformed"),
        (b"\x01\x02\x03", "malformed"),
        (b"\x20\x00\x63\x00\x6f\x00\x0c\x00" + bytes(32), "malformed"),  # unknown template id 99
        (CanvassPosition(0, 0, 0, 1, PROTOCOL_VERSION).encode()[:-4], "malformed"),  # truncated
        (bytes([0x20, 0x00, 50, 0x00, 0x10, 0x00, 0x0C, 0x00]) + bytes(32), "malformed"),  # foreign schema id
        (SessionEvent(1, 2, 3, 4, 0, 0, "x").encode(), "unexpected"),  # valid, but not a consensus message
    ],
    ids=["empty", "short", "unknown-template", "truncated", "foreign-schema", "unexpected-type"],
)
def test_malformed_consensus_bytes_ignored_with_counted_reason(tmp_path: Path, payload: bytes, reason: str) -> None:
    probe = Probe(tmp_path)
    probe.to_canvass()
    mark = probe.mark()

    probe.deliver_bytes(1, payload)
    probe.deliver_bytes(1, payload)

    [(key, count)] = probe.cm.ignored.items()
    assert reason in key and "from 1" in key
    assert count == 2
    assert probe.state == ES.CANVASS
    assert probe.sends(since=mark) == []


# ============================================================================ clean close, termination


def test_leader_clean_close_sends_end_of_stream_and_followers_elect_without_it(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=4)
    old = c.await_leader()
    for i in range(5):
        c.offer(f"entry-{i}".encode())
    sim.converge(c)
    stopped_at = c.now_ns

    c.stop(old)
    new = c.await_leader(T.leader_heartbeat_timeout_ns)

    eos = sim.sent(c, LogEndOfStream, src=old)
    assert {d.dst for d, _ in eos} == {m for m in range(3) if m != old}
    assert all(m.leader_member_id == old for _, m in eos)
    followers = [m for m in range(3) if m != old]
    for f in followers:
        starts = [e for e in sim.events(c, "election_start", f) if e["time_ns"] >= stopped_at]
        assert starts and starts[0]["detail"]["reason"] == "leader log end of stream"
    # Unanimity without the old leader: no heartbeat timeout, and the ballot is won without its timeout.
    assert c.now_ns - stopped_at < T.leader_heartbeat_timeout_ns
    ballot = [e["time_ns"] for e in sim.entries(c, ES.CANDIDATE_BALLOT, new) if e["time_ns"] >= stopped_at][-1]
    won = [e["time_ns"] for e in sim.entries(c, ES.LEADER_LOG_REPLICATION, new) if e["time_ns"] >= stopped_at][-1]
    assert won - ballot < T.election_timeout_ns
    sim.converge(c)


def test_leader_kill_is_detected_only_by_heartbeat_timeout(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=4)
    old = c.await_leader()
    sim.converge(c)
    killed_at = c.now_ns
    c.kill(old)
    c.await_leader(T.leader_heartbeat_timeout_ns + 2 * SECOND)
    assert sim.sent(c, LogEndOfStream) == []
    for f in (m for m in range(3) if m != old):
        [start] = [e for e in sim.events(c, "election_start", f) if e["time_ns"] >= killed_at]
        assert start["detail"]["reason"] == "leader heartbeat timeout"
        assert start["time_ns"] >= killed_at + T.leader_heartbeat_timeout_ns - T.leader_heartbeat_interval_ns


@pytest.mark.parametrize(("term", "suppresses"), [(0, True), (5, False)], ids=["same-term", "other-term"])
def test_termination_position_stops_follower_heartbeat_timeout(tmp_path: Path, term: int, suppresses: bool) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    far = 1 << 20  # a termination position this follower does not reach, so it does not terminate
    probe.deliver(1, TerminationPosition(leadership_term_id=term, log_position=far))

    probe.run_for(3 * T.leader_heartbeat_timeout_ns, lambda: probe.cm.election is not None)

    if suppresses:
        assert probe.cm.termination_position == far
        assert not probe.cm.terminated
        assert probe.cm.election is None, "no leader heartbeat timeout while a termination is pending"
    else:
        assert probe.cm.termination_position == NULL_POSITION
        assert probe.cm.election is not None, "a TerminationPosition for another term changes nothing"
