"""``clusterlab check`` on Spark, planned by run: every run (or a chunk of small runs) is judged inside
one Spark task by the embedded engine (:func:`clusterlab.chaos.checks.embedded.judge_runs`: the same
completeness judgement, the same SQL checks, the same linearizability search), the runs spread over
every task slot of the session (:mod:`clusterlab.spark.tasks`); only each chunk's report comes
back, and the driver adds them up (:func:`clusterlab.chaos.checks.check_report.merge_reports`).

Every check is a property of one run, so nothing is lost by judging runs apart, and the cost is one
pass over each run's files instead of a Spark SQL job per check over all of them: on two cores this
plan runs at or above one DuckDB thread (docs/spark.md, "At scale"), where the per-check SQL plan
ran at a tenth of it. A run too large for one task's memory is judged by that SQL plan instead."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from clusterlab.chaos.checks import SQL_CHECKS, SqlCheck
from clusterlab.chaos.checks.check_report import CheckReport, merge_reports, trace_bytes
from clusterlab.harness.completeness import SchemaVersionError
from clusterlab.harness.trace import TraceError
from clusterlab.spark.linearizability import run_workloads, ship_packages
from clusterlab.spark.tasks import UNIT_BYTES, chunks, map_in_tasks
from pyspark.sql import SparkSession

PLANS = ("auto", "tasks", "sql")
ENGINE = "spark"


def choose_plan(plan: str, runs: Sequence[str]) -> str:
    """``tasks`` or ``sql`` for ``plan`` over ``runs``: ``auto`` is ``tasks`` unless one run holds more
    than :data:`UNIT_BYTES` of trace files."""
    if plan not in PLANS:
        raise ValueError(f"plan must be one of {', '.join(PLANS)}, not {plan!r}")
    if plan != "auto":
        return plan
    return "sql" if any(trace_bytes([r]) > UNIT_BYTES for r in runs) else "tasks"


def judge_chunk(job: tuple[list[str], int, tuple[SqlCheck, ...]]) -> CheckReport | TraceError | SchemaVersionError:
    """The embedded engine's report on one chunk of runs (run inside a Spark task); a run it cannot
    read as a run comes back as its TraceError (or SchemaVersionError), raised again on the driver."""
    from clusterlab.chaos.checks.embedded import judge_runs

    run_dirs, limit, checks = job
    try:
        return judge_runs(run_dirs, limit=limit, checks=checks, threads=1).report
    except (TraceError, SchemaVersionError) as e:
        return e


def check_in_tasks(
    spark: SparkSession, runs: Sequence[str], *, limit: int, checks: Sequence[SqlCheck] = SQL_CHECKS
) -> CheckReport:
    """The report on ``runs`` (absolute run directories), each chunk judged in a Spark task."""
    started = time.monotonic()
    ship_packages(spark, set(run_workloads(runs).values()))  # a user's workload judges its run's history
    sizes = [trace_bytes([r]) for r in runs]
    jobs = [(chunk, limit, tuple(checks)) for chunk in chunks(list(runs), sizes)]
    size_of = dict(zip(runs, sizes, strict=True))
    chunk_sizes = [sum(size_of[r] for r in chunk) for chunk, _, _ in jobs]
    parts: list[Any] = map_in_tasks(
        spark, judge_chunk, jobs, chunk_sizes, description=f"clusterlab check: {len(runs)} run(s)"
    )
    for part in parts:
        if isinstance(part, TraceError | SchemaVersionError):
            raise part
    report = merge_reports(parts, runs, limit, engine=ENGINE)
    report.elapsed_s = time.monotonic() - started
    return report
