"""The Storage interface: MemoryStorage and FileStorage behave alike, and FaultyStorage injects a table
of faults (ENOSPC, EIO, torn writes, lost unflushed writes, bit flips) over either."""

from __future__ import annotations

import errno
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from clusterlab.core.archive.errors import ArchiveError
from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.archive.storage import MemoryStorage, Storage, StorageFile
from clusterlab.core.consensus.node_state import NodeState
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.runtime.storage import FileStorage

from clusterlab.testing import disk_faults as faults
from clusterlab.testing.faulty_storage import FaultyStorage

KINDS = ["memory", "file"]


@pytest.fixture(params=KINDS)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    return MemoryStorage() if request.param == "memory" else FileStorage(tmp_path / "member")


def test_both_implementations_satisfy_the_protocol(storage: Storage) -> None:
    assert isinstance(storage, Storage)
    storage.make_dirs("a/b")
    f = storage.open("a/b/f")
    assert isinstance(f, StorageFile)
    f.close()


def test_files_read_write_truncate_list_remove(storage: Storage) -> None:
    storage.make_dirs("d")
    assert storage.list_dir("d") == [] and storage.list_dir("missing") == []
    f = storage.open("d/x.seg")
    f.write(0, b"hello")
    f.write(5, memoryview(b" world"))
    f.write(2, b"LL")
    assert f.read(0, 100) == b"heLLo world" and f.read(6, 3) == b"wor" and f.size() == 11
    f.truncate(5)
    assert f.read(0, 100) == b"heLLo" and storage.size("d/x.seg") == 5
    f.sync()
    f.close()
    storage.replace("d/y.json", b"{}", sync=True)
    storage.replace("d/y.json", b"[1]", sync=False)
    assert storage.read_file("d/y.json") == b"[1]"
    assert storage.list_dir("d") == ["x.seg", "y.json"]  # no temp file left by replace
    assert storage.exists("d/x.seg") and storage.exists("d")
    storage.remove("d/x.seg")
    assert not storage.exists("d/x.seg")
    storage.remove("d/x.seg", missing_ok=True)
    with pytest.raises(FileNotFoundError):
        storage.remove("d/x.seg")
    with pytest.raises(FileNotFoundError):
        storage.read_file("d/x.seg")
    with pytest.raises(FileNotFoundError):
        storage.open("d/x.seg", create=False)
    storage.sync_dir("d")


def test_the_stores_read_back_what_they_wrote_on_either_storage(storage: Storage) -> None:
    with RecordingStore.open(storage, "archive/log", segment_length=256) as rec:
        for i in range(20):
            rec.append_entry(bytes([i]) * 40, 1)
        stop = rec.stop_position
    with RecordingStore.open(storage, "archive/log", segment_length=256) as rec:
        assert rec.stop_position == stop and rec.segment_count > 1
        assert [f.payload for f in rec.read_frames(0, stop)] == [bytes([i]) * 40 for i in range(20)]
    NodeState.open(storage).propose_max_candidate_term_id(7, 0, 0)
    assert NodeState.open(storage).candidate_term_id == 7
    with RecordingLog.open(storage) as log:
        log.append_term(0, 3, 0, 0)
    with RecordingLog.open(storage) as log:
        assert [e.leadership_term_id for e in log.entries()] == [3]


def test_memory_power_loss_keeps_only_synced_data() -> None:
    m = MemoryStorage()
    f = m.open("a")
    f.write(0, b"durable")
    f.sync()
    f.write(7, b"+page-cache")
    m.replace("b", b"new", sync=False)  # never synced: vanishes
    m.replace("c", b"old", sync=True)
    m.replace("c", b"newer", sync=False)  # rename not durable: the old content returns
    assert m.unsynced_floor("a") == 7
    assert sorted(m.power_loss()) == ["a", "b", "c"]
    assert m.read_file("a") == b"durable" and not m.exists("b") and m.read_file("c") == b"old"


def _write(s: Storage) -> None:
    f = s.open("archive/log/f")
    try:
        f.write(f.size(), b"x" * 100)
    finally:
        f.close()


def _replace(s: Storage) -> None:
    s.replace("archive/catalogue.json", b"{}", sync=False)


def _grow(s: Storage) -> None:
    f = s.open("archive/log/f")
    try:
        f.truncate(f.size() + 10)
    finally:
        f.close()


def _shrink(s: Storage) -> None:
    f = s.open("archive/log/f")
    try:
        f.truncate(1)
    finally:
        f.close()


def _sync(s: Storage) -> None:
    f = s.open("archive/log/f")
    try:
        f.sync()
    finally:
        f.close()


def _create(s: Storage) -> None:
    s.open("archive/log/new").close()


# (fault code, operation, fails?) -- ENOSPC stops what needs space; EIO stops every write and fsync.
FAULT_TABLE: list[tuple[int, Callable[[Storage], None], bool]] = [
    (errno.ENOSPC, _write, True),
    (errno.ENOSPC, _replace, True),
    (errno.ENOSPC, _grow, True),
    (errno.ENOSPC, _create, True),
    (errno.ENOSPC, _shrink, False),
    (errno.ENOSPC, _sync, False),
    (errno.EIO, _write, True),
    (errno.EIO, _replace, True),
    (errno.EIO, _shrink, True),
    (errno.EIO, _sync, True),
    (errno.EIO, _create, True),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("code", "op", "fails"), FAULT_TABLE, ids=lambda v: getattr(v, "__name__", str(v)))
def test_fault_table(kind: str, code: int, op: Callable[[Storage], None], fails: bool, tmp_path: Path) -> None:
    inner: Storage = MemoryStorage() if kind == "memory" else FileStorage(tmp_path)
    s = FaultyStorage(inner, random.Random(1))
    s.make_dirs("archive/log")
    _write(s)
    s.replace("archive/catalogue.json", b'{"old": 1}', sync=False)
    s.fail_writes(code, "archive/")
    if fails:
        with pytest.raises(OSError) as info:
            op(s)
        assert info.value.errno == code and "archive/" in str(info.value)
        assert s.injected == 1
    else:
        op(s)
    assert inner.read_file("archive/catalogue.json") == b'{"old": 1}' or (op is _replace and not fails)
    s.clear()
    op(s)  # cleared: works again


def test_faults_apply_only_under_their_prefix_and_count_down() -> None:
    s = FaultyStorage(MemoryStorage())
    s.make_dirs("archive/log")
    s.fail_writes(errno.EIO, "archive/log/", count=2)
    s.replace("node-state.dat", b"ok", sync=True)  # other paths are unaffected
    for _ in range(2):
        with pytest.raises(OSError):
            _write(s)
    _write(s)  # the count is used up
    assert s.rules == [] and s.injected == 2


def test_torn_write_lands_a_prefix_then_fails() -> None:
    m = MemoryStorage()
    s = FaultyStorage(m, random.Random(3))
    m.make_dirs("archive/log")
    m.open("archive/log/f").close()  # creating is a write too: fail the data write only
    s.fail_writes(errno.EIO, "archive/", torn=True, count=1)
    with pytest.raises(OSError):
        _write(s)
    landed = m.size("archive/log/f")
    assert 0 < landed < 100 and m.read_file("archive/log/f") == b"x" * landed


def test_read_errors_are_eio() -> None:
    s = FaultyStorage(MemoryStorage())
    s.replace("a", b"data", sync=True)
    s.fail_reads("a")
    with pytest.raises(OSError) as info:
        s.read_file("a")
    assert info.value.errno == errno.EIO


@pytest.mark.parametrize("kind", KINDS)
def test_recording_store_refusing_an_append_keeps_its_stop_and_a_torn_chunk_is_cut_back(
    kind: str, tmp_path: Path
) -> None:
    inner: Storage = MemoryStorage() if kind == "memory" else FileStorage(tmp_path)
    s = FaultyStorage(inner, random.Random(5))
    store = RecordingStore.open(s, "log", segment_length=1024)
    store.append_entries([b"a" * 50] * 4, 1)
    stop = store.stop_position
    s.fail_writes(errno.ENOSPC, "log/", torn=True, count=1)
    with pytest.raises(OSError):
        store.append_entries([b"b" * 50] * 4, 1)
    assert store.stop_position == stop
    assert inner.size("log/0000000000000000.seg") == stop  # the torn bytes were cut off again
    assert store.append_entry(b"c", 1) > stop  # space again: appends continue at the same place
    store.close()
    with RecordingStore.open(inner, "log", segment_length=1024) as again:
        assert again.repair is None
        assert [f.payload for f in again.read_frames(0, again.stop_position)][-1] == b"c"


@pytest.mark.parametrize("kind", KINDS)
def test_disk_fault_helpers_work_through_either_storage(kind: str, tmp_path: Path) -> None:
    storage: Storage = MemoryStorage() if kind == "memory" else FileStorage(tmp_path)
    with RecordingStore.open(storage, "archive/log") as rec:
        for i in range(10):
            rec.append_entry(bytes([i]) * 30, 2)
        stop = rec.stop_position
    assert faults.stream_end(storage) == stop
    torn_at = faults.tear_last_frame(storage)
    with RecordingStore.open(storage, "archive/log") as rec:
        assert rec.stop_position == torn_at < stop and rec.repair is not None
    flipped = faults.flip_bits_in_tail(storage, random.Random(1), count=2)
    with RecordingStore.open(storage, "archive/log") as rec:
        assert rec.stop_position == flipped < torn_at
    end = faults.lose_unflushed_tail(storage, random.Random(2), 64)
    assert flipped - 64 < end < flipped
    with pytest.raises(ArchiveError, match="no frames"):
        faults.last_frame(MemoryStorage())


def test_lost_unflushed_tail_never_drops_synced_bytes() -> None:
    m = MemoryStorage()
    with RecordingStore.open(m, "archive/log", file_sync=True) as rec:
        for i in range(4):
            rec.append_entry(bytes([i]) * 30, 2)
        rec.flush()
        synced = rec.stop_position
    assert faults.lose_unflushed_tail(m, random.Random(0), 4096) == synced  # all of it is synced
