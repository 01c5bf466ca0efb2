"""The cluster client, sans-IO: Aeron's ``AeronCluster`` and its ``AsyncConnect`` in one object.

The caller (the ZeroMQ runtime, the simulator, a test) owns the sockets and the clock:

* ``send(member_id, bytes)`` is handed in and carries ingress to one member (Aeron: the ingress
  publication to that member's endpoint; :attr:`ClusterClient.ingress_endpoints` says where a
  member id lives, and it changes on REDIRECT and NewLeaderEvent); it returns False when the
  transport has no connection to that member (Aeron: ``Publication.NOT_CONNECTED``);
* every egress message received on ``response_channel`` is passed to :meth:`ClusterClient.on_egress`;
* :meth:`ClusterClient.do_work` is called at :meth:`ClusterClient.next_deadline_ns` (or more often)
  for connect resends, the connect timeout, keep-alives and giving up on a lost cluster.

Session lifecycle (docs/protocol.md b.12, c.2, e.9)::

    INIT --connect()--> CONNECTING --SessionEvent OK--> CONNECTED --close() / SessionEvent CLOSED--> CLOSED
                          |  REDIRECT: resend the connect to the named leader
                          |  Challenge: answer with a ChallengeResponse, stay CONNECTING
                          |  ERROR / AUTHENTICATION_REJECTED / CLOSED: CLOSED, raise ConnectError
                          '  message timeout: CLOSED, raise ClusterTimeoutError
    CONNECTED --no NewLeaderEvent within new_leader_timeout_ns of losing the leader--> CLOSED (no error)

While CONNECTED, NewLeaderEvent moves ingress to the new leader and adopts its term; the session id
stays the same (no re-authentication). A CLOSED client may ``connect()`` again for a new session.

Losing the cluster (Aeron's ``AeronCluster.State`` of an open session, :class:`LeaderLink`): when the
transport says ingress to the leader is not connected (``send`` returns False, or the caller calls
:meth:`ClusterClient.on_leader_disconnected`), the session waits AWAIT_NEW_LEADER for a NewLeaderEvent
at most ``new_leader_timeout_ns``; a NewLeaderEvent moves it to AWAIT_NEW_LEADER_CONNECTION until
ingress to the new leader goes through, at most ``message_timeout_ns``. Past either deadline
:meth:`ClusterClient.do_work` closes the client (``is_closed``), as Aeron's ``pollStateChanges`` does.
The cluster sends no egress heartbeat, so loss is learned from the transport (the runtime's socket
to the leader, the simulator's network), as Aeron learns it from its media driver.

Zero-copy style sending and flow-controlled receiving: :meth:`ClusterClient.try_claim` reserves an
ingress message for the caller to fill, then commit or abort (Aeron's ``tryClaim`` + ``BufferClaim``);
:meth:`ClusterClient.controlled_poll` hands received messages to a handler whose
:class:`ControlledPollAction` decides whether each is consumed (Aeron's ``controlledPollEgress``).

Outstanding requests: ``offer(payload, now_ns, request_id=...)`` keeps the payload until the caller
``acknowledge``s that id (it saw the reply). A NewLeaderEvent that moves the session resends every
kept payload to the new leader at once, so a request the old leader never committed does not wait
for the caller's own resend timer: failover as the client sees it is the election plus one round
trip. Exactly once still holds only if the service drops a repeated request: track only requests
that carry the caller's dedupe identity (the kv service's ``client`` tag and request id).

Errors: the cluster's refusals and timeouts raise (``clusterlab.core.client.errors``); malformed or stale egress
is never raised, it is dropped and counted in :attr:`ClusterClient.ignored` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from types import MappingProxyType, TracebackType
from typing import NamedTuple, TypeVar

import tenacity
from clusterlab.core.client.errors import (
    ClientError,
    ClusterTimeoutError,
    ConnectError,
    NotConnectedError,
    SessionClosedError,
)
from clusterlab.core.codec.enums import AdminRequestType, CloseReason, EventCode
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.header import peek_template_id
from clusterlab.core.codec.message import describe_bytes
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.session import (
    SESSION_HEADER_LENGTH,
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
    session_message_fields,
    unpack_session_message,
)
from clusterlab.core.consensus.context import CLIENT_PROTOCOL_VERSION, NULL_VALUE, SECOND

__all__ = [
    "CONNECT_RETRY_INTERVAL_DEFAULT_NS",
    "EGRESS_STREAM_ID_DEFAULT",
    "FRAGMENT_LIMIT",
    "KEEPALIVE_INTERVAL_DEFAULT_NS",
    "LEADER_HEARTBEAT_TIMEOUT_DEFAULT_NS",
    "MESSAGE_TIMEOUT_DEFAULT_NS",
    "NEW_LEADER_TIMEOUT_DEFAULT_NS",
    "BufferClaim",
    "ClientState",
    "ClusterClient",
    "ControlledPollAction",
    "EgressMessage",
    "LeaderLink",
    "controlled_poll",
    "format_ingress_endpoints",
    "parse_ingress_endpoints",
    "retry_on_leader_change",
]

MESSAGE_TIMEOUT_DEFAULT_NS = 5 * SECOND  # aeron.cluster.message.timeout
KEEPALIVE_INTERVAL_DEFAULT_NS = 1 * SECOND  # what Aeron's test harness uses while it awaits
CONNECT_RETRY_INTERVAL_DEFAULT_NS = 1 * SECOND
EGRESS_STREAM_ID_DEFAULT = 102  # aeron.cluster.egress.stream.id; only carried for the SessionOpenEvent
MAX_EARLY_EGRESS = 256  # session messages buffered while CONNECTING (see _on_session_message)
LEADER_HEARTBEAT_TIMEOUT_DEFAULT_NS = 10 * SECOND  # ConsensusModule.Configuration.LEADER_HEARTBEAT_TIMEOUT_DEFAULT_NS
# aeron.cluster.new.leader.timeout: Aeron's default is 2 x the leader heartbeat timeout (taken from the
# SessionEvent OK when the cluster sends it, which ours does not: give the cluster's own value as
# new_leader_timeout_ns=2 * leader_heartbeat_timeout_ns when it is not the default).
NEW_LEADER_TIMEOUT_DEFAULT_NS = 2 * LEADER_HEARTBEAT_TIMEOUT_DEFAULT_NS
# How ``close_detail`` begins when a client closed by itself because the cluster went away.
CLUSTER_UNAVAILABLE = "cluster unavailable"
FRAGMENT_LIMIT = 10  # AeronCluster.FRAGMENT_LIMIT: messages one controlled_poll hands out at most

_CORRELATION_SEQ_LIMIT = 1 << 32


class ClientState(Enum):
    """Where the client session is (Aeron: ``AsyncConnect`` steps + ``AeronCluster.State``, folded)."""

    INIT = "INIT"
    CONNECTING = "CONNECTING"
    CONNECTED = "CONNECTED"
    CLOSED = "CLOSED"


class LeaderLink(Enum):
    """How an open session (CONNECTED) reaches its leader: Aeron's ``AeronCluster.State`` CONNECTED,
    AWAIT_NEW_LEADER and AWAIT_NEW_LEADER_CONNECTION. Aeron's PENDING_CLOSE (a SessionEvent CLOSED or a
    timeout noticed, the close done on the next poll) is not a state here: the client closes at once."""

    CONNECTED = "CONNECTED"
    AWAIT_NEW_LEADER = "AWAIT_NEW_LEADER"  # ingress to the leader not connected; waiting for NewLeaderEvent
    AWAIT_NEW_LEADER_CONNECTION = "AWAIT_NEW_LEADER_CONNECTION"  # NewLeaderEvent seen; ingress not yet through


class ControlledPollAction(Enum):
    """What a :meth:`ClusterClient.controlled_poll` handler returns for each message (Aeron's
    ``ControlledFragmentHandler.Action``)."""

    ABORT = "ABORT"  # not consumed: stop polling; the message is handed out again by the next poll
    BREAK = "BREAK"  # consumed: stop polling after this message
    COMMIT = "COMMIT"  # consumed: continue (Aeron also commits the position; ours has none to commit)
    CONTINUE = "CONTINUE"  # consumed: continue


class EgressMessage(NamedTuple):
    """An application message from the cluster to this session (Aeron: ``EgressListener.onMessage``).
    A NamedTuple (immutable, compared by value) rather than a frozen dataclass: one is made per reply,
    and a frozen dataclass's ``__init__`` costs several times more."""

    cluster_session_id: int
    leadership_term_id: int
    timestamp: int  # cluster time when the leader's service sent it
    payload: bytes

    def describe(self) -> str:
        """One canonical line."""
        return (
            f"EgressMessage(cluster_session_id={self.cluster_session_id} "
            f"leadership_term_id={self.leadership_term_id} timestamp={self.timestamp} "
            f"payload={describe_bytes(self.payload)})"
        )


def parse_ingress_endpoints(text: str) -> dict[int, str]:
    """``"0=endpoint,1=endpoint"`` (REDIRECT detail, NewLeaderEvent.ingressEndpoints) as a dict.

    Raises ValueError naming the bad entry; callers holding peer data catch it and ignore the message."""
    endpoints: dict[int, str] = {}
    for entry in text.split(","):
        member, sep, endpoint = entry.partition("=")
        if not sep or not endpoint:
            raise ValueError(f"ingress endpoint {entry!r} is not 'id=endpoint' in {text!r}")
        try:
            member_id = int(member)
        except ValueError:
            raise ValueError(f"ingress endpoint {entry!r} has a non-integer member id in {text!r}") from None
        if member_id < 0 or member_id in endpoints:
            raise ValueError(f"ingress endpoint {entry!r}: negative or repeated member id in {text!r}")
        endpoints[member_id] = endpoint
    return endpoints


def format_ingress_endpoints(endpoints: Mapping[int, str]) -> str:
    """The inverse of :func:`parse_ingress_endpoints` (what the cluster puts in REDIRECT / NewLeaderEvent)."""
    return ",".join(f"{member_id}={endpoint}" for member_id, endpoint in endpoints.items())


def controlled_poll(
    messages: list[EgressMessage],
    handler: Callable[[EgressMessage], ControlledPollAction],
    fragment_limit: int = FRAGMENT_LIMIT,
) -> int:
    """Hand the oldest of ``messages`` (at most ``fragment_limit``) to ``handler`` in order and remove
    those it consumed; returns how many it consumed (Aeron's ``Subscription.controlledPoll`` over a
    ``ControlledEgressListener``).

    CONTINUE and COMMIT consume the message and go on; BREAK consumes it and stops; ABORT stops without
    consuming it, so the next poll hands it out again, first. A handler that raises leaves its message
    (and the rest) in ``messages``; those before it are consumed. The list is changed in place: the
    client's own queue (:meth:`ClusterClient.controlled_poll`) or a harness's list of received messages.
    """
    if fragment_limit < 1:
        raise ValueError(f"fragment_limit={fragment_limit} must be >= 1")
    consumed = 0
    try:
        for message in messages[:fragment_limit]:
            action = handler(message)
            if action is ControlledPollAction.ABORT:
                break
            if not isinstance(action, ControlledPollAction):
                raise TypeError(
                    f"controlled_poll handler returned {action!r}; return a ControlledPollAction "
                    "(CONTINUE, COMMIT, BREAK or ABORT)"
                )
            consumed += 1
            if action is ControlledPollAction.BREAK:
                break
    finally:
        del messages[:consumed]
    return consumed


class BufferClaim:
    """An ingress message reserved by :meth:`ClusterClient.try_claim` (Aeron's ``BufferClaim`` from
    ``AeronCluster.tryClaim``): write the payload into :attr:`buffer`, then :meth:`commit` to send it to
    the leader or :meth:`abort` to drop it. As a context manager it commits on a normal exit and aborts
    when the block raises::

        with client.try_claim(len(body), now_ns) as claim:
            claim.buffer[:] = body

    Aeron claims space in the ingress publication's term buffer and writes the SessionMessageHeader
    there at once; here the claim is a zeroed buffer of its own, and the header (the session's term
    at commit time) is put before it when it is committed. A claim is committed or aborted once.
    """

    __slots__ = ("_client", "_data", "_now_ns", "_open", "buffer", "request_id")

    def __init__(self, client: ClusterClient, length: int, now_ns: int, request_id: int | None) -> None:
        self._client = client
        self._data = bytearray(length)
        self._now_ns = now_ns
        self._open = True
        self.request_id = request_id
        self.buffer = memoryview(self._data)  # writable, ``length`` bytes, zeroed

    @property
    def length(self) -> int:
        """How many payload bytes were claimed."""
        return len(self._data)

    @property
    def is_open(self) -> bool:
        """True until :meth:`commit` or :meth:`abort`."""
        return self._open

    def commit(self) -> int:
        """Send the buffer to the leader as one application message; returns :meth:`ClusterClient.offer`'s
        handle. Raises ClientError if the claim was already committed or aborted, and what ``offer``
        raises if the session is no longer open (the claim is then spent)."""
        self._spend("commit")
        return self._client.offer(bytes(self._data), self._now_ns, request_id=self.request_id)

    def abort(self) -> None:
        """Drop the claim: nothing is sent. Raises ClientError if it was already committed or aborted."""
        self._spend("abort")

    def _spend(self, operation: str) -> None:
        if not self._open:
            raise ClientError(
                f"client {self._client.client_id}: cannot {operation} a BufferClaim that was already "
                "committed or aborted; call try_claim() again for another message"
            )
        self._open = False

    def __enter__(self) -> BufferClaim:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._open:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def _check_client_arguments(
    client_id: int,
    response_channel: str,
    ingress_endpoints: Mapping[int, str],
    credentials: bytes,
    **intervals_ns: int | None,
) -> None:
    """Raise ValueError (TypeError for credentials) naming the first argument of a ClusterClient that
    is out of range: an id outside [0, 2**31), an empty or non-ASCII response channel, no ingress
    endpoint, an interval (``intervals_ns``, by name; None allowed) that is not positive."""
    if not 0 <= client_id < 1 << 31:
        raise ValueError(f"client_id={client_id} must be in [0, 2**31)")
    if not response_channel or not response_channel.isascii():
        raise ValueError(f"response_channel={response_channel!r} must be a non-empty ASCII address")
    if not ingress_endpoints:
        raise ValueError("ingress_endpoints is empty: give at least one member's ingress address")
    for name, value in intervals_ns.items():
        if value is not None and value <= 0:
            raise ValueError(f"{name}={value} must be > 0")
    if not isinstance(credentials, bytes):
        raise TypeError(f"credentials must be bytes, got {type(credentials).__name__}")


class ClusterClient:
    """One client session with the cluster (Aeron: ``AeronCluster``), driven by the caller.

    ``client_id`` (0 ≤ id < 2**31) names the client in errors and traces and prefixes its correlation
    ids: Aeron draws correlation ids from the media driver, unique across all its clients; we have no
    driver, so ``(client_id << 32) | sequence`` makes them unique across the clients of one run.
    ``credentials`` go in every SessionConnectRequest; ``on_challenge(encoded_challenge) -> bytes``
    (Aeron: ``CredentialsSupplier.onChallenge``) answers a Challenge, defaulting to ``credentials``.
    ``keepalive_interval_ns=None`` turns automatic keep-alives off (then call :meth:`send_keep_alive`,
    as a Java application calls ``sendKeepAlive()``).

    ``send(member_id, bytes)`` may return False to say the transport has no connection to that member
    (Aeron: ``Publication.NOT_CONNECTED``); None or True count as sent. ``new_leader_timeout_ns``
    (Aeron: ``AeronCluster.Context.newLeaderTimeoutNs``, default :data:`NEW_LEADER_TIMEOUT_DEFAULT_NS`,
    2 x the default leader heartbeat timeout) is how long an open session waits for a NewLeaderEvent
    after losing its leader before the client closes (see :class:`LeaderLink`).
    """

    def __init__(
        self,
        client_id: int,
        response_channel: str,
        ingress_endpoints: Mapping[int, str],
        send: Callable[[int, bytes], bool | None],
        credentials: bytes = b"",
        message_timeout_ns: int = MESSAGE_TIMEOUT_DEFAULT_NS,
        keepalive_interval_ns: int | None = KEEPALIVE_INTERVAL_DEFAULT_NS,
        *,
        connect_retry_interval_ns: int = CONNECT_RETRY_INTERVAL_DEFAULT_NS,
        response_stream_id: int = EGRESS_STREAM_ID_DEFAULT,
        on_challenge: Callable[[bytes], bytes] | None = None,
        new_leader_timeout_ns: int = NEW_LEADER_TIMEOUT_DEFAULT_NS,
    ) -> None:
        _check_client_arguments(
            client_id,
            response_channel,
            ingress_endpoints,
            credentials,
            message_timeout_ns=message_timeout_ns,
            connect_retry_interval_ns=connect_retry_interval_ns,
            keepalive_interval_ns=keepalive_interval_ns,
            new_leader_timeout_ns=new_leader_timeout_ns,
        )
        self.client_id = client_id
        self.response_channel = response_channel
        self.response_stream_id = response_stream_id
        self.credentials = credentials
        self.message_timeout_ns = message_timeout_ns
        self.keepalive_interval_ns = keepalive_interval_ns
        self.connect_retry_interval_ns = connect_retry_interval_ns
        self.new_leader_timeout_ns = new_leader_timeout_ns
        self._send = send
        self._answer_challenge = on_challenge  # Aeron: CredentialsSupplier.onChallenge
        self._endpoints: dict[int, str] = dict(ingress_endpoints)
        self._init_session_state()
        self._stamp()

    def _init_session_state(self) -> None:
        """A client with no session yet: no connect attempt, no leader, nothing outstanding."""
        self._state = ClientState.INIT
        self._correlation_seq = 0
        self._offer_seq = 0
        self.ignored: dict[str, int] = {}  # reason -> count: bad or stale egress, never raised
        self.leader_changes = 0  # NewLeaderEvents that moved the session (for tests and traces)
        self.resent_on_new_leader = 0  # outstanding requests resent on a NewLeaderEvent
        self._outstanding: dict[int, bytes] = {}  # request_id -> payload, until acknowledge()

        # Connect attempt (AsyncConnect).
        self._connect_correlation_id = NULL_VALUE
        self._connect_deadline_ns = 0
        self._attempt_deadline_ns = 0
        self._attempt_member_id = NULL_VALUE
        self._leader_hint: int | None = None  # REDIRECT's leader, good for one more try after a timeout
        self._members_tried: list[int] = []
        self._early_egress: list[EgressMessage] = []

        # Open session (AeronCluster).
        self._cluster_session_id = NULL_VALUE
        self._leadership_term_id = NULL_VALUE
        self._leader_member_id = NULL_VALUE
        self._leader_link = LeaderLink.CONNECTED
        self._state_deadline_ns = 0  # AeronCluster.stateDeadline: when an AWAIT_* link gives up
        self.cluster_protocol_version = 0  # SessionEvent OK's version (0 = not sent)
        self._next_keepalive_ns: int | None = None
        self._egress: list[EgressMessage] = []
        self._admin_pending: set[int] = set()
        self._admin_responses: dict[int, AdminResponse] = {}
        self.close_reason: CloseReason | None = None  # None also when the detail names no CloseReason
        self.close_detail = ""
        self._ingress_header = b""

    # ------------------------------------------------------------------ properties
    @property
    def state(self) -> ClientState:
        return self._state

    @property
    def is_connected(self) -> bool:
        return self._state is ClientState.CONNECTED

    @property
    def is_closed(self) -> bool:
        return self._state is ClientState.CLOSED

    @property
    def cluster_session_id(self) -> int:
        """The session id the leader assigned (NULL_VALUE until CONNECTED)."""
        return self._cluster_session_id

    @property
    def leadership_term_id(self) -> int:
        """The term stamped on every ingress message; advances on NewLeaderEvent."""
        return self._leadership_term_id

    @property
    def leader_member_id(self) -> int:
        """Where ingress goes (NULL_VALUE until CONNECTED)."""
        return self._leader_member_id

    @property
    def leader_link(self) -> LeaderLink:
        """How the open session reaches its leader (meaningful while CONNECTED; see :class:`LeaderLink`)."""
        return self._leader_link

    @property
    def state_deadline_ns(self) -> int | None:
        """When the client closes unless the leader link recovers (None while the link is CONNECTED)."""
        if self._state is ClientState.CONNECTED and self._leader_link is not LeaderLink.CONNECTED:
            return self._state_deadline_ns
        return None

    def ingress_endpoint(self, member_id: int) -> str | None:
        """The ingress address of ``member_id`` as currently known, None if unknown (what ``send``'s
        member id resolves to; :attr:`ingress_endpoints` without building a view per message)."""
        return self._endpoints.get(member_id)

    @property
    def ingress_endpoints(self) -> Mapping[int, str]:
        """Member id -> ingress address as currently known (read-only; the runtime resolves ``send``'s
        member id with it, since REDIRECT and NewLeaderEvent may replace the list)."""
        return MappingProxyType(self._endpoints)

    @property
    def ignored_count(self) -> int:
        """How many egress messages were dropped (all reasons)."""
        return sum(self.ignored.values())

    @property
    def admin_responses(self) -> Mapping[int, AdminResponse]:
        """AdminResponses received, by correlation id (read-only; see :meth:`take_admin_response`)."""
        return MappingProxyType(self._admin_responses)

    def describe(self) -> str:
        """One canonical line for logs and status tables."""
        return (
            f"ClusterClient(client={self.client_id} state={self._state.value} "
            f"session={self._cluster_session_id} term={self._leadership_term_id} "
            f"leader={self._leader_member_id} link={self._leader_link.value} ignored={self.ignored_count})"
        )

    def next_deadline_ns(self) -> int | None:
        """When :meth:`do_work` next has something to do (aioquic's ``get_timer``); None = nothing timed."""
        if self._state is ClientState.CONNECTING:
            return min(self._connect_deadline_ns, self._attempt_deadline_ns)
        if self._state is ClientState.CONNECTED:
            keepalive = self._next_keepalive_ns
            if self._leader_link is LeaderLink.CONNECTED:
                return keepalive
            deadline = self._state_deadline_ns
            return deadline if keepalive is None else min(keepalive, deadline)
        return None

    # ------------------------------------------------------------------ caller API
    def connect(self, now_ns: int) -> None:
        """Start a session: send SessionConnectRequest to one member. Drive it with :meth:`on_egress` and
        :meth:`do_work` until :attr:`is_connected` (or ConnectError / ClusterTimeoutError)."""
        if self._state in (ClientState.CONNECTING, ClientState.CONNECTED):
            raise ClientError(
                f"client {self.client_id}: connect() while {self._state.value}; close() the session first"
            )
        first = self._leader_member_id  # a previous session's leader is the best first guess
        self._reset_session()
        self._connect_deadline_ns = now_ns + self.message_timeout_ns
        self._transition(ClientState.CONNECTING)
        if first not in self._endpoints:
            first = next(iter(self._endpoints))
        self._send_connect_request(first, now_ns)

    def offer(self, payload: bytes | bytearray | memoryview, now_ns: int, *, request_id: int | None = None) -> int:
        """Send an application message to the leader; returns a handle (1, 2, ... per client).

        The wire carries no id for session messages (Aeron's ``offer`` returns a publication position),
        so the handle is local: put your own request id in ``payload`` to match replies. The header
        carries the current term and session id; the leader stamps the timestamp, so it is 0 here.
        With ``request_id`` the payload is kept as outstanding (resent on a new leader) until
        :meth:`acknowledge`; offering the same id again replaces it."""
        if self._state is not ClientState.CONNECTED:
            self._require_open("offer")
        self._offer_seq += 1
        body = payload if type(payload) is bytes else bytes(payload)
        if request_id is not None:
            self._outstanding[request_id] = body
        sent = self._send(self._leader_member_id, self._ingress_header + body) is not False
        if not sent or self._leader_link is not LeaderLink.CONNECTED:
            self.track_ingress_result(sent, now_ns)
        if self.keepalive_interval_ns is not None:  # _refresh_keepalive, inlined: once per request
            self._next_keepalive_ns = now_ns + self.keepalive_interval_ns
        return self._offer_seq

    def acknowledge(self, request_id: int) -> bool:
        """Forget an outstanding request (its reply arrived); False if it was not outstanding."""
        return self._outstanding.pop(request_id, None) is not None

    @property
    def outstanding(self) -> Mapping[int, bytes]:
        """Requests offered with a ``request_id`` and not yet acknowledged (read-only view)."""
        return MappingProxyType(self._outstanding)

    def try_claim(self, length: int, now_ns: int, *, request_id: int | None = None) -> BufferClaim:
        """Reserve an application message of ``length`` bytes for the caller to fill, then
        :meth:`BufferClaim.commit` (sent as :meth:`offer` sends, with ``request_id`` kept outstanding
        the same way) or :meth:`BufferClaim.abort` (nothing sent). Aeron: ``tryClaim(length, bufferClaim)``.
        Raises as :meth:`offer` does when the session is not open, ValueError for a negative length."""
        self._require_open("try_claim")
        if length < 0:
            raise ValueError(f"try_claim length={length} must be >= 0")
        return BufferClaim(self, length, now_ns, request_id)

    def send_keep_alive(self, now_ns: int) -> bool:
        """Send SessionKeepAlive now (Aeron: ``sendKeepAlive()``); :meth:`do_work` does this on the interval.
        Returns False when ``send`` said the leader is not connected (the session then awaits a new leader)."""
        self._require_open("send a keep-alive")
        sent = self._send_to_leader(
            SessionKeepAlive(self._leadership_term_id, self._cluster_session_id).encode(), now_ns
        )
        self._refresh_keepalive(now_ns)
        return sent

    def track_ingress_result(self, sent: bool, now_ns: int) -> None:
        """What the transport did with ingress to the leader (Aeron: ``trackIngressPublicationResult``):
        not connected (``sent`` False) while CONNECTED loses the leader (:meth:`on_leader_disconnected`);
        sent while AWAIT_NEW_LEADER_CONNECTION means the new leader is reached (CONNECTED). The client's
        own sends call this; a runtime that learns a result later (a batched send) calls it then."""
        if self._state is not ClientState.CONNECTED:
            return
        link = self._leader_link
        if link is LeaderLink.CONNECTED:
            if not sent:
                self.on_leader_disconnected(now_ns)
        elif link is LeaderLink.AWAIT_NEW_LEADER_CONNECTION and sent:
            self._link(LeaderLink.CONNECTED, 0)

    def on_leader_disconnected(self, now_ns: int) -> None:
        """The transport lost the leader: ingress to it is not connected, or its egress is gone (Aeron:
        ``onDisconnected`` on ``Publication.NOT_CONNECTED`` or a closed egress image). The open session
        waits AWAIT_NEW_LEADER for a NewLeaderEvent until ``now_ns + new_leader_timeout_ns``; past that
        :meth:`do_work` closes the client. No-op unless CONNECTED, or when already awaiting a new leader."""
        if self._state is not ClientState.CONNECTED or self._leader_link is LeaderLink.AWAIT_NEW_LEADER:
            return
        self._link(LeaderLink.AWAIT_NEW_LEADER, now_ns + self.new_leader_timeout_ns)

    def poll_state_changes(self, now_ns: int) -> int:
        """Close the client if its leader link gave up (Aeron: ``pollStateChanges``): no NewLeaderEvent
        within ``new_leader_timeout_ns`` of losing the leader, or no ingress through to the new leader
        within ``message_timeout_ns`` of its NewLeaderEvent. Returns 1 if it closed, else 0; no error is
        raised (Aeron's ``isClosed()`` becomes true): :attr:`close_detail` says why.
        :meth:`do_work` calls this."""
        if (
            self._state is not ClientState.CONNECTED
            or self._leader_link is LeaderLink.CONNECTED
            or now_ns < self._state_deadline_ns
        ):
            return 0
        if self._leader_link is LeaderLink.AWAIT_NEW_LEADER:
            detail = (
                f"{CLUSTER_UNAVAILABLE}: no new leader within new_leader_timeout_ns={self.new_leader_timeout_ns} "
                f"of losing leader {self._leader_member_id} (term {self._leadership_term_id})"
            )
        else:
            detail = (
                f"{CLUSTER_UNAVAILABLE}: ingress to new leader {self._leader_member_id} (term "
                f"{self._leadership_term_id}) not connected within message_timeout_ns={self.message_timeout_ns}"
            )
        self._closed(None, detail)
        return 1

    def send_admin_request(self, request_type: AdminRequestType, now_ns: int, payload: bytes = b"") -> int:
        """Send an AdminRequest (e.g. SNAPSHOT) to the leader; returns its correlation id. The answer
        arrives as an AdminResponse in :attr:`admin_responses` under that id."""
        self._require_open(f"send an AdminRequest {AdminRequestType(request_type).name}")
        correlation_id = self._next_correlation_id()
        request = AdminRequest(
            self._leadership_term_id, self._cluster_session_id, correlation_id, request_type, payload
        )
        self._admin_pending.add(correlation_id)
        self._send_to_leader(request.encode(), now_ns)
        return correlation_id

    def take_admin_response(self, correlation_id: int) -> AdminResponse | None:
        """Remove and return the AdminResponse for ``correlation_id``, if it has arrived."""
        return self._admin_responses.pop(correlation_id, None)

    @property
    def egress_pending(self) -> int:
        """Application messages received and not yet taken by :meth:`poll` or :meth:`controlled_poll`."""
        return len(self._egress)

    def poll(self) -> list[EgressMessage]:
        """Application messages received since the last poll, in arrival order."""
        messages, self._egress = self._egress, []
        return messages

    def controlled_poll(
        self, handler: Callable[[EgressMessage], ControlledPollAction], fragment_limit: int = FRAGMENT_LIMIT
    ) -> int:
        """Hand received application messages, oldest first and at most ``fragment_limit``, to ``handler``,
        whose :class:`ControlledPollAction` decides what is consumed: ABORT leaves that message to be handed
        out again by the next poll, BREAK stops after it (Aeron: ``controlledPollEgress`` with a
        ``ControlledEgressListener``). Returns how many were consumed. See :func:`controlled_poll`."""
        return controlled_poll(self._egress, handler, fragment_limit)

    def close(self, now_ns: int) -> None:
        """Close the session: SessionCloseRequest to the leader if it is open. Idempotent."""
        if self._state is ClientState.CLOSED:
            return
        if self._state is ClientState.CONNECTED:
            self._send(
                self._leader_member_id,
                SessionCloseRequest(self._leadership_term_id, self._cluster_session_id).encode(),
            )
            self._closed(CloseReason.CLIENT_ACTION, "closed by the client")
        else:
            self._closed(CloseReason.CLIENT_ACTION, "closed by the client before the session opened")

    def do_work(self, now_ns: int) -> int:
        """Timed work: connect resend / timeout, keep-alive, closing when the leader link gave up
        (:meth:`poll_state_changes`). Returns the amount of work done (0 or 1).

        Raises ClusterTimeoutError when no OK arrived within ``message_timeout_ns`` of :meth:`connect`."""
        if self._state is ClientState.CONNECTING:
            if now_ns >= self._connect_deadline_ns:
                tried = ", ".join(str(m) for m in self._members_tried)
                detail = f"connect timeout after {self.message_timeout_ns / SECOND:g} s"
                self._closed(None, detail)
                raise ClusterTimeoutError(
                    f"client {self.client_id}: {detail} (message_timeout_ns={self.message_timeout_ns}): "
                    f"no SessionEvent OK; SessionConnectRequest sent to members [{tried}], last to "
                    f"{self._attempt_member_id}; check that a leader is elected, that ingress_endpoints "
                    f"{format_ingress_endpoints(self._endpoints)!r} are right and that the cluster can "
                    f"reach response_channel {self.response_channel!r}, then connect again"
                )
            if now_ns >= self._attempt_deadline_ns:
                # No answer from that member: it may be dead, or the message lost. A leader named by a
                # REDIRECT gets one more try; otherwise move on to the next member in the list.
                if self._leader_hint is not None and self._leader_hint in self._endpoints:
                    target = self._leader_hint
                else:
                    target = self._member_after(self._attempt_member_id)
                self._leader_hint = None
                self._send_connect_request(target, now_ns)
                return 1
        elif self._state is ClientState.CONNECTED:
            if self._leader_link is not LeaderLink.CONNECTED and self.poll_state_changes(now_ns):
                return 1
            if self._next_keepalive_ns is not None and now_ns >= self._next_keepalive_ns:
                self.send_keep_alive(now_ns)
                return 1
        return 0

    # ------------------------------------------------------------------ egress
    def on_egress_batch(self, payloads: Iterable[bytes | bytearray | memoryview], now_ns: int) -> None:
        """Handle several egress messages in arrival order, exactly as :meth:`on_egress` each would.

        The usual message, a reply on the open session, is taken here without a call per message;
        anything else (session events, other sessions, malformed input) goes through :meth:`on_egress`,
        so its counters and errors are the same. A raised ConnectError leaves the rest unhandled."""
        egress = self._egress
        connected = ClientState.CONNECTED
        for payload in payloads:
            if self._state is connected and type(payload) is bytes:
                fields = session_message_fields(payload)
                if fields is not None and fields[1] == self._cluster_session_id:
                    term, session_id, timestamp = fields
                    egress.append(EgressMessage(session_id, term, timestamp, payload[SESSION_HEADER_LENGTH:]))
                    continue
            self.on_egress(payload, now_ns)

    def on_egress(self, payload: bytes | bytearray | memoryview, now_ns: int) -> None:
        """Handle one egress message. Malformed or stale input is counted in :attr:`ignored`, never
        raised; a refused connect raises ConnectError (the answer to the caller's ``connect``)."""
        try:
            fields = session_message_fields(payload)
            if fields is not None:  # the hot path: one unpack, no message dataclass
                term, session_id, timestamp = fields
                body = bytes(payload[SESSION_HEADER_LENGTH:])
                self._on_session_message(EgressMessage(session_id, term, timestamp, body))
                return
            if peek_template_id(payload) == SessionMessageHeader.TEMPLATE_ID:
                term, session_id, timestamp, body = unpack_session_message(payload)
                self._on_session_message(EgressMessage(session_id, term, timestamp, body))
                return
            msg = decode(payload)
        except DecodeError as e:
            self._ignore("egress", f"malformed: {e}")
            return
        if isinstance(msg, SessionEvent):
            self._on_session_event(msg, now_ns)
        elif isinstance(msg, NewLeaderEvent):
            self._on_new_leader_event(msg, now_ns)
        elif isinstance(msg, Challenge):
            self._on_challenge(msg, now_ns)
        elif isinstance(msg, AdminResponse):
            self._on_admin_response(msg)
        else:
            self._ignore("egress", f"unexpected {type(msg).__name__}")

    def _on_session_message(self, msg: EgressMessage) -> None:
        if self._state is ClientState.CONNECTING:
            # The OK comes from the consensus module, a service's first reply from the service
            # process: two sockets, so the reply can overtake the OK. Hold it until we know our id.
            if len(self._early_egress) >= MAX_EARLY_EGRESS:
                self._ignore("SessionMessageHeader", "early egress buffer full while CONNECTING")
            else:
                self._early_egress.append(msg)
            return
        if self._state is not ClientState.CONNECTED:
            self._ignore("SessionMessageHeader", f"client is {self._state.value}")
        elif msg.cluster_session_id != self._cluster_session_id:
            self._ignore("SessionMessageHeader", f"for session {msg.cluster_session_id}, not ours")
        else:
            self._egress.append(msg)

    def _on_session_event(self, msg: SessionEvent, now_ns: int) -> None:
        if self._state is ClientState.CONNECTING:
            if msg.correlation_id != self._connect_correlation_id:
                self._ignore("SessionEvent", f"{msg.code.name} for correlation {msg.correlation_id}, not ours")
                return
            if msg.code == EventCode.OK:
                self._on_connected(msg, now_ns)
            elif msg.code == EventCode.REDIRECT:
                self._on_redirect(msg, now_ns)
            else:  # ERROR, AUTHENTICATION_REJECTED, CLOSED of the pending session
                member_id = self._attempt_member_id
                self._closed(_close_reason(msg.detail), f"connect refused: {msg.code.name} {msg.detail!r}")
                raise ConnectError(self.client_id, msg.code, msg.detail, member_id)
        elif self._state is ClientState.CONNECTED:
            if msg.cluster_session_id != self._cluster_session_id:
                self._ignore("SessionEvent", f"{msg.code.name} for session {msg.cluster_session_id}, not ours")
            elif msg.code == EventCode.CLOSED:
                # Detail is the CloseReason name (TIMEOUT, SERVICE_ACTION, ...) or "election".
                self._closed(_close_reason(msg.detail), f"closed by the cluster: {msg.detail or 'no detail'}")
            else:
                self._ignore("SessionEvent", f"{msg.code.name} for the open session (detail={msg.detail!r})")
        else:
            self._ignore("SessionEvent", f"{msg.code.name} while {self._state.value}")

    def _on_connected(self, msg: SessionEvent, now_ns: int) -> None:
        self._cluster_session_id = msg.cluster_session_id
        self._leadership_term_id = msg.leadership_term_id
        self._stamp()
        # The OK comes from the member we asked, which is the leader; route by the id it names if we
        # know that member, else stay with the one that answered.
        leader = msg.leader_member_id
        self._leader_member_id = leader if leader in self._endpoints else self._attempt_member_id
        self.cluster_protocol_version = msg.version
        self._transition(ClientState.CONNECTED)
        self._refresh_keepalive(now_ns)
        early, self._early_egress = self._early_egress, []
        for message in early:
            self._on_session_message(message)

    def _on_redirect(self, msg: SessionEvent, now_ns: int) -> None:
        try:
            endpoints = parse_ingress_endpoints(msg.detail)
        except ValueError as e:
            self._ignore("SessionEvent", f"REDIRECT with a bad member list: {e}")
            return  # the attempt times out and the next member is tried
        leader = msg.leader_member_id
        if leader not in endpoints:
            self._ignore("SessionEvent", f"REDIRECT to member {leader}, not in its list {msg.detail!r}")
            return
        if leader == self._attempt_member_id:
            # A member redirecting to itself would make us loop at message rate; wait and rotate instead.
            self._ignore("SessionEvent", f"REDIRECT from member {leader} to itself")
            return
        self._endpoints = endpoints  # the cluster's own list wins, as in Aeron's updateMembers()
        self._leader_hint = leader
        self._send_connect_request(leader, now_ns)

    def _on_challenge(self, msg: Challenge, now_ns: int) -> None:
        if self._state is not ClientState.CONNECTING or msg.correlation_id != self._connect_correlation_id:
            self._ignore("Challenge", f"correlation {msg.correlation_id} while {self._state.value}, not ours")
            return
        answer = self._answer_challenge
        credentials = self.credentials if answer is None else answer(msg.encoded_challenge)
        # As Aeron: the response gets a fresh correlation id and the OK will carry that one.
        correlation_id = self._next_correlation_id()
        self._connect_correlation_id = correlation_id
        self._attempt_deadline_ns = now_ns + self.connect_retry_interval_ns
        response = ChallengeResponse(correlation_id, msg.cluster_session_id, credentials)
        self._send(self._attempt_member_id, response.encode())

    def _on_new_leader_event(self, msg: NewLeaderEvent, now_ns: int) -> None:
        if self._state is not ClientState.CONNECTED:
            self._ignore("NewLeaderEvent", f"client is {self._state.value}")
            return
        if msg.cluster_session_id != self._cluster_session_id:
            self._ignore("NewLeaderEvent", f"for session {msg.cluster_session_id}, not ours")
            return
        if msg.leadership_term_id < self._leadership_term_id:
            # Delivered late from an older election: following it would stamp a stale term, and the
            # leader silently drops stale-term ingress.
            self._ignore("NewLeaderEvent", f"stale term {msg.leadership_term_id} < {self._leadership_term_id}")
            return
        endpoints = self._endpoints
        if msg.ingress_endpoints:
            try:
                endpoints = parse_ingress_endpoints(msg.ingress_endpoints)
            except ValueError as e:
                self._ignore("NewLeaderEvent", f"bad ingressEndpoints: {e}")
                return
        if msg.leader_member_id not in endpoints:
            self._ignore("NewLeaderEvent", f"leader {msg.leader_member_id} has no ingress endpoint")
            return
        moved = (msg.leadership_term_id, msg.leader_member_id) != (self._leadership_term_id, self._leader_member_id)
        self._endpoints = dict(endpoints)
        self._leadership_term_id = msg.leadership_term_id
        self._leader_member_id = msg.leader_member_id
        self._stamp()
        # As Aeron's onNewLeader: wait for ingress to the new leader to go through, at most a message timeout.
        self._link(LeaderLink.AWAIT_NEW_LEADER_CONNECTION, now_ns + self.message_timeout_ns)
        if moved:
            self.leader_changes += 1
            # What the old leader did not answer may not be in the log: send it to the new one now
            # (stamped with the new term) rather than when the caller's timer fires.
            for body in self._outstanding.values():
                self._send_to_leader(self._ingress_header + body, now_ns)
            self.resent_on_new_leader += len(self._outstanding)

    def _on_admin_response(self, msg: AdminResponse) -> None:
        if self._state is not ClientState.CONNECTED:
            self._ignore("AdminResponse", f"client is {self._state.value}")
        elif msg.cluster_session_id != self._cluster_session_id:
            self._ignore("AdminResponse", f"for session {msg.cluster_session_id}, not ours")
        elif msg.correlation_id not in self._admin_pending:
            self._ignore("AdminResponse", f"correlation {msg.correlation_id} matches no AdminRequest")
        else:
            self._admin_pending.discard(msg.correlation_id)
            self._admin_responses[msg.correlation_id] = msg

    # ------------------------------------------------------------------ internals
    def _send_to_leader(self, data: bytes, now_ns: int) -> bool:
        sent = self._send(self._leader_member_id, data) is not False
        if not sent or self._leader_link is not LeaderLink.CONNECTED:
            self.track_ingress_result(sent, now_ns)
        return sent

    def _send_connect_request(self, member_id: int, now_ns: int) -> None:
        # Fresh correlation id per attempt (Aeron's prepareConnectRequest): answers to an earlier
        # attempt, e.g. a slow OK from a member we gave up on, are then told apart and ignored.
        correlation_id = self._next_correlation_id()
        self._connect_correlation_id = correlation_id
        self._attempt_member_id = member_id
        self._attempt_deadline_ns = now_ns + self.connect_retry_interval_ns
        self._members_tried.append(member_id)
        request = SessionConnectRequest(
            correlation_id,
            self.response_stream_id,
            CLIENT_PROTOCOL_VERSION,
            self.response_channel,
            self.credentials,
        )
        self._send(member_id, request.encode())

    def _member_after(self, member_id: int) -> int:
        members = list(self._endpoints)
        if member_id not in self._endpoints:
            return members[0]
        return members[(members.index(member_id) + 1) % len(members)]

    def _next_correlation_id(self) -> int:
        self._correlation_seq += 1
        assert self._correlation_seq < _CORRELATION_SEQ_LIMIT, "correlation sequence ran into the client id bits"
        return (self.client_id << 32) | self._correlation_seq

    def _refresh_keepalive(self, now_ns: int) -> None:
        # Any ingress with the current term refreshes the session's activity on the leader (b.12), so the
        # keep-alive is only needed after an interval of silence.
        if self.keepalive_interval_ns is not None:
            self._next_keepalive_ns = now_ns + self.keepalive_interval_ns

    def _require_open(self, operation: str) -> None:
        if self._state is ClientState.CONNECTED:
            return
        if self._state is ClientState.CLOSED:
            raise SessionClosedError(self.client_id, operation, self.close_detail)
        raise NotConnectedError(
            f"client {self.client_id}: cannot {operation}: the session is not open ({self._state.value}); "
            "call connect(now_ns), then feed egress to on_egress() and call do_work() until is_connected"
        )

    def _reset_session(self) -> None:
        self._members_tried = []
        self._early_egress = []
        self._leader_hint = None
        self._cluster_session_id = NULL_VALUE
        self._leadership_term_id = NULL_VALUE
        self._leader_member_id = NULL_VALUE
        self._link(LeaderLink.CONNECTED, 0)
        self._stamp()
        self._next_keepalive_ns = None
        self._admin_pending.clear()
        self.close_reason = None
        self.close_detail = ""

    def _closed(self, reason: CloseReason | None, detail: str) -> None:
        self.close_reason = reason
        self.close_detail = detail
        self._next_keepalive_ns = None
        self._early_egress = []
        self._transition(ClientState.CLOSED)

    def _stamp(self) -> None:
        # Every offer carries the same SessionMessageHeader until the term or the session changes
        # (the leader stamps the timestamp, 0 here): encoded once, prepended to each payload.
        self._ingress_header = encode_session_message(self._leadership_term_id, self._cluster_session_id, 0, b"")

    def _link(self, to: LeaderLink, deadline_ns: int) -> None:
        # The one place the leader link changes (Aeron's AeronCluster.state(newState, newStateDeadline)).
        self._leader_link = to
        self._state_deadline_ns = deadline_ns

    def _transition(self, to: ClientState) -> None:
        # The one place the state changes (STYLE.md); a hook for traces belongs here.
        self._state = to

    def _ignore(self, what: str, reason: str) -> None:
        key = f"{what}: {reason}"
        self.ignored[key] = self.ignored.get(key, 0) + 1


def _close_reason(detail: str) -> CloseReason | None:
    """The CloseReason a CLOSED SessionEvent names in its detail, if any ("election" names none)."""
    member = CloseReason.__members__.get(detail)
    return None if member is None or member is CloseReason.NULL_VAL else member


# ---------------------------------------------------------------------- retries
T = TypeVar("T")


def _no_sleep(seconds: float) -> None:
    """Core never sleeps: tenacity calls this with 0 between attempts when there is no wait."""
    if seconds > 0:
        raise ValueError(
            f"retry_on_leader_change was asked to sleep {seconds} s but clusterlab.core.client never sleeps: "
            "pass sleep= (e.g. time.sleep, from the runtime) together with a non-zero wait="
        )


def retry_on_leader_change(
    fn: Callable[[], T],
    attempts: int = 3,
    *,
    retry_on: tuple[type[BaseException], ...] = (ClusterTimeoutError,),
    wait: Callable[[tenacity.RetryCallState], float] | None = None,
    sleep: Callable[[float], None] = _no_sleep,
    before_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """Call ``fn`` up to ``attempts`` times while it raises one of ``retry_on``; return its result.

    A leader change shows up at the caller as a request that got no answer in time (it went to the old
    leader and may or may not be in the log), hence ClusterTimeoutError by default. Retrying makes an
    operation *at least once*: make ``fn`` idempotent (e.g. a request id the service deduplicates).
    ``before_retry(attempt_number, error)`` runs before each retry (e.g. to reconnect a closed client).

    Pure by default: no wait and no sleep. The runtime passes a real ``wait`` (any tenacity wait, e.g.
    ``tenacity.wait_exponential()``) and ``sleep=time.sleep``. Stopping is by attempt count only, so
    the outcome never depends on a clock (tenacity reads one for its own statistics, which we ignore).
    The last error is re-raised as itself, not wrapped in tenacity's RetryError.
    """
    if attempts < 1:
        raise ValueError(f"attempts={attempts} must be >= 1")

    def _before_sleep(state: tenacity.RetryCallState) -> None:
        if before_retry is not None and state.outcome is not None:
            error = state.outcome.exception()
            assert error is not None  # tenacity only retries on an exception here
            before_retry(state.attempt_number, error)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_none() if wait is None else wait,
        retry=tenacity.retry_if_exception_type(retry_on),
        sleep=sleep,
        before_sleep=_before_sleep,
        reraise=True,
    )
    return retrying(fn)
