"""``clusterlab report RUN [--out FILE]``: a self-contained HTML report of a recorded run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from clusterlab.chaos.html_report import ReportError, write_report_with_status
from clusterlab.cli.paths import directory_error, output_file_error
from clusterlab.harness.completeness import exit_code


def _cmd_report(args: argparse.Namespace) -> int:
    """Write the report; print its path and the verdict it shows. Exit as ``check`` does for that verdict
    (0 PASS, 1 FAIL, 3 INCOMPLETE, 4 CORRUPT: the report is written for each), 2 for a path that is not
    a run."""

    error = directory_error("RUN", args.run, what="run directory")
    if error is None and args.out is not None:
        error = output_file_error("--out", args.out)
    if error is not None:
        print(f"clusterlab report: {error}", file=sys.stderr)
        return 2
    run = Path(args.run)
    if not (run / "run.json").is_file() and (run / "trace" / "run.json").is_file():
        run = run / "trace"  # a `clusterlab run --dir DIR` directory: its trace, as check and shrink take it
    try:
        path, status = write_report_with_status(run, args.out)
    except ReportError as e:
        print(f"clusterlab report: {e}", file=sys.stderr)
        return 2
    console = Console(highlight=False)
    console.print(f"report: {path}", markup=False)
    console.print(f"verdict: {status}" + ("" if status in ("PASS", "FAIL") else " (not judged)"), markup=False)
    return exit_code([status])


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``report`` to the CLI."""
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report of a recorded run (verdict, timeline); exit as check does for "
        "its verdict",
    )
    p.add_argument("run", metavar="RUN", help="the run's trace directory (or the `clusterlab run --dir` holding it)")
    p.add_argument("--out", default=None, help="the HTML file to write (default RUN/report.html)")
    p.set_defaults(func=_cmd_report)
