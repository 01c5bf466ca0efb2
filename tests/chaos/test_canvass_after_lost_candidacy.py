"""Liveness after a lost candidacy: three seeds of the CI sweep (`random`) that stall without these rules.

- Seeds 216 and 312 (3 members): a member votes for the winner of term 2, misses its NewLeadershipTerm
  (FOLLOWER_BALLOT times out) and nominates itself for term 3; the term-2 leader and its follower deny
  it (its log is behind). Back in CANVASS it must follow the term-2 leader: its own lost candidacy
  promised nothing to anyone (only a yes vote for *another* member holds a member off a lower-term
  leader, tests/aeron/test_vote_then_old_leader.py).
- Seed 374 (5 members): a member voted yes for a candidate that lost term 4, so it may not follow the
  live term-3 leader, and cannot win (behind). It must stand anyway once its canvass deadline passes:
  its higher-term RequestVote pulls the leader and its followers into an election whose winner (term
  >= 4) it may follow.

- Seed 103 (5 members, counter service, a mixed-service sweep): members 2 and 1 win terms 8 and 9 one
  after the other and stay in LEADER_LOG_REPLICATION; the other three voted in later terms, so they
  follow neither, and the leaders' more recent logs refuse all their candidates. A leader whose
  election has not finished now stands again when asked to vote in a later term.

Without them each run fails its final check: members not caught up within 30 s of the final heal."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.chaos.runner import run_scenario

pytestmark = [pytest.mark.chaos, pytest.mark.sim]


@pytest.mark.parametrize(
    ("seed", "members", "service"), [(216, 3, "kv"), (312, 3, "kv"), (374, 5, "kv"), (103, 5, "counter")]
)
def test_member_refused_by_or_refusing_the_leader_rejoins(
    tmp_path: Path, seed: int, members: int, service: str
) -> None:
    result = run_scenario(
        "random", seed=seed, members=members, duration_s=10.0, sim=True, directory=tmp_path, service=service
    )
    assert result.ok, result.failure_message()
