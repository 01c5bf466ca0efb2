"""What the cluster client raises, and why.

Every error here is something the *caller* must react to: the cluster said no (ConnectError), the
cluster did not answer in time (ClusterTimeoutError), or the caller used the client in a state where
the call cannot work (NotConnectedError, SessionClosedError). Garbage from the cluster is never
raised: :meth:`ClusterClient.on_egress` counts it in ``ClusterClient.ignored`` and drops it, as the
consensus module does with its peers' bad messages (STYLE.md, "three kinds of error").

Aeron equivalents: ConnectError ~ ``ClusterException`` / ``AuthenticationException`` thrown by
``AsyncConnect.poll()``; ClusterTimeoutError ~ ``io.aeron.exceptions.TimeoutException`` ("connect
timeout"); SessionClosedError ~ using an ``AeronCluster`` after ``isClosed()``.
"""

from __future__ import annotations

from clusterlab.core.codec.enums import EventCode


class ClientError(Exception):
    """Base of every error raised by :mod:`clusterlab.core.client`."""


class ConnectError(ClientError):
    """The cluster answered the connect with a refusal: ERROR, AUTHENTICATION_REJECTED, or CLOSED
    of the still-pending session. ``code`` and ``detail`` are the SessionEvent's."""

    def __init__(self, client_id: int, code: EventCode, detail: str, member_id: int) -> None:
        self.client_id = client_id
        self.code = code
        self.detail = detail
        self.member_id = member_id
        if code == EventCode.AUTHENTICATION_REJECTED:
            advice = (
                "check the credentials given to ClusterClient (and on_challenge) against the cluster's "
                "authenticator, then connect again"
            )
        elif code == EventCode.CLOSED:
            advice = (
                "the cluster dropped the session before it opened (e.g. the leader entered an election); connect again"
            )
        else:
            advice = (
                "read the detail: 'concurrent session limit' means close other sessions or raise the "
                "cluster's max sessions; a version error means the client and cluster protocol majors differ"
            )
        super().__init__(
            f"client {client_id}: connect refused by member {member_id} with {code.name} (detail={detail!r}); {advice}"
        )


class ClusterTimeoutError(ClientError, TimeoutError):
    """The cluster did not answer within the client's message timeout (time is the caller's
    ``now_ns``; the client never reads a clock)."""


class NotConnectedError(ClientError):
    """A session operation (offer, keep-alive, admin request) before the session is open."""


class SessionClosedError(ClientError):
    """A session operation after the session closed (by the client, by the cluster, or because the
    connect failed). ``detail`` says which."""

    def __init__(self, client_id: int, operation: str, detail: str) -> None:
        self.client_id = client_id
        self.operation = operation
        self.detail = detail
        super().__init__(
            f"client {client_id}: cannot {operation}: the session is closed ({detail}); "
            "call connect() to open a new session"
        )
