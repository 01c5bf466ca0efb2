"""The embedded check engine: DuckDB in this process, over the runs' Arrow tables.

Each run is read with :func:`clusterlab.harness.trace.open_run` (which judges its completeness first);
the complete runs' tables become the views (:mod:`clusterlab.chaos.checks.views`: digests as int64
halves, the log's requests decoded), registered in an in-memory DuckDB, and every SQL check runs
transpiled to DuckDB's dialect. Linearizability runs the WGL checker per run and key. A verdict on
one small run takes well under a second (DuckDB import included); many or large runs go to Spark."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from clusterlab.chaos.checks import LINEARIZABILITY, SQL_CHECKS, SqlCheck
from clusterlab.chaos.checks.base import VIEWS
from clusterlab.chaos.checks.check_report import CheckReport, CheckResult, name_runs, plain, run_id_of
from clusterlab.chaos.checks.sql import explain_agreement, to_duckdb, view_columns
from clusterlab.chaos.checks.views import view_schema, view_table
from clusterlab.chaos.linearizability import HistoryVerdict, operations_from_rows
from clusterlab.chaos.workload_api import history_verdict
from clusterlab.core.codec.digests import entry_digest_name_of_run
from clusterlab.harness.trace import Run, open_run

DEFAULT_LIMIT = 50
ENGINE = "duckdb"


@dataclass
class Judged:
    """What the embedded engine found in a set of runs: the report, and per run directory the run as
    read and its linearizability verdict (the local verdict shows both)."""

    report: CheckReport
    runs: dict[str, Run] = field(default_factory=dict)
    linearizability: dict[str, HistoryVerdict] = field(default_factory=dict)


class DuckDbViews:
    """An in-memory DuckDB holding the views of a set of runs (one thread unless told otherwise)."""

    def __init__(self, threads: int = 1) -> None:
        self.con = duckdb.connect(":memory:", config={"threads": threads})
        self._held: dict[str, pa.Table] = {}  # registered Arrow tables must outlive their use

    def register(self, name: str, table: pa.Table) -> None:
        """Make ``table`` the view ``name`` (replacing one of that name)."""
        self._held[name] = table
        self.con.register(name, table)

    def query(self, sql: str) -> list[dict[str, Any]]:
        """The rows of ``sql`` (Spark SQL, transpiled) as dicts."""
        return self.con.sql(to_duckdb(sql)).to_arrow_table().to_pylist()

    def run(self, check: SqlCheck, limit: int) -> CheckResult:
        """One check: every violation counted per run, the first ``limit`` kept."""
        rows = self.query(check.sql)
        per_run: dict[str, int] = {}
        for r in rows:
            per_run[r["run_id"]] = per_run.get(r["run_id"], 0) + 1
        shown = [{k: plain(v) for k, v in r.items()} for r in rows[:limit]]
        return CheckResult(check.name, len(rows), shown, per_run)

    def close(self) -> None:
        self.con.close()


def view_tables(runs: Sequence[tuple[str, Run]], columns: dict[str, tuple[str, ...]]) -> dict[str, pa.Table]:
    """The views of ``runs`` ((run directory, run) pairs) as Arrow tables: one per trace table, all runs'
    rows, each run's ``run_id`` its directory."""
    out = {}
    for table in VIEWS:
        parts = [
            view_table(table, run.tables[table], run_dir, columns[table], entry_digest_name_of_run(run.meta))
            for run_dir, run in runs
        ]
        if not parts:
            schema = view_schema(table)
            parts = [pa.schema([schema.field(c) for c in columns[table]]).empty_table()]
        out[table] = pa.concat_tables(parts)
    return out


def register_runs(db: DuckDbViews, runs: Sequence[tuple[str, Run]], columns: dict[str, tuple[str, ...]]) -> None:
    """Register the views of ``runs`` ((run directory, run) pairs) in ``db``."""
    for table, data in view_tables(runs, columns).items():
        db.register(table, data)


def row_counts(runs: Sequence[tuple[str, Run]]) -> tuple[dict[str, int], dict[str, dict[str, int]], dict[str, int]]:
    """(rows per table, rows per run and table, torn files per run) of ``runs`` ((run directory, run) pairs)."""
    rows: dict[str, int] = {}
    run_rows: dict[str, dict[str, int]] = {}
    run_torn: dict[str, int] = {}
    for run_dir, r in runs:
        per = run_rows.setdefault(run_dir, {})
        for t, data in r.tables.items():
            per[t] = per.get(t, 0) + data.num_rows
            rows[t] = rows.get(t, 0) + data.num_rows
        run_torn[run_dir] = run_torn.get(run_dir, 0) + len(r.torn)
    return rows, run_rows, run_torn


def sql_results(
    complete: Sequence[tuple[str, Run]], checks: Sequence[SqlCheck], limit: int, threads: int
) -> dict[str, CheckResult]:
    """Every SQL check over the ``complete`` runs ((run directory, run) pairs) in one DuckDB; nothing to
    judge (no complete run) runs no query."""
    if not complete:
        return {c.name: CheckResult(c.name, 0) for c in checks}
    results: dict[str, CheckResult] = {}
    db = DuckDbViews(threads)
    try:
        register_runs(db, complete, view_columns(checks))
        for check in checks:
            results[check.name] = db.run(check, limit)
            if check.name == "agreement":
                explain_agreement(results[check.name], db.query, db.register)
    finally:
        db.close()
    return results


def linearizability_result(
    complete: Sequence[tuple[str, Run]], limit: int
) -> tuple[CheckResult, dict[str, HistoryVerdict]]:
    """The WGL verdict of each complete run's history (keyed by run directory) and its CheckResult."""
    lin: dict[str, HistoryVerdict] = {}
    result = CheckResult(LINEARIZABILITY, 0)
    for d, r in complete:
        lin[d] = verdict = history_verdict(operations_from_rows(r.ops.to_pylist()), r.meta)
        for k in verdict.violations():
            result.count += 1
            result.per_run[d] = result.per_run.get(d, 0) + 1
            if len(result.violations) < limit:
                minimal = k.as_dict()["minimal"]  # drawn by the report, as the Spark job's
                result.violations.append(
                    {
                        "run_id": d,
                        "key": k.key,
                        "model": k.model,
                        "ops": k.ops,
                        "minimal": minimal,
                        "detail": k.describe(),
                    }
                )
        result.unknown += [{"run_id": d, "key": k.key, "detail": k.describe()} for k in verdict.unknown()]
    return result, lin


def determinism_results(complete: Sequence[tuple[str, Run]], limit: int) -> dict[str, CheckResult]:
    """The replay checks of :mod:`clusterlab.chaos.determinism` over each complete run, as CheckResults."""
    from clusterlab.chaos.determinism import DETERMINISM_CHECKS, determinism_violations

    results = {name: CheckResult(name, 0) for name in DETERMINISM_CHECKS}
    for d, r in complete:
        for name, found in determinism_violations(d, run=r).items():
            result = results[name]
            result.count += len(found)
            if found:
                result.per_run[d] = len(found)
            result.violations += [{"run_id": d, "detail": x} for x in found][: max(0, limit - len(result.violations))]
    return results


def judge_runs(
    run_dirs: Sequence[Path | str],
    *,
    limit: int = DEFAULT_LIMIT,
    checks: Sequence[SqlCheck] = SQL_CHECKS,
    write_json: bool = False,
    threads: int = 1,
    determinism: bool = False,
) -> Judged:
    """Judge ``run_dirs`` (run directories) with DuckDB: completeness first, then every check over the
    complete runs, keyed by directory. ``determinism`` adds the replay checks (snapshot round-trip,
    replay equivalence). Raises :class:`clusterlab.harness.trace.TraceError` for a path that is not a
    run."""
    started = time.monotonic()
    dirs = list(dict.fromkeys(str(d) for d in run_dirs))
    runs = {d: open_run(d, whole_payloads=False) for d in dirs}  # the views never read entries
    completeness = {d: r.completeness for d, r in runs.items() if r.completeness is not None}
    complete = [(d, r) for d, r in runs.items() if r.completeness is None or r.completeness.ok]
    rows, run_rows, run_torn = row_counts(complete)
    results = sql_results(complete, checks, limit, threads)
    results[LINEARIZABILITY], lin = linearizability_result(complete, limit)
    if determinism:
        results.update(determinism_results(complete, limit))
    name_runs(results, dirs)
    report = CheckReport(
        run_ids=sorted({run_id_of(d) for d in dirs}),
        run_dirs=dirs,
        master="embedded",
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
    return Judged(report, runs, lin)


def check_runs(
    run_dirs: Sequence[Path | str],
    *,
    limit: int = DEFAULT_LIMIT,
    write_json: bool = True,
    threads: int = 1,
    determinism: bool = False,
) -> CheckReport:
    """:func:`judge_runs`' report; with ``write_json``, each run directory gets ``check.json``."""
    return judge_runs(run_dirs, limit=limit, write_json=write_json, threads=threads, determinism=determinism).report
