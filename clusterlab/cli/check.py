"""``clusterlab check RUN...``: the Spark safety check of recorded runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def runs_table(report: Any) -> Table:
    """One row per run: which run passed and which failed, on which checks."""
    from clusterlab.golden.spark.source import run_id_of

    t = Table(title="runs")
    t.add_column("run")
    t.add_column("verdict")
    t.add_column("failed checks (violations)", overflow="fold")
    t.add_column("directory", overflow="fold")
    for run_dir in report.run_dirs:
        run_id = run_id_of(run_dir)
        failed = {name: c.per_run.get(run_id, 0) for name, c in report.checks.items() if c.per_run.get(run_id, 0)}
        status = report.run_status(run_id)  # PASS, FAIL, INCOMPLETE or CORRUPT (completeness first)
        verdict = f"[{'green' if status == 'PASS' else 'red'}]{status}[/]"
        t.add_row(run_id, verdict, ", ".join(f"{k} ({v})" for k, v in failed.items()) or "-", str(run_dir))
    return t


def _cmd_check(args: argparse.Namespace) -> int:
    """Check runs with Spark; print the verdict tables; exit 0 (PASS), 1 (FAIL: a violation in a complete
    run), 2 (bad input), 3 (INCOMPLETE: a run lacks data it declares; not judged), 4 (CORRUPT: a file's
    bytes changed; not judged)."""
    # Imported here, not at the top: pyspark, which only this command and `golden verify` need.
    from clusterlab.cli.paths import directory_error, output_file_error
    from clusterlab.golden.spark.source import TraceSourceError, find_runs
    from clusterlab.harness.completeness import SchemaVersionError

    if args.limit < 1:
        print(f"clusterlab check: --limit must be >= 1, got {args.limit}", file=sys.stderr)
        return 2
    for run in args.runs:
        if (error := directory_error("RUN", run)) is not None:
            print(f"clusterlab check: {error}", file=sys.stderr)
            return 2
    if args.json is not None and (error := output_file_error("--json", args.json)) is not None:
        print(f"clusterlab check: {error}", file=sys.stderr)
        return 2
    try:
        find_runs(",".join(args.runs))
    except TraceSourceError as e:
        print(f"clusterlab check: {e}", file=sys.stderr)
        return 2
    from clusterlab.golden.spark.check import check_runs

    try:
        report = check_runs(args.runs, master=args.master, limit=args.limit)
    except SchemaVersionError as e:
        print(f"clusterlab check: {e}", file=sys.stderr)
        return 2
    console = Console()
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
    return report.exit_code


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``check`` to the CLI."""
    p = sub.add_parser(
        "check",
        help="check recorded runs with Spark (agreement, durability, ...)",
        description=_cmd_check.__doc__,
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or directories of runs)")
    p.add_argument("--master", default=None, help="Spark master (default local[*]; e.g. spark://host:7077)")
    p.add_argument("--json", default=None, help="also write the whole report here (each RUN gets its check.json)")
    p.add_argument("--limit", type=int, default=50, help="violations kept per check (default 50)")
    p.set_defaults(func=_cmd_check)
