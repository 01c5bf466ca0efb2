"""The linearizability check as a Spark job across many runs: the ``ops`` table grouped by run and
key (a counter's ops under ``counter``), each group judged on an executor by the same checker the
local verdict uses (:mod:`clusterlab.chaos.linearizability`: Wing-Gong/Lowe search with a budget,
the minimal sub-history of a violation). One row per (run, key) comes back: its verdict, and for a
violation the minimal sub-history as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from clusterlab.chaos.linearizability import (
    COUNTER_KEY,
    DEFAULT_MAX_SECONDS,
    DEFAULT_MAX_STATES,
    UNKNOWN,
    VIOLATION,
    Model,
    check_key,
    operations_from_rows,
)
from clusterlab.chaos.workload_api import WorkloadSpecError, load_workload
from clusterlab.harness.services import import_roots
from clusterlab.harness.trace import TraceError
from clusterlab.spark.ship import ship_package
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


def run_workloads(run_dirs: Sequence[str]) -> dict[str, str]:
    """Each run's workload (run.json's ``workload.workload``) by run directory as given (the checks
    key runs by directory), when it names one: its model judges the run's history, as the embedded
    engine's does (chaos/workload_api.history_verdict). Checked here, on the driver: a workload that
    cannot be imported raises TraceError (a history is never judged without its model)."""
    specs: dict[str, str] = {}
    for d in run_dirs:
        try:
            meta = json.loads((Path(d) / "run.json").read_text())
        except (OSError, ValueError):
            continue  # no run.json: its completeness says so
        spec = (meta.get("workload") or {}).get("workload") if isinstance(meta, dict) else None
        if spec:
            try:
                load_workload(str(spec), {})
            except WorkloadSpecError as e:
                raise TraceError(f"the run's {e}; check it where that package is importable") from None
            specs[d] = str(spec)
    return specs


def ship_packages(spark: Any, specs: Iterable[str]) -> None:
    """Send the packages the workloads ``specs`` come from (a user's, outside any installed package:
    clusterlab.harness.services.import_roots) to the executors as zips on their import path, so
    nothing is installed or copied by hand (:mod:`clusterlab.spark.ship`)."""
    for spec in specs:
        roots = import_roots([spec])
        top = spec.partition(":")[0].split(".")[0]
        if roots and (package := Path(roots[0]) / top).is_dir():
            ship_package(spark, package, top)  # else installed (the executors have it) or a lone module


def _models(workloads: dict[str, str]) -> Callable[[str], tuple[bool, Model | None]]:
    """On an executor: (judged?, model) of a run; a run whose workload has no model is not judged."""
    loaded: dict[str, Model | None] = {}

    def model_of(run_id: str) -> tuple[bool, Model | None]:
        spec = workloads.get(run_id)
        if spec is None:
            return True, None  # a sample service's run: the built-in model its ops name
        if spec not in loaded:
            loaded[spec] = load_workload(spec, {}).model
        return loaded[spec] is not None, loaded[spec]

    return model_of


def _judge(budget: tuple[int, float], workloads: dict[str, str]) -> Callable[[pa.Table], pa.Table]:
    max_states, max_seconds = budget

    def judge(group: pa.Table) -> pa.Table:
        # One bucket of many (run, key) histories: each judged alone, as one group per key would be.
        parts: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for row in group.to_pylist():
            parts.setdefault((row["run_id"], row["part"]), []).append(row)
        out = []
        model_of = _models(workloads)
        for (run_id, key), rows in sorted(parts.items()):
            judged, model = model_of(run_id)
            if not judged:
                continue
            ops = operations_from_rows(rows)
            v = check_key(key, ops, model, max_states=max_states, max_seconds=max_seconds)
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
    ops: DataFrame,
    max_states: int = DEFAULT_MAX_STATES,
    max_seconds: float = DEFAULT_MAX_SECONDS,
    workloads: dict[str, str] | None = None,
) -> DataFrame:
    """Per (run, key) verdicts of an ``ops`` DataFrame (the ``clustertrace`` source's columns; ``arg``
    may be missing in traces older than it). ``workloads``: a run's workload by its ``run_id``
    column (its directory: :func:`run_workloads`; the package shipped by :func:`ship_packages`): its
    model judges that run's keys; other runs get the built-in model their ops name. Grouped with
    ``applyInArrow`` (pyarrow on the workers, no pandas, and no RDD: it runs on a Spark Connect
    session as on a classic one)."""
    if "arg" not in ops.columns:
        ops = ops.withColumn("arg", F.lit(None).cast("string"))
    ops = ops.select(*_OPS_COLUMNS).withColumn("part", F.coalesce(F.col("key"), F.lit(COUNTER_KEY)))
    # Grouped into BUCKETS hash buckets of (run, key), not one group per key: each group is one call
    # into the Python worker, and a run of thousands of keys spent most of its time in those calls
    # (medium bench: 20 k keys, 14 s; the keys are still judged one by one inside a bucket).
    bucket = F.pmod(F.xxhash64("run_id", "part"), F.lit(BUCKETS)).alias("bucket")
    return ops.groupBy(bucket).applyInArrow(_judge((max_states, max_seconds), workloads or {}), RESULT_SCHEMA)


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


__all__ = ["NAME", "RESULT_SCHEMA", "judge_ops", "run_workloads", "ship_packages", "violations"]
