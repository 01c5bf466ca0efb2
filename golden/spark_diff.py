"""Spark jobs diffing traces against golden traces: the state at every log position, and (for
simulator goldens) every message.

Each :class:`Comparison` pairs a golden directory with an "actual" run directory (the golden's log
replayed through today's code, or a simulator re-run from the golden's seed). Two plans compute the
same per-comparison result (the same fields, the same first divergent row):

- ``tasks`` (the default): Spark distributes whole comparisons over its task slots
  (:func:`clusterlab.spark.tasks.map_in_tasks`), and inside each task the embedded diff
  (:mod:`clusterlab.golden.diff_embedded`: DuckDB on one thread) diffs one comparison. A comparison
  larger than :data:`clusterlab.spark.tasks.UNIT_BYTES` is planned as ``sql`` instead.
- ``sql``: one set of Spark SQL jobs over all comparisons: the ``applied`` tables of every golden and
  every actual run are read with the ``clustertrace`` source, joined on (comparison, log_position),
  and only per-comparison summaries and the first divergent row of each reach the driver.

Position kinds: ``entry`` (the entry bytes differ), ``state`` (same entry, different state digest),
``missing`` (the golden has the position, the actual run never applied it), ``extra`` (the other way).
"""

from __future__ import annotations

from typing import Any

from clusterlab.golden.diff_embedded import (
    APPLIED_COLUMNS,
    KINDS,
    Comparison,
    MessageDiff,
    PositionDiff,
    message_diff,
    position_diff,
    trace_bytes,
)
from clusterlab.golden.diff_embedded import MESSAGE_IGNORED as _MESSAGE_IGNORED
from clusterlab.golden.diff_embedded import MESSAGE_KEY as _MESSAGE_KEY
from clusterlab.spark.check import load
from clusterlab.spark.source import find_runs, trace_files
from clusterlab.spark.tasks import UNIT_BYTES, map_in_tasks
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

__all__ = ["KINDS", "Comparison", "MessageDiff", "PositionDiff", "diff_messages", "diff_positions"]
PLANS = ("tasks", "sql")


def _sizes(comparisons: list[Comparison], table: str) -> list[int]:
    return [trace_bytes(c.golden_dir, table) + trace_bytes(c.actual_dir, table) for c in comparisons]


def _split(
    comparisons: list[Comparison], table: str, plan: str
) -> tuple[list[Comparison], list[int], list[Comparison]]:
    """(comparisons for tasks, their sizes, comparisons for Spark SQL) under ``plan``: with ``tasks``,
    a comparison too large for one executor (over ``UNIT_BYTES``) goes to Spark SQL."""
    if plan not in PLANS:
        raise ValueError(f"plan must be one of {', '.join(PLANS)}, not {plan!r}")
    if plan == "sql":
        return [], [], comparisons
    sizes = _sizes(comparisons, table)
    small = [i for i, n in enumerate(sizes) if n <= UNIT_BYTES]
    large = [c for c, n in zip(comparisons, sizes, strict=True) if n > UNIT_BYTES]
    return [comparisons[i] for i in small], [sizes[i] for i in small], large


def diff_positions(
    spark: SparkSession, comparisons: list[Comparison], *, plan: str = "tasks"
) -> dict[tuple[str, str], PositionDiff]:
    """Per comparison, the position diff. ``plan``: ``tasks`` (each comparison diffed by
    :func:`clusterlab.golden.diff_embedded.position_diff` inside a Spark task) or ``sql`` (one Spark
    SQL job set for all of them); both compute the same :class:`PositionDiff`."""
    tasks, sizes, sql = _split(comparisons, "applied", plan)
    out = dict(_diff_positions_sql(spark, sql)) if sql else {}
    done = map_in_tasks(spark, position_diff, tasks, sizes, description="golden position diff")
    out.update(((c.name, c.mode), d) for c, d in zip(tasks, done, strict=True))
    return out


def diff_messages(spark: SparkSession, comparisons: list[Comparison], *, plan: str = "tasks") -> dict[str, MessageDiff]:
    """Per comparison with ``messages``, the row-by-row message diff, keyed by golden name. ``plan``:
    ``tasks`` (:func:`clusterlab.golden.diff_embedded.message_diff` inside Spark tasks) or ``sql``;
    both compute the same :class:`MessageDiff`."""
    tasks, sizes, sql = _split([c for c in comparisons if c.messages], "messages", plan)
    out = dict(_diff_messages_sql(spark, sql)) if sql else {}
    done = map_in_tasks(spark, message_diff, tasks, sizes, description="golden message diff")
    out.update((c.name, d) for c, d in zip(tasks, done, strict=True))
    return out


def _in_dir(column: str, directory_column: str) -> Any:
    return F.col(column).startswith(F.concat(F.col(directory_column), F.lit("/")))


def _pairs(spark: SparkSession, comparisons: list[Comparison]) -> DataFrame:
    rows = [(c.name, c.mode, c.golden_dir.rstrip("/"), c.actual_dir.rstrip("/"), c.messages) for c in comparisons]
    return F.broadcast(
        spark.createDataFrame(
            rows, "name string, mode string, golden_dir string, actual_dir string, with_messages boolean"
        )
    )


def _paths(dirs: list[str]) -> str:
    return ",".join(dict.fromkeys(d.rstrip("/") for d in dirs))


_APPLIED_COLUMNS = APPLIED_COLUMNS
_APPLIED_TYPES = {
    "log_position": "bigint",
    "entry_type": "string",
    "entry_digest": "binary",
    "state_digest": "binary",
    "member_id": "smallint",
    "incarnation": "int",
}


def _applied(spark: SparkSession, comparisons: list[Comparison], side: str, columns: tuple[str, ...]) -> DataFrame:
    """The ``applied`` rows of each comparison's ``side`` directory (golden_dir or actual_dir), tagged
    with its name and mode: one column-projected read per comparison, so no row carries its file path
    and no row is matched to a directory by a string condition."""
    parts = [
        load(spark, getattr(c, side).rstrip("/"), "applied", columns).select(
            F.lit(c.name).alias("name"), F.lit(c.mode).alias("mode"), *columns
        )
        for c in comparisons
        if trace_files(find_runs(getattr(c, side)), "applied")
    ]
    if not parts:  # no side has an applied file: no rows, as a join over them would give
        return spark.createDataFrame(
            [], ", ".join(["name string", "mode string", *(f"{c} {_APPLIED_TYPES[c]}" for c in columns)])
        )
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def _diff_positions_sql(spark: SparkSession, comparisons: list[Comparison]) -> dict[tuple[str, str], PositionDiff]:
    """Per comparison, the position diff as one Spark SQL job set for all of them (``plan="sql"``). A
    position's kind is defined as in :mod:`clusterlab.golden.diff_embedded` (its ``_POSITIONS``), here
    in Spark's terms; tests/golden/test_diff_plans.py holds the two plans equal.

    Positions are compared by aggregates that hash-aggregate cheaply (min/max of the actual digests
    against the golden's, counts); the actual members' digests are gathered for the first divergent
    position of each comparison only."""
    if not comparisons:
        return {}
    diffs = _position_kinds(spark, comparisons).cache()
    try:
        agg = [
            F.count("golden_state").alias("golden_positions"),
            F.count("actual_rows").alias("actual_positions"),
            F.count("kind").alias("divergent"),
            F.min(F.when(F.col("kind").isNotNull(), F.col("log_position"))).alias("first_position"),
            *[F.sum(F.when(F.col("kind") == k, 1).otherwise(0)).alias(f"n_{k}") for k in KINDS],
        ]
        summary = diffs.groupBy("name", "mode").agg(*agg).cache()
        out: dict[tuple[str, str], PositionDiff] = {}
        for r in summary.collect():
            out[(r["name"], r["mode"])] = PositionDiff(
                r["name"],
                r["mode"],
                r["golden_positions"],
                r["actual_positions"],
                r["divergent"],
                {k: r[f"n_{k}"] for k in KINDS if r[f"n_{k}"]},
            )
        if out and any(d.divergent for d in out.values()):
            firsts = F.broadcast(
                summary.where(F.col("first_position").isNotNull()).select("name", "mode", "first_position")
            )
            _fill_first_divergence(spark, comparisons, diffs, firsts, out)
        summary.unpersist()
        for c in comparisons:  # a comparison with no rows on either side
            out.setdefault((c.name, c.mode), PositionDiff(c.name, c.mode))
        return out
    finally:
        diffs.unpersist()


def _position_kinds(spark: SparkSession, comparisons: list[Comparison]) -> DataFrame:
    """One row per compared position: the golden's entry and state, the actual rows' count and the kind
    of divergence (``extra``, ``missing``, ``entry``, ``state``; null where the position agrees)."""
    golden = (
        _applied(spark, comparisons, "golden_dir", _APPLIED_COLUMNS)
        .where(F.col("entry_type") != "Snapshot")
        .select(
            "name",
            "mode",
            "log_position",
            F.col("entry_type").alias("golden_entry_type"),
            F.col("entry_digest").alias("golden_entry"),
            F.col("state_digest").alias("golden_state"),
        )
    )
    actual_rows = _applied(spark, comparisons, "actual_dir", _APPLIED_COLUMNS)
    entry = F.when(F.col("entry_type") != "Snapshot", F.col("entry_digest"))
    actual = actual_rows.groupBy("name", "mode", "log_position").agg(
        F.count("*").alias("actual_rows"),
        F.min(entry).alias("entry_min"),
        F.max(entry).alias("entry_max"),
        F.min("state_digest").alias("state_min"),
        F.max("state_digest").alias("state_max"),
    )
    joined = golden.join(actual, ["name", "mode", "log_position"], "full_outer")
    kind = (
        F.when(F.col("golden_state").isNull(), F.lit("extra"))
        .when(F.col("actual_rows").isNull(), F.lit("missing"))
        # The actual members applied more than one entry here, or one that is not the golden's.
        .when(
            F.coalesce(F.col("entry_min") != F.col("entry_max"), F.lit(False))
            | F.coalesce(F.col("entry_min") != F.col("golden_entry"), F.lit(False)),
            F.lit("entry"),
        )
        # No state, more than one, or one that is not the golden's.
        .when(
            F.col("state_min").isNull()
            | (F.col("state_min") != F.col("state_max"))
            | F.coalesce(F.col("state_min") != F.col("golden_state"), F.lit(False)),
            F.lit("state"),
        )
    )
    return joined.select(
        "name",
        "mode",
        "log_position",
        "golden_entry_type",
        "golden_entry",
        "golden_state",
        "actual_rows",
        kind.alias("kind"),
    )


def _fill_first_divergence(
    spark: SparkSession,
    comparisons: list[Comparison],
    diffs: DataFrame,
    firsts: DataFrame,
    out: dict[tuple[str, str], PositionDiff],
) -> None:
    """For each divergent comparison (``firsts``: its first divergent position), how far the divergence
    runs from there, and every actual member's entry and state at the first divergent position."""
    tail = diffs.join(firsts, ["name", "mode"]).where(F.col("log_position") >= F.col("first_position"))
    for r in (
        tail.groupBy("name", "mode")
        .agg(
            F.count("*").alias("from_first"),
            F.count("kind").alias("divergent_from_first"),
            F.min(F.when(F.col("kind").isNull(), F.col("log_position"))).alias("next_agreeing"),
        )
        .collect()
    ):
        d = out[(r["name"], r["mode"])]
        d.from_first, d.divergent_from_first, d.next_agreeing = (
            r["from_first"],
            r["divergent_from_first"],
            r["next_agreeing"],
        )
    at_first: list[Column | str] = ["name", "mode", F.col("first_position").alias("log_position")]
    first_rows = diffs.join(firsts.select(*at_first), ["name", "mode", "log_position"])
    # Every actual member's entry and state at each first divergent position (a few rows).
    who = _members_at(spark, comparisons, firsts.select(*at_first))
    first_rows = first_rows.join(who, ["name", "mode", "log_position"], "left")
    for r in first_rows.collect():
        out[(r["name"], r["mode"])].first = {
            "log_position": r["log_position"],
            "kind": r["kind"],
            "entry_type": r["golden_entry_type"] or r["entry_type"],
            "golden_entry_digest": _hex(r["golden_entry"]),
            "golden_state_digest": _hex(r["golden_state"]),
            "actual_entry_digests": [_hex(x) for x in (r["entries"] or [])],
            "actual_state_digests": [_hex(x) for x in (r["states"] or [])],
            "members": [m.asDict() for m in (r["members"] or [])],
        }


def _members_at(spark: SparkSession, comparisons: list[Comparison], at: DataFrame) -> DataFrame:
    """What every actual member applied and reached at the positions ``at`` (name, mode, log_position):
    the distinct entries, the distinct states, the entry type, and each member's state."""
    rows = _applied(spark, comparisons, "actual_dir", (*_APPLIED_COLUMNS, "member_id", "incarnation")).join(
        F.broadcast(at), ["name", "mode", "log_position"]
    )
    entry = F.when(F.col("entry_type") != "Snapshot", F.col("entry_digest"))
    return rows.groupBy("name", "mode", "log_position").agg(
        F.array_sort(F.collect_set(entry)).alias("entries"),
        F.array_sort(F.collect_set("state_digest")).alias("states"),
        F.first(F.when(F.col("entry_type") != "Snapshot", F.col("entry_type")), ignorenulls=True).alias("entry_type"),
        F.array_sort(
            F.collect_set(
                F.struct(
                    F.col("member_id").alias("member"),
                    F.col("incarnation"),
                    F.col("entry_type"),
                    F.lower(F.hex("state_digest")).alias("state_digest"),
                )
            )
        ).alias("members"),
    )


def _hex(b: Any) -> str | None:
    return None if b is None else bytes(b).hex()


def _diff_messages_sql(spark: SparkSession, comparisons: list[Comparison]) -> dict[str, MessageDiff]:
    """Per comparison with ``messages``, the row-by-row message diff, keyed by golden name, as Spark
    SQL jobs over all of them (``plan="sql"``). Rows are compared by a hash of the compared columns;
    :func:`clusterlab.golden.diff_embedded.message_diff` compares the columns themselves."""
    comparisons = [c for c in comparisons if c.messages]
    if not comparisons:
        return {}
    pairs = _pairs(spark, comparisons)
    golden_all = load(spark, _paths([c.golden_dir for c in comparisons]), "messages")
    compared = [c for c in golden_all.columns if c not in _MESSAGE_IGNORED and c not in _MESSAGE_KEY]

    def side(df: DataFrame, directory: str, prefix: str) -> DataFrame:
        return df.join(pairs.select("name", directory), _in_dir("file", directory)).select(
            "name",
            *_MESSAGE_KEY,
            F.xxhash64(*[F.col(c) for c in compared]).alias(f"{prefix}_hash"),
            F.col("wall_ns").alias(f"{prefix}_wall_ns"),
            F.col("msg_type").alias(f"{prefix}_msg_type"),
            F.col("direction").alias(f"{prefix}_direction"),
            F.col("channel").alias(f"{prefix}_channel"),
            F.col("peer_process").alias(f"{prefix}_peer_process")
            if "peer_process" in df.columns
            else F.lit(None).cast("string").alias(f"{prefix}_peer_process"),
            F.col("log_position").alias(f"{prefix}_log_position"),
            F.col("payload").alias(f"{prefix}_payload"),
        )

    g = side(golden_all, "golden_dir", "golden")
    a = side(load(spark, _paths([c.actual_dir for c in comparisons]), "messages"), "actual_dir", "actual")
    joined = g.join(a, ["name", *_MESSAGE_KEY], "full_outer").withColumn(
        "differs", ~F.coalesce(F.col("golden_hash") == F.col("actual_hash"), F.lit(False))
    )
    joined = joined.withColumn(
        "order",
        F.struct(F.coalesce("golden_wall_ns", "actual_wall_ns").alias("wall_ns"), *[F.col(k) for k in _MESSAGE_KEY]),
    )
    summary = (
        joined.groupBy("name")
        .agg(
            F.count("golden_hash").alias("golden_rows"),
            F.count("actual_hash").alias("actual_rows"),
            F.sum(F.col("differs").cast("int")).alias("divergent"),
            F.min(F.when(F.col("differs"), F.col("order"))).alias("first_order"),
        )
        .cache()
    )
    out = {c.name: MessageDiff(c.name) for c in comparisons}
    for r in summary.collect():
        out[r["name"]] = MessageDiff(r["name"], r["golden_rows"], r["actual_rows"], int(r["divergent"] or 0))
    firsts = summary.where(F.col("first_order").isNotNull()).select("name", "first_order")
    divergent = any(d.divergent for d in out.values())
    for r in joined.join(firsts, "name").where(F.col("order") == F.col("first_order")).collect() if divergent else []:
        out[r["name"]].first = {
            "process": r["process"],
            "incarnation": r["incarnation"],
            "seq": r["seq"],
            "wall_ns": r["golden_wall_ns"] if r["golden_wall_ns"] is not None else r["actual_wall_ns"],
            **{
                f"{p}_{k}": r[f"{p}_{k}"]
                for p in ("golden", "actual")
                for k in ("msg_type", "direction", "channel", "peer_process", "log_position")
            },
            "golden_payload": _hex(r["golden_payload"]),
            "actual_payload": _hex(r["actual_payload"]),
        }
    summary.unpersist()
    return out
