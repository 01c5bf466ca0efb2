"""The linearizability check as a Spark job across many runs: the ``ops`` table grouped by run and
key (a counter's ops under ``counter``), each group judged on an executor by the same checker the
local verdict uses (:mod:`clusterlab.chaos.linearizability`: Wing-Gong/Lowe search with a budget,
the minimal sub-history of a violation). One row per (run, key) comes back: its verdict, and for a
violation the minimal sub-history as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from clusterlab.chaos.linearizability import (
    COUNTER_KEY,
    DEFAULT_MAX_SECONDS,
    DEFAULT_MAX_STATES,
    UNKNOWN,
    VIOLATION,
    check_key,
    operations_from_rows,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

NAME = "linearizability"
BUCKETS = 16  # (run, key) histories are judged in this many groups (a few per core of a small cluster)
_OPS_COLUMNS = ("run_id", "client_id", "op_id", "kind", "wall_ns", "f", "key", "value", "result", "arg")
RESULT_SCHEMA = (
    "run_id string, key string, model string, verdict string, ops long, explored long, reason string, minimal string"
)


_RESULT_ARROW = pa.schema(
    [
        ("run_id", pa.string()),
        ("key", pa.string()),
        ("model", pa.string()),
        ("verdict", pa.string()),
        ("ops", pa.int64()),
        ("explored", pa.int64()),
        ("reason", pa.string()),
        ("minimal", pa.string()),
    ]
)


def _judge(budget: tuple[int, float]) -> Callable[[pa.Table], pa.Table]:
    max_states, max_seconds = budget

    def judge(group: pa.Table) -> pa.Table:
        # One bucket of many (run, key) histories: each judged alone, as one group per key would be.
        parts: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for row in group.to_pylist():
            parts.setdefault((row["run_id"], row["part"]), []).append(row)
        out = []
        for (run_id, key), rows in sorted(parts.items()):
            v = check_key(key, operations_from_rows(rows), max_states=max_states, max_seconds=max_seconds)
            minimal = json.dumps(v.as_dict()["minimal"]) if v.minimal else None
            out.append(
                {
                    "run_id": run_id,
                    "key": key,
                    "model": v.model,
                    "verdict": v.verdict,
                    "ops": v.ops,
                    "explored": v.explored,
                    "reason": v.reason,
                    "minimal": minimal,
                }
            )
        return pa.Table.from_pylist(out, _RESULT_ARROW)

    return judge


def judge_ops(
    ops: DataFrame, max_states: int = DEFAULT_MAX_STATES, max_seconds: float = DEFAULT_MAX_SECONDS
) -> DataFrame:
    """Per (run, key) verdicts of an ``ops`` DataFrame (the ``clustertrace`` source's columns; ``arg``
    may be missing in traces older than it). Grouped with ``applyInArrow`` (pyarrow on the workers, no
    pandas, and no RDD: it runs on a Spark Connect session as on a classic one)."""
    if "arg" not in ops.columns:
        ops = ops.withColumn("arg", F.lit(None).cast("string"))
    ops = ops.select(*_OPS_COLUMNS).withColumn("part", F.coalesce(F.col("key"), F.lit(COUNTER_KEY)))
    # Grouped into BUCKETS hash buckets of (run, key), not one group per key: each group is one call
    # into the Python worker, and a run of thousands of keys spent most of its time in those calls
    # (medium bench: 20 k keys, 14 s; the keys are still judged one by one inside a bucket).
    bucket = F.pmod(F.xxhash64("run_id", "part"), F.lit(BUCKETS)).alias("bucket")
    return ops.groupBy(bucket).applyInArrow(_judge((max_states, max_seconds)), RESULT_SCHEMA)


def violations(
    verdicts: DataFrame, limit: int
) -> tuple[int, list[dict[str, Any]], dict[str, int], list[dict[str, Any]]]:
    """(count, the first ``limit`` violations, violations per run, the keys left unknown) of
    :func:`judge_ops`'s result (small: one row per key), collected."""
    rows = [r.asDict() for r in verdicts.where(F.col("verdict").isin(VIOLATION, UNKNOWN)).collect()]
    bad = sorted((r for r in rows if r["verdict"] == VIOLATION), key=lambda r: (r["run_id"], r["key"]))
    per_run: dict[str, int] = {}
    for r in bad:
        per_run[r["run_id"]] = per_run.get(r["run_id"], 0) + 1
    shown = []
    for r in bad[:limit]:
        minimal = json.loads(r["minimal"]) if r["minimal"] else []
        shown.append(
            {
                "run_id": r["run_id"],
                "key": r["key"],
                "model": r["model"],
                "ops": r["ops"],
                "minimal": minimal,
                # A violation's reason: why its shrinking stopped early (the budget), so not minimal.
                "problem": "not linearizable; "
                + (f"sub-history (not minimal: {r['reason']}): " if r["reason"] else "minimal sub-history: ")
                + "; ".join(o["text"] for o in minimal),
            }
        )
    unknown = [{"run_id": r["run_id"], "key": r["key"], "reason": r["reason"]} for r in rows if r["verdict"] == UNKNOWN]
    return len(bad), shown, per_run, unknown


__all__ = ["NAME", "RESULT_SCHEMA", "judge_ops", "violations"]
