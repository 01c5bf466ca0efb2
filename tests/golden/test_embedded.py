"""The embedded engine (DuckDB running chaos/checks SQL): each planted violation fails exactly its
checks at the planted place, ``clusterlab check`` uses it by default (exit codes, check.json), and the
local verdict (``verify_run``) is its judgement. No Spark here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.checks import CHECK_NAMES, SQL_CHECKS
from clusterlab.chaos.checks.embedded import check_runs
from clusterlab.chaos.checks.sql import to_duckdb, view_columns
from clusterlab.chaos.determinism import DETERMINISM_CHECKS
from clusterlab.chaos.verdict import verify_run

from clusterlab.cli import main


@pytest.fixture(scope="module")
def report(planted: dict[str, Any]) -> Any:
    return check_runs([r["dir"] for r in planted.values()], write_json=False)


def _of(report: Any, check: str, run_id: str) -> list[dict[str, Any]]:
    return [v for v in report.checks[check].violations if v["run_id"] == run_id]


def test_every_check_is_sql_both_dialects_can_read() -> None:
    names = [c.name for c in SQL_CHECKS]
    assert names[:5] == ["agreement", "contiguity", "election_safety", "durability", "committed_prefix"]
    assert CHECK_NAMES[-1] == "linearizability" and len(set(names)) == len(names)
    for c in SQL_CHECKS:
        assert "run_id" in to_duckdb(c.sql)
    columns = view_columns(SQL_CHECKS)
    # Digests reach the checks as int64 halves only (hash aggregates), never as binary.
    assert "state_digest_hi" in columns["applied"] and "state_digest" not in columns["applied"]
    assert {"req_id", "req_op", "entry_digest_lo"} <= set(columns["log"])


def test_each_planted_violation_fails_exactly_its_checks(report: Any, planted: dict[str, Any]) -> None:
    assert report.engine == "duckdb" and sorted(report.run_ids) == sorted(planted)
    for run_id, p in planted.items():
        failed = {c for c in CHECK_NAMES if _of(report, c, run_id)}
        assert failed == p["fails"], run_id
        assert report.run_status(str(p["dir"])) == ("FAIL" if p["fails"] else "PASS")


def test_violations_name_the_planted_place(report: Any, planted: dict[str, Any]) -> None:
    state = _of(report, "agreement", "state")
    assert [(v["log_position"], v["kind"]) for v in state] == [(planted["state"]["position"], "state")]
    assert {m["member"] for m in state[0]["members"]} == {0, 1, 2}
    assert "0" * 32 in {m["state_digest"] for m in state[0]["members"]}  # the planted all-zero digest
    assert state[0]["messages"], "the messages around the divergence come with it"
    gap = _of(report, "contiguity", "gap")
    assert gap[0]["log_position"] == planted["gap"]["position"] and gap[0]["member_id"] == 2
    leaders = _of(report, "election_safety", "leaders")
    assert [v["leadership_term_id"] for v in leaders] == [planted["leaders"]["term"]]
    assert len(leaders[0]["members"]) == 2
    acked = _of(report, "durability", "acked")
    assert [(v["op_id"], v["problem"]) for v in acked] == [(999_999, "acknowledged op not in the log")]
    assert "op 999999" in acked[0]["detail"]
    lost = _of(report, "committed_prefix", "lost")
    assert lost[0]["log_position"] == planted["lost"]["position"]
    back = _of(report, "committed_prefix", "commit-back")
    assert [(v["log_position"], v["member_id"]) for v in back] == [(planted["commit-back"]["position"], 1)]
    assert back[0]["problem"].startswith("commit position moved back")


def test_the_local_verdict_is_the_embedded_engines(report: Any, planted: dict[str, Any]) -> None:
    for run_id, p in planted.items():
        v = verify_run(p["dir"])
        assert set(v.failed()) == p["fails"], run_id
        for check in CHECK_NAMES[:-1]:
            shown = [x["detail"] for x in _of(report, check, run_id)]  # the report keeps the first 50
            assert v.violations[check][: len(shown)] == shown, (run_id, check)
            assert len(v.violations[check]) == report.checks[check].per_run.get(str(p["dir"]), 0), (run_id, check)


def test_check_cli_defaults_to_the_embedded_engine(
    planted: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean, bad = planted["clean"]["dir"], planted["state"]["dir"]
    assert main(["check", str(clean)]) == 0
    doc = json.loads((clean / "check.json").read_text())
    assert doc["engine"] == "duckdb" and doc["ok"] is True and set(doc["checks"]) == {*CHECK_NAMES, *DETERMINISM_CHECKS}
    assert main(["check", str(bad), "--engine", "duckdb"]) == 1
    out = capsys.readouterr().out
    assert "Embedded (DuckDB) check" in out and "FAIL" in out and "agreement" in out
    doc = json.loads((bad / "check.json").read_text())
    assert doc["checks"]["agreement"]["violations"][0]["log_position"] == planted["state"]["position"]
    assert main(["check", str(clean), "--engine", "duckdb", "--master", "local[1]"]) == 2
    err = capsys.readouterr().err
    assert "--master/--remote need --engine spark" in err and len(err.strip().splitlines()) == 1
