"""Seed sweeps: one scenario over many seeds (and cluster sizes) in the simulator, on every core
(``multiprocess``, which pickles the closures and lambdas of user-defined scenarios with dill) or on
a Spark cluster's executors (``clusterlab.spark.sweep``; the map function is passed in, since
this layer sits below golden).

A sweep directory remembers what ran, so an interrupted sweep resumes where it stopped:

* ``sweep.json``     the configuration (a resumed sweep must have the same one; seeds may differ);
* ``results.jsonl``  one line per run (seed, members, ok, failure kind, error, failed checks, times);
* ``runs/n<M>-s<S>/`` a failing run's directory (``trace/`` and ``chaos.json``, what ``clusterlab
  shrink`` reads); a passing run's is removed unless ``keep_traces``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clusterlab.chaos.determinism import elsewhere_cpu_s
from clusterlab.chaos.limits import JOBS, MAX_SEEDS, SEED, SEED_COUNT, run_arguments_error
from clusterlab.chaos.reach import SweepReach, run_reach
from clusterlab.chaos.runner import RunResult, apply_verdict, check_dedupe, check_run_arguments, run_scenario
from clusterlab.chaos.scenarios import Scenario
from clusterlab.chaos.scenarios import scenario as find_scenario
from clusterlab.chaos.schedule import schedule_from_spec, schedule_spec
from clusterlab.chaos.verdict import Verdict, verify_run, verify_runs
from clusterlab.harness.services import SERVICES as SERVICE_REGISTRY

from clusterlab.testing.mutants import ACK_BEFORE_APPEND, STALE_READ, mutant_set

# Planted bugs of the catalogue (clusterlab.testing.mutants) that a sweep runs through run_scenario's
# older switches, so its runs, run ids and chaos.json read as the broken build's and the stale read's.
SWITCHES: dict[str, str] = {ACK_BEFORE_APPEND: "fault_ack_before_append", STALE_READ: "fault_stale_read"}

Task = tuple[int, int]  # (seed, members)
# Runs the tasks and yields one record per task, in any order (a pool, or Spark executors).
Mapper = Callable[[Callable[[Task], dict[str, Any]], list[Task]], Iterable[dict[str, Any]]]


def parse_seeds(spec: str) -> list[int]:
    """``"7"``, ``"1,2,3"``, ``"100-150"`` (inclusive) or a comma-separated mix; ValueError naming what
    is wrong otherwise (``clusterlab sweep --seeds``, the pytest plugin's --chaos-seed). Seeds are
    :data:`~clusterlab.chaos.limits.SEED`, at most :data:`~clusterlab.chaos.limits.MAX_SEEDS` of them."""
    seeds: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise ValueError(f"seeds {spec!r}: {part!r} is not a seed or a range like 10-20") from None
        if last < first:
            raise ValueError(f"seeds {spec!r}: empty range {part!r}")
        if (error := SEED.error("a seed", last)) is not None:
            raise ValueError(f"seeds {spec!r}: {error}")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise ValueError(f"seeds {spec!r}: more than {MAX_SEEDS} seeds; sweep them in parts")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise ValueError(f"seeds {spec!r} name no seed")
    return seeds


def mutant_kwargs(mutants: Iterable[str]) -> dict[str, Any]:
    """run_scenario's keyword arguments for these names of the mutant catalogue; ValueError
    (UnknownMutant) naming an unknown one and listing the valid names."""
    chosen = mutant_set(mutants)
    kwargs: dict[str, Any] = {SWITCHES[name]: True for name in chosen if name in SWITCHES}
    others = sorted(chosen - SWITCHES.keys())
    return kwargs | ({"mutants": others} if others else {})


@dataclass(frozen=True)
class SweepConfig:
    """What every run of a sweep shares; the seeds and sizes are its tasks."""

    scenario: str
    seeds: tuple[int, ...]
    members: tuple[int, ...] = (3,)
    duration_s: float | None = None
    mutants: tuple[str, ...] = ()
    clients: int | None = None
    service: str = "kv"  # one service, or a mix of sample services ("kv,counter,timers": one per seed in turn)
    rate: float | None = None
    settle_s: float = 30.0
    workload: str | None = None  # the service's workload, package.module:factory (None: the sample's)
    buggify: bool = False  # the simulator's seeded fault points (clusterlab.testing.buggify)
    determinism: bool = True  # the replay checks in each run's verdict (clusterlab.chaos.determinism)

    def tasks(self) -> list[Task]:
        return [(seed, m) for seed in self.seeds for m in self.members]

    def identity(self) -> dict[str, Any]:
        """What must match for a sweep directory to be resumed (all but the seeds)."""
        d = asdict(self)
        del d["seeds"]
        d["members"] = sorted(d["members"])
        d["mutants"] = sorted(d["mutants"])
        if d["workload"] is None:
            del d["workload"]  # a sweep of a sample service resumes as before workloads were named
        if not d["buggify"]:
            del d["buggify"]  # and one without fault points as before they existed
        if d["determinism"]:
            del d["determinism"]  # and one with the replay checks as before they could be left out
        return d

    @property
    def services(self) -> list[str]:
        """The services the sweep's runs take in turn (one unless ``service`` names a mix)."""
        return self.service.split(",")

    def service_of(self, seed: int) -> str:
        """The service seed ``seed`` runs: the mix's services in turn, by seed."""
        return self.services[seed % len(self.services)]

    def run_kwargs(self, seed: int = 0) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "duration_s": self.duration_s,
            "service": self.service_of(seed),
            "rate": self.rate,
            "settle_s": self.settle_s,
            **mutant_kwargs(self.mutants),
        }
        if self.clients is not None:
            kwargs["clients"] = self.clients
        if self.workload is not None:
            kwargs["workload"] = self.workload
        if self.buggify:
            kwargs["buggify"] = True
        return kwargs


def failure_kind(result: RunResult) -> str | None:
    """What failed, coarsely, for grouping runs: the run's error class (SafetyViolation, ChaosTimeout…)
    and the failed trace checks; None for a passing run."""
    if result.ok:
        return None
    parts = []
    if result.error:
        parts.append(result.error.split(":", 1)[0])
    if result.verdict is None:
        parts.append("no verdict")
    elif result.verdict.failed():
        parts.append("checks " + ",".join(sorted(result.verdict.failed())))
    elif not result.verdict.ok:
        parts.append(result.verdict.status)
    return " + ".join(parts)


def guarded_run(
    spec: Scenario, seed: int, *, members: int, directory: Path, verify: bool = True, **kwargs: Any
) -> RunResult:
    """run_scenario in the simulator, a crash included: an exception the run did not expect (an
    assertion of the core's own invariants, say) is the run's error, named by its class, not the
    sweep's end. The result's steps are the schedule either way (what shrinking replays).
    ``verify=False``: no verdict on the trace yet (the caller judges it, see :func:`judge_traces`)."""
    try:
        return run_scenario(spec, seed, members=members, sim=True, directory=directory, verify=verify, **kwargs)
    except Exception as e:  # every failure is a finding; the sweep goes on
        steps = kwargs.get("schedule")
        if steps is None:
            plan = spec.schedule(seed, kwargs.get("duration_s"), sim=True, members=members)
        else:
            plan = schedule_from_spec(seed, steps)
        duration = kwargs.get("duration_s") or spec.default_duration_s
        result = RunResult(spec.name, seed, members, True, duration, directory, directory / "trace", plan.describe())
        result.steps, result.explicit = schedule_spec(plan), steps is not None
        result.service, result.workload = kwargs.get("service", "kv"), kwargs.get("workload")
        result.clients = kwargs.get("clients", result.clients)
        result.fault_ack_before_append = bool(kwargs.get("fault_ack_before_append"))
        result.fault_stale_read = bool(kwargs.get("fault_stale_read"))
        result.mutants = frozenset(kwargs.get("mutants", ()))
        result.buggify = bool(kwargs.get("buggify"))
        result.rate, result.settle_s = kwargs.get("rate"), kwargs.get("settle_s", result.settle_s)
        first = (str(e).splitlines() or [""])[0]
        result.error = f"{type(e).__name__}: {first}"
        if verify and result.trace_dir.is_dir():
            judged = judge_traces([result.trace_dir], determinism=bool(kwargs.get("determinism")))
            result.verdict = judged.get(str(result.trace_dir))
        return result


def judge_traces(trace_dirs: list[Path], *, determinism: bool = False) -> dict[str, Verdict]:
    """The verdicts of these traces, judged together (one DuckDB for all: its fixed cost per query
    is most of a small run's verdict); a trace that cannot be judged (cut off mid-write, say) has
    none, and the others are then judged one by one. ``determinism`` adds the replay checks. Keyed
    by ``str(trace_dir)``."""
    if not trace_dirs:
        return {}
    try:
        return verify_runs(trace_dirs, determinism=determinism)
    except Exception:  # one unreadable trace must not cost the others their verdicts
        out: dict[str, Verdict] = {}
        for d in trace_dirs:
            try:
                out[str(d)] = verify_run(d, determinism=determinism)
            except Exception:  # a trace cut off mid-write: the run's error is the finding
                continue
        return out


@contextlib.contextmanager
def rare_full_collections(gen2_threshold: int = 1000) -> Iterator[None]:
    """No full garbage collection while the block runs (restored after). A worker's heap is large
    (pyarrow, DuckDB, a run's rows): each full collection walked it for ~0.1 s, ~7 % of a sweep's CPU,
    and found little; the young generations still collect the simulator's short-lived cycles."""
    first, second, third = gc.get_threshold()
    gc.set_threshold(first, second, max(third, gen2_threshold))
    try:
        yield
    finally:
        gc.set_threshold(first, second, third)


def run_dir_name(seed: int, members: int) -> str:
    return f"n{members}-s{seed}"


@dataclass
class SeedRunner:
    """Runs tasks of a sweep and returns their records (a picklable callable: it travels to pool
    workers and Spark executors, carrying a user-defined Scenario with it). :meth:`run_batch` runs
    several and judges their traces together, which is what the process pool calls."""

    config: SweepConfig
    directory: str
    keep_traces: bool = False
    scenario: Scenario | None = None  # a user-defined scenario (else the config's name is looked up)

    def __call__(self, task: Task) -> dict[str, Any]:
        return self.run_batch([task])[0]

    def run_batch(self, tasks: list[Task]) -> list[dict[str, Any]]:
        """Run each task, judge all their traces at once, return one record per task (in order)."""
        with rare_full_collections():
            return self._run_batch(tasks)

    def _run_batch(self, tasks: list[Task]) -> list[dict[str, Any]]:
        spec = self.scenario or find_scenario(self.config.scenario)
        done: list[tuple[Task, Path, RunResult, float, float]] = []
        for seed, members in tasks:
            run_dir = Path(self.directory) / "runs" / run_dir_name(seed, members)
            if run_dir.exists():
                shutil.rmtree(run_dir)  # a run interrupted by the last attempt at this sweep
            started, cpu = time.monotonic(), time.process_time()
            result = guarded_run(
                spec, seed, members=members, directory=run_dir, verify=False, **self.config.run_kwargs(seed)
            )
            done.append(((seed, members), run_dir, result, time.monotonic() - started, time.process_time() - cpu))
        started, cpu = time.monotonic(), time.process_time() + elsewhere_cpu_s()
        unjudged = [r.trace_dir for _t, _d, r, _e, _c in done if r.verdict is None and r.trace_dir.is_dir()]
        verdicts = judge_traces(unjudged, determinism=self.config.determinism)
        # Each run's share of the joint verdict, so elapsed_s and cpu_s stay what one run costs.
        share = max(1, len(unjudged))
        judge_cpu = (time.process_time() + elsewhere_cpu_s() - cpu) / share  # the replay workers' CPU too
        judge_elapsed = (time.monotonic() - started) / share
        records = []
        for (seed, members), run_dir, result, elapsed, cpu_s in done:
            verdict = verdicts.get(str(result.trace_dir))
            if verdict is not None:
                apply_verdict(result, verdict)
                elapsed, cpu_s = elapsed + judge_elapsed, cpu_s + judge_cpu
            records.append(self._record(seed, members, run_dir, result, elapsed, cpu_s))
        return records

    def _record(
        self, seed: int, members: int, run_dir: Path, result: RunResult, elapsed: float, cpu_s: float
    ) -> dict[str, Any]:
        kind = failure_kind(result)
        record = {
            "seed": seed,
            "members": members,
            "ok": result.ok,
            "kind": kind,
            "error": result.error,
            "failed_checks": result.verdict.failed() if result.verdict else None,
            "elapsed_s": round(elapsed, 3),
            "cpu_s": round(cpu_s, 3),  # the run's own CPU (its verdict included): its cost whatever the load
            "faults": sum(1 for s in result.steps if "nemesis" in s),
            "run_dir": None if result.ok and not self.keep_traces else str(run_dir),
            "rerun": result.rerun_command(),
            "pid": os.getpid(),
            "service": result.service,
            "reach": run_reach(result.trace_dir) if result.trace_dir.is_dir() else None,
        }
        if result.ok and not self.keep_traces:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            result.write_summary(run_dir)
        return record


# Runs a worker takes at a time (their traces judged together): larger amortises the verdict's fixed
# cost further, smaller keeps the progress bar moving and the workers evenly loaded at the end.
MAX_BATCH = 8


def batches(tasks: list[Task], jobs: int, most: int = MAX_BATCH) -> list[list[Task]]:
    """``tasks`` cut into batches of at most ``most``, small enough that every worker gets about four."""
    size = max(1, min(most, len(tasks) // (4 * max(1, jobs))))
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]


def pool_mapper(jobs: int) -> Mapper:
    """Run tasks on ``jobs`` processes (``multiprocess``: dill pickles closures); ``jobs`` 1 runs them here.
    A :class:`SeedRunner` gets them in batches (:func:`batches`, judged together); any other callable one by one."""

    def run(fn: Callable[[Task], dict[str, Any]], tasks: list[Task]) -> Iterator[dict[str, Any]]:
        run_batch = getattr(fn, "run_batch", None)
        if jobs == 1:
            if run_batch is None:
                yield from map(fn, tasks)
            else:
                for batch in batches(tasks, jobs):
                    yield from run_batch(batch)
            return
        import multiprocess  # type: ignore[import-untyped]

        pool = multiprocess.Pool(jobs)
        try:
            if run_batch is None:
                yield from pool.imap_unordered(fn, tasks, chunksize=1)
            else:
                for records in pool.imap_unordered(run_batch, batches(tasks, jobs), chunksize=1):
                    yield from records
            pool.close()
        finally:
            pool.terminate()  # also on an interrupt or an error: no worker outlives the sweep
            pool.join()

    return run


@dataclass
class SweepSummary:
    """Every record of the sweep directory (earlier sessions included) and this session's pace."""

    config: SweepConfig
    directory: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    ran_now: int = 0  # runs done in this session
    elapsed_s: float = 0.0  # this session's wall time
    skipped: int = 0  # tasks already done by an earlier session

    @property
    def failures(self) -> list[dict[str, Any]]:
        return sorted((r for r in self.records if not r["ok"]), key=lambda r: (r["seed"], r["members"]))

    @property
    def ok(self) -> bool:
        return not self.failures

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(r["kind"] for r in self.failures).most_common())

    def by_members(self) -> dict[int, tuple[int, int]]:
        """Per cluster size: (runs, failures)."""
        out: dict[int, tuple[int, int]] = {}
        for r in self.records:
            runs, failed = out.get(r["members"], (0, 0))
            out[r["members"]] = (runs + 1, failed + (not r["ok"]))
        return dict(sorted(out.items()))

    def by_service(self) -> dict[str, tuple[int, int]]:
        """Per service of a mix: (runs, failures)."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.records:
            service = r.get("service") or self.config.service_of(r["seed"])
            runs, failed = out.get(service, (0, 0))
            out[service] = (runs + 1, failed + (not r["ok"]))
        return dict(sorted(out.items()))

    @property
    def seeds_per_minute(self) -> float:
        return 60.0 * self.ran_now / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def reach(self) -> SweepReach:
        """What the sweep's runs reached (records of runs from before reach was recorded count as none)."""
        reach = SweepReach()
        for r in self.records:
            reach.add(r.get("reach"))
        return reach

    @property
    def cpu_s_per_run(self) -> float | None:
        """Mean CPU seconds of a run (this session's): what a run costs, independent of the machine's load."""
        cpu = [r["cpu_s"] for r in self.records[len(self.records) - self.ran_now :] if "cpu_s" in r]
        return sum(cpu) / len(cpu) if cpu else None

    def to_json(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config) | {"seeds": [min(self.config.seeds), max(self.config.seeds)]},
            "directory": str(self.directory),
            "runs": len(self.records),
            "ran_now": self.ran_now,
            "skipped": self.skipped,
            "failed": len(self.failures),
            "by_kind": self.by_kind(),
            "elapsed_s": round(self.elapsed_s, 2),
            "seeds_per_minute": round(self.seeds_per_minute, 1),
            "cpu_s_per_run": None if self.cpu_s_per_run is None else round(self.cpu_s_per_run, 3),
            "failures": self.failures,
            "reach": self.reach().to_json(),
        }


class SweepDirError(ValueError):
    """The sweep directory holds another sweep (or is not one)."""


def load_records(directory: Path) -> list[dict[str, Any]]:
    """The runs a sweep directory has recorded (a line cut short by a kill is ignored: that run re-runs)."""
    path = directory / "results.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _open_directory(config: SweepConfig, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    meta = directory / "sweep.json"
    if meta.exists():
        try:
            held = json.loads(meta.read_text())
        except json.JSONDecodeError as e:
            raise SweepDirError(f"{meta} is not a sweep's configuration ({e})") from None
        if held != config.identity():
            diff = {k: (held.get(k), v) for k, v in config.identity().items() if held.get(k) != v}
            what = ", ".join(f"{k} {a!r} there, {b!r} here" for k, (a, b) in diff.items())
            raise SweepDirError(f"{directory} holds another sweep ({what}); give a new directory")
    elif any(directory.iterdir()):
        raise SweepDirError(f"{directory} is not empty and holds no sweep.json; give a new or empty directory")
    else:
        meta.write_text(json.dumps(config.identity(), indent=1) + "\n")


def bounds_error(config: SweepConfig, jobs: int) -> str | None:
    """The first of the sweep's sizes and times out of its bounds (clusterlab.chaos.limits), as one line."""
    if (error := JOBS.error("jobs", jobs)) is not None:
        return error
    if (error := SEED_COUNT.error("the number of seeds", len(config.seeds))) is not None:
        return error
    for seed in (min(config.seeds), max(config.seeds)):
        if (error := SEED.error("a seed", seed)) is not None:
            return error
    for members in config.members:
        error = run_arguments_error(
            members=members,
            duration_s=config.duration_s,
            rate=config.rate,
            clients=config.clients,
            settle_s=config.settle_s,
        )
        if error is not None:
            return error
    return None


def check_sweep(config: SweepConfig, jobs: int = 1, scenario: Scenario | None = None) -> Scenario:
    """The sweep's scenario, the configuration checked before any run: ValueError naming what does not
    fit (sizes, a real-process scenario, a bound of clusterlab.chaos.limits, an unknown mutant), KeyError
    for an unknown scenario. ``scenario``: a user-defined one (its name must be ``config.scenario``)."""
    if scenario is not None and scenario.name != config.scenario:
        raise ValueError(f"the scenario is {scenario.name!r} but the sweep names {config.scenario!r}")
    spec = scenario or find_scenario(config.scenario)
    if bad := [m for m in config.members if m not in spec.sizes]:
        sizes = " or ".join(map(str, spec.sizes))
        raise ValueError(f"scenario {spec.name} runs on {sizes} members, not {', '.join(map(str, bad))}")
    if spec.real_only:
        raise ValueError(f"scenario {spec.name} needs real processes; a sweep runs the simulator")
    if (error := bounds_error(config, jobs)) is not None:
        raise ValueError(error)
    mutant_kwargs(config.mutants)  # an unknown name fails before any run
    if len(config.services) > 1:
        check_service_mix(config, spec)
    else:
        check_dedupe(spec, config.service, config.workload)
    return spec


def check_service_mix(config: SweepConfig, spec: Scenario) -> None:
    """A mix of services (``kv,counter,timers``): sample services only, each runnable with the sweep's
    clients and planted bugs; ValueError naming the first that is not."""
    services = config.services
    if len(set(services)) != len(services) or config.workload is not None or any(":" in s for s in services):
        raise ValueError(
            f"a service mix names distinct sample services ({', '.join(SERVICE_REGISTRY)}), not {config.service!r}"
        )
    for seed, service in enumerate(services):
        check_run_arguments(
            spec,
            seed,
            members=config.members[0],
            sim=True,
            service=service,
            clients=config.clients,
            mutants=config.mutants,
        )


def run_sweep(
    config: SweepConfig,
    directory: Path | str,
    *,
    jobs: int = 1,
    mapper: Mapper | None = None,
    keep_traces: bool = False,
    scenario: Scenario | None = None,
    on_result: Callable[[dict[str, Any], int, int], None] | None = None,
) -> SweepSummary:
    """Run every task of ``config`` not yet recorded in ``directory``; ``on_result(record, done, total)``
    after each. ``mapper``: where tasks run (default: :func:`pool_mapper` with ``jobs``). ``scenario``:
    a user-defined Scenario (its name must be ``config.scenario``). SweepDirError for a directory that
    holds another sweep; ValueError or KeyError for a bad configuration (:func:`check_sweep`)."""
    check_sweep(config, jobs, scenario)
    root = Path(directory)
    _open_directory(config, root)
    wanted = set(config.tasks())
    done = {(r["seed"], r["members"]): r for r in load_records(root) if (r["seed"], r["members"]) in wanted}
    todo = [t for t in config.tasks() if t not in done]
    summary = SweepSummary(config, root, list(done.values()), skipped=len(done))
    runner = SeedRunner(config, str(root), keep_traces, scenario)
    started = time.monotonic()
    total = len(wanted)
    with (root / "results.jsonl").open("a") as log:
        for record in (mapper or pool_mapper(jobs))(runner, todo):
            log.write(json.dumps(record) + "\n")
            log.flush()
            summary.records.append(record)
            summary.ran_now += 1
            summary.elapsed_s = time.monotonic() - started
            if on_result:
                on_result(record, len(summary.records), total)
    summary.elapsed_s = time.monotonic() - started
    (root / "summary.json").write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    return summary
