"""The Spark scale benchmark at a tiny scale: it generates real trace files, every engine finds the
planted divergences, and it reports its figures (speed itself is never asserted). Part of the
benchmark (``make bench`` runs benchmarks/tests first, with the bench extra installed: DuckDB, numpy)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.spark.session import spark_session

from benchmarks.spark_bench import run

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_spark_bench_smoke(tmp_path: Path) -> None:
    spark = spark_session("local[2]", app_name="clusterlab-bench-tests")
    try:
        doc = run("smoke", tmp_path, spark=spark, plans=("auto", "sql"))
    finally:
        spark.stop()
    jobs = {(r["job"], r["engine"].split()[0]) for r in doc["results"]}
    assert jobs == {(j, e) for j in ("check big", "check 3 runs", "golden diff big") for e in ("Spark", "DuckDB")}
    assert all(r["rows"] > 0 and r["seconds"] > 0 for r in doc["results"])
    assert {r["engine"] for r in doc["results"]} == {"Spark local[*]", "Spark local[*], sql plan", "DuckDB 1 thread"}
    assert doc["rows"]["big"]["applied"] == 3 * 5_000
