"""ReplaySession chunking (bounded and following) and Replicator in-order appends."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.archive.replay import ReplaySession, Replicator
from clusterlab.core.codec.framing import frame, walk_frames
from clusterlab.core.runtime.storage import FileStorage


def filled(directory: Path, n: int, segment_length: int = 512) -> tuple[RecordingStore, list[int]]:
    store = RecordingStore.open(FileStorage(directory), segment_length=segment_length)
    starts = []
    for i in range(n):
        starts.append(store.stop_position)
        store.append_entry(bytes([i % 256]) * (i % 50), i // 10)
    return store, starts


def test_replay_chunks_cover_range_in_whole_frames_within_max_bytes(tmp_path: Path) -> None:
    store, starts = filled(tmp_path / "leader", 60)
    session = ReplaySession(store, starts[5], starts[50], max_bytes=200)
    chunks = list(session)
    assert session.done
    assert chunks[0].start_position == starts[5]
    assert chunks[-1].end_position == starts[50]
    for a, b in itertools.pairwise(chunks):
        assert a.end_position == b.start_position
    for c in chunks:
        assert len(c.data) <= 200 or len(walk_frames(c.data, c.start_position).frames) == 1
        assert walk_frames(c.data, c.start_position).error is None
    assert b"".join(c.data for c in chunks) == store.read(starts[5], starts[50])
    assert session.poll() is None
    store.close()


def test_open_ended_replay_follows_the_recording_until_stopped(tmp_path: Path) -> None:
    store, _starts = filled(tmp_path / "leader", 5)
    session = ReplaySession(store, 0, None, max_bytes=1 << 20)
    first = session.poll()
    assert first is not None and first.end_position == store.stop_position
    assert session.poll() is None and not session.done  # nothing new yet
    store.append_entry(b"live", 1)
    nxt = session.poll()
    assert nxt is not None and walk_frames(nxt.data, nxt.start_position).frames[0].payload == b"live"
    session.stop()
    assert session.done and session.poll() is None
    store.close()


def test_replay_to_beyond_stop_waits_for_data(tmp_path: Path) -> None:
    store, _ = filled(tmp_path / "leader", 3)
    target = store.stop_position + 64
    session = ReplaySession(store, 0, target)
    assert session.poll() is not None
    assert session.poll() is None and not session.done
    store.append_entry(b"x" * 20, 0)  # exactly 64 bytes
    assert session.poll() is not None
    assert session.done
    store.close()


def test_replay_rejects_non_boundary_start_and_end(tmp_path: Path) -> None:
    store, starts = filled(tmp_path / "leader", 10)
    with pytest.raises(ArchiveError, match="not a frame boundary"):
        ReplaySession(store, starts[3] + 32, None)
    big = starts[2]  # frame 2 is 64 bytes
    session = ReplaySession(store, starts[1], big + 32)
    assert session.poll() is not None  # frame 1
    with pytest.raises(ArchiveError, match="not a frame boundary"):
        session.poll()
    store.close()


def test_replay_detects_truncation_beneath_it(tmp_path: Path) -> None:
    store, starts = filled(tmp_path / "leader", 10)
    session = ReplaySession(store, 0, None)
    session.poll()
    store.truncate(starts[4])
    with pytest.raises(ArchiveError, match="truncated"):
        session.poll()
    store.close()


def test_replay_into_replicator_reproduces_the_recording(tmp_path: Path) -> None:
    leader, _ = filled(tmp_path / "leader", 80)
    follower = RecordingStore.open(FileStorage(tmp_path / "follower"), segment_length=320)
    replicator = Replicator(follower, leader.stop_position)
    for chunk in ReplaySession(leader, 0, leader.stop_position, max_bytes=256):
        assert replicator.on_block(chunk.start_position, chunk.data)
    assert replicator.done and replicator.position == leader.stop_position
    assert follower.read(0, follower.stop_position) == leader.read(0, leader.stop_position)
    leader.close()
    follower.close()


def test_replicator_rejects_gap_duplicate_and_corrupt_blocks(tmp_path: Path) -> None:
    leader, starts = filled(tmp_path / "leader", 10)
    follower = RecordingStore.open(FileStorage(tmp_path / "follower"))
    lines: list[str] = []
    rep = Replicator(follower, log=lines.append)
    second = leader.read(starts[3], starts[6])
    assert not rep.on_block(starts[3], second)
    assert rep.last_reject_reason is not None and "gap" in rep.last_reject_reason
    first = leader.read(0, starts[3])
    assert rep.on_block(0, first)
    assert not rep.on_block(0, first)
    assert "duplicate" in (rep.last_reject_reason or "")
    bad = bytearray(second)
    bad[33] ^= 0xFF  # a payload byte of the first frame
    assert not rep.on_block(starts[3], bytes(bad))
    assert "rejected block" in (rep.last_reject_reason or "")
    assert follower.stop_position == starts[3]  # nothing partial appended
    assert rep.on_block(starts[3], second)
    assert (rep.blocks_appended, rep.blocks_rejected) == (2, 3)
    assert len(lines) == 3 and not rep.done  # open-ended: never done
    leader.close()
    follower.close()


def test_replicator_skips_the_part_of_an_overlapping_resend_it_holds(tmp_path: Path) -> None:
    leader, starts = filled(tmp_path / "leader", 10)
    follower = RecordingStore.open(FileStorage(tmp_path / "follower"))
    rep = Replicator(follower)
    assert rep.on_block(0, leader.read(0, starts[4]))
    assert rep.on_block(starts[2], leader.read(starts[2], starts[8]))
    assert follower.read(0, follower.stop_position) == leader.read(0, starts[8])
    # An overlap that does not put our stop on one of its frame boundaries is refused.
    odd = frame(b"z" * 60, starts[8] - 32, 0)  # claims to start 32 bytes before our stop
    assert not rep.on_block(starts[8] - 32, odd)
    leader.close()
    follower.close()


def test_replicator_stops_at_target_and_clips_blocks(tmp_path: Path) -> None:
    leader, starts = filled(tmp_path / "leader", 10)
    follower = RecordingStore.open(FileStorage(tmp_path / "follower"))
    rep = Replicator(follower, starts[6])
    assert rep.on_block(0, leader.read(0, starts[9]))
    assert follower.stop_position == starts[6] and rep.done
    assert not rep.on_block(starts[6], leader.read(starts[6], starts[9]))
    assert "complete" in (rep.last_reject_reason or "")
    with pytest.raises(ArchiveError, match="below"):
        Replicator(follower, starts[2])
    leader.close()
    follower.close()
