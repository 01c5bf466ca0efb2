"""Reading a trace directory (docs/trace-schema.md): ``open_run(dir)`` -> :class:`Run` with one pyarrow Table
per table, the run's metadata, a report of torn files instead of an exception, and ``run.completeness``
(:mod:`clusterlab.harness.completeness`): whether the trace holds what the run declares — judge that
before judging the protocol. Files are read with the one torn-stream reader,
:func:`clusterlab.harness.arrow_stream.read_stream`.

A file of a process killed with SIGKILL may end inside a record batch: every complete batch is read,
and the file, the batches kept and the bytes ignored go to ``run.torn``. A file without the stream's
end-of-stream marker (its process never closed it: killed, or still running) is listed in
``run.unclosed`` even when it ends exactly at a batch boundary.

:func:`match_messages` pairs every ``send`` row with its ``recv`` row (written by the receiver) or
``drop`` row (written by the sender's chaos gate) — by ``msg_id`` when the transport gave one,
otherwise by sender, receiver, channel and bytes, in order — and says which sends were never
received: in flight when their receiver was killed or stopped, or in flight at the end.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.registry import decode, message_name
from clusterlab.harness import arrow_stream
from clusterlab.harness.completeness import (
    Completeness,
    FileFacts,
    Finding,
    SchemaVersionError,
    Status,
    judge,
    kill_rows,
    kills_from_events,
    read_meta,
    read_sidecars,
    trace_file_paths,
)
from clusterlab.harness.invariants import Contiguity
from clusterlab.harness.payload_refs import resolve_payloads, unresolved_payloads
from clusterlab.harness.recorder import SCHEMAS, TABLES
from clusterlab.harness.trace_error import TraceError as TraceError


@dataclass(frozen=True, slots=True)
class TornFile:
    """A stream file whose tail is not a whole record batch."""

    path: Path
    table: str
    batches: int  # complete batches read
    rows: int
    bytes_read: int
    bytes_ignored: int
    error: str

    def describe(self) -> str:
        return (
            f"{self.table}/{self.path.name}: kept {self.batches} batches ({self.rows} rows, {self.bytes_read} B), "
            f"ignored {self.bytes_ignored} B: {self.error}"
        )


@dataclass
class StreamRead:
    """What :func:`read_stream` got from one file."""

    table: pa.Table
    batches: int
    bytes_read: int
    size: int
    closed: bool  # ends with the end-of-stream marker
    error: str | None

    @property
    def bytes_ignored(self) -> int:
        return self.size - self.bytes_read


def read_stream(path: Path | str, schema: pa.Schema | None = None) -> StreamRead:
    """Every complete record batch of one Arrow IPC stream file; never raises on a torn tail. A file too
    short to hold its schema gives an empty table of ``schema`` (if given). The reading itself is
    :func:`clusterlab.harness.arrow_stream.read_stream`, shared with the Spark source."""
    return _stream_read(arrow_stream.read_stream(str(path)), schema)


def _stream_read(got: arrow_stream.StreamRead, schema: pa.Schema | None) -> StreamRead:
    return StreamRead(got.table(schema), len(got.batches), got.bytes_read, got.size, got.closed, got.error)


@dataclass
class Run:
    """A trace directory, read. ``tables[name]`` is a pyarrow Table (empty, with the contract's schema,
    when no file has that table)."""

    directory: Path
    meta: dict[str, Any]
    tables: dict[str, pa.Table]
    files: dict[str, list[Path]] = field(default_factory=dict)
    torn: list[TornFile] = field(default_factory=list)
    unclosed: list[Path] = field(default_factory=list)
    facts: list[FileFacts] = field(default_factory=list)
    completeness: Completeness | None = None  # set by open_run: judge it before judging the protocol
    whole_payloads: bool = True  # False: referenced messages hold only their stored bytes (open_run)

    @property
    def messages(self) -> pa.Table:
        return self.tables["messages"]

    @property
    def applied(self) -> pa.Table:
        return self.tables["applied"]

    @property
    def events(self) -> pa.Table:
        return self.tables["events"]

    @property
    def ops(self) -> pa.Table:
        return self.tables["ops"]

    @property
    def log(self) -> pa.Table:
        return self.tables["log"]


def open_run(run_dir: Path | str, *, whole_payloads: bool = True) -> Run:
    """Read a run directory: run.json (``{}`` if missing) and every ``<table>/*.arrow`` file.

    ``whole_payloads``: put every referenced payload back (harness.payload_refs), so ``messages`` holds
    each payload as it was sent. False leaves the stored bytes (for a reader that never reads log entries
    from messages, such as the checks' SQL views: a busy run's blocks are gigabytes when whole); the
    references are verified either way, with the same completeness note."""
    directory = Path(run_dir)
    if not directory.is_dir():
        raise TraceError(f"{directory}: no such run directory (expected RUN_DIR with run.json and table folders)")
    if not (directory / "run.json").is_file() and not any((directory / name).is_dir() for name in TABLES):
        raise TraceError(f"{directory}: not a clusterlab run (no run.json and none of {', '.join(TABLES)})")
    meta, meta_finding = read_meta(directory)
    tables: dict[str, pa.Table] = {}
    files: dict[str, list[Path]] = {}
    torn: list[TornFile] = []
    unclosed: list[Path] = []
    facts: list[FileFacts] = []
    for name in TABLES:
        paths = trace_file_paths(directory / name)
        files[name] = paths
        parts: list[pa.Table] = []
        for path in paths:
            raw = arrow_stream.read_stream(str(path))
            facts.append(FileFacts.of(f"{name}/{path.name}", name, raw))
            got = _stream_read(raw, SCHEMAS[name])
            if got.error is not None:
                torn.append(
                    TornFile(path, name, got.batches, got.table.num_rows, got.bytes_read, got.bytes_ignored, got.error)
                )
            if not got.closed:
                unclosed.append(path)
            if got.table.num_rows or not parts:
                parts.append(got.table)
        if not parts:
            tables[name] = SCHEMAS[name].empty_table()
        else:
            try:
                tables[name] = pa.concat_tables(parts, promote_options="default")
            except pa.ArrowException as e:  # a garbled schema: judged below, not read
                tables[name] = SCHEMAS[name].empty_table()
                facts.append(FileFacts(f"{name}/", name, 0, 0, 0, True, f"schemas do not agree: {e}", (), False))
    kills = kills_from_events(kill_rows(tables["events"]))
    try:
        completeness = judge(
            directory, meta, facts, kills, meta_finding=meta_finding, sidecars=read_sidecars(directory)
        )
    except SchemaVersionError as e:
        raise TraceError(f"{directory}: {e}") from None
    if whole_payloads:
        tables["messages"], unresolved = resolve_payloads(tables["messages"], tables["log"])
    else:
        unresolved = unresolved_payloads(tables["messages"], tables["log"])
    if unresolved:  # the files are whole (the manifest says so): these entries were never the committed log's
        completeness.notes.append(
            Finding(
                Status.INCOMPLETE,
                "messages/",
                f"{unresolved} messages carry entries that are not log/committed.arrow's bytes (their digest "
                "differs or the log does not reach them): read without those bytes",
                rows_lost=unresolved,
            )
        )
    return Run(directory, meta or {}, tables, files, torn, unclosed, facts, completeness, whole_payloads)


# ---------------------------------------------------------------------------------------------- matching


@dataclass
class MessageMatch:
    """How the ``send`` rows pair with ``recv``/``drop`` rows; see :func:`match_messages`."""

    sends: int = 0
    received: int = 0  # sends with at least one recv
    dropped: int = 0  # sends with a drop row and no recv
    duplicates: int = 0  # extra recv/drop rows of a send already matched (network duplication)
    unmatched_sends: list[dict[str, Any]] = field(default_factory=list)
    orphan_rows: list[dict[str, Any]] = field(default_factory=list)  # recv/drop with no send
    unmatched_at_kill: int = 0  # receiver killed or stopped after the send
    unmatched_at_end: int = 0  # still in flight when the run ended

    def describe(self) -> str:
        return (
            f"{self.sends} sends: {self.received} received, {self.dropped} dropped, "
            f"{len(self.unmatched_sends)} unmatched ({self.unmatched_at_kill} at a kill/stop, "
            f"{self.unmatched_at_end} in flight at the end); {len(self.orphan_rows)} recv/drop without a send; "
            f"{self.duplicates} duplicate deliveries"
        )


_MATCH_COLUMNS = ("process", "peer_process", "direction", "channel", "msg_id", "wall_ns", "msg_type", "payload")


def _member_of(process: str | None) -> int | None:
    if process and (process.startswith("node-") or process.startswith("service-")):
        try:
            return int(process.rsplit("-", 1)[1])
        except ValueError:
            return None
    return None


def match_messages(run: Run, *, between_members_only: bool = False) -> MessageMatch:
    """Pair sends with receipts. With ``between_members_only``, only node/service <-> node/service rows."""
    t = run.messages
    cols = {name: t.column(name).to_pylist() for name in _MATCH_COLUMNS if name in t.column_names}
    n = t.num_rows
    rows = [{name: cols[name][i] for name in cols} for i in range(n)]
    if between_members_only:
        rows = [r for r in rows if _member_of(r["process"]) is not None and _member_of(r["peer_process"]) is not None]
    result = MessageMatch()
    sends_by_id: dict[int, dict[str, Any]] = {}
    receipts_by_id: dict[int, list[dict[str, Any]]] = defaultdict(list)
    sends_by_key: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    receipts_by_key: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        is_send = r["direction"] == "send"
        if r.get("msg_id") is not None:
            if is_send:
                sends_by_id[r["msg_id"]] = r
            else:
                receipts_by_id[r["msg_id"]].append(r)
        elif is_send:
            sends_by_key[(r["process"], r["peer_process"], r["channel"], r["payload"])].append(r)
        elif r["direction"] == "drop":  # written by the sender's chaos gate
            receipts_by_key[(r["process"], r["peer_process"], r["channel"], r["payload"])].append(r)
        else:
            receipts_by_key[(r["peer_process"], r["process"], r["channel"], r["payload"])].append(r)
    unmatched: list[dict[str, Any]] = []
    for msg_id, send in sends_by_id.items():
        got = receipts_by_id.pop(msg_id, [])
        _classify(result, send, got, unmatched)
    for got in receipts_by_id.values():
        result.orphan_rows.extend(got)
    for key, sends in sends_by_key.items():
        got = receipts_by_key.pop(key, [])
        # Without ids, receipts pair with sends in order (each link is FIFO).
        for i, send in enumerate(sends):
            _classify(result, send, got[i : i + 1], unmatched)
        if len(got) > len(sends):
            result.orphan_rows.extend(got[len(sends) :])
    for got in receipts_by_key.values():
        result.orphan_rows.extend(got)
    result.unmatched_sends = unmatched
    _attribute_unmatched(run, result)
    return result


def _classify(result: MessageMatch, send: dict[str, Any], got: list[dict[str, Any]], unmatched: list) -> None:
    result.sends += 1
    if not got:
        unmatched.append(send)
        return
    if any(r["direction"] == "recv" for r in got):
        result.received += 1
    else:
        result.dropped += 1
    result.duplicates += len(got) - 1


def _attribute_unmatched(run: Run, result: MessageMatch) -> None:
    """An unmatched send whose receiver's member was killed or stopped at or after the send was in
    flight at a kill; any other was in flight at the end."""
    downs: dict[int, list[int]] = defaultdict(list)
    ev = run.events
    for source, kind, member_id, wall_ns in zip(
        ev.column("source").to_pylist(),
        ev.column("kind").to_pylist(),
        ev.column("member_id").to_pylist(),
        ev.column("wall_ns").to_pylist(),
        strict=True,
    ):
        if source in ("harness", "chaos") and kind in ("kill", "stop", "restart"):
            downs[member_id].append(wall_ns)
    for send in result.unmatched_sends:
        member = _member_of(send.get("peer_process"))
        if member is not None and any(t >= send["wall_ns"] for t in downs.get(member, ())):
            result.unmatched_at_kill += 1
        else:
            result.unmatched_at_end += 1


# ---------------------------------------------------------------------------------------------- summary


def _counts(table: pa.Table, *columns: str) -> list[tuple[tuple, int]]:
    if table.num_rows == 0:
        return []
    grouped = table.group_by(list(columns)).aggregate([([], "count_all")])
    keys = list(zip(*(grouped.column(c).to_pylist() for c in columns), strict=True))
    counts = grouped.column("count_all").to_pylist()
    return sorted(zip(keys, counts, strict=True), key=lambda kv: tuple(str(k) for k in kv[0]))


@dataclass
class Summary:
    """What ``clusterlab trace summary`` prints, as data (tests read it)."""

    rows: dict[str, int]
    files: dict[str, int]
    by_channel: list[tuple[tuple, int]]  # (channel, direction) -> rows
    by_type: list[tuple[tuple, int]]  # (msg_type, direction) -> rows
    processes: list[tuple[tuple, int]]  # (process, incarnation) -> message rows
    members: list[int]
    terms: dict[int, list[int]]  # term -> members that became leader of it
    applied_range: tuple[int, int] | None
    message_position_range: tuple[int, int] | None
    committed_log_end: int | None
    events_by_kind: list[tuple[tuple, int]]
    ops_by_kind: list[tuple[tuple, int]]
    match: MessageMatch
    torn: list[TornFile]
    unclosed: list[Path]


def summarize(run: Run) -> Summary:
    m, a, e, o, lg = run.messages, run.applied, run.events, run.ops, run.log
    members: set[int] = set()
    for table in (m, a):
        if table.num_rows:
            members.update(x for x in table.column("member_id").to_pylist() if x >= 0)
    terms: dict[int, list[int]] = defaultdict(list)
    for kind, term, member in zip(
        e.column("kind").to_pylist(),
        e.column("leadership_term_id").to_pylist(),
        e.column("member_id").to_pylist(),
        strict=True,
    ):
        if kind == "leader" and term is not None:
            terms[term].append(member)
    for term in m.column("leadership_term_id").drop_null().unique().to_pylist() if m.num_rows else []:
        if term >= 0:  # -1: no term yet (a member that never saw a leader)
            terms.setdefault(term, [])

    def span(table: pa.Table, column: str) -> tuple[int, int] | None:
        col = table.column(column).drop_null() if table.num_rows else None
        if col is None or len(col) == 0:
            return None
        return (pc.min(col).as_py(), pc.max(col).as_py())

    log_span = span(lg, "log_position")
    return Summary(
        rows={name: t.num_rows for name, t in run.tables.items()},
        files={name: len(paths) for name, paths in run.files.items()},
        by_channel=_counts(m, "channel", "direction"),
        by_type=_counts(m, "msg_type", "direction"),
        processes=_counts(m, "process", "incarnation"),
        members=sorted(members),
        terms=dict(sorted(terms.items())),
        applied_range=span(a, "log_position"),
        message_position_range=span(m, "log_position"),
        committed_log_end=log_span[1] if log_span else None,
        events_by_kind=_counts(e, "source", "kind"),
        ops_by_kind=_counts(o, "kind"),
        match=match_messages(run),
        torn=run.torn,
        unclosed=run.unclosed,
    )


# ---------------------------------------------------------------------------------------------- show


def describe_payload(payload: bytes, entries: bool = True) -> list[str]:
    """The message's describe() line, and for a LogBlock/ReplayBlock one line per framed entry."""

    try:
        msg = decode(payload)
    except DecodeError as e:
        return [f"{message_name(payload)} (undecodable: {e})"]
    lines = [msg.describe()]
    walk = getattr(msg, "walk", None)
    if entries and walk is not None:
        result = walk()
        for f in result.frames:
            try:
                inner = decode(f.payload).describe()
            except DecodeError as e:
                inner = f"undecodable entry: {e}"
            lines.append(f"  @{f.position}..{f.end_position} term={f.leadership_term_id} {inner}")
        if result.error is not None:
            lines.append(f"  torn entries: {result.error}")
    return lines


def select_messages(
    run: Run,
    member: int,
    from_position: int,
    to_position: int | None = None,
    channel: str | None = None,
) -> list[dict[str, Any]]:
    """Rows recorded by member ``member``'s processes whose log_position is in [from, to], in
    recording order (time, then process, then seq)."""
    t = run.messages
    if t.num_rows == 0:
        return []
    mask = pc.and_(pc.equal(t.column("member_id"), member), pc.greater_equal(t.column("log_position"), from_position))
    if to_position is not None:
        mask = pc.and_(mask, pc.less_equal(t.column("log_position"), to_position))
    if channel is not None:
        mask = pc.and_(mask, pc.equal(t.column("channel"), channel))
    selected = t.filter(pc.fill_null(mask, False))
    selected = selected.sort_by([("wall_ns", "ascending"), ("process", "ascending"), ("seq", "ascending")])
    return selected.to_pylist()


def counter_of(pairs: list[tuple[tuple, int]]) -> Counter[tuple]:
    return Counter(dict(pairs))


def applied_by_incarnation(applied: pa.Table) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """``applied`` rows grouped by (member, incarnation), each group in record order (``seq``)."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in applied.to_pylist():
        groups.setdefault((r["member_id"], r["incarnation"]), []).append(r)
    for rows in groups.values():
        rows.sort(key=lambda r: r["seq"])
    return groups


def applied_by_service_incarnation(applied: pa.Table) -> dict[tuple[int, int, int], list[dict[str, Any]]]:
    """``applied`` rows grouped by (member, incarnation, service id), each group in record order
    (``seq``): one group per service process incarnation when members run several services."""
    groups: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for r in applied.to_pylist():
        groups.setdefault((r["member_id"], r["incarnation"], r.get("service_id") or 0), []).append(r)
    for rows in groups.values():
        rows.sort(key=lambda r: r["seq"])
    return groups


def contiguity_violations(applied: pa.Table) -> list[str]:
    """Where a service incarnation's applied entries do not follow each other without gaps (empty: none).

    Each entry must start (``log_position - length``) where the previous one ended; a ``Snapshot``
    row sets the starting point; ``seq`` must count from 0 without holes (no lost rows)."""
    problems: list[str] = []
    contiguity: dict[int, Contiguity] = {}  # per service id; the property's one definition (harness/invariants.py)
    for (member, incarnation, service_id), rows in sorted(applied_by_service_incarnation(applied).items()):
        where = f"member {member} incarnation {incarnation}" + (f" service {service_id}" if service_id else "")
        if [r["seq"] for r in rows] != list(range(len(rows))):
            problems.append(f"{where}: seq has holes")
        of_service = contiguity.setdefault(service_id, Contiguity())
        for r in rows:
            problem = of_service.observe((member, incarnation), r["entry_type"], r["log_position"], r["length"])
            if problem is not None:
                problems.append(problem)
    return problems
