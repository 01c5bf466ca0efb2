"""Ports of Aeron's ``ClusterNodeTest`` (aeron-cluster/src/test/java/io/aeron/cluster): one member
with a small service, a client that offers one message and awaits the response."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import SECOND
from clusterlab.harness.sim_parts import SimClient

from tests.aeron.services import SERVICE_INGRESS, TIMED
from tests.aeron.support import SERVICE_NAME
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim

MSG = b"Hello World!"


def connect(sim: SimKit, service: str, seed: int) -> tuple[object, SimClient]:
    c = sim.cluster(members=1, seed=seed, service=service)
    c.await_leader()
    return c, c.connect_client()


def offer_and_await_response(c: object, client: SimClient, expected: bytes) -> None:
    from clusterlab.harness.sim import SimCluster

    assert isinstance(c, SimCluster)
    c.await_condition(lambda: client.client.offer(MSG, c.now_ns) > 0, SECOND, "offered")
    c.await_condition(lambda: bool(client.received), 2 * SECOND, "a response")
    assert [m.payload for m in client.received] == [expected]


def test_should_connect_and_send_keep_alive(sim: SimKit) -> None:
    """ClusterNodeTest.shouldConnectAndSendKeepAlive"""
    c, client = connect(sim, SERVICE_NAME, 301)
    client.client.send_keep_alive(c.now_ns)  # type: ignore[attr-defined]
    assert client.client.is_connected


def test_should_echo_message_via_service_using_direct_offer(sim: SimKit) -> None:
    """ClusterNodeTest.shouldEchoMessageViaServiceUsingDirectOffer"""
    c, client = connect(sim, SERVICE_NAME, 302)
    offer_and_await_response(c, client, MSG)


def test_should_schedule_event_in_service(sim: SimKit) -> None:
    """ClusterNodeTest.shouldScheduleEventInService"""
    c, client = connect(sim, TIMED, 303)
    offer_and_await_response(c, client, MSG + b"-scheduled")


def test_should_send_response_after_service_message(sim: SimKit) -> None:
    """ClusterNodeTest.shouldSendResponseAfterServiceMessage"""
    c, client = connect(sim, SERVICE_INGRESS, 304)
    offer_and_await_response(c, client, MSG)
