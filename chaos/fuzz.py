"""Seeded random fault schedules on the simulator under the service's workload (tests/sim/test_random_safety.py).

Each phase picks one action (offer a burst, kill, restart, partition, isolate the leader, heal,
truncate or wipe a member's log while it is down, lossy network) and runs the cluster for a
while; the online safety checker samples every live member after each phase. The final phase heals
everything, restarts every member and requires progress within a bound. Same seed, same run.

Unlike a scenario run (clusterlab.chaos.runner: a schedule of named nemeses, a recorded trace, the
DuckDB and Spark verdicts), nothing is recorded: it is cheap enough to sweep hundreds of seeds. The
client load is the scenario runs' own (:class:`~clusterlab.chaos.workload.SimWorkload` with the
service's workload): every reply is checked against the service's model as it arrives, and after the
heal every key is read back, so an acknowledged write that is gone fails the schedule with a
:class:`~clusterlab.harness.invariants.SafetyViolation`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from clusterlab.chaos.sample_workloads import WORKLOADS
from clusterlab.chaos.target import converged
from clusterlab.chaos.workload import SimWorkload
from clusterlab.core.archive.layout import LOG_DIR
from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.consensus.context import MS, SECOND, ElectionState, Role
from clusterlab.harness.invariants import SafetyChecker
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.simnet import NetworkConfig

OPS_PER_SECOND = 1000.0  # the workload's offered rate while a burst runs (at most one op per key outstanding)


@dataclass
class ScheduleResult:
    """What a schedule did and saw."""

    seed: int
    members: int
    actions: list[str] = field(default_factory=list)
    committed_bytes: int = 0
    terms: int = 0
    sim_seconds: float = 0.0
    digest: str = ""
    acked_ops: int = 0
    invoked_ops: int = 0
    applied_rows: int = 0


def run_random_schedule(
    seed: int,
    *,
    phases: int = 10,
    directory: str | None = None,
    service: str | None = None,
    mutants: frozenset[str] = frozenset(),
    workload: str | None = None,
) -> ScheduleResult:
    """Run one seeded schedule; raises SafetyViolation or SimTimeout (with the seed) on failure.

    With a ``service`` every member runs it and, for a sample service (kv, counter, timers), its
    workload drives a client through the leader: every reply must be what the service's model allows,
    every key read back after the heal must hold what was acknowledged, and every member's service
    must agree on entry and state digest at every log position; snapshots join the fault mix.
    ``workload`` names the service's workload when ``service`` is not a sample's name (a planted
    variant of one, a user's service: ``package.module:factory``).
    ``mutants``: planted bugs switched on (clusterlab.testing.mutants; judged without the
    members' white-box invariant asserts, as real processes run)."""
    rng = random.Random(f"schedule:{seed}")
    members = rng.choice([3, 3, 5])
    network = _network_of(rng)
    result = ScheduleResult(seed, members)
    # The protocol-level faults draw from their own stream: the main stream (and so every earlier seed's
    # schedule of the other faults) stays as it was.
    protocol_rng = random.Random(f"protocol-faults:{seed}")
    checker = SafetyChecker()
    with SimCluster(
        members=members,
        seed=seed,
        network=network,
        directory=directory,
        service=service,
        mutants=mutants,
        check_invariants=not mutants,
    ) as c:
        load = _ClientLoad(c, rng, seed, _workload_of(c, seed, workload, service, network))
        c.await_leader(30 * SECOND)
        checker.check(c)
        for _ in range(phases):
            _fault_phase(c, rng, members, service is not None, result, checker)
            if protocol_rng.random() < PROTOCOL_FAULT_RATE:
                _protocol_fault(c, protocol_rng, members, result)
            load.burst()
            c.run_for(rng.randrange(50, 1500) * MS)
            checker.check(c)
        _final_phase(c, load)
        _judge_end(c, checker, load.workload, result)
    return result


def _workload_of(
    c: SimCluster, seed: int, workload: str | None, service: str | None, network: NetworkConfig
) -> SimWorkload | None:
    """The client load of a schedule: ``workload`` (a sample's name or ``package.module:factory``), else
    the sample service's own, else None (raw payloads).

    Requests are resent as a real client resends them (tagged with the client, so a deduplicating
    service applies each once). A network that duplicates messages duplicates clients' requests too,
    which Aeron's ingress never does; a service whose workload does not deduplicate would apply the
    copies, so under such a network it gets raw payloads instead."""
    name = workload or (service if service in WORKLOADS else None)
    if name is None:
        return None
    load = SimWorkload(service=name, seed=seed, rate=OPS_PER_SECOND, cluster=c, resends=True)
    if network.duplicate_probability > 0 and not load.service_workload.resend:
        return None
    return load


def _network_of(rng: random.Random) -> NetworkConfig:
    """The schedule's network: clean, or (half the seeds) lossy, duplicating and reordering."""
    lossy = rng.random() < 0.5
    return NetworkConfig(
        loss_probability=rng.choice([0.0, 0.01, 0.05]) if lossy else 0.0,
        duplicate_probability=rng.choice([0.0, 0.01]) if lossy else 0.0,
        reorder_probability=rng.choice([0.0, 0.02]) if lossy else 0.0,
    )


def _fault_phase(
    c: SimCluster, rng: random.Random, members: int, snapshots: bool, result: ScheduleResult, checker: SafetyChecker
) -> None:
    """One phase's fault: kill, restart, partition, isolate the leader, heal, truncate or wipe a member's
    disk (after healing and converging), a snapshot, or nothing (an ``offer`` phase: only client load)."""
    alive = c.members_alive()
    dead = [i for i in range(members) if i not in alive]
    action = rng.choice(
        ["offer", "offer", "kill", "restart", "partition", "isolate_leader", "heal", "truncate", "wipe"]
        + (["snapshot", "snapshot"] if snapshots else [])
    )
    if action == "kill" and len(alive) > members // 2 + 0:
        victim = rng.choice(alive)
        c.kill(victim)
        result.actions.append(f"kill {victim}")
    elif action == "restart" and dead:
        m = rng.choice(dead)
        c.restart(m)
        result.actions.append(f"restart {m}")
    elif action == "partition":
        ids = list(range(members))
        rng.shuffle(ids)
        cut = rng.randrange(1, members)
        c.partition([ids[:cut], ids[cut:]])
        result.actions.append(f"partition {sorted(ids[:cut])}|{sorted(ids[cut:])}")
    elif action == "isolate_leader" and (lid := c.leader_id()) is not None:
        c.isolate(lid)
        result.actions.append(f"isolate {lid}")
    elif action in ("truncate", "wipe"):
        _disk_fault(c, rng, members, action, dead, result, checker)
    elif action == "heal":
        c.heal()
        result.actions.append("heal")
    elif action == "snapshot":
        result.actions.append(f"snapshot {'ok' if c.control('snapshot') else 'refused'}")


def _disk_fault(
    c: SimCluster,
    rng: random.Random,
    members: int,
    action: str,
    dead: list[int],
    result: ScheduleResult,
    checker: SafetyChecker,
) -> None:
    """Disk faults only on a member whose data the others all hold: heal, converge, then wipe the member or
    truncate its recording (at a frame boundary) while it is down."""
    c.heal()
    for m in dead:
        c.restart(m)
    if not c.run_until(lambda: converged(c), 30 * SECOND):
        return
    checker.check(c)
    victim = rng.randrange(members)
    if action == "wipe":
        c.restart_wiped(victim)
        result.actions.append(f"wipe {victim}")
        return
    stop = c.member(victim).archive.stop_position
    c.kill(victim)
    cut = rng.randrange(0, stop // 32 + 1) * 32 if stop else 0
    c.truncate_recording(victim, _frame_boundary_at_or_below(c, victim, cut))
    c.restart(victim)
    result.actions.append(f"truncate {victim}")


@dataclass
class _ClientLoad:
    """Client load through whoever leads (an isolated leader appends but cannot commit): the service's
    workload, or, without one, numbered raw payloads offered to the leader."""

    cluster: SimCluster
    rng: random.Random
    seed: int
    workload: SimWorkload | None
    payload_no: int = 0

    def burst(self) -> None:
        """A phase's load: up to 40 rounds a few milliseconds apart, each offering the ops due (or one
        raw payload)."""
        c, rng = self.cluster, self.rng
        for _ in range(rng.randrange(0, 40)):
            if self.workload is not None:
                self.workload.step()
            else:
                self.payload_no += 1
                c.offer(f"op-{self.seed}-{self.payload_no}".encode() * rng.randrange(1, 4))
            c.run_for(rng.randrange(0, 5) * MS)

    def final(self) -> None:
        """The healed phase's load: an op acknowledged within the bound (earlier phases may all have
        lacked a quorum), then every key read back, each answer checked; or five raw payloads."""
        c, workload = self.cluster, self.workload
        if workload is None:
            for _ in range(5):
                self.payload_no += 1
                c.offer(f"final-{self.payload_no}".encode())
            return
        acked_before = workload.acked
        workload.step_until(lambda: workload.acked > acked_before, 30 * SECOND, "an op acknowledged after heal")
        workload.read_back(30 * SECOND)


def _final_phase(c: SimCluster, load: _ClientLoad) -> None:
    """Everything back on a clean network; a leader, the final load, convergence, each within a bound."""
    c.heal()
    for m in range(c.member_count):
        if m not in c.members_alive():
            c.restart(m)
    c.network.config = NetworkConfig()  # the final phase runs on a clean network
    c.await_leader(30 * SECOND)
    load.final()
    c.await_condition(lambda: converged(c), 30 * SECOND, "convergence after heal")


def _judge_end(c: SimCluster, checker: SafetyChecker, workload: SimWorkload | None, result: ScheduleResult) -> None:
    """The end of a schedule: the workload closed (its replies in flight read), the committed prefix on
    every member, a leader; the figures of ``result``."""
    if workload is not None:
        c.run_for(SECOND)  # replies in flight
        workload.step()
        workload.close()
        result.acked_ops = workload.acked
        result.invoked_ops = workload.invoked
    checker.check(c)
    checker.check_committed_prefix_at_end(c)
    result.applied_rows = checker.applied_rows_checked
    leader_id = c.leader_id()
    assert leader_id is not None and c.member(leader_id).role == Role.LEADER
    result.committed_bytes = len(checker.committed)
    result.terms = len(checker.leaders_by_term)
    result.sim_seconds = c.now_ns / SECOND
    result.digest = c.message_digest()


PROTOCOL_FAULT_RATE = 0.15  # per phase: a fault aimed at the protocol checks (chaos/checks/protocol.py)


def _protocol_fault(c: SimCluster, rng: random.Random, members: int, result: ScheduleResult) -> None:
    """``slow`` links (every message delayed past the election timeout) or ``kill-voter`` (kill the leader,
    then kill and at once restart the first member seen voting in the election that follows)."""
    if rng.random() < 0.5:
        delay = rng.choice([350, 500]) * MS
        for src in range(members):
            for dst in range(members):
                if src != dst:
                    c.set_link(src, dst, latency_ns=delay)
        result.actions.append(f"slow {delay // MS}ms")
        return
    leader = c.leader_id()
    if leader is None or len(c.members_alive()) <= members // 2 + 1:
        return
    c.kill(leader)
    result.actions.append(f"kill {leader}")
    end = c.now_ns + 3 * SECOND
    while c.now_ns < end:
        voters = [m for m in c.members_alive() if c.member(m).election_state == ElectionState.FOLLOWER_BALLOT]
        if voters:
            c.kill(voters[0])
            c.restart(voters[0])
            result.actions.append(f"kill-voter {voters[0]}")
            return
        c.run_for(MS // 2)


def _frame_boundary_at_or_below(cluster: SimCluster, member_id: int, position: int) -> int:
    """The largest frame boundary <= position in a (down) member's log, read from its files."""
    store = RecordingStore.open(cluster.storage(member_id), LOG_DIR)
    try:
        p = min(position, store.stop_position)
        while p > store.start_position and not store.is_frame_boundary(p):
            p -= 32
        return p
    finally:
        store.close()
