"""``clusterlab check --engine spark``: a Spark job proving one or many recorded runs safe.

The checks are :mod:`clusterlab.chaos.checks`' SQL, the text the embedded engine runs: each trace table
becomes a temporary view over the ``clustertrace`` source (:mod:`clusterlab.spark.source`),
narrowed to the columns the checks read and with the view layer's derived columns (digests as int64
halves, so Spark plans hash aggregates; the log's requests decoded), and ``spark.sql`` runs each check.
Per check one job counts the violations per run; only a failing check fetches its first ``limit`` rows.
Linearizability runs the WGL checker per (run, key) in the executors (spark/linearizability.py).

Works on a classic session (``local[*]``, a cluster) and on a Spark Connect session (``--remote``,
``clusterlab spark start``): everything goes through SQL, temp views and the Python data source.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from clusterlab.chaos.checks import CHECK_NAMES, LINEARIZABILITY, SQL_CHECKS, SqlCheck
from clusterlab.chaos.checks.base import VIEWS
from clusterlab.chaos.checks.check_report import CheckReport, CheckResult, name_runs, plain, run_id_of, trace_bytes
from clusterlab.chaos.checks.embedded import row_counts, view_tables
from clusterlab.chaos.checks.sql import explain_agreement, view_columns
from clusterlab.chaos.checks.views import view_schema
from clusterlab.harness.completeness import (
    Completeness,
    FileFacts,
    judge,
    kills_from_events,
    read_meta,
    read_sidecars,
)
from clusterlab.harness.trace import open_run
from clusterlab.spark.linearizability import run_workloads, ship_packages
from clusterlab.spark.session import spark_session
from clusterlab.spark.source import find_runs, select_columns, trace_files
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

CHECKS = CHECK_NAMES
DEFAULT_LIMIT = 50
ENGINE = "spark"
UPLOAD_BYTES = 256 << 20  # a Connect session gets traces up to this size as Arrow tables from the client
# A check reading at most this many rows (of the tables it reads) is "small": Spark evaluates it
# interpreted, its job submitted from a thread beside the other small ones (SMALL_CONF, SMALL_THREADS).
# Compiling the generated code of each check's stages (Janino, in every task) cost ~40 % of a warm
# server's CPU on a 17 k-row run; per row, interpreted is slower (break-even near 1 M rows measured on
# the medium bench: agreement 2.9 -> 5.4 s, the events-only checks 0.4-1.4 -> 0.2-0.6 s).
SMALL_ROWS = 250_000
SMALL_CONF = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
SMALL_THREADS = 3  # concurrent check jobs of a small check: overlaps one job's planning with another's tasks

__all__ = ["CHECKS", "CheckReport", "CheckResult", "check_runs", "establish_completeness", "load"]


def load(spark: SparkSession, paths: str, table: str, columns: Sequence[str] = ()) -> DataFrame:
    """One trace table of every run in ``paths`` (comma-separated run directories), ``run_id`` holding
    each run's directory (runs are keyed by directory); with ``columns``, only those columns leave the
    source (it gets no column pruning from Spark)."""
    reader = spark.read.format("clustertrace").option("table", table).option("runKey", "directory")
    if columns:
        reader = reader.option("columns", ",".join(columns))
    return reader.load(paths)


# ----------------------------------------------------------------------------------------- checks


class Tables:
    """The trace tables of one set of runs, read column-projected on demand."""

    def __init__(self, spark: SparkSession, paths: str, rows: dict[str, int], log_runs: Sequence[str]) -> None:
        self.spark = spark
        self.paths = paths
        self.rows = rows  # table -> rows in all runs
        self.log_runs = sorted(log_runs)  # runs with committed log rows

    def read(self, table: str, *columns: str) -> DataFrame:
        """``table``'s ``columns``; a table no run has rows of is an empty DataFrame of the view's
        types (a run without client ops has nothing for durability to judge), not a source error."""
        if not self.rows.get(table):
            schema = select_columns(view_schema(table), ",".join(columns))
            return self.spark.createDataFrame([], from_arrow_schema(schema))
        return load(self.spark, self.paths, table, columns)

    def register_views(self, columns: dict[str, tuple[str, ...]]) -> None:
        """Each trace table as a temporary view of its name, carrying ``columns[table]``, cached: every
        check is its own job, and without the cache each would read (and decode, in the Python source)
        the same files again."""
        for table in VIEWS:
            self.read(table, *columns[table]).createOrReplaceTempView(table)
            self.spark.catalog.cacheTable(table)

    def drop_views(self) -> None:
        """Release the cached views (a long-lived, warm session checks many sets of runs)."""
        for table in VIEWS:
            self.spark.catalog.uncacheTable(table)


def _query(spark: SparkSession, sql: str) -> list[dict[str, Any]]:
    return [{k: plain(v) for k, v in r.asDict(recursive=True).items()} for r in spark.sql(sql).collect()]


def count_violations(
    spark: SparkSession, checks: Sequence[SqlCheck], pool: ThreadPoolExecutor | None = None
) -> dict[str, dict[str, int]]:
    """Per check, violations per run: one small aggregate job per check, submitted from ``pool``'s
    threads when given (a Spark session, classic or Connect, runs concurrent jobs). (One UNION ALL of
    every check measured ~2x slower than separate jobs, warm Connect server, one small run.)"""

    def count(check: SqlCheck) -> dict[str, int]:
        sql = f"SELECT run_id, count(*) AS n FROM ({check.sql}) AS v GROUP BY run_id"
        return {r["run_id"]: int(r["n"]) for r in spark.sql(sql).collect()}

    counts = pool.map(count, checks) if pool is not None else map(count, checks)
    return {check.name: n for check, n in zip(checks, counts, strict=True)}


@contextlib.contextmanager
def session_conf(spark: SparkSession, conf: Mapping[str, str]) -> Iterator[None]:
    """``conf`` set on ``spark`` inside the block, the former values (or unset) restored after: a warm
    or shared session checks other, larger runs next."""
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


def run_check(spark: SparkSession, check: SqlCheck, per_run: dict[str, int], limit: int) -> CheckResult:
    """One SQL check's result given its counts: its first ``limit`` rows fetched only when it failed."""
    count = sum(per_run.values())
    shown: list[dict[str, Any]] = []
    if count:
        rows = spark.sql(check.sql).limit(limit).collect()
        shown = [{k: plain(v) for k, v in r.asDict(recursive=True).items()} for r in rows]
    return CheckResult(check.name, count, shown, per_run)


def check_linearizability(ops: DataFrame, limit: int, workloads: dict[str, str] | None = None) -> CheckResult:
    """Every run's client history (``ops``), per key, linearizable (spark/linearizability.py),
    with each run's workload's model (``workloads``, by run directory); keys whose search ran out of budget
    are reported as ``unknown`` (not violations)."""
    from clusterlab.spark.linearizability import judge_ops, violations

    count, shown, per_run, unknown = violations(judge_ops(ops, workloads=workloads), limit)
    result = CheckResult("linearizability", count, shown, per_run)
    result.unknown = unknown
    return result


def check_runs(
    run_dirs: Sequence[Path | str],
    *,
    master: str | None = None,
    spark: SparkSession | None = None,
    write_json: bool = True,
    limit: int = DEFAULT_LIMIT,
    checks: Sequence[SqlCheck] = SQL_CHECKS,
    upload: bool | None = None,
    plan: str = "auto",
) -> CheckReport:
    """Run every check over ``run_dirs`` (run directories, or parents of runs) on Spark (``spark``, or a
    session for ``master``). With ``write_json``, each run directory gets ``check.json``.

    ``plan``: ``tasks`` judges each run (or a chunk of small runs) inside one Spark task with the
    embedded engine, the runs spread over every task slot (:mod:`clusterlab.spark.run_tasks`);
    ``sql`` runs each check as Spark SQL over views of all runs together; ``auto`` (default) is
    ``tasks`` unless a run is larger than one task may hold (:data:`clusterlab.spark.tasks.UNIT_BYTES`).
    Both plans run the same SQL text and give the same verdicts (tests/golden/test_check.py).

    ``upload`` (plan ``sql``): read the runs here and send their views to Spark as Arrow tables, instead
    of the ``clustertrace`` source reading them on the executors. None: on a Spark Connect session when
    the traces are at most :data:`UPLOAD_BYTES`; the source otherwise (large input, a cluster)."""
    from clusterlab.spark.run_tasks import check_in_tasks, choose_plan

    # Absolute: a Spark Connect server (or a cluster) resolves paths in its own working directory.
    all_runs = find_runs(",".join(os.path.abspath(p) for p in run_dirs))
    spark = spark or spark_session(master)
    if choose_plan(plan, all_runs) == "tasks":
        report = check_in_tasks(spark, all_runs, limit=limit, checks=checks)
        report.master = _master(spark)
        if write_json:
            report.write_json()
        return report
    return _check_sql(spark, all_runs, write_json=write_json, limit=limit, checks=checks, upload=upload)


def _check_sql(
    spark: SparkSession,
    all_runs: list[str],
    *,
    write_json: bool,
    limit: int,
    checks: Sequence[SqlCheck],
    upload: bool | None,
) -> CheckReport:
    """:func:`check_runs` with plan ``sql``: every check one Spark SQL query over all runs' views."""
    started = time.monotonic()
    run_ids = sorted({run_id_of(r) for r in all_runs})
    if upload is None:
        upload = is_connect(spark) and trace_bytes(all_runs) <= UPLOAD_BYTES
    ops: DataFrame | None = None
    tables: Tables | None = None
    if upload:
        # Read and judged here, as the embedded engine does; the views go to Spark as Arrow tables.
        opened = {r: open_run(r, whole_payloads=False) for r in all_runs}  # the views never read entries
        completeness = {r: o.completeness for r, o in opened.items() if o.completeness is not None}
        complete = [(r, o) for r, o in opened.items() if o.completeness is None or o.completeness.ok]
        runs = [r for r, o in opened.items() if o.completeness is None or o.completeness.ok]
        rows, run_rows, run_torn = row_counts(complete)
        if runs:
            for table, data in view_tables(complete, view_columns(checks)).items():
                _arrow_frame(spark, data).createOrReplaceTempView(table)
            # Every column of ops for linearizability; the other views' columns are not wanted again.
            every = {t: tuple(view_schema(t).names) if t == "ops" else ("run_id",) for t in VIEWS}
            ops = _arrow_frame(spark, view_tables(complete, every)["ops"])
    else:
        # One row per file (rows, torn tail, CRCs): small, so it is collected once, judged and summed here.
        completeness, all_files = establish_completeness(spark, all_runs)
        runs = [r for r in all_runs if completeness[r].ok]  # complete or not judged
        rows, run_rows, run_torn = _file_counts({r: all_files.get(r, []) for r in runs})
        if runs:
            log_runs = [r for r, per in run_rows.items() if per.get("log")]
            tables = Tables(spark, ",".join(runs), rows, log_runs)
            tables.register_views(view_columns(checks))
            ops = tables.read("ops")
    if runs:
        assert ops is not None
        results = _run_checks(spark, checks, runs, rows, ops, limit)
        if tables is not None:
            tables.drop_views()
    else:  # nothing complete to judge
        results = {c.name: CheckResult(c.name, 0) for c in checks} | {LINEARIZABILITY: CheckResult(LINEARIZABILITY, 0)}
    name_runs(results, all_runs)
    report = CheckReport(
        run_ids=run_ids,
        run_dirs=all_runs,
        master=_master(spark),
        checks=results,
        rows=rows,
        torn=sum(run_torn.values()),
        elapsed_s=time.monotonic() - started,
        run_rows=run_rows,
        run_torn=run_torn,
        completeness=completeness,
        engine=ENGINE,
    )
    if write_json:
        report.write_json()
    return report


def _run_checks(
    spark: SparkSession,
    checks: Sequence[SqlCheck],
    runs: list[str],
    rows: dict[str, int],
    ops: DataFrame,
    limit: int,
) -> dict[str, CheckResult]:
    """Runs every check over the views of ``runs`` registered in ``spark``, and linearizability over
    their client ``ops`` beside them; ``rows`` (rows per table) decides which checks are small."""
    results: dict[str, CheckResult] = {}
    workloads = run_workloads(runs)  # a user's workload judges its run's history with its model
    ship_packages(spark, set(workloads.values()))
    small = [c for c in checks if sum(rows.get(t, 0) for t in c.tables) <= SMALL_ROWS]
    large = [c for c in checks if c not in small]
    with ThreadPoolExecutor(SMALL_THREADS, thread_name_prefix="clusterlab-check") as pool:
        # Linearizability (Python workers) alongside the SQL checks (the JVM): both cores busy.
        # No client ops (a golden, a run without a workload): nothing to judge, no Python worker.
        linearizable = pool.submit(check_linearizability, ops, limit, workloads) if rows.get("ops") else None
        with session_conf(spark, SMALL_CONF if small else {}):
            counts = count_violations(spark, small, pool)
        counts |= count_violations(spark, large)  # generated code, one after another (memory)
        for check in checks:
            results[check.name] = run_check(spark, check, counts[check.name], limit)
            if check.name == "agreement":
                explain_agreement(
                    results[check.name],
                    lambda sql: _query(spark, sql),
                    lambda name, t: spark.createDataFrame(t).createOrReplaceTempView(name),
                )
        no_ops = CheckResult(LINEARIZABILITY, 0)
        results[LINEARIZABILITY] = linearizable.result() if linearizable is not None else no_ops
    return results


def _arrow_frame(spark: SparkSession, data: Any) -> DataFrame:
    """``data`` (a pyarrow Table) as a DataFrame; an empty one keeps its schema (a golden has no events
    or ops: Spark Connect cannot infer a schema from no rows)."""
    if data.num_rows == 0:
        return spark.createDataFrame([], from_arrow_schema(data.schema))
    return spark.createDataFrame(data)


def _file_counts(
    files: Mapping[str, Sequence[Any]],
) -> tuple[dict[str, int], dict[str, dict[str, int]], dict[str, int]]:
    """(rows per table, rows per run and table, torn files per run) from each run directory's ``files``
    table rows."""
    rows: dict[str, int] = {}
    run_rows: dict[str, dict[str, int]] = {}
    run_torn: dict[str, int] = {}
    for run, run_files in files.items():
        per = run_rows.setdefault(run, {})
        run_torn[run] = 0
        for f in run_files:
            rows[f["table"]] = rows.get(f["table"], 0) + int(f["rows"] or 0)
            per[f["table"]] = per.get(f["table"], 0) + int(f["rows"] or 0)
            run_torn[run] += int(bool(f["torn"]))
    return rows, run_rows, run_torn


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (a thin client of a server)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _master(spark: SparkSession) -> str:
    """The session's master (a Spark Connect session reports its remote instead)."""
    try:
        return spark.sparkContext.master or ""
    except Exception:  # Spark Connect has no SparkContext on the client
        return spark.conf.get("spark.master", None) or "connect"


def establish_completeness(
    spark: SparkSession, runs: Sequence[str]
) -> tuple[dict[str, Completeness], dict[str, list[Any]]]:
    """Each run's completeness (run directory -> verdict), judged as the local verdict judges it
    (:func:`clusterlab.harness.completeness.judge`) from facts the executors gather: the ``files``
    table (rows, torn tail, CRC of every stream message) and, when a file needs explaining, the
    ``kill`` events. Also returns the ``files`` rows by run directory. Raises SchemaVersionError for a
    run of a newer trace schema."""
    paths = ",".join(runs)
    facts: dict[str, list[FileFacts]] = {r: [] for r in runs}
    rows: dict[str, list[Any]] = {r: [] for r in runs}
    kills: dict[str, list[dict[str, Any]]] = {}
    if trace_files(list(runs), "files"):
        by_dir = {os.path.normpath(r): r for r in runs}
        for f in load(spark, paths, "files").collect():
            run = by_dir[os.path.normpath(os.path.dirname(os.path.dirname(f["file"])))]
            rows[run].append(f)
            facts[run].append(
                FileFacts(
                    f"{f['table']}/{os.path.basename(f['file'])}",
                    f["table"],
                    int(f["bytes"]),
                    int(f["rows"] or 0),
                    int(f["bytes"]) - int(f["bytes_ignored"]),
                    bool(f["closed"]),
                    f["error"],
                    tuple(zip(f["chunk_ends"] or [], f["chunk_crcs"] or [], strict=True)),
                    bool(f["chunk_ends"]),
                    f["schema"],
                    f["values"],
                )
            )
        unclosed = any(not f.closed or f.torn for fs in facts.values() for f in fs)
        if unclosed and trace_files(list(runs), "events"):  # only a torn or unclosed file needs a kill
            events = load(spark, paths, "events", ("source", "kind", "member_id", "detail", "file"))
            for e in events.where(F.col("kind") == "kill").collect():
                run = by_dir[os.path.normpath(os.path.dirname(os.path.dirname(e["file"])))]
                kills.setdefault(run, []).append(e.asDict())
    out: dict[str, Completeness] = {}
    for run in runs:
        meta, meta_finding = read_meta(run)
        out[run] = judge(
            run,
            meta,
            facts[run],
            kills_from_events(kills.get(run, [])),
            meta_finding=meta_finding,
            sidecars=read_sidecars(run),
        )
    return out, rows
