"""The simulator's stand-ins for a member's service process and for client processes.

A ``SimServiceHost`` is the service process of one member: a ``ClusteredServiceAgent`` fed by the
messages its node sends on the service channel (JoinLog, committed LogBlocks, termination), sending
acks, timers and offers back. Node <-> service traffic is same-host IPC in Aeron, so it bypasses the
simulated network (no partitions between a node and its own service) but still goes through
queues, never direct calls, so each side only ever sees messages.

A ``SimClient`` is a client process: a ``ClusterClient`` whose ingress goes over the simulated
network (so partitions and loss affect clients too) and whose egress arrives from it.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from clusterlab.core.archive.catalogue import Catalogue
from clusterlab.core.archive.layout import service_snapshot_store_dirs
from clusterlab.core.archive.snapshots import SnapshotStore
from clusterlab.core.archive.storage import Storage
from clusterlab.core.client.client import NEW_LEADER_TIMEOUT_DEFAULT_NS, ClusterClient, EgressMessage
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.service import JoinLog
from clusterlab.core.codec.transport import LogBlock
from clusterlab.core.consensus.context import Channel, EventSink
from clusterlab.core.consensus.module_state import MAX_LONG
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.service.agent import AppliedEntry, ClusteredServiceAgent, ServiceTerminated, SnapshotError
from clusterlab.core.service.api import CallbackScope, ClusteredService

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
        self.errors: list[str] = []  # failures the agent survived (Aeron: the container's error counter)
        self._replay_max = -1
        # Set once the service asked to terminate or failed to start (its container closed).
        self.closed_reason: str | None = None
        # The agent's trace events (``start``, ``service_terminate``): held here until a recorder
        # attaches its sink (attach_events), then passed straight on.
        self.pending_events: list[tuple[str, int, int | None, int | None, dict[str, Any]]] = []
        self._event_sink: EventSink | None = None
        # Each service keeps its snapshots in its own store: the node's archive allocates its own
        # recording ids, and two processes must not allocate from one catalogue (Aeron's archive
        # process serialises that; here the recording log's service_id says which store to read).
        catalogue_dir, snapshot_dir = service_snapshot_store_dirs(service_id)
        self.snapshots = SnapshotStore(storage, Catalogue.open(storage, catalogue_dir), snapshot_dir)
        service = service_factory()
        self.agent = ClusteredServiceAgent(
            service_id,
            member_id,
            service,
            to_consensus_module=self.to_node.append,
            egress=lambda channel, _session, payload: send_egress(channel, payload),
            snapshot_store=self.snapshots,
            on_applied=on_applied,
            log=log,
            callback_scope=callback_scope(service) if callback_scope is not None else None,
            events=self._event,
        )
        # Aeron's service reads the RecoveryState counter; ours reads the same recovery plan from the
        # recording log the node just reconciled on start.
        with RecordingLog.open(storage) as recording_log:
            entry = recording_log.latest_snapshot(service_id)
        recording_id = entry.recording_id if entry is not None else None
        try:
            self.agent.start(recording_id)
        except Exception as e:  # acked with a NULL client id: its node closes (as the runtime's service)
            self.errors.append(f"failed to start: {type(e).__name__}: {e}")
            self._log(f"failed to start service={service_id} snapshotRecordingId={recording_id}: {e}")
            self.closed_reason = f"service={service_id} failed to start"

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
        self.agent.close()

    def pump(self) -> int:
        """Apply everything the node sent; returns how many messages were handled."""
        n = 0
        while self.from_node and self.closed_reason is None:
            payload = self.from_node.popleft()
            # The agent decodes each message itself; here only a JoinLog is (rare), and a LogBlock's end
            # position is read from its bytes: decoding every message twice was a few % of a run.
            template_id = payload[2] | payload[3] << 8 if len(payload) >= 4 else -1
            is_replay = False
            if template_id == _JOIN_LOG:
                msg = decode(payload)
                if isinstance(msg, JoinLog):
                    self._replay_max = msg.max_log_position if msg.max_log_position != MAX_LONG else -1
            elif template_id == _LOG_BLOCK:
                end = log_block_end(payload)
                is_replay = end is not None and end <= self._replay_max
            try:
                self.agent.on_service_message(payload, is_replay=is_replay)
            except SnapshotError as e:  # as the runtime's service: logged, the agent stays usable (Aeron)
                self.errors.append(f"snapshot failed: {e}")
                self._log(f"service {self.service_id}: snapshot failed: {e}")
            except ServiceTerminated as e:  # as the runtime's service process: it stops
                self._log(f"service {self.service_id} requested termination: {e}")
                self.closed_reason = "the service requested termination"
                self.from_node.clear()
            n += 1
        return n


_JOIN_LOG = JoinLog.TEMPLATE_ID
_LOG_BLOCK = LogBlock.TEMPLATE_ID
_I64 = struct.Struct("<q")
_U32 = struct.Struct("<I")
_HEADER_LENGTH = 8
# Where LogBlock's start_position sits: after the message header and the fixed fields before it.
_FIELDS = [name for name, _fmt in LogBlock._FIXED]
_START_AT = _HEADER_LENGTH + sum(
    struct.calcsize("<" + fmt) for _name, fmt in LogBlock._FIXED[: _FIELDS.index("start_position")]
)


def log_block_end(payload: bytes) -> int | None:
    """A LogBlock's end position (start + entries) read from its bytes, without decoding it; None if
    the payload is too short to hold one. Entries are its only variable field, after the sender's block."""
    n = len(payload)
    var_at = _HEADER_LENGTH + (payload[0] | payload[1] << 8)
    if n < _START_AT + 8 or var_at + 4 > n:
        return None
    return int(_I64.unpack_from(payload, _START_AT)[0] + _U32.unpack_from(payload, var_at)[0])


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
