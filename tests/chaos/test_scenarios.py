"""The chaos suite: every named scenario on real processes (3 members, two seeds; the partition ones
also on 5) and in the simulator (many seeds), each run's trace verified (agreement, contiguity,
election safety, durability, committed prefix) besides the online checker and the workload's model.

Seeds: ``--chaos-seed 7`` / ``CLUSTERLAB_SEEDS=1-20`` / ``--chaos-runs N`` widen or pick them;
``--trace-dir DIR`` keeps every run's trace (a directory of run directories for ``clusterlab check``).
A failure prints the seed, the kept trace and the commands that re-run it.
"""

from __future__ import annotations

from typing import Any

import pytest
from clusterlab.chaos.scenarios import SCENARIOS
from clusterlab.harness.trace import open_run

from clusterlab.pytest_plugin import chaos_seeds

REAL_SEEDS = (1, 2)
REAL_SEEDS_5 = (1,)
SIM_SEEDS = range(1, 5)
SIM_SEEDS_5 = range(1, 3)
SIM_RANDOM_SEEDS = range(1, 17)  # the seeded mix: many seeds, it is the one that explores
SIM_RANDOM_SEEDS_5 = range(1, 5)
SIM_DURATION_S = {"random": 6.0, "rolling-restart": 6.0}
# The golden scenarios' faults need their length (a leader down past the heartbeat timeout, clients
# silent past the session timeout).
SIM_DURATION_S.update({s.name: s.default_duration_s for s in SCENARIOS.values() if s.sim_only})
SIM_DEFAULT_DURATION_S = 4.0
# Real runs are shortened from the scenarios' defaults to keep the suite in its CI budget; every
# fault still outlasts the 1 s leader heartbeat timeout.
REAL_DURATION_S = {"rolling-restart": 7.0, "random": 8.0}
REAL_DEFAULT_DURATION_S = 5.0


def _cases(config: pytest.Config, sim: bool) -> list[Any]:
    cases = []
    for spec in SCENARIOS.values():
        if (sim and spec.real_only) or (not sim and spec.sim_only):
            continue
        for members in spec.sizes:
            if not sim:
                default = REAL_SEEDS if members == 3 else REAL_SEEDS_5
            elif spec.name == "random":
                default = SIM_RANDOM_SEEDS if members == 3 else SIM_RANDOM_SEEDS_5
            else:
                default = SIM_SEEDS if members == 3 else SIM_SEEDS_5
            for seed in chaos_seeds(config, default):
                cases.append(pytest.param(spec.name, members, seed, id=f"{spec.name}-n{members}-seed{seed}"))
    return cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"scenario", "members", "seed"} <= set(metafunc.fixturenames):
        sim = metafunc.definition.get_closest_marker("sim") is not None
        metafunc.parametrize(("scenario", "members", "seed"), _cases(metafunc.config, sim))


def check_run(result: Any) -> None:
    """The run passed every check, and did what its scenario says (each fault applied, disk damage
    done, a leader fault answered by an election, ops acknowledged and model-checked)."""
    assert result.ok, result.failure_message()
    assert result.verdict is not None and not result.verdict.failed()
    assert result.acked > 0 and result.model_checked > 0, result.failure_message()
    events = open_run(result.trace_dir).events.to_pylist()
    applied = [e for e in events if e["kind"] == "chaos_apply"]
    faults = [s for s in result.schedule if not s.startswith("quiet")]
    assert len(applied) == len(faults), f"applied {len(applied)} of {faults}"
    if any(s.startswith("disk(") for s in faults if "fault=snapshot" not in s):
        damaged = [e for e in events if e["kind"] == "truncate" and e["source"] == "harness"]
        assert damaged and all('"position":null' not in e["detail"] for e in damaged), damaged
    # A named scenario holds a leader fault past the heartbeat timeout (a random one may not).
    if result.scenario != "random" and any('"leader_fault":true' in e["detail"] for e in applied):
        assert result.elections_s, f"a leader fault but no new leader in the trace: {result.failure_message()}"


@pytest.mark.chaos
@pytest.mark.cluster
@pytest.mark.slow
def test_scenario_real(chaos_runner: Any, scenario: str, members: int, seed: int) -> None:
    duration = REAL_DURATION_S.get(scenario, REAL_DEFAULT_DURATION_S)
    check_run(chaos_runner(scenario, seed, members=members, duration=duration))


@pytest.mark.chaos
@pytest.mark.sim
def test_scenario_sim(chaos_runner: Any, scenario: str, members: int, seed: int) -> None:
    duration = SIM_DURATION_S.get(scenario, SIM_DEFAULT_DURATION_S)
    check_run(chaos_runner(scenario, seed, members=members, sim=True, duration=duration))
