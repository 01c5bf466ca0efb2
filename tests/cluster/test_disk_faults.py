"""A full disk under the trace never kills a member: the recorder of every process
whose writes fail stops recording and leaves its incomplete/ marker, and the cluster keeps serving —
with a real ENOSPC (the trace directory on a small tmpfs) and with an injected one."""

from __future__ import annotations

import json
from pathlib import Path

from clusterlab.chaos.verdict import verify_run
from clusterlab.harness.local import LocalCluster
from clusterlab.harness.recorder import INCOMPLETE_DIR, TRACE_WRITE_FAULT_ENV

from clusterlab.cli import main as cli_main
from tests.cluster.helpers import LEADER_S, assert_services_agree, running_cluster, small_tmpfs

STOP_S = 30.0  # bound on the recorders noticing the fault (their 100 ms flushes), loaded machine


def stopped_processes(trace_dir: Path) -> set[str]:
    return {p.stem for p in (trace_dir / INCOMPLETE_DIR).glob("*.json")}


def keep_serving(cluster: LocalCluster, puts: int, value: str = "v") -> None:
    """``puts`` acknowledged writes, every member still running, the services in agreement."""
    client = cluster.client()
    for i in range(puts):
        assert client.put(f"after-{i}", value, timeout_s=20.0)["ok"]
    assert client.get("after-0", timeout_s=20.0)["value"] == value
    assert cluster.members_alive() == list(range(cluster.member_count))
    cluster.await_leader(LEADER_S)
    assert_services_agree(cluster)


def test_injected_enospc_in_every_node_keeps_the_cluster_serving(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(TRACE_WRITE_FAULT_ENV, "ENOSPC,after=6,process=node-")
    with running_cluster(tmp_path, seed=5) as cluster:
        trace_dir = cluster.trace_dir
        assert trace_dir is not None
        client = cluster.client()
        expected = {f"node-{i}" for i in range(3)}

        def all_nodes_stopped() -> bool:
            client.put("k", "x", timeout_s=20.0)  # traffic makes the nodes flush, and fail
            return stopped_processes(trace_dir) == expected

        cluster.await_condition(all_nodes_stopped, STOP_S, "every node's recording stopped")
        keep_serving(cluster, 20)
    markers = [json.loads(p.read_text()) for p in sorted((trace_dir / INCOMPLETE_DIR).glob("*.json"))]
    assert [m["process"] for m in markers] == sorted(expected)
    assert all(m["reason"].startswith("ENOSPC: ") and m["at_ns"] > 0 for m in markers)
    meta = json.loads((trace_dir / "run.json").read_text())
    assert {m["process"] for m in meta["recording_stopped"]} == expected
    assert meta["outcome"] == "ok"
    # The readers judge such a trace INCOMPLETE, naming each process whose recording stopped.
    verdict = verify_run(trace_dir)
    assert verdict.status == "INCOMPLETE"
    assert verdict.completeness is not None
    described = " ".join(f.describe() for f in verdict.completeness.findings)
    assert all(name in described for name in expected), described
    assert cli_main(["trace", "summary", str(trace_dir)]) == 3


def test_a_full_tmpfs_under_the_trace_keeps_the_cluster_serving(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "512k") as disk:
        with running_cluster(tmp_path, seed=6, trace_dir=disk / "trace") as cluster:
            client = cluster.client()
            big = "x" * 4000

            def some_recording_stopped() -> bool:
                client.put("fill", big, timeout_s=20.0)
                return bool(stopped_processes(disk / "trace"))

            cluster.await_condition(some_recording_stopped, 120.0, "the trace filled its 512 KiB disk")
            keep_serving(cluster, 10, big)
        markers = [json.loads(p.read_text()) for p in (disk / "trace" / INCOMPLETE_DIR).glob("*.json")]
        assert markers and all(m["reason"].startswith("ENOSPC") for m in markers)
        # The final run.json fits in the page set aside for it at the start, and says what stopped.
        meta = json.loads((disk / "trace" / "run.json").read_text())
        assert meta["outcome"] == "ok"
        assert {m["process"] for m in meta["recording_stopped"]} == {m["process"] for m in markers}
