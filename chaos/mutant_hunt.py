"""``clusterlab mutants``: run each planted bug of the catalogue (clusterlab.testing.mutants)
through black-box runs only and report whether, by which check and how fast it was caught.

For one mutant the hunt tries, in a fixed order, until the first detection or the time budget:

1. the mutant's own short list of chaos scenarios (``PLANS``: the faults that make that bug
   observable; simulator, seeds 1..);
2. a sweep of every simulator scenario over seeds ``1..seeds``;
3. a seed sweep of the ``random`` fuzz schedule (clusterlab.chaos.fuzz, with the kv service).

A run *catches* the mutant when a black-box judgement fails: the online checker (a
SafetyViolation), the trace checks of the local verdict (clusterlab.chaos.verdict: agreement,
durability, linearizability, ...), a progress bound (ChaosTimeout/SimTimeout: no leader, no acked
op, members not caught up) or a member that crashed (an error a member process would die of). The
members' own white-box invariant asserts are off in these runs (as in real member processes), and
no unit test is involved. A detection counts only when the same attempt passes on the correct build
(a control run; else it is "inconclusive" and the hunt goes on). Same mutant + seed, same result: the
simulator is deterministic and the order of attempts is fixed (the budget only decides how far down
the list a hunt may go).

``--golden`` adds a column: whether ``clusterlab golden verify`` alone (replaying the goldens
through the mutant's service and re-running the simulator goldens' schedules with the mutant on, as
golden/verify.py does) flags it."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clusterlab.chaos.runner import MUTANT_SERVICES, run_scenario
from clusterlab.chaos.scenarios import SCENARIOS
from clusterlab.chaos.target import ChaosTimeout
from clusterlab.harness.invariants import SafetyViolation
from rich.table import Table

from clusterlab.testing import mutants as m
from clusterlab.testing.mutants import MUTANTS, mutant_set

FUZZ = "fuzz"  # an attempt of the random fuzz schedule (clusterlab.chaos.fuzz), not a named scenario
DEFAULT_SEEDS = 3
DEFAULT_BUDGET_S = 120.0


@dataclass(frozen=True, slots=True)
class Attempt:
    """One black-box run: a chaos scenario in the simulator (or the fuzz schedule) at a seed."""

    scenario: str
    seed: int
    duration_s: float | None = None
    members: int = 3
    service: str = "kv"  # the workload's service (the counter schedules timers)

    def describe(self) -> str:
        size = f" {self.members} members" if self.members != 3 else ""
        size += f" {self.service}" if self.service != "kv" else ""
        length = f" {self.duration_s:g} s" if self.duration_s is not None else ""
        return f"{self.scenario} seed {self.seed}{size}{length}"

    def rerun(self, mutant: str) -> str:
        if self.scenario == FUZZ:
            return f"python -c 'from clusterlab.chaos.fuzz import run_random_schedule as r; r({self.seed}, ...)'"
        cmd = f"clusterlab run {self.scenario} --sim --seed {self.seed} --members {self.members}"
        if self.duration_s is not None:
            cmd += f" --duration {self.duration_s:g}"
        if self.service != "kv":
            cmd += f" --service {self.service}"
        return f"{cmd} --mutant {mutant}"


# Per mutant, the faults that expose it first (found by sweeping; the sweep below still runs after
# them, so a plan only makes the hunt faster, never decides the verdict).
PLANS: dict[str, list[Attempt]] = {
    m.VOTE_WITHOUT_LOG_RECENCY: [Attempt("stale-candidate", s) for s in (2, 1, 3)],
    m.VOTE_NOT_PERSISTED: [Attempt("kill-voter-and-candidate", s) for s in (4, 6)],
    m.QUORUM_OFF_BY_ONE: [Attempt("minority-partition", s) for s in (1, 2)],
    m.LATE_VOTE_COUNTED: [Attempt("late-votes", s, members=5) for s in (3, 8)],
    m.VOTE_PROMISE_BROKEN: [Attempt("stalled-candidate", s) for s in (1, 2)],
    m.OLDER_TERM_LOG_COUNTED: [Attempt("older-term-tail", s) for s in (1, 2)],
    m.LEADER_NEVER_STEPS_DOWN: [Attempt("leader-isolation", s) for s in (1, 2)],
    m.COMMIT_ON_OWN_APPEND: [Attempt("leader-isolation", s) for s in (1, 2)],
    m.ACK_BEFORE_APPEND: [Attempt("follower-restart", s) for s in (1, 2)],
    m.SKIP_DIVERGENT_TRUNCATION: [Attempt("leader-isolation", s) for s in (1, 2)],
    m.TORN_TAIL_NOT_REPAIRED: [Attempt("torn-write-on-leader", s) for s in (1, 2)],
    m.FOLLOWER_FIRES_TIMERS: [Attempt(s, 1, service="counter") for s in ("leader-isolation", "leader-kill")],
    m.SESSION_TIMEOUT_LOCAL_CLOCK: [Attempt("long-partition", s) for s in (1, 2, 3)],
    m.CLOSED_SESSION_KEPT: [Attempt("client-silence", s) for s in (1, 2)],
    m.FIRED_TIMER_KEPT: [Attempt(s, 1, service="counter") for s in ("leader-kill", "leader-isolation")],
    m.CANCEL_TIMER_IGNORED: [Attempt(s, 1, service="timers") for s in ("leader-kill", "snapshot-election")],
    m.SNAPSHOT_AT_LOCAL_POSITION: [Attempt("snapshot-under-chaos", 1), Attempt("snapshot-election", 4)],
    m.TIMERS_LEFT_OUT_OF_SNAPSHOT: [Attempt("full-restart", s, service="counter") for s in (1, 2)],
    m.SERVICE_WALL_CLOCK: [Attempt("leader-kill", 1)],
    m.STALE_READ: [Attempt("leader-isolation", s) for s in (1, 2)],
    m.RESEND_APPLIED_TWICE: [Attempt("client-resends", s) for s in (1, 2)],
    m.ALARM_COUNTED_TWICE: [Attempt(s, 1, service="timers") for s in ("leader-kill", "snapshot-election")],
    m.BACKUP_SKIPS_SNAPSHOT: [Attempt("backup-restore", s) for s in (1, 2)],
}


def sim_scenarios() -> list[str]:
    """Every chaos scenario the simulator runs, in the catalogue's order (``random`` last)."""
    return [s.name for s in SCENARIOS.values() if not s.real_only]


def attempts(name: str, seeds: int) -> list[Attempt]:
    """The fixed order of black-box runs a hunt for mutant ``name`` tries (duplicates dropped)."""
    order = list(PLANS.get(name, []))
    for seed in range(1, seeds + 1):
        order += [Attempt(s, seed) for s in sim_scenarios()]
    order += [Attempt(FUZZ, seed) for seed in range(1, 4 * seeds + 1)]
    seen: set[Attempt] = set()
    return [a for a in order if not (a in seen or seen.add(a))]  # type: ignore[func-returns-value]


@dataclass
class Detection:
    """Whether one attempt caught the mutant, and how it was judged."""

    caught: bool
    check: str | None = None  # e.g. "trace: agreement", "online: durability", "progress", "crash: ArchiveError"
    detail: str = ""


def _online_check(message: str) -> str:
    """The online check a SafetyViolation names first (``agreement: at log position ...``)."""
    head = message.split(":", 1)[0].strip()
    return head if head and " " not in head and len(head) < 40 else "safety"


def _fuzz_service(name: str | None) -> tuple[str, str]:
    """The service of a fuzz attempt and its workload: kv, or the kv variant of a planted kv bug with
    the kv workload, or the last sample service another planted service bug replaces (the runner
    swaps in the variant) with that service's workload."""
    if name is None or not MUTANTS[name].in_service:
        return "kv", "kv"
    services = MUTANTS[name].services
    return (MUTANT_SERVICES[name], "kv") if "kv" in services else (services[-1], services[-1])


def judge(name: str | None, attempt: Attempt, directory: Path) -> Detection:
    """Run ``attempt`` with mutant ``name`` switched on (None: the correct build, the control run) and
    judge it black-box (see module docstring)."""
    chosen = mutant_set([name] if name else [])
    try:
        if attempt.scenario == FUZZ:
            from clusterlab.chaos.fuzz import run_random_schedule

            service, workload = _fuzz_service(name)
            run_random_schedule(
                attempt.seed, directory=str(directory), service=service, mutants=chosen, workload=workload
            )
            return Detection(False)
        r = run_scenario(
            attempt.scenario,
            attempt.seed,
            members=attempt.members,
            duration_s=attempt.duration_s,
            service=attempt.service,
            sim=True,
            directory=directory,
            settle_s=20.0,
            mutants=chosen,
        )
    except SafetyViolation as e:
        return Detection(True, "online: " + _online_check(str(e)), str(e)[:300])
    except ChaosTimeout as e:
        return Detection(True, "progress", str(e)[:300])
    except AssertionError as e:  # SimTimeout (a progress bound), a crash
        # A SimTimeout is a progress bound; any other: a member's own guard failed (its process would die of it).
        kind = "progress" if type(e).__name__ == "SimTimeout" else "crash: AssertionError"
        return Detection(True, kind, str(e)[:300])
    except ValueError:
        raise  # a bad attempt (unknown scenario, wrong size): a bug of the catalogue, not a detection
    except Exception as e:  # a member that dies of the bug is a black-box observation
        kind = "progress: livelock" if "livelock" in str(e) else f"crash: {type(e).__name__}"
        return Detection(True, kind, str(e)[:300])
    if r.ok:
        return Detection(False)
    if r.error is not None:
        kind, _, rest = r.error.partition(": ")
        check = {"SafetyViolation": "online: " + _online_check(rest), "ChaosTimeout": "progress"}.get(kind, kind)
        return Detection(True, check, r.error[:300])
    failed = r.verdict.failed() if r.verdict is not None else []
    status = r.verdict.status if r.verdict is not None else "no verdict"
    return Detection(True, "trace: " + ", ".join(failed) if failed else f"trace: {status}", status)


@dataclass
class MutantResult:
    """The outcome of one mutant's hunt (a row of the table)."""

    name: str
    area: str
    caught: bool
    check: str | None
    runs: int  # attempts made (up to and including the detecting one)
    seconds: float  # wall time to the first detection (or of the whole hunt when missed)
    by: str | None = None  # the detecting attempt
    rerun: str | None = None
    detail: str = ""
    budget_exhausted: bool = False
    golden: bool | None = None  # --golden: caught by `golden verify` alone
    golden_detail: str = ""
    tried: list[str] = field(default_factory=list)


def _fails_without_mutant(attempt: Attempt) -> bool:
    """The control run: the same attempt on the correct build. A detection counts only when the control
    passes (else the failure is not the mutant's: a defect or a flaky check)."""
    directory = Path(tempfile.mkdtemp(prefix="clusterlab-mutant-control-"))
    try:
        return judge(None, attempt, directory).caught
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def hunt(name: str, seeds: int = DEFAULT_SEEDS, budget_s: float = DEFAULT_BUDGET_S) -> MutantResult:
    """Hunt mutant ``name``: the attempts of :func:`attempts` in order until the first detection
    or ``budget_s`` of wall time."""
    mutant = MUTANTS[name]
    started = time.monotonic()
    runs = 0
    tried: list[str] = []
    for attempt in attempts(name, seeds):
        if runs and time.monotonic() - started > budget_s:
            return MutantResult(
                name, mutant.area, False, None, runs, time.monotonic() - started, budget_exhausted=True, tried=tried
            )
        directory = Path(tempfile.mkdtemp(prefix=f"clusterlab-mutant-{name}-"))
        try:
            d = judge(name, attempt, directory)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        runs += 1
        tried.append(attempt.describe())
        if d.caught and _fails_without_mutant(attempt):
            tried[-1] += " (inconclusive: fails without the mutant too)"
            continue
        if d.caught:
            return MutantResult(
                name,
                mutant.area,
                True,
                d.check,
                runs,
                time.monotonic() - started,
                by=attempt.describe(),
                rerun=attempt.rerun(name),
                detail=d.detail,
                tried=tried,
            )
    return MutantResult(name, mutant.area, False, None, runs, time.monotonic() - started, tried=tried)


def _hunt_task(job: tuple[str, int, float]) -> dict[str, Any]:
    name, seeds, budget_s = job
    return asdict(hunt(name, seeds, budget_s))


def run_catalogue(
    names: Sequence[str] | None = None,
    *,
    seeds: int = DEFAULT_SEEDS,
    budget_s: float = DEFAULT_BUDGET_S,
    jobs: int = 1,
    golden: Callable[[str], tuple[bool, str]] | None = None,
    on_result: Callable[[MutantResult], None] | None = None,
) -> list[MutantResult]:
    """Hunt every mutant of ``names`` (default: the whole catalogue), ``jobs`` at a time in separate
    processes; results in catalogue order. ``golden``: the golden-regression judge of one mutant
    (caught?, why), filled in as the ``golden`` column (clusterlab.cli.mutants supplies it: the
    goldens live in a layer above this one)."""
    chosen = sorted(mutant_set(names), key=list(MUTANTS).index) if names else list(MUTANTS)
    work = [(n, seeds, budget_s) for n in chosen]
    results: dict[str, MutantResult] = {}

    def done(row: dict[str, Any]) -> None:
        r = MutantResult(**row)
        results[r.name] = r
        if on_result:
            on_result(r)

    if jobs > 1 and len(work) > 1:
        import multiprocess  # type: ignore[import-untyped]

        with multiprocess.get_context("spawn").Pool(min(jobs, len(work))) as pool:
            for row in pool.imap_unordered(_hunt_task, work):
                done(row)
    else:
        for job in work:
            done(_hunt_task(job))
    ordered = [results[n] for n in chosen]
    if golden is not None:
        for r in ordered:
            r.golden, r.golden_detail = golden(r.name)
    return ordered


def table(results: Iterable[MutantResult], golden: bool = False) -> Table:
    """The rich table ``clusterlab mutants`` prints."""
    t = Table(title="planted bugs (black-box runs only)")
    t.add_column("mutant")
    t.add_column("area")
    t.add_column("caught?")
    t.add_column("by check")
    t.add_column("first detection")
    t.add_column("runs", justify="right")
    t.add_column("time", justify="right")
    if golden:
        t.add_column("golden")
    for r in results:
        caught = "[green]yes[/]" if r.caught else "[red]NO[/]" + (" (budget)" if r.budget_exhausted else "")
        row = [r.name, r.area, caught, r.check or "-", r.by or "-", str(r.runs), f"{r.seconds:.1f} s"]
        if golden:
            row.append("-" if r.golden is None else "[green]yes[/]" if r.golden else "[red]no[/]")
        t.add_row(*row)
    return t


def summary(results: Sequence[MutantResult]) -> dict[str, Any]:
    """The JSON ``--json`` writes: every row plus the totals."""
    golden = [r for r in results if r.golden is not None]
    return {
        "mutants": len(results),
        "caught": sum(r.caught for r in results),
        "all_caught": all(r.caught for r in results),
        "golden_caught": sum(bool(r.golden) for r in golden) if golden else None,
        "results": [asdict(r) for r in results],
    }
