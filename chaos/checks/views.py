"""The view layer both check engines share: which columns of each trace table the checks see, and the
columns derived from the raw ones (pyarrow only, so the Spark source can build them on executors).

- ``entry_digest`` and ``state_digest`` (16-byte digests, clusterlab.core.codec.digests) become
  ``<name>_hi`` / ``<name>_lo``, two big-endian int64 halves: equal digests have equal halves, and
  int64 min/max/equality are hash aggregates on Spark (binary ones plan as sort-based aggregates) and
  cheap on DuckDB.
- ``log`` gets ``entry_digest_hi/lo`` (of the framed entry, with the run's digest function, as
  ``applied.entry_digest``), the kv request of a ``SessionMessage`` entry: ``req_id``, ``req_op``,
  ``req_key``, ``req_value``, and ``event_session_id``: the ``cluster_session_id`` of a ``SessionOpen`` or
  ``SessionClose`` entry, else null.
- ``messages`` gets ``log_leadership_term_id``: the term of the sender's last log entry, read from the
  payload of the messages that carry one (CanvassPosition, RequestVote, Vote, NewLeadershipTerm), else
  null; ``log_position`` is then the position in that log."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from clusterlab.core.codec.digests import ENTRY_DIGEST_NAME, entry_digest_named
from clusterlab.core.codec.log_events import SessionCloseEvent, SessionOpenEvent
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import REGISTRY

DIGEST_SIZE = 16
# A log entry: 32-byte frame header (int32 frame length first), the 8-byte message header (block
# length, template id, ...) and, for a SessionMessageHeader (template 1), its fixed block first.
_FRAME_HEADER = 32
_MESSAGE_HEADER = 8
_SESSION_MESSAGE_TEMPLATE_ID = 1

DIGEST_COLUMNS: dict[str, tuple[str, ...]] = {"applied": ("entry_digest", "state_digest"), "log": ()}
LOG_TERM = "log_leadership_term_id"
_LOG_TERM_OFFSETS: dict[str, int] | None = None  # message name -> offset of its log_leadership_term_id
REQUEST_FIELDS: dict[str, pa.DataType] = {
    "req_id": pa.int64(),
    "req_op": pa.string(),
    "req_key": pa.string(),
    "req_value": pa.string(),
}
EVENT_SESSION_ID = "event_session_id"
SESSION_EVENTS = ("SessionOpen", "SessionClose")  # the log's entry_type of the entries that carry one


def _field_offset(cls: type[Message], field: str) -> int:
    """Where ``field`` of ``cls`` starts in its encoded message (message header included)."""
    at = _MESSAGE_HEADER
    for name, fmt in cls._FIXED:
        if name == field:
            return at
        at += struct.calcsize("<" + fmt)
    raise KeyError(f"{cls.__name__} has no {field}")


# Template id -> where the cluster_session_id of that session event starts in a framed log entry.
_SESSION_ID_AT = {
    cls.TEMPLATE_ID: _FRAME_HEADER + _field_offset(cls, "cluster_session_id")
    for cls in (SessionOpenEvent, SessionCloseEvent)
}


def derived_fields(table: str) -> list[pa.Field]:
    """The columns the view layer adds to ``table`` (beyond the recorder's contract)."""
    out = [pa.field(f"{d}_{half}", pa.int64(), True) for d in DIGEST_COLUMNS.get(table, ()) for half in ("hi", "lo")]
    if table == "log":
        out += [pa.field("entry_digest_hi", pa.int64(), True), pa.field("entry_digest_lo", pa.int64(), True)]
        out += [pa.field(n, t, True) for n, t in REQUEST_FIELDS.items()]
        out.append(pa.field(EVENT_SESSION_ID, pa.int64(), True))
    if table == "messages":
        out.append(pa.field(LOG_TERM, pa.int64(), True))
    return out


def view_schema(table: str) -> pa.Schema:
    """Every column a view of ``table`` can have: the contract's (digests as binary) plus the derived."""
    from clusterlab.harness.recorder import SCHEMAS  # the driver's only: executors build derived columns

    fields = [
        pa.field(f.name, pa.binary() if pa.types.is_fixed_size_binary(f.type) else f.type, True) for f in SCHEMAS[table]
    ]
    if "run_id" not in {f.name for f in fields}:
        fields.insert(0, pa.field("run_id", pa.string(), True))
    return pa.schema(fields + derived_fields(table))


def digest_halves(digests: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """16-byte digests as (high, low) big-endian int64 arrays; a null digest gives nulls."""
    if isinstance(digests, pa.ChunkedArray):
        digests = digests.combine_chunks() if digests.num_chunks != 1 else digests.chunk(0)
    if not pa.types.is_fixed_size_binary(digests.type):
        values = [None if d is None else d.ljust(DIGEST_SIZE, b"\0")[:DIGEST_SIZE] for d in digests.to_pylist()]
        digests = pa.array(values, pa.binary(DIGEST_SIZE))
    n = len(digests)
    if n == 0:
        return pa.array([], pa.int64()), pa.array([], pa.int64())
    data = digests.buffers()[1]
    words = np.frombuffer(data, dtype=">i8", count=2 * n, offset=digests.offset * DIGEST_SIZE).reshape(n, 2)
    mask = None if digests.null_count == 0 else np.asarray(digests.is_null().to_numpy(zero_copy_only=False))
    hi = pa.array(words[:, 0].astype(np.int64), pa.int64(), mask=mask)
    lo = pa.array(words[:, 1].astype(np.int64), pa.int64(), mask=mask)
    return hi, lo


def request_of(entry: bytes) -> dict[str, object] | None:
    """The kv request JSON of a SessionMessage log entry (None for anything else)."""
    if len(entry) < _FRAME_HEADER + _MESSAGE_HEADER + 24:
        return None
    (frame_length,) = struct.unpack_from("<i", entry, 0)
    block_length, template_id = struct.unpack_from("<HH", entry, _FRAME_HEADER)
    if template_id != _SESSION_MESSAGE_TEMPLATE_ID:
        return None
    raw = entry[_FRAME_HEADER + _MESSAGE_HEADER + block_length : frame_length]
    try:
        body = orjson.loads(raw)  # ~3x json.loads: this runs once per log entry
    except orjson.JSONDecodeError:
        try:  # what orjson refuses and json accepts (NaN, Infinity, integers past 64 bits)
            body = json.loads(raw)
        except ValueError:
            return None
    return body if isinstance(body, dict) else None


def _text(v: object) -> str | None:
    return v if isinstance(v, str) or v is None else json.dumps(v)


def _log_columns(entries: pa.Array | pa.ChunkedArray, wanted: set[str], entry_digest: str) -> dict[str, pa.Array]:
    values = entries.to_pylist()
    out: dict[str, pa.Array] = {}
    if wanted & {"entry_digest_hi", "entry_digest_lo"}:
        digest = entry_digest_named(entry_digest)
        digests = pa.array([digest(v) for v in values], pa.binary(DIGEST_SIZE))
        out["entry_digest_hi"], out["entry_digest_lo"] = digest_halves(digests)
    if wanted & set(REQUEST_FIELDS):
        requests = [request_of(v) for v in values]
        ids = [r.get("id") if r is not None else None for r in requests]
        out["req_id"] = pa.array([i if isinstance(i, int) else None for i in ids], pa.int64())
        for name, field in (("req_op", "op"), ("req_key", "key"), ("req_value", "value")):
            out[name] = pa.array([None if r is None else _text(r.get(field)) for r in requests], pa.string())
    return out


def _log_term_offsets() -> dict[str, int]:
    global _LOG_TERM_OFFSETS
    if _LOG_TERM_OFFSETS is None:
        offsets = {}
        for cls in REGISTRY.values():
            at = _MESSAGE_HEADER
            for name, fmt in cls._FIXED:
                if name == LOG_TERM:
                    offsets[cls.__name__] = at
                at += struct.calcsize("<" + fmt)
        _LOG_TERM_OFFSETS = offsets
    return _LOG_TERM_OFFSETS


def log_terms(msg_types: pa.Array | pa.ChunkedArray, payloads: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each message's ``log_leadership_term_id`` (null where its type has none or its payload is short).
    Only the few election messages are decoded: the rows are picked by type first."""
    offsets = _log_term_offsets()
    out: list[int | None] = [None] * len(msg_types)
    picked = pc.indices_nonzero(pc.fill_null(pc.is_in(msg_types, pa.array(list(offsets))), False))
    for i in picked.to_pylist():
        at = offsets[msg_types[i].as_py()]
        payload = payloads[i].as_py()
        if payload is not None and len(payload) >= at + 8:
            out[i] = struct.unpack_from("<q", payload, at)[0]
    return pa.array(out, pa.int64())


def event_session_ids(entry_types: pa.Array | pa.ChunkedArray, entries: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each log entry's ``cluster_session_id`` if it is a SessionOpen or SessionClose (null otherwise, or
    where the entry is short). Only those entries are decoded: the rows are picked by entry type first."""
    out: list[int | None] = [None] * len(entries)
    picked = pc.indices_nonzero(pc.fill_null(pc.is_in(entry_types, pa.array(SESSION_EVENTS)), False))
    for i in picked.to_pylist():
        entry = entries[i].as_py()
        if entry is None or len(entry) < _FRAME_HEADER + _MESSAGE_HEADER:
            continue
        (template_id,) = struct.unpack_from("<H", entry, _FRAME_HEADER + 2)
        at = _SESSION_ID_AT.get(template_id)
        if at is not None and len(entry) >= at + 8:
            out[i] = struct.unpack_from("<q", entry, at)[0]
    return pa.array(out, pa.int64())


def derived_columns(
    table: str,
    columns: Mapping[str, pa.Array | pa.ChunkedArray],
    wanted: Iterable[str],
    entry_digest: str = ENTRY_DIGEST_NAME,
) -> dict[str, pa.Array]:
    """The ``wanted`` derived columns of ``table`` computed from its raw ``columns`` (name -> array);
    ``entry_digest`` names the run's entry digest (run.json ``trace_format.entry_digest``)."""
    wanted = set(wanted)
    out: dict[str, pa.Array] = {}
    for d in DIGEST_COLUMNS.get(table, ()):
        if wanted & {f"{d}_hi", f"{d}_lo"} and d in columns:
            out[f"{d}_hi"], out[f"{d}_lo"] = digest_halves(columns[d])
    if table == "log" and "entry" in columns:
        out.update(_log_columns(columns["entry"], wanted, entry_digest))
    if table == "log" and EVENT_SESSION_ID in wanted and {"entry_type", "entry"} <= set(columns):
        out[EVENT_SESSION_ID] = event_session_ids(columns["entry_type"], columns["entry"])
    if table == "messages" and LOG_TERM in wanted and {"msg_type", "payload"} <= set(columns):
        out[LOG_TERM] = log_terms(columns["msg_type"], columns["payload"])
    return out


def view_table(
    table: str, data: pa.Table, run_key: str, columns: Iterable[str], entry_digest: str = ENTRY_DIGEST_NAME
) -> pa.Table:
    """``data`` (rows of one run's ``table``) as the view sees it: exactly ``columns``, in the view's types;
    ``run_id`` is ``run_key`` (the run's directory: runs are keyed by directory, whatever run id their rows
    carry); missing columns null (an older trace); ``entry_digest``: the run's."""
    schema = view_schema(table)
    names = [c for c in columns if c in schema.names]
    raw = {n: data.column(n) for n in data.column_names}
    raw.update(derived_columns(table, raw, names, entry_digest))
    n = data.num_rows
    arrays = []
    for name in names:
        t = schema.field(name).type
        col = raw.get(name) if name != "run_id" else pa.repeat(pa.scalar(run_key, pa.string()), n)
        if col is None:
            arrays.append(pa.nulls(n, t))
        else:
            arrays.append(col if col.type == t else col.cast(t))
    return pa.Table.from_arrays(arrays, schema=pa.schema([schema.field(n) for n in names]))
