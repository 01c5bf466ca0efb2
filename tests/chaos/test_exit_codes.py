"""A member that cannot load its snapshot, judged black-box by the chaos harness:

* the runner's exit-code check (clusterlab.chaos.runner.check_exits): on real processes a member process
  (node or service) that exits by itself with a code outside its program's documented set (node 0, 2,
  3, 4; service 0, 2, 5; the harness's own SIGKILL aside) fails the run, naming member, process and code;
* the ``snapshot-corrupt`` scenario (nemesis SnapshotCorrupt): a follower's service snapshot made
  unloadable while it is down; restarted, the member must close by itself (its service acks its
  recovery with a NULL client id and the consensus module closes), then, the snapshot invalidated, it
  recovers. With the rule switched off (a monkeypatch restoring the behaviour before it: the module
  ignores the failed start and the service dies unnoticed) the member runs on and the run fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.nemesis import SnapshotCorrupt
from clusterlab.chaos.runner import RunResult, run_scenario, unexpected_exits
from clusterlab.chaos.scenarios import SCENARIOS
from clusterlab.chaos.schedule import schedule_from_spec, schedule_spec
from clusterlab.harness.sim_parts import SimServiceHost
from clusterlab.harness.trace import open_run

from tests.chaos.exit_one_kv import EXIT_MARKER_ENV, EXIT_ONE_KV

pytestmark = pytest.mark.chaos

SNAPSHOT_CORRUPT = SCENARIOS["snapshot-corrupt"]
SEED = 1
LOG = Path("member.log")
KV_WORKLOAD = "clusterlab.chaos.sample_workloads:KvWorkload"


def _events(r: RunResult, kind: str) -> list[dict[str, Any]]:
    events = open_run(r.trace_dir).events.to_pylist()
    return [{**e, "detail": json.loads(e["detail"] or "{}")} for e in events if e["kind"] == kind]


def _assert_the_member_closed_and_recovered(r: RunResult) -> None:
    """The run passed, and it did what it says: a snapshot corrupted, then invalidated on the same member."""
    assert r.ok, r.failure_message()
    [corrupted] = _events(r, "snapshot_corrupted")
    assert corrupted["detail"]["recording_id"] is not None, corrupted
    [invalidated] = _events(r, "snapshot_invalidated")
    assert invalidated["member_id"] == corrupted["member_id"]
    assert invalidated["detail"]["position"] is not None
    # The member's own account: it counted the error and closed (its consensus module's error event),
    # first of its errors (a loaded machine may add later ones of its recovery, e.g. a catchup timeout).
    errors = [e["detail"]["reason"] for e in _events(r, "error") if e["member_id"] == corrupted["member_id"]]
    assert errors[:1] == ["service closed unexpectedly: service=0 failed to start clustered service"], errors


def _switch_off_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The behaviour before the rule: a service that failed to start is gone without its node being told
    (its process died). Only the simulator's service host is patched (the consensus module is compiled)."""
    init = SimServiceHost.__init__

    def dies_unnoticed(self: SimServiceHost, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if self.agent.failure is not None:
            self.closed_reason = None
            self.pump = lambda: 0  # type: ignore[method-assign]

    monkeypatch.setattr(SimServiceHost, "__init__", dies_unnoticed)


# --- the runner's exit-code check ------------------------------------------------------------------------


def test_only_undocumented_exits_not_killed_by_the_harness_are_reported() -> None:
    rows = [
        (0, "node", 100, 0, LOG),
        (0, "service", 101, -9, LOG),  # SIGKILLed by the harness
        (1, "node", 102, 3, LOG),  # its service went away or failed to start
        (1, "service", 103, 5, LOG),  # failed to start
        (2, "node", 104, 4, LOG),
        (2, "service-s1", 105, 0, LOG),
    ]
    assert unexpected_exits(rows) == []
    planted = [*rows, (1, "service", 106, 1, LOG), (2, "node", 107, 5, LOG), (0, "service-s1", 108, -15, LOG)]
    assert unexpected_exits(planted) == [
        f"member 1 service process (pid 106) exited with 1, not one of its documented exit codes 0, 2, 5 (log: {LOG})",
        f"member 2 node process (pid 107) exited with 5, not one of its documented exit codes 0, 2, 3, 4 (log: {LOG})",
        f"member 0 service-s1 process (pid 108) exited with -15, not one of its documented exit codes 0, 2, 5 "
        f"(log: {LOG})",
    ]


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_a_service_process_that_exits_1_by_itself_fails_a_real_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service process exits 1 at the first client message (once): its node exits 3, the final heal
    restarts the member and every trace check passes, but the runner's check names the process."""
    marker = tmp_path / "exited"
    monkeypatch.setenv(EXIT_MARKER_ENV, str(marker))
    r = run_scenario(
        "follower-restart", SEED, service=EXIT_ONE_KV, workload=KV_WORKLOAD, duration_s=3.0, directory=tmp_path / "run"
    )
    assert marker.exists()
    assert not r.ok
    assert r.error is not None and r.error.startswith("UnexpectedExit: member "), r.error
    assert " service process (pid " in r.error and "exited with 1, not one of its documented" in r.error, r.error


# --- the snapshot-corrupt scenario -----------------------------------------------------------------------


def test_the_nemesis_is_a_schedule_step() -> None:
    steps = [{"nemesis": "snapshot-corrupt", "seconds": 1.5, "who": "leader", "close_wait_s": 4.0}]
    plan = schedule_from_spec(SEED, steps)
    [step] = plan.steps
    assert isinstance(step.nemesis, SnapshotCorrupt)
    assert (step.nemesis.who, step.nemesis.close_wait_s) == ("leader", 4.0)
    assert schedule_spec(plan) == steps


@pytest.mark.sim
def test_an_unloadable_snapshot_closes_its_member_which_recovers_after_invalidation(tmp_path: Path) -> None:
    r = run_scenario(SNAPSHOT_CORRUPT, SEED, sim=True, directory=tmp_path)
    _assert_the_member_closed_and_recovered(r)
    [corrupted] = _events(r, "snapshot_corrupted")
    closed = [e for e in _events(r, "service_closed") if e["member_id"] == corrupted["member_id"]]
    assert [e["detail"]["reason"] for e in closed] == ["service=0 failed to start"], closed


@pytest.mark.sim
def test_a_member_that_runs_on_without_its_service_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _switch_off_the_rule(monkeypatch)
    r = run_scenario(SNAPSHOT_CORRUPT, SEED, sim=True, directory=tmp_path)
    assert not r.ok
    assert r.error is not None and r.error.startswith("ChaosTimeout: member "), r.error
    assert "unloadable service snapshot" in r.error and "runs on without its service" in r.error, r.error


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_an_unloadable_snapshot_closes_a_real_member_which_recovers_after_invalidation(tmp_path: Path) -> None:
    """On processes: the service exits 5 and its node 3 (the runner's check accepts both), then the
    member recovers."""
    r = run_scenario(SNAPSHOT_CORRUPT, SEED, duration_s=5.0, directory=tmp_path)
    _assert_the_member_closed_and_recovered(r)
