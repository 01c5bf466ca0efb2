"""The schedules that reach the protocol checks (chaos/checks/protocol.py), in the simulator: each does what it
is for (a voter killed right after voting, a hung session timed out across a partition, a snapshot across a
leadership change, votes delayed past the election timeout) and passes every check on a correct build; with the
bug planted that it is aimed at (a voter that forgets its vote on restart) the run fails the matching check."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.fuzz import run_random_schedule
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.schedule import random_schedule
from clusterlab.core.consensus.node_state import NodeState
from clusterlab.harness.trace import open_run

pytestmark = pytest.mark.sim


def _events(trace_dir: Path) -> list[dict[str, Any]]:
    run = open_run(trace_dir)
    return sorted(run.events.to_pylist(), key=lambda e: (e["wall_ns"], e["seq"]))


def _applied_nemesis(events: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(
        json.loads(e["detail"])
        for e in events
        if e["kind"] == "chaos_apply" and json.loads(e["detail"])["nemesis"] == name
    )


def test_kill_voter_kills_a_member_right_after_it_voted(tmp_path: Path) -> None:
    r = run_scenario("kill-voter", seed=1, sim=True, directory=tmp_path, clients=1)
    assert r.ok, r.failure_message()
    events = _events(r.trace_dir)
    _leader, voter = _applied_nemesis(events, "kill-voter")["victims"]
    kill_at = next(e["wall_ns"] for e in events if e["kind"] == "kill" and e["member_id"] == voter)
    votes = [e for e in events if e["kind"] == "vote" and e["member_id"] == voter and e["wall_ns"] <= kill_at]
    assert votes and json.loads(votes[-1]["detail"])["vote"], "the victim had just voted YES"
    assert any(e["kind"] == "restart" and e["member_id"] == voter for e in events)


def _forget_votes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted bug: the candidate term a vote raises is kept in memory only, so a restart forgets it."""

    def propose(self: NodeState, candidate_term_id: int, log_position: int, timestamp: int) -> int:
        if candidate_term_id > self._candidate_term_id:
            self._candidate_term_id = candidate_term_id
        return self._candidate_term_id

    monkeypatch.setattr(NodeState, "propose_max_candidate_term_id", propose)


def test_a_vote_forgotten_on_restart_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean = run_scenario("kill-voter-and-candidate", seed=4, sim=True, directory=tmp_path / "clean", clients=1)
    assert clean.ok, clean.failure_message()
    _forget_votes(monkeypatch)
    r = run_scenario("kill-voter-and-candidate", seed=4, sim=True, directory=tmp_path / "bug", clients=1)
    assert r.verdict is not None and r.verdict.status == "FAIL"
    got = r.verdict.violations["one_vote_per_term"]
    assert got and "(incarnations 0,1)" in got[0], got


def test_long_partition_times_out_a_hung_session_on_every_member(tmp_path: Path) -> None:
    r = run_scenario("long-partition", seed=1, sim=True, directory=tmp_path, clients=1)
    assert r.ok, r.failure_message()
    closes: dict[int, set[int]] = defaultdict(set)
    for row in open_run(r.trace_dir).applied.to_pylist():
        if row["entry_type"] == "SessionClose":
            closes[row["log_position"]].add(row["member_id"])
    assert closes, "the hung session was closed through the log"
    assert all(members == {0, 1, 2} for members in closes.values()), closes


def test_snapshot_election_snapshots_across_a_leadership_change(tmp_path: Path) -> None:
    r = run_scenario("snapshot-election", seed=4, sim=True, directory=tmp_path, clients=1)
    assert r.ok, r.failure_message()
    events = _events(r.trace_dir)
    snaps = {(e["member_id"], e["log_position"]) for e in events if e["kind"] == "snapshot"}
    assert {m for m, _ in snaps} == {0, 1, 2} and len({p for _, p in snaps}) == 1, snaps
    cut_at = next(e["wall_ns"] for e in events if e["kind"] == "partition")
    assert any(e["kind"] == "snapshot" and e["wall_ns"] > cut_at for e in events), "a snapshot after the cut"


def test_slow_election_passes(tmp_path: Path) -> None:
    r = run_scenario("slow-election", seed=1, sim=True, directory=tmp_path, clients=1)
    assert r.ok, r.failure_message()
    events = _events(r.trace_dir)
    assert _applied_nemesis(events, "slow-election")["delay_s"] > 0.3  # past the 300 ms election timeout
    assert sum(e["kind"] == "leader" for e in events) >= 2


def test_random_mixes_hold_the_protocol_faults() -> None:
    drawn = {s.split("(")[0] for seed in range(1, 30) for s in random_schedule(seed, 10.0, sim=True).describe()}
    assert {"kill-voter", "slow-election", "snapshot-election", "silent-client"} <= drawn, drawn


def test_fuzz_schedules_with_protocol_faults_stay_safe(tmp_path: Path) -> None:
    actions: list[str] = []
    for seed in range(1, 7):
        result = run_random_schedule(seed, directory=str(tmp_path / f"seed-{seed}"))
        actions += result.actions
    kinds = {a.split()[0] for a in actions}
    assert {"slow", "kill-voter"} & kinds, actions
