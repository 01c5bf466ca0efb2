"""A sweep's reach report (clusterlab.chaos.reach): what each run's trace shows it reached — election
transitions, faults, late votes, resent requests, truncated tails — and, per sweep, what no run reached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterlab.chaos.reach import SweepReach, load_reach, main, run_reach
from clusterlab.chaos.runner import run_scenario

pytestmark = [pytest.mark.chaos, pytest.mark.sim]


def test_a_run_with_late_votes_shows_them_with_its_transitions_and_fault(tmp_path: Path) -> None:
    r = run_scenario("late-votes", seed=3, members=5, sim=True, directory=tmp_path, verify=False)
    reach = run_reach(r.trace_dir)
    assert reach is not None
    assert reach["situation: vote in a later ballot"] > 0 and reach["fault: late-messages"] == 1
    assert reach["transition: CANDIDATE_BALLOT -> CANVASS"] > 0  # ballots failed: the votes came late
    assert "situation: request resent" not in reach  # these clients do not resend


def test_resending_clients_show_resent_requests(tmp_path: Path) -> None:
    r = run_scenario("client-resends", seed=1, sim=True, directory=tmp_path, verify=False)
    reach = run_reach(r.trace_dir)
    assert reach is not None and reach["situation: request resent"] >= 3


def test_an_unreadable_trace_has_no_reach(tmp_path: Path) -> None:
    assert run_reach(tmp_path / "nothing") is None


def test_a_sweep_counts_runs_per_situation_and_lists_what_none_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reach = SweepReach()
    reach.add({"transition: CANVASS -> NOMINATE": 4, "situation: snapshot taken": 1})
    reach.add({"transition: CANVASS -> NOMINATE": 1, "transition: None -> INIT": 3})
    reach.add(None)  # a run from before reach was recorded
    data = reach.to_json()
    assert data["runs"] == 2 and data["in_runs"]["transition: CANVASS -> NOMINATE"] == 2
    assert data["transitions_reached"] == 1  # None -> INIT is not a transition of the protocol's table
    assert "transition: CANVASS -> NOMINATE" not in data["never_reached"]
    assert {"transition: INIT -> CANVASS", "situation: vote in a later ballot"} <= set(data["never_reached"])
    path = tmp_path / "random-n3.json"
    path.write_text(json.dumps(data))
    assert load_reach(path).to_json() == data
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 of 30" in out and "vote in a later ballot" in out and "never" in out
    assert main([str(tmp_path / "missing")]) == 2
