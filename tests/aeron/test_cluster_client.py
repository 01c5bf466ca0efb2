"""Ports of Aeron's ``ClusterTest`` about the cluster client (``AeronCluster``) onto the simulator: a
client that loses the whole cluster closes after its new-leader timeout, and the client's
``tryClaim`` and ``controlledPollEgress`` against three members running the Aeron test service
(tests/aeron/support.py). Each port's docstring names the Aeron test; the assertions are Aeron's.
The other tests here pin the same behaviour where Aeron has no system test for it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clusterlab.core.client import (
    NEW_LEADER_TIMEOUT_DEFAULT_NS,
    ClientError,
    ControlledPollAction,
    EgressMessage,
    LeaderLink,
    SessionClosedError,
)
from clusterlab.core.consensus.context import SECOND
from clusterlab.harness.sim_parts import SimClient

from tests.aeron.support import AeronCluster, aeron_cluster
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim

ABORT, BREAK, COMMIT, CONTINUE = (
    ControlledPollAction.ABORT,
    ControlledPollAction.BREAK,
    ControlledPollAction.COMMIT,
    ControlledPollAction.CONTINUE,
)


def connect(a: AeronCluster, new_leader_timeout_ns: int | None = None) -> SimClient:
    """``cluster.connectClient(cluster.clientCtx().newLeaderTimeoutNs(...))``; None: the client's
    default (Aeron's, 20 s)."""
    client = a.c.add_client(new_leader_timeout_ns=new_leader_timeout_ns)
    client.client.connect(a.c.now_ns)
    a.await_condition(lambda: client.client.is_connected, "client connected")
    a.client = client
    return client


def test_should_close_client_after_cluster_becomes_unavailable(sim: SimKit) -> None:
    """ClusterTest.shouldCloseClientAfterClusterBecomesUnavailable"""
    a = aeron_cluster(sim, seed=401)
    a.await_leader()
    client = connect(a, new_leader_timeout_ns=1 * SECOND)
    assert not client.client.is_closed

    a.stop_all_nodes()
    # Aeron's loop: sendKeepAlive(); pollEgress() until isClosed() (the harness client sends keep-alives).
    a.await_condition(lambda: client.client.is_closed, "the client closed", 5 * SECOND)
    assert client.client.close_detail.startswith("cluster unavailable"), client.client.close_detail
    assert client.errors == []


def test_client_closes_within_its_default_new_leader_timeout_after_every_member_stopped(sim: SimKit) -> None:
    """Every member stopped: the client notices on its next keep-alive (1 s) and closes Aeron's default
    new-leader timeout (20 s) later, rather than staying CONNECTED for ever."""
    a = aeron_cluster(sim, seed=402)
    a.await_leader()
    client = connect(a)
    timeout = client.client.new_leader_timeout_ns
    assert timeout == NEW_LEADER_TIMEOUT_DEFAULT_NS == 20 * SECOND
    stopped_at = a.c.now_ns
    a.stop_all_nodes()
    a.await_condition(lambda: client.client.leader_link is LeaderLink.AWAIT_NEW_LEADER, "leader lost", 2 * SECOND)
    lost_at = a.c.now_ns
    a.c.run_for(timeout - 1)
    assert client.client.is_connected, "still waiting for a new leader just before the timeout"
    a.await_condition(lambda: client.client.is_closed, "the client closed", 2 * SECOND)
    assert a.c.now_ns - lost_at == timeout
    assert a.c.now_ns - stopped_at <= timeout + SECOND
    with pytest.raises(SessionClosedError):
        client.client.offer(b"msg-late", a.c.now_ns)


def test_client_follows_a_new_leader_within_its_new_leader_timeout(sim: SimKit) -> None:
    """AeronClusterTest.shouldStayConnectedAfterSuccessfulFailover on the simulator: the leader is killed,
    the client's ingress to it is not connected, a new leader is elected within the new-leader timeout and
    the same session goes on (no close, no reconnect)."""
    a = aeron_cluster(sim, seed=403)
    leader = a.await_leader()
    client = connect(a)
    a.send_and_await_messages(3)
    session = client.client.cluster_session_id
    a.kill_node(leader)
    a.await_condition(lambda: client.client.leader_link is LeaderLink.AWAIT_NEW_LEADER, "leader lost", 2 * SECOND)
    a.await_condition(lambda: client.client.leader_member_id != leader, "NewLeaderEvent")
    a.send_and_await_messages(3, total=6)
    assert client.client.leader_link is LeaderLink.CONNECTED
    assert not client.client.is_closed and client.client.cluster_session_id == session
    assert client.client.leader_changes == 1


def test_should_assemble_session_messages_sent_by_try_claim_and_offer(sim: SimKit) -> None:
    """ClusterTest.shouldAssembleFragmentedSessionMessages, the part our API expresses: a 63-byte message
    written into a ``tryClaim`` and committed, then a 5979-byte message offered, reach every member's
    service whole and both echoes come back (Aeron's frame flags, reserved value and fragment layout in
    the term buffer have no equivalent over ZeroMQ, where a message is one frame)."""
    a = aeron_cluster(sim, seed=404)
    a.await_leader()
    client = connect(a)
    unfragmented = b"msg-" + bytes([0xEA]) * 59
    with client.client.try_claim(len(unfragmented), a.c.now_ns) as claim:
        assert claim.length == 63 and bytes(claim.buffer) == bytes(63)
        claim.buffer[:] = unfragmented
    large = b"msg-" + bytes([0xBC]) * 5975
    client.client.offer(large, a.c.now_ns)
    a.await_response_message_count(2)
    assert [m.payload for m in client.received] == [unfragmented, large]
    a.await_services_message_count(2)


def test_aborted_try_claim_sends_nothing_and_a_failed_block_aborts(sim: SimKit) -> None:
    """A claim that is aborted (explicitly, or by an exception in its ``with`` block) never reaches the
    cluster; the next committed claim does, alone."""
    a = aeron_cluster(sim, seed=405)
    a.await_leader()
    client = connect(a)
    claim = client.client.try_claim(8, a.c.now_ns)
    claim.buffer[:] = b"msg-nope"
    claim.abort()
    with pytest.raises(ClientError):
        claim.commit()
    with pytest.raises(RuntimeError), client.client.try_claim(8, a.c.now_ns) as failed:
        failed.buffer[:] = b"msg-fail"
        raise RuntimeError("the caller failed while writing")
    assert not failed.is_open
    with client.client.try_claim(6, a.c.now_ns) as ok:
        ok.buffer[:] = b"msg-ok"
    a.await_response_message_count(1)
    a.await_services_message_count(1)
    a.c.run_for(1 * SECOND)
    assert [m.payload for m in client.received] == [b"msg-ok"]
    assert all(a.service(m).message_count == 1 for m in range(3))


def test_controlled_poll_egress_abort_redelivers_and_break_stops(sim: SimKit) -> None:
    """``controlledPollEgress`` with a ``ControlledEgressListener`` over echoes from the cluster: ABORT
    leaves the message for the next poll, BREAK stops after it, CONTINUE and COMMIT go on."""
    a = aeron_cluster(sim, seed=406)
    a.await_leader()
    client = connect(a)
    client.collect = False  # replies stay in the ClusterClient for controlled_poll
    a.send_messages(5)
    a.await_condition(lambda: client.client.egress_pending == 5, "5 echoes")
    seen: list[bytes] = []

    def handler_of(actions: list[ControlledPollAction]) -> Callable[[EgressMessage], ControlledPollAction]:
        def handler(message: EgressMessage) -> ControlledPollAction:
            seen.append(message.payload)
            return actions.pop(0)

        return handler

    assert client.client.controlled_poll(handler_of([CONTINUE, ABORT])) == 1
    assert seen == [b"msg-0", b"msg-1"]
    assert client.client.controlled_poll(handler_of([BREAK])) == 1
    assert seen[2] == b"msg-1", "the aborted message is handed out again, first"
    assert client.client.controlled_poll(handler_of([COMMIT, CONTINUE]), fragment_limit=2) == 2
    assert client.client.controlled_poll(handler_of([CONTINUE])) == 1
    assert seen == [b"msg-0", b"msg-1", b"msg-1", b"msg-2", b"msg-3", b"msg-4"]
    assert client.client.egress_pending == 0
    assert client.client.controlled_poll(handler_of([])) == 0
