"""The mute-candidate scenario reaches CANDIDATE_BALLOT -> FOLLOWER_LOG_REPLICATION, legitimately: a
follower that hears but is not heard (and whose handling of the next term's RequestVotes fails, the
simulator's FailFirstElectionIntercept hook) stands, unheard, for the very term another member wins
with the quorum; the winner's NewLeadershipTerm reaches it while it is still in its ballot, and since
its log ends before the new term's base it replicates (Aeron's Election.onNewLeadershipTerm)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.core.consensus.context import ElectionState
from clusterlab.golden.candidates import candidates
from clusterlab.harness.trace import open_run

pytestmark = pytest.mark.sim

# The seed the golden sim-mute-candidate-n5-s5 runs (golden/candidates.py).
SEED = 5


def _state(value: Any) -> str | None:
    return ElectionState(value).name if isinstance(value, int) else value


def test_a_mute_candidate_behind_the_winner_replicates_from_its_ballot(tmp_path: Path) -> None:
    # As the golden is recorded (golden/coverage.py measure_recipe): one client.
    r = run_scenario(
        "mute-candidate", seed=SEED, members=5, sim=True, directory=tmp_path / "run", clients=1, service="kv"
    )
    assert r.ok, r.failure_message()
    rows = sorted(open_run(r.trace_dir).events.to_pylist(), key=lambda e: (e["wall_ns"], e["seq"]))

    muted: set[int] = set()
    for e in rows:
        if e["kind"] == "partition":
            block = json.loads(e["detail"]).get("block")
            if block:
                muted.add(block[0])
    leaders: dict[int, int] = {}  # term -> who won it
    hits = []
    for e in rows:
        m = e["member_id"]
        if e["kind"] == "role" and json.loads(e["detail"])["role"] == "LEADER":
            leaders.setdefault(e["leadership_term_id"] or -1, m)
        if e["kind"] != "election_state":
            continue
        d = json.loads(e["detail"])
        src, dst = _state(d.get("from")), _state(d.get("to"))
        if src == "CANDIDATE_BALLOT" and dst == "FOLLOWER_LOG_REPLICATION":
            hits.append((m, e["leadership_term_id"], e["log_position"]))
        if src == "CANDIDATE_BALLOT" and dst == "LEADER_LOG_REPLICATION":
            leaders[e["leadership_term_id"]] = m

    assert hits, "no member went from CANDIDATE_BALLOT to FOLLOWER_LOG_REPLICATION"
    for member, term, position in hits:
        # The mute member, following another member's term (the term it was a candidate for), from a
        # log that ends before the leader's: it replicates, not replays.
        assert member in muted, (member, muted)
        assert term in leaders and leaders[term] != member, (term, leaders)
        winner_positions = [
            e["log_position"]
            for e in rows
            if e["member_id"] == leaders[term] and e["kind"] == "leader" and e["leadership_term_id"] == term
        ]
        assert winner_positions and position < winner_positions[0], (position, winner_positions)
    # Its own RequestVotes were never heard and its handling of the winner's failed (the hook fired).
    errors = [json.loads(e["detail"])["reason"] for e in rows if e["kind"] == "error" and e["member_id"] in muted]
    assert any(reason.startswith("Forced failure") for reason in errors), errors


def test_it_is_a_golden_candidate() -> None:
    names = {r.name: r for r in candidates()}
    r = names["sim-mute-candidate-n5-s5"]
    assert (r.scenario, r.members, r.seed, r.service) == ("mute-candidate", 5, SEED, "kv")
