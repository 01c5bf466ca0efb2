"""``golden coverage``: what each golden (or candidate run) exercises of the protocol and the service API.

A simulator golden is measured by re-running its recipe in the simulator under coverage.py (over
``clusterlab.core`` and the sample services) and reading the run's trace:

- **election states** and **transitions**: the ``events`` table's ``election_state`` rows, against
  ``ElectionState`` and the transition table ``TRANSITIONS`` (core/consensus/election.py);
- **message types**: ``messages.msg_type`` against every codec message (core/codec/registry.py);
- **log entry types**: ``applied.entry_type`` against the service agent's ``EntryType``;
- **service callbacks**: every ``ClusteredService`` callback, from the first body line of each
  sample service's implementation (coverage.py says whether it ran) and from the entries applied
  (a ``Timer`` entry is an ``on_timer_event``; a ``Snapshot`` row an ``on_start`` from a snapshot);
- **faults**: the nemeses the run applied (``chaos_apply`` events; a disk fault with its kind), so
  that each kind of fault, and the protocol path it drives, has a golden (for choosing the set);
- **core lines**: every line of ``clusterlab.core`` executed (for choosing the set, not required).

A real-process golden has no events or messages; it is measured by replaying its committed log
under coverage.py (entry types, callbacks, lines). The ``MUST_COVER`` categories are what the set as
a whole must exercise (``clusterlab golden coverage`` exits 1 otherwise); ``UNREACHABLE`` lists
what this implementation can never produce, with the reason, so it is shown but not required.

:func:`greedy_cover` picks, from measured candidates, the smallest set covering the most: each
round the candidate adding the most uncovered must-cover items, then message types and kinds of fault,
then core lines.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import clusterlab.core
import clusterlab.harness.services
import coverage
import pyarrow.compute as pc
from clusterlab.chaos.runner import run_scenario
from clusterlab.core.codec.registry import REGISTRY
from clusterlab.core.consensus.context import ElectionState
from clusterlab.core.consensus.election import TRANSITIONS
from clusterlab.core.service.agent import EntryType
from clusterlab.core.service.api import ClusteredService
from clusterlab.golden.store import TRACES, Golden, GoldenError, Recipe, golden_names, load_golden
from clusterlab.harness.replay import replay_log
from clusterlab.harness.services import SERVICES, service_factory
from clusterlab.harness.trace import open_run
from rich.console import Console
from rich.table import Table

CATEGORIES = ("election_state", "transition", "entry_type", "callback", "message", "fault")
MUST_COVER = ("election_state", "transition", "entry_type", "callback")
SNAPSHOT_START = "on_start(snapshot)"  # on_start handed a snapshot image: recovery, not a fresh start
CORE_DIR = Path(clusterlab.core.__file__).resolve().parent
SERVICES_DIR = Path(clusterlab.harness.services.__file__).resolve().parent
# What this implementation never produces, with why: shown in the report, not required.
UNREACHABLE: dict[tuple[str, str], str] = {
    ("entry_type", EntryType.MEMBERSHIP_CHANGE.value): "deprecated in Aeron: applied as a no-op, never appended",
}
# A log entry applied by the service agent is one call of this callback.
_ENTRY_CALLBACKS = {
    EntryType.SESSION_MESSAGE.value: "on_session_message",
    EntryType.SESSION_OPEN.value: "on_session_open",
    EntryType.SESSION_CLOSE.value: "on_session_close",
    EntryType.TIMER.value: "on_timer_event",
    EntryType.NEW_LEADERSHIP_TERM.value: "on_new_leadership_term_event",
    EntryType.SNAPSHOT.value: SNAPSHOT_START,
}


def callbacks() -> list[str]:
    """Every ``ClusteredService`` callback (its ``on_*`` methods), and on_start from a snapshot."""
    names = sorted(n for n in dir(ClusteredService) if n.startswith("on_"))
    return [*names, SNAPSHOT_START]


def universe() -> dict[str, set[str]]:
    """Everything there is to exercise, by category (unreachable items included)."""
    return {
        "election_state": {s.name for s in ElectionState},
        "transition": {f"{a.name}->{b.name}" for a, b in TRANSITIONS},
        "entry_type": {e.value for e in EntryType if e is not EntryType.SNAPSHOT},
        "callback": set(callbacks()),
        "message": {cls.__name__ for cls in REGISTRY.values()},
        "fault": set(),  # what a run injected (its chaos_apply events): open-ended, never required
    }


def required() -> dict[str, set[str]]:
    """The must-cover items: the MUST_COVER categories minus UNREACHABLE."""
    u = universe()
    return {c: {i for i in u[c] if (c, i) not in UNREACHABLE} for c in MUST_COVER}


def callback_lines() -> dict[tuple[str, int], str]:
    """(file, line) -> callback: the first statement of every sample service's ``on_*`` callback
    (a line coverage.py saw executed means the callback was called)."""
    wanted = set(callbacks())
    out: dict[tuple[str, int], str] = {}
    for path in sorted(SERVICES_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef) and node.name in wanted and node.body:
                body = node.body
                if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1:
                    body = body[1:]  # skip the docstring
                out[(str(path), body[0].lineno)] = node.name
    return out


@dataclass
class Measurement:
    """What one run exercised."""

    name: str
    items: dict[str, set[str]] = field(default_factory=lambda: {c: set() for c in CATEGORIES})
    lines: set[str] = field(default_factory=set)  # "core/relative/path.py:LINE"
    elapsed_s: float = 0.0
    error: str | None = None
    recipe: Recipe | None = None
    messages: int = 0  # message rows recorded: the cost of re-running and diffing it (load-independent)

    def add(self, category: str, values: Iterable[str]) -> None:
        self.items[category].update(v for v in values if v)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 2),
            "message_rows": self.messages,
            "core_lines": len(self.lines),
            **{c: sorted(self.items[c]) for c in CATEGORIES},
        }


class Covered:
    """coverage.py over the core and the sample services while a block runs."""

    def __init__(self) -> None:
        self.cov = coverage.Coverage(data_file=None, source=[str(CORE_DIR), str(SERVICES_DIR)], branch=False)

    def __enter__(self) -> Covered:
        self.cov.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cov.stop()

    def record(self, m: Measurement) -> None:
        data = self.cov.get_data()
        marks = callback_lines()
        core = str(CORE_DIR)
        for f in data.measured_files():
            lines = data.lines(f) or []
            if f.startswith(core):
                rel = "core" + f[len(core) :]
                m.lines.update(f"{rel}:{n}" for n in lines)
            for n in lines:
                cb = marks.get((f, n))
                if cb is not None:
                    m.items["callback"].add(cb)


def measure_trace(m: Measurement, trace_dir: Path) -> None:
    """Add what the run in ``trace_dir`` shows: election states and transitions, message types, entry types."""
    run = open_run(trace_dir)
    ev = run.events
    if ev.num_rows:
        for detail in ev.filter(pc.equal(ev.column("kind"), "chaos_apply")).column("detail").to_pylist():
            d = json.loads(detail or "{}")
            for part in [d, *d.get("parts", [])]:  # a Together names its parts
                if isinstance(part, dict):
                    name = str(part.get("nemesis", "?"))
                    m.add("fault", [f"{name}:{part['fault']}" if part.get("fault") else name])
        rows = ev.filter(pc.equal(ev.column("kind"), "election_state")).column("detail").to_pylist()
        for detail in rows:
            d = json.loads(detail or "{}")
            src, dst = d.get("from"), d.get("to")
            src = ElectionState(src).name if isinstance(src, int) else src
            dst = ElectionState(dst).name if isinstance(dst, int) else dst
            if dst:
                m.add("election_state", [dst])
            if src and dst:
                m.add("transition", [f"{src}->{dst}"])
    m.messages = run.messages.num_rows
    if run.messages.num_rows:
        m.add("message", pc.unique(run.messages.column("msg_type")).to_pylist())
    entry_types = set(pc.unique(run.applied.column("entry_type")).to_pylist()) if run.applied.num_rows else set()
    m.add("entry_type", (e for e in entry_types if e != EntryType.SNAPSHOT.value))
    m.add("callback", (_ENTRY_CALLBACKS[e] for e in entry_types if e in _ENTRY_CALLBACKS))


def _measure_recipe_here(recipe: Recipe, work: Path, keep: bool = False) -> tuple[Measurement, Path | None]:
    """:func:`measure_recipe` in this interpreter."""
    m = Measurement(recipe.name, recipe=recipe)
    if recipe.driver != "sim":
        m.error = "only simulator recipes can be re-run to measure"
        return m, None
    run_dir = work / f"measure-{recipe.name}"
    started = time.monotonic()
    try:
        with Covered() as cov:
            r = run_scenario(
                recipe.scenario,
                seed=recipe.seed,
                members=recipe.members,
                duration_s=recipe.duration_s,
                sim=True,
                directory=run_dir,
                clients=1,
                service=recipe.service,
                workload=recipe.workload,
            )
        cov.record(m)
        if not r.ok:
            m.error = r.failure_message()
        if r.trace_dir.is_dir():
            measure_trace(m, r.trace_dir)
    except (KeyError, ValueError) as e:
        m.error = f"cannot run {recipe.scenario}: {e}"
    m.elapsed_s = time.monotonic() - started
    if keep and m.error is None:
        return m, run_dir / "trace"
    shutil.rmtree(run_dir, ignore_errors=True)
    return m, None


def _measure_golden_here(name: str, traces: Path = TRACES, work: Path | None = None) -> Measurement:
    """:func:`measure_golden` in this interpreter."""
    g = load_golden(name, traces)
    recipe = recipe_of(g)
    if g.driver == "sim":
        scratch = work or Path(tempfile.mkdtemp(prefix="clusterlab-golden-coverage-"))
        try:
            return _measure_recipe_here(recipe, scratch)[0]
        finally:
            if work is None:
                shutil.rmtree(scratch, ignore_errors=True)
    m = Measurement(name, recipe=recipe)
    started = time.monotonic()
    try:
        factory = SERVICES.get(recipe.service) or service_factory(recipe.service)
    except (KeyError, ImportError, AttributeError) as e:
        m.error = f"unknown service {recipe.service!r}: {e}"
        return m
    with Covered() as cov:
        replay = replay_log(g.log.to_pylist(), factory)
    cov.record(m)
    if replay.error:
        m.error = f"replay stopped: {replay.error}"
    measure_log(m, g)
    m.elapsed_s = time.monotonic() - started
    return m


# coverage.py traces Python frames: a module compiled with mypyc (setup.py COMPILED: the consensus
# module, the service agent, the KV service, ...) runs none, so its lines would count as never run and
# its callbacks as never called. Where the compiled build runs, each measurement runs in a child
# interpreter that imports those modules' sources (CLUSTERLAB_NO_MYPYC=1, clusterlab/compiled.py):
# the same behaviour (tests/unit/test_compiled_*.py), every line visible.
SOURCE_ENV = "CLUSTERLAB_NO_MYPYC"
CHILD_TIMEOUT_S = 900.0


def sources_run_here() -> bool:
    """Whether this interpreter runs the compiled modules' sources (coverage.py sees every line)."""
    from clusterlab import compiled

    return compiled.BUILD != "compiled"


def measure_recipe(recipe: Recipe, work: Path, keep: bool = False) -> tuple[Measurement, Path | None]:
    """Run a simulator recipe under coverage.py and measure it; with ``keep`` the run's trace stays
    in ``work`` and its path is returned (to bless it), else it is removed."""
    if sources_run_here():
        return _measure_recipe_here(recipe, work, keep)
    request = {"recipe": dataclasses.asdict(recipe), "work": str(work), "keep": keep}
    m, trace = _measure_in_child(recipe.name, request, work)
    m.recipe = recipe
    return m, trace


def measure_golden(name: str, traces: Path = TRACES, work: Path | None = None) -> Measurement:
    """Measure golden ``name``: a simulator golden by re-running its recipe, a real one by replaying
    its committed log (both under coverage.py, over the sources of the compiled modules)."""
    if sources_run_here():
        return _measure_golden_here(name, traces, work)
    recipe = recipe_of(load_golden(name, traces))  # an unknown golden: GoldenError here, as in this interpreter
    scratch = work or Path(tempfile.mkdtemp(prefix="clusterlab-golden-coverage-"))
    try:
        m, _ = _measure_in_child(name, {"golden": name, "traces": str(traces), "work": str(scratch)}, scratch)
    finally:
        if work is None:
            shutil.rmtree(scratch, ignore_errors=True)
    m.recipe = recipe
    return m


def _measure_in_child(name: str, request: dict[str, Any], work: Path) -> tuple[Measurement, Path | None]:
    """One measurement in a child interpreter running the compiled modules' sources (see above)."""
    work.mkdir(parents=True, exist_ok=True)
    result = Path(tempfile.mkstemp(prefix=f"measure-{name}-", suffix=".json", dir=work)[1])
    request["result"] = str(result)
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "clusterlab.golden.coverage", json.dumps(request)],
            env={**os.environ, SOURCE_ENV: "1"},
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            error = f"measuring in a child interpreter failed (exit {proc.returncode}): {tail}"
            return Measurement(name, error=error), None
        data = json.loads(result.read_text())
    except subprocess.TimeoutExpired:
        return Measurement(name, error=f"measuring in a child interpreter took over {CHILD_TIMEOUT_S:g} s"), None
    except (OSError, ValueError) as e:
        return Measurement(name, error=f"measuring in a child interpreter gave no result: {e}"), None
    finally:
        result.unlink(missing_ok=True)
    m = Measurement(
        name,
        items={c: set(data["items"].get(c, [])) for c in CATEGORIES},
        lines=set(data["lines"]),
        elapsed_s=time.monotonic() - started,
        error=data["error"],
        messages=data["messages"],
    )
    return m, None if data["trace"] is None else Path(data["trace"])


def _child_main(request_json: str) -> int:
    """The child's side of :func:`_measure_in_child`: measure here, write the result as JSON."""
    request = json.loads(request_json)
    if "recipe" in request:
        m, trace = _measure_recipe_here(Recipe(**request["recipe"]), Path(request["work"]), request["keep"])
    else:
        m, trace = _measure_golden_here(request["golden"], Path(request["traces"]), Path(request["work"])), None
    Path(request["result"]).write_text(
        json.dumps(
            {
                "items": {c: sorted(v) for c, v in m.items.items()},
                "lines": sorted(m.lines),
                "error": m.error,
                "messages": m.messages,
                "trace": None if trace is None else str(trace),
            }
        )
    )
    return 0


def measure_log(m: Measurement, g: Golden) -> None:
    """Add the log entry types of golden ``g``'s committed log, and the callbacks applying them calls."""
    types = set(g.log.column("entry_type").to_pylist())
    m.add("entry_type", (t for t in types if t != EntryType.SNAPSHOT.value))
    m.add("callback", (_ENTRY_CALLBACKS[t] for t in types if t in _ENTRY_CALLBACKS))


def recipe_of(g: Golden) -> Recipe:
    """The recipe golden ``g`` was recorded from (its run.json)."""
    info = g.info
    return Recipe(
        g.name,
        g.driver,
        info["scenario"],
        int(info["seed"]),
        int(info["members"]),
        info.get("duration_s"),
        info.get("summary", ""),
        str(info.get("service", "kv")),
        info.get("workload"),
    )


def _gain(m: Measurement, covered: dict[str, set[str]], lines: set[str], must: dict[str, set[str]]) -> tuple[int, ...]:
    new_must = sum(len((m.items[c] & must[c]) - covered[c]) for c in MUST_COVER)
    new_messages = len(m.items["message"] - covered["message"]) + len(m.items["fault"] - covered["fault"])
    return (new_must, new_messages, len(m.lines - lines))


def greedy_cover(
    measurements: Sequence[Measurement],
    *,
    min_lines: int = 10,
    keep: Sequence[str] = (),
    budget_messages: int | None = None,
) -> list[Measurement]:
    """The greedy set cover: start from ``keep`` (names always in the set), then repeatedly add the
    measurement adding the most uncovered must-cover items, then message types and kinds of fault,
    then core lines (ties: the cheaper run); stop when the best adds no item and fewer than ``min_lines`` lines.
    A run adding no must-cover item that would take the set's message rows (what re-running and
    diffing costs, independent of the machine's load) past ``budget_messages`` is passed over."""
    must = required()
    pool = [m for m in measurements if m.error is None]
    chosen = [m for m in pool if m.name in keep]
    covered: dict[str, set[str]] = {c: set() for c in CATEGORIES}
    lines: set[str] = set()
    for m in chosen:
        for c in CATEGORIES:
            covered[c] |= m.items[c]
        lines |= m.lines
    rest = [m for m in pool if m.name not in keep]
    spent = sum(m.messages for m in chosen)
    budget = float("inf") if budget_messages is None else budget_messages
    while rest:
        best = max(rest, key=lambda m: (*_gain(m, covered, lines, must), -m.messages, m.name))
        new_must, new_messages, new_lines = _gain(best, covered, lines, must)
        if new_must == 0 and spent + best.messages > budget:
            rest.remove(best)  # over the budget for what it adds
            continue
        if new_must == 0 and new_messages == 0 and new_lines < min_lines:
            break
        spent += best.messages
        chosen.append(best)
        rest.remove(best)
        for c in CATEGORIES:
            covered[c] |= best.items[c]
        lines |= best.lines
    return chosen


@dataclass
class CoverageReport:
    """Every golden's measurement and what the set leaves uncovered."""

    measurements: list[Measurement]
    elapsed_s: float = 0.0

    def union(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {c: set() for c in CATEGORIES}
        for m in self.measurements:
            for c in CATEGORIES:
                out[c] |= m.items[c]
        return out

    def lines(self) -> set[str]:
        return set().union(*(m.lines for m in self.measurements)) if self.measurements else set()

    def missing(self) -> dict[str, list[str]]:
        """Per category, what no golden exercises (must-cover and message types; unreachable excluded)."""
        u, got = universe(), self.union()
        return {c: sorted(i for i in u[c] - got[c] if (c, i) not in UNREACHABLE) for c in CATEGORIES}

    def missing_required(self) -> dict[str, list[str]]:
        got, must = self.union(), required()
        return {c: sorted(must[c] - got[c]) for c in MUST_COVER if must[c] - got[c]}

    @property
    def ok(self) -> bool:
        return not self.missing_required() and all(m.error is None for m in self.measurements)

    def to_json(self) -> dict[str, Any]:
        u, got = universe(), self.union()
        return {
            "ok": self.ok,
            "elapsed_s": round(self.elapsed_s, 2),
            "goldens": [m.to_json() for m in self.measurements],
            "set": {
                c: {"covered": sorted(got[c] & u[c]), "of": len(u[c]), "outside": sorted(got[c] - u[c])}
                for c in CATEGORIES
            },
            "core_lines": len(self.lines()),
            "not_exercised": self.missing(),
            "missing_required": self.missing_required(),
            "unreachable": [{"category": c, "item": i, "why": why} for (c, i), why in UNREACHABLE.items()],
        }


def coverage_report(
    names: Sequence[str] | None = None,
    *,
    traces: Path = TRACES,
    on_progress: Callable[[str], None] | None = None,
) -> CoverageReport:
    """Measure goldens ``names`` (default: all). GoldenError for an unknown name."""
    started = time.monotonic()
    say = on_progress or (lambda _line: None)
    wanted = list(names) if names else golden_names(traces)
    if not wanted:
        raise GoldenError(f"no goldens in {traces}")
    known = golden_names(traces)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise GoldenError(f"no golden named {', '.join(unknown)} in {traces} (known: {', '.join(known) or 'none'})")
    out = []
    with tempfile.TemporaryDirectory(prefix="clusterlab-golden-coverage-") as work:
        for n in wanted:
            say(f"{n}: measuring")
            try:
                out.append(measure_golden(n, traces, Path(work)))
            except GoldenError as e:
                out.append(Measurement(n, error=str(e)))
    return CoverageReport(out, time.monotonic() - started)


def candidate_report(
    names: Sequence[str] | None = None, *, on_progress: Callable[[str], None] | None = None
) -> CoverageReport:
    """Measure the candidate runs (golden/candidates.py; ``names``: only these) as if each were a golden."""
    from clusterlab.golden.candidates import candidates

    started = time.monotonic()
    say = on_progress or (lambda _line: None)
    pool = candidates()
    unknown = [n for n in names or () if n not in {r.name for r in pool}]
    if unknown:
        raise GoldenError(f"no candidate named {', '.join(unknown)} (known: {', '.join(r.name for r in pool)})")
    out = []
    with tempfile.TemporaryDirectory(prefix="clusterlab-golden-coverage-") as work:
        for r in pool:
            if names and r.name not in names:
                continue
            say(f"{r.name}: measuring")
            out.append(measure_recipe(r, Path(work))[0])
    return CoverageReport(out, time.monotonic() - started)


def _count(items: set[str], of: set[str]) -> str:
    """``covered/universe``, or just how many for an open-ended category (faults)."""
    return f"{len(items & of)}/{len(of)}" if of else str(len(items))


def print_coverage(report: CoverageReport, console: Console | None = None) -> None:
    """A table per golden (counts per category), one for the set, and what no golden exercises."""
    console = console or Console(width=max(Console().width, 120))
    u, must = universe(), required()
    t = Table(title="golden coverage: per golden")
    t.add_column("golden", no_wrap=True)
    for c in CATEGORIES:
        t.add_column(c.replace("_", " "), justify="right")
    t.add_column("core lines", justify="right")
    t.add_column("s", justify="right")
    t.add_column("error")
    for m in report.measurements:
        t.add_row(
            m.name,
            *(_count(m.items[c], u[c]) for c in CATEGORIES),
            str(len(m.lines)),
            f"{m.elapsed_s:.1f}",
            "" if m.error is None else f"[red]{m.error.splitlines()[0]}[/]",
        )
    console.print(t)
    got = report.union()
    s = Table(title=f"golden coverage: the set ({len(report.measurements)} goldens): {'PASS' if report.ok else 'FAIL'}")
    for col in ("category", "covered", "required", "not exercised by any golden"):
        s.add_column(col)
    missing = report.missing()
    for c in CATEGORIES:
        req = f"{len(got[c] & must[c])}/{len(must[c])}" if c in must else "-"
        miss = ", ".join(missing[c]) or "-"
        style = "red" if c in must and missing[c] else ""
        s.add_row(c.replace("_", " "), _count(got[c], u[c]), req, f"[{style}]{miss}[/]" if style else miss)
        extra = sorted(got[c] - u[c])
        if extra and u[c]:  # e.g. X->INIT: an election error, which the table allows from any state
            s.add_row("", f"+{len(extra)}", "", "outside the table: " + ", ".join(extra))
    s.add_row("core lines", str(len(report.lines())), "-", "")
    console.print(s)
    for (c, i), why in UNREACHABLE.items():
        console.print(f"not required: {c} {i}: {why}", highlight=False)


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1]))
