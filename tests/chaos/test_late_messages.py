"""Member messages held across a leader change (the ``late-messages`` nemesis, the ``late-votes``
scenario): the schedule creates a vote that lands in a later ballot of its candidate, on purpose, in
the simulator and on real processes; the correct build passes, and a candidate that counts such a vote
(planted ``late-vote-counted``) is caught black-box by the named trace check ``leader_has_quorum_of_votes``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.schedule import random_schedule
from clusterlab.core.codec import decode
from clusterlab.core.codec.consensus import RequestVote, Vote
from clusterlab.harness.trace import open_run

from clusterlab.testing.mutants import LATE_VOTE_COUNTED

pytestmark = pytest.mark.chaos


def late_votes(trace_dir: Path) -> int:
    """Votes a candidate received for a ballot older than one it had already started (a RequestVote of a
    higher candidate term sent by the same incarnation before the vote arrived)."""
    rows = open_run(trace_dir).tables["messages"].to_pylist()
    rows.sort(key=lambda r: (r["member_id"], r["incarnation"], r["seq"]))
    late, ballot = 0, {}
    for r in rows:
        if r["channel"] != "consensus" or r["msg_type"] not in ("RequestVote", "Vote"):
            continue
        key = (r["member_id"], r["incarnation"])
        msg = decode(r["payload"])
        if r["direction"] == "send" and isinstance(msg, RequestVote):
            ballot[key] = max(ballot.get(key, -1), msg.candidate_term_id)
        elif r["direction"] == "recv" and isinstance(msg, Vote) and msg.candidate_term_id < ballot.get(key, -1):
            late += 1
    return late


@pytest.mark.sim
def test_late_votes_land_in_later_ballots_and_the_protocol_passes(tmp_path: Path) -> None:
    r = run_scenario("late-votes", seed=3, members=5, sim=True, directory=tmp_path)
    assert r.ok, r.failure_message()
    assert late_votes(r.trace_dir) > 0


@pytest.mark.sim
def test_a_vote_counted_in_a_later_ballot_is_caught_by_the_vote_quorum_check(tmp_path: Path) -> None:
    r = run_scenario("late-votes", seed=3, members=5, sim=True, directory=tmp_path, mutants=[LATE_VOTE_COUNTED])
    assert not r.ok
    assert "leader_has_quorum_of_votes" in r.failure_message().splitlines()[0]


@pytest.mark.cluster
@pytest.mark.slow
def test_real_members_hold_their_votes_back_through_the_test_hook(tmp_path: Path) -> None:
    r = run_scenario("late-votes", seed=1, members=3, duration_s=5.0, directory=tmp_path)
    assert r.ok, r.failure_message()
    events = open_run(r.trace_dir).tables["events"].to_pylist()
    hooks = [json.loads(e["detail"]) for e in events if e["kind"] == "test_hook"]
    hooks = [h for h in hooks if h["hook"] == "DELAY_MEMBER_MESSAGE"]
    assert len(hooks) >= 5, hooks  # armed on each of the 3 members, removed on the 2 survivors at heal
    assert all(h["accepted"] for h in hooks), hooks
    assert late_votes(r.trace_dir) > 0


def test_a_share_of_random_schedules_hold_one_message_type_back_across_a_leader_change() -> None:
    late = [s for seed in range(1, 101) for s in random_schedule(seed, 10.0, sim=True).steps if s.nemesis is not None]
    late = [s.nemesis for s in late if s.nemesis.name == "late-messages"]
    assert 15 <= len(late) <= 45
    assert {n.message for n in late} >= {"Vote", "AppendPosition", "NewLeadershipTerm"}  # type: ignore[attr-defined]
    assert {n.then for n in late} == {"kill-leader", "isolate-leader"}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ({"message": "Votes"}, "message 'Votes' is not one of Vote, RequestVote"),
        ({"then": "kill-all"}, "then 'kill-all' is not one of"),
        ({"delay_s": 0}, "delay_s must be in (0, 10] seconds, not 0"),
    ],
)
def test_a_bad_late_messages_step_is_refused_naming_it(step: dict[str, object], message: str) -> None:
    from clusterlab.chaos.schedule import step_from_spec

    with pytest.raises(ValueError, match=re.escape(message)):
        step_from_spec({"nemesis": "late-messages", "seconds": 1.0, **step})
