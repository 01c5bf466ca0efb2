"""The clustered services in the simulator: every service's state is the same at every log position,
through elections, snapshots and restarts, and the service <-> consensus
module conversation (docs/protocol.md b.13-b.15, e.11): JoinLog with the member's role, service-originated
messages appended exactly once, ClusterMembersQuery, and a service that throws.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import pytest
from clusterlab.core.codec.framing import HDR_TYPE_PAD
from clusterlab.core.codec.log_events import NewLeadershipTermEvent
from clusterlab.core.codec.service import ClusterMembersResponse
from clusterlab.core.codec.session import SessionMessageHeader
from clusterlab.core.consensus.context import MS, SECOND, Role, Timeouts
from clusterlab.core.service.agent import EntryType, ServiceError
from clusterlab.core.service.api import ClientSession
from clusterlab.harness.services import SERVICES, counter, kv
from clusterlab.harness.services.kv import KeyValueService
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_parts import SimClient

from tests.sim.conftest import SimKit
from tests.sim.digests import (
    assert_contiguous,
    assert_digests_agree_at_every_position,
    assert_services_agree,
    await_services_caught_up,
    incarnations,
    logged_everywhere,
    rows,
)

pytestmark = pytest.mark.sim

# One request of a workload: (payload, "is this received payload its reply?").
Request = tuple[bytes, Callable[[bytes], bool]]

T = Timeouts.fast()


def kv_request(i: int) -> Request:
    return kv.put(i, f"k{i % 4}", f"v{i}"), lambda p: kv.decode_reply(p).get("id") == i


def counter_request(i: int) -> Request:
    return counter.add(i, i + 1), lambda p: counter.decode_reply(p).get("id") == i


def echo_request(i: int) -> Request:
    """Echo, a service-originated offer, or a short timer, in turn."""
    kind = i % 3
    if kind == 0:
        text = f"hello-{i}".encode()
        return text, lambda p: p == text
    if kind == 1:
        return f"offer news-{i}".encode(), lambda p: p == f"broadcast news-{i}".encode()
    return f"timer t{i} 30".encode(), lambda p: p.startswith(f"timer t{i} fired".encode())


WORKLOADS: dict[str, Callable[[int], Request]] = {"kv": kv_request, "counter": counter_request, "echo": echo_request}


class Workload:
    """Numbered requests from one client, each waited for."""

    def __init__(self, c: SimCluster, make: Callable[[int], Request]) -> None:
        self.c = c
        self.make = make
        self.next_id = 0

    def run(self, client: SimClient, count: int) -> None:
        for _ in range(count):
            payload, is_reply = self.make(self.next_id)
            self.next_id += 1
            client.client.offer(payload, self.c.now_ns)
            self.c.await_condition(
                lambda is_reply=is_reply: any(is_reply(m.payload) for m in client.received),
                3 * SECOND,
                f"reply to {payload!r}",
            )


def positions_applied_by(c: SimCluster, member_id: int) -> set[int]:
    """Every log position the member's services applied (any incarnation), or restored a snapshot at."""
    return {e.log_position for e in rows(c, member_id=member_id)}


# ======================================================================================== same state everywhere


@pytest.mark.parametrize("service", ["kv", "counter", "echo"])
def test_every_service_has_the_same_state_digest_at_every_log_position_through_election_and_snapshot_restart(
    sim: SimKit, service: str
) -> None:
    c = sim.cluster(members=3, seed=51, service=service)
    workload = Workload(c, WORKLOADS[service])
    first_leader = c.await_leader()
    client = c.connect_client()
    workload.run(client, 6)

    # An election: the leader dies, the client follows the new one, the old one comes back.
    c.kill(first_leader)
    c.await_condition(lambda: c.leader_id() not in (None, first_leader), 5 * SECOND, "a new leader")
    second_leader = c.await_leader()
    c.await_condition(lambda: client.client.leader_member_id == second_leader, 5 * SECOND, "client follows")
    workload.run(client, 6)
    c.restart(first_leader)
    await_services_caught_up(c, 10 * SECOND)

    # A snapshot, more log after it, then the whole cluster restarts from it.
    assert c.control("snapshot")
    c.await_condition(lambda: all(c.member(m).snapshot_count == 1 for m in range(3)), 2 * SECOND, "snapshot")
    workload.run(client, 4)
    await_services_caught_up(c)
    for m in range(3):
        c.kill(m)
    for m in range(3):
        c.restart(m)
    c.await_leader()
    client = c.connect_client()  # the restart closed the old session (TIMEOUT)
    workload.run(client, 4)
    await_services_caught_up(c)
    sim.converge(c)

    states = assert_digests_agree_at_every_position(c)

    log = c.member(second_leader).archive.read_frames(0, c.member(second_leader).commit_position)
    entry_ends = {f.end_position for f in log if f.frame_type != HDR_TYPE_PAD}
    assert set(states) == entry_ends, "a state digest for every entry of the log, and nothing else"
    for m in range(3):
        assert positions_applied_by(c, m) >= entry_ends, f"member {m} skipped log positions"
    assert len(incarnations(c)) == 7, incarnations(c)  # 3 first runs, the old leader's return, 3 restarts
    terms = {ev.leadership_term_id for _, ev in logged_everywhere(c, NewLeadershipTermEvent)}
    assert len(terms) >= 3, f"cold start, election, restart: terms {terms}"
    snapshot_rows = rows(c, entry_type=EntryType.SNAPSHOT)
    assert {(e.log_position, e.state_digest) for e in snapshot_rows} == {
        (snapshot_rows[0].log_position, states[snapshot_rows[0].log_position])
    }
    assert len(snapshot_rows) == 3, "every member restarted from the snapshot"
    assert len(set(states.values())) >= 8, "the workload changed the state"
    for m in range(3):
        assert c.service(m).service.recompute_digest() == c.service(m).service.state_digest()
    if service == "echo":
        asked, offered = service_offers_in_the_log(c)
        assert offered == asked, f"service-originated messages exactly once: asked {asked}, log {offered}"
    assert_services_agree(c)
    assert_contiguous(c)


# ======================================================================================== service <-> module


def test_services_join_the_log_with_their_members_role_and_only_the_leader_sends_egress(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=52, service="echo")
    leader = c.await_leader()
    client = c.connect_client()
    client.client.offer(b"ping", c.now_ns)
    c.await_condition(lambda: len(client.received) == 1, 2 * SECOND, "echo")
    await_services_caught_up(c)
    assert {m: c.service(m).role for m in range(3)} == {m: c.member(m).role for m in range(3)}
    assert c.service(leader).role == Role.LEADER

    c.kill(leader)
    c.await_condition(lambda: c.leader_id() not in (None, leader), 5 * SECOND, "a new leader")
    new_leader = c.await_leader()
    c.await_condition(lambda: c.service(new_leader).role == Role.LEADER, 1 * SECOND, "new leader's service LEADER")
    c.await_condition(lambda: client.client.leader_member_id == new_leader, 5 * SECOND, "client follows")
    client.client.offer(b"pong", c.now_ns)
    c.await_condition(lambda: len(client.received) == 2, 2 * SECOND, "echo from the new leader")

    assert [m.payload for m in client.received] == [b"ping", b"pong"]
    assert {m: c.service(m).role for m in c.members_alive()} == {m: c.member(m).role for m in c.members_alive()}
    egress = [d for d, _ in sim.sent(c, SessionMessageHeader) if d.channel == "egress"]
    assert [d.src for d in egress] == [leader, new_leader], "only the leader's service sends egress"
    assert_digests_agree_at_every_position(c)


def service_offers_in_the_log(c: SimCluster) -> tuple[list[bytes], list[bytes]]:
    """(what clients asked the echo service to offer, what services offered into the log), from the
    committed log every live member agrees on."""
    messages = [msg for _, msg in logged_everywhere(c, SessionMessageHeader)]
    asked = [
        m.payload.removeprefix(b"offer ")
        for m in messages
        if m.cluster_session_id > 0 and m.payload.startswith(b"offer ")
    ]
    offered = [m.payload for m in messages if m.cluster_session_id < 0]
    return asked, offered


@pytest.mark.parametrize("seed", [53, 54, 55])
def test_service_originated_messages_are_appended_exactly_once_across_a_leader_change(sim: SimKit, seed: int) -> None:
    c = sim.cluster(members=3, seed=seed, service="echo")
    leader = c.await_leader()
    client = c.connect_client()
    for i in range(3):
        client.client.offer(f"offer before-{i}".encode(), c.now_ns)
    c.run_for(2 * MS)
    c.kill(leader)  # some offers may be pending in the consensus modules, or appended but not committed
    c.await_condition(lambda: c.leader_id() not in (None, leader), 5 * SECOND, "a new leader")
    new_leader = c.await_leader()
    c.await_condition(lambda: client.client.leader_member_id == new_leader, 5 * SECOND, "client follows")
    for i in range(3):
        client.client.offer(f"offer after-{i}".encode(), c.now_ns)
    c.await_condition(
        lambda: sum(m.payload.startswith(b"broadcast after") for m in client.received) == 3,
        2 * SECOND,
        "the after-offers broadcast",
    )
    await_services_caught_up(c)
    sim.converge(c)

    asked, offered = service_offers_in_the_log(c)
    assert offered == asked, "each offer the services made is in the log once, in order"
    assert [f"after-{i}".encode() for i in range(3)] == asked[-3:]
    ids = [m.cluster_session_id for _, m in logged_everywhere(c, SessionMessageHeader) if m.cluster_session_id < 0]
    assert ids == sorted(set(ids)), "service session ids are distinct and increasing"
    for m in c.members_alive():
        assert len(c.member(m).pending_service_messages[0]) == 0, f"member {m} still holds offers"
        assert c.service(m).service.broadcasts == len(asked)
    assert_digests_agree_at_every_position(c)


@pytest.mark.parametrize("from_snapshot", [False, True], ids=["replay-whole-log", "replay-after-snapshot"])
def test_a_member_that_replays_service_offers_does_not_append_them_again(sim: SimKit, from_snapshot: bool) -> None:
    # A consensus module replaying the log ahead of its service (restart) must not give the service's
    # re-offers fresh ids and append them again: service_link follows Aeron's
    # PendingServiceMessageTracker rule, ids <= the log's are dropped.
    c = sim.cluster(members=3, seed=58, service="echo")
    c.await_leader()
    client = c.connect_client()
    if from_snapshot:
        assert c.control("snapshot")
        c.await_condition(lambda: all(c.member(m).snapshot_count == 1 for m in range(3)), 2 * SECOND, "snapshot")
    for i in range(3):
        client.client.offer(f"offer before-{i}".encode(), c.now_ns)
    c.await_condition(
        lambda: sum(m.payload.startswith(b"broadcast") for m in client.received) == 3,
        2 * SECOND,
        "the offers broadcast",
    )
    await_services_caught_up(c)
    asked, offered = service_offers_in_the_log(c)
    assert offered == asked, "exactly once before the restart"

    for m in range(3):
        c.kill(m)
    for m in range(3):
        c.restart(m)  # every member replays the log, service offers included
    c.await_leader()
    c.run_for(1 * SECOND)
    await_services_caught_up(c)
    sim.converge(c)

    asked, offered = service_offers_in_the_log(c)
    assert offered == asked, f"services offered {asked}, the log holds {offered}"
    for m in range(3):
        assert list(c.member(m).pending_service_messages[0]) == [], f"member {m} holds phantom offers"


def test_service_queries_the_cluster_members(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=56, service="kv")
    leader = c.await_leader()
    await_services_caught_up(c)

    for m in range(3):
        c.service(m).query_cluster_members(100 + m)
    c.run_for(T.leader_heartbeat_interval_ns)  # the queries go out at the next duty cycle

    for m in range(3):
        answer = c.service(m).cluster_members
        assert isinstance(answer, ClusterMembersResponse), answer
        assert answer.correlation_id == 100 + m
        assert answer.leader_member_id == leader
        assert answer.active_members.split("|") == [cm.describe() for cm in c.cluster_members]


# ======================================================================================== a service that throws


class FailingKv(KeyValueService):
    """The kv store with a bug: on the members in ``failing_members`` the command ``boom`` raises
    (elsewhere it is just a bad request). Deterministic per member, like a bug in one node's build."""

    failing_members: ClassVar[set[int]] = set()

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        if payload == b"boom" and self.cluster is not None and self.cluster.member_id in self.failing_members:
            raise RuntimeError("boom: the service's bug")
        super().on_session_message(session, timestamp, payload)


@pytest.mark.parametrize("who", ["follower", "leader"])
def test_service_exception_is_a_clear_error_and_the_log_stays_intact_and_the_member_recovers(
    sim: SimKit, monkeypatch: pytest.MonkeyPatch, who: str
) -> None:
    monkeypatch.setitem(SERVICES, "failing-kv", FailingKv)
    monkeypatch.setattr(FailingKv, "failing_members", set())
    c = sim.cluster(members=3, seed=57, service="failing-kv")
    leader = c.await_leader()
    bad = leader if who == "leader" else next(m for m in range(3) if m != leader)
    FailingKv.failing_members.add(bad)
    client = c.connect_client()
    client.client.offer(kv.put(1, "k", "before"), c.now_ns)
    c.await_condition(lambda: len(client.received) == 1, 2 * SECOND, "put acknowledged")
    good_before = await_services_caught_up(c)

    client.client.offer(b"boom", c.now_ns)
    with pytest.raises(ServiceError) as raised:
        c.run_for(1 * SECOND)

    err = raised.value
    assert err.entry_type == EntryType.SESSION_MESSAGE and isinstance(err.cause, RuntimeError)
    assert f"service failed at log position {err.log_position} (SessionMessage)" in str(err)
    assert any(f"seed={c.seed}" in note for note in getattr(err, "__notes__", [])), "the failure names its seed"
    agent = c.service(bad)
    assert agent.failure is err and agent.log_position == good_before, "nothing of the failed entry was applied"
    assert all(e.log_position < err.log_position for e in rows(c, member_id=bad)), "no applied row for it"

    # The member's service is dead: the member stops. The others carry on; the log is intact.
    c.kill(bad)
    c.await_leader(5 * SECOND)
    await_services_caught_up(c)
    sim.check(c)
    boom = [p for p, msg in logged_everywhere(c, SessionMessageHeader) if msg.payload == b"boom"]
    assert boom == [err.log_position], "the entry is committed once, where the error says"
    if who == "leader":
        c.await_condition(lambda: client.client.leader_member_id == c.leader_id(), 5 * SECOND, "client follows")
    client.client.offer(kv.put(2, "k", "after"), c.now_ns)
    c.await_condition(lambda: len(client.received) >= 2, 3 * SECOND, "put after the failure acknowledged")

    # Fixed and restarted, it replays the log past the entry that broke it and agrees with the others.
    FailingKv.failing_members.clear()
    c.restart(bad)
    await_services_caught_up(c, 10 * SECOND)
    sim.converge(c)
    assert err.log_position in {e.log_position for e in rows(c, member_id=bad, incarnation=1)}
    assert all(c.service(m).service.entries["k"][0] == "after" for m in range(3))
    assert_services_agree(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)
