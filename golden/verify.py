"""``golden verify``: are today's service and consensus code still producing every golden's states?

For each golden:

(a) **replay** — its committed log goes, entry by entry, through today's consensus module log adapter
    and service (:mod:`clusterlab.harness.replay`); the state digest at every log position is diffed against the
    golden's (and the consensus module's open sessions against the service's);
(b) **rerun** — a simulator golden is re-run from its seed, scenario, size and duration with today's
    code; every position of every member and every message is diffed against the golden.

The diffs are Spark jobs (:mod:`clusterlab.golden.spark_diff`), one set for all goldens in one session. The report
names each golden's first divergent position, its entry (``describe()``), the golden and actual
digests, and counts the rest — and says whether the divergence is one position or every position
from there on, which tells a one-off wrong update from a changed digest function or encoding.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from clusterlab.chaos.runner import run_scenario
from clusterlab.golden.coverage import (
    CoverageReport,
    Covered,
    Measurement,
    measure_golden,
    measure_log,
    measure_trace,
    recipe_of,
    sources_run_here,
)
from clusterlab.golden.spark_diff import Comparison, MessageDiff, PositionDiff, diff_messages, diff_positions
from clusterlab.golden.store import (
    TRACES,
    Golden,
    GoldenError,
    applied_table,
    current_commit,
    golden_names,
    golden_service,
    load_golden,
    write_stream,
)
from clusterlab.harness.replay import describe_entry, replay_log
from clusterlab.harness.trace import describe_payload
from clusterlab.spark.session import spark_session, spark_session_is_running
from rich.console import Console
from rich.table import Table

REPLAY, RERUN = "replay", "rerun"


@dataclass
class GoldenVerdict:
    """One golden's outcome."""

    name: str
    driver: str
    blessed_commit: str | None
    positions: int
    replay: PositionDiff | None = None
    rerun: PositionDiff | None = None
    messages: MessageDiff | None = None
    errors: list[str] = field(default_factory=list)
    session_mismatches: list[int] = field(default_factory=list)
    damaged: str | None = None  # INCOMPLETE or CORRUPT: the golden's own files, not the code, are at fault

    @property
    def verdict(self) -> str:
        """``PASS``, ``FAIL`` (the code diverges, or cannot run) or the golden's ``INCOMPLETE``/``CORRUPT``."""
        return self.damaged or ("PASS" if self.ok else "FAIL")

    @property
    def ok(self) -> bool:
        diffs = [d for d in (self.replay, self.rerun, self.messages) if d is not None]
        return not self.errors and not self.session_mismatches and all(d.ok for d in diffs) and bool(diffs)

    def to_json(self) -> dict[str, Any]:
        def pos(d: PositionDiff | None) -> dict[str, Any] | None:
            if d is None:
                return None
            return {
                "ok": d.ok,
                "golden_positions": d.golden_positions,
                "actual_positions": d.actual_positions,
                "divergent": d.divergent,
                "kinds": d.kinds,
                "first": d.first,
                "from_first": d.from_first,
                "divergent_from_first": d.divergent_from_first,
                "next_agreeing": d.next_agreeing,
                "pattern": pattern(d),
            }

        m = self.messages
        return {
            "name": self.name,
            "driver": self.driver,
            "ok": self.ok,
            "verdict": self.verdict,
            "blessed_commit": self.blessed_commit,
            "positions": self.positions,
            "errors": self.errors,
            "session_mismatches": self.session_mismatches[:20],
            "replay": pos(self.replay),
            "rerun": pos(self.rerun),
            "messages": None
            if m is None
            else {
                "ok": m.ok,
                "golden_rows": m.golden_rows,
                "actual_rows": m.actual_rows,
                "divergent": m.divergent,
                "first": m.first,
            },
        }


@dataclass
class VerifyReport:
    """Every golden's verdict."""

    verdicts: list[GoldenVerdict]
    commit: str | None
    elapsed_s: float
    master: str = ""
    coverage: CoverageReport | None = None  # with ``coverage=True``: measured on the replays and re-runs

    @property
    def ok(self) -> bool:
        return bool(self.verdicts) and all(v.ok for v in self.verdicts)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "commit": self.commit,
            "master": self.master,
            "elapsed_s": round(self.elapsed_s, 2),
            "goldens": [v.to_json() for v in self.verdicts],
            **({"coverage": self.coverage.to_json()} if self.coverage is not None else {}),
        }

    def table(self) -> Table:
        t = Table(
            title=f"golden verify ({len(self.verdicts)} goldens, {self.elapsed_s:.1f} s): "
            f"{'PASS' if self.ok else 'FAIL'}"
        )
        for col in ("golden", "driver", "positions", "replay", "rerun", "rerun messages", "verdict"):
            t.add_column(col, justify="right" if col == "positions" else "left", no_wrap=col == "golden")
        for v in self.verdicts:
            t.add_row(
                v.name,
                v.driver,
                str(v.positions),
                _cell(v.replay),
                _cell(v.rerun),
                "-" if v.messages is None else ("same" if v.messages.ok else f"{v.messages.divergent} differ"),
                "[green]ok[/]" if v.ok else f"[red]{v.verdict} golden[/]" if v.damaged else "[red]FAIL[/]",
            )
        return t

    def details(self) -> list[str]:
        """Lines explaining every failure (empty when all pass)."""
        lines: list[str] = []
        for v in self.verdicts:
            if v.ok:
                continue
            lines.append(
                f"golden {v.name} ({v.driver}, blessed from {v.blessed_commit or 'unknown commit'}; "
                f"this tree is {self.commit or 'unknown'}):"
            )
            lines += [f"  error: {e}" for e in v.errors]
            if v.session_mismatches:
                lines.append(
                    f"  the consensus module and the service disagree on open sessions at "
                    f"{len(v.session_mismatches)} positions, first {v.session_mismatches[0]}"
                )
            for label, d in ((REPLAY, v.replay), (RERUN, v.rerun)):
                if d is not None and not d.ok:
                    lines += [f"  {label}: {line}" for line in describe_position_diff(d)]
            if v.messages is not None and not v.messages.ok:
                lines += [f"  rerun messages: {line}" for line in describe_message_diff(v.messages)]
        return lines


def _cell(d: PositionDiff | None) -> str:
    if d is None:
        return "-"
    if d.ok:
        return "same"
    assert d.first is not None
    return f"{d.divergent} differ from {d.first['log_position']}"


def pattern(d: PositionDiff) -> str:
    """What the shape of a divergence suggests."""
    if d.ok or d.first is None:
        return "none"
    if d.divergent_from_first == d.from_first == d.golden_positions and d.kinds.get("entry"):
        return "every entry differs: the log encoding or framing changed"
    if d.divergent_from_first == d.from_first == d.golden_positions:
        return "every position differs: the state digest function or the service changed"
    if d.divergent_from_first == d.from_first:
        return "diverges at the first position shown and at every position after it"
    if d.divergent == 1:
        return "one position differs; the states agree again after it (a one-off divergence)"
    return f"{d.divergent} positions differ; the states agree again at {d.next_agreeing}"


def describe_position_diff(d: PositionDiff, describe: Callable[[int], str] | None = None) -> list[str]:
    """The report lines of a position diff: first divergent position, entry, digests, how many more."""
    f = d.first
    if f is None:
        return [f"{d.divergent} positions differ"]
    entry = f.get("entry") or (describe(f["log_position"]) if describe else "")
    lines = [
        f"first divergent position {f['log_position']} ({f['kind']}): {f.get('entry_type') or ''} {entry}".rstrip(),
        f"  golden entry {f['golden_entry_digest']} state {f['golden_state_digest']}",
        f"  actual entry {', '.join(x for x in f['actual_entry_digests'] if x) or '-'} "
        f"state {', '.join(f['actual_state_digests']) or '-'}",
    ]
    if f.get("members") and len(f["members"]) > 1:
        lines.append(
            "  members: "
            + "; ".join(f"{m['member']}/{m['incarnation']} {m['state_digest'][:12]}" for m in f["members"])
        )
    lines.append(
        f"  {d.divergent - 1} more divergent positions ({d.divergent_from_first} of the {d.from_first} "
        f"positions from the first on; {d.golden_positions} in the golden); kinds {d.kinds}"
    )
    lines.append(f"  pattern: {pattern(d)}")
    return lines


def describe_message_diff(m: MessageDiff) -> list[str]:
    f = m.first
    if f is None:
        return [f"{m.divergent} messages differ"]
    lines = [
        f"first divergent message: {f['process']} incarnation {f['incarnation']} seq {f['seq']} at "
        f"sim time {f['wall_ns']} ns"
    ]
    for side in ("golden", "actual"):
        payload = f.get(f"{side}_payload")
        text = "(none)"
        if payload is not None:
            text = describe_payload(bytes.fromhex(payload), entries=False)[0]
        lines.append(
            f"  {side}: {f.get(f'{side}_direction') or ''} {f.get(f'{side}_channel') or ''} "
            f"{f.get(f'{side}_peer_process') or ''} {text}"
        )
    golden, actual = f.get("golden_payload"), f.get("actual_payload")
    if golden is not None and actual is not None and golden != actual:
        lines.append("  " + _first_byte_difference(bytes.fromhex(golden), bytes.fromhex(actual)))
    lines.append(f"  {m.divergent - 1} more divergent messages (golden {m.golden_rows} rows, re-run {m.actual_rows})")
    return lines


def _first_byte_difference(golden: bytes, actual: bytes, context: int = 12) -> str:
    """Where two payloads first differ, with the bytes around it (their descriptions may be alike)."""
    at = next(
        (i for i, (a, b) in enumerate(zip(golden, actual, strict=False)) if a != b), min(len(golden), len(actual))
    )
    start = max(0, at - context // 2)
    return (
        f"first differing byte at offset {at} of {len(golden)}/{len(actual)}: "
        f"golden …{golden[start : at + context].hex()} actual …{actual[start : at + context].hex()}"
    )


def _entry_describer(g: Golden) -> Callable[[int], str]:
    def describe(position: int) -> str:
        rows = g.log.filter(pc.equal(g.log.column("log_position"), position))
        if rows.num_rows == 0:
            return "(not in the golden's log)"
        return describe_entry(bytes(rows.column("entry")[0].as_py()), position - len(rows.column("entry")[0].as_py()))

    return describe


def _write_replay(directory: Path, run_id: str, table: pa.Table) -> None:

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "run.json").write_text(json.dumps({"run_id": run_id, "scenario": "golden-replay"}))
    write_stream(directory / "applied" / "replay.arrow", table, compression=None)


@dataclass
class _Verification:
    """What one ``verify_goldens`` call collects while it replays and re-runs its goldens."""

    work: Path  # scratch directory for the replays and re-runs
    say: Callable[[str], None]
    coverage: bool
    inline: bool  # coverage measured on this interpreter's own runs (the sources run here)
    rerun: bool
    mutants: Sequence[str]
    comparisons: list[Comparison] = field(default_factory=list)
    measured: list[Measurement] = field(default_factory=list)


def verify_goldens(
    names: Sequence[str] | None = None,
    *,
    traces: Path = TRACES,
    master: str | None = None,
    spark: Any = None,
    service_factory: Callable[[], Any] | None = None,
    rerun: bool = True,
    scratch: Path | None = None,
    on_progress: Callable[[str], None] | None = None,
    mutants: Sequence[str] = (),
    coverage: bool = False,
) -> VerifyReport:
    """Verify goldens ``names`` (default: all under ``traces``). ``service_factory`` replaces the
    golden's service in the replay (tests plant a faulty one). Raises GoldenError only when a named
    golden does not exist or its service or workload cannot be imported here; a corrupt golden is a
    failed verdict with its error. ``mutants``: planted bugs switched on in the simulator re-runs
    (``clusterlab mutants --golden``; test-only).
    ``coverage``: also measure what each golden exercises (golden/coverage.py) on the runs verify makes
    anyway, a simulator golden's re-run and a real golden's replay, under coverage.py: the report's
    ``coverage`` is what ``golden coverage`` reports, without running every golden a second time."""
    started = time.monotonic()
    wanted = list(names) if names else golden_names(traces)
    if not wanted:
        raise GoldenError(f"no goldens in {traces}")
    for n in wanted:
        if not (traces / n).is_dir():
            raise GoldenError(f"no golden named {n!r} in {traces} (known: {', '.join(golden_names(traces)) or 'none'})")
    work = Path(tempfile.mkdtemp(prefix="clusterlab-golden-")) if scratch is None else scratch
    # The mypyc-compiled modules are invisible to coverage.py: then each golden is measured apart,
    # in a child interpreter running their sources (golden/coverage.py), not on verify's own runs.
    inline = coverage and sources_run_here()
    job = _Verification(work, on_progress or (lambda _line: None), coverage, inline, rerun, mutants)
    verdicts: list[GoldenVerdict] = []
    goldens: dict[str, Golden] = {}
    try:
        for n in wanted:
            try:
                g = load_golden(n, traces)
            except GoldenError as e:  # a damaged golden says so: it is not a divergence of the code
                damaged = e.status if e.status in ("INCOMPLETE", "CORRUPT") else None
                verdicts.append(GoldenVerdict(n, "?", None, 0, errors=[str(e)], damaged=damaged))
                continue
            goldens[n] = g
            v = GoldenVerdict(n, g.driver, g.info.get("git_commit"), g.applied.num_rows)
            verdicts.append(v)
            if coverage and not inline:
                job.measured.append(measure_golden(n, traces, work / f"coverage-{n}"))
            _replay_golden(job, g, v, service_factory)
            if rerun and g.driver == "sim":
                _rerun_golden(job, g, v)
        master_used = _diff_against_goldens(job, verdicts, goldens, spark, master)
    finally:
        if scratch is None:
            shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - started
    measured = job.measured
    covered_report = CoverageReport(measured, sum(m.elapsed_s for m in measured)) if coverage else None
    return VerifyReport(verdicts, current_commit(), elapsed, master_used, covered_report)


def _replay_golden(job: _Verification, g: Golden, v: GoldenVerdict, service_factory: Callable[[], Any] | None) -> None:
    """Replay the golden's committed log through today's service and queue the replay's comparison."""
    n = v.name
    # A service or workload that cannot be imported here is not a divergence: GoldenError, one line.
    factory = service_factory or golden_service(str(g.info["service"]), g.info.get("workload"), f"golden {n}")
    job.say(f"{n}: replaying {g.log.num_rows} log entries")
    m = Measurement(n, recipe=recipe_of(g) if job.coverage else None)  # filled in only with ``coverage``
    cov_started = time.monotonic()
    measure_replay = job.inline and (g.driver != "sim" or not job.rerun)  # else the re-run is measured
    with Covered() if measure_replay else contextlib.nullcontext() as covered:
        replay = replay_log(g.log.to_pylist(), factory)
    if covered is not None:
        covered.record(m)
        measure_log(m, g)
        if replay.error:
            m.error = f"replay stopped: {replay.error}"
        m.elapsed_s = time.monotonic() - cov_started
        job.measured.append(m)
    if replay.error:
        v.errors.append(f"replay stopped: {replay.error}")
    v.session_mismatches = replay.session_mismatches
    replay_dir = (job.work / f"replay-{n}").resolve()
    _write_replay(replay_dir, f"replay-{n}", applied_table(f"replay-{n}", replay))
    job.comparisons.append(Comparison(n, REPLAY, str(g.directory.resolve()), str(replay_dir)))


def _rerun_golden(job: _Verification, g: Golden, v: GoldenVerdict) -> None:
    """Re-run a simulator golden's scenario from its seed and queue the re-run's comparison."""
    n, info = v.name, g.info
    job.say(f"{n}: re-running {info['scenario']} seed {info['seed']} in the simulator")
    m = Measurement(n, recipe=recipe_of(g) if job.coverage else None)
    cov_started = time.monotonic()
    try:
        with Covered() if job.inline else contextlib.nullcontext() as covered:
            r = run_scenario(
                info["scenario"],
                seed=int(info["seed"]),
                members=int(info["members"]),
                duration_s=info.get("duration_s"),
                sim=True,
                directory=job.work / f"rerun-{n}",
                clients=int(info.get("clients", 1)),  # goldens from before concurrent clients: one
                service=str(info.get("service", "kv")),
                workload=info.get("workload"),
                mutants=job.mutants,
            )
    except (KeyError, ValueError) as e:  # the scenario is gone or no longer runs in the simulator
        v.errors.append(f"cannot re-run {info['scenario']}: {e}")
        if job.inline:
            m.error = f"cannot run {info['scenario']}: {e}"
            job.measured.append(m)
        return
    if covered is not None:
        covered.record(m)
        if not r.ok:
            m.error = r.failure_message()
        if r.trace_dir.is_dir():
            measure_trace(m, r.trace_dir)
        m.elapsed_s = time.monotonic() - cov_started
        job.measured.append(m)
    if r.error:
        v.errors.append(f"re-run failed: {r.error}")
    if r.trace_dir.is_dir():
        job.comparisons.append(
            Comparison(n, RERUN, str(g.directory.resolve()), str(r.trace_dir.resolve()), messages=True)
        )


def _diff_against_goldens(
    job: _Verification, verdicts: list[GoldenVerdict], goldens: dict[str, Golden], spark: Any, master: str | None
) -> str:
    """Diff every queued replay and re-run against its golden with Spark, fill in the verdicts and return
    the Spark master used ("" when nothing was compared)."""
    if not job.comparisons:
        return str(spark.sparkContext.master) if spark is not None else ""
    job.say(f"diffing {len(job.comparisons)} runs against their goldens with Spark")
    # getOrCreate hands back a session already running in this process: not ours to stop.
    own_spark = spark is None and not spark_session_is_running()
    spark = spark or spark_session(master)
    try:
        positions = diff_positions(spark, job.comparisons)
        messages = diff_messages(spark, job.comparisons)
        for v in verdicts:
            if v.name not in goldens:
                continue
            v.replay = positions.get((v.name, REPLAY))
            v.rerun = positions.get((v.name, RERUN))
            v.messages = messages.get(v.name)
            describe = _entry_describer(goldens[v.name])
            for d in (v.replay, v.rerun):
                if d is not None and d.first is not None:
                    d.first["entry"] = describe(d.first["log_position"])
        return str(spark.sparkContext.master)
    finally:
        if own_spark:
            spark.stop()  # before the scratch runs go: no straggling task may still read them


def print_report(report: VerifyReport, console: Console | None = None) -> None:
    """The verdict table, then a few lines on every failing golden."""
    console = console or Console(width=max(Console().width, 120))
    console.print(report.table())
    for line in report.details():  # not wrapped: paths and digests stay whole, to copy and grep
        console.print(line, highlight=False, markup=False, soft_wrap=True)
