"""Ports of Aeron's ``MultiClusteredServicesTest`` (aeron-system-tests): two clustered services per
member (service ids 0 and 1), each an Aeron ``TestNode.TestService`` that sees every log entry."""

from __future__ import annotations

from typing import Any

import pytest
from clusterlab.core.consensus.context import SECOND

from tests.aeron.support import SERVICE_NAME, AeronCluster, AeronTestService

pytestmark = pytest.mark.sim


def _cluster(sim: Any) -> AeronCluster:
    return AeronCluster(sim.cluster(members=3, seed=0, services=[SERVICE_NAME, SERVICE_NAME]))


def _service(a: AeronCluster, member_id: int, service_id: int) -> AeronTestService:
    service = a.c.service(member_id, service_id).service
    assert isinstance(service, AeronTestService)
    return service


def _await_all_services(a: AeronCluster, count: int) -> None:
    a.await_condition(
        lambda: all(_service(a, m, s).message_count >= count for m in a.c.members_alive() for s in range(2)),
        f"every service of every member applied {count} messages",
        20 * SECOND,
    )


def test_should_support_multiple_services_per_node(sim: Any) -> None:
    """MultiClusteredServicesTest.shouldSupportMultipleServicesPerNode: 3 messages reach both services
    of every member (Aeron counts across members; we assert each service of each member)."""
    a = _cluster(sim)
    a.await_leader()
    a.connect_client()
    a.send_messages(3)
    _await_all_services(a, 3)
    for m in range(3):
        assert [_service(a, m, s).message_count for s in range(2)] == [3, 3]


@pytest.mark.parametrize("failed_service_count", [1, 2])
def test_should_continue_from_log_if_snapshot_throws_exception(sim: Any, failed_service_count: int) -> None:
    """MultiClusteredServicesTest.shouldContinueFromLogIfSnapshotThrowsException: a snapshot that
    fails in some services is not counted; the services keep serving, and after a full restart they
    recover from the log alone."""
    a = _cluster(sim)
    leader = a.await_leader()
    message_count = 3
    a.connect_client()
    a.send_messages(message_count)
    _await_all_services(a, message_count)

    def fail(_writer: Any) -> None:
        raise RuntimeError("planted snapshot failure")

    for m in range(3):
        for s in range(failed_service_count):
            _service(a, m, s).on_take_snapshot = fail  # type: ignore[method-assign]
    assert a.c.leader_id() == leader
    a.take_snapshot()
    a.send_messages(message_count)
    _await_all_services(a, message_count * 2)
    a.await_condition(
        lambda: all(
            sum(len(h.errors) for h in a.c.service_hosts(m)) == failed_service_count for m in a.c.members_alive()
        ),
        f"{failed_service_count} service errors on every member",
    )
    for m in range(3):
        assert a.snapshot_count(m) == 0

    a.stop_all_nodes()
    a.restart_all_nodes()
    a.await_leader()
    a.reconnect_client()
    a.send_messages(message_count)
    _await_all_services(a, message_count * 3)
    for m in range(3):
        assert not any(_service(a, m, s).was_snapshot_loaded for s in range(2))
