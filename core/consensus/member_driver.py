"""The member driver: one member's ConsensusModule built from its setup, fed its inputs, and its effects
applied through three ports, the same way for the ZeroMQ node, the simulator and a stepped test.

A member's step makes three kinds of traffic (beside its events and its storage writes): messages to
peers (consensus, log, catchup and archive channels), messages to its own clustered services, and
replies on clients' egress. The module hands each to its :class:`~clusterlab.core.consensus.context.Outbox`;
the driver is that outbox and routes each to a port:

- ``peers(member_id, channel, payload)``: the ZeroMQ node's links (behind its chaos gate and its
  recorder), the simulator's network (which holds the partitions, loss and latency), or a test's
  collector;
- ``services(payload)``: the node's link to its service processes (or the in-process channel), the
  simulated service hosts' queues, or a collector;
- ``egress(response_channel, payload)``: the node's egress sockets, the network to a simulated client,
  or a collector.

Events go to the setup's ``events`` sink and storage changes are made on the setup's ``storage``; the
disk faults a test injects and the :class:`~clusterlab.core.archive.storage.ObservedStorage` a stepped
test reads wrap that storage. So the recorder, the gate, the network and the disk attach at one seam,
and what differs between the drivers is only when they call the member: the node when a socket is
readable or its deadline passes, the simulator at virtual instants, a stepped test one input at a time.

:class:`MemberSetup` is what a driver knows about the member before it starts (its id and peers, its
storage, the seed, its incarnation, its timeouts and the rules a test may plant) and makes the module's
context from it, so a real member and a simulated one with the same seed and incarnation draw the same
random numbers.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterlab.core.archive.storage import Storage
from clusterlab.core.consensus.context import (
    NULL_VALUE,
    Channel,
    ClusterMember,
    ConsensusModuleContext,
    EventSink,
    Outbox,
    Timeouts,
    null_event_sink,
)
from clusterlab.core.consensus.intercepts import NO_INTERCEPTS, Intercepts
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.rules import PROTOCOL_RULES, ConsensusRules

PeerPort = Callable[[int, Channel, bytes], None]
"""Where messages to peers go: ``(member_id, channel, payload)``."""
ServicePort = Callable[[bytes], None]
"""Where messages to the member's own clustered services go (every service gets each one)."""
EgressPort = Callable[[str, bytes], None]
"""Where replies to clients go: ``(response_channel, payload)``."""


MemberFactory = Callable[[ConsensusModuleContext], Any]
"""Makes the module from its context: the ConsensusModule unless a test brings a stand-in."""


def member_rng(seed: int | str, member_id: int, incarnation: int) -> random.Random:
    """The module's random source: distinct per member and per incarnation, a pure function of the seed."""
    return random.Random(f"{seed}:{member_id}:{incarnation}")


@dataclass
class MemberSetup:
    """What a driver knows about a member before it starts; :meth:`context` makes the module's context.

    ``storage`` holds the archive, recording log and node state (a FileStorage in a member process,
    MemoryStorage in the simulator, either wrapped by a test's faults). ``events`` receives the
    module's events; ``log`` its log lines. ``rules`` and ``intercepts`` are the protocol's unless a
    test plants a bug or holds messages back (clusterlab.testing)."""

    member_id: int
    members: list[ClusterMember]
    cluster_dir: Path
    storage: Storage
    seed: int | str
    incarnation: int
    timeouts: Timeouts
    appointed_leader_id: int = NULL_VALUE
    service_count: int = 1
    events: EventSink = null_event_sink
    log: Callable[[str], None] = lambda line: None
    check_invariants: bool = False
    archive_segment_length: int | None = None  # None: the context's default
    authenticator: Any = None
    rules: ConsensusRules = PROTOCOL_RULES
    intercepts: Intercepts = NO_INTERCEPTS

    def context(self, outbox: Outbox) -> ConsensusModuleContext:
        """The module's context, sending through ``outbox``."""
        ctx = ConsensusModuleContext(
            member_id=self.member_id,
            members=self.members,
            cluster_dir=self.cluster_dir,
            storage=self.storage,
            outbox=outbox,
            rng=member_rng(self.seed, self.member_id, self.incarnation),
            timeouts=self.timeouts,
            appointed_leader_id=self.appointed_leader_id,
            service_count=self.service_count,
            events=self.events,
            log=self.log,
            check_invariants=self.check_invariants,
            authenticator=self.authenticator,
            rules=self.rules,
            intercepts=self.intercepts,
        )
        if self.archive_segment_length is not None:
            ctx.archive_segment_length = self.archive_segment_length
        return ctx


def _drop_peer(member_id: int, channel: Channel, payload: bytes) -> None:
    pass


def _drop_service(payload: bytes) -> None:
    pass


def _drop_egress(response_channel: str, payload: bytes) -> None:
    pass


class MemberDriver:
    """One member's module and its ports; see the module docstring.

    The driver is the module's outbox. ``deliver`` is "one message, then a duty cycle at the same
    instant" as one input (the module checks its invariants once, after the pair), for drivers that
    run a duty cycle after each message (the simulator); the ZeroMQ node takes a batch of messages
    with ``on_message`` and runs one duty cycle after it. :meth:`disconnect` stops a dead
    incarnation's driver from sending anything, even through an object someone still holds."""

    def __init__(
        self,
        context: ConsensusModuleContext | MemberSetup | Callable[[Outbox], ConsensusModuleContext],
        *,
        peers: PeerPort,
        services: ServicePort,
        egress: EgressPort,
        factory: MemberFactory | None = None,
    ) -> None:
        self._peers = peers
        self._services = services
        self._egress = egress
        if isinstance(context, MemberSetup):
            ctx = context.context(self)
        elif isinstance(context, ConsensusModuleContext):
            ctx = context
            ctx.outbox = self
        else:
            ctx = context(self)
        self.member_id = ctx.member_id
        self.context = ctx
        self.module: Any = (factory or ConsensusModule)(ctx)
        module = self.module
        self.on_start: Callable[[int], None] = module.on_start
        self.on_message: Callable[[int, Channel, bytes, int], None] = module.on_message
        self.do_work: Callable[[int], int] = module.do_work
        self.next_deadline_ns: Callable[[], int] = module.next_deadline_ns
        self.deliver: Callable[[int, Channel, bytes, int], int] = getattr(
            module, "on_message_and_work", self._message_and_work
        )

    def _message_and_work(self, src: int, channel: Channel, payload: bytes, now_ns: int) -> int:
        self.module.on_message(src, channel, payload, now_ns)
        work: int = self.module.do_work(now_ns)
        return work

    # ------------------------------------------------------------------ Outbox (called by the module)
    def send(self, member_id: int, channel: Channel, payload: bytes) -> None:
        """A message to a peer, or on the service channel to this member's own services."""
        if channel is Channel.SERVICE:
            if member_id == self.member_id:
                self._services(payload)
            return
        self._peers(member_id, channel, payload)

    def send_egress(self, response_channel: str, payload: bytes) -> None:
        """A message to a client's egress."""
        self._egress(response_channel, payload)

    # ------------------------------------------------------------------ life cycle
    def disconnect(self) -> None:
        """The member's process is gone: nothing it still holds can send."""
        self._peers = _drop_peer
        self._services = _drop_service
        self._egress = _drop_egress

    @property
    def connected(self) -> bool:
        """False once :meth:`disconnect` ran."""
        return self._peers is not _drop_peer
