"""The online folds (clusterlab.harness.invariants, which judge a SimCluster while it runs) and the trace
checks (clusterlab.chaos.checks, SQL over the recorded tables) define the same properties twice: fed the
same recorded runs, the clean one and each with one planted violation, they give the same verdict per
property and the same first position."""

from __future__ import annotations

from typing import Any

import pytest
from clusterlab.chaos.checks.embedded import check_runs
from clusterlab.harness.invariants import FOLD_CHECKS, FoldViolation, fold_recorded_run
from clusterlab.harness.trace import open_run

FOLDED = sorted(set(FOLD_CHECKS.values()))


def _folded_rows(report: Any, check: str, run_id: str) -> list[dict[str, Any]]:
    """The check's violation rows of the run that a fold also judges: of committed_prefix, only a commit
    position that moved back (MonotonicCommit); its other half, an applied entry missing from the final
    committed log, needs the final log, which no online fold has."""
    rows = [v for v in report.checks[check].violations if v["run_id"] == run_id]
    if check == "committed_prefix":
        rows = [v for v in rows if str(v.get("problem", "")).startswith("commit position moved back")]
    return rows


@pytest.fixture(scope="module")
def sql(planted: dict[str, Any]) -> Any:
    return check_runs([r["dir"] for r in planted.values()], write_json=False)


def _first_position(violations: list[dict[str, Any]], run_id: str, check: str) -> int | None:
    """The first position (term, for election safety) among the check's rows of the run; None when its
    rows carry only a detail line (the protocol checks)."""
    key = "leadership_term_id" if check == "election_safety" else "log_position"
    found = [v[key] for v in violations if v["run_id"] == run_id and v.get(key) is not None]
    return min(found) if found else None


def _same_place(fold: FoldViolation, violations: list[dict[str, Any]], run_id: str) -> bool:
    first = _first_position(violations, run_id, fold.check)
    if first is not None:
        return fold.at == first
    where = "term" if fold.check == "one_leader_per_term" else "position"
    return any(f"{where} {fold.at}" in str(v["detail"]) for v in violations if v["run_id"] == run_id)


def test_folds_and_sql_give_each_planted_run_the_same_verdicts(planted: dict[str, Any], sql: Any) -> None:
    for run_id, p in planted.items():
        run = open_run(p["dir"])
        folds = {v.check: v for v in fold_recorded_run(run.events.to_pylist(), run.applied.to_pylist())}
        failed = {c for c in FOLDED if _folded_rows(sql, c, run_id)}
        assert set(folds) == failed, (run_id, {c: v.problem for c, v in folds.items()})
        for check, v in folds.items():
            assert _same_place(v, _folded_rows(sql, check, run_id), run_id), (run_id, check, v.problem)
    assert any(p["fails"] & set(FOLDED) for p in planted.values()), "no planted run exercises a folded property"
