"""The ledger's own suite, with the clusterlab pytest plugin: a chaos scenario per seed in the
simulator, the workload fixture's replies checked by LedgerModel one by one, and the project's
blessed golden verified."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from clusterlab.golden.verify import verify_goldens

SERVICE, WORKLOAD = "ledger.service:make", "ledger.workload:make"


@pytest.mark.chaos(scenario="leader-kill", sim=True, seed=[1, 2], duration=3.0, service=SERVICE, workload=WORKLOAD)
def test_the_ledger_survives_a_leader_kill(chaos_run: Any) -> None:
    assert chaos_run.ok, chaos_run.failure_message()
    assert chaos_run.verdict.linearizability.verdict == "ok"


@pytest.mark.parametrize("sim_cluster", [{"service": SERVICE, "seed": 3}], indirect=True)
def test_every_reply_is_what_the_model_says(sim_cluster: Any, workload: Any) -> None:
    w = workload(sim_cluster, workload=WORKLOAD)
    w.run_for(2.0)
    assert w.acked > 20 and w.service_workload.checked == w.acked  # one client: each reply stepped through the model


GOLDENS = Path(__file__).resolve().parents[1] / "goldens"


def test_the_blessed_golden_still_verifies() -> None:
    """goldens/ledger-leader-kill: its committed log replayed and its seed re-run in the simulator
    with today's ledger and clusterlab, diffed position by position and message by message."""
    report = verify_goldens(traces=GOLDENS, master="local[1]")
    assert report.ok, "\n".join(report.details())
    assert [v.name for v in report.verdicts] == ["ledger-leader-kill"] and report.verdicts[0].rerun is not None
