"""Schedules: what a chaos run does and when, Jepsen-style — quiet, fault, heal, quiet… — ending in
a healed phase in which the cluster must make progress (a leader, new commits, every member caught
up) within a bound.

A schedule is plain data built from a seed: the same seed (and scenario, members, duration) gives the
same steps, which ``describe`` prints, so a failure is re-run exactly with the command it prints."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from clusterlab.chaos.nemesis import (
    ClockSkew,
    DiskFault,
    FlakyLinks,
    Kill,
    KillService,
    KillVoter,
    Nemesis,
    OneWayLink,
    Partition,
    Pause,
    SilentClient,
    SlowElection,
    Snapshot,
    SnapshotElection,
)


@dataclass
class Step:
    """``quiet`` (workload only) or ``fault`` (apply, hold ``seconds``, heal) for ``seconds``."""

    kind: str
    seconds: float
    nemesis: Nemesis | None = None

    def describe(self) -> str:
        if self.nemesis is None:
            return f"quiet {self.seconds:.2f}s"
        n = self.nemesis
        extra = ",".join(f"{k}={v}" for k, v in n.detail().items() if v not in ([], None))
        return f"{n.name}({extra}) {self.seconds:.2f}s"


@dataclass
class Schedule:
    """The steps of one run, then the final healed phase (``settle_s``: its progress bound)."""

    seed: int
    steps: list[Step] = field(default_factory=list)
    settle_s: float = 30.0

    def describe(self) -> list[str]:
        return [s.describe() for s in self.steps]


def quiet(s: float) -> Step:
    return Step("quiet", s)


def fault(n: Nemesis, s: float) -> Step:
    return Step("fault", s, n)


# A random schedule draws from these (real-process-only nemeses are dropped in the simulator).
RANDOM_POOL: list[tuple[str, Callable[[random.Random], Nemesis], bool]] = [
    ("kill-leader", lambda r: Kill(who="leader"), True),
    ("kill-random", lambda r: Kill(who="random"), True),
    ("kill-minority", lambda r: Kill(who="minority"), True),
    ("wiped-follower", lambda r: Kill(who="follower", wipe=True), True),
    ("leader-isolation", lambda r: Partition(shape="leader-isolation"), True),
    ("minority-partition", lambda r: Partition(shape="minority-partition"), True),
    ("majority-ring", lambda r: Partition(shape="majority-ring"), True),
    ("bridge", lambda r: Partition(shape="bridge"), True),
    ("one-way", lambda r: OneWayLink(), True),
    ("flaky", lambda r: FlakyLinks(loss=r.choice([0.05, 0.2]), delay_s=0.002, jitter_s=0.002), True),
    ("truncate", lambda r: DiskFault(fault="truncate", n_bytes=r.choice([64, 512, 4096])), True),
    ("torn", lambda r: DiskFault(fault="torn", who="random"), True),
    ("flip", lambda r: DiskFault(fault="flip"), True),
    ("unflushed", lambda r: DiskFault(fault="unflushed", who="random"), True),
    ("truncate-at", lambda r: DiskFault(fault="truncate", at=r.randrange(0, 64 * 1024, 32)), True),
    ("snapshot", lambda r: Snapshot(), True),
    ("kill-voter", lambda r: KillVoter(candidate_too=r.random() < 0.5), True),
    ("slow-election", lambda r: SlowElection(delay_s=r.choice([0.35, 0.5])), True),
    ("snapshot-election", lambda r: SnapshotElection(), True),
    ("silent-client", lambda r: SilentClient(), True),
    ("pause-leader", lambda r: Pause(), False),
    ("kill-service", lambda r: KillService(), False),
    ("clock-skew", lambda r: ClockSkew(offset_s=r.choice([0.5, 2.0])), False),
]


def random_schedule(seed: int, duration_s: float, *, sim: bool) -> Schedule:
    """quiet, fault, quiet, fault… for about ``duration_s``, faults drawn from RANDOM_POOL by ``seed``."""
    rng = random.Random(f"schedule:{seed}")
    pool = [(name, make) for name, make, on_sim in RANDOM_POOL if on_sim or not sim]
    steps: list[Step] = [quiet(rng.uniform(0.3, 0.8))]
    spent = steps[0].seconds
    while spent < duration_s:
        _, make = rng.choice(pool)
        hold = rng.uniform(0.5, 2.0)
        steps += [fault(make(rng), hold), quiet(rng.uniform(0.3, 1.0))]
        spent += hold + steps[-1].seconds
    return Schedule(seed, steps)
