"""``clusterlab check``: each Spark check fails on a violation planted in a copy of a real trace, at
the planted position, and agrees with the local DuckDB verdict (clusterlab.chaos.verdict) on every run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.verdict import verify_run
from clusterlab.spark.check import CHECKS, check_runs

from clusterlab.cli import main

# The report fixture checks every planted run (plant.py, PLANTED_RUNS) on both plans on a loaded 2-core machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def reports(spark, planted: dict[str, Any]) -> dict[str, Any]:
    """The planted runs checked on each plan: each run judged in its own task, and Spark SQL over all."""
    return {
        plan: check_runs([r["dir"] for r in planted.values()], spark=spark, write_json=False, plan=plan)
        for plan in ("tasks", "sql")
    }


@pytest.fixture(params=["tasks", "sql"])
def report(request: pytest.FixtureRequest, reports: dict[str, Any]) -> Any:
    return reports[request.param]


def test_both_plans_give_the_same_verdicts_and_violations(reports: dict[str, Any]) -> None:
    """One definition of each check: the run-task plan (the embedded engine in Spark tasks) and the
    Spark SQL plan find the same violations (counts per run, rows, first of each) on every planted run."""
    runs, sql = reports["tasks"], reports["sql"]
    assert (runs.status, runs.run_dirs, runs.rows, runs.run_rows) == (sql.status, sql.run_dirs, sql.rows, sql.run_rows)
    for name in CHECKS:
        a, b = runs.checks[name], sql.checks[name]
        assert (a.count, a.per_run) == (b.count, b.per_run), name
        shown = [
            json.dumps({k: v for k, v in x.items() if k != "messages"}, sort_keys=True, default=str)
            for x in a.violations
        ]
        other = [
            json.dumps({k: v for k, v in x.items() if k != "messages"}, sort_keys=True, default=str)
            for x in b.violations
        ]
        assert sorted(shown) == sorted(other), name
        if a.violations:
            assert shown[0] in other, name  # the first violation shown by one plan is one the other shows


def _of(report: Any, check: str, run_id: str) -> list[dict[str, Any]]:
    return [v for v in report.checks[check].violations if v["run_id"] == run_id]


def test_each_planted_violation_fails_exactly_its_checks(report: Any, planted: dict[str, Any]) -> None:
    assert sorted(report.run_ids) == sorted(planted)
    for run_id, p in planted.items():
        failed = {c for c in CHECKS if _of(report, c, run_id)}
        assert failed == p["fails"], run_id


def test_violations_are_at_the_planted_positions(report: Any, planted: dict[str, Any]) -> None:
    state = _of(report, "agreement", "state")
    assert [v["log_position"] for v in state] == [planted["state"]["position"]]
    assert state[0]["kind"] == "state"
    assert {m["member"] for m in state[0]["members"]} == {0, 1, 2}
    assert state[0]["messages"], "the messages around the divergence come with it"
    gap = _of(report, "contiguity", "gap")
    assert gap[0]["log_position"] == planted["gap"]["position"] and gap[0]["member_id"] == 2
    leaders = _of(report, "election_safety", "leaders")
    assert [(v["leadership_term_id"], v["members"]) for v in leaders] == [
        (planted["leaders"]["term"], sorted(leaders[0]["members"]))
    ]
    assert len(leaders[0]["members"]) == 2
    assert leaders[0]["detail"] == f"term {planted['leaders']['term']} has leaders " + ", ".join(
        str(m) for m in leaders[0]["members"]
    )
    acked = _of(report, "durability", "acked")
    assert [(v["op_id"], v["problem"]) for v in acked] == [(999_999, "acknowledged op not in the log")]
    lost = _of(report, "committed_prefix", "lost")
    assert lost[0]["log_position"] == planted["lost"]["position"]
    assert lost[0]["problem"] == "applied entry not in the final committed log"
    back = _of(report, "committed_prefix", "commit-back")
    assert [(v["log_position"], v["member_id"]) for v in back] == [(planted["commit-back"]["position"], 1)]
    assert back[0]["problem"].startswith("commit position moved back")


def test_spark_and_local_verdicts_agree(report: Any, planted: dict[str, Any]) -> None:
    for run_id, p in planted.items():
        local = verify_run(p["dir"])
        spark_failed = {c for c in CHECKS if _of(report, c, run_id)}
        assert set(local.failed()) == spark_failed, run_id


def test_spark_and_duckdb_find_the_same_violations(report: Any, planted: dict[str, Any]) -> None:
    """The same SQL on both engines: per check and run, the same count and the same rows (detail lines
    and the columns both return), on the clean run and on every planted one."""
    from clusterlab.chaos.checks.embedded import check_runs as embedded_check

    duck = embedded_check([r["dir"] for r in planted.values()], write_json=False)
    assert duck.engine == "duckdb" and report.engine == "spark"
    assert sorted(duck.run_ids) == sorted(report.run_ids)
    for name in CHECKS:
        mine, theirs = duck.checks[name], report.checks[name]
        assert (mine.count, mine.per_run) == (theirs.count, theirs.per_run), name
        if name == "linearizability":
            continue
        key = sorted(str(v["detail"]) for v in mine.violations)
        assert key == sorted(str(v["detail"]) for v in theirs.violations), name
        for a, b in zip(
            sorted(mine.violations, key=lambda v: v["detail"]),
            sorted(theirs.violations, key=lambda v: v["detail"]),
            strict=True,
        ):
            assert {k: v for k, v in a.items() if k != "messages"} == {k: v for k, v in b.items() if k != "messages"}, (
                name
            )
    assert duck.status == report.status == "FAIL"


def test_small_and_large_input_plans_agree(
    spark: Any, reports: dict[str, Any], planted: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planted runs are a small input (every check evaluated interpreted, the jobs submitted from
    threads); checked as a large input is (generated code, one job after another) they give the same
    counts and rows, and the small checks' settings do not outlive the check."""
    import clusterlab.spark.check as spark_check

    report = reports["sql"]
    assert sum(report.rows.values()) <= spark_check.SMALL_ROWS
    before = {k: spark.conf.get(k, None) for k in spark_check.SMALL_CONF}
    monkeypatch.setattr(spark_check, "SMALL_ROWS", -1)
    large = check_runs([r["dir"] for r in planted.values()], spark=spark, write_json=False, plan="sql")
    assert {k: spark.conf.get(k, None) for k in spark_check.SMALL_CONF} == before
    assert before["spark.sql.codegen.wholeStage"] in (None, "true")
    for name in CHECKS:
        small_result, large_result = report.checks[name], large.checks[name]
        assert (small_result.count, small_result.per_run) == (large_result.count, large_result.per_run), name
        details = sorted(str(v.get("detail", v.get("problem"))) for v in small_result.violations)
        assert details == sorted(str(v.get("detail", v.get("problem"))) for v in large_result.violations), name


def test_check_cli_writes_check_json_and_exit_codes(
    spark, planted: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean, bad = planted["clean"]["dir"], planted["state"]["dir"]
    assert main(["check", str(clean), "--engine", "spark", "--json", str(tmp_path / "out.json")]) == 0
    doc = json.loads((clean / "check.json").read_text())
    assert doc["engine"] == "spark" and doc["ok"] is True
    assert set(doc["checks"]) == set(CHECKS) and doc["rows"]["applied"] > 0
    assert json.loads((tmp_path / "out.json").read_text())["run_ids"] == ["clean"]
    assert main(["check", str(bad), "--engine", "spark"]) == 1
    doc = json.loads((bad / "check.json").read_text())
    assert doc["checks"]["agreement"]["violations"][0]["log_position"] == planted["state"]["position"]
    out = capsys.readouterr().out
    assert "FAIL" in out and "agreement" in out
    # The report takes the Spark verdict from check.json, with the divergent members' digests.
    from clusterlab.chaos.html_report import write_report

    page = write_report(bad).read_text()
    assert "Spark check (check.json)" in page
    assert f"First divergent log position: <b>{planted['state']['position']}</b> (state)" in page
    assert "0" * 32 in page.lower()  # the planted all-zero state digest


def test_check_cli_bad_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "no such directory" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    assert main(["check", str(tmp_path / "empty")]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_a_run_without_events_or_ops_is_checked(spark, tmp_path: Path) -> None:
    """A trace with no events or ops table (a golden holds only log, applied, messages) is judged on
    what it has, not refused for the missing tables."""
    import shutil

    run = tmp_path / "golden-copy"
    from clusterlab.golden.store import MANIFEST, TRACES, load_manifest

    sim = next(r.name for r in load_manifest(MANIFEST) if r.driver == "sim")  # the set is chosen by coverage
    shutil.copytree(TRACES / sim, run)
    report = check_runs([run], spark=spark, write_json=False)
    assert report.ok and report.rows.get("events", 0) == 0 and report.rows["applied"] > 0, report.to_json()


def test_the_cli_offers_the_plans_spark_knows(capsys: pytest.CaptureFixture[str], planted: dict[str, Any]) -> None:
    """``--plan`` takes what check_runs takes, and is refused with the embedded engine (it plans Spark jobs)."""
    from clusterlab.spark import run_tasks

    from clusterlab.cli.check import PLANS

    assert PLANS == run_tasks.PLANS
    assert main(["check", str(planted["clean"]["dir"]), "--engine", "duckdb", "--plan", "sql"]) == 2
    assert "--plan" in capsys.readouterr().err
    with pytest.raises(ValueError, match="plan must be one of"):
        run_tasks.choose_plan("fast", [])


@pytest.mark.parametrize("plan", ["tasks", "sql"])
def test_a_run_of_a_newer_trace_schema_is_refused_on_the_driver(
    spark: Any, planted: dict[str, Any], tmp_path: Path, plan: str
) -> None:
    """A run declaring a trace schema this clusterlab cannot read is refused with that reason on both
    plans (the task plan meets it in an executor and raises it again on the driver), never judged."""
    from clusterlab.harness.completeness import SEAL, SchemaVersionError, sealed_json
    from clusterlab.harness.trace import TraceError

    from tests.golden import plant

    run = plant.copy_run(planted["clean"]["dir"], tmp_path / "newer", "run-newer")
    plant.reseal(run)
    meta = json.loads((run / "run.json").read_text())
    meta.pop(SEAL)
    meta["schema_version"] = 999
    (run / "run.json").write_bytes(sealed_json(meta))  # sealed as written: only the version is wrong
    with pytest.raises((TraceError, SchemaVersionError), match="newer than this clusterlab reads"):
        check_runs([run], spark=spark, write_json=False, plan=plan)


def test_a_run_of_a_newer_schema_is_left_out_and_the_others_are_still_judged(
    planted: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run a later clusterlab wrote does not stop `check` of many: it is named (exit 2), the others
    are judged, and a violation in one of them still exits 1."""
    from clusterlab.harness.completeness import SEAL, sealed_json

    from clusterlab.cli import main as cli_main
    from tests.golden import plant

    newer = plant.copy_run(planted["clean"]["dir"], tmp_path / "newer", "run-newer")
    meta = json.loads((newer / "run.json").read_text())
    meta.pop(SEAL)
    meta["schema_version"] = 999
    (newer / "run.json").write_bytes(sealed_json(meta))
    clean = plant.copy_run(planted["clean"]["dir"], tmp_path / "clean", "run-clean")
    assert cli_main(["check", str(newer), str(clean), "--engine", "duckdb"]) == 2
    captured = capsys.readouterr()
    assert f"{newer}: run.json: trace schema version 999 is newer" in captured.err and "(not judged)" in captured.err
    assert json.loads((clean / "check.json").read_text())["status"] == "PASS"
    assert not (newer / "check.json").exists()
    failing = plant.copy_run(planted["state"]["dir"], tmp_path / "state", "run-state")
    assert cli_main(["check", str(newer), str(failing), "--engine", "duckdb"]) == 1
    assert cli_main(["check", str(newer), "--engine", "duckdb"]) == 2
