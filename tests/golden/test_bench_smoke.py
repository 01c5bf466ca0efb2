"""The Spark scale benchmark at a tiny scale: it generates real trace files, every engine finds the
planted divergences, and it reports its figures (speed itself is never asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.spark_bench import run

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_spark_bench_smoke(spark, tmp_path: Path) -> None:
    doc = run("smoke", tmp_path, spark=spark)
    jobs = {(r["job"], r["engine"].split()[0]) for r in doc["results"]}
    assert jobs == {(j, e) for j in ("check big", "check 3 runs", "golden diff big") for e in ("Spark", "DuckDB")}
    assert all(r["rows"] > 0 and r["seconds"] > 0 for r in doc["results"])
    assert doc["rows"]["big"]["applied"] == 3 * 5_000
