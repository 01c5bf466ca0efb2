"""The cost of the replay determinism checks (clusterlab.chaos.determinism): per applied entry, for
the kv store and the example ledger, and the simulator sweep's throughput (seeds per minute of
``leader-kill``) with and without them.

Each seed runs as a sweep runs it (one process, a verdict per run); the checks are then timed on the
run's trace: ``snapshot-roundtrip`` (an in-process replay with every snapshot restored) and
``replay-equivalence`` (a replay in each of the process's replay workers, which have other hash
seeds; the workers' start, paid once per process, is timed apart as ``replay_worker_start_s``). Per applied
entry = the check's time / the committed log's entries.
Prints a table and writes JSON (default benchmarks/determinism.json).
Run: python -m benchmarks.determinism_bench [--seeds N] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from clusterlab.chaos.determinism import replay_equivalence, snapshot_roundtrip, stop_replay_workers
from clusterlab.chaos.runner import run_scenario
from clusterlab.harness.services import service_factory
from clusterlab.harness.trace import open_run

from benchmarks import write_results

LEDGER = Path(__file__).resolve().parents[1] / "examples" / "ledger"
SERVICES = {"kv": ("kv", None), "ledger": ("ledger.service:make", "ledger.workload:make")}


def _measure(name: str, seeds: int) -> dict[str, Any]:
    service, workload = SERVICES[name]
    run_s = roundtrip_s = replay_s = 0.0
    entries = 0
    stop_replay_workers()  # each service's measure starts its own worker: its start is timed apart
    worker_start_s = 0.0
    for seed in range(1, seeds + 1):
        with tempfile.TemporaryDirectory(prefix="determinism-bench-") as d:
            started = time.perf_counter()
            r = run_scenario("leader-kill", seed, sim=True, service=service, workload=workload, directory=d)
            run_s += time.perf_counter() - started
            assert r.ok, f"{name} seed {seed}: {r.error or r.verdict}"
            run = open_run(r.trace_dir)
            entries += run.log.num_rows
            started = time.perf_counter()
            assert snapshot_roundtrip(run, service_factory(service)) == []
            roundtrip_s += time.perf_counter() - started
            if seed == 1:  # the first replay starts the worker: that replay again, less, is the start
                started = time.perf_counter()
                assert replay_equivalence(run) == []
                worker_start_s = time.perf_counter() - started
            started = time.perf_counter()
            assert replay_equivalence(run) == []
            replay_s += time.perf_counter() - started
            if seed == 1:
                worker_start_s -= time.perf_counter() - started
    per_entry = 1e6 / max(1, entries)
    return {
        "service": name,
        "seeds": seeds,
        "applied_entries": entries,
        "snapshot_roundtrip_us_per_entry": round(roundtrip_s * per_entry, 1),
        "replay_equivalence_us_per_entry": round(replay_s * per_entry, 1),
        "replay_worker_start_s": round(worker_start_s, 2),
        "run_s_per_seed": round(run_s / seeds, 2),
        "checks_s_per_seed": round((roundtrip_s + replay_s) / seeds, 2),
        "seeds_per_minute_without": round(60 * seeds / run_s, 1),
        "seeds_per_minute_with": round(60 * seeds / (run_s + roundtrip_s + replay_s), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds of leader-kill per service (default 5)")
    parser.add_argument("--out", default="benchmarks/determinism.json")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(LEDGER))  # the example's package, as `clusterlab run` finds it from its directory
    rows = [_measure(name, args.seeds) for name in SERVICES]
    header = list(rows[0])
    print("  ".join(f"{h:>14}" for h in header))
    for row in rows:
        print("  ".join(f"{row[h]!s:>14}" for h in header))
    path = write_results(args.out, {"benchmark": "determinism", "scenario": "leader-kill", "results": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
