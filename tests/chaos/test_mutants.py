"""``clusterlab mutants`` on a small subset: the planted bugs are found by black-box runs (with a passing
control run on the correct build), the same way every time; the table and JSON say by which check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterlab.chaos.mutant_hunt import FUZZ, attempts, hunt, sim_scenarios

from clusterlab.cli import main
from clusterlab.testing import mutants as m

pytestmark = [pytest.mark.chaos, pytest.mark.sim, pytest.mark.slow]


def test_two_mutants_are_caught_black_box(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mutants.json"
    argv = ["mutants", "--only", m.COMMIT_ON_OWN_APPEND, m.SERVICE_WALL_CLOCK, "--jobs", "1", "--seeds", "1"]
    assert main([*argv, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2/2 caught by black-box runs" in text
    data = json.loads(out.read_text())
    assert data["all_caught"] and data["caught"] == 2
    for row in data["results"]:
        assert row["caught"] and row["runs"] >= 1 and row["by"]
        # judged by a check of the harness (online checker, trace checks, progress), never a unit test
        assert row["check"].split(":")[0] in ("online", "trace", "progress", "crash", "fuzz"), row["check"]
        assert f"--mutant {row['name']}" in row["rerun"]


def test_a_hunt_is_deterministic() -> None:
    first, second = hunt(m.COMMIT_ON_OWN_APPEND, seeds=1), hunt(m.COMMIT_ON_OWN_APPEND, seeds=1)
    assert first.caught and second.caught
    assert (first.check, first.by, first.runs, first.tried) == (second.check, second.by, second.runs, second.tried)


def test_the_sweep_covers_every_simulator_scenario_and_the_fuzz_schedule() -> None:
    order = attempts(m.QUORUM_OFF_BY_ONE, seeds=2)
    assert len(order) == len(set(order))
    scenarios = {a.scenario for a in order}
    assert set(sim_scenarios()) <= scenarios and FUZZ in scenarios
    assert {a.seed for a in order if a.scenario == "leader-kill"} == {1, 2}


def test_the_golden_column_and_its_total() -> None:
    """``--golden``: the table gains the golden-regression-alone column, the JSON its total."""
    from clusterlab.chaos.mutant_hunt import MutantResult, summary, table
    from rich.console import Console

    rows = [
        MutantResult(m.COMMIT_ON_OWN_APPEND, "log", True, "online: agreement", 1, 1.0, golden=True),
        MutantResult(m.STALE_READ, "service", True, "online: safety", 1, 1.0, golden=False),
    ]
    console = Console(width=200, record=True)
    console.print(table(rows, golden=True))
    text = console.export_text()
    assert "golden" in text.splitlines()[2] and text.count("yes") == 3 and " no " in text
    assert "golden" not in [c.header for c in table(rows).columns]  # without --golden: no column
    assert summary(rows)["golden_caught"] == 1
    assert summary([MutantResult(m.STALE_READ, "service", True, None, 1, 1.0)])["golden_caught"] is None
