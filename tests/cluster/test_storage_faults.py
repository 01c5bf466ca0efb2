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
