"""A user's workload with a bug: the kv workload whose ``next_op`` raises after a few ops (the run's
error names this file and line, as it would name the user's); and kv workloads whose model is broken
(``step`` changes its state in place, or raises): such a history is not judged."""

from __future__ import annotations

import random
from typing import Any

from clusterlab.chaos.linearizability import Model, Operation
from clusterlab.chaos.sample_workloads import KvWorkload
from clusterlab.chaos.workload_api import Op


class RaisingWorkload(KvWorkload):
    def next_op(self, rng: random.Random, op_id: int, key: str | None, client: int, now: float, concurrent: bool) -> Op:
        if op_id >= 5:
            raise KeyError("boom in next_op")
        return super().next_op(rng, op_id, key, client, now, concurrent)


def make() -> RaisingWorkload:
    return RaisingWorkload()


class InPlaceModel(Model):
    """Breaks the model contract: ``step`` changes the state it is given."""

    name = "in-place"
    init: Any = {"steps": 0}

    def step(self, state: Any, op: Operation) -> Any:
        state["steps"] += 1
        return state


class RaisingModel(Model):
    """A model with a bug of its own: ``step`` raises."""

    name = "raising"
    init: Any = 0

    def step(self, state: Any, op: Operation) -> Any:
        raise ZeroDivisionError("boom in step")


class InPlaceModelWorkload(KvWorkload):
    model = InPlaceModel()


class RaisingModelWorkload(KvWorkload):
    model = RaisingModel()


def in_place_model() -> InPlaceModelWorkload:
    return InPlaceModelWorkload()


def raising_model() -> RaisingModelWorkload:
    return RaisingModelWorkload()
