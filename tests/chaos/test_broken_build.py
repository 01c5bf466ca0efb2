"""The deliberately broken build (the test-only fault switch ``fault_ack_before_append``: a follower
reports a LogBlock as appended before it writes it, and writes it only when the next block arrives)
must be caught by the chaos suite. Which check catches it depends on the scenario:

* leader-kill / torn-write-on-leader (sim, seed 1): the leader commits entries that only it holds,
  then dies; the acknowledged writes are gone. The workload's final read finds one missing (online),
  and the trace checks fail ``durability`` (an acknowledged op is not in the committed log) and
  ``committed_prefix`` (members applied entries the surviving log does not have).
* leader-isolation (sim, seed 1): the isolated leader's followers-to-be lack what it committed; the
  online checker's log matching fails at once.
* follower-restart (sim): no safety check fails — the acknowledged entries survive on the leader —
  but the run cannot converge (every follower trails by a block): the final phase's progress bound
  fails it (ChaosTimeout).
"""

from __future__ import annotations

from typing import Any

import pytest
from clusterlab.chaos.linearizability import VIOLATION

from tests.chaos.model_agreement import assert_docs_model_agrees

pytestmark = pytest.mark.chaos


@pytest.mark.sim
@pytest.mark.parametrize(
    ("scenario", "online", "checks"),
    [
        ("leader-kill", "acknowledged write is missing", {"durability", "committed_prefix"}),
        ("torn-write-on-leader", "acknowledged write is missing", {"durability", "committed_prefix"}),
        ("leader-isolation", "log matching", {"committed_prefix"}),
    ],
)
def test_broken_build_is_caught_in_the_simulator(
    chaos_runner: Any, scenario: str, online: str, checks: set[str]
) -> None:
    broken = chaos_runner(scenario, 1, sim=True, fault_ack_before_append=True)
    assert not broken.ok
    assert broken.error is not None and "SafetyViolation" in broken.error and online in broken.error, broken.error
    assert broken.verdict is not None and checks <= set(broken.verdict.failed()), broken.verdict.failed()
    assert "--fault-ack-before-append" in broken.rerun_command()
    # The model written from the Model docstring (the docs' example) catches it as the built-in one does.
    assert assert_docs_model_agrees(broken.trace_dir).verdict == VIOLATION
    healthy = chaos_runner(scenario, 1, sim=True)  # the same seed without the fault passes
    assert healthy.ok, healthy.failure_message()


@pytest.mark.sim
def test_broken_build_without_a_leader_fault_fails_progress_not_safety(chaos_runner: Any) -> None:
    broken = chaos_runner("follower-restart", 1, sim=True, duration=3.0, settle_s=5.0, fault_ack_before_append=True)
    assert broken.error is not None and broken.error.startswith("ChaosTimeout"), broken.error
    assert broken.verdict is not None and broken.verdict.ok


@pytest.mark.cluster
@pytest.mark.slow
def test_broken_build_is_caught_on_real_processes(chaos_runner: Any) -> None:
    # Real processes are not seeded in their timing: whether the one leader kill of a 5 s run lands
    # while a write is acknowledged but not appended varies. The broken build must fail a run of up to
    # three seeds: by the durability check where an acknowledged write was lost, or by members that
    # never converge after the final heal (the follower that acknowledged what it never appended is
    # left with a log the leader cannot catch up). The simulator tests above pin the named checks.
    outcomes = []
    for seed in (1, 2, 3):
        broken = chaos_runner("leader-kill", seed, duration=5.0, settle_s=10.0, fault_ack_before_append=True)
        if broken.verdict is not None and "durability" in broken.verdict.failed():
            assert not broken.ok
            return
        if not broken.ok:
            assert broken.error is not None and "not caught up" in broken.error, broken.failure_message()
            return
        outcomes.append(f"seed {seed}: passed")
    pytest.fail("the broken build passed 3 runs on real processes: " + "; ".join(outcomes))
