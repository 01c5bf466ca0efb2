"""The simulator on MemoryStorage, and a storage that refuses writes (the archive's side of disk faults).

A member whose storage returns ENOSPC or EIO stops appending, reports a ``storage_error`` event and a
counted reason, steps down if it led (or stops acknowledging if it followed) and keeps its process
object; no committed entry is lost, and after the fault is cleared and the member restarted it
catches up to the same log."""

from __future__ import annotations

import errno

import pytest
from clusterlab.core.archive.storage import MemoryStorage
from clusterlab.core.consensus.context import MS, SECOND, Role
from clusterlab.harness.sim import SimCluster

from tests.sim.conftest import SimKit
from tests.sim.test_scenarios import await_new_leader, logs_identical, offer_burst


def storage_errors(c: SimCluster, member_id: int) -> list[dict[str, object]]:
    return [e for e in c.events if e["kind"] == "storage_error" and e["source"] == f"node-{member_id}"]


def test_simulated_members_keep_their_state_in_memory_across_a_crash(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=4)
    leader = c.await_leader()
    offer_burst(c, "before", count=6)
    sim.converge(c)
    follower = (leader + 1) % 3
    storage = c.memory_storage(follower)
    assert isinstance(storage, MemoryStorage)
    names = set(storage.list_dir("archive/log")) | set(storage.list_dir(""))
    assert {"recording.log", "node-state.dat", "0000000000000000.seg"} <= names
    stop = c.member(follower).archive.stop_position
    c.kill(follower)
    c.restart(follower)  # a process crash keeps everything written
    assert c.member(follower).archive.stop_position == stop
    assert c.member(follower).archive_store.repair is None
    sim.converge(c)
    assert c.directory is not None and not c.directory.exists()  # nothing on disk


def test_power_loss_drops_unsynced_writes_and_the_member_recovers_from_the_leader(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=5)
    leader = c.await_leader()
    offer_burst(c, "before", count=6)
    sim.converge(c)
    follower = (leader + 2) % 3
    lost = c.power_loss(follower)  # the simulator runs without fsync: every file is unsynced
    assert "archive/log/0000000000000000.seg" in lost and "node-state.dat" in lost
    c.restart(follower)
    assert c.member(follower).archive.stop_position == 0
    offer_burst(c, "after", count=3)
    sim.converge(c)
    logs_identical(c)


@pytest.mark.parametrize(("code", "torn"), [(errno.ENOSPC, False), (errno.EIO, False), (errno.ENOSPC, True)])
def test_leader_whose_storage_refuses_an_append_steps_down_and_loses_no_committed_entry(
    sim: SimKit, code: int, torn: bool
) -> None:
    c = sim.cluster(members=3, seed=11)
    old = c.await_leader()
    offer_burst(c, "committed", count=8)
    sim.converge(c)
    committed = c.member(old).commit_position
    committed_log = c.member(old).archive.read(0, committed)

    c.storage(old).fail_writes(code, "archive/", torn=torn)
    assert c.offer(b"refused") == -1  # the append fails: the leader fences itself at once
    m = c.member(old)  # the process object lives on
    assert m.role == Role.FOLLOWER and m.storage_failure is not None
    assert errno.errorcode[code] in m.storage_failure
    [event] = storage_errors(c, old)
    assert event["detail"]["action"] == "step_down" and event["detail"]["errno"] == errno.errorcode[code]
    assert any(k.startswith("storage: ") for k in m.ignored)
    assert m.archive.stop_position == committed  # nothing half-appended is counted

    new = await_new_leader(c, old, 10 * SECOND)
    offer_burst(c, "new-term", count=4)
    c.run_for(200 * MS)
    assert c.member(new).archive.read(0, committed) == committed_log
    assert c.member(old).archive.stop_position == committed  # fenced: it appended nothing more

    c.storage(old).clear()  # space freed
    c.restart(old)
    assert sim.converge(c) == new
    logs_identical(c)


def test_follower_whose_storage_is_full_stops_acknowledging_and_the_majority_carries_on(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=12)
    leader = c.await_leader()
    offer_burst(c, "committed", count=5)
    sim.converge(c)
    follower = (leader + 1) % 3
    c.storage(follower).fail_writes(errno.ENOSPC, "archive/")
    offer_burst(c, "more", count=5)
    c.run_for(200 * MS)
    f = c.member(follower)
    [event] = storage_errors(c, follower)
    assert event["detail"]["action"] == "stop_acknowledging"
    assert f.storage_failure is not None and c.leader_id() == leader
    # The leader still commits with the other follower; the full one is left behind.
    assert c.member(leader).commit_position == c.member(leader).archive.stop_position
    assert f.archive.stop_position < c.member(leader).commit_position
    c.storage(follower).clear()
    c.restart(follower)
    sim.converge(c)
    logs_identical(c)


def test_a_torn_write_is_cut_back_and_repaired_after_restart(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=13)
    leader = c.await_leader()
    offer_burst(c, "committed", count=5)
    sim.converge(c)
    follower = (leader + 2) % 3
    c.storage(follower).fail_writes(errno.EIO, "archive/log/", torn=True, count=1)
    offer_burst(c, "more", count=3)
    c.run_for(100 * MS)
    assert c.member(follower).storage_failure is not None
    assert c.storage(follower).rules == []  # the one-shot fault was used
    c.restart(follower)
    sim.converge(c)
    logs_identical(c)


def test_a_member_can_be_killed_and_restarted_while_its_disk_is_full(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=14)
    leader = c.await_leader()
    offer_burst(c, "committed", count=3)
    sim.converge(c)
    follower = (leader + 1) % 3
    c.storage(follower).fail_writes(errno.ENOSPC)
    c.kill(follower)  # a crash runs no close code, so nothing is written (or refused)
    c.restart(follower)  # opening refreshes the catalogue: refused, logged, the open goes on
    assert any("catalogue not refreshed" in line for _t, m, line in c.log_lines if m == follower)
    offer_burst(c, "more", count=3)
    c.run_for(200 * MS)
    m = c.member(follower)  # its first append is refused: fenced, still up
    assert m.storage_failure is not None and "ENOSPC" in m.storage_failure
    c.storage(follower).clear()
    c.restart(follower)
    sim.converge(c)
    logs_identical(c)
