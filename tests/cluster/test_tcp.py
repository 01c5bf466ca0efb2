"""The same cluster over tcp://127.0.0.1 with OS-assigned ports (no port is ever chosen by us)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.helpers import LEADER_S, assert_services_agree, await_caught_up, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def test_tcp_cluster_elects_serves_and_survives_a_leader_restart(tmp_path: Path) -> None:
    with running_cluster(tmp_path, tcp=True) as c:
        endpoints = [m.ingress for m in c.config.members]
        assert all(e.startswith("tcp://127.0.0.1:") and not e.endswith(":0") for e in endpoints), endpoints
        client = c.client()
        assert client.client.response_channel.startswith("tcp://127.0.0.1:")
        assert client.put("k", "tcp")["ok"]
        old = c.leader_id()
        c.kill(old)
        assert client.put("k2", "after")["ok"]
        c.await_leader(LEADER_S, exclude={old})
        c.restart(old)  # rebinds its ports if it can; the others learn them either way
        await_caught_up(c)
        assert_services_agree(c)
        assert client.get("k")["value"] == "tcp"
