"""The online folds (clusterlab.harness.invariants, which judge a SimCluster while it runs) and the trace
checks (clusterlab.chaos.checks, SQL over the recorded tables) define the same properties twice: fed the
same recorded runs, the clean one and each with one planted violation, they give the same verdict per
property and the same first position; and every folded property fails, on both sides, on some planted run."""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
import pytest
from clusterlab.chaos.checks.embedded import check_runs
from clusterlab.chaos.checks.protocol import CHECKS, evaluate_duckdb
from clusterlab.harness.invariants import FOLD_CHECKS, FoldViolation, fold_recorded_run
from clusterlab.harness.trace import open_run

from tests.golden.plant import PLANTED_RUNS

FOLDED = sorted(set(FOLD_CHECKS.values()))

# Where a protocol check's row (a detail line only) places its violation: the term or the log position the
# fold reports (for vote_log_recency the voter's log position, the first of the two in the line).
PLACE_IN_DETAIL = {
    "vote_log_recency": re.compile(r"with a more recent log \(term -?\d+, position (\d+)\)"),
    "one_vote_per_term": re.compile(r"voted YES in term (\d+) "),
    "one_leader_per_term": re.compile(r"^term (\d+) has leaders"),
    "timers_and_closes_agree": re.compile(r" entry ending at (\d+)"),
}


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


@pytest.fixture(scope="module")
def folds(planted: dict[str, Any]) -> dict[str, dict[str, FoldViolation]]:
    """Each planted run's first fold violation per property."""
    out = {}
    for run_id, p in planted.items():
        run = open_run(p["dir"])
        folded = fold_recorded_run(run.events.to_pylist(), run.applied.to_pylist(), run.messages.to_pylist())
        out[run_id] = {v.check: v for v in folded}
    return out


def _first_place(violations: list[dict[str, Any]], check: str) -> int | None:
    """The first place among the check's rows: the term for election safety, a log position for the state
    checks, and for the protocol checks (a detail line only) the term or position their line names."""
    if check in PLACE_IN_DETAIL:
        found = [int(m.group(1)) for v in violations if (m := PLACE_IN_DETAIL[check].search(str(v["detail"])))]
        assert len(found) == len(violations), (check, [v["detail"] for v in violations])
    else:
        key = "leadership_term_id" if check == "election_safety" else "log_position"
        found = [v[key] for v in violations if v.get(key) is not None]
    return min(found) if found else None


@pytest.mark.parametrize("run_id", PLANTED_RUNS)
def test_folds_and_sql_give_the_planted_run_the_same_verdicts(
    run_id: str, folds: dict[str, dict[str, FoldViolation]], sql: Any
) -> None:
    mine = folds[run_id]
    failed = {c for c in FOLDED if _folded_rows(sql, c, run_id)}
    assert set(mine) == failed, {c: v.problem for c, v in mine.items()}
    for check, v in mine.items():
        rows = _folded_rows(sql, check, run_id)
        assert v.at is not None and v.at == _first_place(rows, check), (check, v.problem, rows)


def test_the_planted_runs_place_their_violations_where_they_were_planted(
    planted: dict[str, Any], folds: dict[str, dict[str, FoldViolation]]
) -> None:
    assert folds["stale-vote"]["vote_log_recency"].at == planted["stale-vote"]["position"]
    assert folds["double-vote"]["one_vote_per_term"].at == planted["double-vote"]["term"]
    assert folds["local-timer"]["timers_and_closes_agree"].at == planted["local-timer"]["position"]
    assert folds["leaders"]["one_leader_per_term"].at == planted["leaders"]["term"]


def test_every_folded_property_fails_on_both_sides_on_some_planted_run(
    folds: dict[str, dict[str, FoldViolation]], sql: Any
) -> None:
    """A fold added to FOLD_CHECKS without a planted run that breaks its property fails here."""
    both = {c for run_id, mine in folds.items() for c in mine if _folded_rows(sql, c, run_id)}
    assert both == set(FOLDED), f"no planted run fails {sorted(set(FOLDED) - both)} on both sides"


def _verdicts(tables: dict[str, pa.Table], names: set[str]) -> tuple[set[str], set[str]]:
    """Of the protocol checks ``names``: those the folds find failed, and those the SQL checks do."""
    run_id = tables["events"].column("run_id")[0].as_py()
    folded = {
        v.check
        for v in fold_recorded_run(
            tables["events"].to_pylist(), tables["applied"].to_pylist(), tables["messages"].to_pylist()
        )
    }
    failed = {c.name for c in CHECKS if c.name in names and evaluate_duckdb(c, tables, run_id)}
    return folded & names, failed


def _with_rows(tables: dict[str, pa.Table], table: str, rows: list[dict[str, Any]]) -> dict[str, pa.Table]:
    return dict(tables, **{table: pa.Table.from_pylist(rows, schema=tables[table].schema)})


def test_a_second_vote_in_a_term_to_a_less_recent_log_breaks_both_vote_properties_on_both_sides(
    planted: dict[str, Any],
) -> None:
    tables = open_run(planted["clean"]["dir"]).tables
    events = tables["events"].to_pylist()
    vote = max(
        (e for e in events if e["kind"] == "vote" and json.loads(e["detail"])["candidate"] != e["member_id"]),
        key=lambda e: e["wall_ns"],
    )
    detail = json.loads(vote["detail"])
    other = next(m for m in range(3) if m not in (vote["member_id"], detail["candidate"]))
    stale = dict(detail, candidate=other, candidate_log_position=vote["log_position"] - 32)
    again = dict(vote, detail=json.dumps(stale), wall_ns=vote["wall_ns"] + 1, seq=events[-1]["seq"] + 1)
    names = {"vote_log_recency", "one_vote_per_term"}
    assert _verdicts(_with_rows(tables, "events", [*events, again]), names) == (names, names)


def test_a_timer_only_a_members_second_service_applied_fails_on_both_sides(planted: dict[str, Any]) -> None:
    """Timer and SessionClose entries are the log's: every service of every member applies the same ones."""
    tables = open_run(planted["clean"]["dir"]).tables
    applied = tables["applied"].to_pylist()
    mine = [dict(r, service_id=1) for r in applied if r["member_id"] == 1 and r["service_id"] == 0]
    messages = [r for r in mine if r["entry_type"] == "SessionMessage"]
    position = messages[len(messages) // 2]["log_position"]
    second = [dict(r, entry_type="Timer") if r["log_position"] == position else r for r in mine]
    names = {"timers_and_closes_agree"}
    assert _verdicts(_with_rows(tables, "applied", [*applied, *second]), names) == (names, names)
