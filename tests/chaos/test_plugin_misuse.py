"""A wrong name or value given to the pytest plugin (an unknown scenario or nemesis, a size or time out
of its bounds, a keyword run_scenario does not take, an option out of range) fails with one line
naming it and what is allowed, never a traceback through the plugin's code."""

from __future__ import annotations

import re

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import pytest

@pytest.mark.chaos(scenario="nope", sim=True)
def test_unknown_scenario(chaos_run):
    pass

@pytest.mark.chaos(scenario="leader-kill", sim=True, members=100)
def test_too_many_members(chaos_run):
    pass

@pytest.mark.chaos(scenario="leader-kill", sim=True, duration=float("nan"))
def test_nan_duration(chaos_run):
    pass

def test_unknown_keyword(chaos_runner):
    chaos_runner("leader-kill", 1, sim=True, member=5)

def test_unknown_nemesis(sim_cluster, nemesis):
    nemesis(sim_cluster, "nope")

def test_unknown_nemesis_option(sim_cluster, nemesis):
    nemesis(sim_cluster, "kill", whom=1)

def test_unknown_workload_service(sim_cluster, workload):
    workload(sim_cluster, service="nope")

def test_unknown_sweep_scenario(chaos_sweep):
    chaos_sweep("nope", seeds=1)

def test_sweep_size_the_scenario_lacks(chaos_sweep):
    chaos_sweep("leader-kill", members=(4,), seeds=1)

def test_sweep_unknown_keyword(chaos_sweep):
    chaos_sweep("leader-kill", seeds=1, duraton=1.0)

@pytest.mark.parametrize("sim_cluster", [{"members": 50}], indirect=True)
def test_cluster_too_big(sim_cluster):
    pass
"""

# test name -> the one line its failure must show
EXPECTED = {
    "test_unknown_scenario": "chaos run: unknown scenario 'nope'; known: leader-kill,",
    "test_too_many_members": "chaos run 'leader-kill': members must be 1 to 9, not 100",
    "test_nan_duration": "chaos run 'leader-kill': duration must be above 0 and at most 3600 seconds, not nan",
    "test_unknown_keyword": "chaos run 'leader-kill': got an unexpected keyword argument 'member'",
    "test_unknown_nemesis": "nemesis: unknown nemesis 'nope'; known: partition,",
    "test_unknown_nemesis_option": "nemesis 'kill' has no option whom; its options:",
    "test_unknown_workload_service": "workload: no workload for service 'nope'; known: kv,",
    "test_unknown_sweep_scenario": "chaos_sweep: unknown scenario 'nope'; known: leader-kill,",
    "test_cluster_too_big": "cluster members must be 1 to 9, not 50",
    "test_sweep_size_the_scenario_lacks": "chaos_sweep: scenario leader-kill runs on 3 members, not 4",
    "test_sweep_unknown_keyword": "chaos_sweep takes members, duration_s, mutants,",
}


def test_misuse_of_the_plugin_fails_with_one_line_each(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", "-vv", "-rfE")
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) == len(EXPECTED), out
    assert "pytest_plugin.py" not in out and "Traceback" not in out and "During handling" not in out, out
    summary = out.split("short test summary info")[-1].splitlines()
    for name, message in EXPECTED.items():
        lines = [line for line in summary if re.search(rf"::{name}[\[ ]", line)]
        assert len(lines) == 1 and message in lines[0], (name, lines)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--chaos-runs", "0"], "--chaos-runs must be 1 to 1000000, not 0"),
        (["--chaos-sweep", "10000000"], "--chaos-sweep must be 1 to 1000000, not 10000000"),
        (["--chaos-sweep-jobs", "0"], "--chaos-sweep-jobs must be 1 to 256, not 0"),
        (["--chaos-seed", "1-99999999"], "more than 1000000 seeds"),
    ],
)
def test_an_option_out_of_range_is_one_usage_line(pytester: pytest.Pytester, option: list[str], message: str) -> None:
    pytester.makepyfile(
        test_user="""
import pytest

@pytest.mark.chaos(scenario="leader-kill", sim=True)
def test_one(chaos_run):
    pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", *option)
    text = result.stdout.str() + result.stderr.str()
    assert result.ret != 0 and message in text, text
    assert "pytest_plugin.py" not in text and "Traceback" not in text, text


def test_a_marker_seed_out_of_range_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
import pytest

@pytest.mark.chaos(scenario="leader-kill", sim=True, seed=-1)
def test_one(chaos_run):
    pass
"""
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only")
    text = result.stdout.str() + result.stderr.str()
    assert result.ret != 0 and "chaos marker seed -1: a chaos seed must be 0 to 9223372036854775807, not -1" in text
    assert "pytest_plugin.py" not in text and "Traceback" not in text and "During handling" not in text, text
