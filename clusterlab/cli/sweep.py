"""``clusterlab sweep SCENARIO --seeds 1-10000`` (many seeds in the simulator, on every core or a
Spark cluster) and ``clusterlab shrink RUN`` (a failing run's schedule cut down to what fails)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from clusterlab.chaos.limits import CLIENTS, DURATION_S, JOBS, MAX_SEEDS, MEMBERS, RATE, SEED, SETTLE_S, SHRINK_RUNS
from clusterlab.chaos.reach import reach_table
from clusterlab.chaos.runner import check_service
from clusterlab.chaos.scenarios import SCENARIOS
from clusterlab.chaos.shrink import ShrinkError, shrink_run
from clusterlab.chaos.sweep import Mapper, SweepConfig, SweepDirError, SweepSummary, parse_seeds, run_sweep
from clusterlab.chaos.workload import SERVICES
from clusterlab.chaos.workload_api import import_from_cwd
from clusterlab.cli.display import StatusDisplay, stdout_console
from clusterlab.cli.paths import bounded, output_file_error, ranged, unnamed_service_error, writable_directory_error
from clusterlab.testing.mutants import MUTANTS

# A bad option is reported as one line, exit 2 (as clusterlab run does).
EXIT_BAD = 2


def _bad(err: Console, command: str, message: str) -> int:
    err.print(f"clusterlab {command}: {message}", markup=False, highlight=False)
    return EXIT_BAD


def _parse_members(spec: str) -> tuple[int, ...]:
    """``--members``: cluster sizes like 3 or 3,5 (argparse reports a bad one)."""
    try:
        sizes = tuple(int(p) for p in spec.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{spec!r}: give sizes like 3 or 3,5") from None
    if not sizes:
        raise argparse.ArgumentTypeError(f"{spec!r} names no size")
    if bad := [m for m in sizes if not MEMBERS.contains(m)]:
        raise argparse.ArgumentTypeError(f"{spec!r}: sizes must be {MEMBERS.describe()}, not {bad[0]}")
    return sizes


def _parse_seeds(spec: str) -> list[int]:
    """``--seeds``: 1-10000, 1,5,9 or a mix (argparse reports a bad one)."""
    try:
        return parse_seeds(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def summary_tables(s: SweepSummary) -> list[Table]:
    """The sweep's summary table: runs, failures per size and per kind, pace."""
    t = Table(title=f"sweep {s.config.scenario}: {'PASS' if s.ok else 'FAIL'}")
    t.add_column("measure")
    t.add_column("value", overflow="fold")
    seeds = s.config.seeds
    t.add_row("seeds", f"{len(seeds)} ({min(seeds)}-{max(seeds)})")
    t.add_row("runs (seeds x sizes)", f"{len(s.records)} ({s.ran_now} now, {s.skipped} from an earlier session)")
    for members, (runs, failed) in s.by_members().items():
        t.add_row(f"  {members} members", f"{runs} runs, {failed} failed")
    if len(s.config.services) > 1:
        for service, (runs, failed) in s.by_service().items():
            t.add_row(f"  {service}", f"{runs} runs, {failed} failed")
    t.add_row("failed", str(len(s.failures)))
    for kind, n in s.by_kind().items():
        t.add_row(f"  {kind}", str(n))
    if s.config.mutants:
        t.add_row("planted bugs", ", ".join(s.config.mutants))
    if s.config.buggify:
        t.add_row("BUGGIFY", "on (seeded fault points in the simulator's drivers)")
    t.add_row("wall time", f"{s.elapsed_s:.1f} s")
    t.add_row("seeds/minute", f"{s.seeds_per_minute:.1f}")
    if (cpu := s.cpu_s_per_run) is not None:
        t.add_row("CPU per run (load-independent)", f"{cpu:.2f} s = {60 / cpu:.0f} seeds/minute per idle core")
    tables = [t]
    if (reach := s.reach()).runs:
        tables.append(reach_table(reach))
    return tables


def _cmd_sweep(args: argparse.Namespace) -> int:
    """Run SCENARIO in the simulator for every seed (and size), on --jobs processes or a Spark --master;
    exit 0 when every run passed, 1 when some failed (each listed with its trace and re-run command),
    2 for bad arguments. The --dir remembers what ran: the same command resumes an interrupted sweep."""
    out, err = stdout_console(), Console(stderr=True, soft_wrap=True)
    spec = SCENARIOS.get(args.scenario)
    if spec is None:
        return _bad(err, "sweep", f"unknown scenario {args.scenario!r}; known: {', '.join(SCENARIOS)}")
    seeds, members = args.seeds, args.members
    mutants = _sweep_mutants(args)
    import_from_cwd()
    if (error := _service_or_json_error(args)) is not None:
        return _bad(err, "sweep", error)
    directory = args.dir or tempfile.mkdtemp(prefix=f"clusterlab-sweep-{spec.name}-")
    if (error := writable_directory_error("--dir", directory)) is not None:
        return _bad(err, "sweep", error)
    config = _sweep_config(args, spec.name, mutants)
    jobs = args.jobs or min(os.cpu_count() or 1, int(JOBS.high))
    mapper = None
    if args.master:
        from clusterlab.spark.sweep import spark_mapper  # pyspark: imported only when it runs

        mapper = spark_mapper(args.master, directory)
    where = f"Spark {args.master}" if args.master else f"{jobs} process{'es' if jobs > 1 else ''}"
    out.print(
        f"[bold]sweep {spec.name}[/]: {len(seeds)} seeds x {len(members)} size(s) on {where}"
        + (f", planted: {', '.join(mutants)}" if mutants else "")
        + f"\nsweep directory: {directory}",
        highlight=False,
    )
    try:
        summary = _run_sweep_with_status(config, directory, jobs=jobs, mapper=mapper, keep_traces=args.keep_traces)
    except (SweepDirError, ValueError) as e:
        return _bad(err, "sweep", str(e))
    _print_sweep_summary(out, summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    return 0 if summary.ok else 1


def _sweep_mutants(args: argparse.Namespace) -> list[str]:
    """The planted bugs: every ``--mutant``, and ack-before-append for ``--fault-ack-before-append``."""
    mutants = list(args.mutant or [])
    if args.fault_ack_before_append and "ack-before-append" not in mutants:
        mutants.append("ack-before-append")
    return mutants


def _service_or_json_error(args: argparse.Namespace) -> str | None:
    """Why ``--service``/``--workload`` cannot run or ``--json`` cannot be written, or None (``args.service``
    set to kv when neither is given)."""
    if (error := unnamed_service_error(args.service, args.workload)) is not None:
        return error
    args.service = args.service or "kv"
    try:
        for service in args.service.split(","):  # a mix of sample services runs them in turn
            check_service(service, args.workload)
    except ValueError as e:
        return str(e)
    if args.json is not None and (error := output_file_error("--json", args.json)) is not None:
        return error
    return None


def _sweep_config(args: argparse.Namespace, scenario: str, mutants: list[str]) -> SweepConfig:
    """The sweep's configuration from its options."""
    return SweepConfig(
        scenario,
        tuple(args.seeds),
        args.members,
        duration_s=args.duration,
        mutants=tuple(mutants),
        clients=args.clients,
        service=args.service,
        rate=args.rate,
        settle_s=args.settle,
        workload=args.workload,
        buggify=args.buggify,
        determinism=not args.no_determinism,
    )


def _run_sweep_with_status(
    config: SweepConfig, directory: str, *, jobs: int, mapper: Mapper | None, keep_traces: bool
) -> SweepSummary:
    """Run the sweep with its progress on stderr (runs done, failures, pace, each failure noted)."""
    failed = ran = 0

    def on_result(record: dict[str, Any], done: int, total: int) -> None:
        nonlocal failed, ran
        failed, ran = failed + (not record["ok"]), ran + 1
        rate = 60.0 * ran / max(1e-9, time.monotonic() - started)
        status.update(done, total, f"{done} of {total} runs done ({failed} failed), {rate:.1f} runs/minute")
        if not record["ok"]:
            status.note(f"FAIL seed {record['seed']} n{record['members']}: {record['kind']}")

    total, started = len(config.tasks()), time.monotonic()
    with StatusDisplay("clusterlab sweep") as status:
        status.update(0, total, f"0 of {total} runs done")
        return run_sweep(config, directory, jobs=jobs, mapper=mapper, keep_traces=keep_traces, on_result=on_result)


def _print_sweep_summary(out: Console, summary: SweepSummary) -> None:
    """The summary tables, one block per failure (its trace and re-run command), how to shrink one, the pace."""
    for t in summary_tables(summary):
        out.print(t)
    for r in summary.failures:  # one block each, to copy from
        what = r["error"] or r["kind"]
        out.print(f"[red]FAIL[/] seed {r['seed']} on {r['members']} members: {what}", highlight=False)
        out.print(f"  run (trace, chaos.json): {r['run_dir']}\n  re-run: {r['rerun']}", highlight=False, soft_wrap=True)
    if summary.failures:
        first = summary.failures[0]
        out.print(f"shrink one: clusterlab shrink {shlex.quote(str(first['run_dir']))}", markup=False, highlight=False)
    out.print(f"{summary.seeds_per_minute:.1f} seeds/minute ({summary.ran_now} runs in {summary.elapsed_s:.1f} s)")


def _cmd_shrink(args: argparse.Namespace) -> int:
    """Shrink a failing simulator run (RUN: the directory of a `clusterlab run --sim` or its trace/, a
    sweep's failure runs/n3-s5, or a pytest --trace-dir chaos run: each holds the run's chaos.json) to a
    minimal schedule failing the same check; print it as a pytest test. Exit 0 when shrunk, 2 when RUN
    cannot be shrunk (no such run, not a failing simulator run, or its replay passes)."""
    out, err = stdout_console(), Console(stderr=True, soft_wrap=True)
    for option, path in (("--json", args.json), ("--test", args.test)):
        if path is not None and (error := output_file_error(option, path)) is not None:
            return _bad(err, "shrink", error)
    if args.dir is not None and (error := writable_directory_error("--dir", args.dir)) is not None:
        return _bad(err, "shrink", error)

    def on_try(phase: str, candidate: Any, fails: bool) -> None:
        verdict = "[red]still fails[/]" if fails else "[green]passes[/]"
        out.print(
            f"  {phase}: {candidate.faults} faults, {candidate.seconds():.2f} s, {candidate.clients} clients,"
            f" rate {candidate.rate:g} -> {verdict}",
            highlight=False,
        )

    out.print(f"shrinking {args.run} ...", highlight=False)
    try:
        result = shrink_run(args.run, target=args.check, max_runs=args.max_runs, directory=args.dir, on_try=on_try)
    except ShrinkError as e:
        return _bad(err, "shrink", str(e))
    o, m = result.original, result.minimal
    t = Table(title=f"shrunk, keeping {result.target} failing ({result.runs} runs)")
    for col in ("", "faults", "schedule seconds", "clients", "rate"):
        t.add_column(col)
    t.add_row("original", str(o.faults), f"{o.seconds():.2f}", str(o.clients), f"{o.rate:g}")
    t.add_row("minimal", str(m.faults), f"{m.seconds():.2f}", str(m.clients), f"{m.rate:g}")
    out.print(t)
    out.print("minimal schedule: " + (json.dumps(m.steps) if m.steps else "[] (no fault needed)"), highlight=False)
    if result.minimal_dir is not None:
        out.print(f"its trace: {result.minimal_dir / 'trace'}", highlight=False)
    source = result.pytest_source()
    if args.test:
        Path(args.test).write_text(source)
        out.print(f"pytest test written to {args.test}", highlight=False)
    out.print("# ---- pytest test ----", highlight=False)
    print(source, end="")
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1) + "\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` and ``shrink`` to the CLI."""
    p = sub.add_parser(
        "sweep",
        help="run a scenario over many seeds in the simulator (all cores, or a Spark cluster)",
        description=_cmd_sweep.__doc__,
    )
    p.add_argument("scenario", metavar="SCENARIO", help="a simulator scenario (clusterlab scenarios lists them)")
    _add_sweep_targets(p)
    _add_sweep_run_shape(p)
    _add_sweep_planted_bugs(p)
    p.add_argument("--keep-traces", action="store_true", help="keep passing runs' traces too (failing ones always)")
    p.add_argument(
        "--no-determinism",
        action="store_true",
        help="leave the replay checks (snapshot-roundtrip, replay-equivalence) out of each run's verdict",
    )
    p.add_argument("--json", default=None, help="also write the sweep's summary here")
    p.set_defaults(func=_cmd_sweep)
    _register_shrink(sub)


def _add_sweep_targets(p: argparse.ArgumentParser) -> None:
    """``sweep``'s seeds and sizes, and where the runs go: processes, a Spark master, the sweep directory."""
    p.add_argument(
        "--seeds",
        type=_parse_seeds,
        default="1-100",
        help=f"seeds: 1-10000, 1,5,9 or a mix (default 1-100) [each {SEED.describe()}, at most {MAX_SEEDS}]",
    )
    p.add_argument(
        "--members",
        type=_parse_members,
        default="3",
        help=ranged("cluster sizes, comma-separated: 3 or 3,5 (default 3)", MEMBERS),
    )
    p.add_argument(
        "--jobs", type=bounded(JOBS), default=None, help=ranged("processes to run seeds on (default: every core)", JOBS)
    )
    p.add_argument("--master", default=None, help="run the seeds on this Spark master's executors (e.g. local[2])")
    p.add_argument("--dir", default=None, help="sweep directory (resumable; default: a fresh temp dir)")


def _add_sweep_run_shape(p: argparse.ArgumentParser) -> None:
    """``sweep``'s length of each run, its service and workload, clients and rate."""
    p.add_argument(
        "--duration",
        type=bounded(DURATION_S),
        default=None,
        help=ranged("seconds of schedule per run (default: scenario's)", DURATION_S),
    )
    p.add_argument(
        "--settle",
        type=bounded(SETTLE_S),
        default=30.0,
        help=ranged("bound on the final healed phase, seconds (default 30)", SETTLE_S),
    )
    p.add_argument(
        "--service",
        default=None,
        metavar="NAME[,NAME...]|MODULE:FACTORY",
        help=f"the service: {', '.join(SERVICES)} (default kv), a mix such as kv,counter,timers (each seed "
        "runs one, in turn) or package.module:factory with --workload",
    )
    p.add_argument("--workload", default=None, metavar="MODULE:FACTORY", help="the service's workload")
    p.add_argument(
        "--clients", type=bounded(CLIENTS), default=None, help=ranged("concurrent clients per run (default 3)", CLIENTS)
    )
    p.add_argument(
        "--rate", type=bounded(RATE), default=None, help=ranged("ops per second offered (default 100)", RATE)
    )


def _add_sweep_planted_bugs(p: argparse.ArgumentParser) -> None:
    """``sweep``'s test-only planted bugs and the simulator's fault points."""
    p.add_argument(
        "--mutant",
        action="append",
        metavar="NAME",
        help=f"test only: run with a planted bug of the catalogue (repeatable): {', '.join(MUTANTS)}",
    )
    p.add_argument(
        "--fault-ack-before-append",
        action="store_true",
        help="test only: the deliberately broken build (= --mutant ack-before-append)",
    )
    p.add_argument(
        "--buggify",
        action="store_true",
        help="switch on the simulator's seeded fault points in every run (a service lagging its node, a member "
        "stalling for part of an election timeout: clusterlab.testing.buggify)",
    )


def _register_shrink(sub: argparse._SubParsersAction) -> None:
    """Add ``shrink`` to the CLI."""
    s = sub.add_parser(
        "shrink",
        help="cut a failing run's schedule down to what still fails; print it as a pytest test",
        description=_cmd_shrink.__doc__,
    )
    s.add_argument(
        "run",
        metavar="RUN",
        help="a failing simulator run: a `clusterlab run --sim` directory, a sweep's runs/n3-s5 "
        "or a pytest --trace-dir run",
    )
    s.add_argument(
        "--check",
        default=None,
        help="the failure to keep: a trace check (durability…) or an error class (SafetyViolation, ChaosTimeout);"
        " default: the replay's first failed trace check, else its error",
    )
    s.add_argument(
        "--max-runs",
        type=bounded(SHRINK_RUNS),
        default=80,
        help=ranged("at most this many candidate runs (default 80)", SHRINK_RUNS),
    )
    s.add_argument("--dir", default=None, help="where candidates run (default: a fresh temp dir)")
    s.add_argument("--test", default=None, help="also write the pytest test to this file")
    s.add_argument("--json", default=None, help="also write the shrink's result here")
    s.set_defaults(func=_cmd_shrink)
