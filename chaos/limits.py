"""The bounds of every size and time a user gives: cluster sizes, durations, rates, clients, seeds and
their count, jobs, timeouts. The ``clusterlab`` commands (their ``--help`` shows each bound), the
pytest plugin's options, marker and fixtures, and :func:`clusterlab.chaos.runner.run_scenario` all
check against these, so a value out of range is refused with one line before anything starts.

The bounds are what the code supports and what a run on one machine can finish: a cluster of up to 9
members (two processes each on real runs; every scenario runs on 1, 3 or 5), runs of up to an hour of
target time (the simulator records every message: an hour of simulated time is gigabytes of trace),
an offered rate the workload clients can pace."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """The allowed range of one kind of value: ``low``..``high`` inclusive (``low`` exclusive when
    ``above_low``); ``integer``: whole numbers only; ``unit``: what the number counts, for messages."""

    low: float
    high: float
    unit: str = ""
    integer: bool = False
    above_low: bool = False

    def describe(self) -> str:
        """The range in words: ``1 to 9`` or ``above 0 and at most 3600 seconds``."""
        unit = f" {self.unit}" if self.unit else ""
        if self.above_low:
            return f"above {_number(self.low)} and at most {_number(self.high)}{unit}"
        return f"{_number(self.low)} to {_number(self.high)}{unit}"

    def contains(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if not math.isfinite(value) or (self.integer and value != int(value)):
            return False
        low_ok = value > self.low if self.above_low else value >= self.low
        return low_ok and value <= self.high

    def error(self, name: str, value: object) -> str | None:
        """None when ``value`` is in range, else one line: ``--members must be 1 to 9, not 100``."""
        if isinstance(value, int | float) and self.contains(value):
            return None
        shown = _number(value) if isinstance(value, int | float) and not isinstance(value, bool) else repr(value)
        return f"{name} must be {self.describe()}, not {shown}"


def _number(value: float) -> str:
    """A number as a user types it: 3600, 0.5, 9223372036854775807, nan, inf."""
    if isinstance(value, int):
        return str(value)
    return str(int(value)) if math.isfinite(value) and value == int(value) and abs(value) < 1e6 else f"{value:g}"


MAX_MEMBERS = 9
MEMBERS = Limit(1, MAX_MEMBERS, integer=True)
MEMBER_ID = Limit(0, MAX_MEMBERS - 1, integer=True)
# A run's schedule (faults and workload before the final heal), in the target's seconds.
MAX_RUN_S = 3600.0
DURATION_S = Limit(0, MAX_RUN_S, "seconds", above_low=True)
# The bound on a run's final healed phase (a leader, an acknowledged op, every member caught up).
SETTLE_S = Limit(0, 600.0, "seconds", above_low=True)
RATE = Limit(0, 10_000.0, "ops per second", above_low=True)
CLIENTS = Limit(1, 64, integer=True)
# Seeds are non-negative 64-bit integers (recorded as int64 in run.json and the tables).
SEED = Limit(0, 2**63 - 1, integer=True)
MAX_SEEDS = 1_000_000  # seeds one sweep or one pytest session runs
SEED_COUNT = Limit(1, MAX_SEEDS, integer=True)
JOBS = Limit(1, 256, integer=True)
# How long a command waits for a reply or a member (client, tool).
TIMEOUT_S = Limit(0, 3600.0, "seconds", above_low=True)
REFRESH_S = Limit(0, 60.0, "seconds", above_low=True)
SHRINK_RUNS = Limit(1, 10_000, integer=True)
VIOLATIONS_KEPT = Limit(1, 100_000, integer=True)
LOG_POSITION = Limit(0, 2**63 - 1, integer=True)
# A mutant hunt's wall-time budget per mutant, and the warm-up checks of a Spark server.
BUDGET_S = Limit(0, 24 * 3600.0, "seconds", above_low=True)
WARM_CHECKS = Limit(0, 1_000, integer=True)
DRIVER_MEMORY_MIB = Limit(256, 1024 * 1024, "MiB", integer=True)  # a Spark server's JVM heap: 256m to 1t
SPARK_WORKERS = Limit(0, 64, integer=True)  # a standalone Spark cluster on this machine: its worker JVMs


def run_arguments_error(
    *,
    members: int,
    duration_s: float | None = None,
    rate: float | None = None,
    clients: int | None = None,
    settle_s: float | None = None,
    seed: int | None = None,
) -> str | None:
    """The first of a chaos run's sizes and times out of its bounds, as one line (None: all fine;
    None values are defaults, not checked)."""
    for name, limit, value in (
        ("members", MEMBERS, members),
        ("seed", SEED, seed),
        ("duration", DURATION_S, duration_s),
        ("rate", RATE, rate),
        ("clients", CLIENTS, clients),
        ("settle", SETTLE_S, settle_s),
    ):
        if value is not None and (error := limit.error(name, value)) is not None:
            return error
    return None
