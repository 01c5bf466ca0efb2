"""Members as one process each (node and services on one thread, ``member_process="single"``) pass the
real-process scenarios: one scenario of each fault family here (the whole list runs with
``CLUSTERLAB_SINGLE_ALL=1``); a schedule that kills a service alone is refused before anything starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.runner import RunArgumentError, run_scenario
from clusterlab.chaos.scenarios import SCENARIOS
from clusterlab.chaos.schedule import kills_a_service

from tests.chaos.test_scenarios import REAL_DEFAULT_DURATION_S, REAL_DURATION_S, check_run

# One per fault family: a kill, a partition, SIGSTOP, disk damage, a full disk, clock skew, restarts,
# a wiped member, flaky links, snapshots (one unloadable), a ClusterBackup, a random mix.
FAMILIES = (
    "leader-kill",
    "leader-isolation",
    "pause-leader",
    "torn-write-on-leader",
    "disk-full-leader",
    "clock-skew",
    "rolling-restart",
    "wiped-follower",
    "flaky-links",
    "snapshot-under-chaos",
    "snapshot-corrupt",  # a member that closes by itself at start (its service cannot load its snapshot)
    "backup-restore",
    "random",
)
ALL_REAL = tuple(s.name for s in SCENARIOS.values() if not s.sim_only and s.name != "kill-service")
SCENARIO_NAMES = ALL_REAL if os.environ.get("CLUSTERLAB_SINGLE_ALL") else FAMILIES


def first_seed_keeping_services(scenario: str, duration_s: float) -> int:
    """The first seed whose schedule kills no service alone (a random schedule may draw kill-service)."""
    spec = SCENARIOS[scenario]
    return next(s for s in range(1, 100) if not kills_a_service(spec.schedule(s, duration_s, sim=False, members=3)))


@pytest.mark.chaos
@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_scenario_on_single_process_members(chaos_runner: Any, scenario: str) -> None:
    duration = REAL_DURATION_S.get(scenario, REAL_DEFAULT_DURATION_S)
    seed = first_seed_keeping_services(scenario, duration)
    result = chaos_runner(scenario, seed, members=3, duration=duration, member_process="single")
    assert result.member_process == "single"
    assert "--member-process single" in result.rerun_command()
    check_run(result)


def test_the_families_are_real_scenarios() -> None:
    assert set(FAMILIES) <= set(ALL_REAL)


def test_a_schedule_that_kills_a_service_alone_needs_split_members(tmp_path: Path) -> None:
    with pytest.raises(RunArgumentError, match="kills a service alone"):
        run_scenario("kill-service", 1, directory=tmp_path, member_process="single")
    assert not any(tmp_path.rglob("*.arrow"))  # refused before anything started


def test_the_simulator_has_no_member_processes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the simulator runs no processes"):
        run_scenario("leader-kill", 1, sim=True, directory=tmp_path, member_process="single")
    with pytest.raises(ValueError, match="use one of split, single"):
        run_scenario("leader-kill", 1, directory=tmp_path, member_process="threads")
