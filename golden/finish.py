"""What ``clusterlab run`` does after a run: the check's verdict (embedded DuckDB by default, or Spark)
and the HTML report.

from clusterlab.golden.finish import check_and_report
report, html = check_and_report(result.trace_dir)   # prints the verdict table and the report path
"""

from __future__ import annotations

from pathlib import Path

from clusterlab.chaos.checks.check_report import CheckReport
from clusterlab.chaos.html_report import write_report
from rich.console import Console


def check_and_report(
    trace_dir: Path | str,
    *,
    master: str | None = None,
    console: Console | None = None,
    engine: str = "duckdb",
    remote: str | None = None,
    show: bool = True,
) -> tuple[CheckReport, Path]:
    """Check ``trace_dir`` with ``engine`` (``duckdb`` or ``spark``; writes RUN/check.json), print the
    verdict table (``show``), write RUN/report.html (which shows that verdict) and print its path."""
    console = console or Console()
    if engine == "spark":
        from clusterlab.spark.check import check_runs, is_connect  # pyspark: imported only when it runs
        from clusterlab.spark.session import spark_session

        spark = spark_session(master, remote=remote)
        try:
            report = check_runs([trace_dir], spark=spark)
        finally:
            if is_connect(spark):  # release this client's session (its views) on the warm server now
                spark.stop()
    else:
        from clusterlab.chaos.checks.embedded import check_runs as embedded_check

        report = embedded_check([trace_dir])
    if show:
        console.print(report.table())
    path = write_report(trace_dir)
    console.print(f"report: {path}", highlight=False, markup=False)
    return report, path
