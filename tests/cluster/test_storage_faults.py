"""A real member whose disk refuses writes (ENOSPC, EIO), injected into the running node process through
its control socket (StorageFault) into the FaultyStorage over its FileStorage."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from clusterlab.core.consensus.context import Role

from tests.cluster.helpers import LEADER_S, assert_services_agree, await_caught_up, node_log, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_leader_with_a_full_disk_steps_down_keeps_running_and_no_acknowledged_write_is_lost(
    tmp_path: Path, code: int
) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        acknowledged = {}
        for i in range(10):
            assert client.put(f"before{i}", str(i))["ok"]
            acknowledged[f"before{i}"] = str(i)
        old = c.leader_id()
        assert old is not None
        assert c.storage_fault(old, code, "archive/")
        # The next write reaches the old leader, whose append fails: it fences itself, the others elect,
        # and the client rides the failover.
        for i in range(10):
            assert client.put(f"after{i}", str(i))["ok"]
            acknowledged[f"after{i}"] = str(i)
        new = c.await_leader(LEADER_S, exclude={old})
        assert new != old
        status = c.status(old)  # the process is still up and answering
        assert c.is_alive(old) and status is not None
        assert status.role == Role.FOLLOWER
        assert f"storage failure: {errno.errorcode[code]}" in status.detail
        assert f"storage failure: {errno.errorcode[code]}" in node_log(c, old)
        for key, value in acknowledged.items():
            assert client.get(key)["value"] == value, key
        # Space freed: a restart recovers from what it wrote and catches up.
        assert c.clear_storage_fault(old)
        c.restart(old)
        await_caught_up(c)
        assert c.status(old).role == Role.FOLLOWER
        assert_services_agree(c)


def test_storage_fault_request_with_a_bad_code_is_refused(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        leader = c.leader_id()
        assert leader is not None
        assert not c.storage_fault(leader, 99999)
        assert c.leader_id() == leader


def test_a_cluster_without_the_test_context_runs_plain_storage_and_refuses_test_faults(tmp_path: Path) -> None:
    """``test_context=False`` (``clusterlab cluster start``): the nodes run as production nodes do; a
    storage fault or a test hook is refused, and the cluster serves as before."""
    with running_cluster(tmp_path, test_context=False) as c:
        leader = c.leader_id()
        assert leader is not None
        client = c.client()
        assert client.put("k", "v")["ok"]
        assert not c.storage_fault(leader, errno.ENOSPC, "archive/")
        assert not c.fail_catchup(leader)
        assert client.put("k2", "v2")["ok"], "nothing was injected"
        assert c.leader_id() == leader
        assert "RULES CHANGED" not in node_log(c, leader)


def test_planted_bugs_need_the_test_context(tmp_path: Path) -> None:
    from clusterlab.harness.local import LocalCluster, LocalClusterError

    from clusterlab.testing.mutants import ACK_BEFORE_APPEND

    with pytest.raises(LocalClusterError, match="need test_context=True"):
        LocalCluster(directory=tmp_path / "c", test_context=False, mutants=frozenset({ACK_BEFORE_APPEND}))
    assert not (tmp_path / "c").exists(), "refused before anything is made"


def test_cluster_start_asks_for_production_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``clusterlab cluster start`` builds its LocalCluster without the test context."""
    from clusterlab.harness.local import LocalClusterError

    import clusterlab.cli.cluster as cli_cluster

    seen: dict[str, object] = {}

    def refuse(**kwargs: object) -> None:
        seen.update(kwargs)
        raise LocalClusterError("stop here")

    monkeypatch.setattr(cli_cluster, "LocalCluster", refuse)
    from clusterlab.cli import main

    assert main(["cluster", "start", "--dir", str(tmp_path / "c"), "--members", "3"]) != 0
    assert seen.get("test_context") is False
