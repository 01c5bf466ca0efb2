"""The local verdict on a recorded run: the Spark check's six properties computed with pyarrow in
one process (what ``clusterlab run`` prints at once, and the check used where Spark is not wanted).

``verify_run(trace_dir)`` returns a :class:`Verdict`; ``clusterlab.golden.spark.check`` is the same judgement at
scale and must agree with it (a test compares them)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterlab.chaos.linearizability import HistoryVerdict, check_history, operations_from_rows
from clusterlab.harness.trace import contiguity_violations, open_run
from rich.table import Table

CHECKS = ("agreement", "contiguity", "election_safety", "durability", "committed_prefix", "linearizability")
_FRAME_HEADER, _MESSAGE_HEADER = 32, 8


@dataclass
class Verdict:
    """Per check, its violations (empty: ok)."""

    run_dir: Path
    violations: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CHECKS})
    rows: dict[str, int] = field(default_factory=dict)
    torn: int = 0
    elections_s: list[float] = field(default_factory=list)  # per leader fault: until another member led
    linearizability: HistoryVerdict | None = None  # per key, with the minimal sub-history of a violation

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def failed(self) -> list[str]:
        return [c for c, v in self.violations.items() if v]

    def table(self, title: str = "local verdict (pyarrow)") -> Table:
        t = Table(title=f"{title}: {'PASS' if self.ok else 'FAIL'}")
        t.add_column("check")
        t.add_column("verdict")
        t.add_column("violations", justify="right")
        t.add_column("first", overflow="fold")
        for c, v in self.violations.items():
            note = ""
            if c == "linearizability" and not v and self.linearizability is not None:
                unknown = self.linearizability.unknown()
                note = f"unknown on {len(unknown)} key(s): {unknown[0].describe()}" if unknown else ""
            t.add_row(c, "[red]FAIL[/]" if v else "[green]ok[/]", str(len(v)), v[0] if v else note)
        return t


def _request_of(entry: bytes) -> dict[str, Any] | None:
    """The kv request JSON of a SessionMessage log entry (None for anything else)."""
    if len(entry) < _FRAME_HEADER + _MESSAGE_HEADER + 24:
        return None
    frame_length = int.from_bytes(entry[0:4], "little", signed=True)
    block_length = int.from_bytes(entry[_FRAME_HEADER : _FRAME_HEADER + 2], "little")
    template_id = int.from_bytes(entry[_FRAME_HEADER + 2 : _FRAME_HEADER + 4], "little")
    if template_id != 1:
        return None
    try:
        body = json.loads(entry[_FRAME_HEADER + _MESSAGE_HEADER + block_length : frame_length])
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def election_times(events: list[dict[str, Any]]) -> list[float]:
    """Seconds from each leader fault (a ``chaos_apply`` event with ``leader_fault``) to the next
    ``leader`` event: a member won an election (the old leader too, if it came back and won). Every
    process stamps events with the host's monotonic clock (virtual time in the simulator)."""
    out = []
    for i, e in enumerate(events):
        if e["kind"] != "chaos_apply":
            continue
        detail = json.loads(e["detail"] or "{}")
        if not detail.get("leader_fault"):
            continue
        nxt = next((x for x in events[i + 1 :] if x["kind"] == "leader"), None)
        if nxt is not None:
            out.append((nxt["wall_ns"] - e["wall_ns"]) / 1e9)
    return out


def verify_run(trace_dir: Path | str) -> Verdict:
    """Agreement, contiguity, election safety, durability and the committed prefix of one run."""
    run = open_run(trace_dir)
    v = Verdict(Path(trace_dir), rows={k: t.num_rows for k, t in run.tables.items()}, torn=len(run.torn))
    applied = run.applied.to_pylist()

    entries: dict[int, set[bytes]] = defaultdict(set)
    states: dict[int, dict[bytes, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in applied:
        who = f"{r['member_id']}/{r['incarnation']}"
        if r["entry_type"] != "Snapshot":
            entries[r["log_position"]].add(r["entry_digest"])
        states[r["log_position"]][r["state_digest"]].append(who)
    for pos in sorted(states):
        if len(entries.get(pos, ())) > 1 or len(states[pos]) > 1:
            parts = "; ".join(f"{d.hex()[:12]}: {','.join(w)}" for d, w in states[pos].items())
            v.violations["agreement"].append(f"position {pos}: states {parts}")

    v.violations["contiguity"] = contiguity_violations(run.applied)

    events = sorted(run.events.to_pylist(), key=lambda e: (e["wall_ns"], e["seq"]))
    v.elections_s = election_times(events)
    leaders: dict[int, set[int]] = defaultdict(set)
    for e in events:
        if e["kind"] == "leader" and e["leadership_term_id"] is not None:
            leaders[e["leadership_term_id"]].add(e["member_id"])
    v.violations["election_safety"] = [
        f"term {t}: leaders {sorted(m)}" for t, m in sorted(leaders.items()) if len(m) > 1
    ]

    log = run.log.to_pylist()
    requests: Counter[tuple[Any, ...]] = Counter()
    positions: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for row in log:
        req = _request_of(row["entry"])
        if req is not None:
            key = (req.get("id"), req.get("op"), req.get("key"), req.get("value"))
            requests[key] += 1
            positions[key].append(row["log_position"])
    changed_at: set[int] = set()
    last: dict[tuple[int, int], bytes] = {}
    for r in sorted(applied, key=lambda r: (r["member_id"], r["incarnation"], r["seq"])):
        k = (r["member_id"], r["incarnation"])
        if k in last and last[k] != r["state_digest"] and r["entry_type"] == "SessionMessage":
            changed_at.add(r["log_position"])
        last[k] = r["state_digest"]
    ops_rows = run.ops.to_pylist()
    # Linearizability of the clients' history (every client, per key): a violation fails the run;
    # a key whose search ran out of budget is "unknown" and says so, but does not fail it.
    v.linearizability = check_history(operations_from_rows(ops_rows))
    v.violations["linearizability"] = [k.describe() for k in v.linearizability.violations()]
    for op in ops_rows:
        if op["kind"] != "ok":
            continue
        key = (op["op_id"], op["f"], op["key"], op["value"])
        if not requests[key]:
            v.violations["durability"].append(
                f"client {op['client_id']} op {op['op_id']} {op['f']} "
                f"{op['key']}={op['value']}: acknowledged but not in the log"
            )
        for pos in positions[key][1:]:
            if pos in changed_at:
                v.violations["durability"].append(f"client {op['client_id']} op {op['op_id']}: applied again at {pos}")

    if log:
        committed = {row["log_position"]: hashlib.blake2b(row["entry"], digest_size=16).digest() for row in log}
        for r in applied:
            if r["entry_type"] == "Snapshot":
                continue
            got = committed.get(r["log_position"])
            if got != r["entry_digest"]:
                v.violations["committed_prefix"].append(
                    f"member {r['member_id']}/{r['incarnation']} applied {r['entry_digest'].hex()[:12]} at "
                    f"{r['log_position']}; committed log has {got.hex()[:12] if got else 'nothing'}"
                )
    last_commit: dict[tuple[str, int], int] = {}
    for e in sorted(run.events.to_pylist(), key=lambda e: (e["wall_ns"], e.get("seq", 0))):
        if e["kind"] == "commit" and e["log_position"] is not None:
            k = (e["source"], e.get("incarnation", 0))
            if e["log_position"] < last_commit.get(k, -1):
                v.violations["committed_prefix"].append(
                    f"{e['source']} incarnation {k[1]}: commit moved back from {last_commit[k]} to {e['log_position']}"
                )
            last_commit[k] = e["log_position"]
    return v
