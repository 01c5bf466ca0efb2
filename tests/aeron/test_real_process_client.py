"""Aeron's cluster-client ports that depend on real sockets, on real processes (LocalCluster: a node
and a service process per member, ZeroMQ over ipc:// in the test's tmp_path, the kv service). The
simulator runs the same ports with Aeron's test service (test_cluster_client.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from clusterlab.core.client import ControlledPollAction, EgressMessage, LeaderLink
from clusterlab.core.consensus.context import SECOND
from clusterlab.harness.local import wait_until
from clusterlab.harness.services import kv

from tests.cluster.helpers import LEADER_S, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

CLOSE_S = 15.0  # the bound on noticing the loss (a keep-alive) plus the 1 s new-leader timeout
REPLY_S = 10.0


def test_should_close_client_after_cluster_becomes_unavailable(tmp_path: Path) -> None:
    """ClusterTest.shouldCloseClientAfterClusterBecomesUnavailable on processes: every member stopped,
    the client's ingress socket to the leader has no connection left, and the client closes once its
    new-leader timeout (1 s, as Aeron's test sets it) passes without a NewLeaderEvent."""
    with running_cluster(tmp_path) as c:
        c.await_leader(LEADER_S)
        client = c.client()
        assert client.put("k", "v")["revision"] == 1
        conn = client.conn
        conn.client.new_leader_timeout_ns = 1 * SECOND  # clientCtx().newLeaderTimeoutNs(SECONDS.toNanos(1))
        assert not conn.client.is_closed

        for m in range(3):
            c.stop(m)

        def closed() -> bool:
            # Aeron's loop: sendKeepAlive(); pollEgress() until isClosed().
            if not conn.client.is_closed:
                conn.client.send_keep_alive(conn.clock.now_ns())
                conn.pump(0.01)
            return conn.client.is_closed

        deadlines: list[int] = []  # when the client gives up, as first seen while it awaits a new leader

        def lost_then_closed() -> bool:
            deadline = conn.client.state_deadline_ns
            if not deadlines and deadline is not None and conn.client.leader_link is LeaderLink.AWAIT_NEW_LEADER:
                deadlines.append(deadline)
            return closed()

        wait_until(
            lost_then_closed, CLOSE_S, "the client closed after every member stopped", context=conn.client.describe
        )
        assert conn.client.close_detail.startswith("cluster unavailable"), conn.client.close_detail
        assert deadlines, "the client saw its leader's ingress not connected before it closed"
        assert conn.clock.now_ns() >= deadlines[0], "closed no earlier than its new-leader timeout"


def test_try_claim_and_controlled_poll_through_the_runtime(tmp_path: Path) -> None:
    """ClusterConnection.try_claim and controlled_poll on processes: kv requests written into claims
    (one aborted, never applied) and their replies taken with ABORT (handed out again) and BREAK."""
    with running_cluster(tmp_path) as c:
        c.await_leader(LEADER_S)
        conn = c.client().conn
        aborted = conn.try_claim(len(kv.put(1, "k", "never")))
        aborted.buffer[:] = kv.put(1, "k", "never")
        aborted.abort()
        for request_id in (2, 3):
            payload = kv.put(request_id, "k", f"v{request_id}")
            with conn.try_claim(len(payload)) as claim:
                claim.buffer[:] = payload
        assert conn.run_until(lambda: len(conn.messages) == 2, REPLY_S), conn.client.describe()

        seen: list[int] = []

        def handler(actions: list[ControlledPollAction]) -> Callable[[EgressMessage], ControlledPollAction]:
            def on_message(message: EgressMessage) -> ControlledPollAction:
                seen.append(kv.decode_reply(message.payload)["id"])
                return actions.pop(0)

            return on_message

        assert conn.controlled_poll(handler([ControlledPollAction.ABORT])) == 0
        assert conn.controlled_poll(handler([ControlledPollAction.BREAK])) == 1
        assert conn.controlled_poll(handler([ControlledPollAction.CONTINUE])) == 1
        assert seen == [2, 2, 3] and conn.messages == []
        reply = c.client().get("k")
        assert (reply["value"], reply["revision"]) == ("v3", 2), "the aborted claim was never applied"
