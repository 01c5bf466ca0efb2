"""A liveness bug the 500-seed CI sweep found (`random`, seed 216 on 3 members; also 312, and 374 on 5).

A member votes for the winner of term 2, misses its NewLeadershipTerm (FOLLOWER_BALLOT times out), and
nominates itself for term 3; the term-2 leader and its follower deny it (its log is behind). Back in
CANVASS with candidate term 3 it follows no leader below term 3 (the rule that keeps a voter from
committing with a stale leader, tests/aeron/test_vote_then_old_leader.py), cannot win (behind), and
the term-2 leader, with its quorum, never starts another election: the member never catches up.

A vote for itself promises nothing to another candidate, so a fix can let a member whose last vote
went to itself follow the current leader (only a vote for another member must hold it off); this
test is strict-xfail until then, so the fix turns it into a failure that says "remove the marker"."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.chaos.runner import run_scenario

pytestmark = [pytest.mark.chaos, pytest.mark.sim]


@pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="open liveness bug: CANVASS after a lost own candidacy (module doc)"
)
def test_member_whose_candidacy_lost_rejoins_the_current_leader(tmp_path: Path) -> None:
    result = run_scenario("random", seed=216, members=3, duration_s=10.0, sim=True, directory=tmp_path)
    assert result.ok, result.failure_message()
