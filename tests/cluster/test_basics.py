"""A real cluster starts, elects, serves KV requests, and leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clusterlab.core.consensus.context import Role
from clusterlab.core.runtime.config import ClusterConfig, remove_socket_root
from clusterlab.harness.local import LocalCluster, pid_alive, wait_until
from clusterlab.harness.services import kv

from tests.cluster.helpers import assert_services_agree, await_caught_up, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(90)]


def test_a_leader_is_elected_on_start_and_every_member_follows_it(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        leader = c.leader_id()
        assert leader is not None
        statuses = c.statuses()
        assert all(s is not None for s in statuses.values()), c.status_line()
        assert [i for i, s in statuses.items() if s.role == Role.LEADER] == [leader]
        assert {s.leadership_term_id for s in statuses.values()} == {statuses[leader].leadership_term_id}
        assert {s.leader_member_id for s in statuses.values()} == {leader}
        assert len(c.running_pids()) == 6, "a node and a service process per member"
        expected = os.environ.get("OPENBLAS_NUM_THREADS", "1")
        assert {_environment(pid).get("OPENBLAS_NUM_THREADS") for pid in c.running_pids()} == {expected}


def _environment(pid: int) -> dict[str, str]:
    """A running process's environment, from /proc."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_kv_operations_through_a_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")  # the user's setting reaches the members unchanged
    with running_cluster(tmp_path) as c:
        assert {_environment(pid)["OPENBLAS_NUM_THREADS"] for pid in c.running_pids()} == {"3"}
        client = c.client()
        assert client.put("k", "v1") == {"id": 1, "ok": True, "value": None, "revision": 1}
        assert client.get("k")["value"] == "v1"
        assert client.put("k", "v2")["value"] == "v1", "put answers the previous value"
        assert client.cas("k", "nope", "v3")["ok"] is False
        assert client.cas("k", "v2", "v3") | {"id": 0} == {"id": 0, "ok": True, "value": "v3", "revision": 3}
        assert client.delete("k")["value"] == "v3"
        assert client.get("k")["ok"] is False
        # A second session sees the same store; pipelined requests are all answered.
        other = c.client()
        ids = [other.submit(lambda rid, i=i: kv.put(rid, f"p{i}", str(i))) for i in range(50)]
        assert len(other.wait(ids, 10.0)) == 50
        assert client.get("p49")["value"] == "49"
        await_caught_up(c)
        assert_services_agree(c)


def test_no_process_outlives_a_failing_test(tmp_path: Path) -> None:
    cluster = LocalCluster(directory=tmp_path / "cluster")
    with pytest.raises(RuntimeError, match="the test failed") as failure, cluster:
        cluster.pause(cluster.leader_id())  # a stopped process must be stopped too
        assert len([p for p in cluster.running_pids() if pid_alive(p)]) == 6
        raise RuntimeError("the test failed")
    assert cluster.pids() and not [pid for pid in cluster.pids() if pid_alive(pid)]
    # The member logs of the failed run are kept and named in the failure.
    notes = "\n".join(getattr(failure.value, "__notes__", []))
    assert f"LocalCluster directory (kept): {cluster.directory}" in notes
    assert "node-0" in notes
    assert sorted(p.name for p in (tmp_path / "cluster" / "logs").iterdir())[:2] == [
        "member-0-node-0.log",
        "member-0-service-0.log",
    ]


def test_a_cluster_without_a_given_directory_cleans_up_after_itself() -> None:
    with LocalCluster(members=1) as c:
        directory = c.directory
        assert c.leader_id() == 0
        assert c.client().put("solo", "x")["ok"]
    assert not directory.exists()
    assert not [pid for pid in c.pids() if pid_alive(pid)]


def test_members_stop_when_their_harness_is_killed_outright(tmp_path: Path) -> None:
    """SIGKILL gives the harness no chance to clean up; the kernel tells the members (PDEATHSIG)."""
    directory = tmp_path / "cluster"
    script = (
        "import sys\n"
        "from clusterlab.harness.local import LocalCluster\n"
        f"with LocalCluster(directory={str(directory)!r}) as c:\n"
        "    print('ready', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    harness = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    try:
        assert harness.stdout is not None and harness.stdout.readline().strip() == "ready"
        pids = [p["pid"] for p in json.loads((directory / "processes.json").read_text())]
        assert len(pids) == 6 and all(pid_alive(p) for p in pids)
        harness.kill()
        harness.wait(10)
        wait_until(lambda: not any(pid_alive(p) for p in pids), 15.0, "every member process exited")
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(10)
        listed = directory / "processes.json"
        for row in json.loads(listed.read_text()) if listed.exists() else []:
            if pid_alive(row["pid"]):
                os.kill(row["pid"], signal.SIGKILL)
        if (directory / "cluster.json").exists():
            remove_socket_root(ClusterConfig.load(directory))  # the killed harness could not
