"""Service-container lifecycle in the simulator: Aeron's ``ClusterTest`` ports of a service that cannot
load its snapshot (the member closes with a counted error; restarted after the snapshot is invalidated
it recovers), and the regression tests of the lifecycle rules they rest on:

* a service that fails to start acks its recovery with a NULL client id, and its consensus module
  closes with the error "service=N failed to start clustered service" (Aeron
  ``ConsensusModuleAgent.recoverFromSnapshotAndLog``: "failed to start clustered service(s)");
* a service container that closes without a crash tells an active service ``on_terminate``, once,
  errors swallowed (Aeron ``ClusteredServiceAgent.onClose``): a graceful stop of its member, its
  container closed, SHUTDOWN/ABORT (told once only).
"""

from __future__ import annotations

from typing import Any

import pytest
from clusterlab.core.consensus.context import SECOND, Role
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.service.api import Cluster

from tests.aeron.support import (
    EXCEPTION_ON_LOAD_SERVICE,
    SERVICE_NAME,
    TERMINATE_COUNTING_SERVICE,
    AeronCluster,
    TerminateCountingService,
)

pytestmark = pytest.mark.sim


def _cluster(sim: Any, seed: int = 0, **kwargs: Any) -> AeronCluster:
    return AeronCluster(sim.cluster(members=3, seed=seed, **kwargs))


def member_errors(a: AeronCluster, member_id: int) -> list[str]:
    """The member's distinct error log (Aeron's mark-file error log): its consensus module's errors."""
    return list(a.c.member(member_id).s.distinct_errors)  # type: ignore[attr-defined]


def wait_for_error(a: AeronCluster, member_id: int, *parts: str) -> None:
    """Aeron ``TestCluster.waitForError(node, predicate)``: an error of the member names every part."""
    a.await_condition(
        lambda: any(all(p in e for p in parts) for e in member_errors(a, member_id)),
        f"an error of member {member_id} naming {parts}",
    )


def invalidate_latest_snapshot(a: AeronCluster, member_id: int) -> bool:
    """Aeron ``ClusterTool.invalidateLatestSnapshot(out, clusterDir)`` on one stopped member."""
    with RecordingLog.open(a.c.storage(member_id)) as recording_log:
        return recording_log.invalidate_latest_snapshot()


def await_followers(a: AeronCluster, count: int) -> list[int]:
    """Aeron ``TestCluster.followers(expectedMinimumFollowerCount)``: every live member's election
    closed, and at least ``count`` of them FOLLOWER."""

    def followers() -> list[int]:
        live = [m for m in a.c.members_alive() if not a.is_terminated(m)]
        if any(a.c.member(m).election_state is not None for m in live):
            return []
        return [m for m in live if a.role(m) == Role.FOLLOWER]

    a.await_condition(lambda: len(followers()) >= count, f"{count} followers", 20 * SECOND)
    return followers()


def await_service_closed(a: AeronCluster, member_id: int) -> None:
    """The member's service containers closed and its consensus module terminated (Aeron: the
    service agent runners and the conductor runner closed)."""
    a.await_condition(
        lambda: not a.c.service_hosts(member_id) and a.is_terminated(member_id),
        f"member {member_id}'s services and consensus module closed",
    )


def _snapshot_then_restart_follower(a: AeronCluster) -> int:
    """The common start of both ports: 10 messages, a snapshot everywhere, a follower stopped and
    started again (it now loads the snapshot). Returns the follower."""
    a.await_leader()
    follower = a.followers()[0]
    a.connect_client()
    a.send_and_await_messages(10)
    a.take_snapshot()
    a.await_snapshot_count_everywhere(1)
    a.stop_node(follower)
    a.start_static_node(follower, False)
    return follower


def test_should_terminate_node_with_invalid_snapshot_and_recovery_after_invalidation(sim: Any) -> None:
    """ClusterTest.shouldTerminateNodeWithInvalidSnapshotAndRecoveryAfterInvalidation: a follower whose
    service cannot load its snapshot closes (service and consensus module) with the error "failed to
    start service=0"; stopped, its latest snapshot invalidated (ClusterTool invalidate-latest-snapshot)
    and started again, it rejoins: two followers."""
    a = _cluster(sim, service=EXCEPTION_ON_LOAD_SERVICE)
    follower = _snapshot_then_restart_follower(a)

    await_service_closed(a, follower)
    wait_for_error(a, follower, "failed to start", "service=0")

    a.stop_node(follower)
    assert invalidate_latest_snapshot(a, follower)

    a.start_static_node(follower, False)
    assert len(await_followers(a, 2)) == 2


def test_should_terminate_node_with_multiple_services_with_single_service_invalid_snapshot(sim: Any) -> None:
    """ClusterTest.shouldTerminateNodeWithMultipleServicesWithSingleServiceInvalidSnapshot: a follower
    runs a healthy service 0 and a service 1 that cannot load its snapshot; restarted from the
    snapshot, its failing service, its consensus module and its healthy service close, with the error
    "failed to start service=1"."""
    a = _cluster(sim, services=[SERVICE_NAME, EXCEPTION_ON_LOAD_SERVICE])
    follower = _snapshot_then_restart_follower(a)

    await_service_closed(a, follower)
    wait_for_error(a, follower, "failed to start", "service=1")


# --- regression tests of the lifecycle rules -------------------------------------------------------------


def test_a_service_that_fails_to_load_its_snapshot_closes_its_member_which_recovers_after_invalidation(
    sim: Any,
) -> None:
    """Without the rule the simulator's restart raises the service's error (or, caught, the member runs
    on without its service and counts nothing). With it: one counted error naming the service, the
    member terminated; after the invalidation it recovers from the snapshot before (none: the log
    from its start) and replays all 10 messages."""
    a = _cluster(sim, service=EXCEPTION_ON_LOAD_SERVICE)
    follower = _snapshot_then_restart_follower(a)
    await_service_closed(a, follower)
    counters = a.c.counters(follower)
    assert counters.errors == 1, member_errors(a, follower)
    assert member_errors(a, follower) == [
        "service: service closed unexpectedly: service=0 failed to start clustered service"
    ]
    a.stop_node(follower)
    assert invalidate_latest_snapshot(a, follower)
    a.start_static_node(follower, False)
    a.await_service_message_count(follower, 10)
    assert not a.service(follower).was_snapshot_loaded
    a.send_and_await_messages(5)  # and it follows the live log
    assert a.service(follower).message_count == 15


def test_a_gracefully_stopped_member_tells_its_service_on_terminate_once(sim: Any) -> None:
    """Aeron ``ClusteredServiceAgent.onClose`` (``TestCluster.stopNode`` closes the node): a graceful stop
    of a member, or of its service container, tells its active service ``on_terminate`` exactly once;
    a crash (kill) cannot; a member terminated by SHUTDOWN, then stopped, was told once."""
    a = _cluster(sim, service=TERMINATE_COUNTING_SERVICE)
    leader = a.await_leader()
    follower, other = a.followers()
    a.connect_client()
    a.send_and_await_messages(3)

    stopped = counting_service(a, follower)
    a.stop_node(follower)
    assert stopped.terminate_count == 1, "a graceful stop tells the service on_terminate"

    killed = counting_service(a, other)
    a.kill_node(other)
    assert killed.terminate_count == 0, "a crash runs no close"

    closed = counting_service(a, leader)
    a.c.stop_service(leader)  # Aeron: leader.container().close()
    a.await_condition(lambda: a.is_terminated(leader), f"member {leader} terminated")
    a.stop_node(leader)
    assert closed.terminate_count == 1, "the container's close tells it once; the member's stop not again"


def test_shutdown_then_stop_tells_on_terminate_once(sim: Any) -> None:
    """SHUTDOWN tells every service ``on_terminate`` at the termination position; stopping the
    terminated members afterwards does not tell them again (Aeron: ``terminate`` clears
    ``isServiceActive`` before ``onClose``)."""
    a = _cluster(sim, service=TERMINATE_COUNTING_SERVICE)
    a.await_leader()
    a.connect_client()
    a.send_and_await_messages(3)
    services = {m: counting_service(a, m) for m in range(3)}
    a.shutdown_cluster()
    a.await_node_terminations([0, 1, 2])
    assert [services[m].terminate_count for m in range(3)] == [1, 1, 1]
    a.stop_all_nodes()
    assert [services[m].terminate_count for m in range(3)] == [1, 1, 1]


class _RaisingOnTerminate(TerminateCountingService):
    def on_terminate(self, cluster: Cluster) -> None:
        super().on_terminate(cluster)
        raise RuntimeError("planted on_terminate failure")


def test_an_on_terminate_that_raises_does_not_stop_the_stop(sim: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Aeron ``onClose`` hands an exception of ``onTerminate`` to the counted error handler: the stop
    completes and the error is kept in the agent's ``errors``."""
    monkeypatch.setattr("tests.aeron.support.TerminateCountingService", _RaisingOnTerminate)
    a = _cluster(sim, service=TERMINATE_COUNTING_SERVICE)
    a.await_leader()
    follower = a.followers()[0]
    agent = a.c.service(follower)
    a.stop_node(follower)
    assert not a.c.is_alive(follower)
    assert isinstance(agent.service, _RaisingOnTerminate) and agent.service.terminate_count == 1
    assert [str(e) for e in agent.errors] == ["planted on_terminate failure"]


def counting_service(a: AeronCluster, member_id: int) -> TerminateCountingService:
    service = a.c.service(member_id).service
    assert isinstance(service, TerminateCountingService)
    return service
