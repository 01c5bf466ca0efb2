"""The online checker: fails a run the moment a safety property breaks, instead of at the end.

Simulator: every event and applied row goes through clusterlab.harness.invariants.SafetyChecker (election
safety, monotonic commit, agreement, contiguity, log matching). Real cluster: the members' status is
polled — two members leading the same term, or two services reporting different state digests at
the same log position, fail the run at once (the same ElectionSafety and Agreement definitions)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from clusterlab.chaos.target import LocalTarget, SimTarget, Target
from clusterlab.core.consensus.context import Role
from clusterlab.harness.invariants import Agreement, ElectionSafety, SafetyChecker, SafetyViolation


@dataclass
class OnlineChecker:
    """``poll()`` after every workload step; raises SafetyViolation on a broken invariant."""

    target: Target
    interval_s: float = 0.25
    election: ElectionSafety = field(default_factory=ElectionSafety)
    agreement: Agreement = field(default_factory=Agreement)
    service_agreements: dict[int, Agreement] = field(default_factory=dict)  # service ids > 0
    polls: int = 0
    sim: SafetyChecker | None = None
    _last: float = float("-inf")

    def poll(self, force: bool = False) -> None:
        now = self.target.now_s()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        self.polls += 1
        if isinstance(self.target, SimTarget):
            self._poll_sim(self.target, full=force)
        elif isinstance(self.target, LocalTarget):
            self._poll_local(self.target)
        else:
            raise TypeError(f"no online checks for a {type(self.target).__name__}")

    def _poll_sim(self, target: SimTarget, full: bool = False) -> None:
        cluster = target.cluster
        if self.sim is None:
            self.sim = SafetyChecker()
        self.sim.check(cluster, full)  # a forced (final) poll re-reads every member's whole committed log
        self.election = self.sim.election

    def _poll_local(self, target: LocalTarget) -> None:
        cluster = target.cluster
        for member_id in cluster.members_alive():
            if member_id in target.paused:
                continue
            status = cluster.status(member_id, timeout_s=0.5)
            if status is not None and status.role == Role.LEADER and status.election_state is None:
                _raise(self.election.observe(status.leadership_term_id, member_id))
            for service_id in range(cluster.config.service_count):
                service = cluster.service_status(member_id, timeout_s=0.5, service_id=service_id)
                if service is not None and service.log_position > 0:
                    # A status poll knows the state digest, not the entry: an agreement check of states,
                    # among the members' services of one service id.
                    agreement = self.agreement if service_id == 0 else self._service_agreement(service_id)
                    who = (member_id, 0)
                    _raise(agreement.observe(service.log_position, who, "", None, bytes(service.state_digest)))

    def _service_agreement(self, service_id: int) -> Agreement:
        return self.service_agreements.setdefault(service_id, Agreement())

    @property
    def leaders_by_term(self) -> dict[int, int]:
        return self.election.leaders_by_term()


def _raise(problem: str | None) -> None:
    if problem is not None:
        raise SafetyViolation(problem)


def wall() -> float:
    """Seconds on the monotonic clock (what real runs time themselves with)."""
    return time.monotonic()


__all__ = ["OnlineChecker", "SafetyViolation", "wall"]
