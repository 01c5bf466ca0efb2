"""The simulator's stand-ins for a member's service process and for client processes.

A ``SimServiceHost`` is the service process of one member: a ``ServiceContainer`` (the agent, its
snapshot store, its recovery) fed by the messages its node sends on the service channel (JoinLog,
committed LogBlocks, termination), sending acks, timers and offers back. Node <-> service traffic is
same-host IPC in Aeron, so it bypasses the simulated network (no partitions between a node and its own
service) but still goes through
queues, never direct calls, so each side only ever sees messages.

A ``SimClient`` is a client process: a ``ClusterClient`` whose ingress goes over the simulated
network (so partitions and loss affect clients too) and whose egress arrives from it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from clusterlab.core.archive.storage import Storage
from clusterlab.core.client.client import NEW_LEADER_TIMEOUT_DEFAULT_NS, ClusterClient, EgressMessage
from clusterlab.core.consensus.context import Channel, EventSink
from clusterlab.core.service.agent import AppliedEntry
from clusterlab.core.service.api import CallbackScope, ClusteredService
from clusterlab.core.service.container import ServiceContainer

CLIENT_ID_BASE = -100  # network ids of clients: -100, -101, ... (members are 0..n-1, the harness -1)


def client_network_id(client_id: int) -> int:
    return CLIENT_ID_BASE - client_id


def client_response_channel(client_id: int) -> str:
    return f"sim-client:{client_id}"


def parse_client_channel(response_channel: str) -> int | None:
    """The client id in a ``sim-client:N`` response channel, or None."""
    prefix = "sim-client:"
    if not response_channel.startswith(prefix):
        return None
    try:
        return int(response_channel[len(prefix) :])
    except ValueError:
        return None


class SimServiceHost:
    """One service process of a member in the simulator (service ``service_id``; a member runs one
    per service id, each fed every message its node sends to its services)."""

    def __init__(
        self,
        member_id: int,
        storage: Storage,
        service_factory: Callable[[], Any],
        send_egress: Callable[[str, bytes], None],
        on_applied: Callable[[AppliedEntry], None],
        log: Callable[[str], None],
        service_id: int = 0,
        callback_scope: Callable[[ClusteredService], CallbackScope] | None = None,
    ) -> None:
        """``callback_scope``: makes the agent's callback scope for the service (the tripwires), or None."""
        self.member_id = member_id
        self.service_id = service_id
        self._log = log
        self.to_node: deque[bytes] = deque()
        # The queue the agent appends to, whatever stands in for to_node (a recorder wraps it): the
        # scheduler asks it whether the service sent anything, every round.
        self.outgoing = self.to_node
        self.from_node: deque[bytes] = deque()
        # Set once the service asked to terminate or failed to start (its container closed).
        self.closed_reason: str | None = None
        # The agent's trace events (``start``, ``service_terminate``): held here until a recorder
        # attaches its sink (attach_events), then passed straight on.
        self.pending_events: list[tuple[str, int, int | None, int | None, dict[str, Any]]] = []
        self._event_sink: EventSink | None = None
        service = service_factory()
        self.container = ServiceContainer(
            service_id,
            member_id,
            service,
            storage,
            to_consensus_module=self.to_node.append,
            egress=lambda channel, _session, payload: send_egress(channel, payload),
            on_applied=on_applied,
            log=log,
            callback_scope=callback_scope(service) if callback_scope is not None else None,
            events=self._event,
        )
        self.agent = self.container.agent
        self.snapshots = self.container.snapshots
        self.errors = self.container.errors  # failures the service survived (Aeron: the container's error counter)
        if self.container.start(self.container.recovery_snapshot()) is not None:
            self.closed_reason = f"service={service_id} failed to start"  # it acked a NULL client id: its node closes

    def _event(self, kind: str, member_id: int, term: int | None, pos: int | None, detail: dict[str, Any]) -> None:
        if self._event_sink is None:
            self.pending_events.append((kind, member_id, term, pos, detail))
        else:
            self._event_sink(kind, member_id, term, pos, detail)

    def attach_events(self, sink: EventSink) -> None:
        """Send the agent's events to ``sink`` (the service process's recorder), those held so far first."""
        self._event_sink = sink
        held, self.pending_events = self.pending_events, []
        for event in held:
            sink(*event)

    def close(self) -> None:
        """The service process stops gracefully (its member stopped, its container closed): the agent
        closes, telling an active service ``on_terminate`` (Aeron ``ClusteredServiceAgent.onClose``)."""
        self.container.close()

    def pump(self) -> int:
        """Apply everything the node sent; returns how many messages were handled."""
        n = 0
        on_message = self.container.on_message
        while self.from_node and self.closed_reason is None:
            stopped = on_message(self.from_node.popleft())
            if stopped is not None:  # as the runtime's service process: it stops
                self.closed_reason = stopped
                self.from_node.clear()
            n += 1
        return n


class SimClient:
    """A client process in the simulator; see the module docstring."""

    def __init__(
        self,
        client_id: int,
        member_count: int,
        send: Callable[[int, int, Channel, bytes], bool | None],
        credentials: bytes = b"",
        keepalive_interval_ns: int | None = 1_000_000_000,
        first_member: int = 0,
        new_leader_timeout_ns: int = NEW_LEADER_TIMEOUT_DEFAULT_NS,
    ) -> None:
        """``send`` returns False when the member has no process to take the message (the client's
        view of a publication that is not connected: see ClusterClient's ``new_leader_timeout_ns``)."""
        self.client_id = client_id
        self.network_id = client_network_id(client_id)
        self.received: list[EgressMessage] = []
        self.errors: list[Exception] = []
        self.silent = False  # hung without closing (chaos): no keepalives, its session must time out
        # False: replies stay in the ClusterClient for the test to take (poll, controlled_poll).
        self.collect = True
        self.client = ClusterClient(
            client_id,
            client_response_channel(client_id),
            # The first member is the one it connects to first (a follower answers REDIRECT).
            {
                m % member_count: f"sim-member:{m % member_count}"
                for m in range(first_member, first_member + member_count)
            },
            lambda member_id, payload: send(self.network_id, member_id, Channel.INGRESS, payload),
            credentials=credentials,
            keepalive_interval_ns=keepalive_interval_ns,
            new_leader_timeout_ns=new_leader_timeout_ns,
        )

    def on_egress(self, payload: bytes, now_ns: int) -> None:
        try:
            self.client.on_egress(payload, now_ns)
        except Exception as e:  # a refused connect: kept for the test to inspect
            self.errors.append(e)
        if self.collect:
            self.received.extend(self.client.poll())

    def do_work(self, now_ns: int) -> None:
        if self.silent:
            return
        try:
            self.client.do_work(now_ns)
        except Exception as e:  # a connect timeout: kept for the test to inspect
            self.errors.append(e)

    def next_deadline_ns(self) -> int | None:
        return None if self.silent else self.client.next_deadline_ns()
