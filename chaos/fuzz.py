"""Seeded random fault schedules on the simulator: the property test's driver (tests/sim/test_random_safety.py).

Each phase picks one action (offer a burst, kill, restart, partition, isolate the leader, heal,
truncate or wipe a member's log while it is down, lossy network) and runs the cluster for a
while; the online safety checker samples every live member after each phase. The final phase heals
everything, restarts every member and requires progress within a bound. Same seed, same run.

Unlike a scenario run (clusterlab.chaos.runner: a schedule of named nemeses, a recorded trace, the
pyarrow and Spark verdicts), nothing is recorded: it is cheap enough to sweep hundreds of seeds.

``UniqueKeyPuts`` puts unique keys (``k<n> = v<n>``), so durability is a simple question: every put
that got an ``ok`` reply must be in every member's final state. A put without a reply has an
unknown outcome and may or may not be applied; a put is never applied twice because each key is
written once. (clusterlab.chaos.workload's workloads, with a model of every reply, drive scenario runs.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from clusterlab.chaos.target import converged
from clusterlab.core.archive.layout import LOG_DIR
from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.consensus.context import MS, SECOND, ElectionState, Role
from clusterlab.harness.invariants import SafetyChecker
from clusterlab.harness.services.kv import decode_reply, put
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.simnet import NetworkConfig


@dataclass
class UniqueKeyPuts:
    """Puts of keys written once each (``k<n> = v<n>``) through one client at a time, reconnecting when the
    session is lost."""

    cluster: Any
    next_id: int = 0
    acked: dict[int, str] = field(default_factory=dict)  # request id -> value acknowledged
    invoked: int = 0
    reconnects: int = 0
    _client: Any = None
    _seen_replies: int = 0

    def _ensure_client(self) -> Any:
        c = self._client
        if c is None or c.client.is_closed or c.errors:
            if c is not None:
                self._drain(c)
                self.reconnects += 1
            c = self.cluster.add_client()
            c.client.connect(self.cluster.now_ns)
            self._client = c
            self._seen_replies = 0
        return c

    def _drain(self, c: Any) -> None:
        for msg in c.received[self._seen_replies :]:
            try:
                reply = decode_reply(msg.payload)
            except ValueError:
                continue
            if reply.get("ok") and isinstance(reply.get("id"), int):
                self.acked[reply["id"]] = f"v{reply['id']}"
        self._seen_replies = len(c.received)

    def step(self, count: int) -> None:
        """Offer up to ``count`` puts (only while connected) and collect replies."""
        c = self._ensure_client()
        self._drain(c)
        if not c.client.is_connected:
            return
        for _ in range(count):
            self.next_id += 1
            c.client.offer(put(self.next_id, f"k{self.next_id}", f"v{self.next_id}"), self.cluster.now_ns)
            self.invoked += 1

    def collect(self) -> None:
        if self._client is not None:
            self._drain(self._client)

    def check_durable(self, entries_of_member: dict[int, dict[str, Any]]) -> None:
        """Every acknowledged put is in every member's state (``entries`` maps key -> (value, rev))."""
        self.collect()
        for member_id, entries in entries_of_member.items():
            for request_id, value in self.acked.items():
                got = entries.get(f"k{request_id}")
                got_value = got[0] if isinstance(got, (tuple, list)) else got
                if got_value != value:
                    raise AssertionError(
                        f"durability: acknowledged put k{request_id}={value} is {got_value!r} on member {member_id}"
                    )


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
) -> ScheduleResult:
    """Run one seeded schedule; raises SafetyViolation or SimTimeout (with the seed) on failure.

    With ``service="kv"`` every member runs the key-value service and a client workload writes
    through the leader: then also every acknowledged write must survive and every member's service
    must agree on entry and state digest at every log position; snapshots join the fault mix.
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
        load = _ClientLoad(c, rng, seed, UniqueKeyPuts(c) if service == "kv" else None)
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
    """Client load through whoever leads (an isolated leader appends but cannot commit): the workload's puts,
    or, without a service, numbered raw payloads offered to the leader."""

    cluster: SimCluster
    rng: random.Random
    seed: int
    workload: UniqueKeyPuts | None
    payload_no: int = 0

    def burst(self) -> None:
        """A phase's load: up to 40 messages, a few milliseconds apart."""
        c, rng = self.cluster, self.rng
        for _ in range(rng.randrange(0, 40)):
            if self.workload is not None:
                self.workload.step(1)
            else:
                self.payload_no += 1
                c.offer(f"op-{self.seed}-{self.payload_no}".encode() * rng.randrange(1, 4))
            c.run_for(rng.randrange(0, 5) * MS)

    def final(self) -> None:
        """The healed phase's load: a put acknowledged within the bound, or five raw payloads."""
        c, workload = self.cluster, self.workload
        if workload is None:
            for _ in range(5):
                self.payload_no += 1
                c.offer(f"final-{self.payload_no}".encode())
            return
        c.await_condition(lambda: _workload_step_until_connected(workload), 30 * SECOND, "client connected")
        # Liveness after heal: a put is acknowledged within the bound (earlier phases may all have
        # lacked a quorum); one more put every 500 ms covers a session lost to a last election.
        acked_before, next_put_ns = len(workload.acked), c.now_ns + 500 * MS

        def acked_after_heal() -> bool:
            nonlocal next_put_ns
            workload.collect()
            if len(workload.acked) > acked_before:
                return True
            if c.now_ns >= next_put_ns:
                workload.step(1)
                next_put_ns = c.now_ns + 500 * MS
            return False

        c.await_condition(acked_after_heal, 30 * SECOND, "a put acknowledged after heal")


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


def _judge_end(c: SimCluster, checker: SafetyChecker, workload: UniqueKeyPuts | None, result: ScheduleResult) -> None:
    """The end of a schedule: durability of every acknowledged put, the committed prefix on every member, a
    leader; the figures of ``result``."""
    if workload is not None:
        c.run_for(SECOND)  # replies in flight
        checker.check(c)
        workload.check_durable({m: c.service(m).service.entries for m in c.members_alive()})
        result.acked_ops = len(workload.acked)
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


def _workload_step_until_connected(workload: UniqueKeyPuts) -> bool:
    """Final phase: (re)connect and write a few more puts; true once they were offered."""
    before = workload.invoked
    workload.step(5)
    return workload.invoked > before
