"""The trace check ``clients_close_when_cluster_gone`` (clusterlab.chaos.checks.client_close), judged by
DuckDB, on the simulator's ``cluster-down`` scenario: every member is killed and stays down 25 s, longer
than the clients' 20 s new-leader timeout.

Each client notices the cluster is gone and closes by itself (Aeron ``AeronCluster.pollStateChanges``);
the workload records that as ``client_closed`` and carries on with new clients once the members restart.
A client that never closes (the workload recording no close, as with a client that keeps waiting) fails
the run by this check alone; a close long before the cluster went away is judged from edited events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from clusterlab.chaos.checks.client_close import CLIENTS_CLOSE_WHEN_CLUSTER_GONE
from clusterlab.chaos.checks.protocol import evaluate_duckdb
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.workload import SimWorkload
from clusterlab.harness.trace import Run, open_run

pytestmark = [pytest.mark.chaos, pytest.mark.sim]


def judge(tables: dict[str, pa.Table]) -> list[str]:
    run_id = tables["events"].column("run_id")[0].as_py()
    return sorted(r["detail"] for r in evaluate_duckdb(CLIENTS_CLOSE_WHEN_CLUSTER_GONE, tables, run_id))


def closes(r: Run) -> list[dict[str, Any]]:
    return [e for e in r.tables["events"].to_pylist() if e["kind"] == "client_closed"]


@pytest.fixture(scope="module")
def passing(tmp_path_factory: pytest.TempPathFactory) -> Run:
    r = run_scenario("cluster-down", seed=1, sim=True, directory=tmp_path_factory.mktemp("cluster-down"))
    assert r.ok, r.failure_message()
    return open_run(r.trace_dir)


def test_every_client_closes_once_the_cluster_is_gone_and_the_run_passes(passing: Run) -> None:
    closed = closes(passing)
    assert {json.loads(e["detail"])["client_id"] for e in closed} >= {0, 1, 2}
    assert all("cluster unavailable" in json.loads(e["detail"])["reason"] for e in closed)
    assert judge(passing.tables) == []


def test_a_client_that_never_closes_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SimWorkload, "_note_closed", lambda self, c: None)
    r = run_scenario("cluster-down", seed=1, sim=True, directory=tmp_path)
    assert not r.ok
    assert r.failure_message().splitlines()[0].endswith("trace checks failed: clients_close_when_cluster_gone")


def test_a_client_that_closes_while_the_cluster_runs_is_named(passing: Run) -> None:
    rows = passing.tables["events"].to_pylist()
    first = min(e["wall_ns"] for e in rows if e["kind"] == "chaos_apply")
    early = dict(closes(passing)[0], wall_ns=first - 1_000_000_000)  # the cluster was up its whole timeout before
    tables = dict(passing.tables, events=pa.Table.from_pylist([*rows, early], schema=passing.tables["events"].schema))
    found = judge(tables)
    assert len(found) == 1 and "closed by itself" in found[0] and "though no member was down" in found[0]
