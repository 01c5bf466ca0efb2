"""The consensus module's counters: Aeron's ``ConsensusModule.Configuration`` counters as plain values.

Aeron keeps these in the media driver's CnC file (``CountersManager``), where ClusterTool and tests read
them while the member runs; the file outlives the process, so the last values stay readable after it
stops. We have no shared memory: the core keeps plain ints (sans-IO), :func:`read_counters` takes one
consistent :class:`ClusterCounters` view of them, and the runtime serves it on the control socket and
persists it in ``<member dir>/counters.json`` (the CnC file's role), the simulator hands it over directly.

| field | Aeron counter (type id) |
|---|---|
| ``module_state`` | Consensus Module state (200) |
| ``role`` | Cluster node role (201) |
| ``control_toggle`` | Cluster control toggle (202) |
| ``commit_position`` | Cluster commit-pos (203) |
| ``timed_out_client_count`` | Cluster timed out client count (205) |
| ``election_state`` | Election state (207), -1 outside an election (Aeron keeps CLOSED) |
| ``snapshot_count`` | Cluster snapshot count (209) |
| ``errors`` | Cluster errors (212) |
| ``leadership_term_id`` | Cluster leadership term id (239) |
| ``election_count`` | Cluster election count (238) |
| ``last_snapshot_duration_ns`` / ``max_snapshot_duration_ns`` | Total max snapshot duration (SnapshotDurationTracker) |
| ``cluster_time_ms`` | the cluster clock (Aeron's clusterClock, MILLIS) |
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clusterlab.core.consensus.module import ConsensusModule

NO_ELECTION = -1


@dataclass(frozen=True, slots=True)
class ClusterCounters:
    """One member's consensus-module counters at one instant (see module docstring)."""

    member_id: int
    module_state: int
    role: int
    control_toggle: int
    commit_position: int
    election_state: int
    election_count: int
    leadership_term_id: int
    snapshot_count: int
    last_snapshot_duration_ns: int
    max_snapshot_duration_ns: int
    errors: int
    timed_out_client_count: int
    cluster_time_ms: int

    def to_json(self) -> dict[str, int]:
        """Field name -> value (the ``counters.json`` form)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterCounters:
        """The inverse of :meth:`to_json`; raises ValueError naming a missing or non-integer field."""
        values: dict[str, int] = {}
        for name in cls.__dataclass_fields__:
            value = data.get(name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"counter {name!r} is missing or not an integer (got {value!r})")
            values[name] = value
        return cls(**values)

    def describe(self) -> str:
        """One canonical line."""
        return " ".join(f"{k}={v}" for k, v in self.to_json().items())


def read_counters(module: ConsensusModule, now_ns: int) -> ClusterCounters:
    """The module's counters now (``now_ns`` gives the cluster time)."""
    es = module.election_state
    return ClusterCounters(
        member_id=module.member_id,
        module_state=int(module.state),
        role=int(module.role),
        control_toggle=int(module.toggle),
        commit_position=module.commit_position,
        election_state=NO_ELECTION if es is None else int(es),
        election_count=module.election_count,
        leadership_term_id=module.leadership_term_id,
        snapshot_count=module.snapshot_count,
        last_snapshot_duration_ns=module.snapshots.last_snapshot_duration_ns,
        max_snapshot_duration_ns=module.snapshots.max_snapshot_duration_ns,
        errors=module.s.error_count,
        timed_out_client_count=module.timed_out_client_count,
        cluster_time_ms=module.cluster_time_ms(now_ns),
    )
