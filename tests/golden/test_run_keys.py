"""Runs are keyed by their directory: ``clusterlab check GOOD COPY``, where COPY is GOOD's directory
copied (same run id) and then damaged or made to violate a check, judges each run on its own — the
good run stays PASS and keeps its own check.json — on the DuckDB and the Spark engine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.checks.embedded import check_runs
from clusterlab.harness.completeness import EXIT_CORRUPT, EXIT_FAIL

from clusterlab.cli import main
from tests.golden import plant


def _flip_one_byte(run: Path) -> None:
    victim = run / "log" / "committed.arrow"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))


@pytest.fixture
def good_and_copies(sim_run: Path, tmp_path: Path) -> dict[str, Path]:
    """GOOD, a byte-flipped copy of it and a copy whose member 1 reports another state, all with
    GOOD's run id."""
    good = shutil.copytree(sim_run, tmp_path / "good")
    for stale in ("check.json", "report.html"):
        (good / stale).unlink(missing_ok=True)
    flipped = shutil.copytree(good, tmp_path / "flipped")
    _flip_one_byte(flipped)
    diverged = shutil.copytree(good, tmp_path / "diverged")
    plant.plant_state_digest(diverged, 1, plant.middle_entry(diverged, 1)["log_position"])
    return {"good": good, "flipped": flipped, "diverged": diverged}


def _check_json(run: Path) -> dict[str, Any]:
    return json.loads((run / "check.json").read_text())


def test_a_damaged_copy_does_not_condemn_the_good_run(good_and_copies: dict[str, Path], capsys) -> None:
    good, flipped = good_and_copies["good"], good_and_copies["flipped"]
    assert main(["check", str(good), str(flipped)]) == EXIT_CORRUPT
    assert (_check_json(good)["status"], _check_json(good)["ok"]) == ("PASS", True)
    assert (_check_json(flipped)["status"], _check_json(flipped)["ok"]) == ("CORRUPT", False)
    assert set(_check_json(good)["completeness"]) == {str(good)}  # its own part, no other run's
    assert _check_json(good)["completeness"][str(good)]["status"] == "COMPLETE"
    out = capsys.readouterr().out
    assert "PASS" in out and "CORRUPT" in out


def test_a_violating_copy_is_judged_apart_from_the_good_run(good_and_copies: dict[str, Path]) -> None:
    """Two complete runs with one run id: their rows never meet in a check."""
    good, diverged = good_and_copies["good"], good_and_copies["diverged"]
    report = check_runs([good, diverged])
    assert (report.run_status(str(good)), report.run_status(str(diverged))) == ("PASS", "FAIL")
    assert report.exit_code == EXIT_FAIL
    assert report.checks["agreement"].per_run == {str(diverged): 1}
    [v] = report.checks["agreement"].violations
    assert (v["run"], v["run_id"]) == (str(diverged), json.loads((good / "run.json").read_text())["run_id"])
    assert _check_json(good)["ok"] is True and _check_json(good)["checks"]["agreement"]["count"] == 0
    assert _check_json(diverged)["checks"]["agreement"]["count"] == 1


@pytest.mark.spark
@pytest.mark.timeout(900)
@pytest.mark.parametrize("plan", ["tasks", "sql"])
def test_spark_keys_runs_by_directory_too(spark: Any, good_and_copies: dict[str, Path], plan: str) -> None:
    from clusterlab.spark.check import check_runs as spark_check

    runs = [good_and_copies[n] for n in ("good", "flipped", "diverged")]
    report = spark_check(runs, spark=spark, upload=False, plan=plan)  # sql: the clustertrace source, keyed by directory
    status = {Path(d).name: report.run_status(d) for d in report.run_dirs}
    assert status == {"good": "PASS", "flipped": "CORRUPT", "diverged": "FAIL"}
    assert report.checks["agreement"].per_run == {str(good_and_copies["diverged"]): 1}
    assert [(_check_json(r)["status"], _check_json(r)["ok"]) for r in runs] == [
        ("PASS", True),
        ("CORRUPT", False),
        ("FAIL", False),
    ]
