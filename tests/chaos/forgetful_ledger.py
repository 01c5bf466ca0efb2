"""The ledger whose snapshot forgets its holds, without a ``state_digest`` of its own: its digests are
derived from its snapshot records, which never show the holds. The forgotten holds show only in what
follows a restore (a capture of a forgotten hold fails), which ``snapshot-roundtrip`` sees after the
snapshots it takes of its own, also in a run whose log asks for none."""

from __future__ import annotations

from clusterlab.core.service.api import ClusteredService
from ledger.planted import ForgetsSnapshotField


class UndigestedForgetsSnapshotField(ForgetsSnapshotField):
    state_digest = ClusteredService.state_digest  # the snapshot-derived digest


def make() -> UndigestedForgetsSnapshotField:
    return UndigestedForgetsSnapshotField()
