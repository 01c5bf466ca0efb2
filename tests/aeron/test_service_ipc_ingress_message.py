"""Ports of Aeron's ``ServiceIpcIngressMessageTest`` (aeron-system-tests) that run one service per
member (the others need several services per member: docs/aeron-parity.md)."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import SECOND

from tests.aeron.services import (
    ECHO_SERVICE_IPC_INGRESS_MSG_SKIP_FOLLOWER,
    MESSAGE,
    MESSAGE_TRACKING,
    SERVICE_INGRESS,
    SERVICE_MESSAGES_PER_INGRESS,
    TIMER_MESSAGES_PER_INGRESS,
    MessageTrackingService,
)
from tests.aeron.support import AeronCluster
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim

ECHO_SERVICE_IPC_INGRESS_MSG = b"echo-service-ipc-ingress"


def test_should_echo_service_ipc_messages(sim: SimKit) -> None:
    """ServiceIpcIngressMessageTest.shouldEchoServiceIpcMessages: each client message goes into the log
    again as a service message, which is echoed to the client."""
    c = sim.cluster(members=3, seed=901, service=SERVICE_INGRESS)
    c.await_leader()
    client = c.connect_client()
    for _ in range(10):
        c.await_condition(lambda: client.client.offer(ECHO_SERVICE_IPC_INGRESS_MSG, c.now_ns) > 0, SECOND, "sent")
    c.await_condition(lambda: len(client.received) >= 10, 5 * SECOND, "10 responses")
    assert [m.payload for m in client.received] == [ECHO_SERVICE_IPC_INGRESS_MSG] * 10


def tracking(a: AeronCluster, member_id: int) -> MessageTrackingService:
    s = a.c.service(member_id).service
    assert isinstance(s, MessageTrackingService)
    return s


def await_message_counts(a: AeronCluster, message_count: int) -> None:
    """ServiceIpcIngressMessageTest.awaitMessageCounts: 1 client + 3 service messages each, 2 timers."""
    for m in a.c.members_alive():
        a.await_condition(
            lambda m=m: (
                tracking(a, m).message_count >= message_count * (1 + SERVICE_MESSAGES_PER_INGRESS)
                and len(tracking(a, m).timers) >= message_count * TIMER_MESSAGES_PER_INGRESS
            ),
            f"member {m}'s message and timer counts",
        )


def assert_tracked_messages(a: AeronCluster, message_count: int) -> None:
    """ServiceIpcIngressMessageTest.assertTrackedMessages: exact counts on the leader, and every member
    holds the leader's client messages, service messages and timers, in the same order."""
    leader = tracking(a, a.await_leader())
    assert len(leader.client_messages) == message_count
    assert len(leader.service_messages) == message_count * SERVICE_MESSAGES_PER_INGRESS
    assert len(leader.timers) == message_count * TIMER_MESSAGES_PER_INGRESS
    assert len(set(leader.service_messages)) == len(leader.service_messages), "no duplicate service message"
    for m in a.c.members_alive():
        s = tracking(a, m)
        assert (s.client_messages, s.service_messages, s.timers) == (
            leader.client_messages,
            leader.service_messages,
            leader.timers,
        ), f"member {m}"


def send_numbered(a: AeronCluster, first: int, count: int) -> None:
    assert a.client is not None
    for n in range(first, first + count):
        a.await_condition(
            lambda n=n: a.client is not None and a.client.client.offer(MESSAGE.pack(n), a.c.now_ns) > 0,  # type: ignore[union-attr]
            "sent",
        )


def test_should_process_service_messages_without_duplicates_after_a_full_cluster_restart(sim: SimKit) -> None:
    """ServiceIpcIngressMessageTest.shouldProcessServiceMessagesWithoutDuplicatesAfterAFullClusterRestart"""
    a = AeronCluster(sim.cluster(members=3, seed=902, service=MESSAGE_TRACKING))
    a.await_leader()
    a.connect_client()
    send_numbered(a, 1, 10)
    assert a.client is not None
    a.await_condition(lambda: len(a.client.received) >= 10, "10 responses")  # type: ignore[union-attr]
    await_message_counts(a, 10)
    a.stop_all_nodes()
    a.restart_all_nodes()
    a.await_leader()
    a.reconnect_client()
    send_numbered(a, 11, 20)
    a.await_condition(lambda: len(a.client.received) >= 20, "20 responses")  # type: ignore[union-attr]
    await_message_counts(a, 30)
    a.c.run_for(SECOND)
    assert_tracked_messages(a, 30)


def test_should_handle_service_messages_missed_on_the_follower_when_snapshot(sim: SimKit) -> None:
    """ServiceIpcIngressMessageTest.shouldHandleServiceMessagesMissedOnTheFollowerWhenSnapshot"""
    c = sim.cluster(members=3, seed=903, service=SERVICE_INGRESS)
    c.await_leader()
    client = c.connect_client()
    messages = [ECHO_SERVICE_IPC_INGRESS_MSG] * 5 + [ECHO_SERVICE_IPC_INGRESS_MSG_SKIP_FOLLOWER]
    messages += [ECHO_SERVICE_IPC_INGRESS_MSG] * 5
    for payload in messages:
        c.await_condition(lambda p=payload: client.client.offer(p, c.now_ns) > 0, SECOND, "sent")
    c.await_condition(lambda: len(client.received) >= 11, 5 * SECOND, "11 responses")
    assert [m.payload for m in client.received] == messages
    assert c.control("snapshot")
    c.await_condition(lambda: all(c.member(m).snapshot_count == 1 for m in range(3)), 5 * SECOND, "snapshots")  # type: ignore[attr-defined]
    for m in range(3):
        c.stop(m)
    for m in range(3):
        c.restart(m)
    c.await_leader()
    c.await_condition(lambda: all(c.member(m).election_state is None for m in range(3)), 5 * SECOND, "elections closed")
