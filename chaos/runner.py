"""Run one scenario: start a cluster (real processes, or the simulator), drive the workload through
the scenario's schedule with the online checker watching, heal, require progress, stop, and verify
the recorded trace. ``clusterlab run`` and the pytest plugin both come here."""

from __future__ import annotations

import random
import shlex
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker import OnlineChecker
from chaos.nemesis import Kill, Nemesis, Partition, Pause
from chaos.scenarios import scenario as find_scenario
from chaos.schedule import Schedule
from chaos.target import ChaosTimeout, LocalTarget, SimTarget, Target, Unsupported
from chaos.verify import Verdict, verify_run
from chaos.workload import LocalKvWorkload, SimKvWorkload, Workload
from harness.invariants import SafetyViolation


class ChaosFailure(AssertionError):
    """A chaos run failed: the message carries the seed and the exact command to re-run it."""


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
    failovers_s: list[float] = field(default_factory=list)  # leader fault -> first ack after it
    recovery_s: float | None = None  # final heal -> every member caught up
    error: str | None = None
    verdict: Verdict | None = None
    elapsed_s: float = 0.0
    fault_ack_before_append: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.verdict is not None and self.verdict.ok

    def rerun_command(self) -> str:
        cmd = ["clusterlab", "run", self.scenario, "--seed", str(self.seed), "--members", str(self.members),
               "--duration", f"{self.duration_s:g}"]
        if self.sim:
            cmd.append("--sim")
        return shlex.join(cmd)

    def failure_message(self) -> str:
        why = self.error or f"trace checks failed: {', '.join(self.verdict.failed() if self.verdict else [])}"
        return f"{self.scenario} seed {self.seed}: {why}\n  trace: {self.trace_dir}\n  re-run: {self.rerun_command()}"


def _is_leader_fault(n: Nemesis) -> bool:
    return (isinstance(n, Kill) and n.who in ("leader", "all")) or (
        isinstance(n, Partition) and n.shape == "isolate-leader") or isinstance(n, Pause)


def run_scenario(
    name: str,
    seed: int = 1,
    *,
    members: int = 3,
    duration_s: float | None = None,
    sim: bool = False,
    directory: Path | str | None = None,
    trace_dir: Path | str | None = None,
    settle_s: float = 30.0,
    on_step: Callable[[int, int, str], None] | None = None,
    fault_ack_before_append: bool = False,
) -> RunResult:
    """Run scenario ``name`` once and verify its trace; never raises for a failed run (see
    ``RunResult.ok`` / ``error``), only for bad arguments. Every process started is stopped."""
    spec = find_scenario(name)
    if members not in spec.sizes and members != 3:
        raise ValueError(f"scenario {name} runs on {' or '.join(map(str, spec.sizes))} members, not {members}")
    if sim and spec.real_only:
        raise ValueError(f"scenario {name} needs real processes (it uses a fault the simulator lacks); drop --sim")
    duration = spec.default_duration_s if duration_s is None else duration_s
    schedule = spec.schedule(seed, duration, sim=sim)
    root = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix=f"clusterlab-{name}-"))
    root.mkdir(parents=True, exist_ok=True)
    trace = Path(trace_dir) if trace_dir is not None else root / "trace"
    result = RunResult(name, seed, members, sim, duration, root, trace, schedule.describe(),
                       fault_ack_before_append=fault_ack_before_append)
    started = time.monotonic()
    try:
        if sim:
            _run_sim(result, schedule, root, trace, settle_s, on_step, fault_ack_before_append)
        else:
            _run_local(result, schedule, root, trace, settle_s, on_step, fault_ack_before_append)
    except (SafetyViolation, ChaosTimeout, Unsupported) as e:
        result.error = f"{type(e).__name__}: {e}"
    if result.trace_dir.is_dir():
        result.verdict = verify_run(result.trace_dir)
    result.elapsed_s = time.monotonic() - started
    return result


def _drive(t: Target, workload: Workload, checker: OnlineChecker, schedule: Schedule, result: RunResult,
           settle_s: float, on_step: Callable[[int, int, str], None] | None) -> None:
    def work() -> None:
        workload.step()
        checker.poll()

    t.await_leader(settle_s)
    total = len(schedule.steps)
    leader_faults: list[float] = []
    for i, step in enumerate(schedule.steps):
        if on_step:
            on_step(i, total, step.describe())
        if step.nemesis is None:
            t.advance(step.seconds, work)
            continue
        step.nemesis.apply(t)
        if _is_leader_fault(step.nemesis):
            leader_faults.append(t.now_s())
        t.advance(step.seconds, work)
        step.nemesis.heal(t)
    if on_step:
        on_step(total, total, "final heal: every member up, network healed, progress required")
    # The final healed phase: a leader, new commits, every member caught up — within settle_s.
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
            raise ChaosTimeout(f"no acknowledged op within {settle_s} s of the final heal")
        t.advance(0.01, work)  # in the simulator time passes only by advancing it
    while not t.converged():
        if t.now_s() > deadline:
            raise ChaosTimeout(f"members not caught up within {settle_s} s of the final heal: "
                               f"{t.cluster.status_line()}")
        t.advance(0.05, lambda: checker.poll())
    result.recovery_s = t.now_s() - healed_at
    checker.poll(force=True)
    for at in leader_faults:
        first = workload.first_ack_after(at)
        if first is not None:
            result.failovers_s.append(first - at)


def _run_local(result: RunResult, schedule: Schedule, root: Path, trace: Path, settle_s: float,
               on_step: Any, fault_ack_before_append: bool) -> None:
    from harness.local import LocalCluster

    cluster = LocalCluster(result.members, service="kv", directory=root / "cluster", seed=result.seed,
                           trace_dir=trace, scenario=result.scenario, keep_directory=True,
                           startup_timeout_s=max(20.0, settle_s),
                           fault_ack_before_append=fault_ack_before_append)
    t = LocalTarget(cluster, random.Random(f"nemesis:{result.seed}"))
    workload = LocalKvWorkload(cluster=cluster)
    checker = OnlineChecker(t)
    with cluster:
        try:
            _drive(t, workload, checker, schedule, result, settle_s, on_step)
        finally:
            workload.close()
            result.acked, result.invoked, result.unknown = workload.acked, workload.invoked, workload.unknown


def _run_sim(result: RunResult, schedule: Schedule, root: Path, trace: Path, settle_s: float,
             on_step: Any, fault_ack_before_append: bool) -> None:
    from harness.sim import SimCluster
    from harness.sim_recording import record_sim

    factory = None
    if fault_ack_before_append:
        from harness.sim import consensus_module_factory

        def factory(ctx: Any) -> Any:
            ctx.fault_ack_before_append = True
            return consensus_module_factory(ctx)

    rec = None
    outcome = "failed"
    try:
        with SimCluster(members=result.members, seed=result.seed, directory=root / "cluster", service="kv",
                        member_factory=factory) as c:
            rec = record_sim(c, trace, f"sim-{result.scenario}-{result.seed}", result.scenario, result.seed)
            t = SimTarget(c, random.Random(f"nemesis:{result.seed}"))
            workload = SimKvWorkload(cluster=c)
            assert workload.inner is not None
            rec.attach_workload(workload.inner)
            checker = OnlineChecker(t)
            try:
                _drive(t, workload, checker, schedule, result, settle_s, on_step)
                outcome = "ok"
            finally:
                workload.close()
                result.acked, result.invoked = workload.acked, workload.invoked
    finally:
        if rec is not None:
            rec.close(outcome)
