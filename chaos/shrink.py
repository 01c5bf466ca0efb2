"""Shrinking a failing run: delta debugging over its schedule (as Hypothesis shrinks examples) to a
minimal one that still fails the same check — fewer faults, then shorter phases, then fewer clients
and ops — printed as a pasteable pytest test.

A candidate is the run's explicit schedule (``clusterlab.chaos.schedule.schedule_spec``) with the
same seed, size and planted bugs, run in the simulator; it "still fails" when its failure tokens
(:func:`failure_tokens`: the error class and each failed trace check) hold the target token. Every
candidate is deterministic (same steps and seed, same run), so the result replays exactly.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterlab.chaos.runner import CHAOS_JSON, DEFAULT_CLIENTS, RunResult, check_service
from clusterlab.chaos.scenarios import scenario as find_scenario
from clusterlab.chaos.sweep import guarded_run

MIN_PHASE_S = 0.05  # a phase is not shortened below this
SIM_DEFAULT_RATE = 100.0  # the simulator workload's default ops per second (chaos.workload)
PLANTED = ("fault_ack_before_append", "fault_stale_read")  # run_scenario's planted-bug switches


def planted(run: dict[str, Any]) -> dict[str, Any]:
    """run_scenario's keywords for the planted bugs a run (its chaos.json) had: the switches and mutants."""
    bug: dict[str, Any] = {k: True for k in PLANTED if run.get(k)}
    if run.get("mutants"):
        bug["mutants"] = list(run["mutants"])
    return bug


def checked(run: dict[str, Any]) -> dict[str, Any]:
    """run_scenario's keywords for the checks a shrink's runs get, as ``clusterlab run`` gives them:
    the determinism checks, and the tripwires unless the run had them off."""
    return {"determinism": True, "tripwire": bool(run.get("tripwire", True))}


def failure_tokens(result: RunResult) -> set[str]:
    """What a run failed, as tokens: its error class (``SafetyViolation``, ``ChaosTimeout``…) and each
    failed trace check (``durability``…); empty for a passing run."""
    if result.ok:
        return set()
    tokens = set(result.verdict.failed()) if result.verdict is not None else {"no verdict"}
    if result.error:
        tokens.add(result.error.split(":", 1)[0])
    return tokens


def default_target(tokens: set[str]) -> str:
    """The token a shrink keeps: a failed trace check (the most precise), else the error class."""
    checks = sorted(t for t in tokens if t[:1].islower() and t != "no verdict")  # error classes are capitalised
    return checks[0] if checks else sorted(tokens)[0]


@dataclass
class Candidate:
    """One schedule to try: steps and workload knobs (the seed, size and bugs are the run's)."""

    steps: list[dict[str, Any]]
    clients: int
    rate: float

    @property
    def faults(self) -> int:
        return sum(1 for s in self.steps if "nemesis" in s)

    def seconds(self) -> float:
        return sum(float(s.get("quiet", s.get("seconds", 0.0))) for s in self.steps)


@dataclass
class ShrinkResult:
    """The original run's description, the minimal candidate found and how the search went."""

    run: dict[str, Any]  # the failing run's chaos.json
    target: str
    original: Candidate
    minimal: Candidate
    runs: int = 0  # candidates run
    log: list[str] = field(default_factory=list)
    minimal_dir: Path | None = None  # the minimal candidate's run (trace kept)

    def bug_kwargs(self) -> dict[str, Any]:
        return planted(self.run)

    def run_kwargs(self) -> dict[str, Any]:
        """run_scenario's arguments that replay the minimal schedule (without the planted bug)."""
        kwargs: dict[str, Any] = {"members": self.run["members"], "schedule": self.minimal.steps}
        if self.run.get("service", "kv") != "kv":
            kwargs["service"] = self.run["service"]
        if self.run.get("workload"):
            kwargs["workload"] = self.run["workload"]
        if self.minimal.clients != DEFAULT_CLIENTS:
            kwargs["clients"] = self.minimal.clients
        if self.minimal.rate != SIM_DEFAULT_RATE:
            kwargs["rate"] = self.minimal.rate
        if self.run.get("settle_s", 30.0) != 30.0:
            kwargs["settle_s"] = self.run["settle_s"]
        return kwargs | checked(self.run)

    def pytest_source(self) -> str:
        """A pasteable pytest module: the minimal schedule passes without the planted bug and fails
        the target check with it."""
        name = f"{self.run['scenario']}_n{self.run['members']}_seed{self.run['seed']}".replace("-", "_")
        kwargs = ",\n        ".join(f"{k}={_py(v)}" for k, v in self.run_kwargs().items() if k != "schedule")
        steps = ",\n    ".join(json.dumps(s) for s in self.minimal.steps)
        bug = self.bug_kwargs()
        lines = [
            f'"""Shrunk by clusterlab shrink from a failing {self.run["scenario"]} run (seed {self.run["seed"]},'
            f" {self.run['members']} members):",
            f"{self.original.faults} faults -> {self.minimal.faults}, {self.original.seconds():.1f} s ->"
            f" {self.minimal.seconds():.1f} s of schedule; {'with the planted bug ' if self.bug_kwargs() else ''}"
            f"it fails {self.target}."
            '"""',
            "",
            "from pathlib import Path",
            "",
            "from clusterlab.chaos.runner import RunResult",
            "from clusterlab.chaos.scenarios import scenario",
            *(["from clusterlab.chaos.shrink import failure_tokens"] if bug else []),
            "from clusterlab.chaos.sweep import guarded_run",
            "",
            f"STEPS = [\n    {steps},\n]" if steps else "STEPS: list[dict] = []",
            *(
                [f"BUG = {json.dumps(bug).replace('true', 'True')}  # the planted bug of the failing run"]
                if bug
                else []
            ),
            "",
            "",
            "def _run(tmp_path: Path, **bug: bool) -> RunResult:",
            '    """The simulator run (a crash is its error, not an exception)."""',
            "    return guarded_run(",
            f"        scenario({_py(self.run['scenario'])}),",
            f"        {self.run['seed']},",
            "        schedule=STEPS,",
            f"        {kwargs},",
            "        directory=tmp_path,",
            "        **bug,",
            "    )",
            "",
            "",
            f"def test_{name}_shrunk_passes(tmp_path: Path) -> None:",
            *([] if bug else [f'    """Fails ({self.target}) until the service is fixed: a regression test."""']),
            "    result = _run(tmp_path)",
            "    assert result.ok, result.failure_message()",
        ]
        if bug:
            lines += [
                "",
                "",
                f"def test_{name}_shrunk_catches_the_bug(tmp_path: Path) -> None:",
                "    result = _run(tmp_path, **BUG)",
                f"    assert {_py(self.target)} in failure_tokens(result), result.failure_message()",
            ]
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "runs": self.runs,
            "faults": [self.original.faults, self.minimal.faults],
            "seconds": [round(self.original.seconds(), 3), round(self.minimal.seconds(), 3)],
            "clients": [self.original.clients, self.minimal.clients],
            "rate": [self.original.rate, self.minimal.rate],
            "steps": self.minimal.steps,
            "run_kwargs": self.run_kwargs() | self.bug_kwargs(),
            "minimal_dir": str(self.minimal_dir) if self.minimal_dir else None,
            "log": self.log,
        }


def _py(value: Any) -> str:
    """A Python literal in the project's style (double-quoted strings)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


class ShrinkError(ValueError):
    """The run cannot be shrunk (not a failing simulator run, or it does not fail again)."""


def find_summary(path: Path | str) -> Path:
    """The chaos.json describing the run at ``path``: the file itself, in the directory (a sweep's run,
    a ``clusterlab run`` directory, a pytest --trace-dir run) or beside the trace directory given (a
    ``clusterlab run`` directory's ``trace/``). ShrinkError naming what ``path`` is otherwise."""
    p = Path(path)
    if p.is_file():
        return p
    if not p.is_dir():
        raise ShrinkError(f"{path}: no such run directory")
    for candidate in (p / CHAOS_JSON, p.parent / CHAOS_JSON if (p / "run.json").is_file() else None):
        if candidate is not None and candidate.is_file():
            return candidate
    what = "a trace (run.json) without" if (p / "run.json").is_file() else "no"
    raise ShrinkError(
        f"{path}: {what} {CHAOS_JSON} (the run's scenario, seed and schedule); give the directory of a "
        "clusterlab run, a clusterlab sweep failure or a pytest --trace-dir chaos run"
    )


def load_run(path: Path | str) -> dict[str, Any]:
    """A run's chaos.json (see :func:`find_summary`), checked to hold what shrinking replays: scenario,
    seed, size and schedule steps of a simulator run."""
    meta = find_summary(path)
    try:
        run = json.loads(meta.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ShrinkError(f"{meta} is not a readable run description ({e})") from None
    if not isinstance(run, dict):
        raise ShrinkError(f"{meta} is not a run description (a JSON object)")
    missing = [k for k in ("scenario", "seed", "members", "steps") if k not in run]
    if missing:
        raise ShrinkError(f"{meta} lacks {', '.join(missing)}: it does not describe a chaos run")
    if not run.get("sim"):
        raise ShrinkError(f"{path} is a real-process run; shrinking replays it many times, in the simulator only")
    try:  # a user's service and workload re-run every candidate: importable here, or one line now
        check_service(str(run.get("service", "kv")), run.get("workload"))
    except ValueError as e:
        raise ShrinkError(f"{path}: {e}") from None
    return run


def _units(steps: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The leading quiet steps, then one unit per fault: the fault and the quiet steps after it."""
    head: list[dict[str, Any]] = []
    units: list[list[dict[str, Any]]] = []
    for s in steps:
        if "nemesis" in s:
            units.append([s])
        elif units:
            units[-1].append(s)
        else:
            head.append(s)
    return head, units


def shrink_run(
    path: Path | str,
    *,
    target: str | None = None,
    max_runs: int = 80,
    directory: Path | str | None = None,
    on_try: Callable[[str, Candidate, bool], None] | None = None,
) -> ShrinkResult:
    """Shrink the failing run at ``path`` (see :func:`load_run`) keeping ``target`` (a failure token;
    default :func:`default_target` of the run's first replay) failing; at most ``max_runs`` candidate
    runs. ``on_try(phase, candidate, still_fails)`` after each. ShrinkError when it cannot."""
    run = load_run(path)
    root = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="clusterlab-shrink-"))
    root.mkdir(parents=True, exist_ok=True)
    bug = planted(run)
    rate = run.get("rate") or SIM_DEFAULT_RATE
    original = Candidate(list(run["steps"]), int(run.get("clients", DEFAULT_CLIENTS)), float(rate))
    state = ShrinkResult(run, target or "", original, original)
    best_dir: list[Path] = []

    def attempt(phase: str, c: Candidate) -> tuple[bool, set[str]]:
        if state.runs >= max_runs:
            return False, set()
        state.runs += 1
        work = root / f"try{state.runs:03d}"
        result = guarded_run(
            find_scenario(run["scenario"]),
            run["seed"],
            members=run["members"],
            directory=work,
            schedule=c.steps,
            service=run.get("service", "kv"),
            workload=run.get("workload"),
            clients=c.clients,
            rate=c.rate,
            settle_s=float(run.get("settle_s", 30.0)),
            **checked(run),
            **bug,
        )
        tokens = failure_tokens(result)
        fails = state.target in tokens if state.target else bool(tokens)
        state.log.append(
            f"{phase}: {c.faults} faults, {c.seconds():.2f} s, {c.clients} clients, rate {c.rate:g} -> "
            + ("fails " + ", ".join(sorted(tokens)) if tokens else "passes")
        )
        if fails:
            for old in best_dir:
                shutil.rmtree(old, ignore_errors=True)
            best_dir[:] = [work]
            state.minimal = c
        else:
            shutil.rmtree(work, ignore_errors=True)
        if on_try:
            on_try(phase, c, fails)
        return fails, tokens

    _replay_original(state, attempt, path, target)
    _shrink_faults(state, attempt)
    _shrink_phases(state, attempt)
    _shrink_workload(state, attempt)
    state.minimal_dir = best_dir[0] if best_dir else None
    return state


Attempt = Callable[[str, Candidate], tuple[bool, set[str]]]


def _replay_original(state: ShrinkResult, attempt: Attempt, path: Path | str, target: str | None) -> None:
    """Replays the run from its recorded steps, which must fail again, and settles the target: ``target``,
    which the replay must fail, or by default the :func:`default_target` of the replay's failures."""
    state.target = target or ""
    _, tokens = attempt("replay", state.original)
    if not tokens:
        raise ShrinkError(f"{path}: the recorded schedule replayed passes; nothing to shrink")
    if target is None:
        state.target = default_target(tokens)
    elif target not in tokens:
        raise ShrinkError(f"{path}: the replay fails {', '.join(sorted(tokens))}, not {target}")
    state.log[-1] += f" (target: {state.target})"


def _shrink_faults(state: ShrinkResult, attempt: Attempt) -> None:
    """ddmin over the faults (each with the quiet after it): try every fault gone, then drop ever smaller chunks."""
    head, units = _units(state.minimal.steps)
    c = state.minimal

    def with_units(kept: list[list[dict[str, Any]]]) -> Candidate:
        return Candidate(head + [s for u in kept for s in u], c.clients, c.rate)

    if units and attempt("no faults", with_units([]))[0]:
        return
    n = 2
    while len(units) >= 2:
        chunk = max(1, len(units) // n)
        reduced = False
        for start in range(0, len(units), chunk):
            rest = units[:start] + units[start + chunk :]
            if attempt(f"drop faults {start + 1}-{min(start + chunk, len(units))}", with_units(rest))[0]:
                units, reduced = rest, True
                n = max(n - 1, 2)
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(units), n * 2)


def _shrink_phases(state: ShrinkResult, attempt: Attempt) -> None:
    """Drop quiet phases, halve each phase while it still fails, then round the phases to 10 ms (else
    to 1 ms: a halved phase carries float noise such as 0.22499999999999998)."""
    i = 0
    while i < len(state.minimal.steps):
        steps = state.minimal.steps
        if "quiet" in steps[i] and attempt(f"drop quiet {i + 1}", _with(state.minimal, steps[:i] + steps[i + 1 :]))[0]:
            continue
        i += 1
    for i in range(len(state.minimal.steps)):
        while True:
            step = dict(state.minimal.steps[i])
            key = "quiet" if "quiet" in step else "seconds"
            if step[key] / 2 < MIN_PHASE_S:
                break
            step[key] = step[key] / 2
            steps = [*state.minimal.steps[:i], step, *state.minimal.steps[i + 1 :]]
            if not attempt(f"halve step {i + 1}", _with(state.minimal, steps))[0]:
                break
    for digits, unit in ((2, "10 ms"), (3, "1 ms")):
        steps = state.minimal.steps
        rounded = [{k: round(v, digits) if k in ("quiet", "seconds") else v for k, v in s.items()} for s in steps]
        if rounded == steps or attempt(f"round phases to {unit}", _with(state.minimal, rounded))[0]:
            break


def _with(c: Candidate, steps: list[dict[str, Any]]) -> Candidate:
    return Candidate(steps, c.clients, c.rate)


def _shrink_workload(state: ShrinkResult, attempt: Attempt) -> None:
    """Fewer clients (down to one), then fewer ops (the offered rate halved, down to 10 per second)."""
    for clients in range(1, state.minimal.clients):
        c = state.minimal
        if attempt(f"{clients} clients", Candidate(c.steps, clients, c.rate))[0]:
            break
    while state.minimal.rate / 2 >= 10:
        c = state.minimal
        if not attempt(f"rate {c.rate / 2:g}", Candidate(c.steps, c.clients, c.rate / 2))[0]:
            break
