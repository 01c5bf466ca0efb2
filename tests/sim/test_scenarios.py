"""Cluster scenarios, written the way the protocol is told: start members, break something, wait for
the cluster to recover, check the logs.

Every scenario ends with ``sim.converge(c)``: one leader, every live member has committed the leader's
whole log, and clusterlab.harness.invariants.SafetyChecker finds log matching and durability intact (it also
watched every leader and commit event as it happened)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from clusterlab.core.consensus.context import MS, SECOND, ElectionState, Role, Timeouts
from clusterlab.core.consensus.recording_log import EntryType
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.simnet import NetworkConfig

from clusterlab.testing.disk_faults import flip_bits_in_tail, tear_last_frame
from tests.sim.conftest import SimKit
from tests.sim.probe import scripted_backoffs

pytestmark = pytest.mark.sim

ES = ElectionState
T = Timeouts.fast()
TICK = min(T.election_status_interval_ns, T.leader_heartbeat_interval_ns) // 2
# One election round after failure detection: a canvass round, the nomination back-off, a ballot
# that must run to its timeout (the dead member cannot make it unanimous), then the join.
ELECTION_ROUND_NS = 2 * T.election_status_interval_ns + T.election_timeout_ns // 2 + T.election_timeout_ns
JOIN_NS = 100 * MS


def offer_burst(c: SimCluster, tag: str, count: int = 5, gap_ns: int = 2 * MS) -> None:
    """Offer ``count`` messages through whoever leads, with a little time between them."""
    for i in range(count):
        assert c.offer(f"{tag}-{i}".encode()) > 0, f"no leader took {tag}-{i}: {c.status_line()}"
        c.run_for(gap_ns)


def await_new_leader(c: SimCluster, old: int, timeout_ns: int) -> int:
    c.await_condition(lambda: c.leader_id() not in (None, old), timeout_ns, f"a leader other than {old}")
    leader = c.leader_id()
    assert leader is not None
    return leader


def logs_identical(c: SimCluster, members: list[int] | None = None) -> bytes:
    """Every member's whole log, byte for byte the same; returns it."""
    members = c.members_alive() if members is None else members
    logs = {m: c.member(m).archive.read(0, c.member(m).archive.stop_position) for m in members}
    first = logs[members[0]]
    for m, log in logs.items():
        assert log == first, f"member {m}'s log differs from member {members[0]}'s: {c.status_line()}"
    return first


def term_bases(c: SimCluster, member_id: int) -> dict[int, int]:
    """The member's recording log as {term: base position}."""
    return {
        e.leadership_term_id: e.term_base_log_position
        for e in c.member(member_id).recording_log.entries()
        if e.type == EntryType.TERM and e.is_valid
    }


# ============================================================================ cold start


@pytest.mark.parametrize("members", [1, 3, 5])
@pytest.mark.parametrize("seed", [1, 2])
def test_cold_start_elects_one_leader_and_commits(sim: SimKit, members: int, seed: int) -> None:
    c = sim.cluster(members=members, seed=seed)

    leader = c.await_leader(T.startup_canvass_timeout_ns)

    # Everyone is up, so nobody waits for the startup canvass deadline: the election is decided by
    # unanimity (a split vote may cost one more round).
    assert c.now_ns < T.election_timeout_ns + ELECTION_ROUND_NS
    term = c.member(leader).leadership_term_id
    assert [m for m in range(members) if c.member(m).role == Role.LEADER] == [leader]
    offer_burst(c, "cold")
    assert sim.converge(c) == leader
    assert {c.member(m).leadership_term_id for m in range(members)} == {term}
    assert set(sim.safety(c).leaders_by_term.items()) == {(term, leader)}
    logs_identical(c)


def test_appointed_leader_is_elected_in_a_five_member_cluster(sim: SimKit) -> None:
    c = sim.cluster(members=5, seed=3, appointed_leader_id=3)
    assert c.await_leader(T.startup_canvass_timeout_ns) == 3
    assert {e["source"] for e in sim.entries(c, ES.NOMINATE)} == {"node-3"}
    offer_burst(c, "appointed")
    assert sim.converge(c) == 3
    logs_identical(c)


# ============================================================================ split vote


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_split_vote_resolves_on_retry(sim: SimKit, seed: int) -> None:
    # Every member hears every canvass at the same instant and nominates at once: three candidates
    # for term 0, each refusing the others.
    c = sim.cluster(
        members=3,
        seed=seed,
        member_factory=scripted_backoffs({m: [0] for m in range(3)}),
        network=NetworkConfig(min_latency_ns=1 * MS, max_latency_ns=1 * MS),
    )

    leader = c.await_leader(3 * SECOND)

    for m in range(3):
        states = sim.states(c, m)
        first_ballot = states.index(ES.CANDIDATE_BALLOT)
        assert states[first_ballot + 1] == ES.CANVASS, f"member {m} should lose its first ballot: {states}"
    assert 0 not in sim.safety(c).leaders_by_term, "nobody won term 0"
    assert c.member(leader).leadership_term_id >= 1
    offer_burst(c, "after-split")
    sim.converge(c)


# ============================================================================ leader failure


@pytest.mark.parametrize("seed", [3, 5])
def test_leader_killed_new_leader_elected_and_old_leader_rejoins_as_follower_with_same_log(
    sim: SimKit, seed: int
) -> None:
    # Start 3 members, commit some entries.
    c = sim.cluster(members=3, seed=seed)
    old = c.await_leader()
    offer_burst(c, "term-0", count=10)
    sim.converge(c)

    # Kill the leader; await a new one.
    killed_at = c.now_ns
    c.kill(old)
    new = await_new_leader(c, old, 2 * T.leader_heartbeat_timeout_ns + 2 * ELECTION_ROUND_NS)
    failover_ns = c.now_ns - killed_at
    # Not before the followers could know (heartbeat timeout, less the last heartbeat's age), and
    # within one election round after that (one retry allowed for a split vote).
    assert failover_ns >= T.leader_heartbeat_timeout_ns - T.leader_heartbeat_interval_ns
    assert failover_ns <= T.leader_heartbeat_timeout_ns + 2 * ELECTION_ROUND_NS + JOIN_NS
    assert c.member(new).leadership_term_id > 0
    offer_burst(c, "term-1", count=10)

    # The old leader comes back as a follower of the new term, with the same log.
    c.restart(old)
    assert sim.converge(c) == new
    assert c.member(old).role == Role.FOLLOWER
    assert c.member(old).leadership_term_id == c.member(new).leadership_term_id
    logs_identical(c)
    assert term_bases(c, old) == term_bases(c, new)


def test_follower_restarted_with_empty_disk_catches_up(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=6)
    leader = c.await_leader()
    offer_burst(c, "before-wipe", count=20)
    sim.converge(c)
    follower = (leader + 1) % 3

    c.restart_wiped(follower)
    assert c.member(follower).append_position == 0
    offer_burst(c, "after-wipe", count=10)

    assert sim.converge(c) == leader
    log = logs_identical(c)
    assert b"before-wipe-0" in log and b"after-wipe-9" in log
    assert term_bases(c, follower) == term_bases(c, leader)


def _change_leader(c: SimCluster, sim: SimKit, how: str) -> int:
    old = c.leader_id()
    assert old is not None
    if how == "kill":
        c.kill(old)
        new = await_new_leader(c, old, 5 * SECOND)
        c.restart(old)
    elif how == "stop":
        c.stop(old)
        new = await_new_leader(c, old, 5 * SECOND)
        c.restart(old)
    else:
        c.isolate(old)
        new = await_new_leader(c, old, 5 * SECOND)
        c.heal()
    c.await_condition(
        lambda: c.leader_id() == new and old in c.members_alive() and c.member(old).election_state is None,
        5 * SECOND,
        f"{old} rejoined",
    )
    return new


def test_follower_several_terms_behind_recovers_through_log_replication_replay_and_catchup(sim: SimKit) -> None:
    # Five members; one follower goes down for three leader changes.
    c = sim.cluster(members=5, seed=3)
    leader = c.await_leader()
    offer_burst(c, "term-a")
    sim.converge(c)
    behind = (leader + 1) % 5
    c.kill(behind)
    behind_term = c.member(leader).leadership_term_id

    for n, how in enumerate(["kill", "stop", "isolate"]):
        leader = _change_leader(c, sim, how)
        offer_burst(c, f"change-{n}")
        sim.converge(c)
    leader_term = c.member(leader).leadership_term_id
    assert len([t for t in sim.safety(c).leaders_by_term if t > behind_term]) >= 3

    # It comes back: whole missing terms by replication, then replay, then catch-up in the current term.
    c.restart(behind)
    offer_burst(c, "while-recovering")
    assert sim.converge(c) == leader

    states = sim.states(c, behind, incarnation=1)
    assert ES.FOLLOWER_LOG_REPLICATION in states, states
    after_replication = states[len(states) - 1 - states[::-1].index(ES.FOLLOWER_LOG_REPLICATION) :]
    assert ES.FOLLOWER_REPLAY in after_replication and ES.FOLLOWER_CATCHUP in after_replication, states
    assert states[-1] == ES.CLOSED
    assert c.member(behind).leadership_term_id == leader_term
    assert term_bases(c, behind) == term_bases(c, leader)
    logs_identical(c)


# ============================================================================ partitions


def test_isolated_leaders_uncommitted_entries_are_truncated_when_it_rejoins(sim: SimKit) -> None:
    """Raft figure 7: a deposed leader's uncommitted tail gives way to the new leader's entries."""
    c = sim.cluster(members=3, seed=7)
    old = c.await_leader()
    offer_burst(c, "committed")
    sim.converge(c)
    committed = c.member(old).commit_position

    # Isolate the leader and offer it entries: appended, never committed.
    c.isolate(old)
    for i in range(4):
        assert c.member(old).offer(f"doomed-{i}".encode(), c.now_ns) > 0
    doomed_end = c.member(old).append_position
    assert doomed_end > committed

    # The majority elects a new leader and commits different entries.
    new = await_new_leader(c, old, 5 * SECOND)
    offer_burst(c, "winner", count=6)
    c.run_for(200 * MS)
    assert c.member(old).commit_position == committed
    assert c.member(new).commit_position > committed

    # Heal: the old leader truncates its uncommitted tail and takes the new leader's log.
    c.heal()
    assert sim.converge(c) == new
    truncations = [e for e in sim.events(c, "truncate", old) if e["detail"].get("reason") == "uncommitted entries"]
    assert [(e["detail"]["from"], e["detail"]["to"]) for e in truncations] == [(doomed_end, committed)]
    log = logs_identical(c)
    assert b"doomed" not in log
    assert b"winner-5" in log
    commit = c.member(new).commit_position
    assert {c.member(m).commit_position for m in range(3)} == {commit}


def test_minority_partitioned_leader_cannot_commit_and_healing_restores_one_leader_and_one_log(
    sim: SimKit,
) -> None:
    c = sim.cluster(members=5, seed=8)
    old = c.await_leader()
    offer_burst(c, "before")
    sim.converge(c)
    committed = c.member(old).commit_position
    buddy = (old + 1) % 5
    majority = [m for m in range(5) if m not in (old, buddy)]

    # Partition {old leader, buddy} from the other three and keep offering to the old leader.
    c.partition([[old, buddy], majority])
    old_commits = []
    for i in range(20):
        if c.member(old).role == Role.LEADER and c.member(old).election_state is None:
            c.member(old).offer(f"minority-{i}".encode(), c.now_ns)
        c.run_for(20 * MS)
        old_commits.append(c.member(old).commit_position)
        old_commits.append(c.member(buddy).commit_position)
    assert c.member(old).append_position > committed, "the minority leader appended"
    assert set(old_commits) == {committed}, "but could not commit"

    new = await_new_leader(c, old, 5 * SECOND)
    assert new in majority
    offer_burst(c, "majority")

    c.heal()
    assert sim.converge(c) == new
    assert len({c.member(m).leadership_term_id for m in range(5)}) == 1
    assert [m for m in range(5) if c.member(m).role == Role.LEADER] == [new]
    log = logs_identical(c)
    assert b"minority" not in log and b"majority-4" in log


# ============================================================================ disk faults


@pytest.mark.parametrize("fault", ["torn-tail", "bit-flips"])
def test_damaged_recording_tail_is_repaired_on_open_and_refilled_from_leader(sim: SimKit, fault: str) -> None:
    c = sim.cluster(members=3, seed=9)
    leader = c.await_leader()
    offer_burst(c, "entry", count=8)
    sim.converge(c)
    follower = (leader + 1) % 3
    stop = c.member(follower).archive.stop_position

    # Kill a follower, damage the last frame of its log, restart it.
    c.kill(follower)
    if fault == "torn-tail":
        frame_start = tear_last_frame(c.storage(follower))
    else:
        frame_start = flip_bits_in_tail(c.storage(follower), random.Random(fault), count=3)
    c.restart(follower)

    assert c.member(follower).append_position == frame_start < stop
    [repair] = [e for e in sim.events(c, "truncate", follower, incarnation=1) if "repair" in e["detail"]]
    assert repair["detail"]["to"] == frame_start
    assert repair["detail"]["from"] > frame_start
    assert repair["detail"]["reason"]

    offer_burst(c, "after-repair", count=3)
    assert sim.converge(c) == leader
    assert c.member(follower).append_position > stop
    logs_identical(c)


# ============================================================================ determinism


def _lossy_run(sim: SimKit, seed: int) -> tuple[str, list[tuple[Any, ...]]]:
    c = sim.cluster(
        members=3,
        seed=seed,
        network=NetworkConfig(loss_probability=0.02, duplicate_probability=0.02, reorder_probability=0.05),
    )
    leader = c.await_leader(5 * SECOND)
    offer_burst(c, "lossy", count=10)
    c.kill(leader)
    await_new_leader(c, leader, 10 * SECOND)
    offer_burst(c, "after-kill", count=5)
    c.restart(leader)
    sim.converge(c, 10 * SECOND)
    trace = [
        (e["time_ns"], e["source"], e["kind"], e["leadership_term_id"], e["log_position"], repr(e["detail"]))
        for e in c.events
    ]
    return c.message_digest(), trace


def test_same_seed_same_run_different_seed_different_run(sim: SimKit) -> None:
    digest_a, trace_a = _lossy_run(sim, 21)
    digest_b, trace_b = _lossy_run(sim, 21)
    digest_c, trace_c = _lossy_run(sim, 22)

    assert digest_a == digest_b
    assert trace_a == trace_b
    assert digest_c != digest_a
    assert trace_c != trace_a
