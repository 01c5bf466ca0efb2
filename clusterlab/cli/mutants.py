"""``clusterlab mutants``: is every planted bug of the catalogue caught by black-box runs alone?

Exit codes: 0 every mutant hunted was caught, 1 at least one was missed, 2 bad input. The work is in
clusterlab.chaos.mutant_hunt; this module parses, prints and, with ``--golden``, supplies the
golden-regression judge (golden/verify.py lives in a layer above chaos)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from clusterlab.chaos.limits import BUDGET_S, JOBS, SEED_COUNT
from clusterlab.chaos.mutant_hunt import DEFAULT_BUDGET_S, DEFAULT_SEEDS, MutantResult, run_catalogue, summary, table
from clusterlab.cli.display import stdout_console
from clusterlab.cli.paths import bounded, output_file_error, ranged
from clusterlab.testing.mutants import MUTANTS, UnknownMutant, mutant_set


def _bad(err: Console, message: str) -> int:
    err.print(f"clusterlab mutants: {message}", markup=False, highlight=False)
    return 2


def _golden_judge(master: str | None) -> tuple[Any, Any]:
    """One Spark session for every mutant's `golden verify` (its start-up dominates otherwise; returned
    only when this call started it, for the caller to stop), and
    the judge: the goldens replayed through the mutant's service and re-run with the mutant on."""
    from clusterlab.chaos.runner import MUTANT_SERVICES
    from clusterlab.golden.store import MANIFEST, load_manifest
    from clusterlab.golden.verify import verify_goldens
    from clusterlab.harness.services import service_factory
    from clusterlab.spark.session import spark_session, spark_session_is_running

    owned = not spark_session_is_running()
    spark = spark_session(master)

    def judge(name: str) -> tuple[bool, str]:
        factory = service_factory(MUTANT_SERVICES[name]) if name in MUTANT_SERVICES else None
        # A planted service bug is a variant of some sample services: only their goldens run it (replaying
        # a counter golden through kv would diverge for the wrong reason).
        fits = MUTANTS[name].plants_in
        names = [r.name for r in load_manifest(MANIFEST) if fits(r.service)] if factory is not None else None
        try:
            report = verify_goldens(names, spark=spark, service_factory=factory, mutants=[name])
        except Exception as e:  # a re-run that dies of the bug: golden verify fails on it too
            return True, f"{type(e).__name__}: {str(e)[:200]}"
        failed = [v.name for v in report.verdicts if not v.ok]
        return bool(failed), ("diverged: " + ", ".join(failed)) if failed else "every golden matches"

    return (spark if owned else None), judge


def _cmd_mutants(args: argparse.Namespace) -> int:
    """Hunt each planted bug with black-box runs (chaos scenarios in the simulator, seed sweeps, the
    fuzz schedule; the online checker and the trace checks judge) and print mutant -> caught? -> by
    which check -> runs and time to the first detection. Exit 0 only if every one was caught."""
    # At least 140 columns: piped (CI, a log file) rich would squeeze the table to 80 and cut the names.
    out, err = stdout_console(min_width=140), Console(stderr=True, soft_wrap=True)
    if args.list:
        for mutant in MUTANTS.values():
            print(f"{mutant.name:30} {mutant.area:20} {mutant.bug}")
        return 0
    try:
        names = sorted(mutant_set(args.only), key=list(MUTANTS).index) if args.only else list(MUTANTS)
    except UnknownMutant as e:
        return _bad(err, f"--only: {e}")
    if args.json is not None and (error := output_file_error("--json", args.json)) is not None:
        return _bad(err, error)

    def on_result(r: MutantResult) -> None:
        verdict = f"caught by {r.check} ({r.by}, run {r.runs}, {r.seconds:.1f} s)" if r.caught else "MISSED"
        err.print(f"{r.name}: {verdict}", markup=False, highlight=False)

    spark = judge = None
    if args.golden:
        spark, judge = _golden_judge(args.master)
    try:
        results = run_catalogue(
            names, seeds=args.seeds, budget_s=args.budget_s, jobs=args.jobs, golden=judge, on_result=on_result
        )
    finally:
        if spark is not None:
            spark.stop()
    out.print(table(results, golden=args.golden))
    caught = sum(r.caught for r in results)
    line = f"{caught}/{len(results)} caught by black-box runs"
    if args.golden:
        line += f"; golden verify alone: {sum(bool(r.golden) for r in results)}/{len(results)}"
    out.print(line)
    for r in results:
        if r.caught and r.rerun:
            out.print(f"  {r.name}: {r.rerun}", markup=False, highlight=False, soft_wrap=True)
    if args.golden:  # which goldens diverged under each mutant
        for r in results:
            out.print(f"  {r.name}: golden verify: {r.golden_detail}", markup=False, highlight=False, soft_wrap=True)
    if args.json:
        Path(args.json).write_text(json.dumps(summary(results), indent=2))
    return 0 if caught == len(results) else 1


def register(sub: Any) -> None:
    """Add the ``mutants`` command."""
    p = sub.add_parser(
        "mutants",
        help="run the planted-bug catalogue through black-box runs; exit 0 only if all are caught",
        description=_cmd_mutants.__doc__,
    )
    p.add_argument("--only", nargs="+", metavar="NAME", default=None, help="hunt only these mutants")
    p.add_argument(
        "--seeds",
        type=bounded(SEED_COUNT),
        default=DEFAULT_SEEDS,
        help=ranged(f"seeds per scenario in the sweep (default {DEFAULT_SEEDS})", SEED_COUNT),
    )
    p.add_argument(
        "--budget-s",
        type=bounded(BUDGET_S),
        default=DEFAULT_BUDGET_S,
        help=ranged(f"wall-time budget per mutant (default {DEFAULT_BUDGET_S:g})", BUDGET_S),
    )
    p.add_argument(
        "--jobs",
        type=bounded(JOBS),
        default=min(os.cpu_count() or 1, int(JOBS.high)),
        help=ranged("mutants hunted in parallel (default: all cores)", JOBS),
    )
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument(
        "--golden",
        action="store_true",
        help="add a column: does `clusterlab golden verify` alone catch each mutant (starts Spark)",
    )
    p.add_argument("--master", default=None, help="Spark master for --golden (default local[*])")
    p.add_argument("--list", action="store_true", help="list the catalogue and exit")
    p.set_defaults(func=_cmd_mutants)
