"""``clusterlab check RUN1 RUN2``: the verdict names which run failed, and the JSON paths printed are
the files written (not a placeholder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterlab.cli import main
from tests.golden import plant

pytestmark = pytest.mark.spark


def test_check_of_two_runs_names_the_failing_one_and_the_real_json_paths(
    spark, sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = plant.copy_run(sim_run, tmp_path / "good", "good-run")
    bad = plant.copy_run(sim_run, tmp_path / "bad", "bad-run")
    plant.plant_state_digest(bad, 1, plant.middle_entry(bad, 1)["log_position"])
    out_json = tmp_path / "all.json"
    capsys.readouterr()
    assert main(["check", str(good), str(bad), "--json", str(out_json)]) == 1
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") >= 4}
    assert "FAIL" in rows["bad-run"] and "agreement (1)" in rows["bad-run"]
    assert "PASS" in rows["good-run"] and "agreement" not in rows["good-run"]
    assert "RUN/check.json" not in out
    assert f"JSON: {good / 'check.json'}, {bad / 'check.json'}; all runs: {out_json}" in out.replace("\n", "")
    assert json.loads((bad / "check.json").read_text())["ok"] is False
    assert json.loads((good / "check.json").read_text())["ok"] is True
    assert json.loads(out_json.read_text())["run_ids"] == ["bad-run", "good-run"]
