"""Timers and cluster control in the simulator, as docs/protocol.md e.8 and e.10 tell them.

Timers: a service schedules a timer (ScheduleTimer to every member's consensus module); only the
leader fires it, appending a TimerEvent; every service applies that TimerEvent at the same log
position; followers cancel theirs when they read it. A leader that dies or is cut off before or
around the deadline does not make the timer fire twice or never.

Cluster control: the leader's toggle turns into a ClusterActionRequest in the log (SUSPEND, RESUME,
SNAPSHOT) or an orderly termination (SHUTDOWN = snapshot then stop, ABORT = stop), at the same
position on every member.
"""

from __future__ import annotations

import pytest
from clusterlab.core.codec.enums import AdminRequestType, AdminResponseCode, ClusterAction, ToggleState
from clusterlab.core.codec.log_events import ClusterActionRequest, TimerEvent
from clusterlab.core.codec.session import SessionMessageHeader
from clusterlab.core.consensus.context import (
    MS,
    SECOND,
    SERVICE_ID_CONSENSUS_MODULE,
    ConsensusModuleContext,
    ConsensusModuleState,
    Role,
    Timeouts,
)
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.recording_log import EntryType as RecordingEntryType
from clusterlab.core.service.agent import EntryType
from clusterlab.harness.services import kv
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_parts import SimClient

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


# ---------------------------------------------------------------------------------------- helpers


def echo_request(
    c: SimCluster, client: SimClient, command: str, expect_prefix: str, timeout_ns: int = 2 * SECOND
) -> str:
    """Offer an echo command and wait for the reply starting with ``expect_prefix``."""
    client.client.offer(command.encode(), c.now_ns)
    return await_reply(c, client, expect_prefix, timeout_ns)


def await_reply(c: SimCluster, client: SimClient, prefix: str, timeout_ns: int = 2 * SECOND) -> str:
    found: list[str] = []

    def arrived() -> bool:
        found[:] = [m.payload.decode() for m in client.received if m.payload.decode().startswith(prefix)]
        return bool(found)

    c.await_condition(arrived, timeout_ns, f"a reply starting {prefix!r}")
    return found[0]


def timer_rows(c: SimCluster) -> dict[tuple[int, int], list[int]]:
    """{(member, incarnation): log positions of its applied Timer rows}."""
    out: dict[tuple[int, int], list[int]] = {}
    for r in c.applied:
        key = (r["member_id"], r["incarnation"])
        out.setdefault(key, [])
        if r["entry"].entry_type == EntryType.TIMER:
            out[key].append(r["entry"].log_position)
    return out


def schedule(c: SimCluster, client: SimClient, timer_id: str, delay_ms: int) -> int:
    """Schedule an echo timer; returns its deadline (cluster ms)."""
    reply = echo_request(c, client, f"timer {timer_id} {delay_ms}", f"timer {timer_id} scheduled")
    return int(reply.rsplit(" ", 1)[1])


def cluster_ms(c: SimCluster) -> int:
    return c.now_ns // MS


def action_positions(c: SimCluster, action: ClusterAction) -> list[int]:
    """Where ``action`` sits in the committed log, the same on every live member."""
    return [p for p, ev in logged_everywhere(c, ClusterActionRequest) if ev.action == action]


def all_terminated(c: SimCluster) -> bool:
    return all(c.member(m).terminated for m in range(c.member_count))


def stop_positions(c: SimCluster) -> dict[int, int]:
    """{member: position} of each member's latest termination ("stop" event)."""
    out: dict[int, int] = {}
    for e in c.events:
        if e["kind"] == "stop" and e["source"].startswith("node-") and e["detail"].get("reason") == "termination":
            out[e["member_id"]] = e["log_position"]
    return out


def snapshot_entries(c: SimCluster, member_id: int) -> list[tuple[int, int, bool]]:
    """(service id, log position, valid) of the member's SNAPSHOT entries in its recording log."""
    return [
        (e.service_id, e.log_position, e.is_valid)
        for e in c.member(member_id).recording_log.entries()
        if e.type == RecordingEntryType.SNAPSHOT
    ]


def restart_all(c: SimCluster) -> None:
    for m in range(c.member_count):
        c.restart(m)  # a running (terminated) member is killed first


# ======================================================================================== timers


def test_timer_fires_once_at_the_same_log_position_on_every_member(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=21, service="echo")
    leader = c.await_leader()
    client = c.connect_client()

    deadline = schedule(c, client, "t1", 200)
    await_services_caught_up(c)
    assert all(1 in c.member(m).timer_service for m in range(3)), "every member's CM holds the timer"
    fired = await_reply(c, client, "timer t1 fired")

    assert int(fired.rsplit(" ", 1)[1]) >= deadline
    await_services_caught_up(c)
    timer_events = logged_everywhere(c, TimerEvent)
    assert [(ev.correlation_id, ev.leadership_term_id) for _, ev in timer_events] == [
        (1, c.member(leader).leadership_term_id)
    ]
    assert timer_events[0][1].timestamp >= deadline
    assert timer_rows(c) == {(m, 0): [timer_events[0][0]] for m in range(3)}
    assert all(len(c.member(m).timer_service) == 0 for m in range(3)), "followers cancelled theirs on reading it"
    assert_digests_agree_at_every_position(c)


def test_cancelled_timer_never_fires(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=22, service="echo")
    c.await_leader()
    client = c.connect_client()
    deadline = schedule(c, client, "t1", 300)

    assert echo_request(c, client, "cancel t1", "cancel t1") == "cancel t1 ok"
    c.run_until_time((deadline + 500) * MS)

    await_services_caught_up(c)
    assert logged_everywhere(c, TimerEvent) == []
    assert all(len(c.member(m).timer_service) == 0 for m in range(3)), "CancelTimer reached every member's CM"
    assert not any(m.payload.startswith(b"timer t1 fired") for m in client.received)
    assert_digests_agree_at_every_position(c)


@pytest.mark.parametrize("seed", [23, 24, 25])
def test_timer_fires_exactly_once_when_the_leader_dies_before_its_deadline(sim: SimKit, seed: int) -> None:
    c = sim.cluster(members=3, seed=seed, service="echo")
    old_leader = c.await_leader()
    client = c.connect_client()
    deadline = schedule(c, client, "t1", 1500)
    await_services_caught_up(c)
    assert cluster_ms(c) < deadline

    c.kill(old_leader)
    new_leader = c.await_leader(5 * SECOND)
    fired = await_reply(c, client, "timer t1 fired", 5 * SECOND)  # the client followed the new leader

    assert new_leader != old_leader
    assert int(fired.rsplit(" ", 1)[1]) >= deadline
    c.restart(old_leader)
    await_services_caught_up(c, 10 * SECOND)
    sim.converge(c)
    timer_events = logged_everywhere(c, TimerEvent)
    assert len(timer_events) == 1
    position, event = timer_events[0]
    assert event.leadership_term_id == c.member(new_leader).leadership_term_id
    per_incarnation = timer_rows(c)
    assert per_incarnation[(old_leader, 0)] == [], "the old leader died before the deadline"
    assert {k: v for k, v in per_incarnation.items() if k != (old_leader, 0)} == {
        (m, c.incarnation(m)): [position] for m in range(3)
    }
    assert all(len(c.member(m).timer_service) == 0 for m in range(3))
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)


@pytest.mark.parametrize("seed", [26, 27])
def test_uncommitted_timer_event_of_a_cut_off_leader_is_fired_once_by_the_new_leader(sim: SimKit, seed: int) -> None:
    c = sim.cluster(members=3, seed=seed, service="echo")
    old_leader = c.await_leader()
    client = c.connect_client()
    deadline = schedule(c, client, "t1", 500)
    await_services_caught_up(c)

    c.run_until_time((deadline - 20) * MS)
    c.isolate(old_leader)
    old = c.member(old_leader)
    c.await_condition(
        lambda: len(logged(c, old_leader, TimerEvent, to_position=old.append_position)) == 1,
        T.leader_heartbeat_interval_ns,
        "the cut-off leader fired the timer",
    )
    [(appended_at, _)] = logged(c, old_leader, TimerEvent, to_position=old.append_position)
    assert appended_at > old.commit_position and old.role == Role.LEADER, "appended but never committed"

    c.await_condition(lambda: c.leader_id() not in (None, old_leader), 5 * SECOND, "a new leader")
    new_leader = c.await_leader()
    c.await_condition(lambda: len(logged(c, new_leader, TimerEvent)) == 1, 2 * SECOND, "the new leader fired it")
    c.heal()
    await_services_caught_up(c, 10 * SECOND)
    sim.converge(c)

    timer_events = logged_everywhere(c, TimerEvent)
    assert len(timer_events) == 1
    assert timer_events[0][1].leadership_term_id == c.member(new_leader).leadership_term_id
    assert timer_rows(c) == {(m, 0): [timer_events[0][0]] for m in range(3)}
    assert all(len(c.member(m).timer_service) == 0 for m in range(3)), "the re-armed timer was cancelled by the log"
    assert_digests_agree_at_every_position(c)


def test_timers_survive_a_snapshot_and_a_whole_cluster_restart(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=28, service="echo")
    c.await_leader()
    client = c.connect_client()
    deadline = schedule(c, client, "t1", 1000)
    await_services_caught_up(c)
    assert c.control("snapshot")
    c.await_condition(lambda: all(c.member(m).snapshot_count == 1 for m in range(3)), 2 * SECOND, "snapshots")
    assert all(c.member(m).timer_service.deadline(1) == deadline for m in range(3))
    digest = assert_services_agree(c)
    [snapshot_at] = action_positions(c, ClusterAction.SNAPSHOT)
    term_before = c.member(c.await_leader()).leadership_term_id

    for m in range(3):
        c.kill(m)
    c.run_until_time((deadline + 100) * MS)  # the deadline passes while the cluster is down
    restart_all(c)
    c.await_leader()
    await_services_caught_up(c)

    for m in range(3):
        after = rows(c, member_id=m, incarnation=1)
        assert after[0].entry_type == EntryType.SNAPSHOT
        assert (after[0].log_position, after[0].state_digest) == (snapshot_at, digest)
        assert [e.entry_type for e in after].count(EntryType.TIMER) == 1, [e.describe() for e in after]
    # Only the restored consensus modules knew the timer: it fired from the snapshot, in a new term.
    [(fired_at, event)] = logged_everywhere(c, TimerEvent)
    assert event.correlation_id == 1 and event.leadership_term_id > term_before and fired_at > snapshot_at
    assert all(len(c.member(m).timer_service) == 0 for m in range(3))
    assert all(c.service(m).service.timers == {} for m in range(3))
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)


# ======================================================================================== suspend / resume


def test_suspend_blocks_ingress_and_resume_restores_it(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=31, service="kv")
    leader = c.await_leader()
    client = c.connect_client()
    client.client.offer(kv.put(1, "before", "1"), c.now_ns)
    c.await_condition(lambda: len(client.received) == 1, 2 * SECOND, "put before suspend acknowledged")

    assert c.control("suspend")
    c.await_condition(
        lambda: all(c.member(m).state == ConsensusModuleState.SUSPENDED for m in range(3)),
        2 * SECOND,
        "every member SUSPENDED",
    )
    position = await_services_caught_up(c)
    client.client.offer(kv.put(2, "during", "2"), c.now_ns)
    c.run_for(1 * SECOND)

    assert c.member(leader).append_position == position, "nothing appended while suspended"
    assert len(client.received) == 1
    assert all("during" not in c.service(m).service.entries for m in range(3))
    assert client.client.is_connected, "keep-alives still count while suspended"
    assert not c.control("suspend") and not c.control("snapshot"), "the toggle is busy with SUSPEND"

    assert c.control("resume")
    c.await_condition(
        lambda: all(c.member(m).state == ConsensusModuleState.ACTIVE for m in range(3)), 2 * SECOND, "ACTIVE again"
    )
    client.client.offer(kv.put(3, "after", "3"), c.now_ns)
    c.await_condition(lambda: len(client.received) == 3, 2 * SECOND, "held and new puts acknowledged")

    # Ingress offered while SUSPENDED waits (Aeron stops polling ingress) and is applied on RESUME,
    # right after the RESUME action and before anything offered later.
    assert [kv.decode_reply(r.payload)["id"] for r in client.received[1:]] == [2, 3]
    await_services_caught_up(c)
    assert action_positions(c, ClusterAction.SUSPEND) == [position]
    resume_positions = action_positions(c, ClusterAction.RESUME)
    assert len(resume_positions) == 1
    for m in range(3):
        assert set(c.service(m).service.entries) == {"before", "during", "after"}
    messages = [ev for _, ev in logged_everywhere(c, SessionMessageHeader)]
    assert len(messages) == 3
    assert_digests_agree_at_every_position(c)


def test_suspend_holds_timers_until_resume(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=32, service="echo")
    c.await_leader()
    client = c.connect_client()
    deadline = schedule(c, client, "t1", 200)
    assert c.control("suspend")

    c.run_until_time((deadline + 1000) * MS)

    assert logged_everywhere(c, TimerEvent) == []
    assert c.control("resume")
    fired = await_reply(c, client, "timer t1 fired", 1 * SECOND)
    await_services_caught_up(c)
    resume_at = action_positions(c, ClusterAction.RESUME)
    timer_events = logged_everywhere(c, TimerEvent)
    assert len(timer_events) == 1 and timer_events[0][0] > resume_at[0]
    assert int(fired.rsplit(" ", 1)[1]) >= deadline + 1000
    assert_digests_agree_at_every_position(c)


# ======================================================================================== snapshot


def test_admin_snapshot_request_answers_ok_and_records_a_snapshot_on_every_member(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=33, service="kv")
    c.await_leader()
    client = c.connect_client()
    client.client.offer(kv.put(1, "k", "v"), c.now_ns)
    c.await_condition(lambda: len(client.received) == 1, 2 * SECOND, "put acknowledged")

    correlation_id = client.client.send_admin_request(AdminRequestType.SNAPSHOT, c.now_ns)
    c.await_condition(lambda: correlation_id in client.client.admin_responses, 2 * SECOND, "AdminResponse")
    c.await_condition(lambda: all(c.member(m).snapshot_count == 1 for m in range(3)), 2 * SECOND, "snapshots")

    response = client.client.admin_responses[correlation_id]
    assert response.response_code == AdminResponseCode.OK
    assert response.request_type == AdminRequestType.SNAPSHOT
    await_services_caught_up(c)
    [position] = action_positions(c, ClusterAction.SNAPSHOT)
    for m in range(3):
        assert snapshot_entries(c, m) == [(0, position, True), (SERVICE_ID_CONSENSUS_MODULE, position, True)]
        assert c.member(m).state == ConsensusModuleState.ACTIVE
    assert c.member(c.await_leader()).toggle == ToggleState.NEUTRAL
    assert_digests_agree_at_every_position(c)


def test_admin_snapshot_request_is_refused_when_not_authorised(sim: SimKit) -> None:
    def denying(ctx: ConsensusModuleContext) -> ConsensusModule:
        ctx.authorise_admin = lambda principal, request_type: False
        return ConsensusModule(ctx)

    c = sim.cluster(members=3, seed=34, service="kv", member_factory=denying)
    c.await_leader()
    client = c.connect_client()

    correlation_id = client.client.send_admin_request(AdminRequestType.SNAPSHOT, c.now_ns)
    c.await_condition(lambda: correlation_id in client.client.admin_responses, 2 * SECOND, "AdminResponse")
    c.run_for(500 * MS)

    assert client.client.admin_responses[correlation_id].response_code == AdminResponseCode.UNAUTHORISED_ACCESS
    assert action_positions(c, ClusterAction.SNAPSHOT) == []
    assert all(c.member(m).snapshot_count == 0 and snapshot_entries(c, m) == [] for m in range(3))


# ======================================================================================== shutdown / abort


def test_shutdown_stops_every_member_at_one_position_and_restart_needs_no_replay(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=35, service="kv")
    c.await_leader()
    client = c.connect_client()
    for i in range(5):
        client.client.offer(kv.put(i, f"k{i}", f"v{i}"), c.now_ns)
    c.await_condition(lambda: len(client.received) == 5, 2 * SECOND, "puts acknowledged")
    await_services_caught_up(c)
    digest = assert_services_agree(c)

    assert c.control("shutdown")
    c.await_condition(lambda: all_terminated(c), 5 * SECOND, "every member terminated")

    [position] = action_positions(c, ClusterAction.SNAPSHOT)
    assert stop_positions(c) == {m: position for m in range(3)}
    for m in range(3):
        assert c.service(m).is_terminated and c.service(m).log_position == position
        assert snapshot_entries(c, m) == [(0, position, True), (SERVICE_ID_CONSENSUS_MODULE, position, True)]
        last_term = c.member(m).recording_log.find_last_term()
        assert last_term is not None and last_term.log_position == position, "term end committed at the position"
        assert c.member(m).state == ConsensusModuleState.CLOSED
    assert assert_services_agree(c) == digest

    restart_all(c)
    c.await_leader()
    await_services_caught_up(c)

    for m in range(3):
        after = rows(c, member_id=m, incarnation=1)
        assert after[0].entry_type == EntryType.SNAPSHOT
        assert (after[0].log_position, after[0].state_digest) == (position, digest)
        assert all(e.log_position > position for e in after[1:]), "nothing before the snapshot was replayed"
    assert assert_services_agree(c) == digest
    # The cluster works after the restart.
    client2 = c.connect_client()
    client2.client.offer(kv.put(99, "after", "restart"), c.now_ns)
    c.await_condition(lambda: len(client2.received) == 1, 2 * SECOND, "put after restart acknowledged")
    await_services_caught_up(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)


def test_shutdown_with_a_follower_down_stops_after_the_termination_timeout_and_it_catches_up(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=38, service="kv")
    leader = c.await_leader()
    client = c.connect_client()
    client.client.offer(kv.put(1, "k", "v"), c.now_ns)
    c.await_condition(lambda: len(client.received) == 1, 2 * SECOND, "put acknowledged")
    down = next(m for m in range(3) if m != leader)
    up = [m for m in range(3) if m != down]
    c.kill(down)
    asked_at = c.now_ns

    assert c.control("shutdown")
    c.await_condition(lambda: all(c.member(m).terminated for m in up), 2 * T.termination_timeout_ns, "terminated")

    [position] = action_positions(c, ClusterAction.SNAPSHOT)
    assert stop_positions(c) == {m: position for m in up}
    stopped_at = next(e["time_ns"] for e in c.events if e["kind"] == "stop" and e["source"] == f"node-{leader}")
    assert stopped_at - asked_at >= T.termination_timeout_ns, "the leader waited for the missing TerminationAck"
    digest = assert_services_agree(c, up)

    restart_all(c)
    c.await_leader()
    await_services_caught_up(c, 10 * SECOND)
    for m in up:
        assert rows(c, member_id=m, incarnation=1)[0].state_digest == digest
    caught_up = rows(c, member_id=down, incarnation=1)
    assert caught_up[0].entry_type != EntryType.SNAPSHOT, "the member that was down has no snapshot"
    assert any((e.log_position, e.state_digest) == (position, digest) for e in caught_up)
    assert_services_agree(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)


def test_shutdown_reaches_a_follower_that_missed_the_termination_position(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=39, service="kv")
    leader = c.await_leader()
    await_services_caught_up(c)
    deaf = next(m for m in range(3) if m != leader)

    c.block(leader, deaf)  # a few ms in which everything the leader sends this follower is lost
    assert c.control("shutdown")
    c.await_condition(lambda: c.member(leader).termination_position >= 0, 1 * SECOND, "termination begun")
    c.run_for(5 * MS)
    c.unblock(leader, deaf)  # the log is resent; the lost TerminationPosition is not
    c.await_condition(lambda: c.member(deaf).snapshot_count == 1, 2 * SECOND, "the follower took the snapshot")

    c.await_condition(lambda: all_terminated(c), 2 * T.termination_timeout_ns, "every member terminated")
    [position] = action_positions(c, ClusterAction.SNAPSHOT)
    assert stop_positions(c) == {m: position for m in range(3)}


def test_abort_stops_every_member_without_a_snapshot_and_restart_replays_the_log(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=36, service="kv")
    c.await_leader()
    client = c.connect_client()
    for i in range(5):
        client.client.offer(kv.put(i, f"k{i}", f"v{i}"), c.now_ns)
    c.await_condition(lambda: len(client.received) == 5, 2 * SECOND, "puts acknowledged")
    position = await_services_caught_up(c)
    digest = assert_services_agree(c)

    assert c.control("abort")
    c.await_condition(lambda: all_terminated(c), 5 * SECOND, "every member terminated")

    assert stop_positions(c) == {m: position for m in range(3)}
    for m in range(3):
        assert c.service(m).is_terminated and c.service(m).log_position == position
        assert snapshot_entries(c, m) == [], "ABORT takes no snapshot"
        assert c.member(m).snapshot_count == 0
    assert logged_everywhere(c, ClusterActionRequest) == []

    restart_all(c)
    leader = c.await_leader()
    await_services_caught_up(c)

    for m in range(3):
        after = rows(c, member_id=m, incarnation=1)
        assert EntryType.SNAPSHOT not in {e.entry_type for e in after}
        rebuilt = [e for e in after if e.log_position <= position]
        assert rebuilt[0].log_position - rebuilt[0].length == 0, "rebuilt from the start of the log"
        assert rebuilt[-1].log_position == position and rebuilt[-1].state_digest == digest
    # The new leader replays its own log locally (LEADER_REPLAY); followers re-apply it as the leader
    # commits it to them (they replay locally only what they know is committed, docs/protocol.md g).
    assert all(e.replay for e in rows(c, member_id=leader, incarnation=1) if e.log_position <= position)
    assert_services_agree(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)


def test_control_is_refused_on_a_follower_and_during_an_election(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=37, service="kv")
    leader = c.await_leader()
    follower = next(m for m in range(3) if m != leader)

    assert not c.member(follower).toggle_control(ToggleState.SNAPSHOT)
    assert c.member(follower).role == Role.FOLLOWER
    c.kill(leader)
    c.await_condition(lambda: c.member(follower).election_state is not None, 5 * SECOND, "an election")
    assert not c.control("snapshot"), "no leader during an election"
    assert not c.member(follower).toggle_control(ToggleState.SNAPSHOT)
    c.await_leader(5 * SECOND)
    assert c.control("snapshot")
