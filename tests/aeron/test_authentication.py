"""Ports of Aeron's ``AuthenticationTest`` (aeron-cluster): a one-member cluster whose Authenticator
and client CredentialsSupplier are the test's own; the service records the session id and the
principal of the session whose message it applies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from clusterlab.core.client.client import ClusterClient, ConnectError
from clusterlab.core.codec.enums import EventCode
from clusterlab.core.consensus.authenticator import SessionProxy
from clusterlab.core.consensus.context import SECOND, Channel
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_parts import SimClient, client_response_channel

from tests.aeron.support import SERVICE_NAME, AeronTestService
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim

CREDENTIALS = b'username="admin"|password="secret"'
CHALLENGE = b"I challenge you!"
PRINCIPAL = b"I am THE Principal!"


class ScriptedAuthenticator:
    """The Authenticator of one Aeron test: records what it was given, answers as told."""

    def __init__(
        self, on_connected: Callable[[SessionProxy], None], on_challenged: Callable[[SessionProxy], None] | None = None
    ) -> None:
        self.session_id = -1
        self.connect_credentials: list[bytes] = []
        self.challenge_responses: list[tuple[int, bytes]] = []
        self._on_connected = on_connected
        self._on_challenged = on_challenged

    def on_connect_request(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None:
        self.session_id = cluster_session_id
        self.connect_credentials.append(encoded_credentials)

    def on_challenge_response(self, cluster_session_id: int, encoded_credentials: bytes, now_ms: int) -> None:
        self.challenge_responses.append((cluster_session_id, encoded_credentials))

    def on_connected_session(self, session: SessionProxy, now_ms: int) -> None:
        assert session.cluster_session_id == self.session_id
        self._on_connected(session)

    def on_challenged_session(self, session: SessionProxy, now_ms: int) -> None:
        assert self._on_challenged is not None, "onChallengedSession must not be called"
        assert session.cluster_session_id == self.session_id
        if self.challenge_responses:
            self._on_challenged(session)


def setup(
    sim: SimKit, seed: int, authenticator: ScriptedAuthenticator, credentials: bytes, on_challenge: Any = None
) -> tuple[SimCluster, SimClient, list[bytes]]:
    c = sim.cluster(members=1, seed=seed, service=SERVICE_NAME, authenticator_factory=lambda: authenticator)
    c.await_leader()
    challenges: list[bytes] = []

    def answer(challenge: bytes) -> bytes:
        challenges.append(challenge)
        assert on_challenge is not None, "CredentialsSupplier.onChallenge must not be called"
        return on_challenge(challenge)  # type: ignore[no-any-return]

    client = c.add_client(credentials=credentials)
    client.client = ClusterClient(
        client.client_id,
        client_response_channel(client.client_id),
        {0: "sim-member:0"},
        lambda member_id, payload: c.network.send(c.now_ns, client.network_id, member_id, Channel.INGRESS, payload),
        credentials=credentials,
        on_challenge=answer,
    )
    client.client.connect(c.now_ns)
    c.await_condition(lambda: client.client.is_connected or bool(client.errors), 5 * SECOND, "connect outcome")
    return c, client, challenges


def service(c: SimCluster) -> AeronTestService:
    s = c.service(0).service
    assert isinstance(s, AeronTestService)
    return s


def assert_authenticated(c: SimCluster, client: SimClient, auth: ScriptedAuthenticator, principal: bytes) -> None:
    assert client.client.is_connected, client.errors
    assert client.client.offer(b"msg-0", c.now_ns) > 0
    c.await_condition(lambda: service(c).message_count == 1, SECOND, "serviceMsgCounter 1")
    session_id = client.client.cluster_session_id
    assert auth.session_id == session_id
    session = c.service(0).get_client_session(session_id)
    assert session is not None and session.encoded_principal == principal


def assert_rejected(c: SimCluster, client: SimClient) -> None:
    assert len(client.errors) == 1 and isinstance(client.errors[0], ConnectError), client.errors
    assert client.errors[0].code == EventCode.AUTHENTICATION_REJECTED
    assert c.service(0).client_sessions() == [], "the service saw no session (serviceSessionId stays -1)"


def test_should_authenticate_on_connect_request_with_empty_credentials(sim: SimKit) -> None:
    """AuthenticationTest.shouldAuthenticateOnConnectRequestWithEmptyCredentials"""
    auth = ScriptedAuthenticator(lambda s: s.authenticate(b""))
    c, client, challenges = setup(sim, 701, auth, b"")
    assert auth.connect_credentials == [b""]
    assert_authenticated(c, client, auth, b"")
    assert challenges == [] and auth.challenge_responses == []


def test_should_authenticate_on_connect_request_with_credentials(sim: SimKit) -> None:
    """AuthenticationTest.shouldAuthenticateOnConnectRequestWithCredentials"""
    auth = ScriptedAuthenticator(lambda s: s.authenticate(PRINCIPAL))
    c, client, challenges = setup(sim, 702, auth, CREDENTIALS)
    assert auth.connect_credentials == [CREDENTIALS]
    assert_authenticated(c, client, auth, PRINCIPAL)
    assert challenges == []


def test_should_authenticate_on_challenge_response(sim: SimKit) -> None:
    """AuthenticationTest.shouldAuthenticateOnChallengeResponse"""
    auth = ScriptedAuthenticator(lambda s: s.challenge(CHALLENGE), lambda s: s.authenticate(PRINCIPAL))
    c, client, challenges = setup(sim, 703, auth, b"", on_challenge=lambda ch: CREDENTIALS)
    assert challenges == [CHALLENGE]
    assert auth.connect_credentials == [b""]
    assert auth.challenge_responses == [(auth.session_id, CREDENTIALS)]
    assert_authenticated(c, client, auth, PRINCIPAL)


def test_should_reject_on_connect_request(sim: SimKit) -> None:
    """AuthenticationTest.shouldRejectOnConnectRequest"""
    auth = ScriptedAuthenticator(lambda s: s.reject())
    c, client, challenges = setup(sim, 704, auth, b"")
    assert auth.connect_credentials == [b""]
    assert challenges == []
    assert_rejected(c, client)


def test_should_reject_on_challenge_response(sim: SimKit) -> None:
    """AuthenticationTest.shouldRejectOnChallengeResponse"""
    auth = ScriptedAuthenticator(lambda s: s.challenge(CHALLENGE), lambda s: s.reject())
    c, client, challenges = setup(sim, 705, auth, b"", on_challenge=lambda ch: CREDENTIALS)
    assert challenges == [CHALLENGE]
    assert auth.challenge_responses == [(auth.session_id, CREDENTIALS)]
    assert_rejected(c, client)
