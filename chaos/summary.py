"""What a set of chaos runs showed: per scenario, driver and size, the seeds run and the failover and
recovery times observed (from each run's ``chaos.json``, which the pytest plugin writes under
``--trace-dir``). ``ci/suite`` prints it after the suite; by hand:

    python -m clusterlab.chaos.summary DIR [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

Key = tuple[str, str, int]  # (scenario, driver, members)


def load_runs(root: Path) -> list[dict[str, Any]]:
    """Every ``chaos.json`` under ``root`` (one per kept run)."""
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/chaos.json"))]


def _stats(values: Iterable[float]) -> dict[str, Any]:
    v = sorted(values)
    if not v:
        return {"n": 0}
    return {"n": len(v), "median_s": round(statistics.median(v), 3), "max_s": round(v[-1], 3), "min_s": round(v[0], 3)}


def summarize(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Group runs by (scenario, driver, members): seeds, pass count, failover/election/recovery stats.
    Runs of the deliberately broken build (``--fault-ack-before-append``) form their own groups."""
    groups: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        driver = (
            ("sim" if r["sim"] else "real")
            + (" broken" if r.get("fault_ack_before_append") else "")
            + (" stale-read" if r.get("fault_stale_read") else "")
        )
        groups[(r["scenario"], driver, int(r["members"]))].append(r)
    out: dict[str, dict[str, Any]] = {}
    for (scenario, driver, members), rs in sorted(groups.items()):
        out[f"{scenario}/{driver.replace(' ', '-')}/n{members}"] = {
            "scenario": scenario,
            "driver": driver,
            "members": members,
            "seeds": sorted({r["seed"] for r in rs}),
            "runs": len(rs),
            "passed": sum(bool(r["ok"]) for r in rs),
            "acked": sum(r["acked"] for r in rs),
            "failover": _stats(x for r in rs for x in r["failovers_s"]),
            "election": _stats(x for r in rs for x in r["elections_s"]),
            "recovery": _stats(x for r in rs for x in r["recoveries_s"]),
            "final_recovery": _stats(r["recovery_s"] for r in rs if r["recovery_s"] is not None),
        }
    return out


def _cell(s: dict[str, Any]) -> str:
    return "-" if not s["n"] else f"{s['median_s']:.2f} / {s['max_s']:.2f} ({s['n']})"


def table(summary: dict[str, dict[str, Any]]) -> Table:
    """The summary as a rich table (times: median / max (count), seconds)."""
    t = Table(title="chaos runs: failover and recovery, median / max (count), seconds")
    for col in (
        "scenario",
        "driver",
        "n",
        "seeds",
        "passed",
        "acked",
        "fault->new leader",
        "fault->first ack",
        "heal->caught up",
        "final heal->converged",
    ):
        t.add_column(col, overflow="fold")
    for g in summary.values():
        seeds = g["seeds"]
        shown = ",".join(map(str, seeds)) if len(seeds) <= 4 else f"{seeds[0]}..{seeds[-1]} ({len(seeds)})"
        t.add_row(
            g["scenario"],
            g["driver"],
            str(g["members"]),
            shown,
            f"{g['passed']}/{g['runs']}",
            str(g["acked"]),
            _cell(g["election"]),
            _cell(g["failover"]),
            _cell(g["recovery"]),
            _cell(g["final_recovery"]),
        )
    return t


def main(argv: Sequence[str] | None = None) -> int:
    """Print the summary of the runs under DIR; exit 2 if DIR holds none."""
    p = argparse.ArgumentParser(prog="python -m clusterlab.chaos.summary", description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path, help="a directory of kept runs (pytest --trace-dir)")
    p.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = p.parse_args(argv)
    runs = load_runs(args.dir)
    if not runs:
        print(
            f"clusterlab.chaos.summary: no chaos.json under {args.dir} (run pytest with --trace-dir {args.dir})",
            file=sys.stderr,
        )
        return 2
    s = summarize(runs)
    Console(width=200).print(table(s))
    if args.json:
        args.json.write_text(json.dumps(s, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
