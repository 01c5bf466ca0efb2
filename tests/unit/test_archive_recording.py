"""RecordingStore: append/read/truncate/reopen across segments, tail repair, misuse, durability."""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.recording import RecordingStore, list_segments, segment_file_name
from clusterlab.core.codec.framing import frame, framed_length, walk_frames
from clusterlab.core.runtime.storage import FileStorage
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterlab.testing import disk_faults as faults

SEGMENT = 256  # tiny segments so a handful of entries crosses several boundaries


def payload(i: int) -> bytes:
    """Entry i: lengths vary so frames are 32..128 bytes."""
    return bytes([i % 251]) * (i % 70)


def fill(store: RecordingStore, n: int, term: int = 0) -> list[int]:
    """Append n entries; returns the start position of each."""
    starts = []
    for i in range(n):
        starts.append(store.stop_position)
        store.append_entry(payload(i), term)
    return starts


def block(start: int, payloads: list[bytes], term: int = 0) -> bytes:
    out, pos = [], start
    for p in payloads:
        f = frame(p, pos, term)
        out.append(f)
        pos += len(f)
    return b"".join(out)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "member" / "archive" / "log"


def _segments(directory: Path) -> list[tuple[int, Path]]:
    """(base, real file) of every segment in ``directory``."""
    return [(base, directory / name) for base, name in list_segments(FileStorage(directory))]


def test_empty_store_has_zero_positions_and_creates_dir(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir)) as store:
        assert (store.start_position, store.stop_position) == (0, 0)
        assert store.read(0, 100) == b""
        assert store.repair is None
    assert log_dir.is_dir()


def test_append_entry_returns_end_position_and_frames_read_back(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir)) as store:
        end = store.append_entry(b"hello", 7)
        assert end == framed_length(5) == store.stop_position
        (f,) = store.read_frames(0, end)
        assert (f.payload, f.leadership_term_id, f.position) == (b"hello", 7, 0)
        assert store.frame_at(0) == f


def test_round_trip_across_segment_boundaries_and_reopen(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        starts = fill(store, 40)
        stop = store.stop_position
        assert store.segment_count > 5
        all_bytes = store.read(0, stop)
    # Segment files are named by the log position of their first byte and hold whole frames only.
    segments = _segments(log_dir)
    assert segments[0][1].name == segment_file_name(0) == "0000000000000000.seg"
    for base, path in segments:
        assert walk_frames(path.read_bytes(), base).error is None
        assert path.stat().st_size <= SEGMENT
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        assert store.repair is None
        assert store.stop_position == stop
        assert store.read(0, stop) == all_bytes
        frames = store.read_frames(0, stop)
        assert [f.position for f in frames] == starts
        assert [f.payload for f in frames] == [payload(i) for i in range(40)]
        # Reads starting in a later segment, and spanning several.
        assert [f.payload for f in store.read_frames(starts[17], starts[33])] == [payload(i) for i in range(17, 33)]
        # Appending continues where it left off.
        assert store.append_entry(b"more", 1) == stop + framed_length(4)


def test_append_block_spanning_segments_splits_at_frame_boundaries(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        data = block(0, [payload(i) for i in range(30)])
        assert store.append(data, 0) == len(data)
        assert store.read(0, len(data)) == data
        assert store.segment_count > 3


def test_frame_longer_than_a_segment_gets_its_own_segment(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=64) as store:
        store.append_entry(b"a", 0)
        big_end = store.append_entry(b"x" * 500, 0)
        store.append_entry(b"b", 0)
        assert [f.payload for f in store.read_frames(0, store.stop_position)] == [b"a", b"x" * 500, b"b"]
        assert big_end == framed_length(1) + framed_length(500)
        assert [b for b, _ in _segments(log_dir)] == [0, 64, big_end]


def test_append_at_wrong_position_is_rejected(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir)) as store:
        store.append_entry(b"one", 0)
        stop = store.stop_position
        with pytest.raises(ArchiveError, match="append at 0 but stop position is"):
            store.append(frame(b"x", 0, 0), 0)
        with pytest.raises(ArchiveError, match="append at"):
            store.append(frame(b"x", stop + 32, 0), stop + 32)
        assert store.stop_position == stop


def test_append_block_with_bad_frame_appends_nothing(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir)) as store:
        good = block(0, [b"a", b"b", b"c"])
        bad = bytearray(good)
        bad[-40] ^= 0xFF  # inside the last frame
        with pytest.raises(ArchiveError, match="rejected block"):
            store.append(bytes(bad), 0)
        assert store.stop_position == 0
        # Frames claiming another position are refused too.
        with pytest.raises(ArchiveError, match="rejected block"):
            store.append(frame(b"a", 64, 0), 0)
        # As are trailing bytes that are not a whole frame.
        with pytest.raises(ArchiveError, match="rejected block"):
            store.append(good + b"\x00" * 8, 0)
        assert store.stop_position == 0
        assert store.append(good, 0) == len(good)


def test_read_on_non_boundary_or_out_of_range_is_rejected(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        starts = fill(store, 10)
        stop = store.stop_position
        with pytest.raises(ArchiveError, match="not a frame boundary"):
            store.read(starts[3] + 32, stop)
        with pytest.raises(ArchiveError, match="not a frame boundary"):
            store.read(starts[3] + 8, stop)  # not even aligned
        with pytest.raises(ArchiveError, match="outside"):
            store.read(stop + 32, stop + 64)
        with pytest.raises(ArchiveError, match="outside"):
            store.read(-32, stop)
        with pytest.raises(ArchiveError, match="before from"):
            store.read(starts[3], starts[2])
        with pytest.raises(ArchiveError):
            store.frame_at(stop)
        assert store.is_frame_boundary(starts[4]) and not store.is_frame_boundary(starts[4] + 32)


def test_read_clips_to_stop_and_rounds_down_to_a_frame_boundary(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir)) as store:
        starts = fill(store, 6)
        stop = store.stop_position
        assert store.read(starts[2], stop + 10_000) == store.read(starts[2], stop)
        # Frame 4 is 64 bytes long: a to_position inside it returns frames 2 and 3 only.
        assert starts[5] - starts[4] == 64
        two_frames = store.read(starts[2], starts[4] + 32)
        assert two_frames == store.read(starts[2], starts[4])
        assert len(walk_frames(two_frames, starts[2]).frames) == 2
        assert store.read(starts[4], starts[4] + 32) == b""
        assert store.read(stop, stop + 100) == b""


def test_read_max_bytes_stops_at_last_whole_frame_but_returns_at_least_one(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        starts = fill(store, 20)
        stop = store.stop_position
        chunk = store.read(starts[0], stop, max_bytes=300)
        frames = walk_frames(chunk, 0).frames
        assert len(chunk) <= 300
        assert frames[-1].end_position in starts  # ends on a boundary
        assert len(chunk) + framed_length(len(payload(len(frames)))) > 300  # the next frame would not fit
        one = store.read(starts[5], stop, max_bytes=1)
        assert len(walk_frames(one, starts[5]).frames) == 1


def test_truncate_to_frame_boundary_then_append_and_reopen(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        starts = fill(store, 30)
        kept = store.read(0, starts[12])
        store.truncate(starts[12])
        assert store.stop_position == starts[12]
        assert store.read(0, 10**9) == kept
        store.append_entry(b"new history", 3)
        stop = store.stop_position
    # Later segment files are gone; nothing beyond the truncation survives a reopen.
    assert all(base <= starts[12] for base, _ in _segments(log_dir))
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        assert store.repair is None
        assert store.stop_position == stop
        frames = store.read_frames(0, stop)
        assert [f.payload for f in frames[:-1]] == [payload(i) for i in range(12)]
        assert (frames[-1].payload, frames[-1].leadership_term_id) == (b"new history", 3)


def test_truncate_exactly_at_a_segment_base_and_to_zero(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        fill(store, 30)
        second_base = _segments(log_dir)[1][0]
        store.truncate(second_base)
        assert store.stop_position == second_base
        assert [b for b, _ in _segments(log_dir)] == [0]
        store.truncate(0)
        assert store.stop_position == 0
        assert store.append_entry(b"x", 0) == framed_length(1)


def test_truncate_rejects_non_boundary_and_out_of_range(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir)) as store:
        starts = fill(store, 5)
        stop = store.stop_position
        with pytest.raises(ArchiveError, match="not a"):
            store.truncate(starts[2] + 32)
        with pytest.raises(ArchiveError, match="outside"):
            store.truncate(stop + 32)
        assert store.stop_position == stop
        store.truncate(stop)  # no-op
        assert store.stop_position == stop


def test_purge_segments_raises_start_position(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        starts = fill(store, 30)
        new_start = store.purge_segments(starts[20])
        assert 0 < new_start <= starts[20]
        assert store.start_position == new_start
        with pytest.raises(ArchiveError, match="outside"):
            store.read(0, store.stop_position)
        assert store.read(new_start, store.stop_position)
        stop = store.stop_position
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        assert (store.start_position, store.stop_position) == (new_start, stop)


# ---------------------------------------------------------------- tail repair


@pytest.mark.parametrize("segment_length", [SEGMENT, 1 << 20])
def test_torn_tail_cut_mid_frame_is_repaired_on_reopen(log_dir: Path, segment_length: int) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=segment_length) as store:
        starts = fill(store, 25)
        stop = store.stop_position
    torn_at = faults.tear_last_frame(FileStorage(log_dir.parent.parent))  # the helpers accept the member dir
    assert torn_at == starts[-1]
    lines: list[str] = []
    with RecordingStore.open(FileStorage(log_dir), segment_length=segment_length, log=lines.append) as store:
        assert store.stop_position == starts[-1]
        assert store.repair is not None
        assert store.repair.recording_id == 0
        assert store.repair.to_position == starts[-1]
        assert starts[-1] < store.repair.from_position < stop
        assert "torn" in store.repair.reason
        assert any("tail repaired" in line for line in lines)
        assert [f.payload for f in store.read_frames(0, store.stop_position)] == [payload(i) for i in range(24)]
        # And the recording is usable again at its new stop.
        store.append_entry(b"after repair", 1)
    with RecordingStore.open(FileStorage(log_dir), segment_length=segment_length) as store:
        assert store.repair is None


def test_bit_flip_in_last_frame_is_repaired_on_reopen(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        starts = fill(store, 25)
        stop = store.stop_position
    for seed in range(5):  # different bits each time, each one detected
        rng = random.Random(seed)
        last_start = faults.flip_bits_in_tail(FileStorage(log_dir), rng, count=1 + seed)
        lines: list[str] = []
        with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT, log=lines.append) as store:
            assert store.repair is not None, f"seed {seed}"
            assert store.repair.from_position == stop
            assert store.stop_position == last_start == store.repair.to_position
            assert lines
            # Put the frame back for the next round.
            store.append_entry(payload(len(starts) - 1), 0)
            assert store.stop_position == stop


def test_garbage_appended_after_last_frame_is_repaired_on_reopen(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        fill(store, 10)
        stop = store.stop_position
    for garbage in (b"\x00" * 40, bytes(range(7)), frame(b"wrong position", 0, 0)):
        assert faults.append_garbage(FileStorage(log_dir), garbage) == stop
        with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
            assert store.stop_position == stop
            assert store.repair is not None
            assert (store.repair.from_position, store.repair.to_position) == (stop + len(garbage), stop)


def test_truncate_tail_helper_across_segments(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        starts = fill(store, 30)
        stop = store.stop_position
    # Cut 300 bytes: more than a segment, ending mid-frame most likely.
    new_end = faults.truncate_tail(FileStorage(log_dir), 300)
    assert new_end == stop - 300
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        expected = max(s for s in [*starts, stop] if s <= new_end)
        assert store.stop_position == expected
        assert store.repair is not None or expected == new_end
    # truncate_at on an exact frame boundary is not damage at all.
    faults.truncate_at(FileStorage(log_dir), starts[5])
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        assert store.stop_position == starts[5]
        assert store.repair is None


def test_whole_last_segment_corrupt_drops_it_and_keeps_previous(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        fill(store, 30)
    bases = _segments(log_dir)
    last_base, last_path = bases[-1]
    data = bytearray(last_path.read_bytes())
    data[20] ^= 0x01  # corrupt the first frame's header (position field)
    last_path.write_bytes(bytes(data))
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        assert store.stop_position == last_base
        assert not last_path.exists()
        assert store.repair is not None and store.repair.to_position == last_base


def test_empty_trailing_segment_left_by_crash_is_removed(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        fill(store, 10)
        stop = store.stop_position
    (log_dir / segment_file_name(stop)).touch()
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        assert store.stop_position == stop
        assert store.repair is None
        assert store.append_entry(b"x", 0) > stop


def test_corrupt_middle_segment_raises_naming_file_and_offset(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        fill(store, 30)
    segments = _segments(log_dir)
    _base, middle = segments[1]
    size = middle.stat().st_size
    with open(middle, "r+b") as f:
        f.truncate(size - 32)  # lost bytes in the middle of the stream
    with pytest.raises(ArchiveError, match=rf"{middle.name}.*offset {size - 32}"):
        RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT)


def test_bit_flip_in_middle_segment_is_caught_on_read_and_verify(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        fill(store, 30)
    _base, middle = _segments(log_dir)[1]
    data = bytearray(middle.read_bytes())
    data[33] ^= 0x10  # first payload byte of the segment's first frame
    middle.write_bytes(bytes(data))
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        assert store.repair is None  # open checks sizes of older segments, not every CRC
        with pytest.raises(ArchiveError, match=rf"{middle.name} offset 0"):
            store.read(0, store.stop_position)
        with pytest.raises(ArchiveError, match=middle.name):
            store.verify()


def test_appended_data_survives_sigkill(log_dir: Path) -> None:
    """No Python-side buffering: whatever append() returned is on disk even if the process dies at once."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from clusterlab.core.archive.recording import RecordingStore
        from clusterlab.core.runtime.storage import FileStorage
        store = RecordingStore.open(FileStorage({str(log_dir)!r}), segment_length={SEGMENT})
        for i in range(50):
            store.append_entry(bytes([i]) * i, 2)
        print(store.stop_position, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=60)
    assert proc.returncode == -9, proc.stderr
    stop = int(proc.stdout.strip())
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        assert store.stop_position == stop
        assert store.repair is None
        assert [f.payload for f in store.read_frames(0, stop)] == [bytes([i]) * i for i in range(50)]


def test_closed_store_refuses_use(log_dir: Path) -> None:
    store = RecordingStore.open(FileStorage(log_dir))
    store.close()
    store.close()  # idempotent
    with pytest.raises(ArchiveError, match="closed"):
        store.append_entry(b"x", 0)


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.lists(st.binary(max_size=90), min_size=1, max_size=6)),
            st.tuples(st.just("truncate"), st.integers(0, 1000)),
            st.tuples(st.just("reopen"), st.just(0)),
        ),
        max_size=25,
    )
)
def test_store_matches_a_list_of_frames_model(tmp_path_factory: pytest.TempPathFactory, ops: list) -> None:
    directory = tmp_path_factory.mktemp("model")
    model: list[bytes] = []  # framed entries, in order
    store = RecordingStore.open(FileStorage(directory), segment_length=192)
    try:
        for op, arg in ops:
            if op == "append":
                start = sum(map(len, model))
                data = block(start, arg)
                store.append(data, start)
                pos = start
                for p in arg:
                    model.append(frame(p, pos, 0))
                    pos += len(model[-1])
            elif op == "truncate" and model:
                keep = arg % (len(model) + 1)
                del model[keep:]
                store.truncate(sum(map(len, model)))
            elif op == "reopen":
                store.close()
                store = RecordingStore.open(FileStorage(directory), segment_length=192)
                assert store.repair is None
            assert store.stop_position == sum(map(len, model))
            assert store.read(0, store.stop_position) == b"".join(model)
    finally:
        store.close()


def test_append_walked_appends_prewalked_frames_and_refuses_a_mismatch(tmp_path: Path) -> None:
    store = RecordingStore.open(FileStorage(tmp_path / "log"))
    block = b"".join(frame(bytes([i]) * 40, i * framed_length(40), 0) for i in range(3))
    walk = walk_frames(block, 0)
    with pytest.raises(ArchiveError, match="frames end at"):
        store.append_walked(block + b"\0" * 32, 0, walk.frames)
    with pytest.raises(ArchiveError, match="stop position"):
        store.append_walked(block, 32, walk.frames)
    assert store.stop_position == 0, "a refused block appends nothing"
    assert store.append_walked(block, 0, walk.frames) == len(block)
    assert store.read(0, len(block)) == block
    store.close()
    reopened = RecordingStore.open(FileStorage(tmp_path / "log"))
    assert reopened.stop_position == len(block) and reopened.repair is None
    reopened.close()


# ----------------------------------------------------------------------------------- the tail cache


def _ranges(rng: random.Random, stop: int, starts: list[int]) -> list[tuple[int, int, int | None]]:
    out = []
    for _ in range(200):
        frm = rng.choice(starts)
        to = rng.randrange(frm, stop + 64)
        out.append((frm, to, rng.choice([None, 1, 100, 300, 5000])))
    return out


def test_reads_from_the_tail_cache_equal_reads_from_the_files(log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache (what this store appended) answers exactly as the segment files do, whatever the
    range, the byte limit, and after it has been trimmed."""
    import clusterlab.core.archive.recording as recording

    monkeypatch.setattr(recording, "TAIL_CACHE_BYTES", 2048)  # trimmed many times below
    monkeypatch.setattr(recording, "TAIL_CACHE_TRIM_BYTES", 512)
    rng = random.Random(5)
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as cached:
        for i in range(40):
            if i % 3 == 0:
                cached.append_entries([payload(rng.randrange(1000)) for _ in range(rng.randrange(1, 6))], 0)
            else:
                cached.append_entry(payload(i), leadership_term_id=0)
        starts = [f.position for f in cached.read_frames(0, cached.stop_position)]
        assert cached._cache_starts and cached._cache_base > 0, "the cache was trimmed and still holds the tail"
        largest = max(map(len, cached._cache_chunks))
        assert 2048 <= cached._cache_bytes <= 2048 + 512 + largest
        assert cached._cache_bytes == sum(map(len, cached._cache_chunks))
        assert cached._cache_chunk_starts[0] == cached._cache_base == cached._cache_starts[0]
        with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as files:
            assert not files._cache_starts
            files_bytes = bytes(cached.start_position) + files.read(cached.start_position, cached.stop_position)
            for frm, to, limit in _ranges(rng, cached.stop_position, starts):
                assert cached.read(frm, to, max_bytes=limit) == files.read(frm, to, max_bytes=limit)
                assert cached.read_frames(frm, to, max_bytes=limit) == files.read_frames(frm, to, max_bytes=limit)
        with pytest.raises(ArchiveError, match="not a frame boundary"):
            cached.read(starts[-1] + 32, cached.stop_position)
        # holds(): the cached bytes compared where they lie, across blocks; False for anything else.
        base, stop = cached._cache_base, cached.stop_position
        for _ in range(200):
            frm = rng.randrange(base, stop)
            data = files_bytes[frm:stop][: rng.randrange(1, 3000)]
            assert cached.holds(frm, data)
            flipped = rng.randrange(len(data))
            assert not cached.holds(frm, data[:flipped] + bytes([data[flipped] ^ 1]) + data[flipped + 1 :])
        assert not cached.holds(base - 1, files_bytes[base - 1 : base + 10])  # begins before the cache
        assert not cached.holds(stop - 4, files_bytes[stop - 4 : stop] + b"x")  # ends past the log


def test_append_entries_frames_like_append_entry(tmp_path: Path) -> None:
    payloads = [payload(i) for i in range(12)]
    with RecordingStore.open(FileStorage(tmp_path / "one"), segment_length=SEGMENT) as one:
        ends = [one.append_entry(p, leadership_term_id=3) for p in payloads]
        single = one.read(0, one.stop_position)
    with RecordingStore.open(FileStorage(tmp_path / "many"), segment_length=SEGMENT) as many:
        assert many.append_entries(payloads[:5], 3) == ends[4]
        assert many.append_entries([], 3) == ends[4]
        assert many.append_entries(payloads[5:], 3) == ends[-1]
        assert many.read(0, many.stop_position) == single
        assert [f.payload for f in many.read_frames(0, many.stop_position)] == payloads
    names = [[s.name for _b, s in _segments(tmp_path / d)] for d in ("many", "one")]
    assert names[0] == names[1]


def test_truncate_drops_the_cached_tail(log_dir: Path) -> None:
    with RecordingStore.open(FileStorage(log_dir), segment_length=SEGMENT) as store:
        starts = fill(store, 10)
        store.truncate(starts[5])
        assert store.stop_position == starts[5]
        assert len(store.read_frames(0, starts[-1])) == 5
        store.append_entry(b"after truncate", leadership_term_id=1)
        frames = store.read_frames(starts[5], store.stop_position)
        assert [f.payload for f in frames] == [b"after truncate"] and frames[0].leadership_term_id == 1
