"""A second service for multi-service determinism tests: it keeps the names of the sessions it saw
open in a set of strings and digests the names' ``hash()`` values in the set's iteration order; both
depend on ``PYTHONHASHSEED``. Members in one process agree; a replay in another process does not,
however few sessions a run opens (the order of three names agrees between two seeds often)."""

from __future__ import annotations

import hashlib

from clusterlab.core.codec import CloseReason
from clusterlab.core.service.api import ClientSession, Cluster, ClusteredService, Role, SnapshotImage, SnapshotWriter


class SessionOrderService(ClusteredService):
    """Sees every message (it does not share the log by address); only session opens change it."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.names = {bytes(r).decode() for r in snapshot.records} if snapshot is not None else set()

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        self.names.add(f"session-{session.id}")

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        pass

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        pass

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        pass

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        for name in sorted(self.names):
            writer.write(name.encode())

    def on_role_change(self, new_role: Role) -> None:
        pass

    def on_terminate(self, cluster: Cluster) -> None:
        pass

    def state_digest(self) -> bytes:
        hashes = "|".join(str(hash(name)) for name in self.names)  # the set's order and str hashing
        return hashlib.blake2b(hashes.encode(), digest_size=16).digest()


def make() -> SessionOrderService:
    return SessionOrderService()
