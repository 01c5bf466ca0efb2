"""``clusterlab check RUN...``: the safety check of recorded runs, on the embedded engine (DuckDB) or Spark.

Engine choice (``--engine auto``, the default): Spark when ``--master`` or ``--remote`` is given, when
running under ``spark-submit``, or when the runs are large — more than :data:`SPARK_RUNS` runs or
:data:`SPARK_BYTES` of trace files (DuckDB holds the checked columns in memory; Spark streams them);
else DuckDB, whose verdict on one run takes well under a second. ``--engine spark`` without a master
uses the warm server of ``clusterlab spark start`` when it is up, else a local session."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from clusterlab.chaos.limits import VIOLATIONS_KEPT
from clusterlab.cli.paths import bounded, ranged

ENGINES = ("auto", "duckdb", "spark")
PLANS = ("auto", "tasks", "sql")  # clusterlab.spark.run_tasks.PLANS (not imported: pyspark)
SPARK_RUNS = 64  # more runs than this: Spark (auto)
SPARK_BYTES = 1 << 30  # more trace bytes than this (all runs): Spark (auto)


def choose_engine(engine: str, run_dirs: list[str], *, master: str | None, remote: str | None) -> tuple[str, str]:
    """(``duckdb`` or ``spark``, why) for ``--engine engine`` over ``run_dirs`` (the module docstring)."""
    import os

    if engine != "auto":
        return engine, "--engine"
    if master or remote:
        return "spark", "--master" if master else "--remote"
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return "spark", "under spark-submit"
    if len(run_dirs) > SPARK_RUNS:
        return "spark", f"{len(run_dirs)} runs > {SPARK_RUNS}"
    from clusterlab.chaos.checks.check_report import trace_bytes

    size = trace_bytes(run_dirs)
    if size > SPARK_BYTES:
        return "spark", f"{size / 2**20:.0f} MiB of traces > {SPARK_BYTES >> 20} MiB"
    return "duckdb", "small input"


def spark_remote(remote: str | None, master: str | None) -> str | None:
    """The Spark Connect URL to use: ``--remote``, else (no ``--master``) the started server's, if up."""
    if remote or master:
        return remote
    from clusterlab.spark import connect

    info = connect.status()
    return info.url if info is not None else None


def runs_table(report: Any) -> Table:
    """One row per run: which run passed and which failed, on which checks."""
    from clusterlab.chaos.checks.check_report import run_id_of

    t = Table(title="runs")
    t.add_column("run")
    t.add_column("verdict")
    t.add_column("failed checks (violations)", overflow="fold")
    t.add_column("directory", overflow="fold")
    for run_dir in report.run_dirs:  # keyed by directory: runs may share a run id
        failed = {name: c.per_run[run_dir] for name, c in report.checks.items() if c.per_run.get(run_dir, 0)}
        status = report.run_status(run_dir)  # PASS, FAIL, INCOMPLETE or CORRUPT (completeness first)
        verdict = f"[{'green' if status == 'PASS' else 'red'}]{status}[/]"
        t.add_row(run_id_of(run_dir), verdict, ", ".join(f"{k} ({v})" for k, v in failed.items()) or "-", str(run_dir))
    return t


def _cmd_check(args: argparse.Namespace) -> int:
    """Check runs (the embedded DuckDB engine by default; Spark with --engine spark, --master, --remote
    or many/large runs); print the verdict tables; exit 0 (PASS), 1 (FAIL: a violation in a complete
    run), 2 (bad input, or a run of a schema this clusterlab cannot read: the others are still judged), 3
    (INCOMPLETE: a run lacks data it declares; not judged), 4 (CORRUPT: a file's bytes changed; not
    judged)."""
    # Imported here, not at the top: pyspark, which only this command and `golden verify` need.
    from clusterlab.cli.paths import directory_error, output_file_error
    from clusterlab.harness.completeness import SchemaVersionError
    from clusterlab.spark.source import TraceSourceError, find_runs

    for run in args.runs:
        if (error := directory_error("RUN", run)) is not None:
            print(f"clusterlab check: {error}", file=sys.stderr)
            return 2
    if args.json is not None and (error := output_file_error("--json", args.json)) is not None:
        print(f"clusterlab check: {error}", file=sys.stderr)
        return 2
    try:
        runs = find_runs(",".join(args.runs))
    except TraceSourceError as e:
        print(f"clusterlab check: {e}", file=sys.stderr)
        return 2
    if args.engine == "duckdb" and (args.master or args.remote):
        print("clusterlab check: --master/--remote need --engine spark (or auto), not duckdb", file=sys.stderr)
        return 2
    if args.engine == "duckdb" and args.plan != "auto":
        print("clusterlab check: --plan chooses how Spark plans the checks; it needs --engine spark", file=sys.stderr)
        return 2
    runs, unreadable = _newer_schema_runs(runs)
    for error in unreadable:
        print(f"clusterlab check: {error} (not judged)", file=sys.stderr)
    if not runs:
        return 2
    engine, why = choose_engine(args.engine, runs, master=args.master, remote=args.remote)
    console = Console()
    try:
        report = _check_on_duckdb(args, runs) if engine == "duckdb" else _check_on_spark(args, runs, why, console)
    except SchemaVersionError as e:
        print(f"clusterlab check: {e}", file=sys.stderr)
        return 2
    if report is None:
        return 2
    _print_check_report(args, report, console)
    if unreadable and report.exit_code != 1:  # a violation found in a complete run still wins
        return 2
    return report.exit_code


def _newer_schema_runs(runs: list[str]) -> tuple[list[str], list[str]]:
    """The runs this clusterlab can read, and an error for each of a trace schema it cannot (newer, or
    not a version): those are left out, so the others are still judged."""
    from clusterlab.harness.completeness import SchemaVersionError, read_meta, schema_version_of

    readable, errors = [], []
    for run in runs:
        meta, _finding = read_meta(run)
        try:
            if meta is not None:
                schema_version_of(meta)
        except SchemaVersionError as e:
            errors.append(f"{run}: {e}")
            continue
        readable.append(run)
    return readable, errors


def _check_on_duckdb(args: argparse.Namespace, runs: list[str]) -> Any | None:
    """The embedded engine's report on ``runs``; None (the reason on stderr) when a run cannot be judged."""
    from clusterlab.chaos.checks.embedded import check_runs as embedded_check
    from clusterlab.harness.trace import TraceError

    try:
        return embedded_check(runs, limit=args.limit, determinism=True)
    except TraceError as e:
        print(f"clusterlab check: {e}", file=sys.stderr)
        return None


def _check_on_spark(args: argparse.Namespace, runs: list[str], why: str, console: Console) -> Any | None:
    """Spark's report on ``runs`` (its jobs on stderr meanwhile); None (the reason on stderr) when a run
    cannot be judged."""
    from clusterlab.cli.spark_progress import SparkProgress
    from clusterlab.harness.trace import TraceError
    from clusterlab.spark.check import check_runs, is_connect
    from clusterlab.spark.session import spark_session

    remote = spark_remote(args.remote, args.master)
    console.print(f"engine: Spark ({why}) on {remote or args.master or 'a local session'}", highlight=False)
    spark = spark_session(args.master, remote=remote)
    try:
        with SparkProgress(spark):  # jobs, stages and tasks on stderr while the checks run
            return check_runs(runs, spark=spark, limit=args.limit, plan=args.plan)
    except TraceError as e:  # a run's workload (its model) cannot be imported here: not judged
        print(f"clusterlab check: {e}", file=sys.stderr)
        return None
    finally:
        if is_connect(spark):  # release this client's session (its views) on the warm server now
            spark.stop()


def _print_check_report(args: argparse.Namespace, report: Any, console: Console) -> None:
    """The verdict tables, the ``--json`` report if asked for, the size of the input and the status."""
    console.print(report.table())
    if len(report.run_dirs) > 1 or not report.ok:
        console.print(runs_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2, default=str))
    written = [str(Path(d) / "check.json") for d in report.run_dirs]
    console.print(
        f"{sum(report.rows.values())} rows, {report.torn} torn file(s), {report.elapsed_s:.1f} s", highlight=False
    )
    console.print(f"JSON: {', '.join(written)}" + (f"; all runs: {args.json}" if args.json else ""), highlight=False)
    console.print(f"[bold {'green' if report.ok else 'red'}]{report.status}[/]")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``check`` to the CLI."""
    p = sub.add_parser(
        "check",
        help="check recorded runs (DuckDB by default, or Spark): agreement, durability, ...",
        description=_cmd_check.__doc__,
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or directories of runs)")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help=f"auto (default): DuckDB, or Spark given --master/--remote, > {SPARK_RUNS} runs or "
        f"> {SPARK_BYTES >> 20} MiB of traces; duckdb; spark",
    )
    p.add_argument("--master", default=None, help="Spark master (implies --engine spark; e.g. spark://host:7077)")
    p.add_argument(
        "--remote",
        default=None,
        help="Spark Connect URL sc://HOST:PORT (implies --engine spark; default: clusterlab spark start's server)",
    )
    p.add_argument("--json", default=None, help="also write the whole report here (each RUN gets its check.json)")
    p.add_argument(
        "--plan",
        choices=PLANS,
        default="auto",
        help="Spark only: tasks (each run judged in one Spark task by the embedded engine, the runs spread over "
        "the executors), sql (each check one Spark SQL job over all runs), auto (default: tasks unless a run "
        "is larger than one task may hold)",
    )
    p.add_argument(
        "--limit",
        type=bounded(VIOLATIONS_KEPT),
        default=50,
        help=ranged("violations kept per check (default 50)", VIOLATIONS_KEPT),
    )
    p.set_defaults(func=_cmd_check)
