"""Ports of Aeron's ``AeronClusterTest`` (aeron-cluster client): how an open session follows its
leader and when the client gives up on the cluster. Aeron mocks the ingress publication's result
(``NOT_CONNECTED`` or a position), the egress image's ``isClosed()`` and the nano clock; here the
sans-IO ClusterClient gets a ``send`` whose result the test sets (False = not connected),
``on_leader_disconnected`` for the closed egress image, and ``now_ns`` from the test. Aeron's
``pollEgress()`` (which polls state changes) is ``do_work(now_ns)``; its context sets
``newLeaderTimeoutNs`` to 1 s, as :data:`NEW_LEADER_TIMEOUT` here."""

from __future__ import annotations

import pytest
from clusterlab.core.client import ClusterClient, LeaderLink
from clusterlab.core.codec.enums import EventCode
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.session import NewLeaderEvent, SessionConnectRequest, SessionEvent
from clusterlab.core.consensus.context import CLIENT_PROTOCOL_VERSION, SECOND

CLUSTER_SESSION_ID = 123
ENDPOINTS = {0: "ipc://foo", 1: "ipc://bar", 2: "ipc://baz"}
INGRESS_ENDPOINTS = "0=ipc://foo,1=ipc://bar,2=ipc://baz"
NEW_LEADER_TIMEOUT = 1 * SECOND
MESSAGE_TIMEOUT = 5 * SECOND
APP_MESSAGE = bytes(8)


class Ingress:
    """The ingress publication: records what was sent; ``connected`` is what the next send reports."""

    def __init__(self) -> None:
        self.connected = True
        self.sent: list[tuple[int, bytes]] = []

    def __call__(self, member_id: int, payload: bytes) -> bool:
        self.sent.append((member_id, payload))
        return self.connected


class Fixture:
    """AeronClusterTest's setUp: a client connected to leader 1 in term 2, and its nano clock."""

    def __init__(self) -> None:
        self.ingress = Ingress()
        self.now_ns = 0
        self.leadership_term_id = 2
        self.leader_member_id = 1
        self.client = ClusterClient(
            1,
            "ipc://client-1",
            ENDPOINTS,
            self.ingress,
            message_timeout_ns=MESSAGE_TIMEOUT,
            keepalive_interval_ns=None,  # Aeron's client sends keep-alives only when asked
            new_leader_timeout_ns=NEW_LEADER_TIMEOUT,
        )
        self.client.connect(self.now_ns)
        _member_id, payload = self.ingress.sent[-1]
        request = decode(payload)
        assert isinstance(request, SessionConnectRequest)
        ok = SessionEvent(
            CLUSTER_SESSION_ID,
            request.correlation_id,
            self.leadership_term_id,
            self.leader_member_id,
            EventCode.OK,
            CLIENT_PROTOCOL_VERSION,
            "",
        )
        self.client.on_egress(ok.encode(), self.now_ns)
        assert self.client.is_connected and self.client.leader_member_id == self.leader_member_id

    def make_ingress_publication_return(self, connected: bool) -> None:
        self.ingress.connected = connected

    def send(self, with_app_messages: bool) -> bool:
        """``offer(appMessage)`` or ``sendKeepAlive()``: whether the publication took it."""
        before = len(self.ingress.sent)
        if with_app_messages:
            self.client.offer(APP_MESSAGE, self.now_ns)
        else:
            self.client.send_keep_alive(self.now_ns)
        assert len(self.ingress.sent) == before + 1
        return self.ingress.connected

    def deliver_new_leader_event(self) -> None:
        self.leadership_term_id += 1
        self.leader_member_id = (self.leader_member_id + 1) % len(ENDPOINTS)
        event = NewLeaderEvent(self.leadership_term_id, CLUSTER_SESSION_ID, self.leader_member_id, INGRESS_ENDPOINTS)
        self.client.on_egress(event.encode(), self.now_ns)

    def link(self) -> LeaderLink:
        return self.client.leader_link

    def poll_egress(self) -> int:
        return self.client.do_work(self.now_ns)


@pytest.mark.parametrize(
    ("with_ingress_disconnect", "with_app_messages"), [(False, False), (False, True), (True, False), (True, True)]
)
def test_should_stay_connected_after_successful_failover(
    with_ingress_disconnect: bool, with_app_messages: bool
) -> None:
    """AeronClusterTest.shouldStayConnectedAfterSuccessfulFailover"""
    f = Fixture()
    f.make_ingress_publication_return(not with_ingress_disconnect)
    assert f.send(with_app_messages) is not with_ingress_disconnect
    expected = LeaderLink.AWAIT_NEW_LEADER if with_ingress_disconnect else LeaderLink.CONNECTED
    assert f.link() is expected

    f.now_ns += NEW_LEADER_TIMEOUT - 1
    f.deliver_new_leader_event()
    assert f.client.leader_member_id == f.leader_member_id
    assert f.client.leadership_term_id == f.leadership_term_id
    assert f.link() is LeaderLink.AWAIT_NEW_LEADER_CONNECTION
    assert f.poll_egress() == 0

    f.now_ns += MESSAGE_TIMEOUT - 1
    f.make_ingress_publication_return(True)
    assert f.send(with_app_messages)
    assert f.ingress.sent[-1][0] == f.leader_member_id
    f.now_ns += 1
    assert f.poll_egress() == 0
    assert not f.client.is_closed
    assert f.link() is LeaderLink.CONNECTED


@pytest.mark.parametrize("with_app_messages", [False, True])
def test_should_close_itself_when_disconnected_for_longer_than_new_leader_timeout(with_app_messages: bool) -> None:
    """AeronClusterTest.shouldCloseItselfWhenDisconnectedForLongerThanNewLeaderTimeout"""
    f = Fixture()
    f.make_ingress_publication_return(False)
    assert not f.send(with_app_messages)

    f.now_ns += NEW_LEADER_TIMEOUT - 1
    assert f.poll_egress() == 0
    assert not f.client.is_closed

    f.now_ns += 1
    assert f.client.next_deadline_ns() == f.now_ns
    assert f.poll_egress() == 1
    assert f.client.is_closed
    assert "new_leader_timeout_ns" in f.client.close_detail


@pytest.mark.parametrize("with_app_messages", [False, True])
def test_should_close_itself_when_unable_to_send_message_for_longer_than_new_leader_connection_timeout(
    with_app_messages: bool,
) -> None:
    """AeronClusterTest.shouldCloseItselfWhenUnableToSendMessageForLongerThanNewLeaderConnectionTimeout"""
    f = Fixture()
    f.make_ingress_publication_return(False)
    assert not f.send(with_app_messages)

    f.now_ns += NEW_LEADER_TIMEOUT // 2
    f.deliver_new_leader_event()
    assert f.link() is LeaderLink.AWAIT_NEW_LEADER_CONNECTION
    assert f.poll_egress() == 0
    assert not f.client.is_closed

    f.now_ns += MESSAGE_TIMEOUT - 1
    assert not f.send(with_app_messages)
    assert f.link() is LeaderLink.AWAIT_NEW_LEADER_CONNECTION

    f.now_ns += 1
    assert f.poll_egress() == 1
    assert f.client.is_closed
    assert "message_timeout_ns" in f.client.close_detail


def test_should_close_ingress_publication_when_egress_image_closes() -> None:
    """AeronClusterTest.shouldCloseIngressPublicationWhenEgressImageCloses: a closed egress image
    (``on_leader_disconnected``) loses the leader while CONNECTED and while AWAIT_NEW_LEADER_CONNECTION."""
    f = Fixture()
    f.client.on_leader_disconnected(f.now_ns)
    assert f.link() is LeaderLink.AWAIT_NEW_LEADER

    f.deliver_new_leader_event()
    assert f.link() is LeaderLink.AWAIT_NEW_LEADER_CONNECTION

    f.now_ns += 10
    f.client.on_leader_disconnected(f.now_ns)
    assert f.link() is LeaderLink.AWAIT_NEW_LEADER
    assert f.client.state_deadline_ns == f.now_ns + NEW_LEADER_TIMEOUT
    assert not f.client.is_closed
