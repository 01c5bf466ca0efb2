"""A second service for the replay-equivalence tests: every message credits whichever of two
names a set of strings iterates first, an order that depends on ``PYTHONHASHSEED``, and between
two hash seeds agrees half the time. Members in one process agree; a replay in a process whose
seed orders the pair the other way does not."""

from __future__ import annotations

import hashlib

from clusterlab.core.codec import CloseReason
from clusterlab.core.service.api import ClientSession, Cluster, ClusteredService, Role, SnapshotImage, SnapshotWriter

SIDES = ("left", "right")


def first_side() -> str:
    """The name this process's hash seed puts first in the set of :data:`SIDES`."""
    return next(iter(set(SIDES)))


class PairOrderService(ClusteredService):
    """Sees every message (it does not share the log by address); each one credits :func:`first_side`."""

    def __init__(self) -> None:
        self.credits = dict.fromkeys(SIDES, 0)

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        if snapshot is not None:
            left, right = (int(bytes(r)) for r in snapshot.records)
            self.credits = {"left": left, "right": right}

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        pass

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        pass

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        self.credits[first_side()] += 1

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        pass

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        for side in SIDES:
            writer.write(str(self.credits[side]).encode())

    def on_role_change(self, new_role: Role) -> None:
        pass

    def on_terminate(self, cluster: Cluster) -> None:
        pass

    def state_digest(self) -> bytes:
        return hashlib.blake2b(repr(sorted(self.credits.items())).encode(), digest_size=16).digest()


def make() -> PairOrderService:
    return PairOrderService()


if __name__ == "__main__":
    print(first_side())
