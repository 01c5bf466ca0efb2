"""Ports of Aeron's ``SingleNodeTest`` (aeron-system-tests): a one-member cluster."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import Role

from tests.aeron.support import aeron_cluster
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim


def test_should_start_cluster(sim: SimKit) -> None:
    """SingleNodeTest.shouldStartCluster"""
    a = aeron_cluster(sim, members=1, seed=401)
    leader = a.await_leader()
    assert leader == 0
    assert a.role(leader) == Role.LEADER


@pytest.mark.parametrize("pre_touch", [False, True])
def test_should_send_messages_to_cluster(sim: SimKit, pre_touch: bool) -> None:
    """SingleNodeTest.shouldSendMessagesToCluster (pre-touching mapped memory has no equivalent:
    both cases run the same path)."""
    a = aeron_cluster(sim, members=1, seed=402 if pre_touch else 403)
    leader = a.await_leader()
    assert leader == 0 and a.role(leader) == Role.LEADER
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.await_service_message_count(leader, 10)


def test_should_replay_log(sim: SimKit) -> None:
    """SingleNodeTest.shouldReplayLog"""
    a = aeron_cluster(sim, members=1, seed=404)
    leader = a.await_leader()
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.await_service_message_count(leader, 10)
    a.stop_node(leader)
    a.start_static_node(0)
    new_leader = a.await_leader()
    a.await_service_message_count(new_leader, 10)
