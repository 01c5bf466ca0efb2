"""The consensus module's effects as one value per step, beside the callbacks the drivers use.

A :class:`ConsensusModule` sends through an :class:`Outbox` and reports through an
:data:`EventSink` as it runs: the ZeroMQ node and the simulator pass objects that put bytes on the
wire at once. :class:`SteppedModule` passes a collecting pair instead and hands back, for each
input, an :class:`Effects` value: what went to members, what went to clients' egress, the events,
and when the module next wants a duty cycle (etcd-io/raft's ``Ready``, h11's returned bytes). A
caller that drives a member this way reads effects as values and decides itself when they leave;
the module is the same object either way, so the existing drivers pay nothing for this seam.

Storage is not an effect here: the archive appends, recording-log entries and node-state syncs a
step makes are done inside the step, on the context's storage, before the step returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import decode
from clusterlab.core.consensus.context import Channel, ConsensusModuleContext, EventSink, Outbox
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
    """Everything one step of a member did that others can see, in the order it did it per kind.

    ``next_deadline_ns`` is the absolute time the module next needs a duty cycle (its
    ``next_deadline_ns()`` after the step); ``work_count`` is the duty cycle's work count (0 when
    the step ran none), for a driver's idle strategy."""

    sends: tuple[MemberSend, ...]
    egress: tuple[EgressSend, ...]
    events: tuple[Event, ...]
    next_deadline_ns: int
    work_count: int = 0

    @property
    def is_empty(self) -> bool:
        """Nothing sent and nothing reported."""
        return not self.sends and not self.egress and not self.events


class EffectsCollector:
    """An :class:`Outbox` and, through :meth:`event`, an :data:`EventSink` that keep what they are
    given until :meth:`take` returns it as an :class:`Effects`.

    Sends are decoded so effects are messages, not bytes. ``observe_send``, when given, sees each
    send the moment the module makes it: storage writes are not effects, so this is how a test sees
    what was on disk when a message left (a vote must be durable before it is sent)."""

    def __init__(self, observe_send: Callable[[MemberSend], None] | None = None) -> None:
        self._observe_send = observe_send
        self._sends: list[MemberSend] = []
        self._egress: list[EgressSend] = []
        self._events: list[Event] = []

    def send(self, member_id: int, channel: Channel, payload: bytes) -> None:
        sent = MemberSend(member_id, channel, decode(payload))
        self._sends.append(sent)
        if self._observe_send is not None:
            self._observe_send(sent)

    def send_egress(self, response_channel: str, payload: bytes) -> None:
        self._egress.append(EgressSend(response_channel, decode(payload)))

    def event(self, kind: str, member_id: int, term: int | None, pos: int | None, detail: dict[str, Any]) -> None:
        self._events.append(Event(kind, member_id, term, pos, detail))

    def take(self, next_deadline_ns: int, work_count: int = 0) -> Effects:
        """Everything collected since the last take, emptying the collector."""
        effects = Effects(tuple(self._sends), tuple(self._egress), tuple(self._events), next_deadline_ns, work_count)
        self._sends.clear()
        self._egress.clear()
        self._events.clear()
        return effects


class SteppedModule:
    """A sans-IO member driven step by step: each call gives one input and returns its :class:`Effects`.

    ``context_for`` builds the module's context around the collecting outbox and event sink it is
    given. ``module`` is the ConsensusModule itself, for reading state; effects of calls made on it
    directly (``offer``, ``enter_election``, ...) are returned by the next step or by :meth:`drain`.
    Storage appends and syncs happen inside each step (see the module docstring)."""

    def __init__(
        self,
        context_for: Callable[[Outbox, EventSink], ConsensusModuleContext],
        *,
        observe_send: Callable[[MemberSend], None] | None = None,
    ) -> None:
        self._collector = EffectsCollector(observe_send)
        self.module = ConsensusModule(context_for(self._collector, self._collector.event))

    def _take(self, work_count: int = 0) -> Effects:
        return self._collector.take(self.module.next_deadline_ns(), work_count)

    def start(self, now_ns: int) -> Effects:
        """Recover from storage and begin the node-startup election."""
        self.module.on_start(now_ns)
        return self._take()

    def receive(self, now_ns: int, received: Received) -> Effects:
        """Take one message without a duty cycle (as the ZeroMQ node receives: it runs them apart)."""
        self.module.on_message(received.member_id, received.channel, received.payload, now_ns)
        return self._take()

    def receive_ingress(self, now_ns: int, payloads: list[bytes]) -> Effects:
        """Take one client's batch of ingress messages, in order, without a duty cycle."""
        self.module.on_ingress_batch(payloads, now_ns)
        return self._take()

    def tick(self, now_ns: int) -> Effects:
        """One duty cycle at ``now_ns`` with no input."""
        return self._take(self.module.do_work(now_ns))

    def step(self, now_ns: int, received: Received | None = None) -> Effects:
        """One input at ``now_ns``: a message then a duty cycle at the same instant (as the simulator
        delivers), or a duty cycle alone."""
        if received is None:
            return self.tick(now_ns)
        work = self.module.on_message_and_work(received.member_id, received.channel, received.payload, now_ns)
        return self._take(work)

    def close(self) -> Effects:
        """Close cleanly: a leader tells its followers the log ended; files are flushed."""
        self.module.close()
        return self._take()

    def drain(self) -> Effects:
        """The effects of calls made on ``module`` directly since the last step, and its deadline now."""
        return self._take()
