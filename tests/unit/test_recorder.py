"""The trace recorder (clusterlab.harness.recorder) and reader (clusterlab.harness.trace): the schema is the contract of
docs/trace-schema.md column for column, promoted columns come from the header and fixed block, batches are
flushed by size, by age and on close, a torn tail is read up to its last whole batch and reported, and
a process killed with SIGKILL while recording leaves a file whose complete batches read back."""

from __future__ import annotations

import importlib.util
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from clusterlab.core.codec import (
    AppendPosition,
    CanvassPosition,
    CommitPosition,
    JoinLog,
    LogBlock,
    NewLeadershipTerm,
    ReplayBlock,
    RequestVote,
    ServiceAck,
    SessionKeepAlive,
    Vote,
    encode_session_message,
    frame,
)
from clusterlab.core.codec.enums import BooleanType, ReplayPurpose
from clusterlab.core.codec.session import SessionConnectRequest
from clusterlab.core.service.agent import AppliedEntry, AppliedRun, EntryType
from clusterlab.harness import promotion
from clusterlab.harness import recorder as recorder_module
from clusterlab.harness.recorder import (
    SCHEMAS,
    TABLES,
    NullRecorder,
    ProcessRecorder,
    RunRecorder,
    TableWriter,
    bench_message_rows,
    promote,
    promote_many,
)
from clusterlab.harness.trace import open_run, read_stream


def _interpreted_promotion() -> ModuleType:
    source = Path(promotion.__file__).with_name("promotion.py")
    spec = importlib.util.spec_from_file_location("promotion_interpreted", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROMOTION_INTERPRETED = _interpreted_promotion()

REPO = Path(__file__).resolve().parents[2]
TRACE_SCHEMA_MD = REPO / "docs" / "trace-schema.md"

# docs/trace-schema.md, transcribed: (column, type as the contract writes it). Columns the recorder adds
# come after these; these never change.
CONTRACT: dict[str, list[tuple[str, str]]] = {
    "messages": [
        ("run_id", "string"),
        ("member_id", "int16"),
        ("process", "string"),
        ("incarnation", "int32"),
        ("seq", "int64"),
        ("wall_ns", "int64"),
        ("mono_ns", "int64"),
        ("direction", "string"),
        ("channel", "string"),
        ("peer", "int16"),
        ("msg_type", "string"),
        ("leadership_term_id", "int64, null"),
        ("log_position", "int64, null"),
        ("payload", "binary"),
    ],
    "applied": [
        ("run_id", "string"),
        ("member_id", "int16"),
        ("service_id", "int16"),
        ("incarnation", "int32"),
        ("log_position", "int64"),
        ("length", "int32"),
        ("leadership_term_id", "int64"),
        ("entry_type", "string"),
        ("cluster_time", "int64"),
        ("entry_digest", "fixed_size_binary(16)"),
        ("state_digest", "fixed_size_binary(16)"),
        ("replay", "bool"),
    ],
    "events": [
        ("run_id", "string"),
        ("wall_ns", "int64"),
        ("source", "string"),
        ("member_id", "int16"),
        ("kind", "string"),
        ("leadership_term_id", "int64, null"),
        ("log_position", "int64, null"),
        ("detail", "string"),
    ],
    "ops": [
        ("run_id", "string"),
        ("client_id", "int32"),
        ("op_id", "int64"),
        ("kind", "string"),
        ("wall_ns", "int64"),
        ("f", "string"),
        ("key", "string, null"),
        ("value", "string, null"),
        ("result", "string, null"),
        ("cluster_session_id", "int64, null"),
        ("correlation_id", "int64, null"),
        ("log_position", "int64, null"),
    ],
    "log": [
        ("log_position", "int64"),
        ("leadership_term_id", "int64"),
        ("entry_type", "string"),
        ("entry", "binary"),
    ],
}

# The contract's type names as pyarrow prints them (str(DataType)).
ARROW_TYPE_NAMES = {
    "string": "string",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "binary": "binary",
    "bool": "bool",
    "fixed_size_binary(16)": "fixed_size_binary[16]",
}


def contract_columns(table: str) -> list[tuple[str, str, bool]]:
    """(name, pyarrow type name, nullable) of the contract's columns of ``table``."""
    out = []
    for name, spec in CONTRACT[table]:
        base, _, null = spec.partition(",")
        out.append((name, ARROW_TYPE_NAMES[base.strip()], null.strip() == "null"))
    return out


# ---------------------------------------------------------------------------------------- schema


@pytest.mark.parametrize("table", list(CONTRACT))
def test_schema_is_the_contract_then_added_columns(table: str) -> None:
    schema = SCHEMAS[table]
    want = contract_columns(table)
    got = [(f.name, str(f.type), f.nullable) for f in schema][: len(want)]
    assert got == want
    assert len(set(schema.names)) == len(schema.names)


def test_transcription_matches_the_contract_document() -> None:
    """CONTRACT above is docs/trace-schema.md's table sections, read from the document itself."""
    text = TRACE_SCHEMA_MD.read_text()
    parsed: dict[str, list[tuple[str, str]]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        table = section.split()[0]
        if table not in TABLES:  # Versions, Layout, Completeness, ...: prose around the tables
            continue
        rows = re.findall(r"^\| (\w+) \| ([^|]+?) \|", section, flags=re.M)
        parsed[table] = [(name, spec.strip()) for name, spec in rows if name != "column"]
    assert parsed == CONTRACT


# ---------------------------------------------------------------------------------------- promotion

ENTRIES = frame(b"a" * 10, 4096, 7) + frame(b"b" * 40, 4096 + 64, 7)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (AppendPosition(leadership_term_id=7, log_position=4096, follower_member_id=1, flags=0).encode(),
         ("AppendPosition", 7, 4096)),
        (CommitPosition(leadership_term_id=7, log_position=8192, leader_member_id=0).encode(),
         ("CommitPosition", 7, 8192)),
        (CanvassPosition(log_leadership_term_id=5, log_position=96, leadership_term_id=6, follower_member_id=2,
                         protocol_version=0).encode(), ("CanvassPosition", 6, 96)),
        (RequestVote(log_leadership_term_id=5, log_position=96, candidate_term_id=8, candidate_member_id=1,
                     protocol_version=0).encode(), ("RequestVote", 8, 96)),
        (Vote(candidate_term_id=8, log_leadership_term_id=5, log_position=96, candidate_member_id=1,
              follower_member_id=0, vote=BooleanType.TRUE).encode(), ("Vote", 8, 96)),
        (NewLeadershipTerm(log_leadership_term_id=5, next_leadership_term_id=6, next_term_base_log_position=64,
                           next_log_position=96, leadership_term_id=8, term_base_log_position=96, log_position=128,
                           leader_recording_id=0, timestamp=1, leader_member_id=1, log_session_id=3, app_version=1,
                           is_startup=0).encode(), ("NewLeadershipTerm", 8, 128)),
        (LogBlock(leadership_term_id=7, start_position=4096, commit_position=0, leader_member_id=0,
                  log_session_id=1, entries=ENTRIES).encode(), ("LogBlock", 7, 4096 + len(ENTRIES))),
        (ReplayBlock(correlation_id=1, recording_id=0, start_position=4096, recording_stop_position=9999,
                     leadership_term_id=7, purpose=ReplayPurpose.CATCHUP, flags=0, entries=ENTRIES).encode(),
         ("ReplayBlock", 7, 4096 + len(ENTRIES))),
        (ServiceAck(log_position=640, timestamp=1, ack_id=2, relevant_id=-1, service_id=0).encode(),
         ("ServiceAck", None, 640)),
        (JoinLog(log_position=64, max_log_position=2**63 - 1, member_id=0, log_session_id=1, log_stream_id=100,
                 is_startup=1, role=0, log_channel="x").encode(), ("JoinLog", None, 64)),
        (encode_session_message(9, 42, 1000, b"hello"), ("SessionMessageHeader", 9, None)),
        (SessionKeepAlive(leadership_term_id=9, cluster_session_id=42).encode(), ("SessionKeepAlive", 9, None)),
        (SessionConnectRequest(correlation_id=1, response_stream_id=2, version=1, response_channel="c",
                               encoded_credentials=b"").encode(), ("SessionConnectRequest", None, None)),
        (b"\x01\x02", ("Truncated(length=2)", None, None)),
        (bytes([0, 0, 0xFF, 0xFF, 111, 0, 12, 0]), ("Unknown(template_id=65535)", None, None)),
        # A torn LogBlock: the name survives, the end position cannot be computed.
        (LogBlock(leadership_term_id=7, start_position=4096, commit_position=0, leader_member_id=0,
                  log_session_id=1, entries=ENTRIES).encode()[:20], ("LogBlock", 7, None)),
        # Negative fixed fields (NULL_VALUE terms) and a fixed block cut short.
        (AppendPosition(leadership_term_id=-1, log_position=-(2**63), follower_member_id=1, flags=0).encode(),
         ("AppendPosition", -1, -(2**63))),
        (CommitPosition(leadership_term_id=7, log_position=8192, leader_member_id=0).encode()[:20],
         ("CommitPosition", 7, None)),
        (CommitPosition(leadership_term_id=7, log_position=8192, leader_member_id=0).encode()[:12],
         ("CommitPosition", None, None)),
    ],
)  # fmt: skip
def test_promote_reads_header_and_fixed_fields(payload: bytes, expected: tuple) -> None:
    assert promote(payload) == expected
    assert recorder_module.promote_py(payload) == expected
    table = recorder_module._PROMOTIONS
    assert table is not None
    assert PROMOTION_INTERPRETED.promote_one(payload, table, recorder_module._unknown) == expected
    # The batch form (ingress and egress rows) gives the same, whatever its neighbours: compiled
    # (harness/promotion.py, when the build ran), the recorder's interpreted loop, and the promotion
    # module's source run interpreted.
    batch = [payload, encode_session_message(1, 2, 3, b"x"), payload]
    for name, columns in (
        ("promote_many", promote_many(batch)),
        ("promote_many_py", recorder_module.promote_many_py(batch, table)),
        ("promotion.py interpreted", PROMOTION_INTERPRETED.promote_fixed(batch, table, recorder_module._unknown)),
    ):
        names, terms, positions = columns
        rows = list(zip(names, terms, positions, strict=True))
        assert rows == [expected, ("SessionMessageHeader", 1, None), expected], name


def test_promotion_is_compiled_where_the_build_ran() -> None:
    """The build compiles harness/promotion.py unless told not to (CLUSTERLAB_NO_MYPYC)."""
    if os.environ.get("CLUSTERLAB_NO_MYPYC"):
        assert not PROMOTION_INTERPRETED.COMPILED
    else:
        assert promotion.COMPILED and recorder_module.PROMOTION_COMPILED


# ---------------------------------------------------------------------------------------- writer


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


def read_batches(path: Path) -> list[pa.RecordBatch]:
    with ipc.open_stream(pa.OSFile(str(path))) as reader:
        return list(reader)


def test_table_writer_flushes_on_size_on_age_and_on_close(tmp_path: Path) -> None:
    clock = FakeClock()
    schema = SCHEMAS["log"]
    path = tmp_path / "log" / "t.arrow"
    w = TableWriter(path, schema, clock, max_rows=3, flush_interval_ns=100)
    assert not path.exists()
    for i in range(4):  # 3 rows: a batch by size; 1 row buffered
        w.append(32 * (i + 1), 1, "Timer", b"x" * i)
    assert (w.batches_written, w.buffered) == (1, 1)
    assert w.next_deadline_ns() == 100
    clock.now_ns = 99
    assert not w.poll()
    clock.now_ns = 100
    assert w.poll()  # the oldest buffered row is 100 ns old
    assert (w.batches_written, w.buffered, w.next_deadline_ns()) == (2, 0, None)
    w.append(160, 1, "Timer", b"y")
    clock.now_ns = 250  # a row arriving after the deadline flushes itself and everything before it
    w.append(192, 1, "Timer", b"z")
    assert (w.batches_written, w.buffered) == (3, 0)
    w.append(224, 2, "Timer", b"")
    w.close()
    w.close()  # idempotent
    batches = read_batches(path)
    assert [b.num_rows for b in batches] == [3, 1, 2, 1]
    table = pa.Table.from_batches(batches)
    assert table.schema == schema
    assert table.column("log_position").to_pylist() == [32, 64, 96, 128, 160, 192, 224]
    assert path.read_bytes().endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")  # end-of-stream marker
    with pytest.raises(ValueError):
        w.append(256, 2, "Timer", b"")
    with pytest.raises(FileExistsError):
        TableWriter(path, schema, clock)


def test_table_writer_polled_every_cycle_leaves_due_batches_to_poll(tmp_path: Path) -> None:
    """``flush_in_poll`` (node and service processes): a full or old batch is written by the duty
    cycle's poll, after the cycle's sends, not inside the handler adding the row; twice max_rows is
    still written at once (a bound on the buffer)."""
    clock = FakeClock()
    path = tmp_path / "log" / "t.arrow"
    w = TableWriter(path, SCHEMAS["log"], clock, max_rows=3, flush_interval_ns=100, flush_in_poll=True)
    for i in range(3):
        w.append(32 * (i + 1), 1, "Timer", b"")
    assert (w.batches_written, w.buffered, w.next_deadline_ns()) == (0, 3, 0)  # full: due now
    assert w.poll()
    assert (w.batches_written, w.buffered, w.next_deadline_ns()) == (1, 0, None)
    w.append(128, 1, "Timer", b"")
    clock.now_ns = 250  # past the deadline: the row waits for the poll
    w.append(160, 1, "Timer", b"")
    assert (w.batches_written, w.buffered) == (1, 2)
    assert w.poll()
    assert (w.batches_written, w.buffered) == (2, 0)
    for i in range(6):  # never polled: 2 * max_rows rows are written at once
        w.append(192 + 32 * i, 1, "Timer", b"")
    assert (w.batches_written, w.buffered) == (3, 0)
    w.close()
    assert [b.num_rows for b in read_batches(path)] == [3, 2, 6]


def test_process_recorder_passes_flush_in_poll_to_its_tables(tmp_path: Path) -> None:
    clock = FakeClock()
    rec = ProcessRecorder(tmp_path, "r", "node-0", 0, 0, clock, max_rows=2, flush_in_poll=True)
    rec.event("start")
    rec.event("leader")
    assert rec.writer("events").buffered == 2  # full, left to poll
    assert rec.poll() == 1
    assert rec.writer("events").buffered == 0
    rec.close()


def test_process_recorder_rows(tmp_path: Path) -> None:
    clock = FakeClock()
    clock.now_ns = 5
    rec = ProcessRecorder(tmp_path, "r1", "node-2", 2, 3, clock, wall_clock=lambda: 1_000 + clock.now_ns)
    payload = CommitPosition(leadership_term_id=4, log_position=640, leader_member_id=2).encode()
    rec.message("send", "consensus", 0, payload, peer_process="node-0", msg_id=17)
    rec.message("drop", "log", 1, bytearray(payload), 7, 8, reason="partition")
    entry = AppliedEntry(640, 64, 4, EntryType.SESSION_MESSAGE, 99, b"e" * 16, b"s" * 16, False)
    rec.applied(entry)
    rec.event("election_state", 2, 4, 640, {"from": "CANVASS", "to": "NOMINATE"})
    rec.event("role", 2, detail={"role": EntryType.TIMER, "vote": BooleanType.TRUE, "raw": b"\x01"})
    rec.op(0, 1, "invoke", "put", "k1", "v1", cluster_session_id=3)
    assert rec.next_deadline_ns() == 5 + 100_000_000
    rec.close()
    run = open_run(tmp_path)
    assert not run.torn and not run.unclosed
    m = run.messages.to_pylist()
    assert m[0] == {
        "run_id": "r1", "member_id": 2, "process": "node-2", "incarnation": 3, "seq": 0,
        "wall_ns": 1005, "mono_ns": 5, "direction": "send", "channel": "consensus", "peer": 0,
        "msg_type": "CommitPosition", "leadership_term_id": 4, "log_position": 640, "payload": payload,
        "peer_process": "node-0", "msg_id": 17, "reason": None,
        "payload_ref_position": None, "payload_ref_length": None, "payload_ref_digest": None,
    }  # fmt: skip
    assert (m[1]["seq"], m[1]["wall_ns"], m[1]["mono_ns"], m[1]["reason"], m[1]["payload"]) == (
        1, 7, 8, "partition", payload)  # fmt: skip
    a = run.applied.to_pylist()
    assert a == [{
        "run_id": "r1", "member_id": 2, "service_id": 0, "incarnation": 3, "log_position": 640, "length": 64,
        "leadership_term_id": 4, "entry_type": "SessionMessage", "cluster_time": 99, "entry_digest": b"e" * 16,
        "state_digest": b"s" * 16, "replay": False, "wall_ns": 1005, "seq": 0,
    }]  # fmt: skip
    e = run.events.to_pylist()
    assert [(x["source"], x["kind"], x["member_id"], x["detail"]) for x in e] == [
        ("node-2", "election_state", 2, '{"from":"CANVASS","to":"NOMINATE"}'),
        ("node-2", "role", 2, '{"raw":"01","role":"Timer","vote":"TRUE"}'),
    ]
    assert run.ops.to_pylist()[0]["cluster_session_id"] == 3
    assert sorted(p.name for paths in run.files.values() for p in paths) == ["node-2-i3.arrow"] * 4


def test_bulk_rows_equal_the_rows_written_one_by_one(tmp_path: Path) -> None:
    """messages() and applied_many() (the runtime's per-batch paths) write exactly the rows that
    message() and applied() write for each item, with one clock reading per call."""
    payloads = [
        CommitPosition(leadership_term_id=4, log_position=640, leader_member_id=2).encode(),
        b"\x01\x02",  # undecodable: promoted to its description, null positions
        b"",
        LogBlock(
            leadership_term_id=4, start_position=640, commit_position=0, leader_member_id=2, log_session_id=1,
            entries=frame(b"x" * 40, 640, 4),
        ).encode(),
    ]  # fmt: skip
    entries = [
        AppliedEntry(640 + 64 * i, 64, 4, EntryType.SESSION_MESSAGE, 99 + i, bytes([i]) * 16, b"s" * 16, i == 1)
        for i in range(3)
    ]
    tables = {}
    for bulk in (False, True):
        clock = FakeClock()
        clock.now_ns = 5
        rec = ProcessRecorder(tmp_path / str(bulk), "r1", "node-2", 2, 3, clock, wall_clock=lambda: 1_000)
        if bulk:
            rec.messages("recv", "ingress", -1, payloads)
            rec.messages("send", "egress", -1, payloads[:1], peer_process="client-0")
            rec.messages("send", "egress", -1, [])
            rec.applied_many(entries)
            rec.applied_many([])
        else:
            for p in payloads:
                rec.message("recv", "ingress", -1, p)
            rec.message("send", "egress", -1, payloads[0], peer_process="client-0")
            for e in entries:
                rec.applied(e)
        rec.close()
        run = open_run(tmp_path / str(bulk))
        tables[bulk] = (run.messages.to_pylist(), run.applied.to_pylist())
    assert tables[True] == tables[False]
    assert [m["seq"] for m in tables[True][0]] == [0, 1, 2, 3, 4]
    assert [a["replay"] for a in tables[True][1]] == [False, True, False]


def test_applied_run_rows_equal_the_rows_of_its_entries_and_are_byte_identical(tmp_path: Path) -> None:
    """applied_run() (the service runtime's per-block path: columns extended once) writes the rows
    applied_many() writes for the run's entries, to the same file bytes; the replay flag of a run is
    one value (written as a repeat) and a mixed column still converts."""
    runs = [
        AppliedRun([704, 768], [64, 64], [4, 4], [99, 100], [b"a" * 16, b"b" * 16], [b"s" * 16, b"t" * 16], False),
        AppliedRun([832], [64], [5], [101], [b"c" * 16], [b"u" * 16], True),
    ]
    data = {}
    for columnar in (False, True):
        rec = ProcessRecorder(tmp_path / str(columnar), "r1", "service-2", 2, 3, FakeClock(), wall_clock=lambda: 7)
        if columnar:
            rec.applied_run(runs[0])
            rec.applied_run(AppliedRun([], [], [], [], [], [], False))
            rec.flush()  # one batch of a single replay value, one of the other
            rec.applied_run(runs[1])
        else:
            rec.applied_many(runs[0].entries())
            rec.flush()
            rec.applied_many(runs[1].entries())
        rec.close()
        data[columnar] = (tmp_path / str(columnar) / "applied" / "service-2-i3.arrow").read_bytes()
    assert data[True] == data[False]
    rows = open_run(tmp_path / "True").applied.to_pylist()
    assert [(r["log_position"], r["entry_type"], r["replay"], r["wall_ns"]) for r in rows] == [
        (704, "SessionMessage", False, 7),
        (768, "SessionMessage", False, 7),
        (832, "SessionMessage", True, 7),
    ]
    assert [r["entry_digest"] for r in rows] == [b"a" * 16, b"b" * 16, b"c" * 16]


def test_null_recorder_has_the_api_and_does_nothing() -> None:
    rec = NullRecorder()
    for name in ("message", "messages", "applied", "applied_many", "applied_run", "event", "op", "poll",
                 "next_deadline_ns", "flush", "close"):  # fmt: skip
        assert callable(getattr(rec, name)) and callable(getattr(ProcessRecorder, name))
    rec.message("send", "log", 1, b"")
    assert rec.next_deadline_ns() is None


def test_run_recorder_writes_run_json_at_start_and_finish(tmp_path: Path) -> None:
    run = RunRecorder(tmp_path / "run", "r2", scenario="unit", seed=3, members=[{"member_id": 0}],
                      config={"timeouts": {"election_timeout_ns": 1}})  # fmt: skip
    meta = open_run(tmp_path / "run").meta
    assert meta["outcome"] == "running" and meta["run_id"] == "r2" and meta["seed"] == 3
    assert meta["clusterlab_version"] and meta["start_wall_ns"] > 0 and meta["end_wall_ns"] is None
    run.event("kill", 0, signal="SIGKILL")
    run.finish("ok")
    got = open_run(tmp_path / "run")
    assert got.meta["outcome"] == "ok" and got.meta["end_wall_ns"] >= got.meta["start_wall_ns"]
    assert got.events.to_pylist()[0]["detail"] == '{"signal":"SIGKILL"}'
    assert got.events.to_pylist()[0]["source"] == "harness"


# ---------------------------------------------------------------------------------------- torn tails


def write_batches(path: Path, batches: int, rows_per_batch: int) -> list[int]:
    """A messages file of ``batches`` batches, left unclosed; returns the file size after each batch."""
    clock = FakeClock()
    rec = ProcessRecorder(path.parent.parent, "torn", "node-0", 0, 0, clock, wall_clock=clock,
                          max_rows=rows_per_batch)  # fmt: skip
    sizes = []
    for b in range(batches):
        for i in range(rows_per_batch):
            pos = 32 * (b * rows_per_batch + i)
            rec.message("send", "consensus", 1, CommitPosition(leadership_term_id=1, log_position=pos,
                                                               leader_member_id=0).encode())  # fmt: skip
        sizes.append(rec.path("messages").stat().st_size)
    return sizes  # never closed: no end-of-stream marker, as after a SIGKILL


def test_torn_file_is_read_up_to_its_last_whole_batch_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "messages" / "node-0-i0.arrow"
    sizes = write_batches(path, 4, 10)
    # Cut the file in the middle of the fourth batch.
    cut = (sizes[2] + sizes[3]) // 2
    with open(path, "r+b") as f:
        f.truncate(cut)
    run = open_run(tmp_path)
    assert run.messages.num_rows == 30
    assert run.messages.column("seq").to_pylist() == list(range(30))
    [torn] = run.torn
    assert (torn.path, torn.table, torn.batches, torn.rows) == (path, "messages", 3, 30)
    assert torn.bytes_read == sizes[2] and torn.bytes_ignored == cut - sizes[2]
    assert run.unclosed == [path]
    # A file cut inside its schema message: no rows, reported, and the table keeps the contract schema.
    other = tmp_path / "messages" / "node-1-i0.arrow"
    other.write_bytes(path.read_bytes()[:20])
    run = open_run(tmp_path)
    assert run.messages.num_rows == 30 and run.messages.schema == SCHEMAS["messages"]
    assert {t.path.name: t.bytes_ignored for t in run.torn}["node-1-i0.arrow"] == 20


def test_unclosed_file_ending_on_a_batch_boundary_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "messages" / "node-0-i0.arrow"
    write_batches(path, 2, 5)
    got = read_stream(path)
    assert (got.table.num_rows, got.batches, got.error, got.closed, got.bytes_ignored) == (10, 2, None, False, 0)


# ---------------------------------------------------------------------------------------- SIGKILL

CHILD = textwrap.dedent(
    """
    import sys, time
    from clusterlab.core.codec import CommitPosition
    from clusterlab.harness.recorder import ProcessRecorder

    run_dir, mode = sys.argv[1], sys.argv[2]
    rec = ProcessRecorder(run_dir, "killed", "node-1", 1, 0, max_rows=int(sys.argv[3]))
    w = None
    seq = 0
    deadline = time.monotonic() + 60  # never outlive a broken test
    def record():
        global seq
        rec.message("send", "consensus", 0,
                    CommitPosition(leadership_term_id=1, log_position=32 * seq, leader_member_id=1).encode())
        seq += 1
    if mode == "busy":
        # Record without pause; say how many rows are on disk once a few batches are.
        while time.monotonic() < deadline:
            record()
            w = rec.writer("messages")
            if w.batches_written == 5 and w.buffered == 0:
                print("flushed", w.rows_written, flush=True)
                while time.monotonic() < deadline:  # keep recording until killed
                    record()
    else:
        # Record a few rows, then idle in a duty cycle that only polls: the age flush writes them.
        for _ in range(7):
            record()
        while rec.poll() == 0 and time.monotonic() < deadline:
            pass
        print("flushed", rec.writer("messages").rows_written, flush=True)
        while time.monotonic() < deadline:
            rec.poll()
    """
)


def run_child_until_flushed_then_kill(tmp_path: Path, mode: str, max_rows: int) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), mode, str(max_rows)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        text=True,
    )
    try:
        # poll, not select: select() fails on descriptors >= 1024, which an xdist worker can reach
        # after the simulator's killed members (whose files stay open, as a crash leaves them).
        poller = select.poll()
        poller.register(proc.stdout, select.POLLIN)
        ready = poller.poll(60_000)
        assert ready, "the child never reported a flush"
        line = proc.stdout.readline()
        assert line.startswith("flushed"), (line, proc.stderr.read() if proc.poll() is not None else "")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        return int(line.split()[1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


def test_sigkilled_process_leaves_its_complete_batches(tmp_path: Path) -> None:
    flushed = run_child_until_flushed_then_kill(tmp_path, "busy", 64)
    run = open_run(tmp_path)
    rows = run.messages.num_rows
    assert rows >= flushed == 5 * 64
    assert rows % 64 == 0  # whole batches only (the kill can tear at most the batch being written)
    assert run.messages.column("seq").to_pylist() == list(range(rows))
    assert run.messages.column("log_position").to_pylist() == [32 * i for i in range(rows)]
    assert run.unclosed == [tmp_path / "messages" / "node-1-i0.arrow"]
    assert all(t.bytes_ignored > 0 for t in run.torn)


def test_sigkilled_idle_process_lost_nothing_older_than_the_flush_interval(tmp_path: Path) -> None:
    flushed = run_child_until_flushed_then_kill(tmp_path, "idle", 4096)
    run = open_run(tmp_path)
    assert flushed == run.messages.num_rows == 7
    assert not run.torn


# ---------------------------------------------------------------------------------------- cost


def test_message_benchmark_runs(tmp_path: Path) -> None:
    """A smoke run of the benchmark (figures: ``python -m clusterlab.harness.recorder``)."""
    result = bench_message_rows(2_000, tmp_path)
    assert result["rows"] == 2_000 and result["rows_per_s"] > 0 and result["file_bytes_per_row"] > 0


@pytest.mark.parametrize("compression", ["zstd", "lz4"])
def test_compressed_streams_read_back(tmp_path: Path, compression: str) -> None:
    clock = FakeClock()
    with ProcessRecorder(tmp_path, "z", "node-0", 0, 0, clock, wall_clock=clock, compression=compression) as rec:
        for i in range(100):
            rec.message("recv", "log", 1, CommitPosition(leadership_term_id=1, log_position=32 * i,
                                                         leader_member_id=1).encode())  # fmt: skip
    run = open_run(tmp_path)
    assert run.messages.column("log_position").to_pylist() == [32 * i for i in range(100)] and not run.torn


def test_trace_cli_refuses_a_missing_or_foreign_directory(tmp_path: Path, capsys) -> None:
    from clusterlab.cli import main

    assert main(["trace", "summary", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    assert main(["trace", "summary", str(tmp_path / "other")]) == 2
    assert "not a clusterlab run" in capsys.readouterr().err


def test_contiguity_violations_names_a_gap_and_a_lost_row() -> None:
    import pyarrow as pa
    from clusterlab.harness.trace import contiguity_violations

    def row(seq: int, end: int, length: int = 32, kind: str = "SessionMessage") -> dict[str, object]:
        return {"member_id": 1, "incarnation": 0, "seq": seq, "log_position": end, "length": length, "entry_type": kind}

    good = pa.Table.from_pylist([row(0, 64, 0, "Snapshot"), row(1, 96), row(2, 128)])
    assert contiguity_violations(good) == []
    gap = pa.Table.from_pylist([row(0, 32), row(1, 96)])
    assert contiguity_violations(gap) == [
        "member 1 incarnation 0: entry ending at 96 starts at 64, previous ended at 32"
    ]
    lost = pa.Table.from_pylist([row(0, 32), row(2, 64)])
    assert contiguity_violations(lost) == ["member 1 incarnation 0: seq has holes"]


@pytest.mark.parametrize(
    ("values", "type_"),
    [
        (["SessionMessage"] * 5, pa.string()),
        (["send", "recv", "send"], pa.string()),
        (["send", None, "send"], pa.string()),
        ([None, None], pa.string()),
        (["ключ"] * 3, pa.string()),
        ([], pa.string()),
        ([bytes(range(16)), bytes(16)], pa.binary(16)),
        ([bytes(15), bytes(17)], pa.binary(16)),  # a wrong width: the general path refuses it
        ([bytes(16), None], pa.binary(16)),
        ([b"a", b"", b"xyz"], pa.binary()),
        ([1, 2, 3], pa.int64()),
        ([1, None], pa.int64()),
        ([7, 7, 7], pa.int64()),  # one value: a repeat
        ([7, 7, None], pa.int64()),
        ([None, 7, 7], pa.int64()),
        ([7, 8, 7], pa.int64()),
        ([-1] * 4, pa.int16()),
        ([96] * 3, pa.int32()),
        (range(4096, 4096 + 70), pa.int64()),  # the seq column: a vector add to a cached iota
        (range(0, 10_000), pa.int64()),  # larger than the cache
        (range(5, 5), pa.int64()),
        ([None] * 3, pa.int64()),  # all null: pa.nulls
        ([None] * 2, pa.binary()),
        ([None] * 4, pa.int16()),
        ([b"a", None, b""], pa.binary()),
        ([bytes(range(256)) * 8] * 3, pa.binary()),  # large values: one join and an offsets buffer
        ([bytes(1000), b"", bytes(range(200)) * 15], pa.binary()),
        ([bytes(2000), None], pa.binary()),
        ([False] * 3, pa.bool_()),
        ([True, False], pa.bool_()),
        ([True, None], pa.bool_()),
    ],
)
def test_column_fast_paths_build_what_pyarrow_builds(values: list, type_: pa.DataType) -> None:
    """Each fast path gives the array pyarrow's conversion gives, to the same IPC bytes."""
    from clusterlab.harness.recorder import _to_arrow

    def ipc_bytes(array: pa.Array) -> bytes:
        sink = pa.BufferOutputStream()
        batch = pa.RecordBatch.from_arrays([array], names=["c"])
        with ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return sink.getvalue().to_pybytes()

    try:
        expected = pa.array(values, type=type_)
    except (pa.ArrowInvalid, ValueError) as e:
        with pytest.raises(type(e)):
            _to_arrow(values, type_)
        return
    got = _to_arrow(values, type_)
    assert got.type == type_ and got.equals(expected) and got.to_pylist() == list(values)
    assert ipc_bytes(got) == ipc_bytes(expected)
