"""Re-create goldens from their recipes in ``golden/traces/goldens.json``: run each recipe's scenario
(simulator or real processes) with its seed, size and duration, then bless the run under the same
name, replacing the old golden. After a change that legitimately alters wire bytes, framing or the
state digest:

    python -m clusterlab.golden.regenerate            # every golden
    python -m clusterlab.golden.regenerate NAME ...   # some
    clusterlab golden regenerate [NAME...] # the same

A real-process run is not reproducible exactly, so a failed one (its checks or its run) is retried a
few times before the recipe is reported as failed; a simulator run is exact and tried once.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from clusterlab.chaos.runner import run_scenario
from clusterlab.golden.store import MANIFEST, TRACES, Golden, GoldenError, Recipe, bless, load_manifest

REAL_ATTEMPTS = 3


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clusterlab.golden.regenerate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="goldens to regenerate (default: all)")
    args = parser.parse_args(argv)
    try:
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
