"""``clusterlab run SCENARIO`` (the main job) and ``clusterlab scenarios``.

``run`` starts a local cluster (or the simulator with ``--sim``), drives the workload through the
scenario's seeded schedule (its progress on stderr: a bar on a terminal, else a status line every few
seconds), heals, requires progress, stops every process, then
verifies the recorded trace: the local verdict (the embedded DuckDB engine) at once, RUN/check.json and
the HTML report RUN/report.html; ``--engine spark`` (implied by ``--master``/``--remote``) also runs
the Spark check of the same SQL (on the warm server of ``clusterlab spark start`` when it is up);
``--no-spark`` skips all but the local verdict. Exit 0: every check
passed; 1: a violation (or no progress); 2: bad arguments; 3: the trace is INCOMPLETE, 4: CORRUPT
(not judged; docs/trace-schema.md, "Verdicts")."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from clusterlab.chaos.limits import CLIENTS, DURATION_S, MEMBERS, RATE, SEED
from clusterlab.chaos.runner import (
    RunArgumentError,
    RunProgress,
    RunResult,
    check_dedupe,
    check_member_process,
    check_service,
    run_clients,
    run_scenario,
    scenario_schedule,
)
from clusterlab.chaos.scenarios import SCENARIOS, Scenario
from clusterlab.chaos.schedule import load_schedule_option
from clusterlab.chaos.workload import SERVICES
from clusterlab.chaos.workload_api import import_from_cwd
from clusterlab.cli.display import StatusDisplay, stdout_console
from clusterlab.cli.paths import (
    bounded,
    output_file_error,
    ranged,
    services_error,
    unnamed_service_error,
    writable_directory_error,
)
from clusterlab.harness.completeness import EXIT_FAIL, EXIT_PASS, exit_code
from clusterlab.testing.mutants import UnknownMutant, misplanted, mutant_set


def _fmt_times(values: list[float]) -> str:
    return ", ".join(f"{v:.2f} s" for v in values) if values else "-"


def _bad(err: Console, message: str) -> int:
    err.print(f"clusterlab run: {message}", markup=False, highlight=False)
    return 2


def _metrics_table(result: Any) -> Table:
    t = Table(title="run")
    t.add_column("measure")
    t.add_column("value", overflow="fold")
    ops = ", ".join(f"{k} {v}" for k, v in sorted(result.op_counts.items()))
    t.add_row(
        "ops acknowledged / invoked / unknown",
        f"{result.acked} / {result.invoked} / {result.unknown}" + (f"  ({ops})" if ops else ""),
    )
    lin = result.verdict.linearizability if result.verdict is not None else None
    if result.clients > 1:
        t.add_row("clients / linearizability", f"{result.clients} / {lin.verdict if lin is not None else '-'}")
        t.add_row("ops judged linearizable (per key)", str(result.model_checked))
    else:
        t.add_row("replies checked against the model", str(result.model_checked))
    t.add_row("failover: leader fault -> new leader", _fmt_times(result.elections_s))
    t.add_row("failover: leader fault -> first op acked", _fmt_times(result.failovers_s))
    t.add_row("recovery: fault healed -> members caught up", _fmt_times(result.recoveries_s))
    t.add_row("final heal -> converged", "-" if result.recovery_s is None else f"{result.recovery_s:.2f} s")
    t.add_row("wall time", f"{result.elapsed_s:.1f} s")
    return t


class _BadArgument(Exception):
    """An argument of ``clusterlab run`` that cannot run: its one-line reason (exit 2)."""


def _cmd_run(args: argparse.Namespace) -> int:
    """Run one scenario, verify its trace, print the verdicts; exit 0 pass / 1 violation / 2 bad arguments /
    3 INCOMPLETE trace / 4 CORRUPT trace (not judged)."""

    out, err = stdout_console(), Console(stderr=True, soft_wrap=True)
    try:  # everything checked now, not after a run of minutes
        spec = _checked_scenario(args)
        mutants = _checked_service_and_bugs(args, spec)
        steps = _checked_schedule_and_outputs(args, spec)
    except _BadArgument as e:
        return _bad(err, str(e))

    where = "simulator" if args.sim else "local processes"
    out.print(f"[bold]{spec.name}[/] seed {args.seed} on {args.members} members ({where}): {spec.summary}")
    result = _run_with_progress(args, spec, mutants, steps)
    result.write_summary(result.run_dir)  # RUN/chaos.json: what clusterlab shrink replays

    _print_run(out, result)
    ok = result.ok
    # A run error (no progress, a crash) is a FAIL; an unjudged trace is INCOMPLETE/CORRUPT (exit 3/4).
    statuses = ["FAIL" if result.error or result.verdict is None else result.verdict.status]
    spark: dict[str, Any] | None = None
    if (report := _check_and_report_trace(args, result, out)) is not None:
        spark = report.to_json()
        ok = ok and report.ok
        statuses.append(report.status)
    out.print(f"trace: {result.trace_dir}", highlight=False, soft_wrap=True)
    out.print(f"re-run: {result.rerun_command()}", markup=False, highlight=False, soft_wrap=True)
    if args.json:
        Path(args.json).write_text(json.dumps({**result.summary(), "spark": spark}, indent=2, default=str) + "\n")
    code = _run_exit_code(ok, statuses)
    verdict = ("PASS", "FAIL", "", "INCOMPLETE", "CORRUPT")[code]
    out.print(f"[bold {'green' if ok else 'red'}]{verdict}[/]")
    return code


def _run_with_progress(
    args: argparse.Namespace, spec: Scenario, mutants: frozenset[str], steps: list[dict[str, Any]] | None
) -> RunResult:
    """Run the checked scenario with its progress on stderr; the run's result."""
    with StatusDisplay("clusterlab run") as status:

        def on_progress(p: RunProgress) -> None:
            status.update(min(p.target_s, p.schedule_s), p.schedule_s, p.describe())

        result = run_scenario(
            spec.name,
            args.seed,
            members=args.members,
            duration_s=args.duration,
            sim=args.sim,
            directory=args.dir,
            service=args.service,
            rate=args.rate,
            on_progress=on_progress,
            fault_ack_before_append=args.fault_ack_before_append,
            clients=args.clients,
            fault_stale_read=args.fault_stale_read,
            mutants=mutants,
            schedule=steps,
            services=args.services,
            workload=args.workload,
            determinism=True,
            tripwire=args.tripwire,
            buggify=args.buggify,
            member_process=args.member_process,
        )
        status.update(status.total or 1, status.total or 1, f"stopped after {result.elapsed_s:.1f} s; verified")
    return result


def _print_run(out: Console, result: RunResult) -> None:
    """The run's schedule, its measures, its error if any and the local verdict's table."""
    out.print("schedule: " + "; ".join(result.schedule))
    out.print(_metrics_table(result))
    if result.error:
        out.print(f"[red]run failed:[/] {result.error}", highlight=False)
        if result.error.startswith("SafetyViolation") and result.verdict is not None and result.verdict.failed():
            out.print(
                "  (found while the run ran, at what members had reported by then; the table below judges the "
                "whole trace and names each check's first violation)",
                highlight=False,
            )
    if result.verdict is not None:
        out.print(result.verdict.table())


def _check_and_report_trace(args: argparse.Namespace, result: RunResult, out: Console) -> Any | None:
    """Write check.json and the HTML report of the run's trace (on Spark too, for ``--engine spark``,
    ``--master`` or ``--remote``); the check report, or None with ``--no-spark`` or no trace."""
    if args.no_spark or not result.trace_dir.is_dir():
        return None
    from clusterlab.golden.finish import check_and_report

    engine = "spark" if args.engine == "spark" or args.master or args.remote else "duckdb"
    if engine == "spark":
        from clusterlab.cli.check import spark_remote

        out.print("Spark check (the same SQL checks, on Spark) ...")
        remote = spark_remote(args.remote, args.master)
        report, _ = check_and_report(result.trace_dir, master=args.master, console=out, engine="spark", remote=remote)
    else:  # the local verdict above is this engine's: write check.json and the report, no second table
        report, _ = check_and_report(result.trace_dir, console=out, show=False)
    return report


def _run_exit_code(ok: bool, statuses: list[str]) -> int:
    """The exit code: PASS when ``ok``, else the statuses' code, a FAIL at least."""
    code = exit_code(statuses) if not ok else EXIT_PASS
    if not ok and code == EXIT_PASS:
        code = EXIT_FAIL
    return code


def _checked_scenario(args: argparse.Namespace) -> Scenario:
    """The scenario ``run`` names, runnable at this size on this driver."""
    spec = SCENARIOS.get(args.scenario)
    if spec is None:
        raise _BadArgument(f"unknown scenario {args.scenario!r}; known: {', '.join(SCENARIOS)}")
    if args.members not in spec.sizes:
        sizes = " or ".join(map(str, spec.sizes))
        raise _BadArgument(f"scenario {spec.name} runs on {sizes} members, not {args.members}")
    if args.sim and spec.real_only:
        raise _BadArgument(
            f"scenario {spec.name} needs real processes (it uses a fault the simulator lacks); drop --sim"
        )
    if not args.sim and spec.sim_only:
        raise _BadArgument(f"scenario {spec.name} runs in the simulator only; add --sim")
    if args.buggify and not args.sim:
        raise _BadArgument("--buggify: the fault points live in the simulator's drivers; add --sim")
    if args.member_process != "split" and args.sim:
        raise _BadArgument("--member-process: the simulator runs no processes; drop --sim")
    return spec


def _checked_service_and_bugs(args: argparse.Namespace, spec: Scenario) -> frozenset[str]:
    """The service, workload and clients checked (``args.service`` set from ``--services``); the mutants."""
    if args.services is not None:
        error = services_error(args.services, None if args.workload else SERVICES)
        if error is not None:
            raise _BadArgument(error)
        args.service = args.services.split(",")[0].strip()
    elif (error := unnamed_service_error(args.service, args.workload)) is not None:
        raise _BadArgument(error)
    args.service = args.service or "kv"
    import_from_cwd()
    try:
        check_service(args.service, args.workload)
        check_dedupe(spec, args.service, args.workload)
    except ValueError as e:
        raise _BadArgument(str(e)) from None
    if args.fault_stale_read and args.service != "kv":
        raise _BadArgument(f"--fault-stale-read plants a bug in the kv service, not {args.service!r}")
    try:
        mutants = mutant_set(args.mutant)
    except UnknownMutant as e:
        raise _BadArgument(f"--mutant: {e}") from None
    if (problem := misplanted(mutants, args.service)) is not None:
        raise _BadArgument(f"--{problem}")
    try:
        run_clients(args.service, args.workload, args.clients)
    except ValueError as e:
        raise _BadArgument(f"--clients: {e}") from None
    return mutants


def _checked_schedule_and_outputs(args: argparse.Namespace, spec: Scenario) -> list[dict[str, Any]] | None:
    """The explicit schedule's steps (None: the seed's), the run's schedule fit for its member processes,
    and the output paths writable."""
    if args.dir is not None:
        if (error := writable_directory_error("--dir", args.dir)) is not None:
            raise _BadArgument(error)
        if Path(args.dir).is_dir() and any(Path(args.dir).iterdir()):
            raise _BadArgument(f"--dir {args.dir} is not empty; give a new or empty directory")
    steps = None
    if args.schedule is not None:
        try:
            steps = load_schedule_option(args.schedule)
        except ValueError as e:
            raise _BadArgument(f"--schedule: {e}") from None
    if args.json is not None and (error := output_file_error("--json", args.json)) is not None:
        raise _BadArgument(error)
    try:
        duration = spec.default_duration_s if args.duration is None else args.duration
        plan = scenario_schedule(spec, args.seed, duration, sim=args.sim, members=args.members, schedule=steps)
        check_member_process(spec, plan, args.member_process)
    except RunArgumentError as e:
        raise _BadArgument(str(e)) from None
    return steps


def _cmd_scenarios(args: argparse.Namespace) -> int:
    """List the named scenarios."""

    t = Table(title="chaos scenarios (clusterlab run NAME)")
    t.add_column("name", no_wrap=True)
    t.add_column("members")
    t.add_column("drivers")
    t.add_column("default duration")
    t.add_column("what it does", overflow="fold")
    for s in SCENARIOS.values():
        t.add_row(
            s.name,
            ", ".join(map(str, s.sizes)),
            "real" if s.real_only else "sim" if s.sim_only else "real, sim",
            f"{s.default_duration_s:g} s",
            s.summary,
        )
    stdout_console().print(t)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` and ``scenarios`` to the CLI."""

    p = sub.add_parser(
        "run",
        help="the main job: run a chaos scenario on a local cluster and verify the trace",
        description=_cmd_run.__doc__,
    )
    p.add_argument("scenario", metavar="SCENARIO", help="a scenario name (clusterlab scenarios lists them)")
    _add_run_shape(p)
    _add_workload(p)
    _add_outputs(p)
    _add_checks_and_processes(p)
    _add_planted_bugs(p)
    p.set_defaults(func=_cmd_run)
    s = sub.add_parser("scenarios", help="list the chaos scenarios", description=_cmd_scenarios.__doc__)
    s.set_defaults(func=_cmd_scenarios)


def _add_run_shape(p: argparse.ArgumentParser) -> None:
    """``run``'s seed, size, length and driver."""
    p.add_argument(
        "--seed",
        type=bounded(SEED),
        default=1,
        help=ranged("seed of the schedule, victims and workload (default 1)", SEED),
    )
    p.add_argument(
        "--members",
        type=bounded(MEMBERS),
        default=3,
        help=ranged("cluster size (3; partition scenarios also 5)", MEMBERS),
    )
    p.add_argument(
        "--duration",
        type=bounded(DURATION_S),
        default=None,
        help=ranged("seconds of faults and workload before the final heal (default: the scenario's)", DURATION_S),
    )
    p.add_argument("--sim", action="store_true", help="run in the deterministic simulator instead of processes")


def _add_workload(p: argparse.ArgumentParser) -> None:
    """``run``'s service, workload, clients and schedule."""
    p.add_argument(
        "--service",
        default=None,
        metavar="NAME|MODULE:FACTORY",
        help=f"the service: {', '.join(SERVICES)} (with their workloads; default kv) or package.module:factory "
        "(a ClusteredService; give --workload too)",
    )
    p.add_argument(
        "--workload",
        default=None,
        metavar="MODULE:FACTORY",
        help="the service's workload, package.module:factory (a ServiceWorkload; docs/your-service.md)",
    )
    p.add_argument(
        "--services",
        default=None,
        metavar="KINDS",
        help="several clustered services per member, e.g. kv,counter (service ids 0, 1, ...); the workload "
        "drives the first, the others apply every entry (replaces --service)",
    )
    p.add_argument(
        "--rate",
        type=bounded(RATE),
        default=None,
        help=ranged("ops per second offered (default 200 real, 100 sim)", RATE),
    )
    p.add_argument(
        "--clients",
        type=bounded(CLIENTS),
        default=None,
        help=ranged(
            "concurrent clients, each its own session; their history is checked for linearizability "
            "(default 3, or the most the workload runs if fewer)",
            CLIENTS,
        ),
    )
    p.add_argument(
        "--schedule",
        default=None,
        metavar="JSON|FILE",
        help="run these steps instead of the seed's schedule: a JSON list such as "
        '\'[{"quiet": 0.5}, {"nemesis": "kill", "seconds": 1, "who": "leader"}]\' or a file holding one '
        "(what clusterlab shrink prints)",
    )


def _add_outputs(p: argparse.ArgumentParser) -> None:
    """Where ``run`` writes, and which engine judges check.json."""
    p.add_argument("--dir", default=None, help="run directory (default: a fresh temp dir, kept)")
    p.add_argument(
        "--no-spark",
        action="store_true",
        help="skip check.json, the HTML report and any Spark check (the local verdict still runs)",
    )
    p.add_argument(
        "--engine",
        choices=("duckdb", "spark"),
        default="duckdb",
        help="who writes check.json: duckdb (default, the local verdict's engine) or spark (also the Spark verdict)",
    )
    p.add_argument("--master", default=None, help="Spark master (implies --engine spark)")
    p.add_argument("--remote", default=None, help="Spark Connect URL sc://HOST:PORT (implies --engine spark)")
    p.add_argument("--json", default=None, help="also write the run's summary and verdicts here")


def _add_checks_and_processes(p: argparse.ArgumentParser) -> None:
    """``run``'s tripwires, member processes and the simulator's fault points."""
    p.add_argument(
        "--tripwire",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="report wall-clock reads, global random, OS randomness, threads and role-dependent state changes "
        "inside the service's callbacks, by the user's file:line (the `tripwire` check; default on)",
    )
    p.add_argument(
        "--member-process",
        choices=("split", "single"),
        default="split",
        help="real members as a node and a service process each (split, the default) or as one process "
        "(single: node and services on one thread, as Aeron's consensus module and service container in one JVM)",
    )
    p.add_argument(
        "--buggify",
        action="store_true",
        help="with --sim: switch on the simulator's seeded fault points (a service lagging its node, a member "
        "stalling for part of an election timeout: clusterlab.testing.buggify)",
    )


def _add_planted_bugs(p: argparse.ArgumentParser) -> None:
    """``run``'s test-only switches for planted bugs."""
    p.add_argument(
        "--fault-ack-before-append",
        action="store_true",
        help="test only: the deliberately broken build (followers acknowledge before appending)",
    )
    p.add_argument(
        "--fault-stale-read",
        action="store_true",
        help="test only: a planted stale read (kv gets answered from a per-session cache blind to other clients)",
    )
    p.add_argument(
        "--mutant",
        action="append",
        default=[],
        metavar="NAME",
        help="test only: switch on a planted bug of the catalogue (repeatable; `clusterlab mutants --list`)",
    )
