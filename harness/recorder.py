"""The trace recorder: every message, every applied entry, every event and client op, as Arrow IPC streams.

The format is the contract in ``docs/trace-schema.md`` (columns are added here, never changed):

```
RUN_DIR/run.json                  RunRecorder: metadata, written at start (outcome "running") and at finish
                                  with schema_version and the manifest of every file, sealed (harness/completeness.py)
RUN_DIR/<table>/<process>-i<incarnation>.arrow   one Arrow IPC stream per process incarnation and table
RUN_DIR/log/committed.arrow       RunRecorder.finish: the committed log
```

Three layers:

- :class:`TableWriter` — one stream file. Rows are buffered in column lists and written as one record
  batch when ``max_rows`` are buffered, when the oldest buffered row is ``flush_interval_ns`` (100 ms)
  old, and on close. A killed process therefore loses at most the last 100 ms, *provided* something
  calls :meth:`TableWriter.poll` (or records a row) at least that often: the runtime's duty cycle
  calls :meth:`ProcessRecorder.poll` every loop and includes :meth:`ProcessRecorder.next_deadline_ns`
  in its poll timeout. Time comes from the caller's ``clock`` (virtual in the simulator). The member
  processes open theirs with ``flush_in_poll``: a due batch (full or old) is then written by that
  poll, at the end of the cycle after its sends, not inside the handler that records the row (a
  batch's conversion and write takes 1-5 ms: on the path of every entry in flight otherwise); twice
  ``max_rows`` is still written at once.
- :class:`ProcessRecorder` — what one process calls: ``message()`` at every send, receive and chaos
  drop; ``applied()`` as the service agent's ``on_applied``; ``event()`` as the consensus module's
  ``EventSink``; ``op()`` for a client's history. Tables are opened lazily.
- :class:`RunRecorder` — the harness's: run.json, its own ``harness`` process recorder for lifecycle
  and fault events, and at the end the committed ``log`` table read from a member's archive.

Columns added to the contract (each table keeps the contract's columns first, in its order):

- messages: ``peer_process`` (the process at the other end, e.g. ``client-0``, ``service-2``),
  ``msg_id`` (transport id of one message copy, the same on its ``send`` and its ``recv``/``drop``
  row; null when the transport has none — the simulator uses the network's sequence number) and
  ``reason`` (why a ``drop`` row was dropped: ``loss``, ``partition``, ``isolated``, ``blocked``,
  ``gate``). A ``drop`` row is written by the process whose chaos gate dropped the message — the
  sender, as the runtime's gate sits on the send path — with ``peer``/``peer_process`` naming the
  receiver it never reached, like the ``send`` row.
- applied: ``wall_ns`` and ``seq``. events: ``incarnation`` (of the recording process) and ``seq``.
  ops: ``seq``.

Wiring into the runtime (core/runtime; ``rec`` is ``process_recorder(trace_dir, run_id, process,
member_id=..., incarnation=..., clock=time.monotonic_ns)``, a NullRecorder when recording is off;
``trace_dir``/``run_id`` travel in cluster.json or on the command line):

- node process (``node-<i>``): ``ConsensusModuleContext(events=...)`` calls ``rec.event`` (it has the
  EventSink signature; keep the log line too); ``Outbox.send`` records ``rec.message("send", channel,
  dst, payload, peer_process=f"node-{dst}")`` where the message is handed to its Link (after the
  gate, so a delayed message is recorded when it leaves) and ``rec.message("drop", channel, dst,
  payload, peer_process=f"node-{dst}", reason="gate")`` where ``ChaosGate.admit`` drops (not when
  it holds); the service link records ``send``/``recv`` with peer = own id and
  ``peer_process=f"service-{i}"``; ``send_egress`` records ``send`` on ``egress`` (peer -1); every
  socket handler records ``rec.message("recv", channel, src, payload, peer_process=...)`` right
  after ``parse`` succeeds (src -1 for ingress and control); the control socket records its
  requests and replies on ``control``. The duty cycle calls ``rec.poll()`` once per loop (no
  argument: the recorder reads its own clock) and folds ``rec.next_deadline_ns()`` into its poll
  timeout (on ``time.monotonic_ns``: subtract ``time.monotonic_ns()``, not the skewed process
  clock); ``close()`` in the process's ``finally``.
- service process (``service-<i>``): ``ClusteredServiceAgent(on_applied=rec.applied)`` (chain it with
  the process's own callback), ``send``/``recv`` on ``service`` for its node link, ``send`` on
  ``egress`` for replies; poll/deadline/close as the node.
- harness (LocalCluster): a :class:`RunRecorder` on the run directory; every lifecycle and fault
  event also goes to ``run.event(kind, member_id, **detail)``; at the end
  ``run.finish(outcome, member_dirs={i: member_dir(i)})`` (the commit position is read from the
  nodes' ``commit`` events). Clients record ``op(...)`` rows in their own process recorder.

``msg_type``/``leadership_term_id``/``log_position`` are promoted from the payload without decoding it:
the template id from the header, then the two fixed-block fields at their precomputed offsets (see
:func:`promote`). ``LogBlock`` and ``ReplayBlock`` report their term and their *end* position.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import errno
import itertools
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
from clusterlab.core import __version__
from clusterlab.core.archive.layout import LOG_DIR
from clusterlab.core.archive.recording import list_segments
from clusterlab.core.archive.storage import Storage
from clusterlab.core.atomic import write_atomically
from clusterlab.core.codec import AppendPosition, CommitPosition, LogBlock, encode_session_message
from clusterlab.core.codec.digests import ENTRY_DIGEST_NAME, entry_digest
from clusterlab.core.codec.framing import HDR_TYPE_PAD, frame, walk_frames
from clusterlab.core.codec.registry import REGISTRY, message_name
from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.recording import DROP as DROP
from clusterlab.core.runtime.recording import RECV as RECV
from clusterlab.core.runtime.recording import SEND as SEND
from clusterlab.core.runtime.recording import NullRecorder
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.core.service.agent import EntryType
from clusterlab.harness.completeness import SCHEMA_VERSION, TABLES, manifest, sealed_json
from clusterlab.harness.payload_refs import (
    REF_FIELDS,
    REF_NAMES,
    CommittedBytes,
    committed_block_ref,
    compact_messages,
    log_block_layout,
)
from clusterlab.harness.promotion import COMPILED as PROMOTION_COMPILED
from clusterlab.harness.promotion import promote_fixed, promote_one

# ---------------------------------------------------------------------------------------------- schemas

# A process whose recording stopped on a disk fault writes RUN/incomplete/<process>.json (the
# contract with the trace readers, which then call the run INCOMPLETE); the page it needs is set
# aside in incomplete/.reserve/ when recording starts and released at a clean close.
INCOMPLETE_DIR = "incomplete"
RESERVE_DIR = ".reserve"
MARKER_RESERVE_BYTES = 4096
DIGEST_SIZE = 16
DEFAULT_FLUSH_INTERVAL_NS = 100_000_000  # 100 ms: the most a SIGKILL may lose
DEFAULT_MAX_ROWS = 4096
WRITE_BUFFER_BYTES = 256 * 1024  # a table file's write buffer, flushed after every record batch

# Message directions (the contract's values) and NullRecorder live in the runtime, which records
# without importing this module (it opens a ProcessRecorder by name: RECORDER_FACTORY).


def _f(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


SCHEMAS: dict[str, pa.Schema] = {
    "messages": pa.schema(
        [
            _f("run_id", pa.string()),
            _f("member_id", pa.int16()),
            _f("process", pa.string()),
            _f("incarnation", pa.int32()),
            _f("seq", pa.int64()),
            _f("wall_ns", pa.int64()),
            _f("mono_ns", pa.int64()),
            _f("direction", pa.string()),
            _f("channel", pa.string()),
            _f("peer", pa.int16()),
            _f("msg_type", pa.string()),
            _f("leadership_term_id", pa.int64(), True),
            _f("log_position", pa.int64(), True),
            _f("payload", pa.binary()),
            # added columns
            _f("peer_process", pa.string(), True),
            _f("msg_id", pa.int64(), True),
            _f("reason", pa.string(), True),
            *REF_FIELDS,  # a payload's committed entries by reference (harness/payload_refs.py)
        ]
    ),
    "applied": pa.schema(
        [
            _f("run_id", pa.string()),
            _f("member_id", pa.int16()),
            _f("service_id", pa.int16()),
            _f("incarnation", pa.int32()),
            _f("log_position", pa.int64()),
            _f("length", pa.int32()),
            _f("leadership_term_id", pa.int64()),
            _f("entry_type", pa.string()),
            _f("cluster_time", pa.int64()),
            _f("entry_digest", pa.binary(DIGEST_SIZE)),
            _f("state_digest", pa.binary(DIGEST_SIZE)),
            _f("replay", pa.bool_()),
            # added columns
            _f("wall_ns", pa.int64()),
            _f("seq", pa.int64()),
        ]
    ),
    "events": pa.schema(
        [
            _f("run_id", pa.string()),
            _f("wall_ns", pa.int64()),
            _f("source", pa.string()),
            _f("member_id", pa.int16()),
            _f("kind", pa.string()),
            _f("leadership_term_id", pa.int64(), True),
            _f("log_position", pa.int64(), True),
            _f("detail", pa.string()),
            # added columns
            _f("incarnation", pa.int32()),
            _f("seq", pa.int64()),
        ]
    ),
    "ops": pa.schema(
        [
            _f("run_id", pa.string()),
            _f("client_id", pa.int32()),
            _f("op_id", pa.int64()),
            _f("kind", pa.string()),
            _f("wall_ns", pa.int64()),
            _f("f", pa.string()),
            _f("key", pa.string(), True),
            _f("value", pa.string(), True),
            _f("result", pa.string(), True),
            _f("cluster_session_id", pa.int64(), True),
            _f("correlation_id", pa.int64(), True),
            _f("log_position", pa.int64(), True),
            # added columns
            _f("seq", pa.int64()),
            _f("arg", pa.string(), True),  # JSON of the op's other argument: cas expected, add delta
        ]
    ),
    "log": pa.schema(
        [
            _f("log_position", pa.int64()),
            _f("leadership_term_id", pa.int64()),
            _f("entry_type", pa.string()),
            _f("entry", pa.binary()),
        ]
    ),
}


def file_name(process: str, incarnation: int) -> str:
    """``node-1-i0.arrow``: the stream file of one process incarnation (same name in every table)."""
    return f"{process}-i{incarnation}.arrow"


# ---------------------------------------------------------------------------------------------- writer

_INT_CODES = {pa.int64(): "q", pa.int32(): "i", pa.int16(): "h"}
_BINARY = pa.binary()
_STRING = pa.string()
_DIGEST = pa.binary(DIGEST_SIZE)
_BOOL = pa.bool_()
_INT64 = pa.int64()
_SESSION_MESSAGE = str(EntryType.SESSION_MESSAGE)  # an AppliedRun's entry_type


_IOTA: list[pa.Array] = [pa.array(range(DEFAULT_MAX_ROWS), _INT64)]


def _iota(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int64 (a slice of a cached array, grown when a batch is larger)."""
    iota = _IOTA[0]
    if len(iota) < n:
        iota = _IOTA[0] = pa.array(range(2 * n), _INT64)
    return iota.slice(0, n)


def _to_arrow(values: Any, type_: pa.DataType) -> pa.Array:
    """A column as an Arrow array. Integer columns without nulls skip pyarrow's Python-sequence
    conversion (several times slower for the small batches a trace writes) and wrap a packed buffer;
    a digest column (16-byte values) is one join; a column of one value (string, bool, integer) is a
    repeat, a column of nulls is ``pa.nulls``; the ``seq`` column (a ``range``) is a vector add to a
    cached 0, 1, 2, ...: all give the bytes the general conversion gives (no validity buffer when
    there is no null). The payload column is pyarrow's own conversion: for values up to ~1 KiB it
    takes half the time of a join plus an offsets buffer (the join's large allocation), about the
    same above."""
    n = len(values)
    if n and values[0] is None and values.count(None) == n:
        return pa.nulls(n, type_)  # peer_process, msg_id, reason of most rows
    if type_ == _STRING:
        # One value throughout (a batch's entry_type, direction, channel): a repeat, not a conversion.
        first = values[0] if values else None
        if type(first) is str and values.count(first) == len(values):
            return pa.repeat(pa.scalar(first, type_), len(values))
    elif type_ == _DIGEST:
        try:
            data = b"".join(values)
        except TypeError:
            pass
        else:
            # Every value 16 bytes: the total says so once the shortest is 16 (pa.array would raise).
            if len(data) == DIGEST_SIZE * len(values) and (not values or min(map(len, values)) == DIGEST_SIZE):
                return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(data)])
    elif type_ == _BOOL:
        # One value throughout (the applied rows' replay flag): a repeat, not a conversion.
        first = values[0] if values else None
        if type(first) is bool and values.count(first) == len(values):
            return pa.repeat(pa.scalar(first, type_), len(values))
    elif type_ == _BINARY and n:
        column = _large_binary_column(values)
        if column is not None:
            return column
    code = _INT_CODES.get(type_)
    if code is not None:
        if type(values) is range and values.step == 1 and type_ == _INT64:
            # The seq column: a slice of a cached 0, 1, 2, ... plus its start (one vector add).
            return pc.add(_iota(n), pa.scalar(values.start, type_))
        first = values[0] if n > 1 else None
        if type(first) is int and values[-1] == first and values.count(first) == n:
            # One value throughout (wall and mono clocks of a batch, a term, a length, a peer).
            with contextlib.suppress(pa.ArrowInvalid):  # out of range: the packed path says so
                return pa.repeat(pa.scalar(first, type_), n)
        try:
            packed = array.array(code, values)
        except TypeError:  # a null: the general path
            pass
        else:
            return pa.Array.from_buffers(type_, len(packed), [None, pa.py_buffer(packed)])
    return pa.array(values, type=type_)


# Above this mean value size a binary column is one join plus an offsets buffer (below it, pyarrow's
# conversion is faster: ~3x for 64-byte values).
_JOIN_ABOVE_BYTES = 512


def _large_binary_column(values: list[Any]) -> pa.Array | None:
    """A binary column of large values (LogBlocks, 1 KiB requests) as one ``b"".join`` and an offsets
    buffer, or None where pyarrow's conversion is the faster (small values) or is needed (a null, a
    non-bytes value, more than 2 GiB). pyarrow's builder grows its buffers by reallocation, and a
    batch's freed buffers go back to the OS before the next batch (mimalloc's purge), so every batch
    of large values copies and page-faults its bytes several times; a join copies them once into the
    process's own heap, which keeps freed memory (core/runtime/runner.tune_malloc)."""
    offsets = array.array("i", [0])
    try:
        offsets.extend(itertools.accumulate(map(len, values)))
    except (TypeError, OverflowError):  # a null; more than 2 GiB
        return None
    if offsets[-1] <= _JOIN_ABOVE_BYTES * len(values):
        return None
    try:
        data = b"".join(values)
    except TypeError:  # not bytes-like
        return None
    return pa.Array.from_buffers(_BINARY, len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


# A test hook for disk faults the machine cannot make on demand: ``ERRNO[,after=N][,process=PREFIX]
# [,table=TABLE]`` makes every trace write (of TABLE only, if given) of a process whose name starts
# with PREFIX raise OSError(ERRNO) once N writes (file opens and batches) of the process have
# succeeded, e.g. ``ENOSPC,after=20,process=node-``.
TRACE_WRITE_FAULT_ENV = "CLUSTERLAB_TRACE_WRITE_FAULT"


class WriteFault:
    """An injected disk fault shared by the writers of one process (see :data:`TRACE_WRITE_FAULT_ENV`)."""

    def __init__(self, error: int, after: int = 0, table: str | None = None) -> None:
        self.error = error
        self.after = after
        self.table = table
        self.writes = 0

    @classmethod
    def from_env(cls, process: str, environ: Mapping[str, str] = os.environ) -> WriteFault | None:
        """The fault the environment asks for in ``process``, or None."""
        spec = environ.get(TRACE_WRITE_FAULT_ENV, "").strip()
        if not spec:
            return None
        name, *options = (part.strip() for part in spec.split(","))
        code = getattr(errno, name, None)
        if not isinstance(code, int) or not name.startswith("E"):
            raise ValueError(f"{TRACE_WRITE_FAULT_ENV}={spec!r}: {name!r} is not an errno name such as ENOSPC or EIO")
        after, prefix, table = 0, "", None
        for option in options:
            key, _, value = option.partition("=")
            if key == "after" and value.isdigit():
                after = int(value)
            elif key == "process":
                prefix = value
            elif key == "table" and value in TABLES:
                table = value
            else:
                raise ValueError(
                    f"{TRACE_WRITE_FAULT_ENV}={spec!r}: unknown option {option!r} "
                    "(use after=N, process=PREFIX, table=TABLE)"
                )
        return cls(code, after, table) if process.startswith(prefix) else None

    def check(self, table: str) -> None:
        """Count one write to ``table``; raise the fault once ``after`` writes have passed."""
        self.writes += 1
        if self.writes > self.after and self.table in (None, table):
            raise OSError(self.error, f"{os.strerror(self.error)} (injected by {TRACE_WRITE_FAULT_ENV})")


class TableWriter:
    """One Arrow IPC stream file of one table; see the module docstring.

    ``constants`` are columns with one value for the whole file (run_id, process, ...): they are not
    buffered per row. If the schema has ``seq`` and it is not a constant, it is the row number in the
    file, filled in at flush. Every other column is appended by the caller, in schema order, through
    :meth:`append` (or straight into :attr:`columns` followed by :meth:`row_added`, which is what the
    hot paths do)."""

    def __init__(
        self,
        path: Path | str,
        schema: pa.Schema,
        clock: Callable[[], int],
        *,
        constants: Mapping[str, Any] | None = None,
        max_rows: int = DEFAULT_MAX_ROWS,
        flush_interval_ns: int = DEFAULT_FLUSH_INTERVAL_NS,
        compression: str | None = None,
        on_error: Callable[[TableWriter, OSError], None] | None = None,
        fault: WriteFault | None = None,
        flush_in_poll: bool = False,
    ) -> None:
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        if flush_interval_ns < 0:
            raise ValueError(f"flush_interval_ns must be >= 0, got {flush_interval_ns}")
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"trace file {self.path} exists: one file per process incarnation")
        self.schema = schema
        self._clock = clock
        self.max_rows = max_rows
        self.flush_interval_ns = flush_interval_ns
        # A writer polled every duty cycle (``flush_in_poll``) leaves a due batch (full or old) to the
        # cycle's :meth:`poll`, after the cycle's sends, instead of writing it inside the handler that
        # added the row; only twice ``max_rows`` is flushed at once (a bound on the buffer).
        self.flush_in_poll = flush_in_poll
        # Arrow IPC buffer compression ("zstd", "lz4"): pyarrow reads it transparently; off by default
        # so that any Arrow reader (Spark's Java Arrow without its compression module) can read a trace.
        self._options = ipc.IpcWriteOptions(compression=compression)
        constants = dict(constants or {})
        unknown = set(constants) - set(schema.names)
        if unknown:
            raise ValueError(f"constants {sorted(unknown)} are not columns of {schema.names}")
        self._constants = {name: pa.scalar(value, schema.field(name).type) for name, value in constants.items()}
        self._has_seq = "seq" in schema.names and "seq" not in constants
        self.varying: tuple[str, ...] = tuple(
            n for n in schema.names if n not in constants and not (n == "seq" and self._has_seq)
        )
        self.columns: tuple[list[Any], ...] = tuple([] for _ in self.varying)
        self.buffered = 0
        self.rows_written = 0
        self.batches_written = 0
        self.bytes_written = 0
        self._deadline_ns: int | None = None  # when the oldest buffered row must be on disk
        self._sink: pa.NativeFile | None = None
        self._writer: ipc.RecordBatchStreamWriter | None = None
        self.closed = False
        # Disk faults: with ``on_error`` a write's OSError (ENOSPC, EIO, ...) stops this writer
        # (rows are discarded from then on) and is reported there instead of raised.
        self.on_error = on_error
        self.failed: OSError | None = None
        self._fault = fault
        # Called with True just before the buffered rows become a batch (they may still be edited), and
        # with False when they are discarded (a disk fault): the owner's bookkeeping of buffered rows.
        self.on_batch: Callable[[bool], None] | None = None

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next appended row gets."""
        return self.rows_written + self.buffered

    def append(self, *values: Any) -> None:
        """One row: a value for each name in :attr:`varying`, in that order."""
        for column, value in zip(self.columns, values, strict=True):
            column.append(value)
        self.row_added()

    def row_added(self, count: int = 1) -> None:
        """Count ``count`` rows appended straight into :attr:`columns`; flush if the buffer is full or old."""
        if self.closed:
            raise ValueError(f"{self.path} is closed")
        if self.failed is not None:
            self._discard()
            return
        self.buffered += count
        if self.buffered >= self.max_rows:
            if not self.flush_in_poll or self.buffered >= 2 * self.max_rows:
                self.flush()
            else:
                self._deadline_ns = 0  # due: the next poll writes it
            return
        deadline = self._deadline_ns
        if deadline is None:
            self._deadline_ns = self._clock() + self.flush_interval_ns
        elif not self.flush_in_poll and self._clock() >= deadline:
            self.flush()

    def poll(self, now_ns: int | None = None) -> bool:
        """Flush if the oldest buffered row has waited ``flush_interval_ns``. True if it flushed."""
        deadline = self._deadline_ns
        if deadline is None:
            return False
        if (self._clock() if now_ns is None else now_ns) >= deadline:
            self.flush()
            return True
        return False

    def next_deadline_ns(self) -> int | None:
        """When :meth:`poll` must next be called (None: nothing buffered)."""
        return self._deadline_ns

    def _discard(self) -> None:
        if self.on_batch is not None:
            self.on_batch(False)
        for column in self.columns:
            column.clear()
        self.buffered = 0
        self._deadline_ns = None

    def stop(self, error: OSError) -> None:
        """Stop writing for good (a disk fault): buffered and later rows are discarded, the file is
        closed as it is (its last whole batch is what readers get)."""
        if self.failed is not None:
            return
        self.failed = error
        self._discard()
        writer, sink = self._writer, self._sink
        self._writer = self._sink = None
        with contextlib.suppress(Exception):  # the end-of-stream marker may not fit either
            if writer is not None:
                writer.close()
        with contextlib.suppress(Exception):
            if sink is not None:
                sink.close()

    def _open(self) -> None:
        if self._fault is not None:
            self._fault.check(self.path.parent.name)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            raise FileExistsError(f"trace file {self.path} exists: one file per process incarnation")
        # Buffered in memory and flushed after every record batch: a batch is one write(2) instead of
        # one per buffer and padding (~40 % less CPU per batch), and a finished batch is still in the
        # page cache before _flush returns, so it survives SIGKILL; a batch cut short by the kill is
        # the torn tail readers skip. A larger write than the buffer goes straight to the file.
        self._sink = pa.BufferedOutputStream(pa.OSFile(str(self.path), "wb"), WRITE_BUFFER_BYTES)
        self._writer = ipc.new_stream(self._sink, self.schema, options=self._options)
        self._sink.flush()  # the schema on disk now, even if no batch follows

    def flush(self) -> None:
        """Write the buffered rows as one record batch (opening the file on the first one). A write
        error stops the writer when it has ``on_error`` (which is then called), else it is raised."""
        if self.failed is not None:
            self._discard()
            return
        try:
            self._flush()
        except OSError as e:
            if self.on_error is None:
                raise
            self.stop(e)
            self.on_error(self, e)

    def _flush(self) -> None:
        n = self.buffered
        self._deadline_ns = None
        if n == 0:
            if self._writer is None and not self.closed:
                self._open()  # an empty table still gets its schema on disk
            return
        if self._writer is None:
            self._open()
        if self.on_batch is not None:
            self.on_batch(True)
        arrays = []
        schema = self.schema
        by_name = dict(zip(self.varying, self.columns, strict=True))
        for field in schema:
            name = field.name
            if name in by_name:
                arrays.append(_to_arrow(by_name[name], field.type))
            elif name in self._constants:
                arrays.append(pa.repeat(self._constants[name], n))
            else:  # seq
                arrays.append(_to_arrow(range(self.rows_written, self.rows_written + n), field.type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        assert self._writer is not None
        if self._fault is not None:
            self._fault.check(self.path.parent.name)
        self._writer.write_batch(batch)
        assert self._sink is not None
        self._sink.flush()
        for column in self.columns:
            column.clear()
        self.buffered = 0
        self.rows_written += n
        self.batches_written += 1
        assert self._sink is not None
        self.bytes_written = self._sink.tell()

    def close(self) -> None:
        """Flush and write the end-of-stream marker. Idempotent."""
        if self.closed:
            return
        try:
            self.flush()
        finally:
            self.closed = True
            if self._writer is not None:
                try:
                    self._writer.close()
                except OSError as e:  # the end-of-stream marker did not fit
                    if self.on_error is None:
                        raise
                    self.stop(e)
                    self.on_error(self, e)
            if self._sink is not None:
                self.bytes_written = self._sink.tell()
                self._sink.close()


# ---------------------------------------------------------------------------------------------- promotion

_HEADER = struct.Struct("<HHHH")
_I64 = struct.Struct("<q")
_U32 = struct.Struct("<I")
_HEADER_LENGTH = 8
_FIELD_SIZE = {"q": 8, "i": 4, "B": 1, "H": 2}
# Which fixed field is a message's term / log position, in order of preference.
_TERM_FIELDS = ("leadership_term_id", "candidate_term_id")
_POSITION_FIELDS = ("log_position",)
_BLOCK_MESSAGES = ("LogBlock", "ReplayBlock")  # term + *end* position = start + len(entries)

# template id -> (name, term offset | -1, position offset | -1, start offset of a block's start_position | -1)
_Promotion = tuple[str, int, int, int]
_PROMOTIONS: dict[int, _Promotion] | None = None


def _build_promotions() -> dict[int, _Promotion]:

    table: dict[int, _Promotion] = {}
    for template_id, cls in REGISTRY.items():
        offsets: dict[str, int] = {}
        offset = _HEADER_LENGTH
        for name, fmt in cls._FIXED:
            offsets[name] = offset
            offset += _FIELD_SIZE[fmt]
        term = next((offsets[n] for n in _TERM_FIELDS if n in offsets), -1)
        position = next((offsets[n] for n in _POSITION_FIELDS if n in offsets), -1)
        start = offsets["start_position"] if cls.__name__ in _BLOCK_MESSAGES else -1
        table[template_id] = (cls.__name__, term, position, start)
    return table


def _promotions() -> dict[int, _Promotion]:
    global _PROMOTIONS
    table = _PROMOTIONS
    if table is None:
        table = _PROMOTIONS = _build_promotions()
    return table


def _unknown(payload: bytes) -> tuple[str, int | None, int | None]:
    return message_name(payload), None, None


def promote(payload: bytes) -> tuple[str, int | None, int | None]:
    """(msg_type, leadership_term_id, log_position) from a message's header and fixed block, without
    decoding it. Never raises: a payload the codec cannot name gets ``message_name``'s description
    (``Truncated(...)``, ``Unknown(...)``) and null positions. Compiled
    (:func:`clusterlab.harness.promotion.promote_one`) where the build ran, else :func:`promote_py`."""
    if PROMOTION_COMPILED:
        return promote_one(payload, _PROMOTIONS or _promotions(), _unknown)
    return promote_py(payload)


def promote_py(payload: bytes) -> tuple[str, int | None, int | None]:
    """:func:`promote`, interpreted."""
    table = _PROMOTIONS or _promotions()
    n = len(payload)
    spec = table.get(payload[2] | payload[3] << 8) if n >= _HEADER_LENGTH else None
    if spec is None:
        return message_name(payload), None, None
    name, term_at, position_at, start_at = spec
    term = _I64.unpack_from(payload, term_at)[0] if 0 <= term_at <= n - 8 else None
    if start_at >= 0:
        # Variable data starts after the *sender's* block length (SBE); entries is the only var field.
        var_at = _HEADER_LENGTH + (payload[0] | payload[1] << 8)
        if start_at <= n - 8 and var_at <= n - 4:
            return name, term, _I64.unpack_from(payload, start_at)[0] + _U32.unpack_from(payload, var_at)[0]
        return name, term, None
    position = _I64.unpack_from(payload, position_at)[0] if 0 <= position_at <= n - 8 else None
    return name, term, position


def promote_many(payloads: list[bytes]) -> tuple[list[str], list[int | None], list[int | None]]:
    """:func:`promote` of every payload, as three columns: one loop for a batch (a client's ingress,
    a service's egress: one row per log entry on the leader), the fixed-block fields read inline
    (compiled: :mod:`clusterlab.harness.promotion`; interpreted where the build could not run)."""
    table = _PROMOTIONS or _promotions()
    if PROMOTION_COMPILED:
        return promote_fixed(payloads, table, _unknown)
    return promote_many_py(payloads, table)


def promote_many_py(
    payloads: list[bytes], table: dict[int, _Promotion]
) -> tuple[list[str], list[int | None], list[int | None]]:
    """The interpreted loop of :func:`promote_many` (``table``: the promotion table)."""
    names: list[str] = []
    terms: list[int | None] = []
    positions: list[int | None] = []
    unpack = _I64.unpack_from
    for payload in payloads:
        n = len(payload)
        spec = table.get(payload[2] | payload[3] << 8) if n >= _HEADER_LENGTH else None
        if spec is None or spec[3] >= 0:  # not a known message, or a block: the general path
            name, term, position = promote_py(payload)
        else:
            name, term_at, position_at, _start_at = spec
            term = unpack(payload, term_at)[0] if 0 <= term_at <= n - 8 else None
            position = unpack(payload, position_at)[0] if 0 <= position_at <= n - 8 else None
        names.append(name)
        terms.append(term)
        positions.append(position)
    return names, terms, positions


# ---------------------------------------------------------------------------------------------- process


def _json_default(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "describe"):
        return value.describe()
    return str(value)


def _plain(value: Any) -> Any:
    """JSON-ready: an IntEnum by name (json would write its number), a StrEnum by value."""
    if isinstance(value, Enum):
        return value.value if isinstance(value, str) else value.name
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    return value


def detail_json(detail: Mapping[str, Any] | str | None) -> str:
    """An event's ``detail`` column: a JSON object (enums by name, bytes as hex)."""
    if detail is None:
        return "{}"
    if isinstance(detail, str):
        return detail
    return json.dumps(_plain(detail), sort_keys=True, separators=(",", ":"), default=_json_default)


class ProcessRecorder:
    """The recorder of one process incarnation: what the runtime (or the simulator) calls.

    ``clock`` gives ``mono_ns`` and drives the 100 ms flushes; ``wall_clock`` gives ``wall_ns``. Both
    are the virtual clock in the simulator. Tables are created on first use, so a client has no
    ``applied`` file. Misuse (recording after close) raises ValueError."""

    def __init__(
        self,
        run_dir: Path | str,
        run_id: str,
        process: str = "node-1",
        member_id: int = -1,
        incarnation: int = 0,
        clock: Callable[[], int] = time.monotonic_ns,
        *,
        wall_clock: Callable[[], int] = time.time_ns,
        service_id: int = 0,
        max_rows: int = DEFAULT_MAX_ROWS,
        flush_interval_ns: int = DEFAULT_FLUSH_INTERVAL_NS,
        compression: str | None = None,
        close_at_exit: bool = False,
        degrade: bool = True,
        flush_in_poll: bool = False,
        committed_refs: bool = False,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.process = process
        self.member_id = member_id
        self.incarnation = incarnation
        self.service_id = service_id
        self.clock = clock
        self.wall_clock = wall_clock
        self.max_rows = max_rows
        self.flush_interval_ns = flush_interval_ns
        self.compression = compression
        # The process calls poll() every duty cycle: due batches are written there (TableWriter).
        self.flush_in_poll = flush_in_poll
        # A LogBlock on the service channel holds committed entries only: with ``committed_refs`` its
        # entries are recorded as a reference into the committed log (harness/payload_refs.py).
        self.committed_refs = committed_refs
        # A LogBlock between members (the log channel) holds entries that may never be committed: with
        # :meth:`refer_committed` its row is written inline and turned into a reference when its batch
        # is written, if by then the entries are committed in this member's log, byte for byte.
        self._holds_committed: Callable[[int, memoryview], bool] | None = None
        self._log_blocks: list[tuple[int, bytes]] = []  # (row in the messages buffer, payload)
        self.closed = False
        self._writers: dict[str, TableWriter] = {}
        # Hot path of message(): the writer and its columns' bound append methods, once opened.
        self._messages: TableWriter | None = None
        self._msg_appends: tuple[Callable[[Any], None], ...] = ()
        # Disk faults degrade (``degrade``): the first write error stops all recording of this
        # process, which keeps running; ``stopped`` then says why (the incomplete/ marker's content).
        self.degrade = degrade
        self.stopped: dict[str, Any] | None = None
        self._fault = WriteFault.from_env(process)
        self._reserve: Path | None = None
        if close_at_exit:
            atexit.register(self.close)

    def refer_committed(self, holds_committed: Callable[[int, memoryview], bool]) -> None:
        """Reference the entries of the log channel's LogBlocks this process sends or receives when
        ``holds_committed(start_position, entries)`` says, as their rows' batch is written, that this
        member's log holds exactly those entries at that position, committed (harness/payload_refs.py).
        Only a node has a log to ask; other processes keep those rows inline. A request the leader
        received stays inline until the run finishes: finding its body in the log costs more per
        request than writing it."""
        if self.committed_refs:
            self._holds_committed = holds_committed

    def _refer_committed(self, kept: bool) -> None:
        """The messages writer's ``on_batch``: the buffered log-channel LogBlocks whose entries are
        committed in this member's log become references; the rest stay inline."""
        blocks, self._log_blocks = self._log_blocks, []
        holds = self._holds_committed
        w = self._writers.get("messages")
        if not kept or holds is None or w is None:
            return
        columns = dict(zip(w.varying, w.columns, strict=True))
        c_payload, c_position, c_length, c_digest = (columns[name] for name in ("payload", *REF_NAMES))
        for row, payload in blocks:
            layout = log_block_layout(payload)
            if layout is None:
                continue
            start, length = layout
            entries = memoryview(payload)[len(payload) - length :]
            if holds(start, entries):
                c_payload[row] = payload[: len(payload) - length]
                c_position[row] = start
                c_length[row] = length
                c_digest[row] = entry_digest(entries)

    def __repr__(self) -> str:
        return f"ProcessRecorder({self.process} incarnation={self.incarnation} dir={self.run_dir})"

    def path(self, table: str) -> Path:
        return self.run_dir / table / file_name(self.process, self.incarnation)

    def writer(self, table: str) -> TableWriter:
        """The table's writer, created on first use."""
        w = self._writers.get(table)
        if w is None:
            if self.closed:
                raise ValueError(f"{self!r} is closed")
            constants: dict[str, Any] = {"run_id": self.run_id}
            if table == "messages":
                constants.update(member_id=self.member_id, process=self.process, incarnation=self.incarnation)
            elif table == "applied":
                constants.update(member_id=self.member_id, service_id=self.service_id, incarnation=self.incarnation)
            elif table == "events":
                constants.update(incarnation=self.incarnation)
            elif table == "log":
                constants = {}
            if self.degrade and self._reserve is None and self.stopped is None:
                self._reserve_marker()
            w = TableWriter(
                self.path(table),
                SCHEMAS[table],
                self.clock,
                constants=constants,
                max_rows=self.max_rows,
                flush_interval_ns=self.flush_interval_ns,
                compression=self.compression,
                on_error=self._write_failed if self.degrade else None,
                fault=self._fault,
                flush_in_poll=self.flush_in_poll,
            )
            if table == "messages":
                w.on_batch = self._refer_committed
            if self.stopped is not None:
                w.stop(OSError(self.stopped["reason"]))
            self._writers[table] = w
        return w

    # ------------------------------------------------------------------------------------- disk faults

    def marker_path(self) -> Path:
        """``RUN/incomplete/<process>.json``: written when this process's recording stopped early."""
        return self.run_dir / INCOMPLETE_DIR / f"{self.process}.json"

    def _reserve_marker(self) -> None:
        """Set aside a page for the marker while the disk has room, so a full disk can still say so."""
        path = self.run_dir / INCOMPLETE_DIR / RESERVE_DIR / f"{self.process}-i{self.incarnation}"
        for _ in range(2):  # another process may remove the empty directory in between
            if reserve_space(path, MARKER_RESERVE_BYTES):
                self._reserve = path
                return

    def _release_marker(self) -> None:
        reserve, self._reserve = self._reserve, None
        release_reserve(reserve)

    def _write_failed(self, writer: TableWriter, error: OSError) -> None:
        """A table's write failed: stop recording this process, say so (an event, the marker, stderr)."""
        if self.stopped is not None:
            return
        code = errno.errorcode.get(error.errno or 0, type(error).__name__)
        table = writer.path.parent.name
        self.stopped = {
            "process": self.process,
            "incarnation": self.incarnation,
            "member_id": self.member_id,
            "reason": f"{code}: {error.strerror or error}",
            "at_ns": self.wall_clock(),
            "table": table,
        }
        print(
            f"{self.process}: trace recording stopped ({self.stopped['reason']}, writing {table}); "
            "the process keeps running without recording",
            file=sys.stderr,
            flush=True,
        )
        events = self._writers.get("events") if table != "events" else None
        if events is not None and events.failed is None:
            with contextlib.suppress(Exception):
                self.event("recording_stopped", self.member_id, detail=self.stopped)
                events.flush()
        for w in self._writers.values():
            w.stop(error)
        self._write_marker()

    def _write_marker(self) -> None:
        assert self.stopped is not None
        path = self.marker_path()
        if path.exists():
            self._release_marker()
            return  # an earlier incarnation stopped first: the trace is incomplete from then
        data = (json.dumps(self.stopped, sort_keys=True) + "\n").encode()
        reserve, self._reserve = self._reserve, None
        if reserve is not None and replace_from_reserve(reserve, path, data):
            release_reserve(reserve)  # the emptied .reserve/ directory
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, data)
        except OSError:
            pass  # no room and no reservation: stderr said it

    # ------------------------------------------------------------------------------------- rows

    def message(
        self,
        direction: str,
        channel: str,
        peer: int,
        payload: bytes,
        wall_ns: int | None = None,
        mono_ns: int | None = None,
        *,
        peer_process: str | None = None,
        msg_id: int | None = None,
        reason: str | None = None,
    ) -> None:
        """One message crossing this process's boundary: ``send``, ``recv`` or ``drop`` (chaos gate).

        ``channel`` is a Channel (a StrEnum) or its value; ``peer`` the other member's id, -1 for a
        client or n/a. ``payload`` must be the exact encoded bytes (copied if not ``bytes``)."""
        w = self._messages
        if w is None:
            w = self._messages = self.writer("messages")
            self._msg_appends = tuple(c.append for c in w.columns)
        if type(payload) is not bytes:
            payload = bytes(payload)
        msg_type, term, position = promote(payload)
        (a_wall, a_mono, a_dir, a_chan, a_peer, a_type, a_term, a_pos, a_payload, a_pp, a_id, a_reason, *a_ref) = (
            self._msg_appends
        )
        ref = None
        if msg_type == "LogBlock" and self.committed_refs:
            if channel == Channel.SERVICE:
                ref = committed_block_ref(payload)
            elif channel == Channel.LOG and direction != DROP and self._holds_committed is not None:
                self._log_blocks.append((w.buffered, payload))
        if ref is None:
            a_ref[0](None)
            a_ref[1](None)
            a_ref[2](None)
        else:
            payload = ref[0]
            a_ref[0](ref[1])
            a_ref[1](ref[2])
            a_ref[2](ref[3])
        a_wall(self.wall_clock() if wall_ns is None else wall_ns)
        a_mono(self.clock() if mono_ns is None else mono_ns)
        a_dir(direction)
        a_chan(str(channel))
        a_peer(peer)
        a_type(msg_type)
        a_term(term)
        a_pos(position)
        a_payload(payload)
        a_pp(peer_process)
        a_id(msg_id)
        a_reason(reason)
        w.row_added()

    def messages(
        self,
        direction: str,
        channel: str,
        peer: int,
        payloads: list[bytes],
        *,
        peer_process: str | None = None,
    ) -> None:
        """Several messages crossing the boundary together (one ZeroMQ batch: a client's ingress, a
        service's egress to one client): the rows :meth:`message` would write for each, in order,
        sharing one clock reading. ``payloads`` must be ``bytes``; these rows carry no msg_id."""
        n = len(payloads)
        if n == 0:
            return
        if n == 1:
            self.message(direction, channel, peer, payloads[0], peer_process=peer_process)
            return
        w = self._messages
        if w is None:
            w = self._messages = self.writer("messages")
            self._msg_appends = tuple(c.append for c in w.columns)
        c_wall, c_mono, c_dir, c_chan, c_peer, c_type, c_term, c_pos, c_payload, c_pp, c_id, c_reason, *c_ref = (
            w.columns
        )
        types, terms, positions = promote_many(payloads)
        c_wall.extend(itertools.repeat(self.wall_clock(), n))
        c_mono.extend(itertools.repeat(self.clock(), n))
        c_dir.extend(itertools.repeat(direction, n))
        c_chan.extend(itertools.repeat(str(channel), n))
        c_peer.extend(itertools.repeat(peer, n))
        c_type.extend(types)
        c_term.extend(terms)
        c_pos.extend(positions)
        c_payload.extend(payloads)
        c_pp.extend(itertools.repeat(peer_process, n))
        c_id.extend(itertools.repeat(None, n))
        c_reason.extend(itertools.repeat(None, n))
        for column in c_ref:
            column.extend(itertools.repeat(None, n))
        w.row_added(n)

    def applied_many(self, entries: list[Any]) -> None:
        """The rows :meth:`applied` would write for each of ``entries`` (AppliedEntry tuples, in
        order), sharing one wall clock reading: a service buffers the entries of one inbound batch and
        records them here, the columns built by transposing the tuples rather than row by row."""
        n = len(entries)
        if n == 0:
            return
        w = self.writer("applied")
        (position, length, term, entry_type, cluster_time, entry_digest, state_digest, replay) = zip(
            *entries, strict=True
        )
        c_pos, c_len, c_term, c_type, c_time, c_edig, c_sdig, c_replay, c_wall = w.columns
        c_pos.extend(position)
        c_len.extend(length)
        c_term.extend(term)
        c_type.extend(map(str, entry_type))
        c_time.extend(cluster_time)
        c_edig.extend(entry_digest)
        c_sdig.extend(state_digest)
        c_replay.extend(map(bool, replay))
        c_wall.extend(itertools.repeat(self.wall_clock(), n))
        w.row_added(n)

    def applied_run(self, run: Any, wall_ns: int | None = None) -> None:
        """The rows of a service agent's AppliedRun (a block's run of session messages, as columns:
        pass this method as the agent's ``on_applied_run``): each column extended once, the same rows
        :meth:`applied_many` writes for ``run.entries()``."""
        n = len(run.log_positions)
        if n == 0:
            return
        w = self.writer("applied")
        c_pos, c_len, c_term, c_type, c_time, c_edig, c_sdig, c_replay, c_wall = w.columns
        c_pos.extend(run.log_positions)
        c_len.extend(run.lengths)
        c_term.extend(run.leadership_term_ids)
        c_type.extend(itertools.repeat(_SESSION_MESSAGE, n))
        c_time.extend(run.cluster_times)
        c_edig.extend(run.entry_digests)
        c_sdig.extend(run.state_digests)
        c_replay.extend(itertools.repeat(bool(run.replay), n))
        c_wall.extend(itertools.repeat(self.wall_clock() if wall_ns is None else wall_ns, n))
        w.row_added(n)

    def applied(self, entry: Any, wall_ns: int | None = None) -> None:
        """One applied log entry: ``entry`` is a clusterlab.core.service.agent.AppliedEntry (or anything with its
        fields). Pass this method as the service agent's ``on_applied``."""
        w = self.writer("applied")
        w.append(
            entry.log_position,
            entry.length,
            entry.leadership_term_id,
            str(entry.entry_type),
            entry.cluster_time,
            entry.entry_digest,
            entry.state_digest,
            bool(entry.replay),
            self.wall_clock() if wall_ns is None else wall_ns,
        )

    def event(
        self,
        kind: str,
        member_id: int = -1,
        leadership_term_id: int | None = None,
        log_position: int | None = None,
        detail: Mapping[str, Any] | str | None = None,
        *,
        wall_ns: int | None = None,
        source: str | None = None,
    ) -> None:
        """One event. The positional signature is clusterlab.core.consensus.context.EventSink, so a node passes
        this method as ``ConsensusModuleContext.events``. ``source`` defaults to this process."""
        self.writer("events").append(
            self.wall_clock() if wall_ns is None else wall_ns,
            self.process if source is None else source,
            member_id,
            kind,
            leadership_term_id,
            log_position,
            detail_json(detail),
        )

    def op(
        self,
        client_id: int,
        op_id: int,
        kind: str,
        f: str,
        key: str | None = None,
        value: str | None = None,
        result: str | None = None,
        cluster_session_id: int | None = None,
        correlation_id: int | None = None,
        log_position: int | None = None,
        *,
        wall_ns: int | None = None,
        arg: str | None = None,
    ) -> None:
        """One client history row: ``invoke``, then ``ok``, ``fail`` or ``info`` for the same op_id.
        ``arg``: JSON of the op's other argument (cas: the expected value; add: the delta)."""
        self.writer("ops").append(
            client_id,
            op_id,
            kind,
            self.wall_clock() if wall_ns is None else wall_ns,
            f,
            key,
            value,
            result,
            cluster_session_id,
            correlation_id,
            log_position,
            arg,
        )

    # ------------------------------------------------------------------------------------- flushing

    def poll(self, now_ns: int | None = None) -> int:
        """Flush every table whose oldest buffered row is due; returns how many flushed. Call it from
        the duty cycle (it is a few comparisons when nothing is due)."""
        now = self.clock() if now_ns is None else now_ns
        return sum(1 for w in self._writers.values() if w.poll(now))

    def next_deadline_ns(self) -> int | None:
        """The earliest flush deadline (on ``clock``), or None: for the duty cycle's poll timeout."""
        deadlines = [d for w in self._writers.values() if (d := w.next_deadline_ns()) is not None]
        return min(deadlines) if deadlines else None

    def flush(self) -> None:
        for w in self._writers.values():
            w.flush()

    def close(self) -> None:
        """Flush and close every table. Idempotent; call it at clean exit."""
        if self.closed:
            return
        self.closed = True
        errors = []
        for w in self._writers.values():
            try:
                w.close()
            except Exception as e:  # close the others, then report
                errors.append(e)
        if self.stopped is None:
            self._release_marker()
        if errors:
            raise errors[0]

    def rows(self) -> dict[str, int]:
        """Rows recorded so far, per table (written or buffered)."""
        return {t: w.next_seq for t, w in self._writers.items()}

    def __enter__(self) -> ProcessRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def process_recorder(run_dir: Path | str | None, run_id: str, process: str, **kwargs: Any) -> Any:
    """A ProcessRecorder, or a NullRecorder when ``run_dir`` is None (recording off)."""
    if run_dir is None:
        return NullRecorder()
    kwargs.setdefault("committed_refs", True)  # a real process: its trace is finished by RunRecorder.finish
    return ProcessRecorder(run_dir, run_id, process, **kwargs)


# ---------------------------------------------------------------------------------------------- committed log


@dataclass(frozen=True, slots=True)
class LogRow:
    """One row of the ``log`` table."""

    log_position: int  # end of the entry
    leadership_term_id: int
    entry_type: str
    entry: bytes  # the framed bytes exactly as in the recording


def entry_type_name(frame_type: int, payload: bytes) -> str:
    """The ``applied.entry_type`` name of a log entry (``Padding`` for a pad frame)."""

    if frame_type == HDR_TYPE_PAD:
        return "Padding"
    name = message_name(payload)
    mapping = {
        "SessionMessageHeader": EntryType.SESSION_MESSAGE,
        "SessionOpenEvent": EntryType.SESSION_OPEN,
        "SessionCloseEvent": EntryType.SESSION_CLOSE,
        "TimerEvent": EntryType.TIMER,
        "ClusterActionRequest": EntryType.CLUSTER_ACTION,
        "NewLeadershipTermEvent": EntryType.NEW_LEADERSHIP_TERM,
        "MembershipChangeEvent": EntryType.MEMBERSHIP_CHANGE,
    }
    et = mapping.get(name)
    return str(et) if et is not None else name


def read_recording(member_dir: Path | str | Storage, up_to_position: int) -> tuple[list[LogRow], int]:
    """The whole frames of a member's log recording (its directory, or its Storage in the simulator)
    that end at or before ``up_to_position``, read-only (the segment files are read directly, never
    opened for repair). Returns (rows, end position)."""

    storage = FileStorage(member_dir) if isinstance(member_dir, Path | str) else member_dir
    segments = list_segments(storage, LOG_DIR)
    if not segments:
        return [], 0
    base = segments[0][0]
    chunks = []
    expected = base
    for seg_base, path in segments:
        if seg_base != expected:
            break  # a gap: keep what is contiguous
        data = storage.read_file(path)
        chunks.append(data)
        expected = seg_base + len(data)
        if expected >= up_to_position:
            break
    walk = walk_frames(b"".join(chunks), base)
    rows = []
    end = base
    for f in walk.frames:
        if f.end_position > up_to_position:
            break
        rows.append(
            LogRow(
                f.end_position,
                f.leadership_term_id,
                entry_type_name(f.frame_type, f.payload),
                frame(f.payload, f.position, f.leadership_term_id, f.frame_type),
            )
        )
        end = f.end_position
    return rows, end


def committed_log(
    member_dirs: Mapping[int, Path | str | Storage],
    commit_position: int,
    earlier: Sequence[Path | str | Storage] = (),
) -> tuple[list[LogRow], int | None]:
    """The committed log up to ``commit_position`` from the first member (in id order) whose recording
    holds all of it from position 0, else the longest log found. A member's recording that starts above 0
    (a cluster restored from a backup whose log starts at a snapshot) counts with the start of another
    recording, a member's or one of ``earlier`` (copies of the members' disks taken before the restore),
    that has a frame ending exactly where it begins. Returns (rows, member whose recording it ends with)."""
    recordings: list[tuple[int, list[LogRow], int]] = []
    for member_id in sorted(member_dirs):
        rows, end = read_recording(member_dirs[member_id], commit_position)
        recordings.append((member_id, rows, end))
        if _start_of(rows) == 0 and end == commit_position:
            return rows, member_id
    starts = [rows for _m, rows, _e in recordings] + [read_recording(d, commit_position)[0] for d in earlier]
    best: tuple[list[LogRow], int | None, int] = ([], None, -1)
    for member_id, rows, end in recordings:
        whole = rows if _start_of(rows) == 0 else _with_start(rows, starts)
        if whole is not None and end > best[2]:
            best = (whole, member_id, end)
    return best[0], best[1]


def _start_of(rows: list[LogRow]) -> int:
    return rows[0].log_position - len(rows[0].entry) if rows else 0


def _with_start(rows: list[LogRow], starts: list[list[LogRow]]) -> list[LogRow] | None:
    """``rows`` (a recording that starts above 0) after the frames of one of ``starts`` that starts at 0 and
    has a frame ending exactly where ``rows`` begins; None if none has."""
    begin = _start_of(rows)
    for other in starts:
        if other and _start_of(other) == 0 and any(r.log_position == begin for r in other):
            return [r for r in other if r.log_position <= begin] + rows
    return None


# ---------------------------------------------------------------------------------------------- run


def git_commit(repo: Path | None = None) -> str | None:
    """The repository's HEAD commit (with ``-dirty`` if the tree has changes), or None if unknown."""
    repo = repo or Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head or None


def new_run_id(scenario: str = "run") -> str:
    """``<scenario>-<UTC time>-<6 hex>``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{scenario or 'run'}-{stamp}-{uuid.uuid4().hex[:6]}"


def reserve_space(path: Path, size: int) -> bool:
    """Write ``size`` bytes to ``path`` while the disk has room (see :func:`replace_from_reserve`)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(b" " * size)
        return True
    except OSError:
        return False


def release_reserve(reserve: Path | None) -> None:
    """Remove a reservation of :func:`reserve_space` in ``incomplete/.reserve/`` and the directories
    if they are left empty (a marker or another process's reservation keeps them)."""
    if reserve is None:
        return
    with contextlib.suppress(OSError):
        reserve.unlink()
    for directory in (reserve.parent, reserve.parent.parent):
        with contextlib.suppress(OSError):
            directory.rmdir()


def replace_from_reserve(reserve: Path, path: Path, data: bytes) -> bool:
    """Put ``data`` at ``path`` on a full disk: overwrite the reserved file in place (its blocks are
    allocated already), then rename it over ``path``. False if it does not fit or fails."""
    try:
        if len(data) > reserve.stat().st_size:
            return False
        with open(reserve, "r+b") as f:
            f.write(data)
            f.truncate(len(data))
        os.replace(reserve, path)
        return True
    except OSError:
        return False


class RunRecorder:
    """One run's directory: run.json, the harness's own events, and at the end the committed log.

    ``members`` is a list of dicts (member_id and endpoints), ``config`` a dict with every timeout and
    endpoint. run.json is written at once with outcome ``running`` (a run whose harness died says so)
    and rewritten by :meth:`finish`. Processes of the run open their own ProcessRecorder on the same
    ``run_dir`` and ``run_id`` (:meth:`process` does it for in-process ones)."""

    def __init__(
        self,
        run_dir: Path | str,
        run_id: str | None = None,
        *,
        scenario: str = "",
        seed: int | None = None,
        members: Iterable[Mapping[str, Any]] = (),
        config: Mapping[str, Any] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        wall_clock: Callable[[], int] = time.time_ns,
        extra: Mapping[str, Any] | None = None,
        max_rows: int = DEFAULT_MAX_ROWS,
        flush_interval_ns: int = DEFAULT_FLUSH_INTERVAL_NS,
        compression: str | None = None,
    ) -> None:

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id or new_run_id(scenario)
        self.clock = clock
        self.wall_clock = wall_clock
        self.max_rows = max_rows
        self.flush_interval_ns = flush_interval_ns
        self.compression = compression
        self.meta: dict[str, Any] = {
            "run_id": self.run_id,
            "scenario": scenario,
            "seed": seed,
            "members": [dict(m) for m in members],
            "config": dict(config or {}),
            "clusterlab_version": __version__,
            "git_commit": git_commit(),
            "start_wall_ns": time.time_ns(),
            "end_wall_ns": None,
            "outcome": "running",
            "schema_version": SCHEMA_VERSION,
            "trace_format": {
                "tables": list(TABLES),
                "file": "<table>/<process>-i<incarnation>.arrow",
                "entry_digest": ENTRY_DIGEST_NAME,  # applied.entry_digest's function (core/codec/digests.py)
            },
        }
        self.meta.update(extra or {})
        self.processes: list[ProcessRecorder] = []
        self.harness = self.process("harness")
        self.finished = False
        self.write_meta()
        # Room for the final run.json even if the trace fills the disk (released at a clean finish).
        self._meta_reserve: Path | None = self.run_dir / INCOMPLETE_DIR / RESERVE_DIR / "run.json"
        if not reserve_space(self._meta_reserve, max(16384, 4 * (self.run_dir / "run.json").stat().st_size)):
            self._meta_reserve = None

    def write_meta(self, *, degrade: bool = False) -> None:
        """Write run.json. With ``degrade`` a disk fault does not raise: the file is overwritten in
        place (it needs no new block when it does not grow past its last page), else left as it was."""
        path = self.run_dir / "run.json"
        data = sealed_json(json.loads(json.dumps(self.meta, default=_json_default)))  # any later edit: CORRUPT
        try:
            write_atomically(path, data)
        except OSError as e:
            if not degrade:
                raise
            reserve, self._meta_reserve = self._meta_reserve, None
            if reserve is None or not replace_from_reserve(reserve, path, data):
                print(f"run.json of {self.run_dir} not rewritten: {e}", file=sys.stderr, flush=True)
            release_reserve(reserve)
        if self.finished:
            self._release_meta_reserve()

    def _release_meta_reserve(self) -> None:
        reserve, self._meta_reserve = getattr(self, "_meta_reserve", None), None
        release_reserve(reserve)

    def process(self, process: str, member_id: int = -1, incarnation: int = 0, **kwargs: Any) -> ProcessRecorder:
        """A ProcessRecorder in this run on this recorder's clocks (closed by :meth:`finish`)."""
        kwargs.setdefault("clock", self.clock)
        kwargs.setdefault("wall_clock", self.wall_clock)
        kwargs.setdefault("max_rows", self.max_rows)
        kwargs.setdefault("flush_interval_ns", self.flush_interval_ns)
        kwargs.setdefault("compression", self.compression)
        rec = ProcessRecorder(self.run_dir, self.run_id, process, member_id, incarnation, **kwargs)
        self.processes.append(rec)
        return rec

    def event(self, kind: str, member_id: int = -1, log_position: int | None = None, **detail: Any) -> None:
        """A harness event (source ``harness``): lifecycle and faults with their parameters."""
        self.harness.event(kind, member_id, None, log_position, detail)

    def write_log(self, rows: Iterable[LogRow]) -> Path:
        """The ``log`` table (log/committed.arrow)."""
        path = self.run_dir / "log" / "committed.arrow"
        w = TableWriter(path, SCHEMAS["log"], self.clock, max_rows=1 << 30, flush_interval_ns=1 << 62)
        for r in rows:
            w.append(r.log_position, r.leadership_term_id, r.entry_type, r.entry)
        w.close()
        return path

    def finish(
        self,
        outcome: str,
        *,
        member_dirs: Mapping[int, Path | str | Storage] | None = None,
        commit_position: int | None = None,
        extra: Mapping[str, Any] | None = None,
        earlier_dirs: Sequence[Path | str | Storage] = (),
        payload_refs: bool = True,
    ) -> dict[str, Any]:
        """Close every in-process recorder, write the committed log (from ``member_dirs`` up to
        ``commit_position``, or the highest commit the trace's events show; ``earlier_dirs``: copies of
        member disks a restore replaced, for the log's start), with ``payload_refs`` keep the messages'
        committed entries once, as references into it (harness/payload_refs.py), and write the final
        run.json. Returns the metadata."""
        if self.finished:
            return self.meta
        self.finished = True
        for rec in self.processes:
            rec.close()
        # Reservations of processes that were killed (no clean close): every process has stopped now.
        for stale in sorted((self.run_dir / INCOMPLETE_DIR / RESERVE_DIR).glob("*")):
            if stale != self._meta_reserve:
                release_reserve(stale)
        log_meta: dict[str, Any] = {"written": False}
        if member_dirs:
            if commit_position is None:
                commit_position = highest_commit_in_trace(self.run_dir)
            existing = {m: d for m, d in member_dirs.items() if not isinstance(d, Path | str) or Path(d).is_dir()}
            rows, source = committed_log(existing, commit_position, earlier_dirs) if existing else ([], None)
            end = rows[-1].log_position if rows else 0
            log_meta = {
                "written": True,
                "commit_position": commit_position,
                "end_position": end,
                "entries": len(rows),
                "from_member": source,
                "complete": end == commit_position,
            }
            try:
                self.write_log(rows)
            except OSError as e:  # a full disk: the run.json below still says what is missing
                log_meta.update(written=False, error=f"{errno.errorcode.get(e.errno or 0, 'OSError')}: {e}")
            if payload_refs and log_meta["written"]:
                self.meta["payload_refs"] = self._reference_committed_entries(rows)
        self.meta["committed_log"] = log_meta
        self.meta["outcome"] = outcome
        self.meta["end_wall_ns"] = time.time_ns()
        stopped = recording_stopped(self.run_dir)
        if stopped:
            self.meta["recording_stopped"] = stopped
        self.meta.update(extra or {})
        # Last: what every file holds now (every process has stopped), so readers can tell a file lost,
        # cut short or changed later from one a SIGKILL tore (docs/trace-schema.md, "Completeness").
        self.meta.update(manifest(self.run_dir, TABLES))
        self.write_meta(degrade=True)
        return self.meta

    def _reference_committed_entries(self, rows: Sequence[LogRow]) -> dict[str, Any]:
        """run.json's ``payload_refs``: the messages files rewritten with references into the committed
        log; a failure (a full disk) leaves every file as recorded and says so."""
        committed = CommittedBytes.of([r.log_position for r in rows], [r.entry for r in rows])
        try:
            return compact_messages(self.run_dir, committed, self.compression).as_meta()
        except OSError as e:
            return {"error": f"{errno.errorcode.get(e.errno or 0, 'OSError')}: {e}"}


def recording_stopped(run_dir: Path | str) -> list[dict[str, Any]]:
    """The markers of processes whose recording stopped on a disk fault (``incomplete/*.json``), by time."""
    found = []
    for path in sorted((Path(run_dir) / INCOMPLETE_DIR).glob("*.json")):
        try:
            marker = json.loads(path.read_text())
        except (OSError, ValueError):
            marker = {"process": path.stem, "reason": "unreadable marker"}
        if isinstance(marker, dict):
            found.append(marker)
    return sorted(found, key=lambda m: (m.get("at_ns") or 0, str(m.get("process"))))


def highest_commit_in_trace(run_dir: Path | str) -> int:
    """The highest commit position the trace shows: ``commit`` events and CommitPosition messages."""
    # Not at the top: harness.trace reads what this module writes and imports its schemas (a cycle).
    from clusterlab.harness.trace import open_run

    run = open_run(run_dir)
    best = 0
    events = run.tables["events"]
    for kind, pos in zip(events.column("kind").to_pylist(), events.column("log_position").to_pylist(), strict=True):
        if kind == "commit" and pos is not None and pos > best:
            best = pos
    messages = run.tables["messages"]
    for name, pos in zip(
        messages.column("msg_type").to_pylist(), messages.column("log_position").to_pylist(), strict=True
    ):
        if name == "CommitPosition" and pos is not None and pos > best:
            best = pos
    return best


# ---------------------------------------------------------------------------------------------- benchmark


def bench_message_rows(rows: int = 200_000, directory: Path | str | None = None) -> dict[str, float]:
    """Rows/s of :meth:`ProcessRecorder.message` with real clocks and real files, on a mix like a
    busy member's (AppendPosition, CommitPosition, a 3-entry LogBlock, a client SessionMessageHeader).
    Also returns bytes per row of the resulting file."""

    entries = b"".join(frame(b"x" * 64, 32 * 4 * i, 3) for i in range(3))
    payloads = [
        AppendPosition(leadership_term_id=3, log_position=4096, follower_member_id=1, flags=0).encode(),
        CommitPosition(leadership_term_id=3, log_position=4096, leader_member_id=0).encode(),
        LogBlock(
            leadership_term_id=3,
            start_position=4096,
            commit_position=4000,
            leader_member_id=0,
            log_session_id=7,
            entries=entries,
        ).encode(),
        encode_session_message(3, 42, 1_000, b'{"id":1,"op":"put","key":"k1","value":"v1"}'),
    ]
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        rec = ProcessRecorder(tmp, "bench", "node-0", 0, 0)
        channels = ["consensus", "consensus", "log", "ingress"]
        start = time.perf_counter()
        message = rec.message
        for i in range(rows):
            k = i & 3
            message("send", channels[k], 1, payloads[k], msg_id=i)
        rec.close()
        elapsed = time.perf_counter() - start
        size = rec.path("messages").stat().st_size
        payload_bytes = sum(len(p) for p in payloads) / 4
    return {
        "rows": rows,
        "seconds": elapsed,
        "rows_per_s": rows / elapsed,
        "us_per_row": elapsed / rows * 1e6,
        "file_bytes_per_row": size / rows,
        "payload_bytes_per_row": payload_bytes,
    }


if __name__ == "__main__":
    print(json.dumps(bench_message_rows(), indent=2))
