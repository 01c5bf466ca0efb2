"""The local verdict on a recorded run: every check of :mod:`clusterlab.chaos.checks` run by the
embedded engine (DuckDB) in this process — what ``clusterlab run`` prints at once and the verdict the
runner and the goldens use. ``verify_run(trace_dir)`` returns a :class:`Verdict`;
``clusterlab.spark.check`` runs the same SQL on Spark (a test proves the verdicts equal)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterlab.chaos.checks import CHECK_NAMES
from clusterlab.chaos.linearizability import HistoryVerdict
from clusterlab.harness.completeness import Completeness
from rich.table import Table

CHECKS = CHECK_NAMES


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

    def table(self, title: str = "local verdict (DuckDB)") -> Table:
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
        # A nemesis that acts in stages (kill-voter: kill the leader, wait for a vote, kill the voter)
        # records chaos_apply when done: the fault began at its victims' first harness action since the
        # previous chaos event, and an election may already have ended before chaos_apply.
        start = i
        victims = set(detail.get("victims") or [])
        j = i - 1
        while j >= 0 and events[j]["kind"] not in ("chaos_apply", "chaos_heal"):
            x = events[j]
            if x["source"] == "harness" and x["kind"] in ("kill", "pause", "stop") and x["member_id"] in victims:
                start = j
            j -= 1
        nxt = next((x for x in events[start + 1 :] if x["kind"] == "leader"), None)
        if nxt is not None:
            out.append((nxt["wall_ns"] - events[start]["wall_ns"]) / 1e9)
    return out


def verify_run(trace_dir: Path | str, *, determinism: bool = False) -> Verdict:
    """Completeness first, then every check of one run with the embedded engine (DuckDB: the SQL
    checks of :mod:`clusterlab.chaos.checks`, the same text the Spark job runs) and the WGL
    linearizability checker; each violation as its ``detail`` line. ``determinism`` adds the replay
    checks of :mod:`clusterlab.chaos.determinism` (``snapshot-roundtrip``, ``replay-equivalence``)."""
    return verify_runs([trace_dir], determinism=determinism)[str(trace_dir)]


def verify_runs(trace_dirs: Sequence[Path | str], *, determinism: bool = False) -> dict[str, Verdict]:
    """:func:`verify_run` of several runs at once (keyed by ``str(trace_dir)``), in one DuckDB: the
    engine's fixed cost per query is paid once for all of them (a seed sweep judges its runs in
    batches). Each verdict holds only its own run's violations (runs are keyed by directory)."""
    from clusterlab.chaos.checks.embedded import judge_runs  # DuckDB: imported when a verdict is due

    judged = judge_runs(trace_dirs, limit=1 << 62, determinism=determinism)
    out: dict[str, Verdict] = {}
    for trace_dir in trace_dirs:
        key = str(trace_dir)
        run = judged.runs[key]
        v = Verdict(
            Path(trace_dir),
            violations={c: [] for c in judged.report.checks},
            rows={k: t.num_rows for k, t in run.tables.items()},
            torn=len(run.torn),
            completeness=run.completeness,
        )
        out[key] = v
        if not v.complete:
            continue  # complete or not judged
        for name, result in judged.report.checks.items():
            v.violations[name] = [str(x.get("detail") or x) for x in result.violations if x.get("run") == key]
        v.linearizability = judged.linearizability.get(key)
        events = sorted(run.events.to_pylist(), key=lambda e: (e["wall_ns"], e["seq"]))
        v.elections_s = election_times(events)
    return out
