"""Regression tests of the seven defects the Aeron ports found (docs/aeron-parity.md).

Each test is the smallest form of the Aeron test that found the defect (named in its docstring) and
fails on code that has the defect."""

from __future__ import annotations

from collections import Counter

import pytest
from clusterlab.core.codec.enums import AdminRequestType, AdminResponseCode
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.session import AdminRequest, AdminResponse
from clusterlab.core.codec.snapshot import ConsensusModuleSnapshot
from clusterlab.core.consensus.authenticator import DefaultAuthenticator, SessionProxy
from clusterlab.core.consensus.context import SECOND, Channel, ConsensusModuleContext, ElectionState, Role
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.recording_log import RecordingLog

from tests.aeron.support import (
    SERVICE_NAME,
    AeronCluster,
    AeronTestService,
    aeron_cluster,
    consensus_module_snapshots,
    service_snapshots,
)
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim


def test_single_member_restarted_with_a_log_becomes_leader_again(sim: SimKit) -> None:
    """Defect 1. Ports ClusterTest.shouldAcceptMessagesAfterSingleNodeCleanRestart (restart keeping the
    log): a single member restarted with a non-empty log is leader again, its log committed."""
    a = aeron_cluster(sim, members=1, seed=1)
    a.await_leader()
    a.connect_client()
    a.send_and_await_messages(3)
    append = a.c.member(0).append_position

    a.stop_node(0)
    a.start_static_node(0)
    leader = a.await_leader(5 * SECOND)

    m = a.c.member(0)
    assert leader == 0 and m.role == Role.LEADER and m.election_state is None
    assert m.leadership_term_id == 1
    a.await_condition(lambda: m.commit_position > append, "the new term's NewLeadershipTermEvent committed")
    a.reconnect_client()
    a.send_messages(2)
    a.await_services_message_count(5)


def test_leader_that_loses_its_quorum_tells_its_service(sim: SimKit) -> None:
    """Defect 2. Ports ClusterTest.shouldLoseLeadershipWhenNoActiveQuorumOfFollowers: the leader
    whose followers are gone steps down, and its service is told it is no longer LEADER."""
    a = aeron_cluster(sim, members=3, seed=2)
    leader = a.await_leader()
    assert a.service(leader).role_changes[-1] == Role.LEADER
    for f in a.followers():
        a.stop_node(f)

    a.await_condition(lambda: a.c.member(leader).role != Role.LEADER, "the leader stepped down")
    a.await_condition(lambda: a.c.member(leader).election_state is not None, "an election runs")
    assert a.c.member(leader).election_state == ElectionState.CANVASS
    assert a.service(leader).role_changes[-1] == Role.FOLLOWER
    assert a.c.service(leader).role == Role.FOLLOWER


def test_followers_take_the_replayed_snapshots_of_an_earlier_term(sim: SimKit) -> None:
    """Defect 3. Ports ClusterTest.shouldRecoverWhenLastTwosSnapshotsAreInvalidAfterElection (the
    replay part): with both snapshots invalidated, every member replays the whole log after the
    restart and takes both snapshots again, followers included."""
    a = aeron_cluster(sim, members=3, seed=1)
    a.await_leader()
    a.connect_client()
    for i in range(2):
        a.send_and_await_messages(3)
        a.take_snapshot()
        for m in range(3):
            a.await_snapshot_count(m, i + 1)
    a.stop_all_nodes()
    for m in range(3):
        with RecordingLog.open(a.c.storage(m)) as recording_log:
            assert recording_log.invalidate_latest_snapshot()
            assert recording_log.invalidate_latest_snapshot()
    for m in range(3):
        a.start_static_node(m)
    a.await_leader()
    for m in range(3):
        a.await_snapshot_count(m, 2)
    a.c.run_for(SECOND)
    for m in range(3):
        assert a.snapshot_count(m) == 2
        assert len(consensus_module_snapshots(a.c, m)) == 2, f"member {m}"
        assert len(service_snapshots(a.c, m)) == 2, f"member {m}"


def test_a_failed_service_snapshot_does_not_crash_the_simulator(sim: SimKit) -> None:
    """Defect 4. Ports ClusterTest.shouldTakeASnapshotAfterReceivingAdminRequestOfTypeSnapshot with a
    service whose snapshot fails: the failure is counted, no snapshot is recorded, the cluster keeps
    serving."""
    a = aeron_cluster(sim, members=3, seed=4)
    a.await_leader()
    a.connect_client()
    a.send_and_await_messages(2)
    AeronTestService.fail_snapshots = True
    try:
        a.take_snapshot()
        a.c.run_for(2 * SECOND)  # without the rule, SnapshotError escapes run_for
    finally:
        AeronTestService.fail_snapshots = False
    for m in range(3):
        assert a.snapshot_count(m) == 0
        assert consensus_module_snapshots(a.c, m) == []
    a.send_and_await_messages(2)
    a.take_snapshot()
    for m in range(3):
        a.await_snapshot_count(m, 1)


def test_an_admin_request_of_unknown_type_gets_an_error_response(sim: SimKit) -> None:
    """Defect 5. Ports ClusterTest.shouldRejectAnInvalidAdminRequest: AdminRequest with request type
    NULL_VAL is authorised first, then answered ERROR "Unknown request type: NULL_VAL"."""
    seen: list[tuple[bytes, int]] = []

    def authorise(principal: bytes, request_type: int) -> bool:
        seen.append((principal, request_type))
        return True

    def recording(ctx: ConsensusModuleContext) -> ConsensusModule:
        ctx.authorise_admin = authorise  # the policy is the context's, read when the module is built
        return ConsensusModule(ctx)

    a = aeron_cluster(sim, members=3, seed=5, member_factory=recording)
    leader = a.await_leader()
    client = a.connect_client()
    responses: list[AdminResponse] = []
    a.c.network.on_deliver.append(
        lambda d: (
            responses.append(AdminResponse.decode(d.payload))
            if d.channel == Channel.EGRESS and d.payload[2:4] == AdminResponse.TEMPLATE_ID.to_bytes(2, "little")
            else None
        )
    )
    request = AdminRequest(
        leadership_term_id=a.c.member(leader).leadership_term_id,
        cluster_session_id=client.client.cluster_session_id,
        correlation_id=4242,
        request_type=AdminRequestType.NULL_VAL,
        payload=b"",
    )
    a.c.network.send(a.c.now_ns, client.network_id, leader, Channel.INGRESS, request.encode())
    a.await_condition(lambda: bool(responses), "an AdminResponse")
    assert [r for _p, r in seen] == [AdminRequestType.NULL_VAL]
    (response,) = responses
    assert response.correlation_id == 4242
    assert response.request_type == AdminRequestType.NULL_VAL
    assert response.response_code == AdminResponseCode.ERROR
    assert response.message == "Unknown request type: NULL_VAL"


class RejectNamedAuthenticator(DefaultAuthenticator):
    """Accepts every session but those whose credentials are ``reject``."""

    def __init__(self) -> None:
        self._rejected: set[int] = set()

    def on_connect_request(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None:
        if encoded_credentials == b"reject":
            self._rejected.add(cluster_session_id)

    def on_connected_session(self, session: SessionProxy, now_ms: int) -> None:
        if session.cluster_session_id in self._rejected:
            session.reject()
        else:
            session.authenticate(b"")


def snapshot_next_session_id(a: AeronCluster, member_id: int) -> int:
    """next_session_id in the member's latest consensus-module snapshot."""
    entry = consensus_module_snapshots(a.c, member_id)[-1]
    for raw in a.c.member(member_id).archive_store.snapshots.read_snapshot(entry.recording_id):  # type: ignore[attr-defined]
        msg = decode(raw)
        if isinstance(msg, ConsensusModuleSnapshot):
            return msg.next_session_id
    raise AssertionError(f"no ConsensusModuleSnapshot in member {member_id}'s snapshot")


def test_next_session_id_in_the_snapshot_is_the_same_on_every_member(sim: SimKit) -> None:
    """Defect 6. Ports the ConsensusModuleSnapshot (ConsensusModuleSnapshotTaker)'s value as
    ClusterTest.shouldStopLeaderAndFollowersThenRestartAllWithSnapshot restores it on every member:
    rejected connects take a session id on the leader only, yet the snapshot holds the committed
    next session id, the same on every member."""
    a = AeronCluster(
        sim.cluster(members=3, seed=6, service=SERVICE_NAME, authenticator_factory=RejectNamedAuthenticator)
    )
    a.await_leader()
    a.connect_client()
    for _ in range(2):
        rejected = a.c.add_client(credentials=b"reject")
        rejected.client.connect(a.c.now_ns)
        a.await_condition(lambda r=rejected: bool(r.errors), "connect rejected")
    a.send_and_await_messages(1)
    a.take_snapshot()
    for m in range(3):
        a.await_snapshot_count(m, 1)
    opened = a.client.client.cluster_session_id  # type: ignore[union-attr]
    values = {m: snapshot_next_session_id(a, m) for m in range(3)}
    assert values == {m: opened + 1 for m in range(3)}


def test_new_leader_does_not_resend_responses_for_entries_it_replays(sim: SimKit) -> None:
    """Defect 7. Ports ClusterTest.shouldEchoMessagesThenContinueOnNewLeader: a new leader replays
    the entries of the old term as a FOLLOWER, so the client gets each echo at most once."""
    a = aeron_cluster(sim, members=3, seed=1)
    leader = a.await_leader()
    client = a.connect_client()
    a.c.run_for(SECOND)
    for i in range(5):
        assert client.client.offer(f"msg-{i}".encode(), a.c.now_ns) > 0
    # Kill the leader once it answered and before its commit position reached the followers.
    a.await_condition(lambda: a.response_count() >= 1, "the first echo")
    a.c.isolate(leader)
    a.kill_node(leader)
    a.await_leader()
    a.c.heal()
    a.c.run_for(3 * SECOND)
    counts = Counter(m.payload for m in client.received if m.payload.startswith(b"msg-"))
    assert counts and max(counts.values()) == 1, counts
