"""Client sessions in the simulator, told the way docs/protocol.md b.12 and e.9 tell them: a client
connects, the leader appends SessionOpenEvent, every member and every service learns the session
from the log; keep-alives hold it open; it closes by the client, by the service, by timeout, or by a
whole-cluster restart; a follower redirects; the leader refuses past the session limit; the
credentials authenticator challenges and accepts or rejects; a client follows a new leader.

Each scenario ends by checking that every member's committed log and every service agree
(``tests/sim/digests.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clusterlab.core.client.client import ClusterClient
from clusterlab.core.client.errors import ConnectError
from clusterlab.core.codec.enums import CloseReason, EventCode
from clusterlab.core.codec.log_events import NewLeadershipTermEvent, SessionCloseEvent, SessionOpenEvent
from clusterlab.core.codec.session import (
    Challenge,
    NewLeaderEvent,
    SessionEvent,
    SessionKeepAlive,
    SessionMessageHeader,
)
from clusterlab.core.consensus.authenticator import CredentialsAuthenticator
from clusterlab.core.consensus.context import (
    MS,
    SECOND,
    Channel,
    ConsensusModuleContext,
    ConsensusModuleState,
    Timeouts,
)
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.service.agent import EntryType
from clusterlab.harness.services import kv
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_parts import SimClient, client_response_channel

from tests.sim.conftest import SimKit
from tests.sim.digests import (
    assert_contiguous,
    assert_digests_agree_at_every_position,
    assert_services_agree,
    await_services_caught_up,
    logged,
    logged_everywhere,
    rows,
)

pytestmark = pytest.mark.sim

T = Timeouts.fast()
USERS = {"alice": "wonderland", "bob": "builder"}


# ---------------------------------------------------------------------------------------- helpers


def open_sessions_everywhere(c: SimCluster, cluster_session_id: int) -> None:
    """Every live member's consensus module and service hold the session as open."""
    for m in c.members_alive():
        assert cluster_session_id in c.member(m).sessions, f"member {m} lacks session {cluster_session_id}"
        assert c.service(m).get_client_session(cluster_session_id) is not None, (
            f"member {m}'s service lacks session {cluster_session_id}"
        )


def closed_everywhere(c: SimCluster, cluster_session_id: int) -> None:
    for m in c.members_alive():
        assert cluster_session_id not in c.member(m).sessions, f"member {m} still holds session {cluster_session_id}"
        assert c.service(m).get_client_session(cluster_session_id) is None, (
            f"member {m}'s service still holds session {cluster_session_id}"
        )


def close_events(c: SimCluster, cluster_session_id: int) -> list[SessionCloseEvent]:
    """The SessionCloseEvents for the session in the committed log, the same on every live member."""
    return [ev for _, ev in logged_everywhere(c, SessionCloseEvent) if ev.cluster_session_id == cluster_session_id]


def kv_request(
    c: SimCluster, client: SimClient, payload: bytes, request_id: int, timeout_ns: int = 2 * SECOND
) -> dict[str, object]:
    """Offer a kv command and wait for its reply."""
    client.client.offer(payload, c.now_ns)
    replies: list[dict[str, object]] = []

    def answered() -> bool:
        replies[:] = [r for r in (kv.decode_reply(m.payload) for m in client.received) if r.get("id") == request_id]
        return bool(replies)

    c.await_condition(answered, timeout_ns, f"reply to kv request {request_id}")
    return replies[0]


def add_challenge_client(c: SimCluster, user: str, password: str) -> SimClient:
    """A client that connects as ``user`` and answers the cluster's Challenge with the password
    (SimCluster.add_client has no on_challenge hook, so the SimClient gets a ClusterClient that has)."""
    client = c.add_client(credentials=user.encode())
    client.client = ClusterClient(
        client.client_id,
        client_response_channel(client.client_id),
        {m: f"sim-member:{m}" for m in range(c.member_count)},
        lambda member_id, payload: c.network.send(c.now_ns, client.network_id, member_id, Channel.INGRESS, payload),
        credentials=user.encode(),
        on_challenge=lambda nonce: CredentialsAuthenticator.response(user, password, nonce),
    )
    return client


def await_connect_outcome(c: SimCluster, client: SimClient, timeout_ns: int = 10 * SECOND) -> None:
    client.client.connect(c.now_ns)
    c.await_condition(lambda: client.client.is_connected or bool(client.errors), timeout_ns, "connect outcome")


def sessions_limited_to(limit: int) -> Callable[[ConsensusModuleContext], ConsensusModule]:
    """A member factory: the real ConsensusModule with ``max_concurrent_sessions`` = ``limit``."""

    def factory(ctx: ConsensusModuleContext) -> ConsensusModule:
        ctx.max_concurrent_sessions = limit
        return ConsensusModule(ctx)

    return factory


# ---------------------------------------------------------------------------------------- open


def test_connect_request_appends_session_open_event_seen_by_every_member_and_service(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=1, service="kv")
    leader = c.await_leader()

    client = c.connect_client()

    session_id = client.client.cluster_session_id
    assert client.client.leader_member_id == leader
    position = await_services_caught_up(c)
    opens = logged_everywhere(c, SessionOpenEvent)
    assert [ev.cluster_session_id for _, ev in opens] == [session_id]
    open_position, ev = opens[0]
    assert ev.response_channel == client.client.response_channel
    assert ev.leadership_term_id == c.member(leader).leadership_term_id
    assert ev.correlation_id == c.member(leader).sessions[session_id].correlation_id
    open_sessions_everywhere(c, session_id)
    for m in range(3):
        assert c.member(m).sessions[session_id].opened_log_position == open_position
        opened = rows(c, member_id=m, entry_type=EntryType.SESSION_OPEN)
        assert [e.log_position for e in opened] == [open_position]
    # The OK came from the leader, answering the connect's correlation id.
    oks = [msg for _, msg in sim.sent(c, SessionEvent, src=leader) if msg.code == EventCode.OK]
    assert [msg.cluster_session_id for msg in oks] == [session_id]
    # A session message is stamped by the leader with its term and cluster time.
    assert kv_request(c, client, kv.put(1, "k", "v"), 1)["ok"] is True
    await_services_caught_up(c)
    stamped = [msg for _, msg in logged_everywhere(c, SessionMessageHeader) if msg.cluster_session_id == session_id]
    assert len(stamped) == 1
    assert stamped[0].leadership_term_id == ev.leadership_term_id
    assert stamped[0].timestamp >= ev.timestamp > 0
    assert c.member(leader).commit_position > position
    sim.converge(c)
    assert_digests_agree_at_every_position(c)


# ---------------------------------------------------------------------------------------- keep-alive


def test_keep_alives_hold_an_idle_session_open_past_the_session_timeout(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=2, service="kv")
    c.await_leader()
    client = c.connect_client()  # keep-alive every second
    session_id = client.client.cluster_session_id

    c.run_for(3 * T.session_timeout_ns)

    assert client.client.is_connected, client.client.describe()
    keep_alives = [msg for d, msg in sim.sent(c, SessionKeepAlive) if d.src == client.network_id]
    assert len(keep_alives) >= 3 * T.session_timeout_ns // SECOND - 1
    assert {msg.cluster_session_id for msg in keep_alives} == {session_id}
    assert close_events(c, session_id) == []
    open_sessions_everywhere(c, session_id)
    assert c.member(c.await_leader()).timed_out_client_count == 0


def test_idle_session_without_keep_alives_times_out_with_session_close_event_timeout(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=3, service="kv")
    leader = c.await_leader()
    client = c.add_client(keepalive_interval_ns=None)
    await_connect_outcome(c, client)
    session_id = client.client.cluster_session_id

    c.await_condition(lambda: client.client.is_closed, 2 * T.session_timeout_ns, "the session timed out")

    assert client.client.close_reason == CloseReason.TIMEOUT
    await_services_caught_up(c)
    [closed] = close_events(c, session_id)
    assert closed.close_reason == CloseReason.TIMEOUT
    [(_, opened)] = logged_everywhere(c, SessionOpenEvent)
    idle_ms = closed.timestamp - opened.timestamp
    # Closed by the leader's session checker once idle for the session timeout, not before, and within
    # one duty cycle after (cluster time is in ms).
    assert T.session_timeout_ns // MS <= idle_ms <= (T.session_timeout_ns + T.leader_heartbeat_interval_ns) // MS
    closed_everywhere(c, session_id)
    assert c.member(leader).timed_out_client_count == 1
    for m in range(3):
        assert len(rows(c, member_id=m, entry_type=EntryType.SESSION_CLOSE)) == 1
    assert_digests_agree_at_every_position(c)


# ---------------------------------------------------------------------------------------- close


def test_client_close_request_appends_session_close_event_client_action(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=4, service="kv")
    c.await_leader()
    client = c.connect_client()
    session_id = client.client.cluster_session_id
    await_services_caught_up(c)
    open_sessions_everywhere(c, session_id)

    client.client.close(c.now_ns)
    c.await_condition(
        lambda: all(session_id not in c.member(m).sessions for m in range(3)), 2 * SECOND, "session closed everywhere"
    )

    await_services_caught_up(c)
    assert [ev.close_reason for ev in close_events(c, session_id)] == [CloseReason.CLIENT_ACTION]
    closed_everywhere(c, session_id)
    assert client.client.close_reason == CloseReason.CLIENT_ACTION
    assert_digests_agree_at_every_position(c)


def test_a_close_requested_while_the_leader_snapshots_is_appended_after_the_snapshot(sim: SimKit) -> None:
    """Aeron takes no ingress while the module is not ACTIVE: a SessionClose appended past the snapshot's
    position would leave the snapshot without a session the log still has open there (the trace check
    open_sessions_agree; found on one-process members by the backup-restore scenario)."""
    c = sim.cluster(members=3, seed=4, service="kv")
    leader = c.await_leader()
    client = c.connect_client()
    session_id = client.client.cluster_session_id
    await_services_caught_up(c)
    assert c.control("snapshot")
    c.await_condition(lambda: c.member(leader).state == ConsensusModuleState.SNAPSHOT, SECOND, "snapshotting")
    client.client.close(c.now_ns)
    c.run_until(lambda: c.member(leader).state == ConsensusModuleState.ACTIVE, 2 * SECOND)

    [taken] = [e for e in c.events if e["kind"] == "snapshot" and e["member_id"] == leader]
    assert taken["detail"]["module_state"]["sessions"] == 1, "the snapshot holds the session still open in the log"
    c.await_condition(
        lambda: all(session_id not in c.member(m).sessions for m in range(3)), 2 * SECOND, "session closed everywhere"
    )
    [(closed_at, _)] = [
        (p, ev) for p, ev in logged_everywhere(c, SessionCloseEvent) if ev.cluster_session_id == session_id
    ]
    assert closed_at > taken["log_position"]
    assert client.client.close_reason == CloseReason.CLIENT_ACTION


def test_service_closing_a_session_appends_service_action_and_the_client_sees_closed(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=5, service="echo")
    leader = c.await_leader()
    client = c.connect_client()
    session_id = client.client.cluster_session_id

    client.client.offer(b"close", c.now_ns)  # the echo service calls Cluster.close_client_session
    c.await_condition(lambda: client.client.is_closed, 2 * SECOND, "the client saw CLOSED")

    assert client.client.close_reason == CloseReason.SERVICE_ACTION
    closed_by_leader = [
        msg
        for _, msg in sim.sent(c, SessionEvent, src=leader)
        if msg.code == EventCode.CLOSED and msg.cluster_session_id == session_id
    ]
    assert [msg.detail for msg in closed_by_leader] == ["SERVICE_ACTION"]
    await_services_caught_up(c)
    assert [ev.close_reason for ev in close_events(c, session_id)] == [CloseReason.SERVICE_ACTION]
    closed_everywhere(c, session_id)
    assert_digests_agree_at_every_position(c)


# ---------------------------------------------------------------------------------------- redirect


def test_follower_answers_connect_with_redirect_and_the_client_connects_to_the_leader(sim: SimKit) -> None:
    # The client tries member 0 first; member 2 is appointed leader, so member 0 is a follower.
    c = sim.cluster(members=3, seed=6, service="kv", appointed_leader_id=2)
    assert c.await_leader() == 2
    await_services_caught_up(c)

    client = c.connect_client()

    redirects = [msg for _, msg in sim.sent(c, SessionEvent, src=0) if msg.code == EventCode.REDIRECT]
    assert len(redirects) == 1
    assert redirects[0].leader_member_id == 2
    assert redirects[0].detail == c.member(0).ingress_endpoints()
    assert client.client.leader_member_id == 2
    assert [msg.code for _, msg in sim.sent(c, SessionEvent, src=2)] == [EventCode.OK]
    assert kv_request(c, client, kv.put(1, "k", "v"), 1)["ok"] is True
    await_services_caught_up(c)
    open_sessions_everywhere(c, client.client.cluster_session_id)
    assert_digests_agree_at_every_position(c)


# ---------------------------------------------------------------------------------------- limit


def test_connect_beyond_max_concurrent_sessions_is_refused_with_error(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=7, service="kv", member_factory=sessions_limited_to(2))
    c.await_leader()
    first = c.connect_client()
    c.connect_client()

    with pytest.raises(ConnectError) as refused:
        c.connect_client()

    assert refused.value.code == EventCode.ERROR
    assert refused.value.detail == "concurrent session limit"
    await_services_caught_up(c)
    assert len(logged_everywhere(c, SessionOpenEvent)) == 2
    # The limit counts concurrent sessions: once one closes, a new client gets in.
    first.client.close(c.now_ns)
    c.await_condition(lambda: all(len(c.member(m).sessions) == 1 for m in range(3)), 2 * SECOND, "one closed")
    c.connect_client()
    await_services_caught_up(c)
    assert len(logged_everywhere(c, SessionOpenEvent)) == 3
    assert_digests_agree_at_every_position(c)


# ---------------------------------------------------------------------------------------- restart


def test_whole_cluster_restart_closes_recovered_sessions_with_timeout(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=8, service="kv")
    c.await_leader()
    client = c.connect_client()
    session_id = client.client.cluster_session_id
    assert kv_request(c, client, kv.put(1, "k", "v"), 1)["ok"] is True
    await_services_caught_up(c)
    before = assert_services_agree(c)

    for m in range(3):
        c.kill(m)
    for m in range(3):
        c.restart(m)
    new_leader = c.await_leader()
    c.await_condition(lambda: client.client.is_closed, 2 * SECOND, "the client saw CLOSED after the restart")

    assert client.client.close_reason == CloseReason.TIMEOUT
    await_services_caught_up(c)
    closes = [(p, ev) for p, ev in logged_everywhere(c, SessionCloseEvent) if ev.cluster_session_id == session_id]
    assert [ev.close_reason for _, ev in closes] == [CloseReason.TIMEOUT]
    # The close belongs to the new term: after that term's NewLeadershipTermEvent.
    new_term = c.member(new_leader).leadership_term_id
    term_start = [p for p, ev in logged(c, new_leader, NewLeadershipTermEvent) if ev.leadership_term_id == new_term]
    assert closes[0][1].leadership_term_id == new_term and closes[0][0] > term_start[0]
    closed_everywhere(c, session_id)
    # The restarted services replayed to the same state (the put survived), then applied the close.
    for m in range(3):
        replayed = rows(c, member_id=m, incarnation=1)
        assert any(e.state_digest == before for e in replayed)
    assert_services_agree(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)


def test_session_opened_but_never_committed_is_closed_with_election_when_the_leader_is_cut_off(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=13, service="kv")
    leader = c.await_leader()
    await_services_caught_up(c)
    for m in range(3):
        if m != leader:
            c.block(leader, m)  # the leader hears everyone but its log reaches nobody

    client = c.connect_client()  # the leader answers OK before the open is committed (b.12)

    session_id = client.client.cluster_session_id
    assert c.member(leader).sessions[session_id].opened_log_position > c.member(leader).commit_position
    c.await_condition(lambda: client.client.is_closed, 5 * SECOND, "the client saw CLOSED")
    assert client.client.close_detail == "closed by the cluster: election"
    closed = [msg for _, msg in sim.sent(c, SessionEvent, src=leader) if msg.code == EventCode.CLOSED]
    assert [(msg.cluster_session_id, msg.detail) for msg in closed] == [(session_id, "election")]
    c.heal()
    await_services_caught_up(c, 10 * SECOND)
    sim.converge(c)
    assert logged_everywhere(c, SessionOpenEvent) == [], "the uncommitted open is gone from every log"
    assert all(c.member(m).sessions == {} for m in range(3))
    assert all(rows(c, entry_type=t) == [] for t in (EntryType.SESSION_OPEN, EntryType.SESSION_CLOSE))
    assert_digests_agree_at_every_position(c)


def test_sessions_survive_snapshot_restore_and_follow_a_leader_that_restored_them(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=14, service="kv")
    leader = c.await_leader()
    client = c.connect_client()
    session_id = client.client.cluster_session_id
    assert kv_request(c, client, kv.put(1, "k", "one"), 1)["ok"] is True
    assert c.control("snapshot")
    c.await_condition(lambda: all(c.member(m).snapshot_count == 1 for m in range(3)), 2 * SECOND, "snapshot")
    assert kv_request(c, client, kv.put(2, "k", "two"), 2)["ok"] is True

    for m in range(3):  # every follower restarts from the snapshot, one at a time
        if m != leader:
            c.restart(m)
            await_services_caught_up(c, 5 * SECOND)
            assert rows(c, member_id=m, incarnation=1)[0].entry_type == EntryType.SNAPSHOT
            assert session_id in c.member(m).sessions, "the consensus module's snapshot holds the session"
            assert c.service(m).get_client_session(session_id) is not None, "so does the service's"
    c.kill(leader)
    c.await_condition(lambda: c.leader_id() not in (None, leader), 5 * SECOND, "a new leader")
    new_leader = c.await_leader()
    c.await_condition(lambda: client.client.leader_member_id == new_leader, 5 * SECOND, "client follows")

    assert client.client.cluster_session_id == session_id
    reply = kv_request(c, client, kv.put(3, "k", "three"), 3)  # answered by a service restored from the snapshot
    assert (reply["ok"], reply["value"]) == (True, "two")
    c.restart(leader)
    await_services_caught_up(c, 10 * SECOND)
    sim.converge(c)
    open_sessions_everywhere(c, session_id)
    assert_services_agree(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)


def test_credentials_authenticator_accepts_the_right_password_and_logs_the_principal(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=9, service="kv", authenticator_factory=lambda: CredentialsAuthenticator(USERS))
    leader = c.await_leader()
    client = add_challenge_client(c, "alice", "wonderland")

    await_connect_outcome(c, client)

    assert client.errors == [] and client.client.is_connected
    session_id = client.client.cluster_session_id
    challenges = [msg for _, msg in sim.sent(c, Challenge, src=leader)]
    assert [msg.cluster_session_id for msg in challenges] == [session_id]
    await_services_caught_up(c)
    opens = logged_everywhere(c, SessionOpenEvent)
    assert [(ev.cluster_session_id, ev.encoded_principal) for _, ev in opens] == [(session_id, b"alice")]
    for m in range(3):
        assert c.member(m).sessions[session_id].encoded_principal == b"alice"
        session = c.service(m).get_client_session(session_id)
        assert session is not None and session.encoded_principal == b"alice"
    assert kv_request(c, client, kv.put(1, "k", "v"), 1)["ok"] is True
    assert_digests_agree_at_every_position(c)


@pytest.mark.parametrize(("user", "password"), [("alice", "looking-glass"), ("mallory", "wonderland")])
def test_credentials_authenticator_rejects_wrong_credentials(sim: SimKit, user: str, password: str) -> None:
    c = sim.cluster(members=3, seed=10, service="kv", authenticator_factory=lambda: CredentialsAuthenticator(USERS))
    leader = c.await_leader()
    client = add_challenge_client(c, user, password)

    await_connect_outcome(c, client)

    assert len(client.errors) == 1 and isinstance(client.errors[0], ConnectError), client.errors
    assert client.errors[0].code == EventCode.AUTHENTICATION_REJECTED
    assert client.client.is_closed
    rejected = [
        msg for _, msg in sim.sent(c, SessionEvent, src=leader) if msg.code == EventCode.AUTHENTICATION_REJECTED
    ]
    assert len(rejected) == 1
    # A known user is challenged first; an unknown one is rejected at once.
    assert len(sim.sent(c, Challenge, src=leader)) == (1 if user in USERS else 0)
    c.run_for(200 * MS)
    sim.converge(c)
    assert logged_everywhere(c, SessionOpenEvent) == []
    assert all(c.member(m).sessions == {} for m in range(3))
    assert c.member(leader).pending_sessions == []
    # The right user still gets in afterwards.
    good = add_challenge_client(c, "bob", "builder")
    await_connect_outcome(c, good)
    assert good.client.is_connected, good.errors


# ---------------------------------------------------------------------------------------- new leader


@pytest.mark.parametrize("seed", [11, 12])
def test_client_follows_a_new_leader_without_losing_an_acknowledged_put(sim: SimKit, seed: int) -> None:
    c = sim.cluster(members=3, seed=seed, service="kv")
    old_leader = c.await_leader()
    client = c.connect_client()
    session_id = client.client.cluster_session_id
    acked: dict[str, str] = {}
    for i in range(5):
        if kv_request(c, client, kv.put(i, f"k{i}", f"v{i}"), i)["ok"] is True:
            acked[f"k{i}"] = f"v{i}"
    # Offers in flight when the leader dies: these may or may not survive, but must not be torn.
    for i in range(5, 8):
        client.client.offer(kv.put(i, f"k{i}", f"v{i}"), c.now_ns)
    c.run_for(1 * MS)

    c.kill(old_leader)
    new_leader = c.await_leader(5 * SECOND)
    assert new_leader != old_leader
    c.await_condition(lambda: client.client.leader_member_id == new_leader, 5 * SECOND, "client follows")

    new_leader_events = [msg for _, msg in sim.sent(c, NewLeaderEvent, src=new_leader)]
    assert [msg.cluster_session_id for msg in new_leader_events] == [session_id]
    assert client.client.cluster_session_id == session_id  # same session, no re-authentication
    assert client.client.leadership_term_id == c.member(new_leader).leadership_term_id
    for i in range(8, 12):
        reply = kv_request(c, client, kv.put(i, f"k{i}", f"v{i}"), i)
        assert reply["ok"] is True, reply
        acked[f"k{i}"] = f"v{i}"
    c.restart(old_leader)
    await_services_caught_up(c, 10 * SECOND)
    sim.converge(c)
    for m in range(3):
        entries = c.service(m).service.entries
        missing = {k: v for k, v in acked.items() if entries.get(k, (None,))[0] != v}
        assert not missing, f"member {m} lost acknowledged puts {missing}"
    assert_services_agree(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)
    assert client.client.leader_changes >= 1


def test_unexpected_message_on_leader_ingress_is_ignored_with_a_counted_reason(sim: SimKit) -> None:
    from clusterlab.core.codec.consensus import CommitPosition
    from clusterlab.core.consensus.context import Channel

    c = sim.cluster(members=3, seed=4, service="kv")
    leader = c.await_leader()
    m = c.member(leader)
    bogus = CommitPosition(leadership_term_id=0, log_position=0, leader_member_id=leader).encode()
    m.on_message(-1, Channel.INGRESS, bogus, c.now_ns)
    assert m.ignored.get("ingress: unexpected CommitPosition") == 1
    c.run_for(100_000_000)
    assert c.leader_id() == leader, "the leader keeps serving"
