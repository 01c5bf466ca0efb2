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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from rich.table import Table

from golden.spark.source import find_runs, run_id_of

CHECKS = ("agreement", "contiguity", "election_safety", "durability", "committed_prefix")
DEFAULT_LIMIT = 50
AROUND_BYTES = 512  # messages within this many log bytes of a divergence are shown with it


@dataclass
class CheckResult:
    """One check's outcome: ``count`` violations in all, ``violations`` the first ``limit``."""

    name: str
    count: int
    violations: list[dict[str, Any]] = field(default_factory=list)
    per_run: dict[str, int] = field(default_factory=dict)  # run_id -> violations

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

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks.values())

    def to_json(self, run_id: str | None = None) -> dict[str, Any]:
        """The JSON report (see docs/spark.md); with ``run_id``, that run's part of it (RUN/check.json)."""
        def part(c: CheckResult) -> dict[str, Any]:
            if run_id is None:
                return {"ok": c.ok, "count": c.count, "violations": c.violations}
            count = c.per_run.get(run_id, 0)
            return {"ok": count == 0, "count": count,
                    "violations": [v for v in c.violations if v.get("run_id") == run_id]}

        checks = {name: part(c) for name, c in self.checks.items()}
        return {
            "run_ids": self.run_ids if run_id is None else [run_id],
            "ok": all(c["ok"] for c in checks.values()),
            "master": self.master,
            "elapsed_s": round(self.elapsed_s, 3),
            "rows": self.rows if run_id is None else self.run_rows.get(run_id, {}),
            "torn": self.torn if run_id is None else self.run_torn.get(run_id, 0),
            "checks": checks,
        }

    def table(self) -> Table:
        """A rich verdict table: one row per check."""
        t = Table(title=f"Spark check of {len(self.run_ids)} run(s) on {self.master}: {'PASS' if self.ok else 'FAIL'}")
        t.add_column("check")
        t.add_column("verdict")
        t.add_column("violations", justify="right")
        t.add_column("first violation", overflow="fold")
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


def load(spark: SparkSession, paths: str, table: str) -> DataFrame:
    """One trace table of every run in ``paths`` (comma-separated run directories)."""
    return spark.read.format("clustertrace").option("table", table).load(paths)


# ----------------------------------------------------------------------------------------- checks


def check_agreement(applied: DataFrame, messages: DataFrame, limit: int) -> CheckResult:
    """Same entry and same state digest at every log position, across members and incarnations."""
    # min != max finds a disagreement without the cost of distinct aggregates; exact counts are
    # taken below for the few divergent positions only.
    entry = F.when(F.col("entry_type") != "Snapshot", F.col("entry_digest"))
    per_position = applied.groupBy("run_id", "log_position").agg(
        (F.min(entry) != F.max(entry)).alias("entry_differs"),
        (F.min("state_digest") != F.max("state_digest")).alias("state_differs"),
    )
    bad = per_position.where(F.coalesce(F.col("entry_differs"), F.lit(False)) | F.col("state_differs")).cache()
    per_run = _per_run(bad)
    count = sum(per_run.values())
    violations: list[dict[str, Any]] = []
    if count:
        # Who reported what is gathered only for the first divergent positions, not for every position.
        first = bad.orderBy("run_id", "log_position").limit(limit)
        who = applied.join(F.broadcast(first.select("run_id", "log_position")), ["run_id", "log_position"])
        members = who.groupBy("run_id", "log_position").agg(
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
        found = first.drop("entry_differs", "state_differs").join(members, ["run_id", "log_position"])
        violations = _rows(found.orderBy("run_id", "log_position"), limit)
    bad.unpersist()
    for v in violations[:5]:  # the messages around the first few divergences
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


def check_contiguity(applied: DataFrame, limit: int) -> CheckResult:
    """Each service incarnation applied a gap-free run of entries; ``seq`` counts from 0."""
    w = Window.partitionBy("run_id", "member_id", "service_id", "incarnation").orderBy("seq")
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


def check_durability(ops: DataFrame, log: DataFrame, applied: DataFrame, limit: int) -> CheckResult:
    """Every acknowledged op is in the committed log; a retried copy left the state unchanged."""
    acked = ops.where(F.col("kind") == "ok").select("run_id", "client_id", "op_id", "f", "key", "value")
    # One JSON parse per request (the kv service's command: id, op, key, value).
    request = F.from_json(F.col("body").cast("string"), "id long, op string, key string, value string")
    requests = log.where(F.col("body").isNotNull()).select("run_id", "log_position", request.alias("r")).select(
        "run_id",
        "log_position",
        F.col("r.id").alias("req_id"),
        F.col("r.op").alias("req_op"),
        F.col("r.key").alias("req_key"),
        F.col("r.value").alias("req_value"),
    )
    cond = (
        (acked.run_id == requests.run_id)
        & (acked.op_id == requests.req_id)
        & (acked.f == requests.req_op)
        & acked.key.eqNullSafe(requests.req_key)
        & acked.value.eqNullSafe(requests.req_value)
    )
    missing = acked.join(requests, cond, "left_anti").withColumn("problem", F.lit("acknowledged op not in the log"))
    # Requests in the log more than once (a client's resend): usually none, so what follows is small.
    repeated = (
        requests.groupBy("run_id", "req_id", "req_op", "req_key", "req_value")
        .agg(F.sort_array(F.collect_list("log_position")).alias("positions"))
        .where(F.size("positions") > 1)
    )
    per_op = acked.join(repeated, (acked.run_id == repeated.run_id) & (acked.op_id == repeated.req_id)
                        & (acked.f == repeated.req_op) & acked.key.eqNullSafe(repeated.req_key)
                        & acked.value.eqNullSafe(repeated.req_value)).select(
        acked.run_id, "client_id", "op_id", "f", "key", "value", "positions")
    # A copy after the first (a client's resend) must leave every member's state as it was: compare
    # the state after each copy with the state before it (the same incarnation's previous row). Only
    # the rows at copy positions and the rows just before them are looked at, never a whole-table sort.
    copies = per_op.select(
        "run_id", "client_id", "op_id", "f", "key", "value", "positions",
        F.explode(F.slice("positions", 2, 1 << 20)).alias("copy_position"),
    )
    keys = ["run_id", "member_id", "service_id", "incarnation"]
    at_copy = applied.where(F.col("entry_type") == "SessionMessage").join(
        copies.select("run_id", F.col("copy_position").alias("log_position")).distinct(),
        ["run_id", "log_position"], "left_semi",
    ).select(*keys, "log_position", (F.col("seq") - 1).alias("seq"), F.col("state_digest").alias("after"))
    before = applied.select(*keys, "seq", F.col("state_digest").alias("before"))
    state_change = at_copy.join(before, [*keys, "seq"]).where(F.col("after") != F.col("before")).select(
        "run_id", "log_position")
    twice = (
        copies.join(
            state_change,
            (copies.run_id == state_change.run_id) & (copies.copy_position == state_change.log_position),
        )
        .select(copies.run_id, "client_id", "op_id", "f", "key", "value", "positions", "copy_position")
        .dropDuplicates(["run_id", "client_id", "op_id", "copy_position"])
        .withColumn("problem", F.lit("applied more than once"))
    )
    cols = ["run_id", "client_id", "op_id", "f", "key", "value", "problem"]
    bad = missing.select(*cols).unionByName(twice.select(*cols)).orderBy("run_id", "client_id", "op_id")
    per_run = _per_run(bad)
    count = sum(per_run.values())
    return CheckResult("durability", count, _rows(bad, limit) if count else [], per_run)


def check_committed_prefix(applied: DataFrame, log: DataFrame, events: DataFrame, limit: int) -> CheckResult:
    """No committed entry lost: applied entries are in the final committed log, byte for byte, and
    commit positions never move back within an incarnation."""
    entries = applied.where(F.col("entry_type") != "Snapshot").select(
        "run_id", "member_id", "incarnation", "log_position", F.col("entry_digest").alias("applied_digest")
    )
    committed = log.select("run_id", "log_position", F.col("entry_digest").alias("log_digest"))
    has_log = log.select("run_id").distinct()  # runs without a log table are not judged on it
    lost = (
        entries.join(has_log, "run_id")
        .join(committed, ["run_id", "log_position"], "left")
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
    bad = lost.unionByName(back).orderBy("run_id", "log_position", "member_id")
    per_run = _per_run(bad)
    count = sum(per_run.values())
    return CheckResult("committed_prefix", count, _rows(bad, limit) if count else [], per_run)


# ------------------------------------------------------------------------------------------ entry


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
    from golden.spark.session import spark_session

    started = time.monotonic()
    runs = find_runs(",".join(str(p) for p in run_dirs))
    paths = ",".join(runs)
    spark = spark or spark_session(master)
    # One row per file (rows, torn tail): small, so it is collected once and summed here.
    files = load(spark, paths, "files").drop("error").collect()
    rows: dict[str, int] = {}
    run_rows: dict[str, dict[str, int]] = {}
    run_torn: dict[str, int] = {}
    for f in files:
        rows[f["table"]] = rows.get(f["table"], 0) + int(f["rows"] or 0)
        per = run_rows.setdefault(f["run_id"], {})
        per[f["table"]] = per.get(f["table"], 0) + int(f["rows"] or 0)
        run_torn[f["run_id"]] = run_torn.get(f["run_id"], 0) + int(bool(f["torn"]))
    torn = sum(run_torn.values())
    run_ids = sorted({f["run_id"] for f in files})
    if rows.get("log"):
        log = load(spark, paths, "log").select("run_id", "log_position", "entry_digest", "body")
    else:
        log = spark.createDataFrame([], "run_id string, log_position long, entry_digest binary, body binary")
    # Tables are not cached: reading a trace file through the source (Arrow batches straight in) is
    # faster than building Spark's in-memory cache of it, so each check reads what it needs.
    applied = load(spark, paths, "applied")
    events = load(spark, paths, "events")
    results = {
        "agreement": check_agreement(applied, load(spark, paths, "messages"), limit),
        "contiguity": check_contiguity(applied, limit),
        "election_safety": check_election_safety(events, limit),
        "durability": check_durability(load(spark, paths, "ops"), log, applied, limit),
        "committed_prefix": check_committed_prefix(applied, log, events, limit),
    }
    report = CheckReport(
        run_ids=run_ids,
        run_dirs=runs,
        master=spark.sparkContext.master,
        checks=results,
        rows=rows,
        torn=torn,
        elapsed_s=time.monotonic() - started,
        run_rows=run_rows,
        run_torn=run_torn,
    )
    if write_json:
        for run in runs:
            doc = report.to_json(run_id_of(run))
            (Path(run) / "check.json").write_text(json.dumps(doc, indent=2, default=str))
    return report
