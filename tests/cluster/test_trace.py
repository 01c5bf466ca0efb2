"""The trace of a real 3-member run (LocalCluster records by default): a leader SIGKILL, a restart, a
partition and its heal. Every member-to-member send pairs with one recv or drop (except what a kill
cut), applied rows are contiguous per incarnation, members agree on state at every position, the
files load with plain pyarrow, and a SIGKILLed process's files read back."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from clusterlab.core.codec.registry import decode
from clusterlab.harness.local import LocalCluster
from clusterlab.harness.payload_refs import REF_LENGTH
from clusterlab.harness.trace import (
    Run,
    applied_by_incarnation,
    contiguity_violations,
    match_messages,
    open_run,
    read_stream,
    summarize,
)

from tests.cluster.helpers import await_caught_up

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def _member(process: str | None) -> int | None:
    if process and process.split("-")[0] in ("node", "service"):
        return int(process.rsplit("-", 1)[1])
    return None


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Any]]:
    directory = tmp_path_factory.mktemp("trace") / "cluster"
    facts: dict[str, Any] = {}
    with LocalCluster(3, service="kv", directory=directory, seed=7) as c:
        assert c.trace_dir == directory / "trace"
        client = c.client()
        for i in range(20):
            assert client.put(f"a{i}", str(i))["ok"]
        time.sleep(0.3)  # the leader's recent rows reach disk (100 ms batches) before it dies
        leader = c.await_leader()
        c.kill(leader)
        facts["killed"] = leader
        facts["kill_ns"] = time.time_ns()
        c.await_leader(exclude={leader})
        for i in range(10):
            assert client.put(f"b{i}", str(i))["ok"]
        c.restart(leader)
        facts["restart_ns"] = time.time_ns()
        new_leader = c.await_leader()
        others = [m for m in range(3) if m != new_leader]
        c.partition([[new_leader], others])
        c.await_leader(exclude={new_leader})
        for i in range(10):
            assert client.put(f"c{i}", str(i))["ok"]
        c.heal()
        for i in range(10):
            assert client.put(f"d{i}", str(i))["ok"]
        # Every node and every service at one commit position: a restarted member's service process
        # (slow to start on a loaded machine) has received all its node sent it before the close.
        await_caught_up(c)
        time.sleep(0.3)
        facts["close_ns"] = time.time_ns()
        facts["run_id"] = c.run_id
    facts["run_dir"] = directory / "trace"
    return open_run(facts["run_dir"]), facts


def test_member_sends_pair_with_one_recv_or_drop(traced: tuple[Run, dict[str, Any]]) -> None:
    run, facts = traced
    killed = facts["killed"]
    assert run.meta["run_id"] == facts["run_id"] and run.meta["outcome"] == "ok"
    match = match_messages(run, between_members_only=True)
    assert match.sends > 300 and match.received > 0 and match.dropped > 0  # the partition dropped at the gate
    assert match.duplicates == 0 and match.unmatched_at_end == 0
    assert match.unmatched_at_kill == len(match.unmatched_sends) > 0
    # Unmatched: sent to the killed member's first incarnation before its restart (in its sockets, or
    # received in its last unflushed 100 ms), or in flight when the harness stopped everything.
    for send in match.unmatched_sends:
        if send["wall_ns"] >= facts["close_ns"]:
            continue
        assert _member(send["peer_process"]) == killed and send["wall_ns"] < facts["restart_ns"], _explain(
            send, match, facts
        )
    # Receipts without a send: the killed incarnation's own last sends (its unflushed tail).
    for row in match.orphan_rows:
        assert _member(row["peer_process"]) == killed and row["wall_ns"] < facts["restart_ns"], row
        if row["msg_id"] is not None:
            assert (row["msg_id"] >> 52) - 1 == killed and (row["msg_id"] >> 36) & 0xFFFF == 0
    # Gate drops are the partition's, and every member-to-member row carries a message id.
    messages = run.messages.drop_columns(["payload"]).to_pylist()
    member_rows = [r for r in messages if r["channel"] in ("consensus", "log", "catchup", "archive")]
    assert all(r["msg_id"] is not None for r in member_rows)
    assert {r["reason"] for r in member_rows if r["direction"] == "drop"} <= {"gate", "unreachable"}
    assert any(r["reason"] == "gate" for r in member_rows)
    summary = summarize(run)
    assert summary.match.unmatched_at_kill >= match.unmatched_at_kill and summary.members == [0, 1, 2]
    assert {r["channel"] for r in messages} >= {"consensus", "log", "service", "ingress", "egress", "control"}


def _explain(send: dict[str, Any], match: Any, facts: dict[str, Any]) -> str:
    """What a failure needs to be diagnosed: the send in full, the times around the restart, and how
    many sends went unmatched after it."""
    row = {k: v for k, v in send.items() if k != "payload"}
    late = [s for s in match.unmatched_sends if facts["restart_ns"] <= s["wall_ns"] < facts["close_ns"]]
    return (
        f"an unmatched send {(send['wall_ns'] - facts['restart_ns']) / 1e9:+.3f} s after the restart of "
        f"member {facts['killed']} (kill {(facts['kill_ns'] - facts['restart_ns']) / 1e9:+.3f} s, close "
        f"{(facts['close_ns'] - facts['restart_ns']) / 1e9:+.3f} s); {len(late)} such sends, "
        f"{sorted({(s['process'], s['peer_process'], s['channel']) for s in late})}: {row}"
    )


def test_applied_rows_contiguous_and_states_agree(traced: tuple[Run, dict[str, Any]]) -> None:
    run, facts = traced
    by_incarnation = applied_by_incarnation(run.applied)
    assert {(facts["killed"], 0), (facts["killed"], 1)} <= set(by_incarnation) and len(by_incarnation) == 4
    assert contiguity_violations(run.applied) == []
    at: dict[int, set[tuple[bytes, bytes]]] = defaultdict(set)
    for r in run.applied.to_pylist():
        if r["entry_type"] != "Snapshot":
            at[r["log_position"]].add((r["entry_digest"], r["state_digest"]))
    assert at and all(len(v) == 1 for v in at.values()), "members disagree at some position"
    meta = run.meta["committed_log"]
    assert meta["complete"] and run.log.num_rows == meta["entries"] > 50
    assert {r["log_position"] for r in run.log.to_pylist()} <= set(at)
    kinds = {e["kind"] for e in run.events.to_pylist() if e["source"] == "harness"}
    assert kinds >= {"start", "kill", "restart", "partition", "heal", "stop"}
    node_kinds = {e["kind"] for e in run.events.to_pylist() if e["source"].startswith("node-")}
    assert node_kinds >= {"role", "leader", "commit"}


def test_committed_entries_are_recorded_once(traced: tuple[Run, dict[str, Any]]) -> None:
    """The closed messages files keep LogBlock entries and logged requests' bodies as references into the
    committed log; open_run gives every message back whole, a block's entries exactly the committed log's
    bytes at its start position."""
    run, facts = traced
    refs = run.meta["payload_refs"]
    assert refs["referenced_rows"] > 10 and refs["bytes_after"] < refs["bytes_before"]  # at the finish
    assert refs["verified_rows"] > 100 and refs["unverified_rows"] == 0  # when recorded, checked at the finish
    assert f"node-{facts['killed']}-i0.arrow" in refs["skipped_files"]  # a killed process's file stays as it was
    log = b"".join(run.log.column("entry").to_pylist())
    kinds: set[str] = set()  # of the referenced rows, in the files as stored
    for path in (facts["run_dir"] / "messages").glob("node-*.arrow"):
        raw = read_stream(path).table
        kinds |= {t for t, n in zip(raw["msg_type"].to_pylist(), raw[REF_LENGTH].to_pylist(), strict=True) if n}
    assert {"LogBlock", "SessionMessageHeader"} <= kinds <= {"LogBlock", "ReplayBlock", "SessionMessageHeader"}
    types, payloads = run.messages.column("msg_type").to_pylist(), run.messages.column("payload").to_pylist()
    blocks = [decode(p) for p, t in zip(payloads, types, strict=True) if t == "LogBlock"]
    committed = [b for b in blocks if b.end_position <= len(log)]
    assert len(committed) > 100
    for block in committed:
        assert block.walk().error is None and log[block.start_position : block.end_position] == block.entries
    channels = run.messages.column("channel").to_pylist()
    requests = [
        p for p, t, c in zip(payloads, types, channels, strict=True) if t == "SessionMessageHeader" and c == "ingress"
    ]
    assert len(requests) >= 30 and all(decode(p).payload for p in requests)  # whole again: bodies put back
    assert not [f for f in run.completeness.findings + run.completeness.notes if f.file == "messages/"]


def test_killed_process_files_read_back(traced: tuple[Run, dict[str, Any]]) -> None:
    run, facts = traced
    for table in ("messages", "events"):
        path = facts["run_dir"] / table / f"node-{facts['killed']}-i0.arrow"
        got = read_stream(path)
        assert got.batches > 0 and got.table.num_rows > 0 and not got.closed  # no end-of-stream: killed
        assert path in run.unclosed
    # Its service may have been killed too, or have seen its node go and stopped first: rows either way.
    got = read_stream(facts["run_dir"] / "applied" / f"service-{facts['killed']}-i0.arrow")
    assert got.table.num_rows > 0 and got.error is None


PLAIN_READER = textwrap.dedent(
    """
    import json, pathlib, sys
    import pyarrow as pa, pyarrow.ipc as ipc

    out = {}
    for path in sorted(pathlib.Path(sys.argv[1]).glob("*/*.arrow")):
        reader = ipc.open_stream(pa.OSFile(str(path)))
        rows = 0
        while True:  # complete batches; a killed process's file may end inside one
            try:
                rows += reader.read_next_batch().num_rows
            except StopIteration:
                break
            except (pa.ArrowInvalid, OSError):
                break
        out[path.parent.name] = out.get(path.parent.name, 0) + rows
    mods = sorted({m.split(".")[0] for m in sys.modules} & {"core", "harness", "clusterlab"})
    print(json.dumps({"rows": out, "mods": mods}))
    """
)


def test_files_load_with_plain_pyarrow(traced: tuple[Run, dict[str, Any]]) -> None:
    run, facts = traced
    done = subprocess.run(
        [sys.executable, "-I", "-c", PLAIN_READER, str(facts["run_dir"])],
        capture_output=True, text=True, timeout=120, cwd=facts["run_dir"], check=True,
    )  # fmt: skip
    got = json.loads(done.stdout)
    assert got["mods"] == []
    for table in ("messages", "applied", "events", "log"):
        assert got["rows"][table] == run.tables[table].num_rows > 0, table


def test_recording_off(tmp_path: Path) -> None:
    with LocalCluster(3, service="kv", directory=tmp_path / "c", record=False) as c:
        assert c.client().put("k", "v")["ok"]
        assert c.trace_dir is None and c.recorder is None
    assert not (tmp_path / "c" / "trace").exists()


def test_real_clients_record_their_operation_history(tmp_path: Path) -> None:
    """invoke then ok for every answered put, info for a request still open at close (ops table)."""
    with LocalCluster(3, service="kv", directory=tmp_path / "c", seed=3) as c:
        c.await_leader()
        client = c.client()
        for i in range(5):
            assert client.put(f"k{i}", f"v{i}")["ok"]
        client.submit(lambda rid: b'{"id": %d, "op": "put", "key": "late", "value": "x"}' % rid)
        trace_dir = c.trace_dir
    ops = open_run(trace_dir).tables["ops"].to_pylist()
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in ops:
        by_kind[row["kind"]].append(row)
    invoked = {r["op_id"] for r in by_kind["invoke"]}
    answered = {r["op_id"] for r in by_kind["ok"]}
    assert len(invoked) == 6
    assert answered >= {1, 2, 3, 4, 5}
    assert all(r["f"] == "put" and r["key"].startswith("k") for r in by_kind["ok"])
    # The last put either got its reply before close (ok) or is recorded as unknown (info), once.
    last = max(invoked)
    assert (last in answered) != any(r["op_id"] == last for r in by_kind["info"])
    assert {r["client_id"] for r in ops} == {0}
