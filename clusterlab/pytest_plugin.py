"""The clusterlab pytest plugin (registered as the ``clusterlab`` pytest11 entry point).

Fixtures
    ``cluster``      a started LocalCluster (a leader elected) in the test's tmp_path; parametrise it
                     indirectly: ``@pytest.mark.parametrize("cluster", [{"members": 5, "service":
                     "counter", "timeouts": Timeouts.fast()}], indirect=True)``. Every process it
                     started is checked gone afterwards.
    ``sim_cluster``  a SimCluster (same parameters, plus ``seed``).
    ``nemesis``      ``nemesis(cluster, "kill", who="leader")`` (or a Nemesis object) applies a fault
                     from clusterlab.chaos.nemesis to either kind of cluster; whatever is still applied is healed
                     at teardown.
    ``workload``     ``workload(cluster, service="kv", rate=100)``: a clusterlab.chaos.workload client with a
                     model-checked history; ``.run_for(seconds)`` drives it. A user's service:
                     ``cluster`` parametrised with ``"service": "pkg.mod:factory"`` and
                     ``workload(cluster, workload="pkg.workload:factory")`` (docs/your-service.md).
    ``chaos_run``    for a test marked ``@pytest.mark.chaos(scenario="leader-kill", seed=1, ...)``:
                     the RunResult of that scenario (clusterlab.chaos.runner.run_scenario) with the test's seed.
    ``chaos_runner`` ``chaos_runner("bridge", seed, members=5, sim=True)``: the same, called from a
                     test (the chaos suite parametrises scenarios and seeds with ``chaos_seeds``).
    ``chaos_sweep``  ``chaos_sweep("random", members=(3, 5), seeds=20)``: a seed sweep in the simulator
                     as one test (clusterlab.chaos.sweep); ``--chaos-sweep N`` sets N seeds (from 1),
                     ``--chaos-sweep-jobs J`` its processes. Returns the SweepSummary; ``.check()``
                     fails the test listing every failing seed, its trace and re-run command.

Marker ``chaos(scenario, seed=1 | [seeds], members=3, sim=False, duration=None, service="kv", ...)``:
other keywords go to run_scenario (a user's service: ``service="pkg.mod:factory",
workload="pkg.workload:factory"``). A marked test runs once per seed: the marker's, or
``--chaos-seed S`` / ``CLUSTERLAB_SEEDS=1,5,10-20``; ``--chaos-runs N`` runs N consecutive seeds from
the first. ``--trace-dir DIR`` keeps every run's trace as ``DIR/<test id>-<scenario>-n<members>-seed<S>-
<random>/`` (each a run directory with run.json and chaos.json, the run's summary and timings, so DIR
is a directory of runs for ``clusterlab check DIR``); without it a
passing run's files are removed and a failing one's kept. A failing chaos test prints the seed, the
trace directory and the two commands that re-run it (``clusterlab run ...`` and ``pytest ...``).

Tripwires (clusterlab.harness.tripwire) are on in every chaos run and cluster the plugin starts: a
service callback that reads the wall clock, uses the module-level random, OS randomness or a thread,
or reads ``cluster.role`` and then changes its state is a ``tripwire`` finding in the trace, and the
``tripwire`` check fails the run naming the user's file:line (``tripwire=False`` in the marker's or
fixture's keywords turns them off).

Works under pytest-xdist: every path is the test's own (tmp_path, or a fresh directory in DIR).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from clusterlab.chaos.limits import JOBS, MEMBERS, RATE, SEED, SEED_COUNT
from clusterlab.chaos.nemesis import NEMESES
from clusterlab.chaos.runner import check_run_arguments, run_scenario
from clusterlab.chaos.sweep import SweepConfig, SweepSummary, check_sweep, parse_seeds, run_sweep
from clusterlab.chaos.target import LocalTarget, SimTarget
from clusterlab.chaos.workload import SERVICES, make_workload
from clusterlab.harness.local import LocalCluster, pid_alive
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_recording import record_sim

SEEDS_ENV = "CLUSTERLAB_SEEDS"
_report_key = pytest.StashKey[dict[str, pytest.TestReport]]()
_chaos_key = pytest.StashKey[list[dict[str, Any]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("clusterlab", "clusterlab chaos runs")
    group.addoption(
        "--chaos-seed",
        default=None,
        help="seed(s) for @pytest.mark.chaos tests: 7, 1,2,3 or 10-20 "
        f"(also ${SEEDS_ENV}); default: each marker's seeds",
    )
    group.addoption(
        "--chaos-runs",
        type=int,
        default=None,
        metavar="N",
        help=f"run N consecutive seeds per chaos test, from its first seed [{SEED_COUNT.describe()}]",
    )
    group.addoption(
        "--chaos-sweep",
        type=int,
        default=None,
        metavar="N",
        help="seeds (1..N) of every chaos_sweep test: a simulator seed sweep run as one test "
        f"[{SEED_COUNT.describe()}]",
    )
    group.addoption(
        "--chaos-sweep-jobs",
        type=int,
        default=1,
        metavar="J",
        help=f"processes a chaos_sweep test runs its seeds on (default 1) [{JOBS.describe()}]",
    )
    group.addoption(
        "--chaos-sweep-reach",
        default=None,
        metavar="DIR",
        help="write each chaos_sweep's reach report (what its runs reached) to DIR/SCENARIO-nMEMBERS.json "
        "(print them with python -m clusterlab.chaos.reach DIR)",
    )
    group.addoption(
        "--trace-dir",
        default=None,
        metavar="DIR",
        help="keep every chaos run's trace under DIR (one run directory per test and seed)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "chaos(scenario=None, seed=1, members=3, sim=False, duration=None, "
        "service='kv', **run_scenario_kwargs): a chaos run (see clusterlab.pytest_plugin)",
    )
    for option, limit in (("--chaos-runs", SEED_COUNT), ("--chaos-sweep", SEED_COUNT), ("--chaos-sweep-jobs", JOBS)):
        value = config.getoption(option)
        if value is not None and (error := limit.error(option, value)) is not None:
            raise pytest.UsageError(error)
    chaos_seeds(config)  # a bad --chaos-seed / $CLUSTERLAB_SEEDS is a usage error before collection


def chaos_seeds(config: pytest.Config, default: Any = 1) -> list[int]:
    """The seeds a chaos test runs: --chaos-seed or $CLUSTERLAB_SEEDS, else ``default`` (an int or a
    list); --chaos-runs N: N consecutive seeds from the first."""
    spec = config.getoption("--chaos-seed") or os.environ.get(SEEDS_ENV)
    if spec:
        try:
            seeds = parse_seeds(str(spec))
        except ValueError as e:
            raise pytest.UsageError(f"--chaos-seed / ${SEEDS_ENV}: {e}") from None
    else:
        seeds = [int(s) for s in default] if isinstance(default, list | tuple | range) else [int(default)]
    runs = config.getoption("--chaos-runs")
    chosen = [seeds[0] + i for i in range(runs)] if runs else seeds
    for seed in (min(chosen), max(chosen)):
        if (error := SEED.error("a chaos seed", seed)) is not None:
            raise pytest.UsageError(error)
    return chosen


def _seeds_for(config: pytest.Config, marker: pytest.Mark) -> list[int]:
    try:
        return chaos_seeds(config, marker.kwargs.get("seed", 1))
    except (pytest.UsageError, TypeError, ValueError) as e:  # the marker's seed is not a seed
        problem = f"chaos marker seed {marker.kwargs.get('seed')!r}: {e}"
    misuse(problem)


# A sweep test's time bound grows with its seeds (pytest-timeout's ini default is for one run): up to
# two cluster sizes at a few CPU seconds a run, on a loaded machine; it still bounds a hung sweep.
SWEEP_TIMEOUT_S_PER_SEED = 6.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    n = config.getoption("--chaos-sweep")
    if not n:
        return
    for item in items:
        if "chaos_sweep" in getattr(item, "fixturenames", ()) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(300 + SWEEP_TIMEOUT_S_PER_SEED * n))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("chaos")
    if marker is not None and "chaos_seed" in metafunc.fixturenames:
        seeds = _seeds_for(metafunc.config, marker)
        metafunc.parametrize("chaos_seed", seeds, ids=[f"seed{s}" for s in seeds])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    item.stash.setdefault(_report_key, {})[report.when] = report
    runs = item.stash.get(_chaos_key, [])
    if report.failed and runs:
        report.sections.append(("chaos run", "\n".join(_describe_run(item, r) for r in runs)))
    return report


def _describe_run(item: pytest.Item, run: dict[str, Any]) -> str:
    lines = [
        f"scenario {run['scenario']} seed {run['seed']} on {run['members']} members"
        f"{' (simulator)' if run['sim'] else ''}: {run.get('error') or 'see the assertion'}",
        f"  trace (kept): {run['trace_dir']}",
    ]
    if run.get("rerun"):
        lines.append(f"  re-run: {run['rerun']}")
    # The interpreter running this pytest (a user's suite need not live in a .venv of its own).
    rerun = [sys.executable, "-m", "pytest", item.nodeid, "--chaos-seed", str(run["seed"])]
    lines.append(f"  re-run: {shlex.join(rerun)}")
    return "\n".join(lines)


def _passed(item: pytest.Item) -> bool:
    reports = item.stash.get(_report_key, {})
    return all(r.passed for r in reports.values()) and "call" in reports


def _safe(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid.split("::", 1)[-1])[:80]


def _run_dir(request: pytest.FixtureRequest, tmp_path: Path, what: str) -> tuple[Path, bool]:
    """A fresh directory for one run's trace, and whether it is kept whatever happens (--trace-dir)."""
    keep = request.config.getoption("--trace-dir")
    root = Path(keep) if keep else tmp_path
    root.mkdir(parents=True, exist_ok=True)
    prefix = f"{_safe(request.node.nodeid)}-{what}-" if keep else f"{what}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root)), bool(keep)


def misuse(message: str) -> NoReturn:
    """Fail the test with ``message`` alone: a wrong name or value given to the plugin is the test's
    mistake, told in one line (no traceback through the plugin)."""
    pytest.fail(message, pytrace=False)


def _check_run(scenario: str, seed: int, kwargs: dict[str, Any]) -> None:
    """A chaos run's scenario, seed and keywords (run_scenario's) checked before it starts (:func:`misuse`)."""
    problem = None
    try:
        bound = inspect.signature(run_scenario).bind(scenario, seed, **kwargs)
        wanted = inspect.signature(check_run_arguments).parameters
        check_run_arguments(**{k: v for k, v in bound.arguments.items() if k in wanted})
    except KeyError as e:  # an unknown scenario: its message lists the known ones
        problem = f"chaos run: {e.args[0]}"
    except (TypeError, ValueError) as e:  # a keyword run_scenario does not take, a value it refuses
        problem = f"chaos run {scenario!r}: {e}"
    if problem is not None:
        misuse(problem)  # outside the handler: the one line, not the exception it replaces


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture
def chaos_seed() -> int:
    """The seed of this chaos test (parametrised from the chaos marker, --chaos-seed, --chaos-runs)."""
    return 1  # replaced by pytest_generate_tests for marked tests


class ChaosRunner:
    """``chaos_runner(scenario, seed, members=3, sim=False, ...)``: run_scenario with the plugin's trace
    placement (--trace-dir), failure report (seed, trace, re-run commands) and clean-up."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.request = request
        self.tmp_path = tmp_path
        self.runs: list[tuple[Any, Path, Path, bool]] = []  # (result, run dir, work dir, kept)

    def __call__(self, scenario: str, seed: int, **kwargs: Any) -> Any:
        if "duration" in kwargs:
            kwargs["duration_s"] = kwargs.pop("duration")
        _check_run(scenario, seed, kwargs)
        tag = (
            f"{scenario}-n{kwargs.get('members', 3)}-seed{seed}"
            + ("-broken" if kwargs.get("fault_ack_before_append") else "")
            + ("-stale-read" if kwargs.get("fault_stale_read") else "")
        )
        run_dir, kept = _run_dir(self.request, self.tmp_path, tag)
        work = Path(tempfile.mkdtemp(prefix=f"work-{tag}-", dir=self.tmp_path))  # never kept under --trace-dir
        info: dict[str, Any] = {
            "scenario": scenario,
            "seed": seed,
            "members": kwargs.get("members", 3),
            "sim": kwargs.get("sim", False),
            "trace_dir": run_dir,
        }
        self.request.node.stash.setdefault(_chaos_key, []).append(info)
        kwargs.setdefault("determinism", True)  # the replay checks belong to a chaos run's verdict
        kwargs.setdefault("tripwire", True)  # the services' callbacks are watched (clusterlab.harness.tripwire)
        result = run_scenario(scenario, seed, directory=work, trace_dir=run_dir, **kwargs)
        info.update(error=result.error, rerun=result.rerun_command(), trace_dir=result.trace_dir)
        if kept:
            result.write_summary(run_dir)
        self.runs.append((result, run_dir, work, kept))
        return result

    def cleanup(self) -> None:
        if not _passed(self.request.node):
            return  # a failed run keeps everything (pytest keeps tmp_path)
        for _result, run_dir, work, kept in self.runs:
            shutil.rmtree(work, ignore_errors=True)
            if not kept:
                shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def chaos_runner(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChaosRunner]:
    """Run chaos scenarios from a test: ``result = chaos_runner("bridge", seed, members=5)``."""
    runner = ChaosRunner(request, tmp_path)
    yield runner
    runner.cleanup()


@pytest.fixture
def chaos_run(request: pytest.FixtureRequest, chaos_seed: int, chaos_runner: ChaosRunner) -> Any:
    """Run the scenario named by the test's ``chaos`` marker with ``chaos_seed``; the RunResult."""
    marker = request.node.get_closest_marker("chaos")
    if marker is None or not marker.kwargs.get("scenario"):
        misuse(f"{request.node.nodeid}: chaos_run needs @pytest.mark.chaos(scenario=...)")
    kwargs = {k: v for k, v in marker.kwargs.items() if k not in ("scenario", "seed")}
    return chaos_runner(marker.kwargs["scenario"], chaos_seed, **kwargs)


def _cluster_params(request: pytest.FixtureRequest) -> dict[str, Any]:
    params = dict(getattr(request, "param", None) or {})
    params.setdefault("members", 3)
    params.setdefault("service", "kv")
    params.setdefault("tripwire", True)  # the services' callbacks are watched (clusterlab.harness.tripwire)
    if (error := MEMBERS.error("cluster members", params["members"])) is not None:
        misuse(error)
    return params


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A started LocalCluster (3 members, kv, unless parametrised); every process gone afterwards."""

    params = _cluster_params(request)
    trace_dir, _ = _run_dir(request, tmp_path, "trace") if request.config.getoption("--trace-dir") else (None, 0)
    c = LocalCluster(directory=tmp_path / "cluster", trace_dir=trace_dir, scenario=_safe(request.node.nodeid), **params)
    try:
        with c:
            yield c
    finally:
        stray = [pid for pid in c.pids() if pid_alive(pid)]
        for pid in stray:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        assert not stray, f"processes outlived the cluster: {stray}"


@pytest.fixture
def sim_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A SimCluster (3 members, kv, seed 0, unless parametrised) with a leader elected, as ``cluster``;
    recorded when --trace-dir is given."""

    params = _cluster_params(request)
    rec = None
    with SimCluster(directory=tmp_path / "sim", **params) as c:
        if request.config.getoption("--trace-dir"):
            run_dir, _ = _run_dir(request, tmp_path, "trace")
            rec = record_sim(c, run_dir, None, _safe(request.node.nodeid), params.get("seed", 0))
        try:
            c.await_leader()
            yield c
        finally:
            if rec is not None:
                rec.close("ok" if _passed(request.node) else "failed")


def _target(cluster: Any, seed: int = 0) -> Any:
    import random

    cls = SimTarget if isinstance(cluster, SimCluster) else LocalTarget
    return cls(cluster, random.Random(f"nemesis:{seed}"))


class NemesisKit:
    """``kit(cluster, "partition", shape="minority-partition")`` applies a nemesis; ``kit.heal_all()`` heals them."""

    def __init__(self) -> None:
        self.applied: list[tuple[Any, Any]] = []  # (nemesis, target)
        self._targets: dict[int, Any] = {}

    def target(self, cluster: Any) -> Any:
        if id(cluster) not in self._targets:
            self._targets[id(cluster)] = _target(cluster)
        return self._targets[id(cluster)]

    def __call__(self, cluster: Any, nemesis: Any, **kwargs: Any) -> Any:

        if isinstance(nemesis, str):
            if nemesis not in NEMESES:
                misuse(f"nemesis: unknown nemesis {nemesis!r}; known: {', '.join(NEMESES)}")
            allowed = {f.name for f in dataclasses.fields(NEMESES[nemesis]) if f.init}
            if unknown := sorted(set(kwargs) - allowed):
                misuse(
                    f"nemesis {nemesis!r} has no option {', '.join(unknown)}; its options: {', '.join(sorted(allowed))}"
                )
            nemesis = NEMESES[nemesis](**kwargs)
        t = self.target(cluster)
        nemesis.apply(t)
        self.applied.append((nemesis, t))
        return nemesis

    def heal(self, nemesis: Any) -> None:
        for i, (n, t) in enumerate(self.applied):
            if n is nemesis:
                del self.applied[i]
                n.heal(t)
                return
        raise ValueError(f"{nemesis.describe()} is not applied")

    def heal_all(self) -> None:
        while self.applied:
            n, t = self.applied.pop()
            n.heal(t)


@pytest.fixture
def nemesis() -> Iterator[NemesisKit]:
    """Apply clusterlab.chaos.nemesis faults to a LocalCluster or SimCluster; what is left applied is healed."""
    kit = NemesisKit()
    yield kit
    with contextlib.suppress(Exception):  # the cluster may be closed already; its teardown reports
        kit.heal_all()


class WorkloadKit:
    """``kit(cluster, service="kv", rate=100, seed=0, workload=None)`` returns a workload with
    ``run_for(seconds)``; ``workload``: a user's ``package.module:factory`` (default: the sample service's)."""

    def __init__(self) -> None:
        self.workloads: list[Any] = []

    def __call__(
        self, cluster: Any, service: str = "kv", rate: float | None = None, seed: int = 0, workload: str | None = None
    ) -> Any:
        if workload is None and service not in SERVICES:
            misuse(f"workload: no workload for service {service!r}; known: {', '.join(SERVICES)} (or give workload=)")
        for name, limit, value in (("rate", RATE, rate), ("seed", SEED, seed)):
            if value is not None and (error := limit.error(f"workload {name}", value)) is not None:
                misuse(error)
        t = _target(cluster, seed)
        w: Any = make_workload(t, service, seed, rate, workload=workload)  # Any: the fixture adds run_for
        w.run_for = _run_for(t, w)
        self.workloads.append(w)
        return w

    def close(self) -> None:
        for w in self.workloads:
            w.close()


def _run_for(t: Any, w: Any) -> Callable[[float], None]:
    def run_for(seconds: float) -> None:
        """Drive the workload for ``seconds`` of the cluster's time (virtual in the simulator)."""
        t.advance(seconds, w.step)

    return run_for


@pytest.fixture
def workload() -> Iterator[WorkloadKit]:
    """Drive a cluster with clusterlab.chaos.workload clients (model-checked replies); closed at teardown."""
    kit = WorkloadKit()
    yield kit
    kit.close()


class ChaosSweep:
    """``chaos_sweep(scenario, members=(3,), seeds=N, **config)``: a sweep in the test's tmp_path."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.request = request
        self.tmp_path = tmp_path

    def __call__(
        self, scenario: str, *, members: tuple[int, ...] = (3,), seeds: int | list[int] = 10, **config: Any
    ) -> PluginSweep:
        n = self.request.config.getoption("--chaos-sweep")
        if isinstance(seeds, int) and (error := SEED_COUNT.error("chaos_sweep seeds", seeds)) is not None:
            misuse(error)
        chosen = list(range(1, n + 1)) if n else (list(range(1, seeds + 1)) if isinstance(seeds, int) else seeds)
        jobs = self.request.config.getoption("--chaos-sweep-jobs")
        sweep_config = _sweep_config(scenario, chosen, members, config, jobs)
        directory = Path(tempfile.mkdtemp(prefix=f"sweep-{scenario}-", dir=self.tmp_path))
        summary = run_sweep(sweep_config, directory, jobs=jobs)
        reach = summary.reach().to_json()
        print(
            f"chaos sweep {scenario}: {len(summary.records)} runs ({len(chosen)} seeds x sizes {members}), "
            f"{len(summary.failures)} failed, {summary.seeds_per_minute:.1f} runs/minute; reached "
            f"{reach['transitions_reached']} of {reach['transitions']} election transitions, never: "
            f"{', '.join(reach['never_reached']) or 'nothing left out'}"
        )
        if (out := self.request.config.getoption("--chaos-sweep-reach")) is not None:
            path = Path(out) / f"{scenario}-n{'-'.join(map(str, members))}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(reach, indent=1) + "\n")
        return PluginSweep(summary)


def _sweep_config(
    scenario: str, seeds: list[int], members: tuple[int, ...], config: dict[str, Any], jobs: int
) -> SweepConfig:
    """The SweepConfig a chaos_sweep call asks for, checked before any run (:func:`misuse`)."""
    try:
        sweep_config = SweepConfig(scenario, tuple(seeds), tuple(members), **config)
        check_sweep(sweep_config, jobs)
        return sweep_config
    except TypeError:  # a keyword SweepConfig does not take
        fields = ", ".join(f.name for f in dataclasses.fields(SweepConfig) if f.name not in ("scenario", "seeds"))
        problem = f"chaos_sweep takes {fields}, not {', '.join(sorted(config))}"
    except KeyError as e:  # an unknown scenario: its message lists the known ones
        problem = f"chaos_sweep: {e.args[0]}"
    except ValueError as e:
        problem = f"chaos_sweep: {e}"
    misuse(problem)


class PluginSweep:
    """A sweep's summary with ``check()``: fail the test naming every failing seed."""

    def __init__(self, summary: SweepSummary) -> None:
        self.summary = summary

    def check(self) -> None:
        if self.summary.failures:
            lines = [
                f"seed {r['seed']} on {r['members']} members: {r['error'] or r['kind']}\n"
                f"  trace: {r['run_dir']}\n  re-run: {r['rerun']}\n  shrink: clusterlab shrink {r['run_dir']}"
                for r in self.summary.failures
            ]
            pytest.fail(f"{len(lines)} of {len(self.summary.records)} sweep runs failed:\n" + "\n".join(lines))


@pytest.fixture
def chaos_sweep(request: pytest.FixtureRequest, tmp_path: Path) -> ChaosSweep:
    """Run a simulator seed sweep as one test: ``chaos_sweep("random", members=(3, 5)).check()``."""
    return ChaosSweep(request, tmp_path)
