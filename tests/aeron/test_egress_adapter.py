"""Ports of Aeron's ``EgressAdapterTest`` (aeron-cluster client): egress is dispatched only when its
cluster session id is the client's; anything else is a no-op. Our ClusterClient plays both the
EgressAdapter and the listener: a dispatched message shows up in ``poll()``, a session event closes
the session, a NewLeaderEvent moves the leader, an AdminResponse lands in ``admin_responses``; a no-op
leaves all of that alone and is counted in ``ignored_count``."""

from __future__ import annotations

from clusterlab.core.client import ClientState, ClusterClient
from clusterlab.core.codec.enums import AdminRequestType, AdminResponseCode, EventCode
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.session import (
    AdminRequest,
    AdminResponse,
    NewLeaderEvent,
    SessionConnectRequest,
    SessionEvent,
    encode_session_message,
)
from clusterlab.core.consensus.context import CLIENT_PROTOCOL_VERSION

TERM, SESSION, OTHER = 3, 42, 43
ENDPOINTS = {0: "ipc://m0", 1: "ipc://m1", 2: "ipc://m2"}


def connected_client() -> tuple[ClusterClient, list[tuple[int, bytes]]]:
    sent: list[tuple[int, bytes]] = []
    client = ClusterClient(1, "ipc://client-1", ENDPOINTS, lambda m, p: sent.append((m, p)))
    client.connect(0)
    request = decode(sent[-1][1])
    assert isinstance(request, SessionConnectRequest)
    ok = SessionEvent(
        cluster_session_id=SESSION,
        correlation_id=request.correlation_id,
        leadership_term_id=TERM,
        leader_member_id=sent[-1][0],
        code=EventCode.OK,
        version=CLIENT_PROTOCOL_VERSION,
        detail="",
    )
    client.on_egress(ok.encode(), 1)
    assert client.is_connected
    return client, sent


def closed_event(session_id: int) -> bytes:
    return SessionEvent(
        cluster_session_id=session_id,
        correlation_id=0,
        leadership_term_id=TERM,
        leader_member_id=0,
        code=EventCode.CLOSED,
        version=CLIENT_PROTOCOL_VERSION,
        detail="TIMEOUT",
    ).encode()


def test_on_fragment_should_invoke_on_message_callback_if_session_id_matches() -> None:
    """EgressAdapterTest.onFragmentShouldInvokeOnMessageCallbackIfSessionIdMatches"""
    client, _ = connected_client()
    client.on_egress(encode_session_message(TERM, SESSION, 1234, b"payload"), 2)
    (msg,) = client.poll()
    assert (msg.cluster_session_id, msg.timestamp, msg.payload) == (SESSION, 1234, b"payload")


def test_on_fragment_is_a_no_op_if_session_id_does_not_match_on_session_message() -> None:
    """EgressAdapterTest.onFragmentIsANoOpIfSessionIdDoesNotMatchOnSessionMessage"""
    client, _ = connected_client()
    ignored = client.ignored_count
    client.on_egress(encode_session_message(TERM, OTHER, 1234, b"payload"), 2)
    assert client.poll() == []
    assert client.ignored_count == ignored + 1


def test_on_fragment_should_invoke_on_session_event_callback_if_session_id_matches() -> None:
    """EgressAdapterTest.onFragmentShouldInvokeOnSessionEventCallbackIfSessionIdMatches"""
    client, _ = connected_client()
    client.on_egress(closed_event(SESSION), 2)
    assert client.state is ClientState.CLOSED


def test_on_fragment_is_a_no_op_if_session_id_does_not_match_on_session_event() -> None:
    """EgressAdapterTest.onFragmentIsANoOpIfSessionIdDoesNotMatchOnSessionEvent"""
    client, _ = connected_client()
    ignored = client.ignored_count
    client.on_egress(closed_event(OTHER), 2)
    assert client.is_connected
    assert client.ignored_count == ignored + 1


def new_leader(session_id: int) -> bytes:
    return NewLeaderEvent(
        leadership_term_id=TERM + 1, cluster_session_id=session_id, leader_member_id=2, ingress_endpoints=""
    ).encode()


def test_on_fragment_should_invoke_on_new_leader_callback_if_session_id_matches() -> None:
    """EgressAdapterTest.onFragmentShouldInvokeOnNewLeaderCallbackIfSessionIdMatches"""
    client, _ = connected_client()
    client.on_egress(new_leader(SESSION), 2)
    assert (client.leader_member_id, client.leadership_term_id, client.leader_changes) == (2, TERM + 1, 1)


def test_on_fragment_is_a_no_op_if_session_id_does_not_match_on_new_leader() -> None:
    """EgressAdapterTest.onFragmentIsANoOpIfSessionIdDoesNotMatchOnNewLeader"""
    client, _ = connected_client()
    leader = client.leader_member_id
    client.on_egress(new_leader(OTHER), 2)
    assert (client.leader_member_id, client.leadership_term_id, client.leader_changes) == (leader, TERM, 0)


def admin_exchange(session_id: int) -> tuple[ClusterClient, int]:
    client, sent = connected_client()
    correlation_id = client.send_admin_request(AdminRequestType.SNAPSHOT, 2)
    assert isinstance(decode(sent[-1][1]), AdminRequest)
    response = AdminResponse(
        cluster_session_id=session_id,
        correlation_id=correlation_id,
        request_type=AdminRequestType.SNAPSHOT,
        response_code=AdminResponseCode.OK,
        message="",
        payload=b"",
    )
    client.on_egress(response.encode(), 3)
    return client, correlation_id


def test_on_fragment_should_invoke_on_admin_response_callback_if_session_id_matches() -> None:
    """EgressAdapterTest.onFragmentShouldInvokeOnAdminResponseCallbackIfSessionIdMatches"""
    client, correlation_id = admin_exchange(SESSION)
    assert client.admin_responses[correlation_id].response_code == AdminResponseCode.OK


def test_on_fragment_is_a_no_op_if_session_id_does_not_match_on_admin_response() -> None:
    """EgressAdapterTest.onFragmentIsANoOpIfSessionIdDoesNotMatchOnAdminResponse"""
    client, correlation_id = admin_exchange(OTHER)
    assert correlation_id not in client.admin_responses
