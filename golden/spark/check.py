"""``clusterlab check``: a Spark job proving one or many recorded runs safe.

Checks, each a DataFrame query over the ``clustertrace`` source (only violations reach the driver,
at most ``limit`` of each):

- agreement: at every log position, every member and incarnation applied the same entry bytes
  (``entry_digest``) and reached the same service state (``state_digest``; a Snapshot row at P
  counts as the state at P);
- contiguity: each service incarnation applied entries back to back (an entry starts where the
  previous ended, a Snapshot row sets the start) and its ``seq`` has no holes;
- election_safety: at most one member became leader in each leadership term;
- durability: every acknowledged client op is in the committed log, and a retried copy of it
  changed nothing (the service applied it exactly once);
- committed_prefix: every entry any service applied (hence committed) is in the final committed log
  with the same bytes, and each member's commit position never moved back within an incarnation.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterlab.golden.spark.session import spark_session
from clusterlab.golden.spark.source import find_runs, output_schema, run_id_of, select_columns, trace_files
from clusterlab.harness.completeness import (
    Completeness,
    FileFacts,
    exit_code,
    judge,
    kills_from_events,
    read_meta,
    read_sidecars,
)
from clusterlab.harness.recorder import SCHEMAS
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from rich.table import Table

CHECKS = ("agreement", "contiguity", "election_safety", "durability", "committed_prefix", "linearizability")
DEFAULT_LIMIT = 50
AROUND_BYTES = 512  # messages within this many log bytes of a divergence are shown with it


@dataclass
class CheckResult:
    """One check's outcome: ``count`` violations in all, ``violations`` the first ``limit``."""

    name: str
    count: int
    violations: list[dict[str, Any]] = field(default_factory=list)
    per_run: dict[str, int] = field(default_factory=dict)  # run_id -> violations
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
    run_rows: dict[str, dict[str, int]] = field(default_factory=dict)  # run_id -> table -> rows
    run_torn: dict[str, int] = field(default_factory=dict)
    # run directory -> its completeness, judged first; only COMPLETE runs are checked ("complete or not
    # judged"). Keyed by directory: two simulator runs of one configuration share a run_id.
    completeness: dict[str, Completeness] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return all(c.ok for c in self.completeness.values())

    @property
    def ok(self) -> bool:
        return self.complete and all(c.ok for c in self.checks.values())

    def run_status(self, run_id: str) -> str:
        """``PASS``, ``FAIL``, ``INCOMPLETE`` or ``CORRUPT`` of the run(s) with ``run_id``."""
        bad = [c for d, c in self.completeness.items() if run_id_of(d) == run_id and not c.ok]
        if bad:
            return str(max((c.status for c in bad), key=lambda s: s == "CORRUPT"))
        return "FAIL" if any(r.per_run.get(run_id) for r in self.checks.values()) else "PASS"

    @property
    def status(self) -> str:
        """The verdict on all runs: FAIL if a complete run fails a check, else CORRUPT, INCOMPLETE or PASS."""
        return ("PASS", "FAIL", "", "INCOMPLETE", "CORRUPT")[self.exit_code]

    @property
    def exit_code(self) -> int:
        """0 PASS, 1 FAIL, 3 INCOMPLETE, 4 CORRUPT (docs/trace-schema.md, "Verdicts")."""
        statuses = [str(c.status) if not c.ok else self.run_status(run_id_of(d)) for d, c in self.completeness.items()]
        return exit_code(statuses or [self.run_status(r) for r in self.run_ids])

    def to_json(self, run_id: str | None = None) -> dict[str, Any]:
        """The JSON report (see docs/spark.md); with ``run_id``, that run's part of it (RUN/check.json)."""

        def part(c: CheckResult) -> dict[str, Any]:
            if run_id is None:
                return {"ok": c.ok, "count": c.count, "violations": c.violations}
            count = c.per_run.get(run_id, 0)
            return {
                "ok": count == 0,
                "count": count,
                "violations": [v for v in c.violations if v.get("run_id") == run_id],
            }

        checks = {name: part(c) for name, c in self.checks.items()}
        completeness = {r: c.to_json() for r, c in self.completeness.items() if run_id is None or r == run_id}
        return {
            "run_ids": self.run_ids if run_id is None else [run_id],
            "ok": all(c["ok"] for c in checks.values())
            and all(c["status"] == "COMPLETE" for c in completeness.values()),
            "status": self.status if run_id is None else self.run_status(run_id),
            "completeness": completeness,
            "master": self.master,
            "elapsed_s": round(self.elapsed_s, 3),
            "rows": self.rows if run_id is None else self.run_rows.get(run_id, {}),
            "torn": self.torn if run_id is None else self.run_torn.get(run_id, 0),
            "checks": checks,
        }

    def table(self) -> Table:
        """A rich verdict table: one row per check."""
        t = Table(title=f"Spark check of {len(self.run_ids)} run(s) on {self.master}: {self.status}")
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
        return t


def _describe(v: dict[str, Any]) -> str:
    keep = {k: v[k] for k in v if k not in ("messages", "run_id")}
    return json.dumps(keep, default=str)[:300]


def _hex(b: Any) -> str | None:
    return None if b is None else bytes(b).hex()


def _per_run(bad: DataFrame) -> dict[str, int]:
    """Violations per run (one small aggregate instead of a bare count)."""
    return {r["run_id"]: int(r["count"]) for r in bad.groupBy("run_id").count().collect()}


def _rows(df: DataFrame, limit: int) -> list[dict[str, Any]]:
    out = []
    for r in df.limit(limit).collect():
        d = r.asDict(recursive=True)
        out.append({k: _plain(v) for k, v in d.items()})
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, bytes | bytearray):
        return bytes(v).hex()
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def load(spark: SparkSession, paths: str, table: str, columns: Sequence[str] = ()) -> DataFrame:
    """One trace table of every run in ``paths`` (comma-separated run directories); with ``columns``,
    only those columns leave the source (it gets no column pruning from Spark)."""
    reader = spark.read.format("clustertrace").option("table", table)
    if columns:
        reader = reader.option("columns", ",".join(columns))
    return reader.load(paths)


# ----------------------------------------------------------------------------------------- checks

# The columns each query reads (the source builds and ships only these).
_POSITION_COLUMNS = ("run_id", "log_position", "service_id", "entry_type", "entry_digest", "state_digest")
_INCARNATION = ("run_id", "member_id", "service_id", "incarnation")
_AROUND_COLUMNS = (
    "run_id",
    "process",
    "direction",
    "channel",
    "msg_type",
    "leadership_term_id",
    "log_position",
    "wall_ns",
)
_EVENT_COLUMNS = (
    "run_id",
    "source",
    "member_id",
    "incarnation",
    "kind",
    "leadership_term_id",
    "log_position",
    "wall_ns",
    "seq",
)
BROADCAST_ROWS = 200_000  # a side this small is sent to every task instead of shuffling the other side


class Tables:
    """The trace tables of one set of runs, read column-projected on demand."""

    def __init__(self, spark: SparkSession, paths: str, rows: dict[str, int], log_runs: Sequence[str]) -> None:
        self.spark = spark
        self.paths = paths
        self.rows = rows  # table -> rows in all runs
        self.log_runs = sorted(log_runs)  # runs with committed log rows; only they are judged on the log

    def read(self, table: str, *columns: str) -> DataFrame:
        """``table``'s ``columns``; a table no run has rows of is an empty DataFrame of the contract's
        types (a run without client ops has nothing for durability to judge), not a source error."""
        if not self.rows.get(table):
            schema = select_columns(output_schema(table, SCHEMAS[table]), ",".join(columns))
            return self.spark.createDataFrame([], from_arrow_schema(schema))
        return load(self.spark, self.paths, table, columns)


def flag_positions(tables: Tables) -> DataFrame:
    """One pass over ``applied`` grouped by (run, log position, service id: a member's services differ
    in state), joined with the committed log: the positions where members disagree (``entry_differs``,
    ``state_differs``) or an applied entry is missing from, or differs in, the final committed log
    (``lost``). Only flagged positions are kept, so the result is small on a healthy run; agreement
    and committed_prefix both start from it."""
    applied = tables.read("applied", *_POSITION_COLUMNS)
    is_entry = F.col("entry_type") != "Snapshot"
    entry = F.when(is_entry, F.col("entry_digest"))
    # min != max finds a disagreement without distinct aggregates; exact counts are taken later for
    # the flagged positions only.
    per_position = applied.groupBy("run_id", "log_position", "service_id").agg(
        F.min(entry).alias("entry_min"),
        F.max(entry).alias("entry_max"),
        F.min("state_digest").alias("state_min"),
        F.max("state_digest").alias("state_max"),
        F.count(F.when(is_entry, 1)).alias("entries"),
    )
    entry_differs = F.coalesce(F.col("entry_min") != F.col("entry_max"), F.lit(False))
    state_differs = F.coalesce(F.col("state_min") != F.col("state_max"), F.lit(False))
    if tables.log_runs:
        committed = tables.read("log", "run_id", "log_position", "entry_digest").withColumnRenamed(
            "entry_digest", "log_digest"
        )
        per_position = per_position.join(committed, ["run_id", "log_position"], "left")
        # As row by row: some applied entry here has no committed entry, or a different one.
        lost = (
            F.col("run_id").isin(tables.log_runs)
            & (F.col("entries") > 0)
            & (
                F.col("log_digest").isNull()
                | F.coalesce(F.col("entry_min") != F.col("log_digest"), F.lit(False))
                | F.coalesce(F.col("entry_max") != F.col("log_digest"), F.lit(False))
            )
        )
    else:
        lost = F.lit(False)
    return per_position.select(
        "run_id",
        "log_position",
        "service_id",
        entry_differs.alias("entry_differs"),
        state_differs.alias("state_differs"),
        lost.alias("lost"),
    ).where(F.col("entry_differs") | F.col("state_differs") | F.col("lost"))


def check_agreement(tables: Tables, flagged: DataFrame, limit: int) -> CheckResult:
    """Same entry and same state digest at every log position, across members and incarnations (of
    each service id)."""
    at = ["run_id", "log_position", "service_id"]
    bad = flagged.where(F.col("entry_differs") | F.col("state_differs")).select(*at)
    per_run = _per_run(bad)
    count = sum(per_run.values())
    violations: list[dict[str, Any]] = []
    if count:
        # Who reported what is gathered only for the first divergent positions, not for every position.
        first = bad.orderBy(*at).limit(limit)
        entry = F.when(F.col("entry_type") != "Snapshot", F.col("entry_digest"))
        who = tables.read(
            "applied",
            "run_id",
            "member_id",
            "service_id",
            "incarnation",
            "log_position",
            "entry_type",
            "entry_digest",
            "state_digest",
        ).join(F.broadcast(first), at)
        members = who.groupBy(*at).agg(
            F.sort_array(
                F.collect_set(
                    F.struct(
                        F.col("member_id").alias("member"),
                        F.col("incarnation"),
                        F.col("entry_type"),
                        F.hex("entry_digest").alias("entry_digest"),
                        F.hex("state_digest").alias("state_digest"),
                    )
                )
            ).alias("members"),
            F.countDistinct(entry).alias("entries"),
            F.countDistinct("state_digest").alias("states"),
        )
        violations = _rows(members.orderBy(*at), limit)
    messages = tables.read("messages", *_AROUND_COLUMNS) if violations else None
    for v in violations[:5]:  # the messages around the first few divergences
        assert messages is not None
        pos = v["log_position"]
        around = (
            messages.where(
                (F.col("run_id") == v["run_id"])
                & F.col("log_position").between(pos - AROUND_BYTES, pos + AROUND_BYTES)
                & (F.col("channel") != "control")
            )
            .select("process", "direction", "channel", "msg_type", "leadership_term_id", "log_position", "wall_ns")
            .orderBy("wall_ns")
        )
        v["messages"] = _rows(around, 12)
        v["kind"] = "entry" if v["entries"] > 1 else "state"
    return CheckResult("agreement", count, violations, per_run)


def check_contiguity(tables: Tables, limit: int) -> CheckResult:
    """Each service incarnation applied a gap-free run of entries; ``seq`` counts from 0."""
    applied = tables.read("applied", *_INCARNATION, "seq", "log_position", "length", "entry_type")
    w = Window.partitionBy(*_INCARNATION).orderBy("seq")
    rows = applied.select(
        "run_id",
        "member_id",
        "incarnation",
        "seq",
        "log_position",
        "length",
        "entry_type",
        F.lag("log_position").over(w).alias("previous_end"),
        (F.row_number().over(w) - 1).alias("expected_seq"),
    )
    bad = rows.where(
        (F.col("seq") != F.col("expected_seq"))
        | (
            (F.col("entry_type") != "Snapshot")
            & ((F.col("log_position") - F.col("length")) != F.coalesce(F.col("previous_end"), F.lit(0)))
        )
    ).orderBy("run_id", "member_id", "incarnation", "seq")
    per_run = _per_run(bad)
    count = sum(per_run.values())
    return CheckResult("contiguity", count, _rows(bad, limit) if count else [], per_run)


def check_election_safety(events: DataFrame, limit: int) -> CheckResult:
    """At most one leader per leadership term."""
    leaders = events.where((F.col("kind") == "leader") & F.col("leadership_term_id").isNotNull())
    bad = (
        leaders.groupBy("run_id", "leadership_term_id")
        .agg(F.sort_array(F.collect_set("member_id")).alias("members"))
        .where(F.size("members") > 1)
        .orderBy("run_id", "leadership_term_id")
    )
    per_run = _per_run(bad)
    count = sum(per_run.values())
    return CheckResult("election_safety", count, _rows(bad, limit) if count else [], per_run)


def check_durability(tables: Tables, limit: int) -> CheckResult:
    """Every acknowledged op is in the committed log; a retried copy left the state unchanged."""
    acked = (
        tables.read("ops", "run_id", "kind", "client_id", "op_id", "f", "key", "value")
        .where(F.col("kind") == "ok")
        .drop("kind")
    )
    # One JSON parse per request (the kv service's command: id, op, key, value).
    request = F.from_json(F.col("body").cast("string"), "id long, op string, key string, value string")
    requests = (
        tables.read("log", "run_id", "log_position", "body")
        .where(F.col("body").isNotNull())
        .select("run_id", "log_position", request.alias("r"))
        .select(
            "run_id",
            F.col("r.id").alias("op_id"),
            F.col("r.op").alias("f"),
            F.col("r.key").alias("key"),
            F.col("r.value").alias("value"),
            "log_position",
        )
    )
    # Each distinct request with the positions it is at (one shuffle of the log), then one join with
    # the acknowledged ops: no positions = not in the log; more than one = resent copies to look at.
    op_key = ["run_id", "op_id", "f", "key", "value"]
    positions = requests.groupBy(*op_key).agg(F.sort_array(F.collect_list("log_position")).alias("positions"))
    cond = [acked[c].eqNullSafe(positions[c]) for c in op_key]
    per_op = acked.join(positions, cond, "left").select(*[acked[c] for c in op_key], "client_id", "positions")
    per_op = per_op.where(F.col("positions").isNull() | (F.size("positions") > 1)).cache()
    cols = ["run_id", "client_id", "op_id", "f", "key", "value", "problem"]
    missing = per_op.where(F.col("positions").isNull()).withColumn("problem", F.lit("acknowledged op not in the log"))
    bad = missing.select(*cols)
    # A copy after the first (a client's resend) must leave every member's state as it was: compare
    # the state after each copy with the state before it (the same incarnation's previous row). Only
    # the rows at copy positions and the rows just before them are looked at, never a whole-table sort.
    copies = (
        per_op.where(F.col("positions").isNotNull())
        .select(
            "run_id",
            "client_id",
            "op_id",
            "f",
            "key",
            "value",
            "positions",
            F.explode(F.slice("positions", 2, 1 << 20)).alias("copy_position"),
        )
        .cache()
    )
    n_copies = copies.count()
    if n_copies:
        applied = tables.read("applied", *_INCARNATION, "seq", "log_position", "entry_type", "state_digest")
        copy_positions = copies.select("run_id", F.col("copy_position").alias("log_position")).distinct()
        at_copy = (
            applied.where(F.col("entry_type") == "SessionMessage")
            .join(
                F.broadcast(copy_positions) if n_copies <= BROADCAST_ROWS else copy_positions,
                ["run_id", "log_position"],
                "left_semi",
            )
            .select(
                *_INCARNATION, "log_position", (F.col("seq") - 1).alias("seq"), F.col("state_digest").alias("after")
            )
        )
        before = applied.select(*_INCARNATION, "seq", F.col("state_digest").alias("before"))
        if n_copies <= BROADCAST_ROWS:  # one row per member at each copy: small, so the whole table is not shuffled
            at_copy = F.broadcast(at_copy)
        state_change = (
            before.join(at_copy, [*_INCARNATION, "seq"])
            .where(F.col("after") != F.col("before"))
            .select("run_id", "log_position")
        )
        twice = (
            copies.join(
                state_change,
                (copies.run_id == state_change.run_id) & (copies.copy_position == state_change.log_position),
            )
            .select(copies.run_id, "client_id", "op_id", "f", "key", "value", "positions", "copy_position")
            .dropDuplicates(["run_id", "client_id", "op_id", "copy_position"])
            .withColumn("problem", F.lit("applied more than once"))
        )
        bad = bad.unionByName(twice.select(*cols))
    bad = bad.orderBy("run_id", "client_id", "op_id")
    per_run = _per_run(bad)
    count = sum(per_run.values())
    result = CheckResult("durability", count, _rows(bad, limit) if count else [], per_run)
    copies.unpersist()
    per_op.unpersist()
    return result


def check_committed_prefix(tables: Tables, flagged: DataFrame, events: DataFrame, limit: int) -> CheckResult:
    """No committed entry lost: applied entries are in the final committed log, byte for byte, and
    commit positions never move back within an incarnation."""
    cols = ["run_id", "member_id", "incarnation", "log_position", "applied_digest", "log_digest", "problem"]
    lost_at = flagged.where(F.col("lost")).select("run_id", "log_position").distinct().cache()
    if lost_at.count():
        # Row by row, at the flagged positions only.
        entries = (
            tables.read("applied", "run_id", "member_id", "incarnation", "log_position", "entry_type", "entry_digest")
            .where(F.col("entry_type") != "Snapshot")
            .join(lost_at, ["run_id", "log_position"], "left_semi")
            .select("run_id", "member_id", "incarnation", "log_position", F.col("entry_digest").alias("applied_digest"))
        )
        committed = tables.read("log", "run_id", "log_position", "entry_digest").select(
            "run_id", "log_position", F.col("entry_digest").alias("log_digest")
        )
        lost = (
            entries.join(committed, ["run_id", "log_position"], "left")
            .where(F.col("log_digest").isNull() | (F.col("log_digest") != F.col("applied_digest")))
            .select(
                "run_id",
                "member_id",
                "incarnation",
                "log_position",
                F.hex("applied_digest").alias("applied_digest"),
                F.hex("log_digest").alias("log_digest"),
                F.lit("applied entry not in the final committed log").alias("problem"),
            )
        )
    else:
        lost = None
    w = Window.partitionBy("run_id", "source", "incarnation").orderBy("wall_ns", "seq")
    commits = events.where((F.col("kind") == "commit") & F.col("log_position").isNotNull()).select(
        "run_id",
        "member_id",
        "incarnation",
        "log_position",
        F.lag("log_position").over(w).alias("previous"),
    )
    back = commits.where(F.col("log_position") < F.col("previous")).select(
        "run_id",
        "member_id",
        "incarnation",
        "log_position",
        F.lit(None).cast("string").alias("applied_digest"),
        F.lit(None).cast("string").alias("log_digest"),
        F.concat(F.lit("commit position moved back from "), F.col("previous").cast("string")).alias("problem"),
    )
    bad = (
        (back if lost is None else lost.unionByName(back)).select(*cols).orderBy("run_id", "log_position", "member_id")
    )
    per_run = _per_run(bad)
    count = sum(per_run.values())
    result = CheckResult("committed_prefix", count, _rows(bad, limit) if count else [], per_run)
    lost_at.unpersist()
    return result


# ------------------------------------------------------------------------------------------ entry


def check_linearizability(tables: Tables, limit: int) -> CheckResult:
    """Every run's client history, per key, linearizable (golden/spark/linearizability.py); keys whose
    search ran out of budget are reported as ``unknown`` (not violations)."""
    from clusterlab.golden.spark.linearizability import judge_ops, violations

    count, shown, per_run, unknown = violations(judge_ops(tables.read("ops")), limit)
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
) -> CheckReport:
    """Run every check over ``run_dirs`` (run directories, or parents of runs) in one Spark job set.
    With ``write_json``, each run directory gets ``check.json`` (the whole report)."""

    started = time.monotonic()
    all_runs = find_runs(",".join(str(p) for p in run_dirs))
    spark = spark or spark_session(master)
    # One row per file (rows, torn tail, CRCs): small, so it is collected once, judged and summed here.
    completeness, all_files = establish_completeness(spark, all_runs)
    run_ids = sorted({run_id_of(r) for r in all_runs})
    runs = [r for r in all_runs if completeness[r].ok]  # complete or not judged
    paths = ",".join(runs)
    files = [f for r in runs for f in all_files.get(r, [])]
    rows: dict[str, int] = {}
    run_rows: dict[str, dict[str, int]] = {}
    run_torn: dict[str, int] = {}
    for f in files:
        rows[f["table"]] = rows.get(f["table"], 0) + int(f["rows"] or 0)
        per = run_rows.setdefault(f["run_id"], {})
        per[f["table"]] = per.get(f["table"], 0) + int(f["rows"] or 0)
        run_torn[f["run_id"]] = run_torn.get(f["run_id"], 0) + int(bool(f["torn"]))
    torn = sum(run_torn.values())
    log_runs = [r for r, per in run_rows.items() if per.get("log")]
    tables = Tables(spark, paths, rows, log_runs)
    # Each check reads only the columns it needs, straight from the source: reading a trace file
    # (Arrow batches straight in) is faster than building Spark's in-memory cache of it. What two
    # checks share is computed once and cached: the flagged positions (small on a healthy run) and
    # the events (a few rows per election and commit).
    if not runs:  # nothing complete to judge
        results = {name: CheckResult(name, 0) for name in CHECKS}
        return _report(
            run_ids, all_runs, spark, results, rows, torn, started, run_rows, run_torn, completeness, write_json
        )
    flagged = flag_positions(tables).cache()
    events = tables.read("events", *_EVENT_COLUMNS).cache()
    try:
        results = {
            "agreement": check_agreement(tables, flagged, limit),
            "contiguity": check_contiguity(tables, limit),
            "election_safety": check_election_safety(events, limit),
            "durability": check_durability(tables, limit),
            "committed_prefix": check_committed_prefix(tables, flagged, events, limit),
            "linearizability": check_linearizability(tables, limit),
        }
    finally:
        flagged.unpersist()
        events.unpersist()
    return _report(run_ids, all_runs, spark, results, rows, torn, started, run_rows, run_torn, completeness, write_json)


def _report(
    run_ids: list[str],
    runs: list[str],
    spark: SparkSession,
    results: dict[str, CheckResult],
    rows: dict[str, int],
    torn: int,
    started: float,
    run_rows: dict[str, dict[str, int]],
    run_torn: dict[str, int],
    completeness: dict[str, Completeness],
    write_json: bool,
) -> CheckReport:
    report = CheckReport(
        run_ids=run_ids,
        run_dirs=runs,
        master=spark.sparkContext.master or "",
        checks=results,
        rows=rows,
        torn=torn,
        elapsed_s=time.monotonic() - started,
        run_rows=run_rows,
        run_torn=run_torn,
        completeness=completeness,
    )
    if write_json:
        for run in runs:
            doc = report.to_json(run_id_of(run))
            (Path(run) / "check.json").write_text(json.dumps(doc, indent=2, default=str))
    return report


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
