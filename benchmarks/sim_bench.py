"""Simulator speed: simulated seconds per real second on a 3-member cluster.

Three workloads: idle (heartbeats only), steady load (one 64-byte append per simulated ms: ten entries
offered every 10 simulated ms, appended by the leader as one burst, SimCluster.offer_batch), and a
leader kill + recovery; plus the cost of a cluster's life cycle (start 3 members, elect, kill and
restart the leader, close), which is where members' storage shows (MemoryStorage: no directories).
And the seed sweep's cost: ``--sweep-seeds N`` runs seeds 1..N of ``random`` on 3
and 5 members as ``clusterlab sweep`` does (one process, so the CPU seconds are the runs' own), and
prints CPU seconds per run and the seeds (both sizes) an idle core runs per minute.
Prints a table and writes JSON (default benchmarks/results/sim.json).
Run: python -m benchmarks.sim_bench [--out FILE] [--seconds N] [--sweep-seeds N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from clusterlab.core.consensus.context import MS, SECOND
from clusterlab.harness.sim import SimCluster

from benchmarks import write_results

_BURST = [b"x" * 64] * 10  # one 64 B entry per simulated ms, offered every 10 ms


def _measure(name: str, seconds: int, load: bool, kill: bool) -> dict[str, float | str]:
    with SimCluster(members=3, seed=7) as c:
        c.await_leader(30 * SECOND)
        start_sim = c.now_ns
        start_real, start_cpu = time.perf_counter(), time.process_time()
        appended = 0
        end = start_sim + seconds * SECOND
        while c.now_ns < end:
            if kill and c.now_ns >= start_sim + seconds * SECOND // 2 and c.incarnation(0) == 0 and c.is_alive(0):
                c.kill(c.leader_id() if c.leader_id() is not None else 0)
            # Ten 64 B entries arrive per 10 ms; the leader appends what arrived together with one
            # write (SimCluster.offer_batch), as its duty cycle appends a batch of ingress.
            if load and c.leader_id() is not None and c.offer_batch(_BURST) > 0:
                appended += len(_BURST)
            c.run_for(10 * MS)
        real, cpu = time.perf_counter() - start_real, time.process_time() - start_cpu
        sim = (c.now_ns - start_sim) / SECOND
        delivered = sum(c.network.stats.delivered.values()) if hasattr(c.network.stats, "delivered") else 0
        return {
            "workload": name,
            "simulated_s": round(sim, 2),
            "real_s": round(real, 3),
            "sim_s_per_real_s": round(sim / real, 1),
            # The simulator's own pace: what it reaches on an idle core, whatever else the machine runs.
            "sim_s_per_cpu_s": round(sim / cpu, 1),
            "entries_appended": appended,
            "messages_delivered": delivered,
        }


def _lifecycle(clusters: int) -> dict[str, float | int]:
    start = time.perf_counter()
    for seed in range(clusters):
        with SimCluster(members=3, seed=seed) as c:
            leader = c.await_leader(30 * SECOND)
            c.kill(leader)
            c.run_for(200 * MS)
            c.restart(leader)
            c.run_for(100 * MS)
    real = time.perf_counter() - start
    return {"clusters": clusters, "real_s": round(real, 3), "ms_per_cluster": round(1000 * real / clusters, 2)}


def _sweep(seeds: int) -> dict[str, float | int]:
    from clusterlab.chaos.sweep import SweepConfig, run_sweep

    config = SweepConfig("random", tuple(range(1, seeds + 1)), (3, 5))
    with tempfile.TemporaryDirectory(prefix="clusterlab-sim-bench-") as d:
        cpu, start = time.process_time(), time.perf_counter()
        summary = run_sweep(config, d, jobs=1)
        cpu, real = time.process_time() - cpu, time.perf_counter() - start
    per_size = {m: sum(r["cpu_s"] for r in summary.records if r["members"] == m) / seeds for m in config.members}
    pair = cpu / seeds
    return {
        "seeds": seeds,
        "runs": len(summary.records),
        "failed": len(summary.failures),
        "cpu_s": round(cpu, 2),
        "real_s": round(real, 2),
        "cpu_s_per_run_3": round(per_size[3], 3),
        "cpu_s_per_run_5": round(per_size[5], 3),
        "cpu_s_per_seed_pair": round(pair, 3),
        "seed_pairs_per_minute_per_core": round(60 / pair, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="benchmarks/results/sim.json")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--clusters", type=int, default=40, help="clusters for the life-cycle figure")
    parser.add_argument("--sweep-seeds", type=int, default=0, help="seeds of the sweep-cost figure (0: skip it)")
    args = parser.parse_args()
    rows = [
        _measure("idle (heartbeats)", args.seconds, load=False, kill=False),
        _measure("load: 1 x 64 B append / sim ms", args.seconds, load=True, kill=False),
        _measure("load + leader kill", args.seconds, load=True, kill=True),
    ]
    print(
        f"{'workload':34} {'sim s':>7} {'real s':>8} {'sim s/real s':>13} {'sim s/CPU s':>12} "
        f"{'appended':>9} {'messages':>9}"
    )
    for r in rows:
        print(
            f"{r['workload']:34} {r['simulated_s']:>7} {r['real_s']:>8} {r['sim_s_per_real_s']:>13} "
            f"{r['sim_s_per_cpu_s']:>12} {r['entries_appended']:>9} {r['messages_delivered']:>9}"
        )
    life = _lifecycle(args.clusters)
    print(
        f"life cycle (start, elect, kill + restart leader, close): {life['clusters']} clusters in "
        f"{life['real_s']} s = {life['ms_per_cluster']} ms each"
    )
    doc: dict[str, object] = {"members": 3, "results": rows, "lifecycle": life, "load_average_1m": os.getloadavg()[0]}
    if args.sweep_seeds:
        sweep = _sweep(args.sweep_seeds)
        print(
            f"sweep of random, seeds 1-{sweep['seeds']} on 3 and 5 members ({sweep['failed']} failed): "
            f"{sweep['cpu_s_per_run_3']} CPU s a 3-member run, {sweep['cpu_s_per_run_5']} a 5-member run, "
            f"{sweep['cpu_s_per_seed_pair']} a seed on both = {sweep['seed_pairs_per_minute_per_core']} "
            "seeds/minute per idle core"
        )
        doc["sweep"] = sweep
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(f"wrote {write_results(args.out, doc)}")


if __name__ == "__main__":
    main()
