"""The ``suspend-isolated-leader`` scenario (clusterlab.chaos.scenarios) and the trace check
``module_state_follows_committed_log`` (clusterlab.chaos.checks.module_state), judged by DuckDB.

The scenario cuts the leader off and suspends it, so its SUSPEND never commits. With the rollback of
uncommitted state the run passes the check; with it switched off (a monkeypatch restoring the old
behaviour: the deposed leader keeps the state its uncommitted action implied) every other check still
passes and this one (in every run's verdict) names the old leader, SUSPENDED where the committed log is ACTIVE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from clusterlab.chaos.checks.module_state import MODULE_STATE_FOLLOWS_COMMITTED_LOG
from clusterlab.chaos.checks.protocol import evaluate_duckdb
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.scenarios import SCENARIOS
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.consensus.cluster_control import ClusterControl
from clusterlab.harness.trace import Run, open_run

pytestmark = [pytest.mark.chaos, pytest.mark.sim]

SEED = 1
SUSPEND_ISOLATED_LEADER = SCENARIOS["suspend-isolated-leader"]


def run(directory: Path, *, failing: tuple[str, ...] = ()) -> Run:
    """The scenario's run; its verdict fails by exactly the ``failing`` checks (none: it passes)."""
    r = run_scenario(SUSPEND_ISOLATED_LEADER, seed=SEED, sim=True, directory=directory, clients=1)
    if failing:
        assert not r.ok
        assert r.failure_message().splitlines()[0].endswith("trace checks failed: " + ", ".join(failing))
    else:
        assert r.ok, r.failure_message()
    return open_run(r.trace_dir)


def judge(tables: dict[str, pa.Table]) -> list[str]:
    run_id = tables["events"].column("run_id")[0].as_py()
    return [r["detail"] for r in evaluate_duckdb(MODULE_STATE_FOLLOWS_COMMITTED_LOG, tables, run_id)]


def node_events(r: Run, kind: str) -> list[dict[str, Any]]:
    return [e for e in r.tables["events"].to_pylist() if e["kind"] == kind and e["source"].startswith("node-")]


def suspended_leader(r: Run) -> int:
    """The member that appended the SUSPEND (the isolated leader)."""
    [suspend] = [e for e in node_events(r, "cluster_action") if json.loads(e["detail"])["action"] == "SUSPEND"]
    return int(suspend["member_id"])


def test_the_isolated_leader_rolls_back_and_the_run_passes(tmp_path: Path) -> None:
    r = run(tmp_path)
    victim = suspended_leader(r)
    rollbacks = [e for e in node_events(r, "state_rollback") if e["member_id"] == victim]
    assert [json.loads(e["detail"]) for e in rollbacks] == [{"from": "SUSPENDED", "to": "ACTIVE"}]
    completes = node_events(r, "election_complete")
    assert completes and all("module_state" in json.loads(e["detail"]) for e in completes)
    assert judge(r.tables) == []


def test_a_leader_that_keeps_its_uncommitted_suspend_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def keep_uncommitted_state(self: ClusterControl, log_position: int) -> None:
        self.toggle = ToggleState.INACTIVE
        self.uncommitted_previous_states.clear()

    monkeypatch.setattr(ClusterControl, "restore_uncommitted", keep_uncommitted_state)
    r = run(tmp_path, failing=("module_state_follows_committed_log",))  # every other check passes
    victim = suspended_leader(r)
    got = judge(r.tables)
    assert got, "the kept SUSPENDED state goes unnoticed"
    assert all(d.startswith(f"member {victim}/") and " SUSPENDED having applied" in d for d in got), got
    assert "it has no SUSPEND or RESUME action" in got[0]
