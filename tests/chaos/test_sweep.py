"""Seed sweeps and shrinking (clusterlab.chaos.sweep / shrink, `clusterlab sweep` / `clusterlab shrink`):
explicit schedules replay exactly, a sweep runs on a multiprocess pool (a user scenario's lambda
included) and resumes from its directory, the broken build's failures are found and shrunk to a
pytest test that fails with the planted bug and passes without it, and bad input is one clear line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.nemesis import Kill
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.scenarios import SCENARIOS, Scenario
from clusterlab.chaos.schedule import (
    fault,
    load_schedule_option,
    quiet,
    random_schedule,
    schedule_from_spec,
    schedule_spec,
)
from clusterlab.chaos.shrink import ShrinkError, failure_tokens, shrink_run
from clusterlab.chaos.sweep import (
    SeedRunner,
    SweepConfig,
    SweepDirError,
    batches,
    check_sweep,
    load_records,
    mutant_kwargs,
    run_sweep,
)
from clusterlab.chaos.verdict import verify_run, verify_runs

pytestmark = [pytest.mark.chaos, pytest.mark.sim]


def test_a_sweep_plants_any_bug_of_the_one_catalogue() -> None:
    """The broken build and the stale read keep their switches (their runs read as before); every other
    name of the catalogue reaches run_scenario as a mutant; an unknown one lists the valid names."""
    got = mutant_kwargs(["commit-on-own-append", "ack-before-append", "stale-read"])
    assert got == {"fault_ack_before_append": True, "fault_stale_read": True, "mutants": ["commit-on-own-append"]}
    assert mutant_kwargs([]) == {}
    with pytest.raises(ValueError, match="unknown mutant 'nope'; valid mutants: vote-without-log-recency"):
        mutant_kwargs(["nope"])


def test_schedule_spec_round_trips_every_random_schedule() -> None:
    for seed in range(300):
        for sim in (True, False):
            s = random_schedule(seed, 10.0, sim=sim)
            spec = schedule_spec(s)
            json.loads(json.dumps(spec))  # plain JSON data
            again = schedule_from_spec(seed, spec)
            assert schedule_spec(again) == spec
            assert again.describe() == s.describe()


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"nemesis": "kil", "seconds": 1}], "unknown nemesis 'kil'"),
        ([{"nemesis": "kill", "seconds": 1, "whom": 2}], "kill has no option whom"),
        ([{"nemesis": "kill", "seconds": 1, "who": "nobody"}], "kill who must be one of leader, .*, not 'nobody'"),
        ([{"nemesis": "kill", "seconds": 1, "wipe": "yes"}], "kill option wipe must be true or false, not 'yes'"),
        ([{"nemesis": "kill", "seconds": 1, "member": 1}], "who='member' goes with member=N"),
        ([{"nemesis": "kill", "seconds": 1, "who": "member"}], "who='member' goes with member=N"),
        ([{"nemesis": "disk", "seconds": 1, "fault": "melt"}], "disk fault must be one of truncate, "),
        ([{"nemesis": "disk", "seconds": 1, "n_bytes": 1.5}], "disk option n_bytes must be a whole number, not 1.5"),
        ([{"nemesis": "partition", "seconds": 1, "shape": "donut"}], "unknown partition shape 'donut'; valid shapes"),
        ([{"nemesis": "pause", "seconds": 1, "who": "follower"}], "pause who must be one of leader, random"),
        ([{"nemesis": "kill", "seconds": -1}], "seconds must be a number from 0 to 3600"),
        ([{"quiet": "long"}], "seconds must be a number from 0 to 3600"),
        ([{"quiet": float("inf")}], "seconds must be a number from 0 to 3600, not inf"),
        ([{"quiet": float("nan")}], "seconds must be a number from 0 to 3600, not nan"),
        ([{"quiet": 1e12}], "seconds must be a number from 0 to 3600"),
        ([{"quiet": 2000}, {"nemesis": "kill", "seconds": 2000}], "last 4000 seconds in all; .* at most 3600"),
        ([{"quiet": 1, "nemesis": "kill"}], "a quiet step has only"),
        ([7], "expected an object"),
        ({"quiet": 1}, "a list of steps"),
    ],
)
def test_a_bad_explicit_schedule_is_named(steps: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        schedule_from_spec(1, steps)


def test_the_schedule_option_reads_a_file_or_inline_json(tmp_path: Path) -> None:
    steps = [{"quiet": 0.5}, {"nemesis": "kill", "seconds": 1.0, "who": "follower"}]
    f = tmp_path / "s.json"
    f.write_text(json.dumps(steps))
    assert load_schedule_option(str(f)) == steps
    assert load_schedule_option(json.dumps(steps)) == steps
    with pytest.raises(ValueError, match="neither a JSON list of steps nor a file"):
        load_schedule_option(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="not valid JSON"):
        load_schedule_option("[{")


def test_an_explicit_schedule_replays_the_seeds_run_exactly(tmp_path: Path) -> None:
    seeded = run_scenario("random", 4, sim=True, duration_s=4.0, directory=tmp_path / "a")
    explicit = run_scenario("random", 4, sim=True, schedule=seeded.steps, directory=tmp_path / "b")
    assert seeded.ok, seeded.failure_message()
    assert explicit.explicit and not seeded.explicit
    assert explicit.schedule == seeded.schedule and explicit.steps == seeded.steps
    for measure in ("acked", "invoked", "unknown", "op_counts", "elections_s", "recoveries_s", "recovery_s"):
        assert getattr(explicit, measure) == getattr(seeded, measure), measure
    assert "--schedule" in explicit.rerun_command() and explicit.run_id != seeded.run_id
    # Dropping the faults changes the run: the explicit steps are what ran.
    calm = run_scenario("random", 4, sim=True, schedule=[{"quiet": 2.0}], directory=tmp_path / "c")
    assert calm.ok and calm.schedule == ["quiet 2.00s"] and calm.elections_s == []


def test_a_sweep_runs_on_a_pool_and_resumes(tmp_path: Path) -> None:
    d = tmp_path / "sweep"
    first = run_sweep(SweepConfig("random", (1, 2, 3), (3,), duration_s=3.0), d, jobs=2)
    assert first.ok, first.failures
    assert first.ran_now == 3 and sorted(r["seed"] for r in first.records) == [1, 2, 3]
    assert {r["pid"] for r in first.records} - {os.getpid()}, "the runs ran in the pool's processes"
    assert not (d / "runs").exists() or not any((d / "runs").iterdir()), "passing runs' traces are removed"
    seen: list[int] = []
    more = run_sweep(
        SweepConfig("random", (1, 2, 3, 4, 5), (3,), duration_s=3.0),
        d,
        jobs=1,
        on_result=lambda r, done, total: seen.append(r["seed"]),
    )
    assert more.skipped == 3 and more.ran_now == 2 and sorted(seen) == [4, 5]
    assert sorted(r["seed"] for r in load_records(d)) == [1, 2, 3, 4, 5]
    assert json.loads((d / "summary.json").read_text())["runs"] == 5
    with pytest.raises(SweepDirError, match="holds another sweep"):
        run_sweep(SweepConfig("random", (1,), (5,), duration_s=3.0), d)


def test_a_user_scenario_with_a_lambda_sweeps_on_the_pool(tmp_path: Path) -> None:
    mine = Scenario(
        "my-leader-kill",
        "mine: the leader killed for a share of the run",
        lambda d, n: [quiet(d * 0.3), fault(Kill(who="leader"), d * 0.4), quiet(d * 0.3)],
        default_duration_s=2.0,
    )
    assert mine.name not in SCENARIOS
    s = run_sweep(SweepConfig(mine.name, (1, 2), (3,)), tmp_path / "sweep", jobs=2, scenario=mine)
    assert s.ok, s.failures
    assert all(r["faults"] == 1 for r in s.records)


def test_the_broken_build_is_found_and_shrunk_to_a_test(tmp_path: Path) -> None:
    # The broken build never converges (every follower trails by a block): a ChaosTimeout even
    # without faults, so the shrink takes every fault away.
    config = SweepConfig("random", (1, 2), (3,), duration_s=3.0, mutants=("ack-before-append",), settle_s=3.0)
    s = run_sweep(config, tmp_path / "sweep", jobs=2)
    assert len(s.failures) == 2 and s.by_kind() == {"ChaosTimeout": 2}, s.failures
    run_dir = Path(s.failures[0]["run_dir"])
    assert "--fault-ack-before-append" in s.failures[0]["rerun"]
    shrunk = shrink_run(run_dir, directory=tmp_path / "shrink", max_runs=12)
    assert shrunk.target == "ChaosTimeout"
    assert shrunk.original.faults >= 2 and shrunk.minimal.faults == 0
    assert shrunk.minimal.clients == 1 and shrunk.runs <= 12
    _run_printed_test(shrunk.pytest_source(), tmp_path)


@pytest.mark.slow
def test_a_fault_dependent_failure_shrinks_to_at_most_three_faults(tmp_path: Path) -> None:
    # Seed 5 on 5 members, broken build: the core's own assertion (a member asked to truncate its
    # committed log) fires; the faults that lead there are kept, the rest dropped.
    config = SweepConfig("random", (5,), (5,), mutants=("ack-before-append",), settle_s=5.0)
    s = run_sweep(config, tmp_path / "sweep", jobs=1)
    assert s.by_kind() == {"AssertionError": 1}, s.failures
    shrunk = shrink_run(s.failures[0]["run_dir"], directory=tmp_path / "shrink", max_runs=40)
    assert shrunk.target == "AssertionError"
    assert 1 <= shrunk.minimal.faults <= 3 < shrunk.original.faults, shrunk.log
    _run_printed_test(shrunk.pytest_source(), tmp_path)


def _run_printed_test(source: str, tmp_path: Path) -> None:
    """The printed test is valid Python whose tests pass: the schedule passes without the bug and
    fails the target with it."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "shrunk_test.py", "exec"), namespace)
    tests = sorted(k for k in namespace if k.startswith("test_"))
    assert len(tests) == 2 and tests[0].endswith("_catches_the_bug"), tests
    for i, name in enumerate(tests):
        namespace[name](tmp_path / f"printed{i}")


def test_shrink_refuses_what_it_cannot_shrink(tmp_path: Path) -> None:
    with pytest.raises(ShrinkError, match=r"no chaos\.json"):
        shrink_run(tmp_path)
    passing = run_sweep(SweepConfig("random", (1,), (3,), duration_s=2.0), tmp_path / "s", keep_traces=True)
    with pytest.raises(ShrinkError, match="replayed passes"):
        shrink_run(passing.records[0]["run_dir"], directory=tmp_path / "shrink")
    real = tmp_path / "real"
    real.mkdir()
    (real / "chaos.json").write_text(json.dumps({"scenario": "random", "seed": 1, "members": 3, "steps": []}))
    with pytest.raises(ShrinkError, match="real-process run"):
        shrink_run(real)


def test_failure_tokens_name_the_error_and_the_checks(tmp_path: Path) -> None:
    broken = run_scenario("leader-kill", 1, sim=True, directory=tmp_path, fault_ack_before_append=True)
    tokens = failure_tokens(broken)
    assert {"SafetyViolation", "durability", "committed_prefix"} <= tokens, tokens


def test_runs_judged_together_get_the_verdicts_they_get_alone(tmp_path: Path) -> None:
    # A sweep judges a batch of runs in one DuckDB (verify_runs): each run's violations stay its own.
    broken = run_scenario(
        "leader-kill", 1, sim=True, directory=tmp_path / "broken", fault_ack_before_append=True, verify=False
    )
    clean = run_scenario("leader-kill", 2, sim=True, directory=tmp_path / "clean", verify=False)
    assert broken.verdict is None and clean.verdict is None  # verify=False: left to the caller
    together = verify_runs([broken.trace_dir, clean.trace_dir])
    for r in (broken, clean):
        alone = verify_run(r.trace_dir)
        assert together[str(r.trace_dir)].violations == alone.violations
        assert together[str(r.trace_dir)].elections_s == alone.elections_s
    assert not together[str(clean.trace_dir)].failed()
    assert {"durability", "committed_prefix"} <= set(together[str(broken.trace_dir)].failed())


def test_a_batch_of_seeds_gives_the_records_of_one_seed_at_a_time(tmp_path: Path) -> None:
    config = SweepConfig("random", (1, 2, 3), (3,), duration_s=2.0, mutants=("ack-before-append",), settle_s=3.0)
    batch = SeedRunner(config, str(tmp_path / "batch")).run_batch([(1, 3), (2, 3), (3, 3)])
    one = [SeedRunner(config, str(tmp_path / "one"))((seed, 3)) for seed in (1, 2, 3)]
    keys = ("seed", "members", "ok", "kind", "error", "failed_checks", "faults", "rerun")
    assert [{k: r[k] for k in keys} for r in batch] == [{k: r[k] for k in keys} for r in one]
    assert not any(r["ok"] for r in batch)
    tasks = [(s, 3) for s in range(100)]
    assert batches(tasks, jobs=2) == [tasks[i : i + 8] for i in range(0, 100, 8)]  # the last one of 4
    assert [len(b) for b in batches([(s, 3) for s in range(6)], jobs=2)] == [1] * 6  # every worker gets some


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusterlab.cli", *args], capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "nope"], "unknown scenario 'nope'"),
        (["sweep", "random", "--seeds", "5-1"], "empty range '5-1'"),
        (["sweep", "random", "--seeds", "x"], "'x' is not a seed"),
        (["sweep", "random", "--members", "4"], "runs on 3 or 5 members, not 4"),
        (["sweep", "random", "--mutant", "nope"], "unknown mutant 'nope'"),
        (["sweep", "kill-service"], "needs real processes"),
        (["sweep", "random", "--jobs", "0"], "--jobs: must be 1 to 256, not 0"),
        (["shrink", "/nonexistent/run"], "/nonexistent/run: no such run directory"),
        (["run", "random", "--sim", "--schedule", '[{"nemesis": "kil"}]'], "unknown nemesis 'kil'"),
    ],
)
def test_cli_bad_input_is_one_line(args: list[str], message: str) -> None:
    r = _cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_cli_sweep_finds_the_broken_build_and_resumes(tmp_path: Path) -> None:
    d = tmp_path / "sweep"
    args = ["sweep", "random", "--seeds", "1-2", "--duration", "2", "--settle", "3", "--jobs", "2", "--dir", str(d)]
    r = _cli(*args, "--fault-ack-before-append", "--json", str(tmp_path / "s.json"))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "seeds/minute" in r.stdout and "ChaosTimeout" in r.stdout and "clusterlab shrink" in r.stdout
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["runs"] == 2 and summary["failed"] == 2 and summary["by_kind"] == {"ChaosTimeout": 2}
    again = _cli(*args, "--mutant", "ack-before-append")  # the same sweep: nothing left to run
    assert again.returncode == 1 and "0 now, 2 from an earlier session" in again.stdout, again.stdout
    other = _cli(*args)  # another sweep (no planted bug) in the same directory
    assert other.returncode == 2 and "holds another sweep" in other.stderr, other.stderr


@pytest.mark.spark
@pytest.mark.slow
def test_a_sweep_runs_on_spark_executors(tmp_path: Path) -> None:
    from clusterlab.spark.sweep import spark_mapper

    d = tmp_path / "sweep"
    config = SweepConfig("random", (1, 2, 3), (3,), duration_s=2.0, mutants=("ack-before-append",), settle_s=3.0)
    s = run_sweep(config, d, mapper=spark_mapper("local[2]", d))
    assert sorted(r["seed"] for r in s.records) == [1, 2, 3]
    assert len(s.failures) == 3 and all(Path(r["run_dir"], "chaos.json").is_file() for r in s.failures)
    assert {r["pid"] for r in s.records} - {os.getpid()}, "the runs ran in Spark's Python workers"
    assert sorted(p.name for p in (d / "spark").glob("*.json")) == ["3-1.json", "3-2.json", "3-3.json"]


BROKEN_SWEEP_SUITE = """
def test_sweep(chaos_sweep):
    chaos_sweep("random", seeds=1, duration_s=2.0, settle_s=3.0, mutants=("ack-before-append",)).check()
"""


def test_a_failing_sweep_fails_its_test_naming_every_seed(tmp_path: Path) -> None:
    (tmp_path / "test_user_sweep.py").write_text(BROKEN_SWEEP_SUITE)
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--chaos-sweep", "2", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
    )
    assert r.returncode == 1, r.stdout[-3000:]
    assert "2 of 2 sweep runs failed" in r.stdout, r.stdout[-3000:]
    for seed in (1, 2):
        assert f"seed {seed} on 3 members: ChaosTimeout" in r.stdout
    assert "clusterlab shrink" in r.stdout and "--fault-ack-before-append" in r.stdout


def test_a_crash_in_the_simulator_is_the_runs_error(tmp_path: Path) -> None:
    # Broken build, random seed 5 on 5 members: the core's own assertion fires (a member is asked to
    # truncate committed log); the run reports it as its error instead of raising.
    r = run_scenario("random", 5, members=5, sim=True, settle_s=5.0, fault_ack_before_append=True, directory=tmp_path)
    assert not r.ok and r.error is not None
    assert r.error.startswith("AssertionError: member") and "truncate committed log" in r.error, r.error
    assert failure_tokens(r) >= {"AssertionError"}


def test_a_service_mix_runs_each_service_in_turn(tmp_path: Path) -> None:
    config = SweepConfig("random", (1, 2, 3), (3,), duration_s=2.0, service="kv,counter,timers")
    s = run_sweep(config, tmp_path / "sweep", jobs=1)
    assert s.ok, s.failures
    assert {r["seed"]: r["service"] for r in s.records} == {1: "counter", 2: "timers", 3: "kv"}
    assert s.by_service() == {"counter": (1, 0), "kv": (1, 0), "timers": (1, 0)}
    assert all(f"--service {r['service']}" in r["rerun"] or r["service"] == "kv" for r in s.records)


@pytest.mark.parametrize(
    ("service", "extra", "message"),
    [
        ("kv,kv", {}, "a service mix names distinct sample services"),
        ("kv,my.module:factory", {}, "a service mix names distinct sample services"),
        ("kv,timers", {"clients": 3}, "the timers workload runs at most 1 client, not 3"),
        ("kv,counter", {"mutants": ("stale-read",)}, "mutant stale-read plants a bug in the kv service, not 'counter'"),
    ],
)
def test_a_bad_service_mix_is_refused_before_any_run(service: str, extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        check_sweep(SweepConfig("random", (1,), (3,), service=service, **extra))
