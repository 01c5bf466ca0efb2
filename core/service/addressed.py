"""How several clustered services of a member share one log: the address convention.

As in Aeron, every service of a member (service ids 0..N-1) applies every log entry: session opens
and closes, timers, leadership terms, and every session message. Aeron leaves it to each service to
filter the messages it cares about. A service that sees everything (Aeron's TestService) simply does
not opt in; the sample services (kv, counter, echo: ``SHARES_LOG_BY_ADDRESS = True``) filter by an
address prefix on the payload, when a member runs more than one service:

* ``@<service id>:<command>`` is addressed to that service: it applies ``<command>`` (the prefix
  removed) and replies to the session; every other service ignores the message;
* a payload without the prefix is addressed to service 0 (so clients of a single-service cluster,
  and the chaos workloads, run unchanged on service 0 of a multi-service cluster).

A service that ignores a message still applies the entry: it records its ``applied`` row (with its
own, unchanged state digest) and acknowledges the position, so each service's log position advances
over the whole log. A message a service offers to the log (``Cluster.offer``) is addressed back to
that same service. With one service per member nothing is wrapped: payloads reach it as sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clusterlab.core.codec import CloseReason, ClusterTimeUnit
from clusterlab.core.consensus.context import Role
from clusterlab.core.service.api import ClientSession, Cluster, ClusteredService
from clusterlab.core.service.snapshot import SnapshotImage, SnapshotWriter

ADDRESSED_ATTRIBUTE = "SHARES_LOG_BY_ADDRESS"  # a service class that sets it True opts in
ADDRESS_MARK = b"@"
ADDRESS_END = b":"
MAX_ADDRESS_LEN = 8  # "@" + up to 6 digits + ":" bounds the scan of a payload that is not addressed


def address(service_id: int, payload: bytes) -> bytes:
    """``payload`` addressed to the member's service ``service_id`` (``@<id>:payload``)."""
    return b"@%d:%s" % (service_id, payload)


def addressee(payload: bytes) -> tuple[int, bytes]:
    """(service id, command) of a session message: an ``@<id>:`` prefix names the service (and is
    removed); anything else is addressed to service 0 as it is."""
    if payload[:1] == ADDRESS_MARK:
        end = payload.find(ADDRESS_END, 1, MAX_ADDRESS_LEN)
        digits = payload[1:end]
        if end > 1 and digits.isdigit():
            return int(digits), payload[end + 1 :]
    return 0, payload


class _AddressedCluster:
    """The Cluster handed to a wrapped service: what it offers to the log is addressed to itself."""

    def __init__(self, cluster: Cluster, service_id: int) -> None:
        self._cluster = cluster
        self._service_id = service_id

    def offer(self, payload: bytes) -> bool:
        return self._cluster.offer(address(self._service_id, payload))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)


class AddressedService(ClusteredService):
    """``inner``, one of several services on a member: it acts only on session messages addressed to
    ``service_id`` (see the module docstring); every other callback reaches it unchanged."""

    def __init__(self, inner: ClusteredService, service_id: int) -> None:
        self.inner = inner
        self.service_id = service_id
        self.ignored_messages = 0  # session messages addressed to another service

    def __getattr__(self, name: str) -> Any:
        # Tests and tools read the wrapped service's own attributes (entries, value, ...).
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.inner.on_start(_AddressedCluster(cluster, self.service_id), snapshot)

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        self.inner.on_session_open(session, timestamp)

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        self.inner.on_session_close(session, timestamp, close_reason)

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        service_id, command = addressee(payload)
        if service_id != self.service_id:
            self.ignored_messages += 1
            return
        self.inner.on_session_message(session, timestamp, command)

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        self.inner.on_timer_event(correlation_id, timestamp)

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        self.inner.on_take_snapshot(writer)

    def on_role_change(self, new_role: Role) -> None:
        self.inner.on_role_change(new_role)

    def on_terminate(self, cluster: Cluster) -> None:
        self.inner.on_terminate(cluster)

    def on_new_leadership_term_event(
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
        self.inner.on_new_leadership_term_event(
            leadership_term_id,
            log_position,
            timestamp,
            term_base_log_position,
            leader_member_id,
            log_session_id,
            time_unit,
            app_version,
        )

    def state_digest(self) -> bytes:
        return self.inner.state_digest()


def addressed_factory(
    factory: Callable[[], ClusteredService], service_id: int, service_count: int
) -> Callable[[], ClusteredService]:
    """The factory of service ``service_id`` of ``service_count``: ``factory`` itself for a single
    service; else one that wraps what it builds in :class:`AddressedService` when that service opted in
    (``SHARES_LOG_BY_ADDRESS``), and leaves a service that sees every message as it is."""
    if service_count <= 1:
        return factory

    def build() -> ClusteredService:
        service = factory()
        return AddressedService(service, service_id) if getattr(service, ADDRESSED_ATTRIBUTE, False) else service

    return build
