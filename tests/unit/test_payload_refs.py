"""Payload references (clusterlab.harness.payload_refs): a messages file keeps a LogBlock's or ReplayBlock's
entries as a reference into the committed log only where the bytes are the committed log's, byte for byte;
open_run puts them back, so every reader sees the payloads as recorded; entries the committed log does not
hold (an uncommitted tail, different bytes) stay inline; a torn or unclosed file is left as recorded; a
reference the committed log cannot answer is reported, never a silent short payload."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from clusterlab.core.codec import CanvassPosition, LogBlock, ReplayBlock, encode_session_message, frame
from clusterlab.core.codec.digests import entry_digest
from clusterlab.core.codec.enums import ReplayPurpose
from clusterlab.core.codec.framing import FRAME_HEADER_LENGTH
from clusterlab.core.codec.session_header import SESSION_HEADER_LENGTH
from clusterlab.core.consensus.context import Channel
from clusterlab.harness import payload_refs
from clusterlab.harness.payload_refs import (
    REF_DIGEST,
    REF_LENGTH,
    REF_POSITION,
    CommittedBytes,
    compact_messages,
    resolve_payloads,
    unresolved_payloads,
)
from clusterlab.harness.recorder import SCHEMAS, LogRow, ProcessRecorder, RunRecorder, process_recorder
from clusterlab.harness.trace import open_run, read_stream

TERM = 3


def _log(count: int) -> list[LogRow]:
    """``count`` committed session messages from position 0."""
    rows, position = [], 0
    for i in range(count):
        entry = frame(encode_session_message(TERM, 7, i, f"op-{i}".encode() * 20), position, TERM)
        position += len(entry)
        rows.append(LogRow(position, TERM, "SESSION_MESSAGE", entry))
    return rows


def _block(entries: bytes, start: int) -> bytes:
    return LogBlock(TERM, start, start + len(entries), 0, 1, entries).encode()


def _recorded(tmp_path: Path, rows: list[LogRow], *, close: bool = True) -> tuple[Path, list[bytes], list[bytes]]:
    """A run with the committed log ``rows`` and one node's messages file; returns (run dir, payloads in
    order, the entry blocks among them)."""
    run_dir = tmp_path / "run"
    run = RunRecorder(run_dir, "refs", members=[{"member_id": 0}])
    run.write_log(rows)
    log = b"".join(r.entry for r in rows)
    at = [r.log_position - len(r.entry) for r in rows]
    changed = bytearray(log[at[2] : at[4]])
    changed[-1] ^= 0xFF  # the same position, other bytes: a block that is not the committed log's
    tail = frame(b"uncommitted", len(log), TERM)
    blocks = [
        _block(log[at[0] : at[3]], 0),  # committed: referenced on both sends
        _block(log[at[3] :], at[3]),
        _block(log[at[3] :] + tail, at[3]),  # runs past the committed log
        _block(bytes(changed), at[2]),
        ReplayBlock(1, 0, at[1], len(log), TERM, ReplayPurpose.CATCHUP, 0, log[at[1] : at[2]]).encode(),
    ]
    others = [
        CanvassPosition(TERM, at[4], TERM, 0, 1).encode(),
        encode_session_message(TERM, 7, 1, b"x" * 300),  # a reply: not in the log
        encode_session_message(-1, 7, 0, b"op-1" * 20),  # the request the leader logged as entry 1
    ]
    payloads = [blocks[0], blocks[0], others[0], *blocks[1:], others[1], others[2]]
    rec = ProcessRecorder(run_dir, "refs", "node-0", 0, 0, max_rows=3)
    for i, payload in enumerate(payloads):
        rec.message("send" if i % 2 else "recv", "log", 1, payload, peer_process="node-1")
    if close:
        rec.close()
    else:
        rec.flush()
    return run_dir, payloads, blocks


def test_committed_entries_are_kept_once_and_read_back_whole(tmp_path: Path) -> None:
    rows = _log(6)
    run_dir, payloads, blocks = _recorded(tmp_path, rows)
    [path] = (run_dir / "messages").glob("*.arrow")
    size = path.stat().st_size
    stats = compact_messages(run_dir, CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows]))
    assert (stats.files, stats.rows, stats.referenced_rows, stats.inline_block_rows, stats.unverified_rows) == (
        1,
        9,
        5,
        2,
        0,
    )
    assert stats.bytes_before == size and stats.bytes_after == path.stat().st_size
    raw = read_stream(str(path)).table
    refs = list(zip(raw.column(REF_POSITION).to_pylist(), raw.column(REF_LENGTH).to_pylist(), strict=True))
    starts = [LogBlock.decode(blocks[0]).start_position, LogBlock.decode(blocks[1]).start_position]
    first, second = len(LogBlock.decode(blocks[0]).entries), len(LogBlock.decode(blocks[1]).entries)
    replay = ReplayBlock.decode(blocks[4])
    assert refs == [
        (0, first),
        (0, first),
        (None, None),  # not an entry block
        (starts[1], second),
        (None, None),  # entries past the committed log's end
        (None, None),  # other bytes at the same position
        (replay.start_position, len(replay.entries)),
        (None, None),  # a session message whose body the log does not hold
        (rows[0].log_position + FRAME_HEADER_LENGTH + SESSION_HEADER_LENGTH, 80),  # the request body, entry 1
    ]
    assert size - stats.bytes_after > sum(length for _, length in refs if length) // 2  # two more columns cost a little
    stored = raw.column("payload").to_pylist()
    assert stored[0] == blocks[0][: len(blocks[0]) - first] and stored[4] == payloads[4]
    assert stored[8] == payloads[8][:SESSION_HEADER_LENGTH]
    run = open_run(run_dir)
    assert run.messages.column("payload").to_pylist() == payloads
    assert not [f for f in run.completeness.findings + run.completeness.notes if f.file == "messages/"]


def test_a_second_compaction_and_an_unclosed_file_are_left_as_they_are(tmp_path: Path) -> None:
    rows = _log(6)
    committed = CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows])
    run_dir, _, _ = _recorded(tmp_path / "closed", rows)
    compact_messages(run_dir, committed)
    [path] = (run_dir / "messages").glob("*.arrow")
    once = path.read_bytes()
    again = compact_messages(run_dir, committed)
    assert (again.files, again.skipped_files, again.referenced_rows, path.read_bytes()) == (0, [], 0, once)
    killed_dir, killed_payloads, _ = _recorded(tmp_path / "killed", rows, close=False)
    [killed] = (killed_dir / "messages").glob("*.arrow")
    before = killed.read_bytes()
    stats = compact_messages(killed_dir, committed)
    assert (stats.files, stats.skipped_files, killed.read_bytes()) == (0, [killed.name], before)
    assert open_run(killed_dir).messages.column("payload").to_pylist() == killed_payloads


def test_a_reference_the_committed_log_cannot_answer_is_reported_and_left_short(tmp_path: Path) -> None:
    """A changed committed log is CORRUPT by the manifest; what the reader says on its own is a note: the
    entries were not the committed log's (a service given uncommitted entries is a protocol fault the
    checks judge, so it must not make the run unjudgeable)."""
    rows = _log(6)
    run_dir, payloads, blocks = _recorded(tmp_path, rows)
    compact_messages(run_dir, CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows]))
    RunRecorder(tmp_path / "short", "short").write_log(rows[:2])  # a committed log cut short
    (run_dir / "log" / "committed.arrow").write_bytes((tmp_path / "short" / "log" / "committed.arrow").read_bytes())
    run = open_run(run_dir)
    [note] = [f for f in run.completeness.notes if f.file == "messages/"]
    assert note.rows_lost == 3  # the replay block is in the first two
    assert "entries that are not log/committed.arrow's bytes" in note.problem
    assert not [f for f in run.completeness.findings if f.file == "messages/"]
    got = run.messages.column("payload").to_pylist()
    assert got[0] != payloads[0] and len(got[0]) < len(blocks[0])  # short, and reported: never passed off as whole
    stored = open_run(run_dir, whole_payloads=False)  # the checks' reader: the same digests, no bytes put back
    assert stored.completeness.notes == run.completeness.notes and not stored.whole_payloads


def test_a_reader_of_stored_bytes_verifies_the_references_and_puts_nothing_back(tmp_path: Path) -> None:
    """``open_run(whole_payloads=False)`` (the checks never read entries from messages) leaves each
    referenced row as stored, and still proves every reference by its digest."""
    rows = _log(6)
    run_dir, payloads, _ = _recorded(tmp_path, rows)
    compact_messages(run_dir, CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows]))
    [path] = (run_dir / "messages").glob("*.arrow")
    stored = read_stream(str(path)).table.column("payload").to_pylist()
    short = open_run(run_dir, whole_payloads=False)
    assert short.messages.column("payload").to_pylist() == stored != payloads
    assert not [f for f in short.completeness.notes if f.file == "messages/"]
    assert open_run(run_dir).messages.column("payload").to_pylist() == payloads


def test_whole_payloads_are_built_in_chunks_within_binary_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resolved column is one buffer per chunk (no bytes object per payload), sealed before a chunk
    would pass its limit: the same values whatever the split."""
    rows = _log(6)
    run_dir, payloads, blocks = _recorded(tmp_path, rows)
    compact_messages(run_dir, CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows]))
    short = open_run(run_dir, whole_payloads=False)
    monkeypatch.setattr(payload_refs._WholePayloads, "CHUNK_BYTES", max(map(len, blocks)) + 64)
    got, unresolved = resolve_payloads(short.messages, short.log)
    assert unresolved == 0 and got.column("payload").num_chunks > 2
    assert got.column("payload").to_pylist() == payloads


def test_committed_bytes_are_the_contiguous_run_from_the_first_entry() -> None:
    rows = _log(4)
    gap = [rows[0], rows[1], rows[3]]
    committed = CommittedBytes.of([r.log_position for r in gap], [r.entry for r in gap])
    assert committed.data == rows[0].entry + rows[1].entry
    assert committed.at(0, len(rows[0].entry)) == rows[0].entry
    assert committed.at(rows[1].log_position, 1) is None and committed.at(-32, 32) is None
    late = CommittedBytes.of([r.log_position for r in rows[2:]], [r.entry for r in rows[2:]])  # a log from a snapshot
    assert late.base == rows[1].log_position and late.at(rows[1].log_position, 8) == rows[2].entry[:8]


def test_a_table_without_references_is_returned_as_it_is(tmp_path: Path) -> None:
    rows = _log(6)
    run_dir, _, _ = _recorded(tmp_path, rows)
    inline = open_run(run_dir).messages
    assert inline.column(REF_LENGTH).null_count == inline.num_rows
    assert resolve_payloads(inline, SCHEMAS["log"].empty_table()) == (inline, 0)
    older = inline.drop_columns([REF_POSITION, REF_LENGTH, REF_DIGEST])  # a trace from before references
    assert resolve_payloads(older, SCHEMAS["log"].empty_table()) == (older, 0)
    compact_messages(run_dir, CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows]))
    [path] = (run_dir / "messages").glob("*.arrow")
    canvass = read_stream(str(path)).table.slice(2, 1)  # a row with null references
    assert resolve_payloads(canvass, SCHEMAS["log"].empty_table()) == (canvass, 0)


def _far_offsets(array: pa.Array) -> pa.Buffer:
    """``array``'s offsets with the second one far past its data: a cheap check (first and last) passes."""
    offsets = array.buffers()[1].to_pybytes()
    return pa.py_buffer(offsets[:4] + (1 << 30).to_bytes(4, "little") + offsets[8:])


def test_damaged_buffers_are_left_unread(tmp_path: Path) -> None:
    """Offsets a damaged file garbled are never followed (reading them could crash the reader): the table is
    returned as it is, and the manifest's checksums judge the file."""
    rows = _log(6)
    run_dir, _, _ = _recorded(tmp_path, rows)
    compact_messages(run_dir, CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows]))
    run = open_run(run_dir)
    [path] = (run_dir / "messages").glob("*.arrow")
    stored = read_stream(str(path)).table
    log = run.log.combine_chunks()
    entries = log.column("entry").chunk(0)
    garbled = pa.Array.from_buffers(pa.binary(), len(entries), [None, _far_offsets(entries), entries.buffers()[2]])
    damaged_log = log.set_column(log.schema.get_field_index("entry"), log.schema.field("entry"), garbled)
    assert resolve_payloads(stored, damaged_log) == (stored, 0)
    payload = stored.column("payload").combine_chunks()
    bad = pa.Array.from_buffers(pa.binary(), len(payload), [None, _far_offsets(payload), payload.buffers()[2]])
    damaged = stored.set_column(stored.schema.get_field_index("payload"), stored.schema.field("payload"), bad)
    assert resolve_payloads(damaged, log) == (damaged, 0)
    assert unresolved_payloads(damaged, log) == unresolved_payloads(stored, damaged_log) == 0  # unread too
    whole = resolve_payloads(stored, log)[0]
    assert whole.column("payload").to_pylist() == run.messages.column("payload").to_pylist()


def test_a_service_log_block_is_a_reference_when_recorded(tmp_path: Path) -> None:
    """A real process's recorder keeps a service-channel LogBlock's committed entries as a reference with
    their digest; the finish checks it; a reader puts the bytes back only when the digest agrees."""
    rows = _log(6)
    log = b"".join(r.entry for r in rows)
    run_dir = tmp_path / "run"
    RunRecorder(run_dir, "refs", members=[{"member_id": 0}]).write_log(rows)
    block, wrong = _block(log, 0), _block(log[:-1] + bytes([log[-1] ^ 1]), 0)
    rec = process_recorder(run_dir, "refs", "service-0", member_id=0)
    rec.message("recv", Channel.SERVICE, 0, block, peer_process="node-0")
    rec.message("recv", Channel.LOG, 1, block, peer_process="node-1")  # not the service channel: inline
    rec.message("recv", "service", 0, wrong, peer_process="node-0")  # not what was committed
    rec.close()
    [path] = (run_dir / "messages").glob("*.arrow")
    raw = read_stream(str(path)).table
    assert raw.column(REF_LENGTH).to_pylist() == [len(log), None, len(log)]
    assert raw.column(REF_DIGEST).to_pylist()[0] == entry_digest(log) != raw.column(REF_DIGEST).to_pylist()[2]
    assert raw.column("payload").to_pylist() == [block[: -len(log)], block, wrong[: -len(log)]]
    stats = compact_messages(run_dir, CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows]))
    assert (stats.referenced_rows, stats.unverified_rows, stats.files) == (1, 1, 1)  # the LOG row now, too
    run = open_run(run_dir)
    assert run.messages.column("payload").to_pylist()[:2] == [block, block]
    [note] = [f for f in run.completeness.notes if f.file == "messages/"]
    assert note.rows_lost == 1
    sim = ProcessRecorder(tmp_path / "sim", "sim", "service-0", 0, 0)  # the simulator's: always inline
    sim.message("recv", Channel.SERVICE, 0, block, peer_process="node-0")
    sim.close()
    [sim_path] = (tmp_path / "sim" / "messages").glob("*.arrow")
    assert read_stream(str(sim_path)).table.column("payload").to_pylist() == [block]


def test_a_log_block_is_a_reference_once_its_entries_are_committed_in_the_members_log(tmp_path: Path) -> None:
    """A node's log-channel LogBlock is written inline unless, when its rows' batch is written, the node's
    log holds its entries at its start position, committed: then it is a reference with their digest.
    Entries past the commit position, other bytes at that position, and drop rows stay inline."""
    rows = _log(6)
    log = b"".join(r.entry for r in rows)
    at = [r.log_position - len(r.entry) for r in rows]
    run_dir = tmp_path / "run"
    RunRecorder(run_dir, "refs", members=[{"member_id": 0}]).write_log(rows)
    commit = {"position": at[3]}  # the member's commit position, moved by the test

    def holds_committed(position: int, entries: memoryview) -> bool:
        end = position + len(entries)
        return end <= commit["position"] and log[position:end] == entries

    rec = process_recorder(run_dir, "refs", "node-0", member_id=0, max_rows=100)
    rec.refer_committed(holds_committed)
    early, late, changed = _block(log[: at[3]], 0), _block(log[at[3] :], at[3]), _block(log[:-1] + b"!", 0)
    rec.message("send", Channel.LOG, 1, early, peer_process="node-1")  # committed when recorded
    rec.message("recv", Channel.LOG, 1, late, peer_process="node-1")  # committed by the time it is written
    rec.message("drop", Channel.LOG, 1, early, peer_process="node-1", reason="unreachable")
    rec.message("send", Channel.LOG, 1, changed, peer_process="node-1")  # not the log's bytes
    commit["position"] = len(log)
    rec.flush()
    rec.message("send", Channel.LOG, 1, _block(log + frame(b"tail", len(log), TERM), 0), peer_process="node-1")
    rec.close()  # past the commit position when written
    [path] = (run_dir / "messages").glob("*.arrow")
    raw = read_stream(str(path)).table
    assert raw.column(REF_LENGTH).to_pylist() == [at[3], len(log) - at[3], None, None, None]
    assert raw.column(REF_POSITION).to_pylist()[:2] == [0, at[3]]
    assert raw.column(REF_DIGEST).to_pylist()[:2] == [entry_digest(log[: at[3]]), entry_digest(log[at[3] :])]
    heads = [len(early) - at[3], len(late) - len(log) + at[3], len(early)]
    assert [len(p) for p in raw.column("payload").to_pylist()[:3]] == heads
    stats = compact_messages(run_dir, CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows]))
    assert (stats.verified_rows, stats.unverified_rows) == (2, 0)
    run = open_run(run_dir)
    assert run.messages.column("payload").to_pylist()[:4] == [early, late, early, changed]
    assert not [f for f in run.completeness.findings + run.completeness.notes if f.file == "messages/"]
