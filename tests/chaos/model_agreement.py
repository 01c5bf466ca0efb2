"""The model written from the Model docstring (clusterlab.chaos.model_example, the docs' example)
judges a chaos run's recorded history as the built-in models do, key by key.

``python -m tests.chaos.model_agreement DIR...`` judges every run's history under each DIR (a run
directory, or a directory of them: what the suite's ``--trace-dir`` keeps) with both and fails on any
key whose definite verdicts differ (ci/suite runs it on every history the suite recorded)."""

from __future__ import annotations

import sys
from pathlib import Path

from clusterlab.chaos.linearizability import (
    UNKNOWN,
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


def disagreements(trace_dir: Path) -> tuple[int, list[str]]:
    """(keys judged, keys whose definite verdicts differ) of one run; a key either model could not
    decide in its budget is not compared."""
    ops = operations_from_rows(open_run(trace_dir).ops.to_pylist())
    if not ops:
        return 0, []
    builtin = {k.key: k.verdict for k in check_history(ops).keys}
    mine = {k.key: k.verdict for k in check_history(ops, model=docs_model(ops)).keys}
    out = []
    for key in sorted(set(builtin) | set(mine), key=str):
        a, b = builtin.get(key), mine.get(key)
        if a != b and UNKNOWN not in (a, b):
            out.append(f"{trace_dir}: key {key!r}: built-in {a}, docs' model {b}")
    return len(builtin), out


def main(argv: list[str]) -> int:
    """Exit 0 when every recorded history gets the built-in verdicts from the docs' model, 1 if not,
    2 when no history was found."""
    runs = sorted({p.parent for d in map(Path, argv) for p in d.glob("**/run.json")})
    histories = keys = 0
    failures: list[str] = []
    for run in runs:
        judged, differ = disagreements(run)
        histories += judged > 0
        keys += judged
        failures += differ
    for line in failures:
        print(line)
    print(f"model agreement: {histories} histories of {len(runs)} runs, {keys} keys, {len(failures)} disagreements")
    if histories == 0:
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
