"""Run one scenario: start a cluster (real processes, or the simulator), drive the workload through
the scenario's schedule with the online checker watching, heal, require progress, stop, and verify
the recorded trace. ``clusterlab run`` and the pytest plugin both come here."""

from __future__ import annotations

import hashlib
import json
import random
import shlex
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterlab.chaos.checker import OnlineChecker
from clusterlab.chaos.limits import run_arguments_error
from clusterlab.chaos.nemesis import DuplicateIngress
from clusterlab.chaos.sample_workloads import WORKLOADS
from clusterlab.chaos.scenarios import Scenario
from clusterlab.chaos.scenarios import scenario as find_scenario
from clusterlab.chaos.schedule import Schedule, kills_a_service, loses_replies, schedule_from_spec, schedule_spec
from clusterlab.chaos.target import ChaosTimeout, LocalTarget, SimTarget, Target, Unsupported
from clusterlab.chaos.verdict import Verdict, verify_run
from clusterlab.chaos.workload import Workload, make_workload
from clusterlab.chaos.workload_api import check_service_factory, load_workload
from clusterlab.core.runtime import node as node_process
from clusterlab.core.runtime import service as service_process
from clusterlab.core.runtime.config import parse_services
from clusterlab.harness.invariants import SafetyViolation
from clusterlab.harness.local import MEMBER, MEMBER_PROCESS_MODES, NODE, LocalCluster
from clusterlab.harness.services import SERVICES as SERVICE_REGISTRY
from clusterlab.harness.sim import SimCluster, consensus_module_factory
from clusterlab.harness.sim_recording import record_sim
from clusterlab.harness.tripwire import user_site

from clusterlab.testing.buggify import OFF, Buggify
from clusterlab.testing.mutants import (
    ACK_BEFORE_APPEND,
    ALARM_COUNTED_TWICE,
    MUTANTS,
    RESEND_APPLIED_TWICE,
    SERVICE_WALL_CLOCK,
    STALE_READ,
    misplanted,
    mutant_set,
    rules_for,
)

DEFAULT_CLIENTS = 3  # concurrent clients of a chaos run (each its own session)
DEFAULT_SETTLE_S = 30.0  # the default bound on a run's final healed phase
# A run directory's description of its run (RunResult.summary): what clusterlab shrink replays.
CHAOS_JSON = "chaos.json"
# The kv service with the planted stale read (a test-only switch, like --fault-ack-before-append).
STALE_READ_SERVICE = "clusterlab.harness.services.planted:stale_read_service"
# The service of the planted bugs that live in the service (clusterlab.testing.mutants): a variant of
# the sample services the mutant's ``services`` names.
MUTANT_SERVICES = {
    STALE_READ: STALE_READ_SERVICE,
    SERVICE_WALL_CLOCK: "clusterlab.harness.services.planted:wall_clock_service",
    RESEND_APPLIED_TWICE: "clusterlab.harness.services.planted:forgetful_dedupe_service",
    ALARM_COUNTED_TWICE: "clusterlab.harness.services.planted:double_fire_service",
}


# Called with a RunProgress while a run goes on (clusterlab run's progress display).
OnProgress = Callable[["RunProgress"], None]


class ChaosFailure(AssertionError):
    """A chaos run failed: the message carries the seed and the exact command to re-run it."""


class UnexpectedExit(AssertionError):
    """A member process (node, service, or a one-process member) exited by itself with a code its program
    does not document."""


# The exit codes a member's processes document (clusterlab.core.runtime.node and .service); the
# harness's own kills (SIGKILL, recorded as ``kill`` events) end a process with -SIGKILL.
NODE_EXIT_CODES = frozenset(
    {
        node_process.EXIT_OK,
        node_process.EXIT_CONFIG,
        node_process.EXIT_SERVICE_GONE,
        node_process.EXIT_SERVICE_LINK,
    }
)
SERVICE_EXIT_CODES = frozenset(
    {service_process.EXIT_OK, service_process.EXIT_CONFIG, service_process.EXIT_SERVICE_FAILED}
)
KILLED_BY_HARNESS = -signal.SIGKILL


def unexpected_exits(exited: Iterable[tuple[int, str, int, int, Path]]) -> list[str]:
    """One line per process in ``exited`` (LocalCluster.exited rows: member id, kind, pid, exit code, log)
    that ended with a code outside its program's documented set and was not killed by the harness."""
    lines = []
    for member_id, kind, pid, code, log in exited:
        # A one-process member (clusterlab.core.runtime.member) exits with its node's codes.
        documented = NODE_EXIT_CODES if kind in (NODE, MEMBER) else SERVICE_EXIT_CODES
        if code != KILLED_BY_HARNESS and code not in documented:
            lines.append(
                f"member {member_id} {kind} process (pid {pid}) exited with {code}, not one of its documented "
                f"exit codes {', '.join(map(str, sorted(documented)))} (log: {log})"
            )
    return lines


def check_exits(cluster: LocalCluster, after: BaseException | None = None) -> None:
    """Raise UnexpectedExit naming every member process that exited by itself with an undocumented code
    (a crash with a traceback exits 1); ``after``: the failure the run met meanwhile, named too."""
    lines = unexpected_exits(cluster.exited())
    if lines:
        then = f"; then {type(after).__name__}: {after}" if after is not None else ""
        raise UnexpectedExit("; ".join(lines) + then) from after


class RunArgumentError(ValueError):
    """An argument that only the scenario's schedule shows wrong (e.g. ``member_process="single"`` with a
    schedule that kills a service alone): raised by :func:`run_scenario` before anything starts."""


@dataclass
class RunResult:
    """What one run did, measured and concluded."""

    scenario: str
    seed: int
    members: int
    sim: bool
    duration_s: float
    run_dir: Path
    trace_dir: Path
    schedule: list[str] = field(default_factory=list)
    acked: int = 0
    invoked: int = 0
    unknown: int = 0
    service: str = "kv"
    failovers_s: list[float] = field(default_factory=list)  # leader fault -> first ack of an op invoked after it
    elections_s: list[float] = field(default_factory=list)  # leader fault -> another member leads (trace)
    recoveries_s: list[float] = field(default_factory=list)  # a fault healed -> every member caught up
    recovery_s: float | None = None  # the final heal -> every member caught up
    model_checked: int = 0  # replies the workload's model checked
    op_counts: dict[str, int] = field(default_factory=dict)  # acknowledged ops by kind
    error: str | None = None
    verdict: Verdict | None = None
    elapsed_s: float = 0.0
    fault_ack_before_append: bool = False
    clients: int = DEFAULT_CLIENTS
    fault_stale_read: bool = False
    mutants: frozenset[str] = frozenset()  # planted bugs switched on (clusterlab.testing.mutants)
    steps: list[dict[str, Any]] = field(default_factory=list)  # the schedule as data (schedule_spec)
    explicit: bool = False  # the steps were given (a shrunk schedule), not drawn from the seed
    services: list[str] = field(default_factory=list)  # several services per member; the workload drives [0]
    rate: float | None = None  # ops per second offered (None: the driver's default)
    settle_s: float = DEFAULT_SETTLE_S  # the bound on the final healed phase
    workload: str | None = None  # the service's workload, if not the sample service's (package.module:factory)
    tripwire: bool = True  # the services' callbacks are watched (clusterlab.harness.tripwire)
    buggify: bool = False  # the simulator's fault points are on (clusterlab.testing.buggify)
    client_resends: bool = False  # simulator clients resend unanswered requests (Scenario.client_resends)
    member_process: str = "split"  # real members: "split" (node + service processes) or "single" (one process)

    @property
    def ok(self) -> bool:
        return self.error is None and self.verdict is not None and self.verdict.ok

    @property
    def run_id(self) -> str:
        """The simulator's run id: one per configuration (a collection of runs, e.g. the suite's
        --trace-dir, holds every size and seed side by side) and the same for the same configuration,
        so two runs of one seed still give identical tables. Real runs get a unique id."""
        parts = ["sim", self.scenario, f"n{self.members}", f"s{self.seed}", f"d{self.duration_s:g}"]
        if self.service != "kv":
            parts.append(self.service)
        if self.services:
            parts.append("+".join(self.services))
        if self.workload:
            parts.append(f"w-{self.workload}")
        if self.clients != 1:
            parts.append(f"c{self.clients}")
        if self.fault_ack_before_append:
            parts.append("broken")
        if self.fault_stale_read:
            parts.append("stale-read")
        parts.extend(f"m-{name}" for name in sorted(self.mutants))
        if self.explicit:
            parts.append("x" + hashlib.sha256(json.dumps(self.steps).encode()).hexdigest()[:8])
        return "-".join(parts)

    def rerun_command(self) -> str:
        cmd = [
            "clusterlab",
            "run",
            self.scenario,
            "--seed",
            str(self.seed),
            "--members",
            str(self.members),
            "--duration",
            f"{self.duration_s:g}",
        ]
        if self.services:
            cmd += ["--services", ",".join(self.services)]
        elif self.service != "kv":
            cmd += ["--service", self.service]
        if self.workload:
            cmd += ["--workload", self.workload]
        if self.clients != DEFAULT_CLIENTS:
            cmd += ["--clients", str(self.clients)]
        if self.rate is not None:
            cmd += ["--rate", f"{self.rate:g}"]
        if self.sim:
            cmd.append("--sim")
        if self.fault_ack_before_append:
            cmd.append("--fault-ack-before-append")
        if self.fault_stale_read:
            cmd.append("--fault-stale-read")
        for name in sorted(self.mutants):
            cmd += ["--mutant", name]
        if not self.tripwire:
            cmd.append("--no-tripwire")
        if self.buggify:
            cmd.append("--buggify")
        if self.member_process != "split":
            cmd += ["--member-process", self.member_process]
        if self.explicit:
            cmd += ["--schedule", json.dumps(self.steps, separators=(",", ":"))]
        return shlex.join(cmd)

    def summary(self) -> dict[str, Any]:
        """The run as plain data (what ``clusterlab run --json`` prints and the suite logs)."""
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "members": self.members,
            "sim": self.sim,
            "service": self.service,
            **({"services": self.services} if self.services else {}),
            **({"workload": self.workload} if self.workload else {}),
            "duration_s": self.duration_s,
            "ok": self.ok,
            "error": self.error,
            "failed_checks": self.verdict.failed() if self.verdict else None,
            "acked": self.acked,
            "invoked": self.invoked,
            "unknown": self.unknown,
            "op_counts": self.op_counts,
            "model_checked": self.model_checked,
            "failovers_s": self.failovers_s,
            "elections_s": self.elections_s,
            "recoveries_s": self.recoveries_s,
            "recovery_s": self.recovery_s,
            "elapsed_s": self.elapsed_s,
            "trace_dir": str(self.trace_dir),
            "schedule": self.schedule,
            "steps": self.steps,
            "explicit_schedule": self.explicit,
            "rerun": self.rerun_command(),
            "fault_ack_before_append": self.fault_ack_before_append,
            "clients": self.clients,
            "fault_stale_read": self.fault_stale_read,
            "mutants": sorted(self.mutants),
            "rate": self.rate,
            "settle_s": self.settle_s,
            "tripwire": self.tripwire,
            "buggify": self.buggify,
            "member_process": self.member_process,
            "linearizability": self.verdict.linearizability.verdict
            if self.verdict is not None and self.verdict.linearizability is not None
            else None,
        }

    def write_summary(self, directory: Path) -> Path:
        """Write :meth:`summary` as ``directory``/chaos.json (a run directory's scenario, seed, size,
        schedule steps, workload and planted bugs: what ``clusterlab shrink`` replays)."""
        path = Path(directory) / CHAOS_JSON
        path.write_text(json.dumps(self.summary(), indent=1, default=str) + "\n")
        return path

    def failure_message(self) -> str:
        why = self.error or f"trace checks failed: {', '.join(self.verdict.failed() if self.verdict else [])}"
        return f"{self.scenario} seed {self.seed}: {why}\n  trace: {self.trace_dir}\n  re-run: {self.rerun_command()}"


@dataclass(frozen=True)
class RunArguments:
    """A run's arguments as :func:`check_run_arguments` found them: the scenario, the planted bugs, the
    service the workload drives and the services of each member (several, or none)."""

    spec: Scenario
    mutants: frozenset[str]
    service: str
    services: list[str] | None
    clients: int


def run_clients(service: str, workload: str | None, clients: int | None) -> int:
    """The concurrent clients of a run: ``clients``, or by default DEFAULT_CLIENTS capped at what the
    workload runs (its ``max_clients``); ValueError when ``clients`` asks for more than that."""
    limit = load_workload(workload or service, WORKLOADS).max_clients
    if clients is None:
        return DEFAULT_CLIENTS if limit is None else min(DEFAULT_CLIENTS, limit)
    if limit is not None and clients > limit:
        raise ValueError(
            f"the {workload or service} workload runs at most {limit} client{'s' * (limit > 1)}, not {clients}"
        )
    return clients


def duplicates_ingress(plan: Schedule) -> bool:
    """Whether ``plan`` delivers the clients' requests twice (its clients must tag them, as resending ones do)."""
    return any(isinstance(s.nemesis, DuplicateIngress) for s in plan.steps)


def check_dedupe(spec: Scenario, service: str, workload: str | None, plan: Schedule | None = None) -> None:
    """A scenario (or an explicit ``plan``) that delivers requests twice (``Scenario.needs_dedupe``) runs only a
    service whose workload deduplicates them (``ServiceWorkload.resend``); else one clear line (a
    ValueError), not a false violation."""
    twice = spec.needs_dedupe or (plan is not None and duplicates_ingress(plan))
    if twice and not load_workload(workload or service, WORKLOADS).resend:
        raise ValueError(
            f"scenario {spec.name} delivers requests twice: it needs a service that deduplicates them "
            f"(a workload with resend = True, as kv's), not {workload or service!r}"
        )


def check_run_arguments(
    name: str | Scenario,
    seed: int = 1,
    *,
    members: int = 3,
    duration_s: float | None = None,
    sim: bool = False,
    settle_s: float = DEFAULT_SETTLE_S,
    service: str = "kv",
    rate: float | None = None,
    clients: int | None = None,
    fault_stale_read: bool = False,
    mutants: Iterable[str] = (),
    services: list[str] | None = None,
    workload: str | None = None,
) -> RunArguments:
    """:func:`run_scenario`'s arguments checked before anything starts: ValueError naming the first
    that is wrong (a size or time out of clusterlab.chaos.limits, a service or planted bug that does
    not fit), KeyError for an unknown scenario (listing the known ones).

    ``service``: ``kv`` (put/get/cas/delete), ``counter`` (add/get), ``timers`` or a user's
    ``package.module:factory`` (a ClusteredService; then ``workload`` is required); ``workload``: the
    service's workload, ``package.module:factory`` (clusterlab.chaos.workload_api; default: the
    sample service's); ``rate``: ops per second the
    workload offers (default 200 on real processes, 100 in the simulator); ``settle_s``: the bound
    on the final healed phase (a leader, an acknowledged op, every member caught up); ``clients``:
    concurrent clients (default: :func:`run_clients`; their history is checked for linearizability);
    ``fault_stale_read``: the planted stale read (kv only; see
    ``clusterlab.harness.services.planted.stale_read_service``);
    ``mutants``: planted bugs to switch on, by name (clusterlab.testing.mutants; test-only);
    ``services``: several clustered services per member (``["kv", "counter"]``); the workload drives
    service 0 (``service`` is ``services[0]``), the others apply every entry and ignore its messages
    (clusterlab.core.service.addressed)."""
    chosen = mutant_set(mutants)  # UnknownMutant (a ValueError) lists the valid names
    spec = name if isinstance(name, Scenario) else find_scenario(name)
    if services:
        services = parse_services(services)
        if len(services) < 2:
            raise ValueError(f"services {services}: give two or more (one service is --service)")
        unknown = [k for k in services if ":" not in k and k not in SERVICE_REGISTRY]
        if unknown:
            raise ValueError(f"unknown services {unknown}: use {sorted(SERVICE_REGISTRY)} or module:factory")
        service = services[0]
    check_service(service, workload)
    check_dedupe(spec, service, workload)
    clients = run_clients(service, workload, clients)
    bounds = {"duration_s": duration_s, "rate": rate, "settle_s": settle_s}
    if (error := run_arguments_error(members=members, seed=seed, clients=clients, **bounds)) is not None:
        raise ValueError(error)
    if fault_stale_read and service != "kv":
        raise ValueError(f"--fault-stale-read plants a bug in the kv service, not {service!r}")
    in_service = sorted(n for n in chosen if MUTANTS[n].in_service)
    if (problem := misplanted(in_service, service)) is not None:
        raise ValueError(problem)
    if len(in_service) + fault_stale_read > 1:
        raise ValueError(f"at most one planted service bug at a time, not {', '.join(in_service)}")
    if members not in spec.sizes and members != 3:
        raise ValueError(f"scenario {spec.name} runs on {' or '.join(map(str, spec.sizes))} members, not {members}")
    if sim and spec.real_only:
        raise ValueError(f"scenario {spec.name} needs real processes (it uses a fault the simulator lacks); drop --sim")
    if not sim and spec.sim_only:
        raise ValueError(f"scenario {spec.name} runs in the simulator only; add --sim")
    return RunArguments(spec, chosen, service, services, clients)


def run_scenario(
    name: str | Scenario,
    seed: int = 1,
    *,
    members: int = 3,
    duration_s: float | None = None,
    sim: bool = False,
    directory: Path | str | None = None,
    trace_dir: Path | str | None = None,
    settle_s: float = DEFAULT_SETTLE_S,
    on_progress: OnProgress | None = None,
    fault_ack_before_append: bool = False,
    service: str = "kv",
    rate: float | None = None,
    clients: int | None = None,
    fault_stale_read: bool = False,
    mutants: Iterable[str] = (),
    schedule: list[dict[str, Any]] | None = None,
    services: list[str] | None = None,
    verify: bool = True,
    workload: str | None = None,
    determinism: bool = False,
    tripwire: bool = False,
    buggify: bool = False,
    member_process: str = "split",
) -> RunResult:
    """Run scenario ``name`` once and verify its trace; never raises for a failed run (see ``RunResult.ok`` /
    ``error``), only for bad arguments (ValueError, KeyError for an unknown scenario). Every process started is
    stopped. ``service``, ``workload``, ``rate``, ``settle_s``, ``clients``, ``fault_stale_read``, ``mutants`` and
    ``services``: as :func:`check_run_arguments` describes them.

    ``name``: a scenario's name or a :class:`Scenario` (a user-defined one); ``schedule``: explicit steps
    (``clusterlab.chaos.schedule.schedule_spec``, e.g. a shrunk schedule) run instead of the seed's; the seed still
    drives victims and the workload, so the same steps and seed replay exactly. ``determinism`` adds the replay
    checks to the verdict (clusterlab.chaos.determinism). ``verify=False`` leaves ``result.verdict`` None for the
    caller to judge (a sweep judges its runs in batches, :func:`clusterlab.chaos.verdict.verify_runs`; then
    :func:`apply_verdict`). ``on_progress`` gets a :class:`RunProgress` at each step and every
    :data:`PROGRESS_INTERVAL_S` of wall time. ``tripwire``: watch the services' callbacks for wall-clock reads,
    global randomness, threads and role-dependent state changes (clusterlab.harness.tripwire; the ``tripwire``
    check judges them); ``clusterlab run`` and the pytest plugin's chaos runs turn it on, sweeps and mutant runs
    leave it off. ``buggify``: switch on the simulator's seeded fault points (clusterlab.testing.buggify; ``sim``
    only). ``member_process``: ``"split"`` runs each real member as its node and service processes, ``"single"``
    as one process (``clusterlab.core.runtime.member``); a schedule that kills a service alone needs ``split``."""
    result, plan = _prepare_run(
        name,
        seed,
        members=members,
        duration_s=duration_s,
        sim=sim,
        directory=directory,
        trace_dir=trace_dir,
        settle_s=settle_s,
        fault_ack_before_append=fault_ack_before_append,
        service=service,
        rate=rate,
        clients=clients,
        fault_stale_read=fault_stale_read,
        mutants=mutants,
        schedule=schedule,
        services=services,
        workload=workload,
        tripwire=tripwire,
        buggify=buggify,
        member_process=member_process,
    )
    _run_and_verify(result, plan, on_progress, verify=verify, determinism=determinism)
    return result


def _prepare_run(
    name: str | Scenario,
    seed: int,
    *,
    members: int,
    duration_s: float | None,
    sim: bool,
    directory: Path | str | None,
    trace_dir: Path | str | None,
    settle_s: float,
    fault_ack_before_append: bool,
    service: str,
    rate: float | None,
    clients: int | None,
    fault_stale_read: bool,
    mutants: Iterable[str],
    schedule: list[dict[str, Any]] | None,
    services: list[str] | None,
    workload: str | None,
    tripwire: bool,
    buggify: bool,
    member_process: str,
) -> tuple[RunResult, Schedule]:
    """Checks :func:`run_scenario`'s arguments, plans the run's steps and makes its directory; returns the
    run's RunResult (not yet run) and its schedule."""
    _check_run_modes(sim=sim, buggify=buggify, member_process=member_process)
    checked = check_run_arguments(
        name,
        seed,
        members=members,
        duration_s=duration_s,
        sim=sim,
        settle_s=settle_s,
        service=service,
        rate=rate,
        clients=clients,
        fault_stale_read=fault_stale_read,
        mutants=mutants,
        services=services,
        workload=workload,
    )
    duration, plan = _checked_plan(checked, seed, duration_s, members, schedule, workload, member_process, sim=sim)
    root, trace = _run_directories(checked.spec, directory, trace_dir)
    result = RunResult(
        checked.spec.name,
        seed,
        members,
        sim,
        duration,
        root,
        trace,
        plan.describe(),
        fault_ack_before_append=fault_ack_before_append,
        service=checked.service,
        clients=checked.clients,
        fault_stale_read=fault_stale_read,
        mutants=checked.mutants,
        steps=schedule_spec(plan),
        explicit=schedule is not None,
        services=list(checked.services or []),
        rate=rate,
        settle_s=settle_s,
        workload=workload,
        tripwire=tripwire,
        client_resends=checked.spec.client_resends or loses_replies(plan) or duplicates_ingress(plan),
        buggify=buggify,
        member_process=member_process,
    )
    return result, plan


def _checked_plan(
    checked: RunArguments,
    seed: int,
    duration_s: float | None,
    members: int,
    schedule: list[dict[str, Any]] | None,
    workload: str | None,
    member_process: str,
    *,
    sim: bool,
) -> tuple[float, Schedule]:
    """The run's duration and its steps, an explicit ``schedule`` checked against the service (requests
    delivered twice) and every schedule against ``member_process``."""
    spec = checked.spec
    duration = spec.default_duration_s if duration_s is None else duration_s
    plan = scenario_schedule(spec, seed, duration, sim=sim, members=members, schedule=schedule)
    if schedule is not None:
        check_dedupe(spec, checked.service, workload, plan)
    check_member_process(spec, plan, member_process)
    return duration, plan


def _run_directories(spec: Scenario, directory: Path | str | None, trace_dir: Path | str | None) -> tuple[Path, Path]:
    """The run's directory (``directory``, else a new temporary one), made, and its trace directory
    (``trace_dir``, else ``trace`` in the run's directory)."""
    root = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix=f"clusterlab-{spec.name}-"))
    root.mkdir(parents=True, exist_ok=True)
    trace = Path(trace_dir) if trace_dir is not None else root / "trace"
    return root, trace


def _run_and_verify(
    result: RunResult, plan: Schedule, on_progress: OnProgress | None, *, verify: bool, determinism: bool
) -> None:
    """Runs ``plan`` in the run's target, verifies the trace it wrote when ``verify`` asks, and times both into
    ``result.elapsed_s``."""
    started = time.monotonic()
    _run_in_target(result, plan, result.run_dir, result.trace_dir, result.settle_s, on_progress, result.rate)
    if verify and result.trace_dir.is_dir():
        apply_verdict(result, verify_run(result.trace_dir, determinism=determinism))
    result.elapsed_s = time.monotonic() - started


def _check_run_modes(*, sim: bool, buggify: bool, member_process: str) -> None:
    """The run modes that exclude each other: ValueError names the clash."""
    if buggify and not sim:
        raise ValueError("buggify: the fault points live in the simulator's drivers; give sim=True (--sim)")
    if member_process not in MEMBER_PROCESS_MODES:
        raise ValueError(f"member_process {member_process!r}: use one of {', '.join(MEMBER_PROCESS_MODES)}")
    if member_process != "split" and sim:
        raise ValueError("member_process: the simulator runs no processes; drop --sim or --member-process")


def _run_in_target(
    result: RunResult,
    plan: Schedule,
    root: Path,
    trace: Path,
    settle_s: float,
    on_progress: OnProgress | None,
    rate: float | None,
) -> None:
    """Run the schedule in the simulator or on real processes. A run's finding (a safety violation, a timeout,
    an unexpected exit; in the simulator also the core's own assertion or the user's code raising, named by
    its file and line) becomes ``result.error``; anything else on real processes is the harness's own error
    and raises."""
    try:
        if result.sim:
            _run_sim(result, plan, root, trace, settle_s, on_progress, rate)
        else:
            _run_local(result, plan, root, trace, settle_s, on_progress, rate)
    except (SafetyViolation, ChaosTimeout, Unsupported, UnexpectedExit) as e:
        result.error = f"{type(e).__name__}: {e}"
    except Exception as e:
        site = user_site(e)
        if not result.sim and site is None:
            raise
        result.error = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}" + (f" (at {site})" if site else "")


def scenario_schedule(
    spec: Scenario, seed: int, duration_s: float, *, sim: bool, members: int, schedule: list[dict[str, Any]] | None
) -> Schedule:
    """The steps a run of ``spec`` takes: the explicit ``schedule`` when given, else the seed's."""
    if schedule is not None:
        return schedule_from_spec(seed, schedule)
    return spec.schedule(seed, duration_s, sim=sim, members=members)


def check_member_process(spec: Scenario, plan: Schedule, member_process: str) -> None:
    """RunArgumentError when ``plan`` needs what ``member_process`` lacks: a service killed alone needs
    the member's node and service as separate processes."""
    if member_process == "single" and kills_a_service(plan):
        raise RunArgumentError(
            f"scenario {spec.name}: its schedule kills a service alone, which needs the member's node and service "
            "as separate processes; drop --member-process single"
        )


def check_service(service: str, workload: str | None) -> None:
    """A service and its workload that can run, else one clear line (a ValueError): a user's service
    (``package.module:factory``) must make a ClusteredService and comes with its workload."""
    if ":" in service:
        check_service_factory(service)
        if workload is None:
            raise ValueError(f"service {service!r} needs its workload: --workload package.module:factory")
    elif service not in SERVICE_REGISTRY:
        raise ValueError(
            f"unknown service {service!r}: use one of {', '.join(SERVICE_REGISTRY)} or package.module:factory"
        )
    load_workload(workload or service, WORKLOADS)  # fails early, naming what is wrong


def apply_verdict(result: RunResult, verdict: Verdict) -> None:
    """Set the run's verdict on its trace and what follows from it (election times, ops model-checked)."""
    result.verdict = verdict
    result.elections_s = verdict.elections_s
    if result.clients > 1 and verdict.linearizability is not None:
        # Concurrent clients: their replies are checked by the linearizability checker instead.
        result.model_checked = sum(k.ops for k in verdict.linearizability.keys if k.verdict == "ok")


@dataclass
class _Watch:
    """Failover and recovery clocks, read between workload steps (every ``interval_s`` of target time)."""

    t: Target
    interval_s: float = 0.1
    leader_faults: list[float] = field(default_factory=list)  # when each leader fault was applied
    recoveries_s: list[float] = field(default_factory=list)
    _recovery_from: float | None = None
    _recovery_position = 0
    _last: float = float("-inf")

    def leader_fault(self) -> None:
        self.leader_faults.append(self.t.now_s())

    def healed(self) -> None:
        """Recovered: every member up and caught up with what the cluster had committed at the heal."""
        self._recovery_from = self.t.now_s()
        self._recovery_position = max(self.t.commit_positions().values(), default=0)

    def fault(self) -> None:
        self._recovery_from = None  # a new fault before the cluster recovered from the last one

    def poll(self) -> None:
        now = self.t.now_s()
        if now - self._last < self.interval_s or self._recovery_from is None:
            return
        self._last = now
        if self._recovery_from is not None and self.t.caught_up_to(self._recovery_position):
            self.recoveries_s.append(now - self._recovery_from)
            self._recovery_from = None


# Wall seconds between two progress reports of a run, and workload steps between two looks at the clock
# (a step is 10 ms of target time: the check costs nothing next to it).
PROGRESS_INTERVAL_S = 0.5
_PROGRESS_CHECK_EVERY = 16


@dataclass(frozen=True)
class RunProgress:
    """Where a running scenario is: what :func:`run_scenario` hands ``on_progress`` every
    :data:`PROGRESS_INTERVAL_S` of wall time and at each step of the schedule."""

    sim: bool
    target_s: float  # the target's seconds since the schedule began (virtual in the simulator)
    schedule_s: float  # the schedule's length; past it the final heal runs
    wall_s: float  # wall seconds since the run started
    acked: int
    invoked: int
    step: int  # the step running, from 1; steps + 1 is the final heal
    steps: int
    what: str

    def describe(self) -> str:
        """One line: ``simulated 12.3 of 20.0 s in 4.1 s, 1234 of 1300 ops acknowledged, step 3/7: kill leader``
        (past the schedule: ``simulated 20.4 s (20.0 s of schedule) ..., final heal: ...``)."""
        of = f"{self.target_s:.1f} of {self.schedule_s:.1f} s"
        if self.step > self.steps:
            of = f"{self.target_s:.1f} s ({self.schedule_s:.1f} s of schedule)"
        clock = f"simulated {of} in {self.wall_s:.1f} s" if self.sim else of
        if self.step <= self.steps:
            step = f"step {self.step}/{self.steps}"
        else:
            step = "final heal" if self.step == self.steps + 1 else "schedule done"
        return f"{clock}, {self.acked} of {self.invoked} ops acknowledged, {step}: {self.what}"


class _Progress:
    """Reports a run's :class:`RunProgress` to ``on_progress`` (None: nothing to do) at each step and,
    between steps, every PROGRESS_INTERVAL_S of wall time (the clock read every few workload steps)."""

    def __init__(self, t: Target, workload: Workload, schedule: Schedule, on_progress: OnProgress | None) -> None:
        self.t, self.workload, self.on_progress = t, workload, on_progress
        self.schedule_s = sum(step.seconds for step in schedule.steps)
        self.steps = len(schedule.steps)
        self.started_wall, self.started_at = time.monotonic(), t.now_s()
        self.step, self.what = 0, "electing a leader"
        self.ticks, self.next_at = 0, 0.0

    def at_step(self, step: int, what: str) -> None:
        self.step, self.what = step, what
        if self.step == 1:
            self.started_at = self.t.now_s()
        self.report()

    def tick(self) -> None:
        if self.on_progress is None:
            return
        self.ticks += 1
        if self.ticks % _PROGRESS_CHECK_EVERY == 0 and time.monotonic() >= self.next_at:
            self.report()

    def report(self) -> None:
        if self.on_progress is None:
            return
        now = time.monotonic()
        self.next_at = now + PROGRESS_INTERVAL_S
        at = max(0.0, self.t.now_s() - self.started_at) if self.step else 0.0
        w = self.workload
        sim = isinstance(self.t, SimTarget)
        self.on_progress(
            RunProgress(
                sim, at, self.schedule_s, now - self.started_wall, w.acked, w.invoked, self.step, self.steps, self.what
            )
        )


def _drive(
    t: Target,
    workload: Workload,
    checker: OnlineChecker,
    schedule: Schedule,
    result: RunResult,
    settle_s: float,
    on_progress: OnProgress | None,
) -> None:
    watch = _Watch(t)
    progress = _Progress(t, workload, schedule, on_progress)

    def work() -> None:
        workload.step()
        checker.poll()
        watch.poll()
        progress.tick()

    t.work = work
    try:
        progress.report()
        t.await_leader(settle_s)
        for i, step in enumerate(schedule.steps):
            progress.at_step(i + 1, step.describe())
            if step.nemesis is None:
                t.advance(step.seconds, work)
                continue
            watch.fault()
            step.nemesis.apply(t)
            if step.nemesis.leader_fault:
                watch.leader_fault()
            t.advance(step.seconds, work)
            step.nemesis.heal(t)
            watch.healed()
        progress.at_step(len(schedule.steps) + 1, "every member up, network healed, progress required")
        _final_heal(t, workload, checker, result, settle_s, work)
        progress.at_step(len(schedule.steps) + 2, "stopping the cluster and judging its trace")
    finally:
        for at in watch.leader_faults:
            first = workload.first_ack_after(at)
            if first is not None:
                result.failovers_s.append(first - at)
        result.recoveries_s = watch.recoveries_s
        result.model_checked = workload.service_workload.checked
        result.op_counts = workload.counts()


def _final_heal(
    t: Target, workload: Workload, checker: OnlineChecker, result: RunResult, settle_s: float, work: Callable[[], None]
) -> None:
    """The final healed phase: a leader, new commits, every key read again, every member caught up — all
    within ``settle_s`` of the heal (ChaosTimeout otherwise)."""
    t.heal_network()
    for m in sorted(t.paused):
        t.resume(m)
    for m in t.members:
        if m not in t.alive():
            t.restart(m)
    healed_at = t.now_s()
    t.await_leader(settle_s)
    acked_before = workload.acked
    deadline = healed_at + settle_s
    while workload.acked == acked_before:
        if t.now_s() > deadline:
            raise ChaosTimeout(f"no acknowledged op within {settle_s} s of the final heal{workload.refusal_note()}")
        t.advance(0.01, work)  # in the simulator time passes only by advancing it
    # Every key read once more: an acknowledged write that is not there fails the run.
    workload.begin_final_reads()
    while not workload.final_done:
        if t.now_s() > deadline:
            raise ChaosTimeout(
                f"final reads not answered within {settle_s} s of the final heal{workload.refusal_note()}"
            )
        t.advance(0.01, work)
    while not t.converged():
        if t.now_s() > deadline:
            raise ChaosTimeout(
                f"members not caught up within {settle_s} s of the final heal: {t.cluster.status_line()}"
            )
        t.advance(0.05, lambda: checker.poll())
    result.recovery_s = t.now_s() - healed_at
    checker.poll(force=True)


def _workload_meta(result: RunResult) -> dict[str, Any]:
    """run.json's ``workload``: the service, the concurrent clients and any planted bug."""
    meta = {
        "service": result.service,
        "clients": result.clients,
        "fault_stale_read": result.fault_stale_read,
        "mutants": sorted(result.mutants),
    }
    if result.workload:
        meta["workload"] = result.workload
    if result.client_resends:
        meta["client_resends"] = True
    return {**meta, "services": result.services} if result.services else meta


def _service_factory(result: RunResult) -> str:
    """The service the members run: the workload's, or the kv variant with a planted service bug."""
    if result.fault_stale_read:
        return STALE_READ_SERVICE
    for name in sorted(result.mutants):
        if name in MUTANT_SERVICES and MUTANTS[name].plants_in(result.service):  # a sample service's variant
            return MUTANT_SERVICES[name]
    return result.service


def _member_services(result: RunResult) -> list[str] | None:
    """The services of each member when it runs several (service 0 with a planted service bug if asked)."""
    if not result.services:
        return None
    first = _service_factory(result)  # service 0 is the workload's (result.service), planted if asked
    return [first, *result.services[1:]]


def _run_local(
    result: RunResult,
    schedule: Schedule,
    root: Path,
    trace: Path,
    settle_s: float,
    on_progress: Any,
    rate: float | None,
) -> None:

    cluster = LocalCluster(
        result.members,
        service=_service_factory(result),
        services=_member_services(result),
        directory=root / "cluster",
        seed=result.seed,
        trace_dir=trace,
        scenario=result.scenario,
        keep_directory=True,
        startup_timeout_s=max(20.0, settle_s),
        mutants=result.mutants | ({ACK_BEFORE_APPEND} if result.fault_ack_before_append else set()),
        tripwire=result.tripwire,
        member_process=result.member_process,
    )
    if cluster.recorder is not None:
        cluster.recorder.meta["workload"] = _workload_meta(result)  # run.json: what drove the run
    with cluster:
        t = LocalTarget(cluster, random.Random(f"nemesis:{result.seed}"))
        workload = make_workload(t, result.service, result.seed, rate, clients=result.clients, workload=result.workload)
        checker = OnlineChecker(t)
        try:
            _drive(t, workload, checker, schedule, result, settle_s, on_progress)
        except (SafetyViolation, ChaosTimeout) as e:
            check_exits(cluster, after=e)  # a process that crashed is the finding, named first
            raise
        finally:
            workload.close()
            result.acked, result.invoked, result.unknown = workload.acked, workload.invoked, workload.unknown
        check_exits(cluster)


def _run_sim(
    result: RunResult,
    schedule: Schedule,
    root: Path,
    trace: Path,
    settle_s: float,
    on_progress: Any,
    rate: float | None,
) -> None:

    factory = None
    if result.fault_ack_before_append:

        def factory(ctx: Any) -> Any:
            ctx.rules = rules_for(result.mutants | {ACK_BEFORE_APPEND})
            return consensus_module_factory(ctx)

    rec = None
    outcome = "failed"
    buggify = Buggify(result.seed, on=True) if result.buggify else OFF
    try:
        with SimCluster(
            members=result.members,
            seed=result.seed,
            directory=root / "cluster",
            service=_service_factory(result),
            services=_member_services(result),
            member_factory=factory,
            mutants=result.mutants,
            # A planted bug is judged black-box, as in a member process: no white-box invariant asserts.
            check_invariants=not result.mutants,
            tripwire=result.tripwire,
            buggify=buggify,
        ) as c:
            rec = record_sim(c, trace, result.run_id, result.scenario, result.seed)
            t = SimTarget(c, random.Random(f"nemesis:{result.seed}"))
            workload = make_workload(
                t,
                result.service,
                result.seed,
                rate,
                recording=rec,
                clients=result.clients,
                workload=result.workload,
                resends=result.client_resends,
            )
            checker = OnlineChecker(t)
            try:
                _drive(t, workload, checker, schedule, result, settle_s, on_progress)
                outcome = "ok"
            finally:
                workload.close()
                result.acked, result.invoked, result.unknown = workload.acked, workload.invoked, workload.unknown
    finally:
        if rec is not None:
            extra: dict[str, Any] = {"workload": _workload_meta(result)}
            if buggify.on:  # which fault points this seed enabled, and how often each fired
                enabled = sorted(site for site, on in buggify.enabled.items() if on)
                extra["buggify"] = {"enabled": enabled, "fired": dict(sorted(buggify.fired.items()))}
            rec.close(outcome, extra=extra)
