"""Re-create goldens from their recipes in ``golden/traces/goldens.json``: run each recipe's scenario
(simulator or real processes) with its seed, size and duration, then bless the run under the same
name, replacing the old golden. After a change that legitimately alters wire bytes, framing or the
state digest:

    python -m clusterlab.golden.regenerate            # every golden
    python -m clusterlab.golden.regenerate NAME ...   # some
    clusterlab golden regenerate [NAME...] # the same

Choosing the set (``--select``): every candidate of :mod:`clusterlab.golden.candidates` is run in the
simulator under coverage.py and measured (:mod:`clusterlab.golden.coverage`); a greedy set cover keeps
the smallest set covering every election state and transition, log entry type and service callback
(then the most message types and core lines) within a budget of message rows; the chosen runs are blessed,
simulator goldens not chosen are removed, and the real-process goldens are kept (they pin the IO
paths, which the in-process coverage cannot see). ``golden/traces/selection.json`` records why each
golden was kept:

    python -m clusterlab.golden.regenerate --select [--budget MESSAGE_ROWS] [--min-lines N]

A real-process run is not reproducible exactly, so a failed one (its checks or its run) is retried a
few times before the recipe is reported as failed; a simulator run is exact and tried once.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from clusterlab.chaos.runner import run_scenario
from clusterlab.golden.store import (
    MANIFEST,
    TRACES,
    Golden,
    GoldenError,
    Recipe,
    bless,
    golden_names,
    load_manifest,
    save_manifest,
)

if TYPE_CHECKING:
    from clusterlab.golden.coverage import Measurement

REAL_ATTEMPTS = 3
MAX_GOLDEN_BYTES = 1024 * 1024  # each golden stays small enough for git


def regenerate(
    recipe: Recipe,
    *,
    traces: Path = TRACES,
    manifest: Path = MANIFEST,
    say: Callable[[str], None] = print,
) -> Golden:
    """Run ``recipe`` and bless the run as ``recipe.name`` (replacing it). GoldenError if no attempt
    gives a blessable run."""

    attempts = 1 if recipe.driver == "sim" else REAL_ATTEMPTS
    last = ""
    for attempt in range(1, attempts + 1):
        work = Path(tempfile.mkdtemp(prefix=f"clusterlab-regen-{recipe.name}-"))
        try:
            say(
                f"{recipe.name}: running {recipe.scenario} seed {recipe.seed} on {recipe.members} members "
                f"({recipe.driver}{', attempt ' + str(attempt) if attempts > 1 else ''})"
            )
            r = run_scenario(
                recipe.scenario,
                seed=recipe.seed,
                members=recipe.members,
                duration_s=recipe.duration_s,
                sim=recipe.driver == "sim",
                directory=work,
                clients=1,  # the shipped goldens' workload: one client
                service=recipe.service,
            )
            if not r.ok:
                last = r.failure_message()
                say(f"{recipe.name}: the run failed: {last}")
                continue
            try:
                g = bless(
                    r.trace_dir,
                    recipe.name,
                    traces=traces,
                    duration_s=recipe.duration_s,
                    summary=recipe.summary,
                    force=True,
                    manifest=manifest,
                )
            except GoldenError as e:
                last = str(e)
                say(f"{recipe.name}: cannot bless: {e}")
                continue
            size = sum(p.stat().st_size for p in g.directory.rglob("*") if p.is_file())
            say(f"{recipe.name}: blessed {g.applied.num_rows} positions, {size / 1024:.0f} KiB")
            return g
        finally:
            shutil.rmtree(work, ignore_errors=True)
    raise GoldenError(f"golden {recipe.name}: no blessable run in {attempts} attempt(s): {last}")


def regenerate_all(
    names: Sequence[str] = (), *, traces: Path = TRACES, manifest: Path = MANIFEST, say: Callable[[str], None] = print
) -> list[str]:
    """Regenerate the named recipes (default all); returns the names that failed."""
    recipes = load_manifest(manifest)
    if not recipes:
        raise GoldenError(f"{manifest}: no recipes")
    by_name = {r.name: r for r in recipes}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise GoldenError(f"no recipe named {', '.join(unknown)} in {manifest} (known: {', '.join(by_name)})")
    failed = []
    for r in [by_name[n] for n in names] if names else recipes:
        try:
            regenerate(r, traces=traces, manifest=manifest, say=say)
        except GoldenError as e:
            say(str(e))
            failed.append(r.name)
    return failed


def select(
    *,
    traces: Path = TRACES,
    manifest: Path = MANIFEST,
    budget_messages: int = 200_000,
    min_lines: int = 10,
    names: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> list[str]:
    """Measure the candidates (``names``: only these), choose the set by greedy cover, bless it,
    drop the simulator goldens not chosen; returns the chosen names. ``budget_messages``: the most
    message rows the chosen simulator goldens may add up to (re-running and diffing them is what
    ``golden verify`` spends its time on; rows, not seconds, so the choice does not depend on load)."""
    from clusterlab.golden.candidates import candidates

    pool = [r for r in candidates() if not names or r.name in names]
    if not pool:
        raise GoldenError(f"no candidate named {', '.join(names)}")
    work = Path(tempfile.mkdtemp(prefix="clusterlab-select-"))
    try:
        measured, runs = _measure_candidates(pool, work, say)
        recipes = [r for r in load_manifest(manifest) if r.driver != "sim"]
        chosen = _bless_chosen(
            measured, runs, work, traces=traces, min_lines=min_lines, budget_messages=budget_messages, say=say
        )
        recipes += [m.recipe for m in chosen if m.recipe is not None]
        keep = {r.name for r in recipes}  # a blessed golden dropped when choosing again goes too
        _remove_unchosen(traces, keep, say)
        save_manifest(recipes, manifest)
        _write_selection(traces, measured, chosen, budget_messages=budget_messages, min_lines=min_lines)
        return [m.name for m in chosen]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measure_candidates(
    pool: Sequence[Recipe], work: Path, say: Callable[[str], None]
) -> tuple[list[Measurement], dict[str, Path]]:
    """Runs and measures each candidate of ``pool`` in ``work``, saying how each went; returns the
    measurements and the trace of each run that kept one, by name."""
    from clusterlab.golden.coverage import measure_recipe

    measured = []
    runs: dict[str, Path] = {}
    for r in pool:
        m, trace = measure_recipe(r, work, keep=True)
        outcome = "FAILED " + m.error.splitlines()[0] if m.error else "measured"
        say(f"{r.name}: {outcome} ({m.elapsed_s:.1f} s)")
        measured.append(m)
        if trace is not None:
            runs[r.name] = trace
    return measured, runs


def _bless_chosen(
    measured: list[Measurement],
    runs: dict[str, Path],
    work: Path,
    *,
    traces: Path,
    min_lines: int,
    budget_messages: int,
    say: Callable[[str], None],
) -> list[Measurement]:
    """Chooses the set by greedy cover and blesses each chosen run into ``traces``; a run whose golden
    would be over MAX_GOLDEN_BYTES is removed again, marked with why, and the set chosen anew without
    it. Returns the chosen set, every one of it blessed."""
    from clusterlab.golden.coverage import greedy_cover

    blessed: set[str] = set()
    while True:
        chosen = greedy_cover(measured, min_lines=min_lines, budget_messages=budget_messages)
        too_big = None
        for m in chosen:
            if m.name in blessed:
                continue
            assert m.recipe is not None
            g = bless(
                runs[m.name],
                m.name,
                traces=traces,
                duration_s=m.recipe.duration_s,
                summary=m.recipe.summary,
                force=True,
                manifest=work / "scratch-manifest.json",  # the real one is written once, by select
            )
            size = sum(p.stat().st_size for p in g.directory.rglob("*") if p.is_file())
            if size > MAX_GOLDEN_BYTES:
                shutil.rmtree(g.directory)
                m.error = f"its golden would be {size / 1024:.0f} KiB, over {MAX_GOLDEN_BYTES // 1024} KiB"
                say(f"{m.name}: {m.error}; choosing again without it")
                too_big = m
                break
            blessed.add(m.name)
            say(f"chose {m.name} ({size / 1024:.0f} KiB)")
        if too_big is None:
            return chosen


def _remove_unchosen(traces: Path, keep: set[str], say: Callable[[str], None]) -> None:
    """Removes every simulator golden in ``traces`` not named in ``keep``, saying which."""
    for name in golden_names(traces):
        if name not in keep and (traces / name / "messages").is_dir():  # a simulator golden not chosen
            shutil.rmtree(traces / name)
            say(f"removed {name}")


def _write_selection(
    traces: Path, measured: list[Measurement], chosen: list[Measurement], *, budget_messages: int, min_lines: int
) -> None:
    """Writes ``traces``/selection.json: the choice's bounds, the chosen names and every candidate's
    measurement, coverage counts and whether it was chosen."""
    from clusterlab.golden.coverage import CATEGORIES

    (traces / "selection.json").write_text(
        json.dumps(
            {
                "about": "How the simulator goldens were chosen: python -m clusterlab.golden.regenerate --select",
                "budget_messages": budget_messages,
                "min_lines": min_lines,
                "chosen": [m.name for m in chosen],
                "candidates": [
                    {**m.to_json(), **{c: len(m.items[c]) for c in CATEGORIES}, "chosen": m in chosen} for m in measured
                ],
            },
            indent=1,
        )
        + "\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clusterlab.golden.regenerate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="goldens to regenerate (default: all)")
    parser.add_argument(
        "--select", action="store_true", help="choose the simulator goldens anew from the candidates, by coverage"
    )
    parser.add_argument(
        "--budget", type=int, default=200_000, help="--select: message rows the simulator goldens may add up to"
    )
    parser.add_argument("--min-lines", type=int, default=10, help="--select: least new core lines worth a golden")
    args = parser.parse_args(argv)
    try:
        if args.select:
            select(budget_messages=args.budget, min_lines=args.min_lines, names=args.names)
            return 0
        failed = regenerate_all(args.names)
    except GoldenError as e:
        print(f"golden regenerate: {e}", file=sys.stderr)
        return 2
    if failed:
        print(f"golden regenerate: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
