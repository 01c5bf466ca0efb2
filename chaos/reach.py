"""What a sweep reached: per run, which election transitions, faults and log situations its trace shows,
and per sweep in how many runs each occurred, so a gap (a transition or a situation no run reached) is
visible before a bug hides in it.

A run's reach (:func:`run_reach`) is read from its recorded trace, black-box: ``election_state`` events
give the transitions, ``chaos_apply`` events the faults, node ``truncate`` events the divergent tails
cut at an election and the torn tails repaired, ``snapshot``/``timer_event``/``session_close`` events the
snapshots, timers read from the log and sessions closed through it, and the messages table the votes that
reached a candidate after it had started a later ballot and the client requests sent more than once.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from clusterlab.core.codec import decode
from clusterlab.core.codec.consensus import CanvassPosition, NewLeadershipTerm, RequestVote, Vote
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.consensus.election import TRANSITIONS
from clusterlab.harness.trace import open_run
from clusterlab.harness.trace_error import TraceError
from rich.console import Console
from rich.table import Table

TRANSITION = "transition"
FAULT = "fault"
SITUATION = "situation"

# The log and client situations a run can show, with what each means.
SITUATIONS: dict[str, str] = {
    "divergent tail truncated": "a member cut uncommitted entries the new leader's log lacks (at an election)",
    "torn tail repaired": "a member restarted on a torn log tail and cut it back",
    "vote in a later ballot": "a Vote reached its candidate after the candidate had started a later ballot",
    "older-term tail canvassed": "a member canvassed a log longer than its receiver's that ends in an older term "
    "(a deposed leader's uncommitted tail at an election)",
    "older leader after a vote": "a member that had voted YES for another member's term was offered a leader "
    "of an earlier term (a NewLeadershipTerm its vote promised to refuse)",
    "request resent": "a client sent the same request (same bytes, same id) more than once",
    "snapshot taken": "a member took a snapshot",
    "timer read from the log": "a follower (or a replay) read a TimerEvent",
    "session closed in the log": "a member consumed a SessionClose",
}


def _detail(event: dict[str, Any]) -> dict[str, Any]:
    try:
        detail = orjson.loads(event["detail"] or "{}")
    except orjson.JSONDecodeError:
        return {}
    return detail if isinstance(detail, dict) else {}


def _event_reach(events: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    seen: Counter[tuple[str, str]] = Counter()
    node = {"snapshot": "snapshot taken", "timer_event": "timer read from the log"}
    node["session_close"] = "session closed in the log"
    for e in events:
        kind, detail = e["kind"], _detail(e)
        if kind == "election_state" and "from" in detail and "to" in detail:
            seen[(TRANSITION, f"{detail['from']} -> {detail['to']}")] += 1
        elif kind == "chaos_apply" and "nemesis" in detail:
            seen[(FAULT, str(detail["nemesis"]))] += 1
        elif kind == "truncate" and str(e["source"]).startswith("node"):
            if detail.get("reason") == "uncommitted entries":
                seen[(SITUATION, "divergent tail truncated")] += 1
            elif detail.get("repair") == "torn tail":
                seen[(SITUATION, "torn tail repaired")] += 1
        elif kind in node and str(e["source"]).startswith("node"):
            seen[(SITUATION, node[kind])] += 1
    return seen


def _election_reach(rows: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """Votes that reached a later ballot, canvassed logs that end in an older term but run longer than
    the receiver's own (its latest CanvassPosition), and older-term leaders offered to a member after its YES
    vote for a later term (the promise outlives a restart), from one run's election messages."""
    seen: Counter[tuple[str, str]] = Counter()
    ballot: dict[tuple[int, int], int] = {}
    own_log: dict[tuple[int, int], tuple[int, int]] = {}
    promised: dict[int, int] = {}
    for r in sorted(rows, key=lambda r: (r["member_id"], r["incarnation"], r["seq"])):
        key, msg = (r["member_id"], r["incarnation"]), decode(r["payload"])
        if r["direction"] == "send" and isinstance(msg, Vote) and msg.vote == BooleanType.TRUE:
            if msg.candidate_member_id != r["member_id"]:
                promised[r["member_id"]] = max(promised.get(r["member_id"], -1), msg.candidate_term_id)
        elif r["direction"] == "recv" and isinstance(msg, NewLeadershipTerm):
            if msg.leadership_term_id < promised.get(r["member_id"], -1):
                seen[(SITUATION, "older leader after a vote")] += 1
        elif r["direction"] == "send" and isinstance(msg, RequestVote):
            ballot[key] = max(ballot.get(key, -1), msg.candidate_term_id)
        elif r["direction"] == "recv" and isinstance(msg, Vote) and msg.candidate_term_id < ballot.get(key, -1):
            seen[(SITUATION, "vote in a later ballot")] += 1
        elif isinstance(msg, CanvassPosition) and r["direction"] == "send":
            own_log[key] = (msg.log_leadership_term_id, msg.log_position)
        elif isinstance(msg, CanvassPosition) and r["direction"] == "recv" and key in own_log:
            own_term, own_position = own_log[key]
            if msg.log_leadership_term_id < own_term and msg.log_position > own_position:
                seen[(SITUATION, "older-term tail canvassed")] += 1
    return seen


def _message_reach(messages: Any) -> Counter[tuple[str, str]]:
    names = messages.column("msg_type").to_pylist()
    wanted = [i for i, n in enumerate(names) if n in ("RequestVote", "Vote", "CanvassPosition", "NewLeadershipTerm")]
    seen = _election_reach(messages.take(wanted).to_pylist() if wanted else [])
    directions, processes = messages.column("direction").to_pylist(), messages.column("process").to_pylist()
    ingress = [  # requests (not keep-alives or connects) a client sent
        i
        for i, (n, d, p) in enumerate(zip(names, directions, processes, strict=True))
        if n == "SessionMessageHeader" and d == "send" and p.startswith("client")
    ]
    sent = Counter(messages.column("payload").take(ingress).to_pylist()) if ingress else Counter()
    resent = sum(1 for n in sent.values() if n > 1)
    if resent:
        seen[(SITUATION, "request resent")] += resent
    return seen


def run_reach(trace_dir: Path) -> dict[str, int] | None:
    """The run's reach: ``"kind: name"`` -> how often it occurred (kind: transition, fault, situation);
    None for a trace that cannot be read (its run's verdict says why)."""
    try:
        run = open_run(trace_dir)
    except (TraceError, OSError, pa.ArrowException):
        return None
    if "events" not in run.tables or "messages" not in run.tables:
        return None
    seen = _event_reach(run.tables["events"].to_pylist()) + _message_reach(run.tables["messages"])
    return {f"{kind}: {name}": n for (kind, name), n in sorted(seen.items())}


@dataclass
class SweepReach:
    """Per sweep: in how many runs each transition, fault and situation occurred, and what none reached."""

    runs: int = 0
    in_runs: Counter[str] = field(default_factory=Counter)

    def add(self, reach: dict[str, int] | None) -> None:
        if reach is None:
            return
        self.runs += 1
        self.in_runs.update(reach.keys())

    def never_reached(self) -> list[str]:
        """The election transitions (of the protocol's table) and situations no run of the sweep showed."""
        situations = [f"{SITUATION}: {name}" for name in SITUATIONS]
        return [k for k in _TABLE + situations if k not in self.in_runs]

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "in_runs": dict(sorted(self.in_runs.items())),
            "never_reached": self.never_reached(),
            "transitions_reached": sum(1 for k in _TABLE if k in self.in_runs),
            "transitions": len(_TABLE),
        }


def reach_table(reach: SweepReach) -> Table:
    """What the sweep's runs reached: election transitions, log and client situations, faults; and what
    no run reached (a gap a bug can hide in)."""
    data = reach.to_json()
    t = Table(title=f"reach: what the {reach.runs} runs reached (runs in which it occurred)")
    t.add_column("kind")
    t.add_column("reached", overflow="fold")
    t.add_row("election transitions", f"{data['transitions_reached']} of {data['transitions']}")
    for name in SITUATIONS:
        runs = reach.in_runs.get(f"{SITUATION}: {name}", 0)
        t.add_row(f"  {name}", f"{runs} runs" if runs else "[bold red]never[/]")
    faults = sorted((k.removeprefix(f"{FAULT}: "), n) for k, n in reach.in_runs.items() if k.startswith(FAULT))
    t.add_row("faults applied", ", ".join(f"{name} {n}" for name, n in faults) or "none")
    missing = [k.removeprefix(f"{TRANSITION}: ") for k in data["never_reached"] if k.startswith(TRANSITION)]
    t.add_row("transitions never reached", ", ".join(missing) or "none")
    return t


def load_reach(path: Path) -> SweepReach:
    """A reach report written as JSON (``SweepReach.to_json``, e.g. by the pytest plugin's chaos_sweep)."""
    data = json.loads(path.read_text())
    return SweepReach(int(data["runs"]), Counter(data["in_runs"]))


def main(argv: list[str] | None = None) -> int:
    """``python -m clusterlab.chaos.reach FILE_OR_DIR``: print the reach report(s) written there (CI)."""
    parser = argparse.ArgumentParser(prog="python -m clusterlab.chaos.reach", description=main.__doc__)
    parser.add_argument("path", type=Path, help="a reach JSON file, or a directory of them")
    args = parser.parse_args(argv)
    paths = sorted(args.path.glob("*.json")) if args.path.is_dir() else [args.path]
    if not paths or not all(p.is_file() for p in paths):
        print(f"{args.path}: no reach report (JSON) there", file=sys.stderr)
        return 2
    console = Console(width=160)
    for p in paths:
        console.print(f"{p.name}:")
        console.print(reach_table(load_reach(p)))
    return 0


# The protocol's election transitions (core/consensus/election.py); an error's "-> INIT" is not in it.
_TABLE = [f"{TRANSITION}: {a.name} -> {b.name}" for a, b in TRANSITIONS]


__all__ = ["FAULT", "SITUATION", "SITUATIONS", "TRANSITION", "SweepReach", "load_reach", "reach_table", "run_reach"]

if __name__ == "__main__":
    raise SystemExit(main())
