"""Payload references: a recorded message's log entries kept once, in the committed log.

A LogBlock carries framed log entries: the leader's ``send`` row, each follower's ``recv`` row, and the
node ↔ service rows of every member record the same bytes again, and ``log/committed.arrow`` holds them
once more (at 1 KiB payloads about 11 of the 14 KB a committed op leaves in a trace). A row whose entries
are the committed log's bytes keeps in ``payload`` only the bytes before the entries (message header,
block fields, the entries' length prefix) and names the rest in three columns:

- ``payload_ref_position`` (int64): the log position where the entries start;
- ``payload_ref_length`` (int32): how many bytes of the committed log follow it;
- ``payload_ref_digest`` (16 bytes): the entries' XXH3-128, so a reader proves the bytes it puts back
  are the bytes that were sent.

References are made twice:

- **when recorded**, by a real process's recorder, for a LogBlock on the ``service`` channel (node ↔
  its clustered services): the node sends its services committed entries only, so those bytes are in
  the committed log by construction (:func:`committed_block_ref`);
- **when a node's rows are written** (each record batch), for a LogBlock it sent or received on the
  ``log`` channel whose entries its own log then holds at the block's start position, committed, byte
  for byte (``ProcessRecorder.refer_committed``; the node answers from its archive's tail cache): most
  blocks are committed within a few milliseconds, well inside the 100 ms a row waits for its batch;
- **when the run finishes**, by :func:`compact_messages`, for every other LogBlock or ReplayBlock in a
  closed ``messages`` file whose entries it finds, byte for byte, in the committed log at the block's
  ``start_position``, and for every SessionMessageHeader (a client's request as the leader received it)
  whose body is a committed session message's body (``CommittedBytes.session_bodies``). It checks the
  digest of every reference made when recorded.

A reference names bytes, not the entry they came from: the payload is the stored bytes followed by the
committed log's ``length`` bytes from ``position``.

All three are null on a row whose payload is inline: every other message, entries that were never
committed (an uncommitted tail a new leader truncated), entries that differ from the committed log (a
bug under test), and the log-channel rows of a torn or unclosed file that were not referenced when
written (a killed process's file is evidence as it was written). :func:`resolve_payloads` (called by
``harness.trace.open_run``) puts the bytes back, checking each digest, so every reader of a run sees the
payloads as they were sent; a reference it cannot answer stays short and is counted (open_run reports it
as a completeness note: the manifest proves the files whole, so it means a service was sent entries that
were never committed). The checks' SQL views read only small consensus messages and never need the
entries.

The simulator's traces stay inline: goldens compare their message tables byte for byte.
"""

from __future__ import annotations

import array
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.ipc as ipc
from clusterlab.core.atomic import temp_path
from clusterlab.core.codec.digests import DIGEST_SIZE, entry_digest
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.framing import FRAME_HEADER_LENGTH, walk_frames
from clusterlab.core.codec.header import HEADER_LENGTH
from clusterlab.core.codec.registry import decode
from clusterlab.core.codec.session_header import SESSION_HEADER_LENGTH, session_message_fields
from clusterlab.core.codec.transport import LogBlock
from clusterlab.harness import arrow_stream

REF_POSITION = "payload_ref_position"
REF_LENGTH = "payload_ref_length"
REF_DIGEST = "payload_ref_digest"
REF_NAMES = (REF_POSITION, REF_LENGTH, REF_DIGEST)
REF_FIELDS = (
    pa.field(REF_POSITION, pa.int64(), True),
    pa.field(REF_LENGTH, pa.int32(), True),
    pa.field(REF_DIGEST, pa.binary(DIGEST_SIZE), True),
)
ENTRY_BLOCKS = frozenset({"LogBlock", "ReplayBlock"})  # the messages whose payload ends in framed log entries
SESSION_MESSAGE = "SessionMessageHeader"  # a client's request: its body is a session message entry's
MIN_REFERENCED = 64  # a shorter body costs more in reference columns than it saves

_LOG_BLOCK_HEAD = struct.Struct("<HH")  # block length, template id
_START_AT = HEADER_LENGTH + 8  # LogBlock.start_position, after leadership_term_id
_ENTRIES_AT = HEADER_LENGTH + LogBlock.BLOCK_LENGTH + 4  # after the entries' u32 length prefix
_I64 = struct.Struct("<q")
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class CommittedBytes:
    """The committed log as one byte string from log position ``base`` (the recording's bytes)."""

    base: int
    data: bytes

    @cached_property
    def session_bodies(self) -> dict[bytes, int]:
        """Digest of each session message entry's body -> the log position where the body starts (the
        first such entry): where a client's request, as the leader received it, is in the log."""
        bodies: dict[bytes, int] = {}
        for f in walk_frames(self.data, self.base).frames:
            if len(f.payload) - SESSION_HEADER_LENGTH >= MIN_REFERENCED and session_message_fields(f.payload):
                body = f.payload[SESSION_HEADER_LENGTH:]
                bodies.setdefault(entry_digest(body), f.position + FRAME_HEADER_LENGTH + SESSION_HEADER_LENGTH)
        return bodies

    @classmethod
    def of(cls, end_positions: Sequence[int], entries: Sequence[bytes]) -> CommittedBytes:
        """The ``log`` table's rows (end position, framed entry) joined: the contiguous run from the first."""
        if not entries:
            return cls(0, b"")
        base = end_positions[0] - len(entries[0])
        parts, expected = [], base
        for end, entry in zip(end_positions, entries, strict=True):
            if end - len(entry) != expected:
                break  # a gap: only what is contiguous can be referenced
            parts.append(entry)
            expected = end
        return cls(base, b"".join(parts))

    @classmethod
    def of_log(cls, log: pa.Table) -> CommittedBytes:
        """From a read ``log`` table (log/committed.arrow)."""
        if log.num_rows == 0:
            return cls(0, b"")
        return cls.of(log.column("log_position").to_pylist(), log.column("entry").to_pylist())

    def at(self, position: int, length: int) -> memoryview | None:
        """``length`` bytes from log position ``position`` (a view, not a copy: a block of a busy run is
        hundreds of KiB); None where the committed log does not hold them."""
        start = position - self.base
        if start < 0 or length < 0 or start + length > len(self.data):
            return None
        return self._view[start : start + length]

    @cached_property
    def _view(self) -> memoryview:
        return memoryview(self.data)


@dataclass
class CompactionStats:
    """What :func:`compact_messages` did: run.json's ``payload_refs``."""

    files: int = 0
    skipped_files: list[str] = field(default_factory=list)  # torn or unclosed: left as recorded
    rows: int = 0
    referenced_rows: int = 0
    inline_block_rows: int = 0  # entry blocks whose bytes are not the committed log's
    verified_rows: int = 0  # referenced when recorded, and the committed log holds those bytes
    unverified_rows: int = 0  # referenced when recorded, but the committed log lacks those bytes
    bytes_before: int = 0
    bytes_after: int = 0

    def as_meta(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "skipped_files": self.skipped_files,
            "rows": self.rows,
            "referenced_rows": self.referenced_rows,
            "inline_block_rows": self.inline_block_rows,
            "verified_rows": self.verified_rows,
            "unverified_rows": self.unverified_rows,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
        }


def log_block_layout(payload: bytes) -> tuple[int, int] | None:
    """A LogBlock's (start position, entries length), read from its fixed layout (its entries are the
    payload's last ``length`` bytes); None for anything else or a block without entries."""
    if len(payload) <= _ENTRIES_AT or _LOG_BLOCK_HEAD.unpack_from(payload) != (
        LogBlock.BLOCK_LENGTH,
        LogBlock.TEMPLATE_ID,
    ):
        return None
    (length,) = _U32.unpack_from(payload, _ENTRIES_AT - 4)
    if length != len(payload) - _ENTRIES_AT:
        return None
    (start,) = _I64.unpack_from(payload, _START_AT)
    return start, length


def committed_block_ref(payload: bytes) -> tuple[bytes, int, int, bytes] | None:
    """A LogBlock of committed entries as (payload without its entries, start position, entries length,
    entries digest), read from its fixed layout; None for anything else (kept inline)."""
    layout = log_block_layout(payload)
    if layout is None:
        return None
    start, length = layout
    return payload[:_ENTRIES_AT], start, length, entry_digest(memoryview(payload)[_ENTRIES_AT:])


def strip(payload: bytes, committed: CommittedBytes) -> tuple[bytes, int, int, bytes] | None:
    """(payload without its entries, start position, entries length, entries digest) when the entries are
    the committed log's bytes at the block's start position; None to keep the payload inline."""
    try:
        msg = decode(payload)
    except DecodeError:
        return None
    entries = getattr(msg, "entries", None)
    start = getattr(msg, "start_position", None)
    if not entries or start is None or not payload.endswith(entries):
        return None
    if committed.at(start, len(entries)) != memoryview(entries):
        return None
    return payload[: len(payload) - len(entries)], start, len(entries), entry_digest(entries)


def strip_session_message(payload: bytes, committed: CommittedBytes) -> tuple[bytes, int, int, bytes] | None:
    """(the session header, body position, body length, body digest) when a SessionMessageHeader's body is
    a committed session message's body (a request the leader took into the log); None to keep it inline."""
    if len(payload) - SESSION_HEADER_LENGTH < MIN_REFERENCED or session_message_fields(payload) is None:
        return None
    body = payload[SESSION_HEADER_LENGTH:]
    digest = entry_digest(body)
    position = committed.session_bodies.get(digest)
    if position is None or committed.at(position, len(body)) != memoryview(body):
        return None
    return payload[:SESSION_HEADER_LENGTH], position, len(body), digest


def resolves(committed: CommittedBytes, position: int, length: int, digest: bytes | None) -> memoryview | None:
    """The referenced entries, if the committed log holds them and they have ``digest``."""
    entries = committed.at(position, length)
    if entries is None or (digest is not None and entry_digest(entries) != digest):
        return None
    return entries


def _compact_batch(batch: pa.RecordBatch, committed: CommittedBytes, stats: CompactionStats) -> pa.RecordBatch | None:
    """``batch`` with its committed entries and request bodies as references; None when it has nothing to
    change."""
    names = batch.schema.names
    n = batch.num_rows
    stats.rows += n
    types = batch.column(names.index("msg_type")).to_pylist()
    candidates = [i for i, t in enumerate(types) if t in ENTRY_BLOCKS or t == SESSION_MESSAGE]
    refs: list[list[Any]] = [
        batch.column(names.index(f.name)).to_pylist() if f.name in names else [None] * n for f in REF_FIELDS
    ]
    positions, lengths, digests = refs
    payloads: list[Any] = []
    referenced = 0
    for i in candidates:
        if lengths[i] is not None:  # referenced when recorded: the digest proves the committed log has it
            if resolves(committed, positions[i], lengths[i], digests[i]) is None:
                stats.unverified_rows += 1
            else:
                stats.verified_rows += 1
            continue
        payloads = payloads or batch.column(names.index("payload")).to_pylist()
        if payloads[i] is None:
            continue
        if types[i] == SESSION_MESSAGE:
            got = strip_session_message(payloads[i], committed)
        elif (got := strip(payloads[i], committed)) is None:
            stats.inline_block_rows += 1
        if got is None:
            continue
        payloads[i], positions[i], lengths[i], digests[i] = got
        referenced += 1
    stats.referenced_rows += referenced
    if not referenced and REF_LENGTH in names:
        return None
    columns = {name: batch.column(j) for j, name in enumerate(names)}
    if referenced:
        columns["payload"] = pa.array(payloads, columns["payload"].type)
    for f, values in zip(REF_FIELDS, refs, strict=True):
        columns[f.name] = pa.array(values, f.type)
    schema = batch.schema
    for f in REF_FIELDS:
        if f.name not in names:
            schema = schema.append(f)
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


def compact_file(path: Path, committed: CommittedBytes, stats: CompactionStats, compression: str | None) -> None:
    """Rewrite one closed messages file with its committed entries as references (atomically: a failure
    leaves the file as it was); a file with nothing to reference is left untouched."""
    got = arrow_stream.read_stream(str(path))
    if got.error is not None or not got.closed or got.schema is None:
        stats.skipped_files.append(path.name)
        return
    changed = [_compact_batch(b, committed, stats) for b in got.batches]
    if all(b is None for b in changed):
        return
    batches = [new if new is not None else old for new, old in zip(changed, got.batches, strict=True)]
    tmp = temp_path(path)
    try:
        options = ipc.IpcWriteOptions(compression=compression)
        with pa.OSFile(str(tmp), "wb") as sink, ipc.new_stream(sink, batches[0].schema, options=options) as w:
            for b in batches:
                w.write_batch(b)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    stats.files += 1
    stats.bytes_before += got.size
    stats.bytes_after += path.stat().st_size


def compact_messages(run_dir: Path | str, committed: CommittedBytes, compression: str | None = None) -> CompactionStats:
    """Every closed ``messages/*.arrow`` file of ``run_dir`` with the entries the committed log holds as
    references, and every reference made when recorded checked against it (module docstring). Call it
    when every process has stopped, before the manifest."""
    stats = CompactionStats()
    for path in sorted((Path(run_dir) / "messages").glob("*.arrow")):
        compact_file(path, committed, stats, compression)
    return stats


def resolve_payloads(messages: pa.Table, log: pa.Table) -> tuple[pa.Table, int]:
    """``messages`` with every referenced payload whole again, its bytes from ``log`` (the ``log`` table);
    returns (table, rows left unresolved: the committed log does not hold their bytes, or holds other
    bytes). A table whose buffers do not validate (a damaged file: the manifest's checksums judge it) is
    returned as it is, unread."""
    found = _referenced_entries(messages, log)
    if found is None:
        return messages, 0
    index = messages.column_names.index("payload")
    whole = _WholePayloads()
    for stored, entries in zip(messages.column(index).to_pylist(), found, strict=True):
        whole.add(stored, entries if entries is not False else None)
    field_ = messages.schema.field(index)
    return messages.set_column(index, field_, whole.column()), found.count(False)


def unresolved_payloads(messages: pa.Table, log: pa.Table) -> int:
    """The rows :func:`resolve_payloads` would leave unresolved, found by the same digests without putting
    any bytes back: for a reader that never reads the entries (the checks' SQL views)."""
    found = _referenced_entries(messages, log)
    return 0 if found is None else found.count(False)


def _referenced_entries(messages: pa.Table, log: pa.Table) -> list[memoryview | Literal[False] | None] | None:
    """Per row of ``messages``: None (inline), its referenced entries (a view of the committed log whose
    digest matched) or False (unresolved). None for a table without references, or one whose buffers do
    not validate (reading damaged offsets could crash the process)."""
    try:
        names = messages.column_names
    except UnicodeDecodeError:  # a damaged schema
        return None
    if REF_LENGTH not in names or messages.column(REF_LENGTH).null_count == messages.num_rows:
        return None
    try:
        messages.validate(full=True)
        log.validate(full=True)
        committed = CommittedBytes.of_log(log)
    except (pa.ArrowException, UnicodeDecodeError, KeyError):
        return None
    if messages.column("payload").null_count:  # not a recorder's table (payload is never null): left as it is
        return None
    positions = messages.column(REF_POSITION).to_pylist()
    lengths = messages.column(REF_LENGTH).to_pylist()
    digests = messages.column(REF_DIGEST).to_pylist() if REF_DIGEST in names else [None] * len(lengths)
    found: list[memoryview | Literal[False] | None] = []
    for position, length, digest in zip(positions, lengths, digests, strict=True):
        entries = None if length is None else resolves(committed, position, length, digest)
        found.append(False if length is not None and entries is None else entries)
    return found


class _WholePayloads:
    """A binary column built row by row from stored bytes and the referenced entries after them, into
    one growing buffer per chunk: no bytes object per whole payload (a block of a busy run is hundreds of
    KiB, and allocating each made reading a run mostly page faults)."""

    CHUNK_BYTES = 1 << 30  # well inside a binary array's 32-bit offsets

    def __init__(self) -> None:
        self._chunks: list[pa.Array] = []
        self._data = bytearray()
        self._offsets = array.array("i", [0])

    def add(self, stored: bytes, entries: memoryview | None) -> None:
        size = len(stored) + (len(entries) if entries is not None else 0)
        if len(self._data) + size > self.CHUNK_BYTES and len(self._offsets) > 1:
            self._seal()
        self._data += stored
        if entries is not None:
            self._data += entries
        self._offsets.append(len(self._data))

    def _seal(self) -> None:
        n = len(self._offsets) - 1
        buffers = [None, pa.py_buffer(self._offsets), pa.py_buffer(self._data)]
        self._chunks.append(pa.Array.from_buffers(pa.binary(), n, buffers))
        self._data = bytearray()
        self._offsets = array.array("i", [0])

    def column(self) -> pa.ChunkedArray:
        self._seal()
        return pa.chunked_array(self._chunks, pa.binary())
