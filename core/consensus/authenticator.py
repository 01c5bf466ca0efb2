"""Pluggable authentication of client sessions (Aeron ``Authenticator`` and ``SessionProxy``).

The consensus module calls the authenticator with a ``SessionProxy`` for each pending session;
the authenticator answers through it: ``authenticate(principal)``, ``challenge(bytes)`` or
``reject()``. Time arrives as ``now_ms`` (cluster time): no clocks here.
"""

from __future__ import annotations

import hashlib
from typing import Protocol


class SessionProxy(Protocol):
    """What an authenticator may do to a pending session."""

    @property
    def cluster_session_id(self) -> int: ...

    def challenge(self, encoded_challenge: bytes) -> bool: ...

    def authenticate(self, encoded_principal: bytes) -> bool: ...

    def reject(self) -> None: ...


class Authenticator(Protocol):
    """Aeron ``Authenticator``: connect request, challenge response, then the session checks."""

    def on_connect_request(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None: ...

    def on_challenge_response(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None: ...

    def on_connected_session(self, session: SessionProxy, now_ms: int) -> None: ...

    def on_challenged_session(self, session: SessionProxy, now_ms: int) -> None: ...


class DefaultAuthenticator:
    """Accepts every session with an empty principal (Aeron ``DefaultAuthenticatorSupplier``)."""

    def on_connect_request(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None:
        pass

    def on_challenge_response(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None:
        pass

    def on_connected_session(self, session: SessionProxy, now_ms: int) -> None:
        session.authenticate(b"")

    def on_challenged_session(self, session: SessionProxy, now_ms: int) -> None:
        session.authenticate(b"")


class CredentialsAuthenticator:
    """Challenge/response with user names and passwords.

    Connect credentials are the user name (UTF-8). The cluster challenges with a per-session
    nonce; the client answers ``user:sha256(nonce + password)`` in hex. A correct answer
    authenticates with the user name as principal; anything else is rejected
    (SessionEvent AUTHENTICATION_REJECTED)."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = dict(users)
        self._pending: dict[int, tuple[str, bytes]] = {}  # session -> (user, nonce)
        self._verdict: dict[int, bytes | None] = {}  # session -> principal, or None = reject

    @staticmethod
    def response(user: str, password: str, nonce: bytes) -> bytes:
        """What a client sends back for a challenge (used by the client library and tests)."""
        return f"{user}:{hashlib.sha256(nonce + password.encode()).hexdigest()}".encode()

    def on_connect_request(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None:
        user = encoded_credentials.decode("utf-8", "replace")
        # Deterministic nonce: the core has no randomness of its own; session id and time are unique enough
        # for a test harness (a production authenticator would take a seeded or OS random source).
        nonce = hashlib.sha256(f"{cluster_session_id}:{now_ms}:{user}".encode()).digest()[:16]
        self._pending[cluster_session_id] = (user, nonce)

    def on_challenge_response(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None:
        pending = self._pending.get(cluster_session_id)
        if pending is None:
            return
        user, nonce = pending
        password = self._users.get(user)
        ok = password is not None and encoded_credentials == self.response(user, password, nonce)
        self._verdict[cluster_session_id] = user.encode() if ok else None

    def on_connected_session(self, session: SessionProxy, now_ms: int) -> None:
        pending = self._pending.get(session.cluster_session_id)
        if pending is None or pending[0] not in self._users:
            session.reject()
            return
        session.challenge(pending[1])

    def on_challenged_session(self, session: SessionProxy, now_ms: int) -> None:
        sid = session.cluster_session_id
        if sid not in self._verdict:
            return  # no response yet: the session stays challenged until it answers or times out
        principal = self._verdict.pop(sid)
        self._pending.pop(sid, None)
        if principal is None:
            session.reject()
        else:
            session.authenticate(principal)
