"""The simulator's network and scheduler, driven by small fake members (no consensus code needed).

``ToyMember`` plays a trivial "lowest live id is leader" heartbeat protocol with the Member surface,
so SimCluster's operations (await_leader, kill, restart, partitions, determinism) are exercised
exactly as the real ConsensusModule will be."""

from __future__ import annotations

import itertools
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from clusterlab.core.consensus.context import (
    MS,
    SECOND,
    Channel,
    ConsensusModuleContext,
    ConsensusModuleState,
    ElectionState,
    Role,
)
from clusterlab.harness.sim import Member, SimCluster, SimError, SimTimeout
from clusterlab.harness.simnet import (
    DROP_BLOCKED,
    DROP_DOWN,
    DROP_ISOLATED,
    DROP_LOSS,
    DROP_PARTITION,
    NEVER_NS,
    Delivery,
    NetworkConfig,
    SimNetwork,
    VirtualClock,
)

pytestmark = pytest.mark.sim
REPO = Path(__file__).resolve().parents[2]

_HB = struct.Struct("<bqq")  # kind, leadership_term_id, append_position
_KIND_HEARTBEAT = 1
_KIND_LOG = 2


class _ToyArchive:
    def __init__(self) -> None:
        self.stop_position = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True


class ToyMember:
    """Lowest-id-alive-is-leader: every member heartbeats every interval; a member that has heard no
    lower id within the heartbeat timeout (and has been up that long) takes a new, higher term."""

    def __init__(self, ctx: ConsensusModuleContext) -> None:
        self.ctx = ctx
        self.member_id = ctx.member_id
        self.role = Role.FOLLOWER
        self.leadership_term_id = -1
        self.commit_position = 0
        self.append_position = 0
        self.election_state: ElectionState | None = ElectionState.INIT
        self.state = ConsensusModuleState.INIT
        self.archive = _ToyArchive()
        self.received: list[tuple[int, Channel, bytes, int]] = []
        self.closed = False
        self._last_heard_ns: dict[int, int] = {}
        self._started_ns = 0
        self._next_heartbeat_ns = NEVER_NS
        self._interval_ns = ctx.timeouts.leader_heartbeat_interval_ns
        self._timeout_ns = ctx.timeouts.leader_heartbeat_timeout_ns
        # A little seeded jitter, so the member rng matters to the run as it will for the real one.
        self._jitter_ns = ctx.rng.randrange(0, 5 * MS)

    def _transition(self, to: ElectionState | None, now_ns: int) -> None:
        if to is not None and to != self.election_state:
            frm = self.election_state.name if self.election_state is not None else "CLOSED"
            self.ctx.events(
                "election_state", self.member_id, self.leadership_term_id, None, {"from": frm, "to": to.name}
            )
        self.election_state = to

    def on_start(self, now_ns: int) -> None:
        self._started_ns = now_ns
        self._next_heartbeat_ns = now_ns + self._jitter_ns
        self.state = ConsensusModuleState.ACTIVE
        self._transition(ElectionState.CANVASS, now_ns)

    def on_message(self, src_member_id: int, channel: Channel, payload: bytes, now_ns: int) -> None:
        self.received.append((src_member_id, channel, payload, now_ns))
        if len(payload) != _HB.size:
            return
        kind, term, position = _HB.unpack(payload)
        self._last_heard_ns[src_member_id] = now_ns
        if term > self.leadership_term_id:
            self.leadership_term_id = term
        if kind == _KIND_LOG and self.role != Role.LEADER:
            self.append_position = max(self.append_position, position)
            self.commit_position = self.append_position

    def do_work(self, now_ns: int) -> int:
        work = 0
        if now_ns >= self._next_heartbeat_ns:
            self._next_heartbeat_ns = now_ns + self._interval_ns
            beat = _HB.pack(_KIND_HEARTBEAT, self.leadership_term_id, self.append_position)
            for m in self.ctx.members:
                if m.member_id != self.member_id:
                    self.ctx.outbox.send(m.member_id, Channel.CONSENSUS, beat)
            work += 1
        lower_alive = any(
            src < self.member_id and now_ns - t < self._timeout_ns for src, t in self._last_heard_ns.items()
        )
        canvassed = now_ns - self._started_ns >= self._timeout_ns
        if not lower_alive and canvassed and self.role != Role.LEADER:
            self.leadership_term_id += 1
            self.role = Role.LEADER
            self._transition(ElectionState.LEADER_READY, now_ns)
            self.election_state = None
            work += 1
        elif lower_alive and (self.role == Role.LEADER or self.election_state is not None):
            self.role = Role.FOLLOWER
            self._transition(ElectionState.FOLLOWER_READY, now_ns)
            self.election_state = None
            work += 1
        return work

    def next_deadline_ns(self) -> int:
        return self._next_heartbeat_ns

    def offer(self, payload: bytes, now_ns: int) -> int:
        if self.role != Role.LEADER:
            return -1
        self.append_position += len(payload)
        self.commit_position = self.append_position
        entry = _HB.pack(_KIND_LOG, self.leadership_term_id, self.append_position)
        for m in self.ctx.members:
            if m.member_id != self.member_id:
                self.ctx.outbox.send(m.member_id, Channel.LOG, entry)
        return self.append_position

    def close(self) -> None:
        self.closed = True
        self.archive.close()


class SpinMember(ToyMember):
    """Misbehaves: always wants to run again at the current instant."""

    def next_deadline_ns(self) -> int:
        return 0


def toy_cluster(tmp_path: Path, **kwargs: object) -> SimCluster:
    kwargs.setdefault("member_factory", ToyMember)
    return SimCluster(directory=tmp_path, **kwargs)  # type: ignore[arg-type]


def _net(seed: int = 1, **config: object) -> SimNetwork:
    return SimNetwork(random.Random(seed), NetworkConfig(**config))  # type: ignore[arg-type]


def _drain(net: SimNetwork) -> list[Delivery]:
    out: list[Delivery] = []
    while (t := net.next_delivery_ns()) < NEVER_NS:
        out.extend(net.pop_due(t))
    return out


# --------------------------------------------------------------------------- clock and network


def test_virtual_clock_is_monotonic() -> None:
    clock = VirtualClock(10)
    clock.advance_to(10)
    clock.advance_to(25)
    assert clock.now_ns == 25
    with pytest.raises(ValueError, match="backwards"):
        clock.advance_to(24)


def test_network_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        NetworkConfig(min_latency_ns=5, max_latency_ns=1)
    with pytest.raises(ValueError):
        NetworkConfig(loss_probability=1.5)


def test_latency_within_bounds_and_fifo_per_link() -> None:
    net = _net(min_latency_ns=2 * MS, max_latency_ns=7 * MS)
    for i in range(2000):
        net.send(i * 100, i % 3, (i + 1) % 3, Channel.CONSENSUS, i.to_bytes(4, "little"))
    got = _drain(net)
    assert len(got) == 2000
    assert all(d.deliver_ns - d.send_ns >= 2 * MS for d in got)
    # FIFO clamping can push a message past max latency only to wait for its predecessor on the link.
    by_link: dict[tuple[int, int], list[Delivery]] = {}
    for d in got:
        by_link.setdefault((d.src, d.dst), []).append(d)
    for msgs in by_link.values():
        assert [d.seq for d in msgs] == sorted(d.seq for d in msgs), "a link reordered without reorder"
    unclamped = _net(min_latency_ns=2 * MS, max_latency_ns=7 * MS)
    for i in range(500):
        unclamped.send(i * 10 * MS, 0, 1, Channel.LOG, b"x")
    lat = [d.deliver_ns - d.send_ns for d in _drain(unclamped)]
    assert min(lat) >= 2 * MS and max(lat) <= 7 * MS
    assert max(lat) - min(lat) > 3 * MS  # actually spread over the range


def test_deliveries_come_in_time_then_seq_order() -> None:
    net = _net(min_latency_ns=1 * MS, max_latency_ns=1 * MS)
    net.send(0, 0, 1, Channel.CONSENSUS, b"a")
    net.send(0, 2, 1, Channel.CONSENSUS, b"b")
    net.send(0, 1, 0, Channel.LOG, b"c")
    assert net.pop_due(1 * MS - 1) == []
    assert [d.payload for d in net.pop_due(1 * MS)] == [b"a", b"b", b"c"]


def _lossy_stats(seed: int) -> tuple[int, int, int, int, str]:
    net = _net(seed, loss_probability=0.1, duplicate_probability=0.05, reorder_probability=0.2)
    for i in range(10_000):
        net.send(i * 1000, 0, 1, Channel.LOG, i.to_bytes(4, "little"))
    got = _drain(net)
    order = [int.from_bytes(d.payload, "little") for d in got]
    overtaken = sum(1 for a, b in itertools.pairwise(order) if b < a)
    s = net.stats
    return (
        s.dropped_total(DROP_LOSS),
        s.duplicated[Channel.LOG],
        s.delivered[Channel.LOG],
        overtaken,
        net.digest,
    )


def test_loss_duplicate_reorder_counts_plausible_and_deterministic() -> None:
    lost, duplicated, delivered, overtaken, digest = _lossy_stats(42)
    assert 800 < lost < 1200  # ~1000 expected, sd ~30
    assert 300 < duplicated < 650  # 5% of ~9000
    assert delivered == 10_000 - lost + duplicated
    assert overtaken > 100
    assert _lossy_stats(42) == (lost, duplicated, delivered, overtaken, digest)
    assert _lossy_stats(43)[4] != digest


def test_partition_drops_cross_group_keeps_in_group() -> None:
    net = _net()
    net.partition([[0, 1], [2]])
    pairs = [(s, d) for s in range(4) for d in range(4) if s != d]
    for s, d in pairs:
        net.send(0, s, d, Channel.CONSENSUS, bytes([s, d]))
    net.send(0, -1, 2, Channel.INGRESS, b"client")  # clients are not in partition groups
    delivered = {(d.src, d.dst) for d in _drain(net)}
    assert delivered == {(0, 1), (1, 0), (-1, 2)}  # member 3 is in no group: isolated
    assert net.stats.dropped_total(DROP_PARTITION) == len(pairs) - 2
    assert net.partition_groups == [[0, 1], [2]]
    with pytest.raises(ValueError, match="two partition groups"):
        net.partition([[0, 1], [1, 2]])


def test_partition_drops_messages_already_in_flight() -> None:
    net = _net()
    net.send(0, 0, 2, Channel.LOG, b"in flight")
    net.send(0, 0, 1, Channel.LOG, b"same side")
    net.partition([[0, 1], [2]])
    assert [d.payload for d in _drain(net)] == [b"same side"]
    assert net.stats.dropped[(Channel.LOG, DROP_PARTITION)] == 1


def test_one_way_block_and_unblock() -> None:
    net = _net()
    net.block(0, 1)
    net.send(0, 0, 1, Channel.CONSENSUS, b"0->1")
    net.send(0, 1, 0, Channel.CONSENSUS, b"1->0")
    assert [d.payload for d in _drain(net)] == [b"1->0"]
    assert net.stats.dropped_total(DROP_BLOCKED) == 1
    net.unblock(0, 1)
    net.send(10 * MS, 0, 1, Channel.CONSENSUS, b"0->1 again")
    assert [d.payload for d in _drain(net)] == [b"0->1 again"]


def test_isolate_and_heal() -> None:
    net = _net()
    net.isolate(2)
    net.partition([[0], [1]])
    net.block(1, 0)
    net.set_link(0, 1, loss=1.0)
    for s, d in [(0, 2), (2, 1), (0, 1), (1, 0), (-1, 2)]:
        net.send(0, s, d, Channel.CONSENSUS, b"x")
    assert _drain(net) == []
    assert net.stats.dropped_total(DROP_ISOLATED) == 3
    net.heal()
    for s, d in [(0, 2), (2, 1), (0, 1), (1, 0), (-1, 2)]:
        net.send(10 * MS, s, d, Channel.CONSENSUS, b"y")
    assert len(_drain(net)) == 5


def test_flaky_link_overrides_latency_and_loss() -> None:
    net = _net()
    net.set_link(0, 1, latency_ns=(50 * MS, 60 * MS))
    net.set_link(1, 0, loss=1.0)
    net.send(0, 0, 1, Channel.LOG, b"slow")
    net.send(0, 1, 0, Channel.LOG, b"lost")
    net.send(0, 0, 2, Channel.LOG, b"normal")
    got = _drain(net)
    assert [d.payload for d in got] == [b"normal", b"slow"]
    assert 50 * MS <= got[1].deliver_ns <= 60 * MS
    assert net.stats.dropped_total(DROP_LOSS) == 1
    net.clear_link(0, 1)
    net.send(100 * MS, 0, 1, Channel.LOG, b"fast again")
    assert _drain(net)[0].deliver_ns <= 105 * MS


def test_hooks_see_send_deliver_drop() -> None:
    net = _net(duplicate_probability=1.0)
    seen: list[tuple[str, int, str]] = []
    net.on_send.append(lambda d: seen.append(("send", d.seq, "")))
    net.on_deliver.append(lambda d: seen.append(("recv", d.seq, "")))
    net.on_drop.append(lambda d, reason, now: seen.append(("drop", d.seq, reason)))
    net.block(0, 2)
    net.send(0, 0, 1, Channel.CONSENSUS, b"a")  # seq 0 + duplicate seq 1
    net.send(0, 0, 2, Channel.CONSENSUS, b"b")  # seq 2, blocked
    _drain(net)
    assert seen == [
        ("send", 0, ""),
        ("send", 2, ""),
        ("drop", 2, DROP_BLOCKED),
        ("recv", 0, ""),
        ("recv", 1, ""),
    ]


def test_drop_all_to_and_from() -> None:
    net = _net()
    for s, d in [(0, 1), (1, 0), (2, 1), (1, 2)]:
        net.send(0, s, d, Channel.LOG, b"x")
    assert net.drop_all_to(1, 0) == 2
    assert net.drop_all_from(1, 0) == 2
    assert _drain(net) == []
    assert net.stats.dropped_total(DROP_DOWN) == 4


# --------------------------------------------------------------------------- SimCluster


def test_toy_cluster_elects_lowest_id_and_fails_over(tmp_path: Path) -> None:
    with toy_cluster(tmp_path, seed=3) as cluster:
        assert cluster.await_leader(5 * SECOND) == 0
        assert cluster.offer(b"hello") == 5
        cluster.run_for(100 * MS)
        assert cluster.member(2).commit_position == 5
        cluster.kill(0)
        cluster.await_condition(lambda: cluster.leader_id() == 1, 5 * SECOND, "member 1 leading")
        assert cluster.members_alive() == [1, 2]
        cluster.restart(0)
        assert cluster.incarnation(0) == 1
        cluster.await_condition(lambda: cluster.leader_id() == 0, 5 * SECOND, "member 0 leading again")
        entered = cluster.election_states_entered()
        assert {ElectionState.CANVASS, ElectionState.LEADER_READY, ElectionState.FOLLOWER_READY} <= entered
        kinds = [(e["kind"], e["member_id"]) for e in cluster.events if e["source"] == "harness"]
        assert kinds == [("start", 0), ("start", 1), ("start", 2), ("kill", 0), ("restart", 0)]
        assert all(e["time_ns"] <= cluster.now_ns for e in cluster.events)


def test_partitioned_minority_loses_leadership_view(tmp_path: Path) -> None:
    with toy_cluster(tmp_path, seed=5) as cluster:
        cluster.await_leader(5 * SECOND)
        cluster.run_for(200 * MS)  # let the followers learn term 0
        cluster.partition([[0], [1, 2]])
        # Both sides now think they lead: 0 and 1, so there is no unique leader in the top term...
        cluster.await_condition(lambda: cluster.member(1).role == Role.LEADER, 5 * SECOND, "1 leads its side")
        assert cluster.leader_id() == 1  # ...1's term is higher, so it is the settled leader
        cluster.heal()
        cluster.await_condition(lambda: cluster.member(1).role == Role.FOLLOWER, 5 * SECOND, "1 steps down")


def test_same_seed_same_digest_different_seed_different(tmp_path: Path) -> None:
    lossy = NetworkConfig(loss_probability=0.05, duplicate_probability=0.02, reorder_probability=0.1)

    def run(seed: int, sub: str) -> tuple[str, int, list[dict[str, object]]]:
        with toy_cluster(tmp_path / sub, seed=seed, members=5, network=lossy) as cluster:
            cluster.run_for(2 * SECOND)
            cluster.kill(0)
            cluster.run_for(2 * SECOND)
            cluster.offer(b"payload")
            cluster.run_for(1 * SECOND)
            return cluster.message_digest(), cluster.network.delivered_count, cluster.events

    first = run(11, "a")
    assert first[1] > 500
    assert run(11, "b") == first
    assert run(12, "c")[0] != first[0]


def test_digest_is_stable_across_processes() -> None:
    # A fresh interpreter with a different hash seed must reproduce the run: catches iteration
    # over sets/hashes of str leaking into scheduling order.
    script = (
        "import tempfile; from clusterlab.harness.sim import SimCluster; "
        "from clusterlab.harness.simnet import NetworkConfig; "
        "from tests.sim.test_simnet import ToyMember; "
        "c = SimCluster(seed=21, directory=tempfile.mkdtemp(), member_factory=ToyMember, "
        "network=NetworkConfig(loss_probability=0.1, reorder_probability=0.1)); "
        "c.run_for(3_000_000_000); print(c.message_digest())"
    )
    digests = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, check=True
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def test_member_crash_reports_seed(tmp_path: Path) -> None:
    class Crasher(ToyMember):
        def on_message(self, src_member_id: int, channel: Channel, payload: bytes, now_ns: int) -> None:
            raise KeyError("boom")

    with toy_cluster(tmp_path, seed=31, member_factory=Crasher) as cluster:
        with pytest.raises(KeyError) as info:
            cluster.run_for(1 * SECOND)
        assert any("seed=31 re-run: SimCluster(" in note for note in info.value.__notes__)


def test_member_rng_is_distinct_per_member_and_incarnation(tmp_path: Path) -> None:
    contexts: list[ConsensusModuleContext] = []

    states: list[object] = []

    def factory(ctx: ConsensusModuleContext) -> Member:
        contexts.append(ctx)
        states.append(ctx.rng.getstate())
        return ToyMember(ctx)

    with toy_cluster(tmp_path, seed=9, member_factory=factory) as cluster:
        cluster.restart(1)
    assert len({c.rng.random() for c in contexts}) == 4
    assert [c.cluster_dir for c in contexts] == [tmp_path / f"member-{i}" for i in (0, 1, 2, 1)]
    assert states[3] == random.Random("9:1:1").getstate()  # seed:member:incarnation


def test_kill_drops_in_flight_messages_to_the_member(tmp_path: Path) -> None:
    with toy_cluster(tmp_path, seed=1) as cluster:
        cluster.run_for(1 * SECOND)
        sender = cluster.member(0)
        assert isinstance(sender, ToyMember)
        sender.ctx.outbox.send(1, Channel.LOG, b"doomed")
        sender.ctx.outbox.send(2, Channel.LOG, b"fine")
        cluster.kill(1)
        assert cluster.network.stats.dropped[(Channel.LOG, DROP_DOWN)] == 1
        sender.ctx.outbox.send(1, Channel.LOG, b"to a dead member")
        assert cluster.network.stats.dropped[(Channel.LOG, DROP_DOWN)] == 2
        cluster.restart(1)
        cluster.run_for(100 * MS)
        fresh = cluster.member(1)
        assert isinstance(fresh, ToyMember)
        assert b"doomed" not in [p for _, _, p, _ in fresh.received]
        receiver = cluster.member(2)
        assert isinstance(receiver, ToyMember)
        assert b"fine" in [p for _, _, p, _ in receiver.received]


def test_dead_incarnation_cannot_send(tmp_path: Path) -> None:
    with toy_cluster(tmp_path) as cluster:
        old = cluster.member(2)
        assert isinstance(old, ToyMember)
        cluster.kill(2)
        sent = sum(cluster.network.stats.sent.values())
        old.ctx.outbox.send(0, Channel.CONSENSUS, b"ghost")
        assert sum(cluster.network.stats.sent.values()) == sent
        with pytest.raises(SimError, match="not running"):
            cluster.member(2)


def test_stop_closes_cleanly_and_kill_does_not(tmp_path: Path) -> None:
    with toy_cluster(tmp_path) as cluster:
        a, b = cluster.member(0), cluster.member(1)
        assert isinstance(a, ToyMember) and isinstance(b, ToyMember)
        cluster.stop(0)
        cluster.kill(1)
        assert a.closed and a.archive.closed
        assert not b.closed
        cluster.restart(0)
        assert cluster.members_alive() == [0, 2]


def test_restart_wiped_empties_the_storage_and_truncate_requires_down(tmp_path: Path) -> None:
    with toy_cluster(tmp_path) as cluster:
        storage = cluster.storage(1)
        storage.replace("node-state.dat", b"x", sync=False)
        cluster.restart(1)
        assert storage.read_file("node-state.dat") == b"x"  # a restart keeps what was written
        cluster.restart_wiped(1)
        assert not storage.exists("node-state.dat") and cluster.storage(1) is storage
        restarts = [e["detail"] for e in cluster.events if e["kind"] == "restart"]
        assert restarts == [{"incarnation": 1}, {"incarnation": 2, "wiped": True}]
        with pytest.raises(SimError, match="running"):
            cluster.truncate_recording(1, 0)


def test_livelock_guard_names_the_member(tmp_path: Path) -> None:
    def factory(ctx: ConsensusModuleContext) -> Member:
        return SpinMember(ctx) if ctx.member_id == 1 else ToyMember(ctx)

    cluster = toy_cluster(tmp_path, seed=77, member_factory=factory, max_rounds_per_instant=100)
    with cluster, pytest.raises(SimError, match=r"livelock.*member 1 \(incarnation 0.*seed=77"):
        cluster.step()


def test_await_condition_timeout_names_seed_and_repro(tmp_path: Path) -> None:
    with toy_cluster(tmp_path, seed=1234) as cluster:
        with pytest.raises(SimTimeout) as info:
            cluster.await_condition(lambda: False, 500 * MS, "the impossible")
        message = str(info.value)
        assert "the impossible not reached within 0.500s" in message
        assert "seed=1234" in message and "SimCluster(members=3, seed=1234" in message
        assert cluster.now_ns == 500 * MS


def test_run_for_ends_exactly_and_no_directory_is_created(tmp_path: Path) -> None:
    cluster = SimCluster(member_factory=ToyMember, directory=tmp_path / "never")
    cluster.run_for(123 * MS)
    assert cluster.now_ns == 123 * MS
    cluster.close()
    cluster.close()  # idempotent
    assert not (tmp_path / "never").exists()  # members keep their state in MemoryStorage


def test_no_leader_means_offer_is_refused(tmp_path: Path) -> None:
    with toy_cluster(tmp_path) as cluster:
        assert cluster.leader_id() is None  # nobody has canvassed long enough yet
        assert cluster.offer(b"x") == -1
