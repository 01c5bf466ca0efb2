"""ClusterClient.try_claim / BufferClaim (Aeron ``AeronCluster.tryClaim``) and controlled_poll (Aeron
``controlledPollEgress`` with a ``ControlledEgressListener``), sans-IO: a fake ``send`` records ingress,
egress is handed in with ``on_egress``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clusterlab.core.client import (
    FRAGMENT_LIMIT,
    ClientError,
    ClusterClient,
    ControlledPollAction,
    EgressMessage,
    NotConnectedError,
    SessionClosedError,
    controlled_poll,
)
from clusterlab.core.codec.enums import EventCode
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.session import (
    NewLeaderEvent,
    SessionConnectRequest,
    SessionEvent,
    encode_session_message,
    unpack_session_message,
)
from clusterlab.core.consensus.context import CLIENT_PROTOCOL_VERSION

TERM, SESSION = 4, 77
ENDPOINTS = {0: "ipc://m0", 1: "ipc://m1", 2: "ipc://m2"}
ABORT, BREAK, COMMIT, CONTINUE = (
    ControlledPollAction.ABORT,
    ControlledPollAction.BREAK,
    ControlledPollAction.COMMIT,
    ControlledPollAction.CONTINUE,
)


def connected_client() -> tuple[ClusterClient, list[tuple[int, bytes]]]:
    sent: list[tuple[int, bytes]] = []
    client = ClusterClient(3, "ipc://client-3", ENDPOINTS, lambda m, p: sent.append((m, p)))
    client.connect(0)
    request = decode(sent[-1][1])
    assert isinstance(request, SessionConnectRequest)
    ok = SessionEvent(SESSION, request.correlation_id, TERM, 1, EventCode.OK, CLIENT_PROTOCOL_VERSION, "")
    client.on_egress(ok.encode(), 1)
    assert client.is_connected
    sent.clear()
    return client, sent


def deliver(client: ClusterClient, *payloads: bytes) -> None:
    for p in payloads:
        client.on_egress(encode_session_message(TERM, SESSION, 9, p), 2)


def scripted(actions: list[ControlledPollAction], seen: list[bytes]) -> Callable[[EgressMessage], ControlledPollAction]:
    def handler(message: EgressMessage) -> ControlledPollAction:
        seen.append(message.payload)
        return actions.pop(0)

    return handler


# ---------------------------------------------------------------------- try_claim
def test_committed_claim_is_one_session_message_to_the_leader() -> None:
    client, sent = connected_client()
    claim = client.try_claim(5, 10)
    assert claim.is_open and claim.length == 5 and bytes(claim.buffer) == bytes(5)
    assert sent == [], "nothing leaves before the commit"
    claim.buffer[1:4] = b"abc"
    handle = claim.commit()
    assert handle == 1 and not claim.is_open
    ((member, payload),) = sent
    assert member == 1
    assert unpack_session_message(payload) == (TERM, SESSION, 0, b"\x00abc\x00")


def test_aborted_claim_sends_nothing_and_is_spent() -> None:
    client, sent = connected_client()
    claim = client.try_claim(3, 10)
    claim.buffer[:] = b"xyz"
    claim.abort()
    assert sent == [] and not claim.is_open
    with pytest.raises(ClientError, match="already committed or aborted"):
        claim.commit()
    with pytest.raises(ClientError, match="already committed or aborted"):
        claim.abort()
    assert client.offer(b"next", 11) == 1, "an aborted claim takes no offer handle"


def test_claim_commit_is_once() -> None:
    client, sent = connected_client()
    claim = client.try_claim(1, 10)
    claim.commit()
    with pytest.raises(ClientError):
        claim.commit()
    assert len(sent) == 1


def test_claim_as_context_manager_commits_on_exit_and_aborts_on_error() -> None:
    client, sent = connected_client()
    with client.try_claim(2, 10) as claim:
        claim.buffer[:] = b"ok"
    assert len(sent) == 1 and unpack_session_message(sent[0][1])[3] == b"ok"
    with pytest.raises(ValueError, match="boom"), client.try_claim(2, 10) as failed:
        failed.buffer[:] = b"no"
        raise ValueError("boom")
    assert len(sent) == 1 and not failed.is_open
    with client.try_claim(2, 10) as aborted:
        aborted.abort()  # an explicit abort inside the block: the exit leaves it alone
    assert len(sent) == 1


def test_claim_carries_the_term_at_commit_time() -> None:
    """A NewLeaderEvent between claim and commit: the message goes to the new leader in the new term
    (the leader drops stale-term ingress)."""
    client, sent = connected_client()
    claim = client.try_claim(1, 10)
    client.on_egress(NewLeaderEvent(TERM + 1, SESSION, 2, "").encode(), 11)
    claim.buffer[0] = 7
    claim.commit()
    member, payload = sent[-1]
    assert member == 2 and unpack_session_message(payload)[:2] == (TERM + 1, SESSION)


def test_claim_with_request_id_is_outstanding_until_acknowledged() -> None:
    client, _sent = connected_client()
    with client.try_claim(1, 10, request_id=42) as claim:
        claim.buffer[0] = 1
    assert dict(client.outstanding) == {42: b"\x01"}
    assert client.acknowledge(42)


def test_try_claim_refused_when_not_open_or_negative() -> None:
    client = ClusterClient(3, "ipc://client-3", ENDPOINTS, lambda m, p: None)
    with pytest.raises(NotConnectedError):
        client.try_claim(1, 0)
    open_client, _sent = connected_client()
    with pytest.raises(ValueError, match="length=-1"):
        open_client.try_claim(-1, 0)
    claim = open_client.try_claim(1, 0)
    open_client.close(1)
    with pytest.raises(SessionClosedError):
        open_client.try_claim(1, 2)
    with pytest.raises(SessionClosedError):
        claim.commit()
    assert not claim.is_open


# ---------------------------------------------------------------------- controlled_poll
def test_abort_leaves_the_message_for_the_next_poll() -> None:
    client, _ = connected_client()
    deliver(client, b"a", b"b", b"c")
    seen: list[bytes] = []
    assert client.controlled_poll(scripted([ABORT], seen)) == 0
    assert client.egress_pending == 3
    assert client.controlled_poll(scripted([CONTINUE, ABORT], seen)) == 1
    assert client.controlled_poll(scripted([CONTINUE, CONTINUE], seen)) == 2
    assert seen == [b"a", b"a", b"b", b"b", b"c"]
    assert client.egress_pending == 0


def test_break_consumes_the_message_and_stops() -> None:
    client, _ = connected_client()
    deliver(client, b"a", b"b", b"c")
    seen: list[bytes] = []
    assert client.controlled_poll(scripted([COMMIT, BREAK], seen)) == 2
    assert seen == [b"a", b"b"]
    assert [m.payload for m in client.poll()] == [b"c"]


def test_controlled_poll_hands_out_at_most_the_fragment_limit() -> None:
    client, _ = connected_client()
    deliver(client, *[bytes([i]) for i in range(FRAGMENT_LIMIT + 3)])
    seen: list[bytes] = []
    assert client.controlled_poll(scripted([CONTINUE] * FRAGMENT_LIMIT, seen)) == FRAGMENT_LIMIT
    assert client.controlled_poll(scripted([CONTINUE] * 2, seen), fragment_limit=2) == 2
    assert client.egress_pending == 1
    with pytest.raises(ValueError, match="fragment_limit"):
        client.controlled_poll(scripted([], seen), fragment_limit=0)


def test_messages_arriving_after_an_abort_queue_behind_it() -> None:
    client, _ = connected_client()
    deliver(client, b"a")
    seen: list[bytes] = []
    assert client.controlled_poll(scripted([ABORT], seen)) == 0
    deliver(client, b"b")
    assert client.controlled_poll(scripted([CONTINUE, CONTINUE], seen)) == 2
    assert seen == [b"a", b"a", b"b"]


def test_handler_that_raises_keeps_its_message_and_a_wrong_return_is_named() -> None:
    client, _ = connected_client()
    deliver(client, b"a", b"b")

    def failing(message: EgressMessage) -> ControlledPollAction:
        if message.payload == b"b":
            raise RuntimeError("handler failed")
        return CONTINUE

    with pytest.raises(RuntimeError):
        client.controlled_poll(failing)
    assert [m.payload for m in client.poll()] == [b"b"], "a consumed, b kept"
    deliver(client, b"c")
    with pytest.raises(TypeError, match="ControlledPollAction"):
        client.controlled_poll(lambda m: True)  # type: ignore[arg-type, return-value]
    assert client.egress_pending == 1


def test_controlled_poll_over_a_plain_list() -> None:
    messages = [EgressMessage(SESSION, TERM, 0, bytes([i])) for i in range(3)]
    seen: list[bytes] = []
    assert controlled_poll(messages, scripted([CONTINUE, BREAK], seen)) == 2
    assert [m.payload for m in messages] == [b"\x02"]
