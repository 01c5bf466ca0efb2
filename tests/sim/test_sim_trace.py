"""A recorded simulator run (clusterlab.harness.sim_recording): 3 members with the kv service and a client, a
leader kill, a restart and a partition. The trace must account for every message (sent once,
received or dropped once, or stranded by a kill), every service's applied rows must be contiguous per
incarnation and agree across members, the committed log must match what the services applied, and
the files must load with plain pyarrow in a process that never imports clusterlab."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import textwrap
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from clusterlab.chaos.target import converged
from clusterlab.chaos.workload import SimWorkload
from clusterlab.core.codec.digests import entry_digest as codec_entry_digest
from clusterlab.core.consensus.context import MS, SECOND, Channel
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_recording import record_sim
from clusterlab.harness.simnet import DROP_DOWN, NetworkConfig
from clusterlab.harness.trace import (
    Run,
    applied_by_incarnation,
    contiguity_violations,
    match_messages,
    open_run,
    summarize,
)
from rich.console import Console

from clusterlab.cli import trace as cli_trace
from tests.unit.test_recorder import contract_columns

pytestmark = pytest.mark.sim

SEED = 5
MEMBER_CHANNELS = {"consensus", "log", "catchup", "archive"}


def drive(c: SimCluster, workload: SimWorkload, duration_ms: int) -> None:
    """The kv workload (an op every 10 ms of simulated time, one outstanding per key)."""
    end = c.now_ns + duration_ms * MS
    while c.now_ns < end:
        workload.step()
        c.run_for(10 * MS)


def run_scenario(directory: Path, seed: int = SEED, network: NetworkConfig | None = None) -> dict[str, Any]:
    """Leader kill, restart of the killed member, partition of the new leader, heal; recorded."""
    facts: dict[str, Any] = {}
    with SimCluster(members=3, seed=seed, directory=directory / "cluster", service="kv", network=network) as c:
        rec = record_sim(c, directory / "run", f"sim-trace-{seed}", "kill-restart-partition", seed)
        workload = SimWorkload(service="kv", seed=seed, rate=100.0, cluster=c, recording=rec)
        leader = c.await_leader(10 * SECOND)
        drive(c, workload, 300)
        assert c.control("snapshot")  # the killed member restarts from it: a Snapshot row
        drive(c, workload, 300)
        c.kill(leader)
        c.await_condition(lambda: c.leader_id() not in (None, leader), 10 * SECOND, "a new leader")
        drive(c, workload, 500)
        c.restart(leader)
        drive(c, workload, 500)
        isolated = c.leader_id()
        assert isolated is not None
        c.partition([[isolated], [i for i in range(3) if i != isolated]])
        c.await_condition(lambda: c.leader_id() not in (None, isolated), 10 * SECOND, "a leader in the majority")
        drive(c, workload, 500)
        c.heal()
        c.await_condition(lambda: converged(c), 20 * SECOND, "convergence after heal")
        drive(c, workload, 300)
        workload.read_back(10 * SECOND)
        c.run_for(SECOND)
        workload.close()
        facts["acked"] = {op.op_id for op in workload.history if op.outcome == "ok"}
        facts["invoked"] = workload.invoked
        facts["written"] = {op.key for op in workload.history if op.outcome == "ok" and op.f == "put"}
        facts["entries"] = {m: dict(c.service(m).service.entries) for m in c.members_alive()}
    # Closed after the cluster: its final stops (and what they strand) are in the trace.
    facts["meta"] = rec.close("ok")
    stats = c.network.stats
    facts["sent"] = Counter({ch.value: n for ch, n in stats.sent.items()})
    facts["delivered"] = Counter({ch.value: n for ch, n in stats.delivered.items()})
    facts["dropped"] = Counter({(ch.value, r): n for (ch, r), n in stats.dropped.items()})
    facts["down_drops_between_members"] = rec.down_drops_between_members
    facts["in_flight_at_close"] = c.network.in_flight()
    facts["killed"] = leader
    facts["isolated"] = isolated
    return facts


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, dict[str, Any]]:
    directory = tmp_path_factory.mktemp("sim-trace")
    facts = run_scenario(directory)
    facts["run_dir"] = directory / "run"
    return open_run(directory / "run"), facts


def member_rows(run: Run) -> list[dict[str, Any]]:
    """Network message rows between members (node processes on both ends)."""
    return [
        r
        for r in run.messages.select(
            [
                "process",
                "incarnation",
                "peer_process",
                "direction",
                "channel",
                "msg_id",
                "payload",
                "msg_type",
                "reason",
                "wall_ns",
            ]
        ).to_pylist()
        if r["channel"] in MEMBER_CHANNELS
    ]


# ---------------------------------------------------------------------------------------- (a) messages


def test_the_scenario_had_its_faults(recorded: tuple[Run, dict[str, Any]]) -> None:
    run, facts = recorded
    harness = [(e["kind"], e["member_id"]) for e in run.events.to_pylist() if e["source"] == "harness"]
    assert ("kill", facts["killed"]) in harness and ("restart", facts["killed"]) in harness
    assert ("partition", -1) in harness and ("heal", -1) in harness
    leaders = {(e["leadership_term_id"], e["member_id"]) for e in run.events.to_pylist() if e["kind"] == "leader"}
    assert len(leaders) >= 3 and len({t for t, _ in leaders}) == len(leaders)  # one leader per term
    assert facts["dropped"][("consensus", "partition")] > 0 and facts["down_drops_between_members"] > 0
    assert run.meta["outcome"] == "ok" and run.meta["seed"] == SEED and not run.torn and not run.unclosed


def test_every_member_message_is_sent_once_and_received_or_dropped_once(recorded: tuple[Run, dict[str, Any]]) -> None:
    run, facts = recorded
    rows = member_rows(run)
    sends: dict[int, dict[str, Any]] = {}
    receipts: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        assert r["process"].startswith("node-") and r["peer_process"].startswith("node-"), r
        assert r["msg_id"] is not None
        if r["direction"] == "send":
            assert r["msg_id"] not in sends, f"send {r['msg_id']} recorded twice"
            sends[r["msg_id"]] = r
        else:
            receipts[r["msg_id"]].append(r)
    # Every receipt belongs to a send, once, with the same bytes, at the sender's peer.
    for msg_id, got in receipts.items():
        assert msg_id in sends, f"{got[0]['direction']} of message {msg_id} without a send"
        assert len(got) == 1, f"message {msg_id} received/dropped {len(got)} times"
        send, receipt = sends[msg_id], got[0]
        assert (receipt["payload"], receipt["channel"], receipt["msg_type"]) == (
            send["payload"], send["channel"], send["msg_type"])  # fmt: skip
        if receipt["direction"] == "recv":  # at the receiver
            assert (receipt["process"], receipt["peer_process"]) == (send["peer_process"], send["process"])
            assert receipt["reason"] is None
        else:  # at the sender's gate, in the file of the send
            assert (receipt["process"], receipt["incarnation"], receipt["peer_process"]) == (
                send["process"], send["incarnation"], send["peer_process"])  # fmt: skip
            assert receipt["reason"] in ("partition", "isolated", "blocked", "loss")
    # The only sends without a receipt are those whose receiver was down: killed while they were in
    # flight, or dead when they were sent; the network dropped exactly those with reason "down".
    unmatched = [s for msg_id, s in sends.items() if msg_id not in receipts]
    assert len(unmatched) == facts["down_drops_between_members"] > 0
    down = sum(n for (ch, reason), n in facts["dropped"].items() if reason == DROP_DOWN and ch in MEMBER_CHANNELS)
    assert len(unmatched) == down
    assert not facts["in_flight_at_close"] or all(m.dst < 0 for m in facts["in_flight_at_close"])
    # The trace's counts are the network's.
    by_channel = Counter((r["channel"], r["direction"]) for r in rows)
    for ch in MEMBER_CHANNELS:
        assert by_channel[(ch, "send")] == facts["sent"][ch]
        assert by_channel[(ch, "recv")] == facts["delivered"][ch]
        chaos = sum(n for (c, reason), n in facts["dropped"].items() if c == ch and reason != DROP_DOWN)
        assert by_channel[(ch, "drop")] == chaos
    # match_messages (what `trace summary` prints) agrees, and blames the kills and stops.
    match = match_messages(run, between_members_only=True)
    assert len(match.unmatched_sends) == len(unmatched) == match.unmatched_at_kill
    assert match.unmatched_at_end == 0 and not match.orphan_rows and match.duplicates == 0


def test_client_and_service_messages_pair_up(recorded: tuple[Run, dict[str, Any]]) -> None:
    run, facts = recorded
    t = run.messages.to_pylist()
    service = [r for r in t if r["channel"] == "service"]
    assert {r["msg_type"] for r in service} >= {"JoinLog", "LogBlock", "ServiceAck"}
    # node-i -> service-i and back, FIFO: the k-th recv is the k-th send's bytes, per direction and incarnation.
    links: dict[tuple, dict[str, list[bytes]]] = defaultdict(lambda: {"send": [], "recv": []})
    for r in service:
        sender = r["process"] if r["direction"] == "send" else r["peer_process"]
        links[(sender, r["member_id"], r["incarnation"])][r["direction"]].append(r["payload"])
        assert r["peer"] == r["member_id"]
    for key, dirs in links.items():
        assert dirs["recv"] == dirs["send"][: len(dirs["recv"])], key  # a kill may strand the tail
    # Client <-> leader: replies come from service processes, everything else from nodes.
    egress = [r for r in t if r["channel"] == "egress" and r["direction"] == "send"]
    assert {r["process"].split("-")[0] for r in egress if r["msg_type"] == "SessionMessageHeader"} == {"service"}
    assert {r["process"].split("-")[0] for r in egress if r["msg_type"] != "SessionMessageHeader"} == {"node"}
    match = match_messages(run)
    assert not match.orphan_rows and match.unmatched_at_end == len(facts["in_flight_at_close"])


# ---------------------------------------------------------------------------------------- (b) applied


def test_applied_rows_are_contiguous_per_incarnation(recorded: tuple[Run, dict[str, Any]]) -> None:
    run, _ = recorded
    by_incarnation = applied_by_incarnation(run.applied)
    assert len(by_incarnation) == 4  # three members, one of them restarted
    assert contiguity_violations(run.applied) == []
    # The restarted member's new service incarnation started from the snapshot.
    [restarted] = [rows for (_m, inc), rows in by_incarnation.items() if inc == 1]
    assert restarted[0]["entry_type"] == "Snapshot" and restarted[0]["log_position"] > 0


def test_state_digests_agree_and_the_committed_log_is_what_was_applied(recorded: tuple[Run, dict[str, Any]]) -> None:
    run, _ = recorded
    at: dict[int, set[tuple[bytes, bytes]]] = defaultdict(set)
    for r in run.applied.to_pylist():
        if r["entry_type"] != "Snapshot":
            at[r["log_position"]].add((r["entry_digest"], r["state_digest"]))
    assert all(len(v) == 1 for v in at.values()), "members disagree at some position"
    log = run.log.to_pylist()
    meta = run.meta["committed_log"]
    assert meta["complete"] and log and log[-1]["log_position"] == meta["commit_position"]
    previous = 0
    for row in log:
        assert row["log_position"] - len(row["entry"]) == previous
        previous = row["log_position"]
        (entry_digest, _state), = at[row["log_position"]]  # fmt: skip
        assert codec_entry_digest(row["entry"]) == entry_digest
    applied_types = {r["entry_type"] for r in run.applied.to_pylist()} - {"Snapshot"}
    assert {r["entry_type"] for r in log} == applied_types


# ---------------------------------------------------------------------------------------- events, ops


def test_events_and_ops(recorded: tuple[Run, dict[str, Any]]) -> None:
    run, facts = recorded
    events = run.events.to_pylist()
    sources = {e["source"] for e in events}
    assert sources == {"harness", "node-0", "node-1", "node-2", "service-0", "service-1", "service-2"}
    # A service records its start and each on_terminate (the run stops every member gracefully).
    assert {e["kind"] for e in events if e["source"].startswith("service-")} <= {"start", "service_terminate"}
    kinds = Counter(e["kind"] for e in events if e["source"].startswith("node-"))
    assert kinds["election_state"] > 0 and kinds["role"] > 0 and kinds["leader"] >= 3 and kinds["commit"] > 0
    for e in events:
        assert isinstance(json.loads(e["detail"]), dict)
    ops = run.ops.to_pylist()
    by_op: dict[tuple[int, int], list[str]] = defaultdict(list)
    for o in sorted(ops, key=lambda o: o["seq"]):
        by_op[(o["client_id"], o["op_id"])].append(o["kind"])
    assert all(kinds[0] == "invoke" and len(kinds) == 2 and kinds[1] in ("ok", "info") for kinds in by_op.values())
    ok = {op_id for (_, op_id), kinds in by_op.items() if kinds[1] == "ok"}
    assert ok == facts["acked"] and len(by_op) == facts["invoked"]
    assert facts["written"] and len({json.dumps(e, sort_keys=True) for e in facts["entries"].values()}) == 1


# ---------------------------------------------------------------------------------------- (c) plain pyarrow

PLAIN_READER = textwrap.dedent(
    """
    import json, pathlib, sys
    import pyarrow as pa, pyarrow.ipc as ipc

    out = {}
    for path in sorted(pathlib.Path(sys.argv[1]).glob("*/*.arrow")):
        with ipc.open_stream(pa.OSFile(str(path))) as reader:
            table = reader.read_all()
        t = out.setdefault(path.parent.name, {"files": 0, "rows": 0, "schemas": []})
        t["files"] += 1
        t["rows"] += table.num_rows
        schema = [[f.name, str(f.type), f.nullable] for f in table.schema]
        if schema not in t["schemas"]:
            t["schemas"].append(schema)
    out["meta"] = json.loads((pathlib.Path(sys.argv[1]) / "run.json").read_text())
    mods = sorted({m.split(".")[0] for m in sys.modules} & {"core", "harness", "clusterlab", "golden", "chaos"})
    out["clusterlab_modules"] = mods
    print(json.dumps(out))
    """
)


def test_files_load_with_plain_pyarrow_and_match_the_contract(recorded: tuple[Run, dict[str, Any]]) -> None:
    run, facts = recorded
    done = subprocess.run(
        [sys.executable, "-I", "-c", PLAIN_READER, str(facts["run_dir"])],
        capture_output=True, text=True, timeout=120, cwd=facts["run_dir"], check=True,
    )  # fmt: skip
    got = json.loads(done.stdout)
    assert got["clusterlab_modules"] == []
    assert got["meta"]["run_id"] == run.meta["run_id"]
    for table in ("messages", "applied", "events", "ops", "log"):
        [schema] = got[table]["schemas"]  # one schema per table across its files
        want = [list(c) for c in contract_columns(table)]
        assert schema[: len(want)] == want, table
        assert got[table]["rows"] == run.tables[table].num_rows > 0
    incarnations = {
        (r["process"], r["incarnation"]) for r in run.messages.select(["process", "incarnation"]).to_pylist()
    }
    assert got["messages"]["files"] == len(incarnations)  # one file per process incarnation
    killed = f"node-{facts['killed']}"
    assert {inc for p, inc in incarnations if p == killed} == {0, 1}


# ---------------------------------------------------------------------------------------- run.json, CLI


def test_run_json(recorded: tuple[Run, dict[str, Any]]) -> None:
    run, _ = recorded
    meta = run.meta
    for key in ("run_id", "scenario", "seed", "members", "config", "clusterlab_version", "git_commit",
                "start_wall_ns", "end_wall_ns", "outcome"):  # fmt: skip
        assert key in meta, key
    timeouts = meta["config"]["timeouts"]
    assert set(timeouts) >= {
        "election_timeout_ns",
        "leader_heartbeat_timeout_ns",
        "leader_heartbeat_interval_ns",
        "startup_canvass_timeout_ns",
        "session_timeout_ns",
        "termination_timeout_ns",
    }
    assert set(meta["config"]["endpoints"]) == {"0", "1", "2"} and len(meta["members"]) == 3


def test_cli_summary_and_show(recorded: tuple[Run, dict[str, Any]]) -> None:
    run, facts = recorded
    parser = argparse.ArgumentParser()
    cli_trace.register(parser.add_subparsers(dest="command"))
    buf = io.StringIO()
    console = Console(file=buf, width=160, force_terminal=False, soft_wrap=True)
    args = parser.parse_args(["trace", "summary", str(facts["run_dir"])])
    assert cli_trace.cmd_summary(args, console) == 0
    text = buf.getvalue()
    for needle in ("messages per channel", "AppendPosition", "node-0", "terms", "torn files: 0", "unmatched"):
        assert needle in text, needle
    summary = summarize(run)
    assert summary.members == [0, 1, 2] and summary.rows["messages"] == run.messages.num_rows
    # Unmatched at a kill: what the network lost to down receivers, plus node <-> service IPC a kill stranded.
    service = Counter(run.messages.filter(pc.equal(run.messages.column("channel"), "service"))
                      .column("direction").to_pylist())  # fmt: skip
    stranded = service["send"] - service["recv"]
    assert summary.match.unmatched_at_kill == facts["meta"]["sim"]["down_drops"] + stranded
    assert summary.match.unmatched_at_end == len(facts["in_flight_at_close"])

    buf = io.StringIO()
    args = parser.parse_args(["trace", "show", str(facts["run_dir"]), "--member", "1", "--from", "1024",
                              "--to", "2048", "--channel", "log"])  # fmt: skip
    assert cli_trace.cmd_show(args, Console(file=buf, width=200, soft_wrap=True)) == 0
    lines = buf.getvalue().splitlines()
    assert any("LogBlock(leadership_term_id=" in line for line in lines)
    assert any("SessionMessageHeader(" in line for line in lines)  # the block's entries, decoded
    assert all("[log]" in line for line in lines if not line.startswith("    "))


# ---------------------------------------------------------------------------------------- determinism, duplicates


def test_same_seed_same_trace(recorded: tuple[Run, dict[str, Any]], tmp_path: Path) -> None:
    run, _ = recorded
    run_scenario(tmp_path)
    again = open_run(tmp_path / "run")
    cols = ["process", "incarnation", "seq", "wall_ns", "direction", "channel", "peer", "payload", "msg_id"]
    assert again.messages.select(cols).sort_by([("process", "ascending"), ("incarnation", "ascending"),
                                                 ("seq", "ascending")]).equals(
        run.messages.select(cols).sort_by([("process", "ascending"), ("incarnation", "ascending"),
                                           ("seq", "ascending")]))  # fmt: skip
    assert again.applied.drop_columns(["run_id"]).equals(run.applied.drop_columns(["run_id"]))


def test_duplicated_and_lost_messages_link_to_their_send(tmp_path: Path) -> None:
    network = NetworkConfig(duplicate_probability=0.05, loss_probability=0.02)
    with SimCluster(members=3, seed=3, directory=tmp_path / "cluster", network=network) as c:
        rec = record_sim(c, tmp_path / "run", "dups", "lossy", 3)
        c.await_leader(10 * SECOND)
        for i in range(50):
            c.offer(f"entry-{i}".encode())
            c.run_for(5 * MS)
        c.run_for(SECOND)
        duplicated = sum(c.network.stats.duplicated.values())
        lost = c.network.stats.dropped_total("loss")
    rec.close()
    run = open_run(tmp_path / "run")
    match = match_messages(run)
    assert duplicated > 0 and lost > 0
    assert match.duplicates == duplicated and not match.orphan_rows
    reasons = Counter(r for r in run.messages.column("reason").to_pylist() if r is not None)
    assert reasons["loss"] == lost
    assert match.sends == sum(c.network.stats.sent.values())


def test_bytes_per_recorded_message(recorded: tuple[Run, dict[str, Any]]) -> None:
    """Reported, and bounded: the fixed columns cost well under 200 B a row on top of the payload."""
    run, facts = recorded
    files = list((facts["run_dir"] / "messages").glob("*.arrow"))
    size = sum(p.stat().st_size for p in files)
    rows = run.messages.num_rows
    payload = sum(len(p) for p in run.messages.column("payload").to_pylist())
    per_row, overhead = size / rows, (size - payload) / rows
    print(f"\nmessages: {rows} rows, {size} B in {len(files)} files: {per_row:.1f} B/row "
          f"({payload / rows:.1f} B payload + {overhead:.1f} B columns and batch framing)")  # fmt: skip
    assert overhead < 200
    assert Channel.SERVICE.value in set(run.messages.column("channel").to_pylist())


def test_a_message_cut_in_flight_after_its_sender_died_is_dropped_in_the_senders_file(tmp_path: Path) -> None:
    with SimCluster(members=3, seed=1, directory=tmp_path / "cluster") as c:
        rec = record_sim(c, tmp_path / "run", "cut", "cut-in-flight", 1)
        leader = c.await_leader(10 * SECOND)
        c.await_condition(
            lambda: any(m.src == leader and m.dst >= 0 for m in c.network.in_flight()), SECOND, "a message in flight"
        )
        in_flight = {m.seq for m in c.network.in_flight() if m.src == leader}
        c.kill(leader)
        c.partition([[leader], [i for i in range(3) if i != leader]])
        c.run_for(50 * MS)
    rec.close()
    run = open_run(tmp_path / "run")
    kill_ns = next(e["wall_ns"] for e in run.events.to_pylist() if e["kind"] == "kill")
    drops = [
        r
        for r in run.messages.drop_columns(["payload"]).to_pylist()
        if r["process"] == f"node-{leader}" and r["direction"] == "drop"
    ]
    assert {r["msg_id"] for r in drops} == in_flight
    assert all(r["incarnation"] == 0 and r["reason"] == "partition" and r["wall_ns"] >= kill_ns for r in drops)
    assert not match_messages(run).orphan_rows
