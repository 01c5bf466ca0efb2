"""Snapshots and recovery in the simulator (docs/protocol.md e.7, c.10-c.12).

A snapshot is a ClusterActionRequest(SNAPSHOT) in the log: every service snapshots at that position
and acks, then every consensus module writes its own snapshot and the SNAPSHOT entries of its
recording log. A restarting member loads the latest valid snapshot and replays the log after it; an
invalidated snapshot makes it fall back to the previous one, or to the whole log; a member with no
files at all rebuilds from the leader's log. In every case the services reach the same state, at
every log position.
"""

from __future__ import annotations

import pytest
from clusterlab.core.codec.enums import ClusterAction
from clusterlab.core.codec.log_events import ClusterActionRequest
from clusterlab.core.consensus.context import SECOND, SERVICE_ID_CONSENSUS_MODULE
from clusterlab.core.consensus.recording_log import EntryType as RecordingEntryType
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.service.agent import AppliedEntry, EntryType
from clusterlab.harness.services import kv
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_parts import SimClient

from tests.sim.conftest import SimKit
from tests.sim.digests import (
    assert_contiguous,
    assert_digests_agree_at_every_position,
    assert_services_agree,
    await_services_caught_up,
    logged_everywhere,
    rows,
)

pytestmark = pytest.mark.sim


# ---------------------------------------------------------------------------------------- helpers


class Writer:
    """A kv client writing numbered puts and waiting for each reply."""

    def __init__(self, c: SimCluster, client: SimClient) -> None:
        self.c = c
        self.client = client
        self.next_id = 0

    def puts(self, count: int, tag: str) -> None:
        for _ in range(count):
            i = self.next_id
            self.next_id += 1
            self.client.client.offer(kv.put(i, f"{tag}-{i % 3}", f"{tag}{i}"), self.c.now_ns)
            self.c.await_condition(
                lambda i=i: any(kv.decode_reply(m.payload).get("id") == i for m in self.client.received),
                2 * SECOND,
                f"reply to put {i}",
            )


def take_snapshot(c: SimCluster) -> int:
    """Snapshot through the control toggle; returns its log position once every member has it."""
    before = {m: c.member(m).snapshot_count for m in c.members_alive()}
    assert c.control("snapshot")
    c.await_condition(
        lambda: all(c.member(m).snapshot_count == before[m] + 1 for m in before), 2 * SECOND, "snapshot everywhere"
    )
    await_services_caught_up(c)
    return [p for p, ev in logged_everywhere(c, ClusterActionRequest) if ev.action == ClusterAction.SNAPSHOT][-1]


def valid_snapshot_positions(c: SimCluster, member_id: int) -> list[int]:
    """Log positions of the member's valid consensus-module SNAPSHOT entries."""
    return [
        e.log_position
        for e in c.member(member_id).recording_log.entries()
        if e.type == RecordingEntryType.SNAPSHOT and e.service_id == SERVICE_ID_CONSENSUS_MODULE and e.is_valid
    ]


def invalidate_latest_snapshot(c: SimCluster, member_id: int) -> None:
    """Edit a stopped member's recording log: mark its latest snapshot set invalid."""
    assert not c.is_alive(member_id), "the recording log is only edited while the member is down"
    with RecordingLog.open(c.storage(member_id)) as recording_log:
        assert recording_log.invalidate_latest_snapshot()


def first_row(c: SimCluster, member_id: int) -> AppliedEntry:
    return rows(c, member_id=member_id, incarnation=c.incarnation(member_id))[0]


def start_of(e: AppliedEntry) -> int:
    return e.log_position - e.length


# ---------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("seed", [41, 42, 43])
def test_snapshot_kill_all_members_and_restart_gives_identical_state_digests(sim: SimKit, seed: int) -> None:
    c = sim.cluster(members=3, seed=seed, service="kv")
    c.await_leader()
    writer = Writer(c, c.connect_client())
    writer.puts(6, "a")
    snapshot_at = take_snapshot(c)
    snapshot_digest = assert_services_agree(c)
    writer.puts(4, "b")  # log after the snapshot: replayed on restart
    await_services_caught_up(c)
    digest = assert_services_agree(c)

    for m in range(3):
        c.kill(m)
    for m in range(3):
        c.restart(m)
    c.await_leader()
    await_services_caught_up(c)

    for m in range(3):
        restored = rows(c, member_id=m, incarnation=1)
        assert restored[0].entry_type == EntryType.SNAPSHOT
        assert (restored[0].log_position, restored[0].state_digest) == (snapshot_at, snapshot_digest)
        assert start_of(restored[1]) == snapshot_at, "replay continues exactly at the snapshot"
        assert any(e.state_digest == digest for e in restored), "the log after the snapshot was replayed"
        assert c.service(m).service.recompute_digest() == c.service(m).service.state_digest()
    assert_services_agree(c)
    # Sessions were closed (TIMEOUT) by the restart; the store is exactly what it was.
    assert {m: c.service(m).service.entries for m in range(3)} == {m: c.service(0).service.entries for m in range(3)}
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)
    sim.converge(c)


def test_invalidated_latest_snapshot_falls_back_to_the_previous_snapshot(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=44, service="kv")
    leader = c.await_leader()
    writer = Writer(c, c.connect_client())
    writer.puts(3, "a")
    first = take_snapshot(c)
    writer.puts(3, "b")
    second = take_snapshot(c)
    writer.puts(3, "c")
    await_services_caught_up(c)
    follower = next(m for m in range(3) if m != leader)
    assert valid_snapshot_positions(c, follower) == [first, second]

    c.stop(follower)
    invalidate_latest_snapshot(c, follower)
    c.restart(follower)
    await_services_caught_up(c)

    restored = first_row(c, follower)
    assert (restored.entry_type, restored.log_position) == (EntryType.SNAPSHOT, first)
    applied = rows(c, member_id=follower, incarnation=1)
    assert start_of(applied[1]) == first
    assert second in {e.log_position for e in applied}, "the log between the two snapshots was replayed"
    writer.puts(2, "d")
    await_services_caught_up(c)
    assert_services_agree(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)
    sim.converge(c)


def test_every_snapshot_invalidated_falls_back_to_replaying_the_whole_log(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=45, service="kv")
    c.await_leader()
    writer = Writer(c, c.connect_client())
    writer.puts(4, "a")
    take_snapshot(c)
    writer.puts(4, "b")
    await_services_caught_up(c)
    digest = assert_services_agree(c)

    for m in range(3):
        c.stop(m)
    for m in range(3):
        invalidate_latest_snapshot(c, m)
    for m in range(3):
        c.restart(m)
    c.await_leader()
    await_services_caught_up(c)

    for m in range(3):
        applied = rows(c, member_id=m, incarnation=1)
        assert EntryType.SNAPSHOT not in {e.entry_type for e in applied}
        assert start_of(applied[0]) == 0, "no valid snapshot: the whole log is applied from the start"
        assert any(e.state_digest == digest for e in applied)
    assert_services_agree(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)
    sim.converge(c)


def test_wiped_follower_rebuilds_from_the_leaders_log_after_a_snapshot(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=46, service="kv")
    leader = c.await_leader()
    writer = Writer(c, c.connect_client())
    writer.puts(4, "a")
    take_snapshot(c)
    writer.puts(4, "b")
    await_services_caught_up(c)
    digest = assert_services_agree(c)
    follower = next(m for m in range(3) if m != leader)

    c.restart_wiped(follower)
    await_services_caught_up(c, 10 * SECOND)

    applied = rows(c, member_id=follower, incarnation=1)
    assert EntryType.SNAPSHOT not in {e.entry_type for e in applied}, "a wiped member has no snapshot to load"
    assert start_of(applied[0]) == 0
    assert any(e.state_digest == digest for e in applied)
    assert valid_snapshot_positions(c, follower) != [], "it re-took the snapshot when it reached the action"
    assert_services_agree(c)
    assert_contiguous(c)
    assert_digests_agree_at_every_position(c)
    sim.converge(c)
