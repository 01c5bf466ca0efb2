"""The model written from the Model docstring (clusterlab.chaos.model_example, the docs' example)
judges a chaos run's recorded history as the built-in models do, key by key."""

from __future__ import annotations

from pathlib import Path

from clusterlab.chaos.linearizability import (
    VIOLATION,
    HistoryVerdict,
    Model,
    Operation,
    check_history,
    linearizable,
    model_for,
    operations_from_rows,
)
from clusterlab.chaos.model_example import KvStoreModel, TallyModel
from clusterlab.harness.trace import open_run


def docs_model(ops: list[Operation]) -> Model:
    """The docs' model for what the built-in checker would judge ``ops`` by."""
    return TallyModel() if model_for(ops).name == "counter" else KvStoreModel()


def assert_docs_model_agrees(trace_dir: Path | str) -> HistoryVerdict:
    """The docs' model gives every key of the run's history the built-in verdict, and each sub-history
    it shows fails under the built-in model too. Returns the docs' model's verdict."""
    ops = operations_from_rows(open_run(trace_dir).ops.to_pylist())
    builtin = check_history(ops)
    model = docs_model(ops)
    mine = check_history(ops, model=model)
    assert [(k.key, k.verdict) for k in mine.keys] == [(k.key, k.verdict) for k in builtin.keys], (
        [k.describe() for k in builtin.keys],
        [k.describe() for k in mine.keys],
    )
    for k in mine.violations():
        assert linearizable(k.minimal, model).verdict == VIOLATION
        assert check_history(k.minimal).verdict == VIOLATION, k.describe()
    return mine
