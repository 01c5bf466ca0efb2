"""The online checker: fails a run the moment a safety property breaks, instead of at the end.

Simulator: every event and applied row goes through clusterlab.harness.invariants.SafetyChecker (election
safety, monotonic commit, agreement, contiguity, log matching). Real cluster: the members' status is
polled — two members leading the same term, or two services reporting different state digests at
the same log position, fail the run at once."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from clusterlab.core.consensus.context import Role
from clusterlab.harness.invariants import SafetyChecker, SafetyViolation


@dataclass
class OnlineChecker:
    """``poll()`` after every workload step; raises SafetyViolation on a broken invariant."""

    target: Any
    interval_s: float = 0.25
    leaders_by_term: dict[int, int] = field(default_factory=dict)
    digests_at: dict[int, tuple[bytes, int]] = field(default_factory=dict)  # position -> (digest, member)
    polls: int = 0
    sim: SafetyChecker | None = None
    _events_seen: int = 0
    _last: float = float("-inf")

    def poll(self, force: bool = False) -> None:
        now = self.target.now_s()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        self.polls += 1
        if self.target.kind == "sim":
            self._poll_sim()
        else:
            self._poll_local()

    def _poll_sim(self) -> None:
        cluster = self.target.cluster
        if self.sim is None:
            self.sim = SafetyChecker()
        for ev in cluster.events[self._events_seen :]:
            self.sim.on_event(ev)
        self._events_seen = len(cluster.events)
        self.sim.check_cluster(cluster)
        for term, member in self.sim.leaders_by_term.items():
            self.leaders_by_term.setdefault(term, member)

    def _poll_local(self) -> None:
        cluster = self.target.cluster
        for member_id in cluster.members_alive():
            if member_id in self.target.paused:
                continue
            status = cluster.status(member_id, timeout_s=0.5)
            if status is not None and status.role == Role.LEADER and status.election_state is None:
                other = self.leaders_by_term.setdefault(status.leadership_term_id, member_id)
                if other != member_id:
                    raise SafetyViolation(
                        f"election safety: term {status.leadership_term_id} has leaders {other} and {member_id}"
                    )
            service = cluster.service_status(member_id, timeout_s=0.5)
            if service is not None and service.log_position > 0:
                digest = bytes(service.state_digest)
                seen = self.digests_at.setdefault(service.log_position, (digest, member_id))
                if seen[0] != digest:
                    raise SafetyViolation(
                        f"agreement: at log position {service.log_position} member {member_id} reports state "
                        f"{digest.hex()} but member {seen[1]} reported {seen[0].hex()}"
                    )


def wall() -> float:
    """Seconds on the monotonic clock (what real runs time themselves with)."""
    return time.monotonic()


__all__ = ["OnlineChecker", "SafetyViolation", "wall"]
