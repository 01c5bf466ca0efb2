"""The pytest plugin seen from a user's suite: the chaos marker and its seeds, --chaos-runs,
--chaos-seed, --trace-dir (a directory of run directories), the failure report (seed, kept trace,
both re-run commands) under xdist; and the cluster / nemesis / workload fixtures on real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clusterlab.core.consensus.context import Role

USER_SUITE = """
import pytest

@pytest.mark.chaos(scenario="leader-kill", sim=True, seed=[3, 4], duration=3.0)
def test_survives(chaos_run):
    assert chaos_run.ok, chaos_run.failure_message()

@pytest.mark.chaos(scenario="leader-kill", sim=True, seed=1, duration=3.0, fault_ack_before_append=True)
def test_broken(chaos_run):
    assert chaos_run.ok, chaos_run.failure_message()
"""


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user.py").write_text(USER_SUITE)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.chaos
@pytest.mark.sim
def test_marker_seeds_trace_dir_and_failure_report_under_xdist(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    done = _pytest(tmp_path, "-n", "2", "--trace-dir", str(traces))
    out = done.stdout
    assert done.returncode == 1, out
    assert "2 passed" in out and "1 failed" in out, out
    assert "test_survives[seed3]" not in out.split("short test summary")[-1]
    assert "scenario leader-kill seed 1 on 3 members (simulator)" in out, out
    assert "re-run: clusterlab run leader-kill --seed 1 --members 3 --duration 3 --sim --fault-ack-before-append" in out
    # The interpreter that ran pytest, not a guessed .venv/bin/python.
    assert f"re-run: {sys.executable} -m pytest 'test_user.py::test_broken[seed1]' --chaos-seed 1" in out
    assert f"trace (kept): {traces}" in out
    runs = sorted(p.parent for p in traces.glob("*/run.json"))
    assert len(runs) == 3, list(traces.iterdir())  # one run directory per test and seed, side by side
    summaries = [json.loads((r / "chaos.json").read_text()) for r in runs]
    assert sorted((s["seed"], s["ok"]) for s in summaries) == [(1, False), (3, True), (4, True)]


@pytest.mark.chaos
@pytest.mark.sim
def test_chaos_runs_and_chaos_seed_pick_the_seeds(tmp_path: Path) -> None:
    listed = _pytest(tmp_path, "--collect-only", "--chaos-runs", "3", "-k", "survives").stdout
    assert all(f"test_survives[seed{s}]" in listed for s in (3, 4, 5)), listed
    listed = _pytest(tmp_path, "--collect-only", "--chaos-seed", "9,20-21").stdout
    assert all(f"test_broken[seed{s}]" in listed for s in (9, 20, 21)), listed
    bad = _pytest(tmp_path, "--collect-only", "--chaos-seed", "x")
    assert bad.returncode != 0 and "'x' is not a seed" in bad.stdout + bad.stderr


@pytest.mark.chaos
@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("cluster", [{"members": 3, "service": "kv"}], indirect=True)
def test_cluster_nemesis_and_workload_fixtures(cluster: Any, nemesis: Any, workload: Any) -> None:
    # kv: its requests are resent across the pause (the service deduplicates them), so its model
    # checks replies however slowly the loaded machine answers; a counter op left unanswered makes
    # the count unknowable from there on (its ops are sent once).
    w = workload(cluster, service="kv", rate=100)
    for _ in range(15):  # bounded: the first acknowledgement waits for the sessions to connect
        w.run_for(1.0)
        if w.acked > 0:
            break
    before = w.acked
    assert before > 0
    leader = cluster.await_leader()
    paused = nemesis(cluster, "pause", who="leader")
    assert paused.victims == [leader]
    new_leader = cluster.await_leader(15.0, exclude={leader})
    nemesis.heal(paused)
    # Drive the workload until an op is acknowledged again, bounded: a request sent to the paused
    # leader is resent to the new one.
    for _ in range(15):
        w.run_for(1.0)
        if w.acked > before:
            break
    assert w.acked > before and w.service_workload.checked > 0
    cluster.await_condition(
        lambda: cluster.status(leader) is not None and cluster.status(leader).role == Role.FOLLOWER,
        15.0,
        "old leader follows",
    )
    assert new_leader != leader


SWEEP_SUITE = """
def test_sweep_bound(chaos_sweep, request):
    marker = request.node.get_closest_marker("timeout")
    print("TIMEOUT", marker.args[0] if marker else None)
"""


@pytest.mark.chaos
def test_chaos_sweep_n_gives_the_sweep_test_a_time_bound_growing_with_n(tmp_path: Path) -> None:
    """pytest-timeout's default bounds one run; a `--chaos-sweep 500` test needs far longer (the CI
    sweep was cut at 300 s), and without the option it keeps the default."""
    (tmp_path / "test_sweep_user.py").write_text(SWEEP_SUITE)

    def bound(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", "test_sweep_user.py", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return next(line for line in done.stdout.splitlines() if line.startswith("TIMEOUT"))

    assert bound("--chaos-sweep", "500") == "TIMEOUT 3300.0"
    assert bound() == "TIMEOUT None"
