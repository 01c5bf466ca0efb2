"""The linearizability check as a Spark job over several runs (grouped by run and key): it agrees
with the local verdict, catches the planted stale read with its minimal sub-history, and
``clusterlab check`` fails on it; an old trace (no ``arg`` column) is still judged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.verdict import verify_run
from clusterlab.spark.check import check_runs

from clusterlab.cli import main


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("lin-runs")
    out = {}
    for name, stale in (("clean", False), ("stale", True)):
        r = run_scenario(
            "leader-isolation",
            1,
            sim=True,
            duration_s=3.0,
            directory=tmp_path_factory.mktemp(name),
            trace_dir=root / name,
            fault_stale_read=stale,
        )
        out[name] = r
    out["root"] = root
    return out


def test_spark_judges_each_run_and_key(spark: Any, runs: dict[str, Any]) -> None:
    report = check_runs([runs["root"]], spark=spark, write_json=False)
    lin = report.checks["linearizability"]
    clean, stale = runs["clean"], runs["stale"]
    assert lin.per_run.get(str(clean.trace_dir), 0) == 0  # keyed by directory
    local = stale.verdict.linearizability
    assert lin.per_run[str(stale.trace_dir)] == len(local.violations()) > 0
    by_key = {v["key"]: v for v in lin.violations if v["run_id"] == stale.run_id}
    for k in local.violations():
        assert [o["text"] for o in by_key[k.key]["minimal"]] == [o.describe() for o in k.minimal]
    # Every other check agrees with the local verdict too.
    for r in (clean, stale):
        spark_failed = {c for c, res in report.checks.items() if res.per_run.get(str(r.trace_dir), 0)}
        assert spark_failed == set(verify_run(r.trace_dir).failed())


def test_check_cli_fails_on_the_stale_read(spark: Any, runs: dict[str, Any], tmp_path: Path) -> None:
    assert main(["check", str(runs["clean"].trace_dir)]) == 0
    assert main(["check", str(runs["stale"].trace_dir)]) == 1
    doc = json.loads((runs["stale"].trace_dir / "check.json").read_text())
    lin = doc["checks"]["linearizability"]
    assert lin["ok"] is False and lin["violations"][0]["minimal"]
