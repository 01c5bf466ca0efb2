"""``clusterlab report RUN [--out FILE]``: a self-contained HTML report of a recorded run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from clusterlab.chaos.html_report import ReportError, write_report
from clusterlab.cli.paths import directory_error, output_file_error


def _cmd_report(args: argparse.Namespace) -> int:
    """Write the report; print its path. Exit 2 for a path that is not a run."""

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
        path = write_report(run, args.out)
    except ReportError as e:
        print(f"clusterlab report: {e}", file=sys.stderr)
        return 2
    Console(highlight=False).print(f"report: {path}", markup=False)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``report`` to the CLI."""
    p = sub.add_parser("report", help="write a self-contained HTML report of a recorded run (verdict, timeline)")
    p.add_argument("run", metavar="RUN", help="the run's trace directory (or the `clusterlab run --dir` holding it)")
    p.add_argument("--out", default=None, help="the HTML file to write (default RUN/report.html)")
    p.set_defaults(func=_cmd_report)
