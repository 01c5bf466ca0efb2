"""The service container: one clustered service's agent with its snapshot store, started from the
member's recording log and fed its node's messages the same way by every host (Aeron's
ClusteredServiceContainer).

A service runs in its own process (clusterlab.core.runtime.service), beside its node in one process
(clusterlab.core.runtime.member) or in the simulator (clusterlab.harness.sim_parts.SimServiceHost). Each
host gives the container its storage and three ports (to its node, to clients' egress, the applied rows)
and hands it every message its node sends; what differs is only how bytes travel and what a host does
when its service stops. The container owns what they share:

- the service's snapshot store (its own catalogue and directory under the member's storage: the node's
  archive allocates its own recording ids, and two processes must not allocate from one catalogue);
- the recovery plan: the latest snapshot of this service in the recording log the node reconciled at start
  (Aeron's service reads the RecoveryState counter);
- each message from the node, to the agent, which decodes it once and knows from the JoinLog whether a
  block is a replay; a snapshot that fails is logged and the service goes on (Aeron), a service that asks
  to terminate stops the container.

A service that fails (ServiceError, AgentError) raises out of :meth:`ServiceContainer.on_message`: a
service process exits, the simulator reports the failure with its seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clusterlab.core.archive.catalogue import Catalogue
from clusterlab.core.archive.layout import service_snapshot_store_dirs
from clusterlab.core.archive.snapshots import SnapshotStore
from clusterlab.core.archive.storage import Storage
from clusterlab.core.consensus.context import EventSink, null_event_sink
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.service.agent import (
    AppliedEntry,
    AppliedRun,
    ClusteredServiceAgent,
    ServiceTerminated,
    SnapshotError,
)
from clusterlab.core.service.api import CallbackScope, ClusteredService

TERMINATED = "the service requested termination"


class ServiceContainer:
    """One clustered service (``service_id`` of member ``member_id``) and its agent; see the module docstring.

    ``to_consensus_module`` takes the agent's messages to its node; ``egress`` its replies to clients
    (response channel, session, payload); ``on_applied`` / ``on_applied_run`` the applied rows, when the
    host records them; ``events`` the agent's ``start`` and ``service_terminate`` events."""

    def __init__(
        self,
        service_id: int,
        member_id: int,
        service: ClusteredService,
        storage: Storage,
        *,
        to_consensus_module: Callable[[bytes], None],
        egress: Callable[[str, Any, bytes], None],
        log: Callable[[str], None],
        on_applied: Callable[[AppliedEntry], None] | None = None,
        on_applied_run: Callable[[AppliedRun], None] | None = None,
        callback_scope: CallbackScope | None = None,
        events: EventSink = null_event_sink,
    ) -> None:
        self.service_id = service_id
        self._storage = storage
        self._log = log
        self.errors: list[str] = []  # failures the service survived (Aeron: the container's error counter)
        catalogue_dir, snapshot_dir = service_snapshot_store_dirs(service_id)
        self.snapshots = SnapshotStore(storage, Catalogue.open(storage, catalogue_dir), snapshot_dir)
        self.agent = ClusteredServiceAgent(
            service_id,
            member_id,
            service,
            to_consensus_module=to_consensus_module,
            egress=egress,
            snapshot_store=self.snapshots,
            on_applied=on_applied,
            on_applied_run=on_applied_run,
            log=log,
            callback_scope=callback_scope,
            events=events,
        )

    def recovery_snapshot(self) -> int | None:
        """The recording id of this service's latest snapshot in the member's recording log, or None."""
        with RecordingLog.open(self._storage) as recording_log:
            entry = recording_log.latest_snapshot(self.service_id)
        return entry.recording_id if entry is not None else None

    def start(self, snapshot_recording_id: int | None) -> str | None:
        """Start the agent from ``snapshot_recording_id`` (None: an empty state). Returns why it failed to
        start, or None; a service that failed to start has acked with a NULL client id, and its node closes."""
        try:
            self.agent.start(snapshot_recording_id)
        except Exception as e:
            failure = (
                f"failed to start service={self.service_id} snapshotRecordingId={snapshot_recording_id}: "
                f"{type(e).__name__}: {e}"
            )
            self.errors.append(failure)
            self._log(failure)
            return failure
        return None

    def on_message(self, payload: bytes) -> str | None:
        """One message from the node (a LogBlock, JoinLog, termination, ...) to the agent. Returns why the
        service stopped on it (:data:`TERMINATED`), or None."""
        try:
            self.agent.on_service_message(payload)
        except SnapshotError as e:  # counted as applied, the agent stays usable (Aeron)
            self.errors.append(f"snapshot failed: {e}")
            self._log(f"service {self.service_id}: snapshot failed: {e}")
        except ServiceTerminated as e:  # ClusterTerminationException: the container closes (Aeron)
            self._log(f"service {self.service_id} requested termination: {e}")
            return TERMINATED
        return None

    @property
    def is_terminated(self) -> bool:
        """The service terminated (at a termination position, or on request)."""
        return self.agent.is_terminated

    def close(self) -> None:
        """Close the agent: an active service is told ``on_terminate`` (Aeron ``ClusteredServiceAgent.onClose``)."""
        self.agent.close()
