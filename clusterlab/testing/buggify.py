"""BUGGIFY: seeded fault points inside the simulator's drivers, after FoundationDB's. Rare timings made
common: a service process that falls behind its node for a moment, a member that stalls for part of an
election timeout (a GC pause, a descheduled process).

A run asks for it (``clusterlab run --sim --buggify``, ``clusterlab sweep --buggify``); it then decides
once per site, from its seed, whether that site is enabled (a share :data:`ENABLED` of sites); an enabled
site then fires with probability :data:`FIRES` each time the driver
passes it, drawn from the run's own stream. Off by default, and always off outside the simulator: the
seeded scenarios and the goldens run exactly as without it. Same seed, same firings (the simulator is
deterministic).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

ENABLED = 0.5
"""The share of sites a buggified run enables (each decided from the seed and the site's name)."""

FIRES = 0.02
"""How often an enabled site fires when the driver passes it."""

SITES: dict[str, str] = {
    "service-lag": "a member's services skip an instant: they fall behind their node until its next event",
    "member-stall": "a member whose deadline came stalls (node and services) for up to half an election timeout",
}


@dataclass
class Buggify:
    """The fault points of one simulator run (``on``: a buggified run)."""

    seed: int = 0
    on: bool = False
    enabled: dict[str, bool] = field(default_factory=dict)
    fired: Counter[str] = field(default_factory=Counter)
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"buggify-fires:{self.seed}")
        if self.on:
            self.enabled = {s: random.Random(f"buggify-site:{self.seed}:{s}").random() < ENABLED for s in SITES}

    def __call__(self, site: str) -> bool:
        """Whether ``site`` fires now (never when off or not enabled for this run)."""
        if not self.on or not self.enabled.get(site, False):
            return False
        if self._rng.random() >= FIRES:
            return False
        self.fired[site] += 1
        return True

    def uniform_ns(self, low_ns: int, high_ns: int) -> int:
        """A duration for a fault that fired, from the run's own stream."""
        return low_ns + int(self._rng.random() * (high_ns - low_ns + 1))


OFF = Buggify()
"""No fault point ever fires (every run that does not ask for BUGGIFY)."""
