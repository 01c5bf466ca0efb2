"""``clusterlab demo``: a guided walk-through on SimCluster, recorded for ``clusterlab check``.

The main job is ``clusterlab run``.

Start 3 members running the key-value service, drive it through a client (the kv workload of the
chaos runs: puts, gets, deletes, compare-and-sets, every reply checked against the model), take a
snapshot, kill the leader (the client follows the new one), keep going, truncate the killed member's
recording while it is down, restart it, then check: election safety, log matching, monotonic commit,
the same entry and state digest on every member at every log position, contiguous application, and
every key read back holding what was acknowledged.

The run is recorded (``--dir``, default a fresh temporary directory): ``clusterlab check DIR`` judges
it from the trace as it judges any run, and ``clusterlab trace`` reads it.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from clusterlab.chaos.target import converged
from clusterlab.chaos.workload import SimWorkload
from clusterlab.core.consensus.context import SECOND
from clusterlab.harness.invariants import SafetyChecker, SafetyViolation
from clusterlab.harness.sim import SimCluster, SimTimeout
from clusterlab.harness.sim_recording import SimRecording, record_sim
from clusterlab.harness.simnet import NetworkConfig
from rich.console import Console
from rich.table import Table

RUN_DIR = "run"  # the recording's directory under --dir


def run_demo(seed: int = 1, members: int = 3, directory: str | None = None) -> int:
    """Run the scenario, recorded under ``directory``; print a verdict table; return 0 on success, 1 on
    a violation."""
    console = Console()
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="clusterlab-demo-"))
    checker = SafetyChecker()
    steps: list[tuple[str, str]] = []
    started = time.perf_counter()
    network = NetworkConfig(loss_probability=0.01, duplicate_probability=0.01, reorder_probability=0.01)
    outcome = "failed"
    rec: SimRecording | None = None
    try:
        with SimCluster(members=members, seed=seed, directory=root, network=network, service="kv") as c:
            rec = record_sim(c, root / RUN_DIR, f"demo-s{seed}-n{members}", "demo", seed)
            # Resending (tagged) requests: the kv store applies once a request the lossy network duplicated.
            workload = SimWorkload(service="kv", seed=seed, rate=200.0, cluster=c, resends=True, recording=rec)
            try:
                _Walk(c, workload, checker, steps).run()
                outcome = "ok"
            finally:
                workload.close()
    except (SafetyViolation, SimTimeout, AssertionError) as e:
        console.print(f"[bold red]FAILED[/]: {e}")
        console.print(f"re-run: clusterlab demo --seed {seed} --members {members}")
    finally:
        if rec is not None:  # after the cluster: its final stops are in the trace
            rec.close(outcome, extra={"workload": {"service": "kv", "clients": 1, "client_resends": True}})
    if outcome == "ok":
        keys = sum(1 for op in workload.history if op.final and op.outcome == "ok")
        console.print(_steps_table(steps, members, seed))
        seconds = f"{c.now_ns / SECOND:.1f} / {time.perf_counter() - started:.1f}"
        console.print(_verdict_table(checker, workload, keys, c.message_digest(), seconds))
    if rec is not None:
        console.print(f"trace: {root / RUN_DIR} (clusterlab check {root / RUN_DIR})")
    return 0 if outcome == "ok" else 1


@dataclass
class _Walk:
    """The scripted walk: each step's line goes to ``steps`` once the online checks pass after it."""

    c: SimCluster
    workload: SimWorkload
    checker: SafetyChecker
    steps: list[tuple[str, str]] = field(default_factory=list)

    def step(self, what: str) -> None:
        self.checker.check(self.c)
        self.steps.append((f"{self.c.now_ns / SECOND:7.3f}s", f"{what} — {self.c.status_line()}"))

    def write(self, n: int) -> None:
        """``n`` rounds of the workload 5 ms apart, then half a second for the replies."""
        for _ in range(n):
            self.workload.step()
            self.c.run_for(SECOND // 200)
        self.c.run_for(SECOND // 2)
        self.workload.step()

    def run(self) -> None:
        c, workload = self.c, self.workload
        leader = c.await_leader(30 * SECOND)
        self.step(f"leader elected: member {leader}")
        self.write(150)
        self.step(f"client invoked {workload.invoked} ops, {workload.acked} acknowledged")
        c.control("snapshot")
        c.run_for(SECOND // 2)
        self.step(f"snapshot taken on {sum(c.member(i).snapshot_count for i in c.members_alive())} members")
        c.kill(leader)
        if c.member_count == 1:
            self.restart_the_only_member(leader)
        else:
            self.fail_over_and_rebuild(leader)
        self.checker.check_committed_prefix_at_end(c)
        workload.read_back(30 * SECOND)
        self.step(f"every key read back: {workload.acked} of {workload.invoked} ops acknowledged")

    def restart_the_only_member(self, member: int) -> None:
        """One member: killed, it restarts from its own disk (snapshot and log) and leads again."""
        self.c.restart(member)
        self.c.await_leader(30 * SECOND)
        self.step(f"killed and restarted the only member {member}: it leads again from its snapshot and log")
        self.write(150)
        self.step(f"client reconnected: {self.workload.acked} ops acknowledged")

    def fail_over_and_rebuild(self, leader: int) -> None:
        """The killed leader's successor takes the client; the killed member, its recording truncated
        to nothing while it is down, rebuilds from the new leader's snapshot and log."""
        c = self.c
        new_leader = c.await_leader(30 * SECOND)
        self.step(f"killed leader {leader}; new leader {new_leader}")
        self.write(150)
        self.step(f"client followed the new leader: {self.workload.acked} ops acknowledged")
        if c.member_count > 3:
            follower = next(i for i in c.members_alive() if i != new_leader)
            c.isolate(follower)
            self.step(f"isolated follower {follower}")
        c.truncate_recording(leader, 0)
        self.step(f"truncated member {leader}'s recording to 0 while it is down")
        c.restart(leader)
        c.heal()
        self.write(50)
        c.await_condition(lambda: converged(c), 30 * SECOND, "convergence")
        c.run_for(SECOND)
        self.step(f"restarted member {leader} (snapshot + catch-up); all members converged")


def _steps_table(steps: list[tuple[str, str]], members: int, seed: int) -> Table:
    table = Table(title=f"clusterlab demo — {members} members, seed {seed} (simulator)")
    table.add_column("sim time")
    table.add_column("step")
    for t, what in steps:
        table.add_row(t, what)
    return table


def _verdict_table(checker: SafetyChecker, workload: SimWorkload, keys: int, digest: str, seconds: str) -> Table:
    """What was checked and on how much: each row is a check the run passed."""
    verdict = Table(title="verdict")
    verdict.add_column("check")
    verdict.add_column("result")
    verdict.add_row("election safety (≤ 1 leader per term)", f"ok ({len(checker.leaders_by_term)} terms)")
    verdict.add_row("log matching (committed prefixes identical)", "ok")
    verdict.add_row("committed prefix (the committed log on every member)", f"ok ({len(checker.committed)} bytes)")
    verdict.add_row("monotonic commit", "ok")
    verdict.add_row(
        "agreement (entry + state digest at every position)",
        f"ok ({checker.applied_rows_checked} applied rows, {len(checker.agreement.states)} positions)",
    )
    verdict.add_row("contiguity (per member incarnation)", "ok")
    verdict.add_row(
        "every reply as the model allows; every key read back",
        f"ok ({workload.acked} of {workload.invoked} acked, {keys} keys)",
    )
    verdict.add_row("message digest", digest[:16])
    verdict.add_row("simulated / real seconds", seconds)
    return verdict
