"""The local verdict on a recorded run: the Spark check's six properties computed with pyarrow in
one process (what ``clusterlab run`` prints at once, and the check used where Spark is not wanted).
The properties the online checker also judges are its definitions (clusterlab.harness.invariants).

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
from clusterlab.harness.completeness import Completeness, Status
from clusterlab.harness.invariants import Agreement, ElectionSafety, MonotonicCommit
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
    completeness: Completeness | None = None  # judged first; an incomplete run's checks are not run
    linearizability: HistoryVerdict | None = None  # per key, with the minimal sub-history of a violation

    @property
    def complete(self) -> bool:
        return self.completeness is None or self.completeness.ok

    @property
    def ok(self) -> bool:
        return self.complete and not any(self.violations.values())

    @property
    def status(self) -> str:
        """``PASS``, ``FAIL`` (a violation), ``INCOMPLETE`` or ``CORRUPT`` (not judged)."""
        if not self.complete:
            assert self.completeness is not None
            return str(self.completeness.status)
        return "FAIL" if any(self.violations.values()) else "PASS"

    def failed(self) -> list[str]:
        """The checks that failed; ``completeness`` alone when the run was not judged."""
        if not self.complete:
            return ["completeness"]
        return [c for c, v in self.violations.items() if v]

    def table(self, title: str = "local verdict (pyarrow)") -> Table:
        t = Table(title=f"{title}: {self.status}")
        t.add_column("check")
        t.add_column("verdict")
        t.add_column("violations", justify="right")
        t.add_column("first", overflow="fold")
        if self.completeness is not None:
            c = self.completeness
            first = c.findings[0].describe() if c.findings else (c.notes[0].describe() if c.notes else "")
            color = "green" if c.ok else "red"
            t.add_row("completeness", f"[{color}]{c.status}[/]", str(len(c.findings)), first)
            if not c.ok:
                for f in c.findings[1:]:
                    t.add_row("", "", "", f.describe())
                return t  # not judged: the protocol checks would judge missing data
        for check, v in self.violations.items():
            note = ""
            if check == "linearizability" and not v and self.linearizability is not None:
                unknown = self.linearizability.unknown()
                note = f"unknown on {len(unknown)} key(s): {unknown[0].describe()}" if unknown else ""
            t.add_row(check, "[red]FAIL[/]" if v else "[green]ok[/]", str(len(v)), v[0] if v else note)
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
    v = Verdict(
        Path(trace_dir),
        rows={k: t.num_rows for k, t in run.tables.items()},
        torn=len(run.torn),
        completeness=run.completeness,
    )
    if run.completeness is not None and run.completeness.status is not Status.COMPLETE:
        return v  # complete or not judged
    applied = run.applied.to_pylist()

    # Agreement, contiguity, election safety and monotonic commit: the definitions the online checker
    # uses (clusterlab.harness.invariants), fed the whole run.
    # Per service id: a member's services reach different states at the same position.
    agreements: dict[int, Agreement] = defaultdict(Agreement)
    for r in applied:
        agreements[r.get("service_id") or 0].observe(
            r["log_position"], (r["member_id"], r["incarnation"]), r["entry_type"], r["entry_digest"], r["state_digest"]
        )
    v.violations["agreement"] = [
        (f"service {service_id}: " if service_id else "") + problem
        for service_id, agreement in sorted(agreements.items())
        for problem in agreement.violations()
    ]

    v.violations["contiguity"] = contiguity_violations(run.applied)

    events = sorted(run.events.to_pylist(), key=lambda e: (e["wall_ns"], e["seq"]))
    v.elections_s = election_times(events)
    election = ElectionSafety()
    for e in events:
        if e["kind"] == "leader" and e["leadership_term_id"] is not None:
            election.observe(e["leadership_term_id"], e["member_id"])
    v.violations["election_safety"] = election.violations()

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
    last: dict[tuple[int, int, int], bytes] = {}
    for r in sorted(applied, key=lambda r: (r["member_id"], r["incarnation"], r.get("service_id") or 0, r["seq"])):
        k = (r["member_id"], r["incarnation"], r.get("service_id") or 0)
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
    commit = MonotonicCommit()
    for e in sorted(run.events.to_pylist(), key=lambda e: (e["wall_ns"], e.get("seq", 0))):
        if e["kind"] == "commit" and e["log_position"] is not None:
            commit.observe(e["source"], e.get("incarnation", 0), e["log_position"])
    v.violations["committed_prefix"] += commit.violations()
    return v
