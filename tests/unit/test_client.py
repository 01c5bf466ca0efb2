"""ClusterClient against a fake cluster: each member is a handler that turns one ingress message into
egress bytes. Egress is queued and delivered by the test (never re-entrantly from ``send``), and time
is whatever ``now_ns`` the test passes: no sleeps, no sockets."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import tenacity
from clusterlab.core.client import (
    ClientError,
    ClientState,
    ClusterClient,
    ClusterTimeoutError,
    ConnectError,
    EgressMessage,
    NotConnectedError,
    SessionClosedError,
    format_ingress_endpoints,
    parse_ingress_endpoints,
    retry_on_leader_change,
)
from clusterlab.core.codec.enums import AdminRequestType, AdminResponseCode, CloseReason, EventCode
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.session import (
    AdminRequest,
    AdminResponse,
    Challenge,
    ChallengeResponse,
    NewLeaderEvent,
    SessionCloseRequest,
    SessionConnectRequest,
    SessionEvent,
    SessionKeepAlive,
    SessionMessageHeader,
    encode_session_message,
)
from clusterlab.core.consensus.context import CLIENT_PROTOCOL_VERSION, NULL_VALUE

MS = 1_000_000
S = 1_000_000_000
ENDPOINTS = {0: "ipc://m0", 1: "ipc://m1", 2: "ipc://m2"}
TERM = 5
SESSION = 42

Handler = Callable[[Message], list[bytes]]


class FakeCluster:
    """The consensus modules as seen from a client: the leader answers connects (optionally with a
    challenge or a refusal), followers answer REDIRECT. ``handlers[m]`` may be replaced, e.g. by
    ``dead`` for a member that never answers."""

    def __init__(self, leader: int = 0, endpoints: dict[int, str] | None = None) -> None:
        self.leader = leader
        self.term = TERM
        self.next_session_id = SESSION
        self.endpoints = dict(ENDPOINTS if endpoints is None else endpoints)
        self.required_credentials: bytes | None = None  # None: accept anything
        self.challenge: bytes | None = None  # set: the leader challenges before OK
        self.connect_error: str | None = None  # set: the leader answers ERROR with this detail
        self.sent: list[tuple[int, Message]] = []
        self.egress: list[bytes] = []
        self.handlers: dict[int, Handler] = {m: self._member(m) for m in self.endpoints}

    # The client's ``send``.
    def send(self, member_id: int, data: bytes) -> None:
        msg = decode(data)
        self.sent.append((member_id, msg))
        self.egress.extend(self.handlers[member_id](msg))

    def deliver(self, client: ClusterClient, now_ns: int) -> None:
        egress, self.egress = self.egress, []
        for data in egress:
            client.on_egress(data, now_ns)

    def sent_to(self) -> list[int]:
        return [member for member, _ in self.sent]

    def last(self) -> tuple[int, Message]:
        return self.sent[-1]

    def event(self, correlation_id: int, code: EventCode, detail: str = "", session: int = SESSION) -> bytes:
        return SessionEvent(
            session, correlation_id, self.term, self.leader, code, CLIENT_PROTOCOL_VERSION, detail
        ).encode()

    def _member(self, member_id: int) -> Handler:
        def handler(msg: Message) -> list[bytes]:
            if member_id != self.leader:
                return self._follower(msg)
            return self._leader(msg)

        return handler

    def _follower(self, msg: Message) -> list[bytes]:
        if isinstance(msg, SessionConnectRequest):
            detail = format_ingress_endpoints(self.endpoints)
            return [self.event(msg.correlation_id, EventCode.REDIRECT, detail, session=NULL_VALUE)]
        return []

    def _leader(self, msg: Message) -> list[bytes]:
        if isinstance(msg, SessionConnectRequest):
            if self.connect_error is not None:
                return [self.event(msg.correlation_id, EventCode.ERROR, self.connect_error)]
            if self.challenge is not None:
                return [Challenge(msg.correlation_id, self.next_session_id, self.challenge).encode()]
            return [self._authenticate(msg.correlation_id, msg.encoded_credentials)]
        if isinstance(msg, ChallengeResponse):
            return [self._authenticate(msg.correlation_id, msg.encoded_credentials)]
        return []

    def _authenticate(self, correlation_id: int, credentials: bytes) -> bytes:
        if self.required_credentials is not None and credentials != self.required_credentials:
            return self.event(
                correlation_id, EventCode.AUTHENTICATION_REJECTED, "bad credentials", session=self.next_session_id
            )
        session = self.next_session_id
        self.next_session_id += 1
        return self.event(correlation_id, EventCode.OK, session=session)


def dead(msg: Message) -> list[bytes]:
    return []


def make_client(cluster: FakeCluster, endpoints: dict[int, str] | None = None, **kwargs: object) -> ClusterClient:
    return ClusterClient(
        7,
        "ipc://client-7",
        ENDPOINTS if endpoints is None else endpoints,
        cluster.send,
        **kwargs,  # type: ignore[arg-type]
    )


def connected(cluster: FakeCluster, **kwargs: object) -> ClusterClient:
    client = make_client(cluster, **kwargs)
    client.connect(0)
    cluster.deliver(client, 10 * MS)
    assert client.is_connected
    return client


# ---------------------------------------------------------------------- connect


def test_connect_ok_sends_request_to_first_member_and_adopts_session() -> None:
    cluster = FakeCluster(leader=0)
    client = make_client(cluster, credentials=b"creds")
    assert client.state is ClientState.INIT
    client.connect(0)
    assert client.state is ClientState.CONNECTING
    member, request = cluster.last()
    assert member == 0
    assert isinstance(request, SessionConnectRequest)
    assert request.version == CLIENT_PROTOCOL_VERSION
    assert request.response_channel == "ipc://client-7"
    assert request.encoded_credentials == b"creds"
    assert request.correlation_id >> 32 == 7  # client id in the high bits

    cluster.deliver(client, 10 * MS)
    assert client.is_connected and not client.is_closed
    assert (client.cluster_session_id, client.leadership_term_id, client.leader_member_id) == (SESSION, TERM, 0)
    assert client.cluster_protocol_version == CLIENT_PROTOCOL_VERSION
    assert client.ignored == {}


def test_connect_to_follower_is_redirected_to_leader() -> None:
    cluster = FakeCluster(leader=0, endpoints={0: "ipc://leader-new", 1: "ipc://m1", 2: "ipc://m2"})
    client = make_client(cluster, endpoints={1: "ipc://m1", 0: "ipc://m0", 2: "ipc://m2"})  # follower 1 first
    client.connect(0)
    cluster.deliver(client, 1 * MS)  # REDIRECT -> resend to the leader
    cluster.deliver(client, 2 * MS)  # OK
    assert cluster.sent_to() == [1, 0]
    first, second = (msg for _, msg in cluster.sent)
    assert isinstance(first, SessionConnectRequest) and isinstance(second, SessionConnectRequest)
    assert first.correlation_id != second.correlation_id
    assert client.is_connected and client.leader_member_id == 0
    assert client.ingress_endpoints[0] == "ipc://leader-new"  # the REDIRECT's list replaced ours


def test_redirected_leader_gets_one_retry_then_members_rotate() -> None:
    cluster = FakeCluster(leader=0)
    cluster.handlers[0] = dead
    client = make_client(cluster, endpoints={1: "ipc://m1", 0: "ipc://m0", 2: "ipc://m2"})
    client.connect(0)
    cluster.deliver(client, 1 * MS)  # REDIRECT from 1 -> 0 (which never answers)
    client.do_work(1 * MS + client.connect_retry_interval_ns)  # retry the named leader
    client.do_work(1 * MS + 2 * client.connect_retry_interval_ns)  # give up on it: next in the REDIRECT's list
    assert cluster.sent_to() == [1, 0, 0, 1]


@pytest.mark.parametrize(
    ("detail", "leader", "reason"),
    [
        ("garbage", 0, "bad member list"),
        ("0=ipc://m0,1=ipc://m1", 2, "not in its list"),
        ("0=ipc://m0,1=ipc://m1", 1, "to itself"),
    ],
)
def test_unusable_redirect_is_ignored_and_connect_goes_on(detail: str, leader: int, reason: str) -> None:
    cluster = FakeCluster(leader=1)
    cluster.handlers[1] = dead
    client = make_client(cluster, endpoints={1: "ipc://m1", 0: "ipc://m0"})
    client.connect(0)
    correlation_id = cluster.last()[1].correlation_id  # type: ignore[attr-defined]
    bad = SessionEvent(NULL_VALUE, correlation_id, TERM, leader, EventCode.REDIRECT, 0, detail).encode()
    client.on_egress(bad, 1 * MS)
    assert client.state is ClientState.CONNECTING
    assert cluster.sent_to() == [1]  # nothing resent on a bad REDIRECT
    assert any(reason in key for key in client.ignored), client.ignored


def test_challenge_is_answered_with_credentials() -> None:
    cluster = FakeCluster(leader=0)
    cluster.challenge = b"nonce"
    cluster.required_credentials = b"secret"
    client = make_client(cluster, credentials=b"secret")
    client.connect(0)
    cluster.deliver(client, 1 * MS)  # Challenge -> ChallengeResponse
    assert client.state is ClientState.CONNECTING
    member, response = cluster.last()
    assert member == 0
    assert isinstance(response, ChallengeResponse)
    assert response.cluster_session_id == SESSION
    assert response.encoded_credentials == b"secret"
    connect_request = cluster.sent[0][1]
    assert isinstance(connect_request, SessionConnectRequest)
    assert response.correlation_id != connect_request.correlation_id  # fresh id, as in Aeron
    cluster.deliver(client, 2 * MS)  # OK carries the ChallengeResponse's correlation id
    assert client.is_connected and client.cluster_session_id == SESSION


def test_challenge_uses_on_challenge_when_given() -> None:
    cluster = FakeCluster(leader=0)
    cluster.challenge = b"nonce"
    cluster.required_credentials = b"answer-to-nonce"
    seen: list[bytes] = []

    def on_challenge(challenge: bytes) -> bytes:
        seen.append(challenge)
        return b"answer-to-" + challenge

    client = make_client(cluster, on_challenge=on_challenge)
    client.connect(0)
    cluster.deliver(client, 1 * MS)
    cluster.deliver(client, 2 * MS)
    assert seen == [b"nonce"]
    assert client.is_connected


@pytest.mark.parametrize("challenged", [False, True])
def test_rejected_credentials_raise_connect_error_naming_the_reason(challenged: bool) -> None:
    cluster = FakeCluster(leader=0)
    cluster.required_credentials = b"secret"
    if challenged:
        cluster.challenge = b"nonce"
    client = make_client(cluster, credentials=b"wrong")
    client.connect(0)
    if challenged:
        cluster.deliver(client, 1 * MS)
    with pytest.raises(ConnectError, match=r"AUTHENTICATION_REJECTED.*bad credentials.*credentials") as info:
        cluster.deliver(client, 2 * MS)
    assert info.value.code is EventCode.AUTHENTICATION_REJECTED
    assert info.value.detail == "bad credentials"
    assert info.value.member_id == 0
    assert client.is_closed and not client.is_connected
    with pytest.raises(SessionClosedError, match="AUTHENTICATION_REJECTED"):
        client.offer(b"x", 3 * MS)


def test_connect_error_event_raises_with_detail() -> None:
    cluster = FakeCluster(leader=0)
    cluster.connect_error = "concurrent session limit"
    client = make_client(cluster)
    client.connect(0)
    with pytest.raises(ConnectError, match=r"ERROR.*concurrent session limit") as info:
        cluster.deliver(client, 1 * MS)
    assert info.value.code is EventCode.ERROR
    assert client.is_closed


def test_pending_session_closed_during_connect_raises() -> None:
    cluster = FakeCluster(leader=0)
    cluster.handlers[0] = dead
    client = make_client(cluster)
    client.connect(0)
    correlation_id = cluster.last()[1].correlation_id  # type: ignore[attr-defined]
    with pytest.raises(ConnectError, match=r"CLOSED.*election"):
        client.on_egress(cluster.event(correlation_id, EventCode.CLOSED, "election"), 1 * MS)
    assert client.is_closed and client.close_reason is None


def test_connect_timeout_rotates_members_then_raises() -> None:
    cluster = FakeCluster(leader=0)
    for member in cluster.handlers:
        cluster.handlers[member] = dead
    client = make_client(cluster, message_timeout_ns=5 * S, connect_retry_interval_ns=1 * S)
    client.connect(0)
    assert client.next_deadline_ns() == 1 * S
    assert client.do_work(1 * S - 1) == 0  # not yet
    assert cluster.sent_to() == [0]
    for t in range(1, 5):
        assert client.do_work(t * S) == 1  # no leader known: the next member gets the request
    assert client.do_work(5 * S - 1) == 0
    assert cluster.sent_to() == [0, 1, 2, 0, 1]
    correlation_ids = [msg.correlation_id for _, msg in cluster.sent]  # type: ignore[attr-defined]
    assert len(set(correlation_ids)) == 5
    with pytest.raises(ClusterTimeoutError, match=r"connect timeout.*members \[0, 1, 2, 0, 1\]"):
        client.do_work(5 * S)
    assert client.is_closed and client.next_deadline_ns() is None
    assert isinstance(ClusterTimeoutError("x"), TimeoutError)


def test_answer_to_an_abandoned_attempt_is_ignored() -> None:
    cluster = FakeCluster(leader=0)
    cluster.handlers[0] = dead
    cluster.handlers[1] = dead
    client = make_client(cluster)
    client.connect(0)
    first_correlation_id = cluster.last()[1].correlation_id  # type: ignore[attr-defined]
    client.do_work(client.connect_retry_interval_ns)  # gave up on member 0
    client.on_egress(cluster.event(first_correlation_id, EventCode.OK), 1 * S + 1)  # late OK from member 0
    assert client.state is ClientState.CONNECTING
    assert client.ignored_count == 1


def test_connect_twice_is_misuse() -> None:
    cluster = FakeCluster()
    client = make_client(cluster)
    client.connect(0)
    with pytest.raises(ClientError, match="close"):
        client.connect(1)


# ---------------------------------------------------------------------- open session


def test_offer_before_connect_raises_not_connected() -> None:
    cluster = FakeCluster(leader=0)
    cluster.handlers[0] = dead
    client = make_client(cluster)
    with pytest.raises(NotConnectedError, match=r"connect\(now_ns\)"):
        client.offer(b"x", 0)
    client.connect(0)
    with pytest.raises(NotConnectedError, match="CONNECTING"):
        client.offer(b"x", 1)
    with pytest.raises(NotConnectedError):
        client.send_admin_request(AdminRequestType.SNAPSHOT, 1)
    assert cluster.sent_to() == [0]  # only the connect request went out


def test_offer_stamps_term_and_session_and_goes_to_leader() -> None:
    cluster = FakeCluster(leader=2)
    client = make_client(cluster, endpoints={2: "ipc://m2", 0: "ipc://m0"})
    client.connect(0)
    cluster.deliver(client, 1 * MS)
    assert client.offer(b"hello", 2 * MS) == 1
    assert client.offer(bytearray(b"again"), 3 * MS) == 2
    (m1, first), (m2, second) = cluster.sent[-2:]
    assert (m1, m2) == (2, 2)
    assert first == SessionMessageHeader(TERM, SESSION, 0, b"hello")
    assert second == SessionMessageHeader(TERM, SESSION, 0, b"again")


def test_egress_messages_for_our_session_are_polled() -> None:
    cluster = FakeCluster()
    client = connected(cluster)
    client.on_egress(encode_session_message(TERM, SESSION, 123, b"reply"), 20 * MS)
    client.on_egress(encode_session_message(TERM, SESSION + 1, 124, b"not ours"), 20 * MS)
    assert client.poll() == [EgressMessage(SESSION, TERM, 123, b"reply")]
    assert client.poll() == []
    assert client.ignored_count == 1


def _egress_mix() -> list[bytes]:
    """Replies, a foreign session's reply, a malformed message, a NewLeaderEvent, a bytearray reply, then
    the session's CLOSED event and a reply after it: everything a batch may mix."""
    return [
        encode_session_message(TERM, SESSION, 1, b"r1"),
        encode_session_message(TERM, SESSION + 1, 2, b"not ours"),
        b"\x01\x02",
        encode_session_message(TERM, SESSION, 3, b"r2"),
        NewLeaderEvent(TERM + 1, SESSION, 1, format_ingress_endpoints(ENDPOINTS)).encode(),
        encode_session_message(TERM + 1, SESSION, 4, b""),
        bytearray(encode_session_message(TERM + 1, SESSION, 5, b"r3")),
        SessionEvent(SESSION, 0, TERM + 1, 1, EventCode.CLOSED, CLIENT_PROTOCOL_VERSION, "TIMEOUT").encode(),
        encode_session_message(TERM + 1, SESSION, 6, b"after close"),
    ]


@pytest.mark.parametrize("connect_first", [True, False])
def test_egress_batch_is_handled_exactly_as_one_message_at_a_time(connect_first: bool) -> None:
    """on_egress_batch (the runtime's per-ZeroMQ-message path) matches on_egress per message: the same
    messages polled, the same ignored reasons, the same state, also when the state changes mid-batch."""
    clients = []
    for batched in (False, True):
        cluster = FakeCluster()
        client = connected(cluster) if connect_first else make_client(cluster)
        if not connect_first:
            client.connect(0)  # CONNECTING: session messages are held until the OK
        if batched:
            client.on_egress_batch(_egress_mix(), 20 * MS)
        else:
            for data in _egress_mix():
                client.on_egress(data, 20 * MS)
        clients.append(client)
    one, batch = clients
    assert batch.poll() == one.poll()
    assert batch.ignored == one.ignored
    assert (batch.state, batch.leader_member_id, batch.leadership_term_id, batch.leader_changes) == (
        one.state,
        one.leader_member_id,
        one.leadership_term_id,
        one.leader_changes,
    )
    if connect_first:
        assert one.state is ClientState.CLOSED and one.leader_changes == 1
        assert one.ignored_count == 3  # foreign session, malformed, the reply after CLOSED


def test_egress_batch_polls_replies_of_the_open_session_in_order() -> None:
    cluster = FakeCluster()
    client = connected(cluster)
    client.on_egress_batch([encode_session_message(TERM, SESSION, i, b"r%d" % i) for i in range(5)], 20 * MS)
    assert client.poll() == [EgressMessage(SESSION, TERM, i, b"r%d" % i) for i in range(5)]
    assert client.ignored_count == 0


def test_offer_follows_the_term_of_a_new_leader_and_a_new_session() -> None:
    """The SessionMessageHeader an offer carries is encoded once per term and session: it must follow both."""
    cluster = FakeCluster(leader=0)
    client = connected(cluster)
    client.on_egress(NewLeaderEvent(TERM + 1, SESSION, 1, format_ingress_endpoints(ENDPOINTS)).encode(), 1 * S)
    client.offer(b"a", 1 * S)
    assert cluster.last() == (1, SessionMessageHeader(TERM + 1, SESSION, 0, b"a"))
    client.close(2 * S)
    cluster.leader, cluster.term, cluster.next_session_id = 2, TERM + 4, SESSION + 10
    client.connect(3 * S)
    cluster.deliver(client, 3 * S)
    cluster.deliver(client, 3 * S)  # member 1 redirected to 2
    assert client.is_connected
    client.offer(memoryview(b"b"), 4 * S)
    assert cluster.last() == (2, SessionMessageHeader(TERM + 4, SESSION + 10, 0, b"b"))


def test_egress_overtaking_the_ok_is_held_until_connected() -> None:
    cluster = FakeCluster()
    client = make_client(cluster)
    client.connect(0)
    client.on_egress(encode_session_message(TERM, SESSION, 1, b"early"), 1 * MS)
    client.on_egress(encode_session_message(TERM, 99, 1, b"someone else"), 1 * MS)
    assert client.poll() == []
    cluster.deliver(client, 2 * MS)
    assert [m.payload for m in client.poll()] == [b"early"]
    assert client.ignored_count == 1


def test_keep_alive_is_sent_on_interval_and_not_before() -> None:
    cluster = FakeCluster(leader=0)
    client = connected(cluster, keepalive_interval_ns=1 * S)  # OK handled at 10 ms
    sent_before = len(cluster.sent)
    assert client.next_deadline_ns() == 10 * MS + 1 * S
    assert client.do_work(10 * MS + 1 * S - 1) == 0
    assert len(cluster.sent) == sent_before
    assert client.do_work(10 * MS + 1 * S) == 1
    assert cluster.last() == (0, SessionKeepAlive(TERM, SESSION))
    assert client.next_deadline_ns() == 10 * MS + 2 * S
    # An offer is activity too: it pushes the next keep-alive back a whole interval.
    client.offer(b"x", 10 * MS + 1500 * MS)
    assert client.do_work(10 * MS + 2 * S) == 0
    assert client.next_deadline_ns() == 10 * MS + 2500 * MS


def test_keep_alive_off_sends_nothing() -> None:
    cluster = FakeCluster()
    client = connected(cluster, keepalive_interval_ns=None)
    sent_before = len(cluster.sent)
    assert client.next_deadline_ns() is None
    assert client.do_work(100 * S) == 0
    assert len(cluster.sent) == sent_before
    client.send_keep_alive(100 * S)
    assert cluster.last() == (0, SessionKeepAlive(TERM, SESSION))


def test_new_leader_event_moves_ingress_and_term_and_keeps_session() -> None:
    cluster = FakeCluster(leader=0)
    client = connected(cluster)
    endpoints = "0=ipc://m0,1=ipc://m1,2=ipc://m2-moved"
    client.on_egress(NewLeaderEvent(TERM + 2, SESSION, 2, endpoints).encode(), 1 * S)
    assert (client.leader_member_id, client.leadership_term_id, client.cluster_session_id) == (2, TERM + 2, SESSION)
    assert client.ingress_endpoints[2] == "ipc://m2-moved"
    assert client.leader_changes == 1
    client.offer(b"after", 2 * S)
    assert cluster.last() == (2, SessionMessageHeader(TERM + 2, SESSION, 0, b"after"))
    client.do_work(10 * S)
    assert cluster.last() == (2, SessionKeepAlive(TERM + 2, SESSION))

    # Late or foreign events do not move the session back.
    client.on_egress(NewLeaderEvent(TERM + 1, SESSION, 1, endpoints).encode(), 11 * S)
    client.on_egress(NewLeaderEvent(TERM + 3, SESSION + 1, 1, endpoints).encode(), 11 * S)
    client.on_egress(NewLeaderEvent(TERM + 3, SESSION, 9, endpoints).encode(), 11 * S)  # unknown member
    assert (client.leader_member_id, client.leadership_term_id) == (2, TERM + 2)
    assert client.leader_changes == 1
    assert client.ignored_count == 3


def test_new_leader_event_resends_outstanding_requests_to_the_new_leader_at_once() -> None:
    cluster = FakeCluster(leader=0)
    client = connected(cluster)
    client.offer(b"r1", 1 * S, request_id=1)
    client.offer(b"r2", 1 * S, request_id=2)
    client.offer(b"untracked", 1 * S)
    client.offer(b"r3", 1 * S, request_id=3)
    assert client.acknowledge(2) and not client.acknowledge(2)  # r2's reply came from the old leader
    sent_before = len(cluster.sent)

    client.on_egress(NewLeaderEvent(TERM + 1, SESSION, 1, "").encode(), 2 * S)
    resent = cluster.sent[sent_before:]
    # In offer order, to the new leader, stamped with its term: not r2 (answered) nor the untracked one.
    assert resent == [
        (1, SessionMessageHeader(TERM + 1, SESSION, 0, b"r1")),
        (1, SessionMessageHeader(TERM + 1, SESSION, 0, b"r3")),
    ]
    assert client.resent_on_new_leader == 2
    assert dict(client.outstanding) == {1: b"r1", 3: b"r3"}  # kept until acknowledged

    # The same leader and term again (a repeated event) resends nothing.
    client.on_egress(NewLeaderEvent(TERM + 1, SESSION, 1, "").encode(), 3 * S)
    assert len(cluster.sent) == sent_before + 2
    client.acknowledge(1)
    client.acknowledge(3)
    client.on_egress(NewLeaderEvent(TERM + 2, SESSION, 2, "").encode(), 4 * S)
    assert len(cluster.sent) == sent_before + 2 and client.resent_on_new_leader == 2


def test_session_closed_event_closes_client() -> None:
    cluster = FakeCluster(leader=0)
    client = connected(cluster)
    client.on_egress(cluster.event(NULL_VALUE, EventCode.CLOSED, "TIMEOUT"), 1 * S)
    assert client.is_closed and not client.is_connected
    assert client.close_reason is CloseReason.TIMEOUT
    with pytest.raises(SessionClosedError, match=r"TIMEOUT.*connect\(\)"):
        client.offer(b"x", 2 * S)
    sent_before = len(cluster.sent)
    assert client.do_work(60 * S) == 0  # no keep-alives for a closed session
    assert len(cluster.sent) == sent_before
    assert client.next_deadline_ns() is None

    client.connect(61 * S)  # e.g. after a whole-cluster restart: a new session
    cluster.deliver(client, 61 * S)
    assert client.is_connected and client.cluster_session_id == SESSION + 1


def test_closed_event_for_another_session_is_ignored() -> None:
    cluster = FakeCluster()
    client = connected(cluster)
    client.on_egress(cluster.event(NULL_VALUE, EventCode.CLOSED, "TIMEOUT", session=SESSION + 1), 1 * S)
    assert client.is_connected
    assert client.ignored_count == 1


def test_close_sends_close_request_once() -> None:
    cluster = FakeCluster(leader=0)
    client = connected(cluster)
    client.close(1 * S)
    assert cluster.last() == (0, SessionCloseRequest(TERM, SESSION))
    assert client.is_closed and client.close_reason is CloseReason.CLIENT_ACTION
    sent_before = len(cluster.sent)
    client.close(2 * S)
    assert len(cluster.sent) == sent_before
    with pytest.raises(SessionClosedError):
        client.offer(b"x", 3 * S)


def test_close_while_connecting_sends_nothing() -> None:
    cluster = FakeCluster(leader=0)
    client = make_client(cluster)
    client.connect(0)
    client.close(1)
    assert cluster.sent_to() == [0]
    assert client.is_closed
    cluster.deliver(client, 2)  # the OK arrives after all: ignored
    assert client.is_closed and client.ignored_count == 1


def _truncated_ok() -> bytes:
    return SessionEvent(SESSION, 1, TERM, 0, EventCode.OK, 0, "").encode()[:-3]


def _bad_event_code() -> bytes:
    data = bytearray(SessionEvent(SESSION, 1, TERM, 0, EventCode.CLOSED, 0, "TIMEOUT").encode())
    data[8 + 28] = 99  # code field: no such EventCode
    return bytes(data)


MALFORMED = {
    "empty": b"",
    "short header": b"\x01\x02\x03",
    "truncated SessionEvent": _truncated_ok(),
    "truncated SessionMessageHeader": encode_session_message(TERM, SESSION, 0, b"")[:20],
    "garbage": random.Random(7).randbytes(64),
    "foreign schema": bytes([24, 0, 1, 0, 99, 0, 12, 0]) + bytes(24),
    "unknown template": bytes([0, 0, 250, 0, 111, 0, 12, 0]),
    "bad enum": _bad_event_code(),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_egress_is_ignored_and_counted(name: str) -> None:
    cluster = FakeCluster()
    client = connected(cluster)
    client.on_egress(MALFORMED[name], 1 * S)
    assert client.is_connected
    assert client.poll() == []
    assert client.ignored_count == 1
    assert any("malformed" in key for key in client.ignored), client.ignored


def test_malformed_egress_while_connecting_does_not_connect() -> None:
    cluster = FakeCluster()
    cluster.handlers[0] = dead
    client = make_client(cluster)
    client.connect(0)
    for data in MALFORMED.values():
        client.on_egress(data, 1)
    assert client.state is ClientState.CONNECTING
    assert client.ignored_count == len(MALFORMED)


def test_unexpected_message_type_on_egress_is_ignored() -> None:
    cluster = FakeCluster()
    client = connected(cluster)
    client.on_egress(SessionKeepAlive(TERM, SESSION).encode(), 1 * S)
    assert client.ignored == {"egress: unexpected SessionKeepAlive": 1}


def test_admin_request_and_response_are_correlated() -> None:
    cluster = FakeCluster(leader=0)
    client = connected(cluster)
    correlation_id = client.send_admin_request(AdminRequestType.SNAPSHOT, 1 * S)
    assert cluster.last() == (0, AdminRequest(TERM, SESSION, correlation_id, AdminRequestType.SNAPSHOT, b""))

    def response(session: int, correlation: int) -> bytes:
        return AdminResponse(session, correlation, AdminRequestType.SNAPSHOT, AdminResponseCode.OK, "", b"").encode()

    client.on_egress(response(SESSION, correlation_id + 1), 2 * S)  # not a request of ours
    client.on_egress(response(SESSION + 1, correlation_id), 2 * S)  # another session's
    assert client.admin_responses == {}
    assert client.ignored_count == 2
    client.on_egress(response(SESSION, correlation_id), 2 * S)
    assert client.admin_responses[correlation_id].response_code is AdminResponseCode.OK
    taken = client.take_admin_response(correlation_id)
    assert taken is not None and taken.correlation_id == correlation_id
    assert client.take_admin_response(correlation_id) is None
    client.on_egress(response(SESSION, correlation_id), 3 * S)  # a duplicate: already answered
    assert client.ignored_count == 3


# ---------------------------------------------------------------------- helpers


def test_ingress_endpoints_round_trip_and_reject_bad_lists() -> None:
    endpoints = {0: "tcp://h:1", 2: "ipc:///tmp/m2"}
    assert parse_ingress_endpoints(format_ingress_endpoints(endpoints)) == endpoints
    for bad in ("", "0", "0=", "x=a", "0=a,0=b", "-1=a"):
        with pytest.raises(ValueError):
            parse_ingress_endpoints(bad)


def test_constructor_rejects_misuse() -> None:
    cluster = FakeCluster()
    with pytest.raises(ValueError, match="ingress_endpoints"):
        ClusterClient(1, "ipc://c", {}, cluster.send)
    with pytest.raises(ValueError, match="client_id"):
        ClusterClient(-1, "ipc://c", ENDPOINTS, cluster.send)
    with pytest.raises(ValueError, match="message_timeout_ns"):
        ClusterClient(1, "ipc://c", ENDPOINTS, cluster.send, message_timeout_ns=0)


class Flaky:
    """Fails with ``error`` the first ``failures`` calls, then returns "done"."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


def test_retry_on_leader_change_retries_timeouts_without_waiting() -> None:
    fn = Flaky(2, ClusterTimeoutError("no reply: leader changed"))
    retries: list[int] = []
    assert retry_on_leader_change(fn, 3, before_retry=lambda n, e: retries.append(n)) == "done"
    assert fn.calls == 3
    assert retries == [1, 2]


def test_retry_on_leader_change_reraises_last_error_when_attempts_run_out() -> None:
    error = ClusterTimeoutError("no reply")
    fn = Flaky(5, error)
    with pytest.raises(ClusterTimeoutError) as info:
        retry_on_leader_change(fn, 3)
    assert info.value is error
    assert fn.calls == 3


def test_retry_on_leader_change_does_not_retry_other_errors() -> None:
    fn = Flaky(1, SessionClosedError(7, "offer", "closed by the client"))
    with pytest.raises(SessionClosedError):
        retry_on_leader_change(fn, 3)
    assert fn.calls == 1


def test_retry_on_leader_change_waits_only_through_the_given_sleep() -> None:
    with pytest.raises(ValueError, match="never sleeps"):
        retry_on_leader_change(Flaky(1, ClusterTimeoutError("x")), 3, wait=tenacity.wait_fixed(0.5))
    slept: list[float] = []
    fn = Flaky(2, ClusterTimeoutError("x"))
    assert retry_on_leader_change(fn, 3, wait=tenacity.wait_fixed(0.5), sleep=slept.append) == "done"
    assert slept == [0.5, 0.5]
    with pytest.raises(ValueError, match="attempts"):
        retry_on_leader_change(fn, 0)
