"""What ``clusterlab run`` does after a run: the Spark check's verdict and the HTML report.

from clusterlab.golden.finish import check_and_report
report, html = check_and_report(result.trace_dir)   # prints the verdict table and the report path
"""

from __future__ import annotations

from pathlib import Path

from clusterlab.golden.report import write_report
from clusterlab.golden.spark.check import CheckReport, check_runs
from rich.console import Console


def check_and_report(
    trace_dir: Path | str, *, master: str | None = None, console: Console | None = None
) -> tuple[CheckReport, Path]:
    """Check ``trace_dir`` with Spark (writes RUN/check.json), print the verdict table, write
    RUN/report.html (which shows that verdict) and print its path."""
    console = console or Console()
    report = check_runs([trace_dir], master=master)
    console.print(report.table())
    path = write_report(trace_dir)
    console.print(f"report: {path}", highlight=False, markup=False)
    return report, path
