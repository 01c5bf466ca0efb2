"""The ``backup-restore`` scenario (simulator): a ClusterBackup follows the cluster through snapshots and a
leader kill, then the cluster is destroyed and every member restored from the backup. The trace checks
judge the whole run, before and after the restore: every acknowledged write survives (durability), and
the restored members' states match the destroyed cluster's at every log position (agreement).

Each test here could fail: a restore from a backup that lags the commit position loses acknowledged
writes and durability says so; a planted backup that skips the services' snapshots is caught because
the cluster restored from it cannot start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.target import SimTarget
from clusterlab.harness.trace import open_run

from clusterlab.testing.mutants import BACKUP_SKIPS_SNAPSHOT

pytestmark = [pytest.mark.chaos, pytest.mark.sim]


def harness_events(trace_dir: Path) -> list[dict]:
    return [e for e in open_run(trace_dir).events.to_pylist() if e["source"] == "harness"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_cluster_restored_from_its_backup_keeps_every_acknowledged_write(tmp_path: Path, seed: int) -> None:
    r = run_scenario("backup-restore", seed=seed, members=3, sim=True, directory=tmp_path)
    assert r.ok, r.failure_message()
    events = harness_events(r.trace_dir)
    kinds = [e["kind"] for e in events]
    restore = kinds.index("restore_from_backup")
    # The backup retrieved snapshots (one set at start, a newer one later) and was recorded restoring.
    retrieved = [json.loads(e["detail"])["count"] for e in events if e["kind"] == "backup_snapshots_retrieved"]
    assert retrieved and max(retrieved) >= 1
    # Every member was killed and restarted at the restore, and the restored cluster applied entries.
    restarted = {e["member_id"] for e in events[restore:] if e["kind"] == "restart"}
    assert restarted == {0, 1, 2}
    restored_at = events[restore]["wall_ns"]
    applied = open_run(r.trace_dir).tables["applied"].to_pylist()
    assert any(a["wall_ns"] > restored_at for a in applied), "nothing applied after the restore"
    ops = open_run(r.trace_dir).tables["ops"].to_pylist()
    assert sum(o["kind"] == "ok" and o["wall_ns"] < restored_at for o in ops) > 50


def test_a_restore_from_a_lagging_backup_is_caught_by_durability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: restore as soon as the backup is backing up, without waiting for it to reach the commit
    position, from a backup that copies the log only once: the writes acknowledged after it are lost."""
    start = SimTarget.start_backup

    def lagging(self: SimTarget, replay_start: str, query_interval_s: float) -> None:
        start(self, replay_start, query_interval_s)
        assert self.backup is not None
        self.backup.agent.ctx.live_log_poll_interval_ns = 10**15  # never asks for more log once caught up
        self.backup.agent.ctx.backup_query_interval_ns = 10**15

    monkeypatch.setattr(SimTarget, "start_backup", lagging)
    monkeypatch.setattr(SimTarget, "backup_caught_up", lambda self: self.backup is not None)
    r = run_scenario("backup-restore", seed=1, members=3, sim=True, directory=tmp_path)
    assert not r.ok
    assert r.verdict is not None and "durability" in r.verdict.failed(), r.failure_message()


def test_a_backup_that_skips_the_service_snapshots_is_caught(tmp_path: Path) -> None:
    r = run_scenario("backup-restore", seed=1, members=3, sim=True, directory=tmp_path, mutants=[BACKUP_SKIPS_SNAPSHOT])
    assert not r.ok
    assert r.error is not None and "cannot recover: the log recording starts at" in r.error, r.failure_message()
