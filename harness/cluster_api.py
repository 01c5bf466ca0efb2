"""The operations both cluster drivers share, as one typed protocol: :class:`~clusterlab.harness.local.LocalCluster`
(real processes, wall time) and :class:`~clusterlab.harness.sim.SimCluster` (the simulator, virtual time)
each implement :class:`Cluster`, and code written against it (``clusterlab.chaos.target.Target``) runs on
either. What only one driver has (SIGSTOP, clock skew, a client silenced in virtual time) stays on
that driver's class. Three operations both drivers have stay outside the protocol because their time
units differ with the driver's clock: ``await_condition`` (``timeout_s`` on the wall clock,
``timeout_ns`` in virtual time), ``set_link`` (``delay_s`` / ``delay_ns``) and
``delay_member_messages``; ``chaos.target`` converts seconds to each driver's unit.

mypy holds both drivers to the protocol (``_conforms`` below), and tests/unit/test_cluster_api.py holds
their method signatures to it at run time."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from clusterlab.core.archive.storage import Storage

if TYPE_CHECKING:
    from clusterlab.harness.local import LocalCluster
    from clusterlab.harness.sim import SimCluster


class Cluster(Protocol):
    """A running cluster of ``member_count`` members (ids ``0 .. member_count - 1``)."""

    member_count: int

    def leader_id(self) -> int | None:
        """The settled leader's member id, or None (no leader, or the members disagree)."""
        ...

    def members_alive(self) -> list[int]:
        """The members whose node is running."""
        ...

    def storage(self, member_id: int) -> Storage:
        """The member's durable storage (apply damage only while it is down)."""
        ...

    def event(self, kind: str, member_id: int, **detail: Any) -> None:
        """Record a harness event in the run's trace."""
        ...

    def kill(self, member_id: int) -> None:
        """Crash the member (its node and services); its files stay."""
        ...

    def pause(self, member_id: int) -> None:
        """Stop the member and its services (SIGSTOP); what arrives for them waits until resume."""
        ...

    def resume(self, member_id: int) -> None:
        """Let a paused member run again."""
        ...

    def restart(self, member_id: int) -> None:
        """Start a killed or stopped member again from its files."""
        ...

    def restart_wiped(self, member_id: int) -> None:
        """Start a killed or stopped member again with its directory wiped."""
        ...

    def partition(self, groups: Iterable[Iterable[int]]) -> None:
        """Cut the network between the groups (members in no group are isolated)."""
        ...

    def block(self, src: int, dst: int) -> None:
        """Drop every message from ``src`` to ``dst`` (one direction)."""
        ...

    def unblock(self, src: int, dst: int) -> None:
        """Let ``src`` -> ``dst`` through again (the other faults stay)."""
        ...

    def heal(self) -> None:
        """Remove every network fault."""
        ...

    def status_line(self) -> str:
        """One line per member: role, term, positions, health (for timeouts' messages)."""
        ...

    def control(self, target: str) -> bool:
        """A cluster-control request (``snapshot``, ``suspend``, ...) to the leader; True if accepted."""
        ...


def _conforms(local: LocalCluster, sim: SimCluster) -> tuple[Cluster, Cluster]:
    """Never called: mypy checks here that both drivers implement :class:`Cluster`."""
    return local, sim
