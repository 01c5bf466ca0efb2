"""The candidate simulator runs the golden set is chosen from (``python -m clusterlab.golden.regenerate
--select``): 1-, 3- and 5-member clusters; the kv service and the ``timers`` workload (the counter with
alarms set and cancelled, service-originated ticks and sessions the service closes); snapshots and
recovery, suspend/resume, clean shutdown, session timeouts, stale members, votes across restarts,
quorum loss and step-down, partitions and disk faults. Each is measured with golden/coverage.py and
a greedy set cover keeps the smallest set covering the most; add a candidate here to offer it.
"""

from __future__ import annotations

from clusterlab.golden.store import Recipe

# (scenario, members, service, seed, duration_s or None for the scenario's default)
_RUNS: list[tuple[str, int, str, int, float | None]] = [
    ("leader-kill", 3, "kv", 1, None),
    ("leader-kill", 3, "timers", 2, None),
    ("split-vote", 5, "kv", 1, None),
    ("split-vote", 5, "kv", 3, None),
    ("split-vote", 3, "timers", 2, None),
    ("split-vote-diverged", 5, "kv", 6, None),
    ("split-vote-diverged", 5, "kv", 7, None),
    ("split-vote-diverged", 3, "kv", 1, None),
    ("dueling-candidates", 3, "kv", 3, None),
    ("dueling-candidates", 3, "timers", 4, None),
    ("kill-voter", 3, "kv", 1, None),
    ("kill-voter", 5, "timers", 1, None),
    ("slow-election", 3, "timers", 1, None),
    ("snapshot-election", 3, "timers", 1, None),
    ("stale-candidate", 3, "kv", 1, None),
    ("stale-candidate", 5, "timers", 2, None),
    ("long-partition", 3, "kv", 1, None),
    ("votes-across-restarts", 3, "kv", 1, None),
    ("votes-across-restarts", 3, "timers", 2, None),
    ("follower-restart", 3, "timers", 1, None),
    ("wiped-follower", 3, "kv", 1, None),
    ("leader-isolation", 3, "timers", 1, None),
    ("leader-isolation", 5, "kv", 2, None),
    ("minority-partition", 3, "kv", 2, None),
    ("minority-partition", 5, "timers", 1, None),
    ("majority-ring", 3, "kv", 1, None),
    ("majority-ring", 5, "timers", 1, None),
    ("bridge", 3, "timers", 1, None),
    ("one-way-link", 3, "kv", 2, None),
    ("flaky-links", 3, "timers", 1, None),
    ("flaky-links", 5, "kv", 2, None),
    ("truncate-follower-tail", 3, "kv", 3, None),
    ("torn-write-on-leader", 3, "timers", 1, None),
    ("bit-flip-tail", 3, "kv", 1, None),
    ("disk-full-leader", 3, "timers", 1, None),
    ("rolling-restart", 3, "timers", 1, None),
    ("snapshot-under-chaos", 3, "kv", 4, None),
    ("snapshot-under-chaos", 3, "timers", 1, None),
    ("full-restart", 3, "timers", 1, None),
    ("random", 3, "kv", 1, None),
    ("random", 3, "timers", 2, None),
    ("random", 5, "kv", 3, None),
    ("solo-restart", 1, "timers", 1, None),
    ("stale-follower", 5, "kv", 1, None),
    ("stale-follower", 5, "timers", 2, None),
    ("quorum-loss", 3, "timers", 1, None),
    ("quorum-loss", 5, "kv", 2, None),
    ("suspend-resume", 3, "timers", 1, None),
    ("suspend-resume", 1, "kv", 1, None),
    ("shutdown-restart", 3, "timers", 1, None),
    ("shutdown-restart", 5, "kv", 1, None),
    ("client-silence", 3, "timers", 1, None),
    ("client-silence", 1, "kv", 1, None),
    ("mute-candidate", 5, "kv", 5, None),  # CANDIDATE_BALLOT -> FOLLOWER_LOG_REPLICATION (its seed reaches it)
]


def candidate_name(scenario: str, members: int, service: str, seed: int) -> str:
    """``sim-SCENARIO`` for 3 members and kv (the names the first goldens had), else
    ``sim-SCENARIO[-nN][-SERVICE]-sSEED``."""
    if members == 3 and service == "kv":
        return f"sim-{scenario}"
    parts = ["sim", scenario]
    if members != 3:
        parts.append(f"n{members}")
    if service != "kv":
        parts.append(service)
    parts.append(f"s{seed}")
    return "-".join(parts)


def candidates() -> list[Recipe]:
    """Every candidate as a simulator recipe."""
    from clusterlab.chaos.scenarios import scenario as find_scenario

    out = []
    for scenario, members, service, seed, duration in _RUNS:
        summary = f"simulator, {members} member(s), {service}: {find_scenario(scenario).summary}; exact"
        out.append(
            Recipe(
                candidate_name(scenario, members, service, seed),
                "sim",
                scenario,
                seed,
                members,
                duration,
                summary,
                service,
            )
        )
    return out
