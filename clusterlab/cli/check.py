"""``clusterlab check RUN...``: the Spark safety check of recorded runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console


def _cmd_check(args: argparse.Namespace) -> int:
    """Check runs with Spark; print the verdict table; exit 0 (pass), 1 (violations), 2 (bad input)."""
    # Imported here, not at the top: pyspark, which only this command and `golden verify` need.
    from clusterlab.golden.spark.source import TraceSourceError, find_runs

    try:
        find_runs(",".join(args.runs))
    except TraceSourceError as e:
        print(f"clusterlab check: {e}", file=sys.stderr)
        return 2
    from clusterlab.golden.spark.check import check_runs

    report = check_runs(args.runs, master=args.master, limit=args.limit)
    Console().print(report.table())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2, default=str))
    Console().print(
        f"{sum(report.rows.values())} rows, {report.torn} torn file(s), {report.elapsed_s:.1f} s; "
        f"JSON: {args.json or 'RUN/check.json'}"
    )
    return 0 if report.ok else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``check`` to the CLI."""
    p = sub.add_parser("check", help="check recorded runs with Spark (agreement, durability, ...)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run directories (or directories of runs)")
    p.add_argument("--master", default=None, help="Spark master (default local[*]; e.g. spark://host:7077)")
    p.add_argument("--json", default=None, help="also write the report here (each RUN gets check.json)")
    p.add_argument("--limit", type=int, default=50, help="violations kept per check (default 50)")
    p.set_defaults(func=_cmd_check)
