"""The consensus module's effects as one value per step.

A member's driver (:class:`~clusterlab.core.consensus.member_driver.MemberDriver`) routes what the
module sends to three ports, passes its events to a sink and lets it keep its durable state (archive,
recording log, node state) on the context's storage: the ZeroMQ node and the simulator give it ports
that put bytes on the wire at once. :class:`SteppedModule` gives the same driver collecting ports and
an :class:`ObservedStorage` around the context's storage instead, and hands back, for each input, an
:class:`Effects` value: what went to members, what went to clients' egress, the events, what changed
on storage, all of it in the order the step did it, and when the module next wants a duty cycle
(etcd-io/raft's ``Ready``, h11's returned bytes). A caller that drives a member this way reads effects
as values: a vote's node-state ``replace`` comes before the ``Vote`` it allows, an append's ``write``
before the ``AppendPosition`` that reports it. The module and the driver are the same objects either
way, so the other drivers pay nothing for this seam.

A storage change is reported once it is made (write-through): the step writes, the storage it was
given decides how (a file, memory, an injected fault), and the effect says what was written. A
failed write raises in the step as on a real disk and is not reported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clusterlab.core.archive.storage import ObservedStorage, StorageChange
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import decode
from clusterlab.core.consensus.context import Channel, ConsensusModuleContext, EventSink, Outbox
from clusterlab.core.consensus.member_driver import MemberDriver
from clusterlab.core.consensus.module import ConsensusModule


@dataclass(frozen=True, slots=True)
class MemberSend:
    """One message to a member's channel: consensus, log, catchup and archive traffic to a peer,
    service traffic to this member's own clustered services (``member_id`` is then its own)."""

    member_id: int
    channel: Channel
    message: Message


@dataclass(frozen=True, slots=True)
class EgressSend:
    """One message to a client's egress, addressed by the session's response channel (Aeron's
    ``responseChannel``): SessionEvent, NewLeaderEvent, admin responses."""

    response_channel: str
    message: Message


@dataclass(frozen=True, slots=True)
class Event:
    """One event as the :data:`EventSink` receives it (the trace's ``events`` columns the module
    fills; the recorder adds the run, the wall clock and the source)."""

    kind: str
    member_id: int
    leadership_term_id: int | None
    log_position: int | None
    detail: dict[str, Any]


Effect = MemberSend | EgressSend | Event | StorageChange
"""One effect of a step, of any kind (:attr:`Effects.ordered` holds them in the order made)."""


@dataclass(frozen=True, slots=True)
class Received:
    """One message arriving from ``member_id`` (``NULL_VALUE`` for a client's ingress) on ``channel``,
    as the bytes the transport delivered: malformed bytes are an input too."""

    member_id: int
    channel: Channel
    payload: bytes

    @classmethod
    def of(cls, member_id: int, message: Message, channel: Channel = Channel.CONSENSUS) -> Received:
        """``message`` encoded, as ``member_id`` would send it."""
        return cls(member_id, channel, message.encode())


@dataclass(frozen=True, slots=True)
class Effects:
    """Everything one step of a member did that others can see: per kind in ``sends``, ``egress``,
    ``events`` and ``storage`` (each in the order made), and all of them in one sequence in
    ``ordered`` (what came before what: a change on storage before the message it makes true).

    ``next_deadline_ns`` is the absolute time the module next needs a duty cycle (its
    ``next_deadline_ns()`` after the step); ``work_count`` is the duty cycle's work count (0 when
    the step ran none), for a driver's idle strategy."""

    sends: tuple[MemberSend, ...]
    egress: tuple[EgressSend, ...]
    events: tuple[Event, ...]
    next_deadline_ns: int
    work_count: int = 0
    storage: tuple[StorageChange, ...] = ()
    ordered: tuple[Effect, ...] = ()

    @property
    def is_empty(self) -> bool:
        """Nothing sent, nothing reported, nothing changed on storage."""
        return not self.ordered


class EffectsCollector:
    """An :class:`Outbox`, through :meth:`event` an :data:`EventSink` and through :meth:`changed` an
    :class:`ObservedStorage` observer, keeping what they are given, in order, until :meth:`take`
    returns it as an :class:`Effects`.

    Sends are decoded so effects are messages, not bytes. ``observe_send``, when given, sees each
    send the moment the module makes it (a test's hook that reads the world as it was then)."""

    def __init__(self, observe_send: Callable[[MemberSend], None] | None = None) -> None:
        self._observe_send = observe_send
        self._ordered: list[Effect] = []

    def send(self, member_id: int, channel: Channel, payload: bytes) -> None:
        sent = MemberSend(member_id, channel, decode(payload))
        self._ordered.append(sent)
        if self._observe_send is not None:
            self._observe_send(sent)

    def send_egress(self, response_channel: str, payload: bytes) -> None:
        self._ordered.append(EgressSend(response_channel, decode(payload)))

    def event(self, kind: str, member_id: int, term: int | None, pos: int | None, detail: dict[str, Any]) -> None:
        self._ordered.append(Event(kind, member_id, term, pos, detail))

    def changed(self, change: StorageChange) -> None:
        self._ordered.append(change)

    def take(self, next_deadline_ns: int, work_count: int = 0) -> Effects:
        """Everything collected since the last take, emptying the collector."""
        ordered = tuple(self._ordered)
        self._ordered.clear()
        return Effects(
            sends=tuple(e for e in ordered if isinstance(e, MemberSend)),
            egress=tuple(e for e in ordered if isinstance(e, EgressSend)),
            events=tuple(e for e in ordered if isinstance(e, Event)),
            next_deadline_ns=next_deadline_ns,
            work_count=work_count,
            storage=tuple(e for e in ordered if isinstance(e, StorageChange)),
            ordered=ordered,
        )


class SteppedModule:
    """A sans-IO member driven step by step: each call gives one input and returns its :class:`Effects`.

    ``driver`` is the member's :class:`MemberDriver`, its ports collecting. ``context_for`` builds
    the module's context around the collecting outbox and event sink it is given; its storage is
    wrapped in an :class:`ObservedStorage`, so every change a step makes on it is an effect of that
    step (the first step's effects include what the module's construction wrote: directories, an
    empty recording log). ``module`` is the ConsensusModule itself, for reading state; effects of
    calls made on it directly (``offer``, ``enter_election``, ...) are returned by the next step or
    by :meth:`drain`."""

    def __init__(
        self,
        context_for: Callable[[Outbox, EventSink], ConsensusModuleContext],
        *,
        observe_send: Callable[[MemberSend], None] | None = None,
    ) -> None:
        collector = self._collector = EffectsCollector(observe_send)
        context = context_for(collector, collector.event)
        if context.storage is not None:
            context.storage = ObservedStorage(context.storage, collector.changed)
        to_services = functools.partial(collector.send, context.member_id, Channel.SERVICE)
        self.driver = MemberDriver(context, peers=collector.send, services=to_services, egress=collector.send_egress)
        self.module: ConsensusModule = self.driver.module

    def _take(self, work_count: int = 0) -> Effects:
        return self._collector.take(self.module.next_deadline_ns(), work_count)

    def start(self, now_ns: int) -> Effects:
        """Recover from storage and begin the node-startup election."""
        self.driver.on_start(now_ns)
        return self._take()

    def receive(self, now_ns: int, received: Received) -> Effects:
        """Take one message without a duty cycle (as the ZeroMQ node receives: it runs them apart)."""
        self.driver.on_message(received.member_id, received.channel, received.payload, now_ns)
        return self._take()

    def receive_ingress(self, now_ns: int, payloads: list[bytes]) -> Effects:
        """Take one client's batch of ingress messages, in order, without a duty cycle."""
        self.module.on_ingress_batch(payloads, now_ns)
        return self._take()

    def tick(self, now_ns: int) -> Effects:
        """One duty cycle at ``now_ns`` with no input."""
        return self._take(self.driver.do_work(now_ns))

    def step(self, now_ns: int, received: Received | None = None) -> Effects:
        """One input at ``now_ns``: a message then a duty cycle at the same instant (as the simulator
        delivers), or a duty cycle alone."""
        if received is None:
            return self.tick(now_ns)
        work = self.driver.deliver(received.member_id, received.channel, received.payload, now_ns)
        return self._take(work)

    def close(self) -> Effects:
        """Close cleanly: a leader tells its followers the log ended; files are flushed."""
        self.module.close()
        return self._take()

    def drain(self) -> Effects:
        """The effects of calls made on ``module`` directly since the last step, and its deadline now."""
        return self._take()
