"""The member driver (clusterlab.core.consensus.member_driver): one member's module built from its
setup, its sends routed to the peer, service and egress ports; the simulator, the ZeroMQ node and a
stepped test drive members through it, so the same inputs give the same effects under any of them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from clusterlab.core.archive.storage import MemoryStorage
from clusterlab.core.codec.consensus import CanvassPosition, NewLeadershipTerm, RequestVote
from clusterlab.core.codec.transport import LogBlock
from clusterlab.core.consensus.context import (
    Channel,
    ClusterMember,
    ConsensusModuleContext,
    EventSink,
    Outbox,
    Timeouts,
)
from clusterlab.core.consensus.effects import MemberSend, Received, SteppedModule
from clusterlab.core.consensus.member_driver import MemberDriver, MemberSetup, member_rng
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.simnet import Delivery

from clusterlab.testing.intercepts import TestHooks

MS = 1_000_000


class _Sender:
    """A stand-in module that sends one message of each kind when started, through its context's outbox."""

    def __init__(self, ctx: ConsensusModuleContext) -> None:
        self.ctx = ctx
        self.worked: list[int] = []

    def on_start(self, now_ns: int) -> None:
        out = self.ctx.outbox
        out.send(1, Channel.CONSENSUS, b"to-peer-1")
        out.send(self.ctx.member_id, Channel.SERVICE, b"to-own-services")
        out.send(2, Channel.SERVICE, b"to-another-member's-services")
        out.send_egress("client:7", b"to-a-client")

    def on_message(self, src: int, channel: Channel, payload: bytes, now_ns: int) -> None:
        self.ctx.outbox.send(src, channel, b"reply:" + payload)

    def do_work(self, now_ns: int) -> int:
        self.worked.append(now_ns)
        return 1

    def next_deadline_ns(self) -> int:
        return 0

    def close(self) -> None:
        pass


def _setup(tmp_path: Path, member_id: int = 0, seed: int | str = 1, incarnation: int = 0) -> MemberSetup:
    return MemberSetup(
        member_id=member_id,
        members=[ClusterMember(i) for i in range(3)],
        cluster_dir=tmp_path,
        storage=MemoryStorage(),
        seed=seed,
        incarnation=incarnation,
        timeouts=Timeouts.fast(),
        service_count=0,
    )


def _ports() -> tuple[dict[str, list[Any]], dict[str, Any]]:
    got: dict[str, list[Any]] = {"peers": [], "services": [], "egress": []}
    ports = {
        "peers": lambda member_id, channel, payload: got["peers"].append((member_id, channel, payload)),
        "services": lambda payload: got["services"].append(payload),
        "egress": lambda channel, payload: got["egress"].append((channel, payload)),
    }
    return got, ports


def test_the_driver_routes_each_send_to_its_port(tmp_path: Path) -> None:
    got, ports = _ports()
    driver = MemberDriver(_setup(tmp_path), factory=_Sender, **ports)
    driver.on_start(0)
    assert got["peers"] == [(1, Channel.CONSENSUS, b"to-peer-1")]
    # Only this member's own services get the service channel; another member's is not ours to reach.
    assert got["services"] == [b"to-own-services"]
    assert got["egress"] == [("client:7", b"to-a-client")]


def test_deliver_is_a_message_then_a_duty_cycle_at_the_same_instant(tmp_path: Path) -> None:
    got, ports = _ports()
    driver = MemberDriver(_setup(tmp_path), factory=_Sender, **ports)
    assert driver.deliver(2, Channel.LOG, b"m", 5 * MS) == 1
    assert got["peers"] == [(2, Channel.LOG, b"reply:m")]
    assert driver.module.worked == [5 * MS]


def test_a_disconnected_driver_sends_nothing(tmp_path: Path) -> None:
    got, ports = _ports()
    driver = MemberDriver(_setup(tmp_path), factory=_Sender, **ports)
    assert driver.connected
    driver.disconnect()
    driver.on_start(0)  # a stale module someone still holds tries every port
    driver.on_message(1, Channel.CONSENSUS, b"late", 1)
    assert not driver.connected
    assert got == {"peers": [], "services": [], "egress": []}


def test_the_setup_makes_the_context_every_driver_uses(tmp_path: Path) -> None:
    setup = dataclasses.replace(_setup(tmp_path, member_id=2, seed="s", incarnation=3), archive_segment_length=1 << 20)
    _, ports = _ports()
    ctx = MemberDriver(setup, factory=_Sender, **ports).context
    assert (ctx.member_id, ctx.storage, ctx.timeouts, ctx.archive_segment_length) == (
        2,
        setup.storage,
        setup.timeouts,
        1 << 20,
    )
    assert ctx.rng.random() == member_rng("s", 2, 3).random() != member_rng("s", 2, 4).random()
    default = MemberDriver(_setup(tmp_path), factory=_Sender, **ports).context
    assert default.archive_segment_length == ConsensusModuleContext.archive_segment_length


class _Inputs:
    """Wraps a simulated member's module and writes down every input the simulator gives it."""

    def __init__(self, module: ConsensusModule, inputs: list[tuple[Any, ...]]) -> None:
        self._module = module
        self._inputs = inputs

    def on_start(self, now_ns: int) -> None:
        self._inputs.append(("start", now_ns))
        self._module.on_start(now_ns)

    def on_message(self, src: int, channel: Channel, payload: bytes, now_ns: int) -> None:
        self._inputs.append(("message", now_ns, src, channel, payload))
        self._module.on_message(src, channel, payload, now_ns)

    def do_work(self, now_ns: int) -> int:
        self._inputs.append(("work", now_ns))
        return self._module.do_work(now_ns)

    def offer(self, payload: bytes, now_ns: int) -> int:
        self._inputs.append(("offer", now_ns, payload))
        return self._module.offer(payload, now_ns)

    def on_message_and_work(self, src: int, channel: Channel, payload: bytes, now_ns: int) -> int:
        self.on_message(src, channel, payload, now_ns)
        return self.do_work(now_ns)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def test_the_simulator_and_a_stepped_driver_make_the_same_sends_from_the_same_inputs(tmp_path: Path) -> None:
    """Member 0 of a simulated cluster is elected and replicates; its inputs, replayed one by one into a
    stepped member made from the same setup (seed, incarnation, timeouts), give the same sends in the
    same order. The drivers differ only in when they call the member."""
    inputs: list[tuple[Any, ...]] = []

    def factory(ctx: ConsensusModuleContext) -> Any:
        module = ConsensusModule(ctx)
        return _Inputs(module, inputs) if ctx.member_id == 0 else module

    sim = SimCluster(3, seed=12, member_factory=factory)
    sent: list[tuple[int, Channel, bytes]] = []
    sent += [(m.dst, m.channel, m.payload) for m in sim.network.in_flight() if m.src == 0]

    def on_send(msg: Delivery) -> None:
        if msg.src == 0 and not msg.duplicate:
            sent.append((msg.dst, msg.channel, msg.payload))

    sim.network.on_send.append(on_send)
    assert sim.await_leader() == 0  # seed 12 elects member 0: it replicates what is offered
    for i in range(20):
        sim.offer(b"entry-%d" % i)
        sim.run_for(3 * MS)
    sim.run_for(100 * MS)

    def context(outbox: Outbox, events: EventSink) -> ConsensusModuleContext:
        setup = MemberSetup(
            member_id=0,
            members=list(sim.cluster_members),
            cluster_dir=tmp_path,
            storage=MemoryStorage(),
            seed=12,
            incarnation=0,
            timeouts=sim.timeouts,
            service_count=0,
            events=events,
            check_invariants=True,
            intercepts=TestHooks(),
        )
        return setup.context(outbox)

    stepped = SteppedModule(context)
    replayed: list[MemberSend] = []
    for kind, now, *rest in inputs:
        if kind == "start":
            effects = stepped.start(now)
        elif kind == "message":
            effects = stepped.receive(now, Received(rest[0], rest[1], rest[2]))
        elif kind == "offer":
            stepped.module.offer(rest[0], now)
            effects = stepped.drain()
        else:
            effects = stepped.tick(now)
        replayed += effects.sends
    kinds = {type(s.message) for s in replayed}
    assert {CanvassPosition, RequestVote, NewLeadershipTerm, LogBlock} <= kinds
    assert [(s.member_id, s.channel, s.message.encode()) for s in replayed] == sent
