"""clusterlab.chaos.summary: grouping kept runs and their failover/recovery figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterlab.chaos.summary import load_runs, main, summarize


def _run(root: Path, name: str, **kw: object) -> None:
    base = {
        "scenario": "leader-kill",
        "seed": 1,
        "members": 3,
        "sim": False,
        "ok": True,
        "acked": 10,
        "failovers_s": [],
        "elections_s": [],
        "recoveries_s": [],
        "recovery_s": None,
    }
    (root / name).mkdir()
    (root / name / "chaos.json").write_text(json.dumps({**base, **kw}))


def test_groups_by_scenario_driver_and_size(tmp_path: Path) -> None:
    _run(tmp_path, "a", seed=1, failovers_s=[1.0, 3.0], recovery_s=0.5)
    _run(tmp_path, "b", seed=2, failovers_s=[2.0], ok=False)
    _run(tmp_path, "c", seed=1, sim=True)
    _run(tmp_path, "d", seed=1, members=5)
    _run(tmp_path, "e", seed=1, ok=False, fault_ack_before_append=True)
    s = summarize(load_runs(tmp_path))
    assert set(s) == {"leader-kill/real/n3", "leader-kill/sim/n3", "leader-kill/real/n5", "leader-kill/real-broken/n3"}
    real = s["leader-kill/real/n3"]
    assert real["seeds"] == [1, 2] and real["runs"] == 2 and real["passed"] == 1 and real["acked"] == 20
    assert real["failover"] == {"n": 3, "median_s": 2.0, "max_s": 3.0, "min_s": 1.0}
    assert real["final_recovery"]["n"] == 1 and s["leader-kill/sim/n3"]["failover"] == {"n": 0}


def test_main_refuses_a_directory_without_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    assert "no chaos.json" in capsys.readouterr().err
    _run(tmp_path, "a", failovers_s=[1.5])
    out = tmp_path / "s.json"
    assert main([str(tmp_path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["leader-kill/real/n3"]["failover"]["median_s"] == 1.5
