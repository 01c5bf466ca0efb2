"""``clusterlab golden bless|verify|regenerate|list|coverage``: golden traces (golden/traces/).

Exit codes: 0 pass, 1 a divergence (verify), a failed recipe (regenerate) or a must-cover item no golden
exercises (coverage, verify --coverage), 2 bad input (no such run
or golden, a corrupt manifest); ``bless`` refuses anything but a PASS: 1 for a run that fails its
checks, 3 for an INCOMPLETE run, 4 for a CORRUPT one (docs/trace-schema.md, "Verdicts").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from clusterlab.chaos.limits import DURATION_S
from clusterlab.cli.display import stdout_console
from clusterlab.cli.paths import bounded, ranged, writable_directory_error
from clusterlab.golden import regenerate
from clusterlab.golden.store import MANIFEST, TRACES, GoldenError, bless, golden_names, load_golden, load_manifest
from clusterlab.harness.completeness import EXIT_CORRUPT, EXIT_FAIL, EXIT_INCOMPLETE, exit_code


def _err(message: str) -> int:
    print(f"clusterlab golden: {message}", file=sys.stderr)
    return 2


def _cmd_bless(args: argparse.Namespace) -> int:
    """Store RUN as golden NAME (and its recipe in goldens.json)."""

    traces = Path(args.traces) if args.traces else TRACES
    if (error := writable_directory_error("--dir", traces)) is not None:
        return _err(error)
    try:
        g = bless(args.run, args.name, traces=traces, duration_s=args.duration, summary=args.summary, force=args.force)
    except GoldenError as e:
        code = _err(str(e))
        return {"FAIL": EXIT_FAIL, "INCOMPLETE": EXIT_INCOMPLETE, "CORRUPT": EXIT_CORRUPT}.get(e.status or "", code)
    size = sum(p.stat().st_size for p in g.directory.rglob("*") if p.is_file())
    stdout_console(highlight=False).print(
        f"blessed {g.name} ({g.driver}, {g.info['scenario']} seed {g.info['seed']}): "
        f"{g.applied.num_rows} positions, {size / 1024:.0f} KiB in {g.directory}"
    )
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    """Replay every golden (and re-run the simulator ones); diff with Spark. With ``--coverage`` also
    what ``golden coverage`` reports, measured on those same runs; over the whole set (no NAMEs) a
    must-cover item no golden exercises fails the command too."""
    # Imported here: golden.verify pulls in pyspark (~0.3 s), which no other command needs.
    from clusterlab.cli.paths import output_file_error
    from clusterlab.cli.spark_progress import SparkProgress
    from clusterlab.golden.coverage import print_coverage
    from clusterlab.golden.verify import print_report, verify_goldens

    if args.json is not None and (error := output_file_error("--json", args.json)) is not None:
        return _err(error)  # checked before the replays, not after
    traces = Path(args.traces) if args.traces else TRACES
    err = Console(stderr=True, highlight=False)
    try:
        with SparkProgress():  # the Spark step's jobs, stages and tasks on stderr
            report = verify_goldens(
                args.names,
                traces=traces,
                master=args.master,
                rerun=not args.no_rerun,
                on_progress=lambda line: err.print(line, markup=False),
                coverage=args.coverage,
            )
    except GoldenError as e:
        return _err(str(e))
    print_report(report)
    covered = True
    if report.coverage is not None:
        print_coverage(report.coverage)
        if args.names:  # a subset need not exercise everything: shown, not judged
            err.print("coverage of the goldens named only: not judged against the must-cover items", markup=False)
        else:
            covered = report.coverage.ok
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2, default=str))
    if not report.verdicts:
        return EXIT_FAIL  # nothing verified is never a pass
    code = exit_code(v.verdict for v in report.verdicts)  # a divergence 1, else a damaged golden 4 or 3
    return code if code != 0 or covered else EXIT_FAIL


def _cmd_coverage(args: argparse.Namespace) -> int:
    """What each golden exercises (election states and transitions, message and log entry types,
    service callbacks, core lines); exit 1 if a must-cover item is exercised by no golden."""
    from clusterlab.cli.paths import output_file_error
    from clusterlab.golden.coverage import candidate_report, coverage_report, print_coverage

    if args.json is not None and (error := output_file_error("--json", args.json)) is not None:
        return _err(error)
    traces = Path(args.traces) if args.traces else TRACES
    err = Console(stderr=True, highlight=False)
    progress = None if args.quiet else (lambda line: err.print(line, markup=False))
    try:
        if args.candidates:
            report = candidate_report(args.names, on_progress=progress)
        else:
            report = coverage_report(args.names, traces=traces, on_progress=progress)
    except GoldenError as e:
        return _err(str(e))
    print_coverage(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2))
    return 0 if report.ok else 1


def _cmd_regenerate(args: argparse.Namespace) -> int:
    """Re-run each recipe and bless it (after an intended change of bytes or digests)."""

    return regenerate.main([*args.names, *(["--select"] if args.select else [])])


def _cmd_list(args: argparse.Namespace) -> int:
    """The goldens and their recipes."""

    traces = Path(args.traces) if args.traces else TRACES
    if not traces.is_dir():
        return _err(f"no goldens' directory {traces}")
    try:
        recipes = {r.name: r for r in load_manifest(traces / MANIFEST.name)}
    except GoldenError as e:
        return _err(str(e))
    t = Table(title=f"goldens in {traces}")
    for col in (
        "name",
        "driver",
        "scenario",
        "seed",
        "members",
        "service (workload)",
        "positions",
        "KiB",
        "blessed from",
    ):
        t.add_column(col)
    for name in sorted(set(golden_names(traces)) | set(recipes)):
        try:
            g = load_golden(name, traces)
        except GoldenError as e:
            r = recipes.get(name)
            t.add_row(name, r.driver if r else "?", r.scenario if r else "?", "", "", "", "", "", f"[red]{e}[/]")
            continue
        size = sum(p.stat().st_size for p in g.directory.rglob("*") if p.is_file())
        t.add_row(
            name,
            g.driver,
            g.info["scenario"],
            str(g.info["seed"]),
            str(g.info["members"]),
            str(g.info.get("service", "kv")) + (f" ({g.info['workload']})" if g.info.get("workload") else ""),
            str(g.applied.num_rows),
            f"{size / 1024:.0f}",
            str(g.info.get("git_commit"))[:12],
        )
    stdout_console(min_width=120).print(t)
    return 0


def _dir_option(p: argparse.ArgumentParser) -> None:
    """``--dir``: where the goldens are (a project's own, e.g. ``goldens/``; default clusterlab's)."""
    p.add_argument(
        "--dir",
        dest="traces",
        default=None,
        help="the goldens' directory (default: clusterlab's own golden/traces/; a project keeps its own)",
    )
    p.add_argument("--traces", dest="traces", default=None, help=argparse.SUPPRESS)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``golden`` to the CLI."""
    p = sub.add_parser("golden", help="golden traces: bless a run, verify today's code against every golden")
    gs = p.add_subparsers(dest="golden_command", metavar="SUBCOMMAND", required=True)

    b = gs.add_parser("bless", help="store a finished, passing run as a golden trace")
    b.add_argument("run", metavar="RUN", help="the run's trace directory (with run.json and log/)")
    b.add_argument("--name", required=True, help="golden name (its directory under --dir)")
    b.add_argument(
        "--duration",
        type=bounded(DURATION_S),
        default=None,
        help=ranged("the scenario duration of the recipe (default: the run's, from its chaos.json)", DURATION_S),
    )
    b.add_argument("--summary", default="", help="one line saying what the golden covers")
    b.add_argument("--force", action="store_true", help="replace an existing golden of that name")
    _dir_option(b)
    b.set_defaults(func=_cmd_bless)

    v = gs.add_parser("verify", help="replay/re-run goldens with today's code and diff with Spark")
    v.add_argument("names", nargs="*", metavar="NAME", help="goldens to verify (default: all)")
    v.add_argument("--master", default=None, help="Spark master (default local[*])")
    v.add_argument("--no-rerun", action="store_true", help="skip re-running simulator goldens (replay only)")
    v.add_argument("--json", default=None, help="write the report as JSON here")
    v.add_argument(
        "--coverage",
        action="store_true",
        help="also report what the goldens exercise (as `golden coverage`), measured on verify's own runs; "
        "exit 1 if a must-cover item is exercised by no golden",
    )
    _dir_option(v)
    v.set_defaults(func=_cmd_verify)

    r = gs.add_parser("regenerate", help="re-run every recipe in goldens.json and bless it anew")
    r.add_argument("names", nargs="*", metavar="NAME", help="goldens to regenerate (default: all)")
    r.add_argument(
        "--select",
        action="store_true",
        help="choose the simulator goldens anew by coverage from golden/candidates.py (NAMEs: only these candidates)",
    )
    r.set_defaults(func=_cmd_regenerate)

    c = gs.add_parser(
        "coverage",
        help="what each golden exercises (election states/transitions, message/entry types, service callbacks); "
        "exit 1 if a must-cover item is exercised by no golden",
    )
    c.add_argument("names", nargs="*", metavar="NAME", help="goldens (or candidates) to measure (default: all)")
    c.add_argument("--candidates", action="store_true", help="measure the candidate runs (golden/candidates.py)")
    c.add_argument("--json", default=None, help="write the report as JSON here")
    c.add_argument("--quiet", action="store_true", help="no progress lines")
    _dir_option(c)
    c.set_defaults(func=_cmd_coverage)

    ls = gs.add_parser("list", help="list goldens and their recipes")
    _dir_option(ls)
    ls.set_defaults(func=_cmd_list)
