"""A deposed leader's tail at a leader change (the ``older-term-tail`` nemesis and scenario): the schedule
leaves the old leader with a longer log of an older term than the next leader's, on purpose; the correct
build passes, and a new leader that counts such a log toward its commit position (planted
``older-term-log-counted``) is caught black-box by the named trace check ``commit_backed_by_quorum``."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.chaos.nemesis import OlderTermTail
from clusterlab.chaos.reach import run_reach
from clusterlab.chaos.runner import run_scenario

from clusterlab.testing.mutants import OLDER_TERM_LOG_COUNTED

pytestmark = pytest.mark.chaos

CANVASSED = "situation: older-term tail canvassed"


@pytest.mark.sim
@pytest.mark.parametrize("members", [3, 5])
def test_an_older_term_tail_reaches_the_next_election_and_the_protocol_passes(tmp_path: Path, members: int) -> None:
    r = run_scenario("older-term-tail", seed=1, members=members, sim=True, directory=tmp_path)
    assert r.ok, r.failure_message()
    reach = run_reach(r.trace_dir)
    assert reach is not None and reach.get(CANVASSED, 0) > 0, reach


@pytest.mark.sim
@pytest.mark.parametrize("seed", [1, 2])
def test_a_leader_counting_an_older_term_log_is_caught_by_the_commit_quorum_check(tmp_path: Path, seed: int) -> None:
    r = run_scenario("older-term-tail", seed=seed, sim=True, directory=tmp_path, mutants=[OLDER_TERM_LOG_COUNTED])
    assert not r.ok
    first = r.failure_message().splitlines()[0]
    assert "commit_backed_by_quorum" in first, first
    assert r.verdict is not None and r.verdict.violations["commit_backed_by_quorum"], r.failure_message()


def test_a_bad_older_term_tail_step_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"older-term-tail: lead_s must be in \[0, 10\] seconds"):
        OlderTermTail(lead_s=-1)
    with pytest.raises(ValueError, match=r"older-term-tail: tail_s must be in \[0, 10\] seconds"):
        OlderTermTail(tail_s=11)


@pytest.mark.cluster
@pytest.mark.slow
def test_real_members_pass_an_older_term_tail(tmp_path: Path) -> None:
    r = run_scenario("older-term-tail", seed=1, members=3, duration_s=6.0, directory=tmp_path)
    assert r.ok, r.failure_message()
