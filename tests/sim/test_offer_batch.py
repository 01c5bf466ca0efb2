"""SimCluster.offer_batch / ConsensusModule.offer_batch: a burst of application messages appended by the
leader with one archive write (the simulator benchmark's load), the same log and the same messages as
offering them one at a time at that instant; a refused write appends none of them."""

from __future__ import annotations

import errno

import pytest
from clusterlab.core.consensus.context import MS, SECOND, Role
from clusterlab.harness.sim import SimCluster

from clusterlab.testing.faulty_storage import _FaultyFile
from tests.sim.conftest import SimKit
from tests.sim.test_scenarios import logs_identical

PAYLOADS = [f"entry-{i}".encode() * (i + 1) for i in range(7)]


def _run(sim: SimKit, batched: bool) -> tuple[SimCluster, int, bytes]:
    c = sim.cluster(members=3, seed=21)
    leader = c.await_leader()
    if batched:
        end = c.offer_batch(PAYLOADS)
    else:
        end = -1
        for p in PAYLOADS:
            end = c.offer(p)
    assert end > 0
    assert c.member(leader).archive.stop_position == end
    c.run_for(500 * MS)
    assert all(c.member(m).commit_position >= end for m in c.members_alive()), c.status_line()
    return c, end, logs_identical(c)


def test_a_batch_appends_what_single_offers_append_and_the_run_is_the_same(sim: SimKit) -> None:
    batched, end_b, log_b = _run(sim, batched=True)
    single, end_s, log_s = _run(sim, batched=False)
    assert end_b == end_s
    assert log_b == log_s  # byte for byte: same frames, positions, terms, timestamps
    assert batched.message_digest() == single.message_digest()  # and the same messages, at the same times


def test_a_batch_is_one_archive_write(sim: SimKit, monkeypatch: pytest.MonkeyPatch) -> None:
    c = sim.cluster(members=3, seed=22)
    leader = c.await_leader()
    start = c.member(leader).archive.stop_position
    writes: list[tuple[str, int]] = []
    write = _FaultyFile.write

    def counting(self: _FaultyFile, offset: int, data: bytes | bytearray | memoryview) -> None:
        writes.append((self.path, len(data)))
        write(self, offset, data)

    monkeypatch.setattr(_FaultyFile, "write", counting)
    end = c.offer_batch(PAYLOADS)
    assert writes == [("archive/log/0000000000000000.seg", end - start)]  # seven entries, one write
    frames = c.member(leader).archive.read_frames(start, end)
    assert [f.payload[-len(p) :] for f, p in zip(frames, PAYLOADS, strict=True)] == PAYLOADS


def test_a_refused_batch_appends_nothing_and_the_leader_steps_down(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=23)
    leader = c.await_leader()
    c.offer_batch(PAYLOADS[:2])
    c.run_for(200 * MS)
    stop = c.member(leader).archive.stop_position
    c.storage(leader).fail_writes(errno.ENOSPC, "archive/")
    assert c.offer_batch(PAYLOADS) == -1
    m = c.member(leader)
    assert m.archive.stop_position == stop  # none of the seven half-appended
    assert m.role == Role.FOLLOWER and m.storage_failure is not None and "ENOSPC" in m.storage_failure
    c.storage(leader).clear()
    c.restart(leader)
    c.await_condition(lambda: c.leader_id() is not None, 10 * SECOND, "a leader after the restart")
    assert c.offer_batch(PAYLOADS) > 0
    sim.converge(c)
    logs_identical(c)


def test_no_leader_or_nothing_to_offer(sim: SimKit) -> None:
    c = sim.cluster(members=3, seed=24)
    assert c.offer_batch(PAYLOADS) == -1  # before any election: no leader takes it
    c.await_leader()
    assert c.offer_batch([]) == -1
