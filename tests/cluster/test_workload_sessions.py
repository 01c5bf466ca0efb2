"""A chaos workload against a cluster whose concurrent session limit is full: a client that reconnects
while its leader is gone leaves its old session open until the session timeout, so after a leader
change the limit can be full of the workload's own stale sessions. The workload waits for a session
as it waits for a leader, and raises the refusal only when it outlasts ``session_limit_wait_s``."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from clusterlab.chaos.workload import LocalWorkload
from clusterlab.core.client.errors import ConnectError
from clusterlab.core.consensus.context import ConsensusModuleContext

from tests.cluster.helpers import running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

SESSION_LIMIT = next(
    f.default for f in dataclasses.fields(ConsensusModuleContext) if f.name == "max_concurrent_sessions"
)


def test_a_workload_waits_out_a_full_session_limit_and_raises_one_that_lasts(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as cluster:
        held = [cluster.client() for _ in range(SESSION_LIMIT)]  # the cluster's sessions, all of them
        assert all(c.client.is_connected for c in held)

        lasting = LocalWorkload(service="kv", cluster=cluster, clients=1, rate=1e6, session_limit_wait_s=1.0)
        deadline = time.monotonic() + 30.0
        with pytest.raises(ConnectError, match=r"concurrent session limit, still after 1 s") as refused:
            while time.monotonic() < deadline:
                lasting.step()
                assert lasting.acked == 0 and not lasting.history, "no op goes out without a session"
        assert refused.value.detail.startswith("concurrent session limit")
        lasting.close()

        waiting = LocalWorkload(service="kv", cluster=cluster, clients=2, rate=1e6, session_limit_wait_s=60.0)
        for _ in range(5):
            waiting.step()  # refused, not raised: the limit may be the workload's own stale sessions
        assert waiting.acked == 0 and not waiting.history
        for c in held[:2]:  # two sessions close (as stale ones expire): both clients get theirs
            c.close()
        deadline = time.monotonic() + 30.0
        while waiting.acked < 4 and time.monotonic() < deadline:
            waiting.step()
        assert waiting.acked >= 4, f"ops acknowledged after the limit freed: {waiting.acked}"
        waiting.close()
        for c in held[2:]:
            c.close()
