"""How fast the linearizability checker judges histories (clusterlab.chaos.linearizability): histories
generated from the register's sequential model (so linearizable) with C concurrent clients, each op's
interval overlapping its neighbours', a share of outcomes unknown; one key and several. Prints a
table and writes JSON (``--out``).

    python -m benchmarks.linearizability_bench [--ops 2000] [--out benchmarks/results/linearizability.json]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from clusterlab.chaos.linearizability import INFO, OK, Operation, check_history

from benchmarks import write_results


def history(ops: int, clients: int, keys: int, info_share: float, seed: int = 1) -> list[Operation]:
    """A linearizable kv history: ops applied atomically in order, each invoked before its instant and
    completed after it by up to ``clients`` instants (the concurrency), results from the model."""
    rng = random.Random(seed)
    state: dict[str, Any] = {}
    out = []
    for i in range(ops):
        at = 100 * (i + 1)
        key = f"k{rng.randrange(keys)}"
        f = rng.choice(["put", "get", "cas", "delete"])
        before = state.get(key)
        value = f"v{i}"
        expected = before if rng.random() < 0.7 else f"v{max(0, i - 1)}"
        info = rng.random() < info_share
        applied = not info or rng.random() < 0.5
        if f == "get":
            result, after = before, before
        elif f == "put":
            result, after = before, value
        elif f == "delete":
            result, after = before, None
        else:
            after = value if before == expected else before
            result = after
        if applied:
            state[key] = after
        lo, hi = at - rng.randrange(100 * clients), at + rng.randrange(100 * clients)
        out.append(
            Operation(
                i % clients,
                i,
                f,
                key,
                lo,
                None if info else hi,
                INFO if info else OK,
                value if f in ("put", "cas") else None,
                expected if f == "cas" else None,
                None if info else result,
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 0."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--out", default="benchmarks/results/linearizability.json")
    args = p.parse_args(argv)
    rows = []
    for clients, keys, info_share in ((1, 8, 0.0), (3, 8, 0.01), (3, 1, 0.01), (10, 8, 0.02), (10, 1, 0.0)):
        ops = history(args.ops, clients, keys, info_share)
        started = time.perf_counter()
        v = check_history(ops)
        seconds = time.perf_counter() - started
        row = {
            "ops": len(ops),
            "clients": clients,
            "keys": keys,
            "info_share": info_share,
            "verdict": v.verdict,
            "states_explored": sum(k.explored for k in v.keys),
            "seconds": round(seconds, 4),
            "ops_per_s": round(len(ops) / seconds) if seconds else None,
        }
        rows.append(row)
        print(
            f"{row['ops']} ops, {clients} clients, {keys} keys, {info_share:.0%} unknown: {v.verdict} "
            f"in {seconds * 1000:.0f} ms ({row['states_explored']} states)"
        )
    print(f"written {write_results(args.out, {'benchmark': 'linearizability', 'runs': rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
