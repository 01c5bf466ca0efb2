"""The verdict on a set of recorded runs, whichever engine judged it (DuckDB or Spark): per check its
violations (the first ``limit`` rows of its query) and counts per run, each run's completeness first,
the JSON report (RUN/check.json; docs/spark.md) and the rich tables.

Runs are keyed by their directory, never by run id: two runs may share a run id (two simulator runs of
one configuration, a copy of a run), and one must never condemn, merge with or overwrite the other. The
engines put the directory into the views' ``run_id`` column, so every check groups by it;
:func:`name_runs` then shows each violation's run id and directory (``run``)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterlab.harness.completeness import Completeness, exit_code
from rich.table import Table


def run_id_of(run_dir: str) -> str:
    """run.json's ``run_id``, or the directory name when there is no run.json."""
    try:
        with open(os.path.join(run_dir, "run.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        meta = None
    run_id = meta.get("run_id") if isinstance(meta, dict) else None  # not an object: completeness says so
    return str(run_id or os.path.basename(os.path.normpath(run_dir)))


def trace_bytes(run_dirs: Sequence[str | Path]) -> int:
    """The size of the runs' trace files (``<table>/*.arrow``)."""
    return sum(f.stat().st_size for d in run_dirs for f in Path(d).glob("*/*.arrow"))


@dataclass
class CheckResult:
    """One check's outcome: ``count`` violations in all, ``violations`` the first ``limit``."""

    name: str
    count: int
    violations: list[dict[str, Any]] = field(default_factory=list)
    per_run: dict[str, int] = field(default_factory=dict)  # run directory -> violations
    unknown: list[dict[str, Any]] = field(default_factory=list)  # linearizability: keys not decided

    @property
    def ok(self) -> bool:
        return self.count == 0


@dataclass
class CheckReport:
    """The verdict on a set of runs."""

    run_ids: list[str]
    run_dirs: list[str]
    master: str
    checks: dict[str, CheckResult]
    rows: dict[str, int]
    torn: int
    elapsed_s: float
    run_rows: dict[str, dict[str, int]] = field(default_factory=dict)  # run directory -> table -> rows
    run_torn: dict[str, int] = field(default_factory=dict)  # run directory -> torn files
    # run directory -> its completeness, judged first; only COMPLETE runs are checked ("complete or not
    # judged").
    completeness: dict[str, Completeness] = field(default_factory=dict)
    engine: str = "spark"  # "duckdb" (embedded) or "spark"

    @property
    def complete(self) -> bool:
        return all(c.ok for c in self.completeness.values())

    @property
    def ok(self) -> bool:
        return self.complete and all(c.ok for c in self.checks.values())

    def run_status(self, run_dir: str) -> str:
        """``PASS``, ``FAIL``, ``INCOMPLETE`` or ``CORRUPT`` of the run in directory ``run_dir`` (one of
        ``run_dirs``)."""
        if run_dir not in self.run_dirs:
            raise KeyError(f"{run_dir}: not one of the runs checked ({', '.join(self.run_dirs)})")
        c = self.completeness.get(run_dir)
        if c is not None and not c.ok:
            return str(c.status)
        return "FAIL" if any(r.per_run.get(run_dir) for r in self.checks.values()) else "PASS"

    @property
    def status(self) -> str:
        """The verdict on all runs: FAIL if a complete run fails a check, else CORRUPT, INCOMPLETE or PASS."""
        return ("PASS", "FAIL", "", "INCOMPLETE", "CORRUPT")[self.exit_code]

    @property
    def exit_code(self) -> int:
        """0 PASS, 1 FAIL, 3 INCOMPLETE, 4 CORRUPT (docs/trace-schema.md, "Verdicts")."""
        return exit_code([self.run_status(d) for d in self.run_dirs])

    def to_json(self, run_dir: str | None = None) -> dict[str, Any]:
        """The JSON report (see docs/spark.md); with ``run_dir``, that run's part of it (RUN/check.json).
        ``ok`` is true only for PASS: an INCOMPLETE or CORRUPT run is not judged, so it is never ok."""

        def part(c: CheckResult) -> dict[str, Any]:
            if run_dir is None:
                return {"ok": c.ok, "count": c.count, "violations": c.violations}
            count = c.per_run.get(run_dir, 0)
            return {
                "ok": count == 0,
                "count": count,
                "violations": [v for v in c.violations if v.get("run") == run_dir],
            }

        checks = {name: part(c) for name, c in self.checks.items()}
        completeness = {r: c.to_json() for r, c in self.completeness.items() if run_dir is None or r == run_dir}
        status = self.status if run_dir is None else self.run_status(run_dir)
        return {
            "run_ids": self.run_ids if run_dir is None else [run_id_of(run_dir)],
            "run_dirs": self.run_dirs if run_dir is None else [run_dir],
            "ok": status == "PASS",
            "status": status,
            "completeness": completeness,
            "engine": self.engine,
            "master": self.master,
            "elapsed_s": round(self.elapsed_s, 3),
            "rows": self.rows if run_dir is None else self.run_rows.get(run_dir, {}),
            "torn": self.torn if run_dir is None else self.run_torn.get(run_dir, 0),
            "checks": checks,
        }

    def write_json(self) -> None:
        """Write each run directory's part of the report to its ``check.json``."""
        for run in self.run_dirs:
            doc = self.to_json(run)
            with open(os.path.join(run, "check.json"), "w") as f:
                f.write(json.dumps(doc, indent=2, default=str))

    def table(self) -> Table:
        """A rich verdict table: one row per check."""
        on = f"Spark check of {len(self.run_ids)} run(s) on {self.master}"
        if self.engine != "spark":
            on = f"Embedded (DuckDB) check of {len(self.run_ids)} run(s)"
        t = Table(title=f"{on}: {self.status}")
        t.add_column("check")
        t.add_column("verdict")
        t.add_column("violations", justify="right")
        t.add_column("first violation", overflow="fold")
        findings = [(r, f) for r, c in sorted(self.completeness.items()) for f in c.findings]
        notes = sum(len(c.notes) for c in self.completeness.values())
        if findings:
            bad = sorted({str(c.status) for c in self.completeness.values() if not c.ok})
            judged = sum(1 for c in self.completeness.values() if c.ok)
            t.add_row(
                "completeness",
                f"[red]{'/'.join(bad)}[/]",
                str(len(findings)),
                f"{findings[0][0]}: {findings[0][1].describe()} ({judged} of {len(self.completeness)} runs judged)",
            )
            for r, f in findings[1:10]:
                t.add_row("", "", "", f"{r}: {f.describe()}")
        else:
            ended = f"{notes} file(s) a SIGKILL ended (listed in check.json)" if notes else ""
            t.add_row("completeness", "[green]ok[/]", "0", ended)
        for name, c in self.checks.items():
            first = _describe(c.violations[0]) if c.violations else ""
            t.add_row(name, "[green]ok[/]" if c.ok else "[red]FAIL[/]", str(c.count), first)
        failed = sorted(r for r, c in self.completeness.items() if c.ok and c.outcome == "failed")
        if failed:  # the checks judge the trace's safety; the run's own failure (no progress, an error) is its
            t.add_row(
                "run outcome",
                "[yellow]failed[/]",
                str(len(failed)),
                f"{failed[0]}: the run itself failed (run.json outcome 'failed': no progress, a violation or "
                "an error stopped it); the checks judge its trace",
            )
        return t


def name_runs(results: dict[str, CheckResult], run_dirs: Sequence[str]) -> None:
    """Each violation's ``run_id`` column holds its run's directory (the views' key): move it to ``run``
    and put the run's own id in ``run_id``, the way a reader knows runs."""
    ids = {d: run_id_of(d) for d in run_dirs}
    for result in results.values():
        for v in (*result.violations, *result.unknown):
            if v.get("run_id") in ids:
                v["run"] = v["run_id"]
                v["run_id"] = ids[v["run"]]


def _describe(v: dict[str, Any]) -> str:
    if v.get("detail"):
        return str(v["detail"])[:300]
    keep = {k: v[k] for k in v if k not in ("messages", "run_id", "run")}
    return json.dumps(keep, default=str)[:300]


def plain(v: Any) -> Any:
    """``v`` as JSON-ready values: bytes as hex, lists and dicts element by element."""
    if isinstance(v, bytes | bytearray):
        return bytes(v).hex()
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def merge_reports(parts: Sequence[CheckReport], run_dirs: Sequence[str], limit: int, *, engine: str) -> CheckReport:
    """One report of ``run_dirs`` from ``parts``, reports of disjoint subsets of them given in the order
    of ``run_dirs`` (each judged on its own: every check is per run): counts and per-run counts add
    up, each check keeps the first ``limit`` violations in that order, rows and torn files add up."""
    checks: dict[str, CheckResult] = {}
    rows: dict[str, int] = {}
    merged = CheckReport(
        run_ids=sorted({i for p in parts for i in p.run_ids}),
        run_dirs=list(run_dirs),
        master="",
        checks=checks,
        rows=rows,
        torn=sum(p.torn for p in parts),
        elapsed_s=0.0,
        engine=engine,
    )
    for part in parts:
        for name, c in part.checks.items():
            into = checks.setdefault(name, CheckResult(name, 0))
            into.count += c.count
            into.per_run.update(c.per_run)
            into.violations += c.violations[: max(0, limit - len(into.violations))]
            into.unknown += c.unknown
        for table, n in part.rows.items():
            rows[table] = rows.get(table, 0) + n
        merged.run_rows.update(part.run_rows)
        merged.run_torn.update(part.run_torn)
        merged.completeness.update(part.completeness)
    return merged
