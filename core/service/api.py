"""The clustered-service API (Aeron ``ClusteredService``, ``Cluster`` and ``ClientSession``), in
Python spelling.

A service is a deterministic state machine fed by the replicated log. Every member runs the same
service over the same log, so everything a service does must depend only on what the callbacks give
it: no clocks (use ``timestamp`` / ``Cluster.time``), no unseeded randomness, no IO other than the
``Cluster`` handle and ``ClientSession.offer``. Only the leader's service actually sends egress; on the
other members ``offer`` reports success without sending (Aeron's MOCKED_OFFER).
"""

from __future__ import annotations

import hashlib
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from clusterlab.core.codec import CloseReason, ClusterTimeUnit
from clusterlab.core.consensus.context import Role
from clusterlab.core.service.snapshot import SnapshotImage, SnapshotWriter

__all__ = [
    "UNDIGESTED",
    "CallbackScope",
    "ClientSession",
    "Cluster",
    "ClusterError",
    "ClusterTerminationException",
    "ClusteredService",
    "Role",
    "SnapshotImage",
    "SnapshotWriter",
    "digest_due",
    "has_own_digest",
    "snapshot_digest",
]

UNDIGESTED = bytes(16)  # the digest of a service without its own between its snapshot-derived digests


class ClusterError(Exception):
    """The service misused its ``Cluster`` handle (Aeron ``ClusterException``): an unknown session,
    or a send from a lifecycle callback (on_start, on_role_change, on_terminate)."""


class ClusterTerminationException(Exception):
    """Raise from a service callback to stop the service, and with it the member (Aeron's
    ``ClusterTerminationException``, as ClusterTest's TestService throws on its TERMINATE message): the
    agent calls ``on_terminate`` and applies nothing more; the consensus module then closes with a
    counted error ("service closed unexpectedly") and the member terminates, as Aeron's does when the
    service's Aeron client closes. The entry being applied does not count as applied."""


class ClientSession:
    """A client's session as a service sees it (Aeron ``ClientSession``).

    Created by the agent on SessionOpenEvent (or from a snapshot); ``offer`` sends egress to the client
    when this member's service is the leader's."""

    __slots__ = ("_offer", "encoded_principal", "id", "is_closing", "response_channel", "response_stream_id")

    def __init__(
        self,
        cluster_session_id: int,
        response_stream_id: int,
        response_channel: str,
        encoded_principal: bytes,
        offer: Callable[[ClientSession, bytes], bool],
    ) -> None:
        self.id = cluster_session_id
        self.response_stream_id = response_stream_id
        self.response_channel = response_channel
        self.encoded_principal = encoded_principal
        self.is_closing = False
        self._offer = offer

    def offer(self, payload: bytes) -> bool:
        """Send ``payload`` to the client on its egress. True on the leader when handed to egress, and
        on other members without sending anything (only the leader's service has egress)."""
        return self._offer(self, bytes(payload))

    def __repr__(self) -> str:
        return (
            f"ClientSession(id={self.id} response_channel={self.response_channel!r} "
            f"principal={len(self.encoded_principal)}B closing={self.is_closing})"
        )


@runtime_checkable
class Cluster(Protocol):
    """What a service may ask of the cluster (Aeron ``Cluster``); handed to ``on_start``."""

    @property
    def member_id(self) -> int:
        """This member's id."""
        ...

    @property
    def service_id(self) -> int:
        """This service's id within the member (0 unless several services run)."""
        ...

    @property
    def role(self) -> Role:
        """This member's role as the service last learned it (JoinLog, log end)."""
        ...

    @property
    def time(self) -> int:
        """Cluster time of the log entry being processed (``time_unit`` units, MILLIS by default)."""
        ...

    @property
    def time_unit(self) -> ClusterTimeUnit:
        """Unit of cluster time."""
        ...

    @property
    def log_position(self) -> int:
        """Log position at the end of the entry being processed."""
        ...

    def schedule_timer(self, correlation_id: int, deadline: int) -> bool:
        """Schedule (or reschedule) a timer firing at cluster time ``deadline``; it arrives as
        ``on_timer_event`` at the same log position on every member."""
        ...

    def cancel_timer(self, correlation_id: int) -> bool:
        """Cancel a timer."""
        ...

    def offer(self, payload: bytes) -> bool:
        """Append a service-originated message to the log; it comes back through
        ``on_session_message`` with ``session`` None."""
        ...

    def close_client_session(self, cluster_session_id: int) -> bool:
        """Ask the cluster to close a session; ClusterError if it is unknown."""
        ...

    def get_client_session(self, cluster_session_id: int) -> ClientSession | None:
        """An open session by id."""
        ...

    def client_sessions(self) -> list[ClientSession]:
        """The open sessions, by ascending id."""
        ...


class CallbackScope(Protocol):
    """An observer of the user's callbacks, given to the agent by a test harness (``None`` in
    production, where the agent calls nothing extra). The agent calls ``enter`` before and ``exit``
    after each service callback that applies an entry, takes a snapshot or starts, stops or changes
    role (``callback`` is its name: ``on_session_message``, ...; ``log_position`` where the agent is),
    and ``role_read`` whenever the service reads ``Cluster.role``. What it does with that is its own
    affair (clusterlab.harness.tripwire); it must not change what the agent or the service does."""

    def enter(self, callback: str, log_position: int) -> None: ...

    def exit(self) -> None: ...

    def role_read(self) -> None: ...


class ClusteredService(ABC):
    """A replicated state machine (Aeron ``ClusteredService``). Callbacks run in log order; each
    entry callback sees ``Cluster.log_position`` = the entry's end position and ``timestamp`` = its
    cluster time."""

    @abstractmethod
    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        """The service starts, from ``snapshot`` if there is one; no sending from here."""

    @abstractmethod
    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        """A client session opened."""

    @abstractmethod
    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        """A client session closed."""

    @abstractmethod
    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        """A message from a client session, or (``session`` None) one a service offered to the log."""

    @abstractmethod
    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        """A timer this service scheduled fired."""

    @abstractmethod
    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        """Write the whole application state as records; ``on_start`` reads them back."""

    @abstractmethod
    def on_role_change(self, new_role: Role) -> None:
        """This member's role changed; no sending from here."""

    @abstractmethod
    def on_terminate(self, cluster: Cluster) -> None:
        """The service is stopping: the cluster terminates (SHUTDOWN, ABORT), the service raised
        ``ClusterTerminationException``, or its container closes without a crash (its member stopped
        gracefully, SIGTERM, its node gone; Aeron ``ClusteredServiceAgent.onClose``). Called at most
        once per start, and never for a service whose ``on_start`` failed or whose process was killed;
        what it raises is counted and swallowed. No sending from here."""

    def on_new_leadership_term_event(  # noqa: B027 - optional hook, a no-op by default as in Aeron
        self,
        leadership_term_id: int,
        log_position: int,
        timestamp: int,
        term_base_log_position: int,
        leader_member_id: int,
        log_session_id: int,
        time_unit: ClusterTimeUnit,
        app_version: int,
    ) -> None:
        """A new leadership term starts in the log (its NewLeadershipTermEvent). Optional, as in Aeron."""

    digest_interval: int = 1
    """For a service without its own ``state_digest``: about one log entry in ``digest_interval`` gets
    the digest of the service's snapshot records (:func:`snapshot_digest`, a whole snapshot taken in
    memory: its cost grows with the state); the others record :data:`UNDIGESTED`. Which entries is a
    function of the log position alone (:func:`digest_due`), so every member, also one restored from
    a snapshot, digests at the same positions and the agreement check compares like with like."""

    def state_digest(self) -> bytes:
        """16 bytes identifying the whole application state: equal states give equal digests on every
        member. Override it with an incremental one (its cost then does not grow with the state);
        without one, the digest is derived from the snapshot records (:attr:`digest_interval`)."""
        return snapshot_digest(self)


def snapshot_digest(service: ClusteredService) -> bytes:
    """The 16-byte BLAKE2b of the records ``service.on_take_snapshot`` writes now (each length-prefixed)."""
    writer = SnapshotWriter()
    service.on_take_snapshot(writer)
    h = hashlib.blake2b(digest_size=16)
    for record in writer.records:
        h.update(len(record).to_bytes(4, "little"))
        h.update(record)
    return h.digest()


def has_own_digest(service: ClusteredService) -> bool:
    """True when ``service``'s class overrides ``state_digest``."""
    return type(service).state_digest is not ClusteredService.state_digest


def digest_due(log_position: int, interval: int) -> bool:
    """Whether the entry ending at ``log_position`` gets a snapshot-derived digest: every entry for
    ``interval`` <= 1, else about one in ``interval``, chosen by a hash of the position."""
    return interval <= 1 or zlib.crc32(log_position.to_bytes(8, "little", signed=True)) % interval == 0
