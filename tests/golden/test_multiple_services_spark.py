"""Several services per member, end to end: a 3-member cluster of real processes with
2 services each (kv and counter) survives the leader-kill scenario, and the Spark check passes with
``applied`` rows for both service ids on every member. The Spark agreement check compares states
within one service id: a member's two services never agree with each other (different states), yet
the run passes; one member's service 1 reporting another state at one position fails it."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.harness.trace import open_run
from clusterlab.spark.check import check_runs

from tests.golden import plant

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]


def test_leader_kill_with_two_services_per_member_passes_the_spark_check(spark: object, tmp_path: Path) -> None:
    r = run_scenario("leader-kill", seed=1, directory=tmp_path / "run", services=["kv", "counter"])
    assert r.ok, r.failure_message()
    assert r.acked > 0
    applied = open_run(r.trace_dir).applied
    rows = list(zip(applied.column("member_id").to_pylist(), applied.column("service_id").to_pylist(), strict=True))
    assert {(m, s) for m, s in rows} == {(m, s) for m in range(3) for s in range(2)}

    report = check_runs([r.trace_dir], spark=spark)  # type: ignore[arg-type]
    assert report.ok, report.table()

    # A member's service 1 diverging at one position: the per-service agreement check finds it.
    bad = plant.copy_run(r.trace_dir, tmp_path / "bad", "bad-run")
    path = next(p for p in sorted((bad / "applied").glob("service-s1-1-i*.arrow")))
    rows_1 = [x for x in plant.read_file(path).to_pylist() if x["entry_type"] == "SessionMessage"]
    position = rows_1[len(rows_1) // 2]["log_position"]

    def change(rs: plant.Rows) -> plant.Rows:
        for x in rs:
            if x["log_position"] == position:
                x["state_digest"] = bytes(16)
        return rs

    plant.rewrite(path, change)
    report = check_runs([bad], spark=spark)  # type: ignore[arg-type]
    agreement = report.checks["agreement"]
    assert agreement.count == 1, report.table()
    assert agreement.violations[0]["service_id"] == 1 and agreement.violations[0]["log_position"] == position
