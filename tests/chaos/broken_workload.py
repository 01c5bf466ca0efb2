"""A user's workload with a bug: the kv workload whose ``next_op`` raises after a few ops (the run's
error names this file and line, as it would name the user's)."""

from __future__ import annotations

import random

from clusterlab.chaos.sample_workloads import KvWorkload
from clusterlab.chaos.workload_api import Op


class RaisingWorkload(KvWorkload):
    def next_op(self, rng: random.Random, op_id: int, key: str | None, client: int, now: float, concurrent: bool) -> Op:
        if op_id >= 5:
            raise KeyError("boom in next_op")
        return super().next_op(rng, op_id, key, client, now, concurrent)


def make() -> RaisingWorkload:
    return RaisingWorkload()
