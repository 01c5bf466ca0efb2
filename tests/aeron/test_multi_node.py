"""Ports of Aeron's ``MultiNodeTest`` and ``AppointedLeaderTest`` (aeron-system-tests): three
members with an appointed leader."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import Role

from tests.aeron.support import AeronCluster, aeron_cluster
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim

APPOINTED = 1


def appointed_cluster(sim: SimKit, seed: int) -> AeronCluster:
    a = aeron_cluster(sim, seed=seed, appointed_leader_id=APPOINTED)
    leader = a.await_leader()
    assert leader == APPOINTED
    assert a.role(leader) == Role.LEADER
    return a


def test_should_elect_appointed_leader_with_three_nodes_with_no_replay_no_snapshot(sim: SimKit) -> None:
    """MultiNodeTest.shouldElectAppointedLeaderWithThreeNodesWithNoReplayNoSnapshot"""
    a = appointed_cluster(sim, 501)
    a.await_election_closed(0)
    a.await_election_closed(2)
    assert a.role(0) == Role.FOLLOWER
    assert a.role(2) == Role.FOLLOWER


def test_should_replay_with_appointed_leader_with_three_nodes_with_no_snapshot(sim: SimKit) -> None:
    """MultiNodeTest.shouldReplayWithAppointedLeaderWithThreeNodesWithNoSnapshot"""
    a = appointed_cluster(sim, 502)
    a.connect_client()
    a.send_and_await_messages(10)
    a.stop_all_nodes()
    a.restart_all_nodes()
    a.await_leader()
    a.await_services_message_count(10)


def test_should_catch_up_with_appointed_leader_with_three_nodes_with_no_snapshot(sim: SimKit) -> None:
    """MultiNodeTest.shouldCatchUpWithAppointedLeaderWithThreeNodesWithNoSnapshot"""
    a = appointed_cluster(sim, 503)
    a.connect_client()
    a.send_and_await_messages(5)
    a.stop_node(0)
    a.send_and_await_messages(10, 15)
    a.stop_all_nodes()
    a.restart_all_nodes()
    a.await_leader()
    a.await_services_message_count(15)


def test_appointed_leader_should_connect_and_send_keep_alive(sim: SimKit) -> None:
    """AppointedLeaderTest.shouldConnectAndSendKeepAlive"""
    a = appointed_cluster(sim, 504)
    client = a.connect_client()
    client.client.send_keep_alive(a.c.now_ns)
    assert client.client.is_connected


def test_appointed_leader_should_echo_messages_via_service(sim: SimKit) -> None:
    """AppointedLeaderTest.shouldEchoMessagesViaService"""
    a = appointed_cluster(sim, 505)
    a.connect_client()
    a.send_and_await_messages(10)
