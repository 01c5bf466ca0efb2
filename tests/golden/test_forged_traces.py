"""A resealed trace whose rows or run.json say what no run writes is CORRUPT, never judged: a file of
another run swapped in, a row of another member in a member's file, a member the run does not have, an
event detail that is not JSON, a process listed twice, a run.json value of the wrong JSON type. Each
forgery rewrites run.json's manifest and seal to match (as ``tests/golden/plant.py`` does), so only the
values themselves can give it away; both engines and ``clusterlab check`` say CORRUPT (exit 4) and
name the file."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.checks.embedded import check_runs as check_runs_duckdb
from clusterlab.harness.completeness import SEAL, Status, assess, sealed_json
from clusterlab.harness.recorder import TABLES
from clusterlab.spark.check import check_runs

from clusterlab.cli import main as cli_main
from tests.golden import plant
from tests.golden.plant import copy_run


def _swap_in_another_runs_file(run: Path) -> str:
    other = copy_run(run, run.parent / f"{run.name}-other", "another-run")
    victim = plant.applied_file(run, 1)
    shutil.copyfile(plant.applied_file(other, 1), victim)
    plant.reseal(run)
    return "applied/service-1-i0.arrow: rows of run 'another-run', not of run.json's"


def _rows_of_another_member(run: Path) -> str:
    plant.rewrite(plant.applied_file(run, 1), lambda rows: [{**r, "member_id": 2} for r in rows])
    return "applied/service-1-i0.arrow: rows of member_id 2 in service-1's file"


def _a_member_the_run_does_not_have(run: Path) -> str:
    path = run / "events" / "harness-i0.arrow"
    plant.rewrite(path, lambda rows: [{**r, "member_id": 99} if r["kind"] == "kill" else r for r in rows])
    return "events/harness-i0.arrow: member_id 99 is no member of the run (0, 1, 2)"


def _an_event_detail_that_is_not_json(run: Path) -> str:
    path = run / "events" / "node-1-i0.arrow"
    plant.rewrite(path, lambda rows: [{**rows[0], "detail": "{not json"}, *rows[1:]])
    return "events/node-1-i0.arrow: 1 rows' detail is not a JSON object (first: '{not json')"


def _edit_meta(change: Callable[[dict[str, Any]], None], said: str) -> Callable[[Path], str]:
    def forge(run: Path) -> str:
        meta = json.loads((run / "run.json").read_text())
        meta.pop(SEAL)
        change(meta)
        (run / "run.json").write_bytes(sealed_json(meta))
        return said

    return forge


FORGERIES: dict[str, Callable[[Path], str]] = {
    "another-runs-file": _swap_in_another_runs_file,
    "another-members-rows": _rows_of_another_member,
    "no-such-member": _a_member_the_run_does_not_have,
    "detail-not-json": _an_event_detail_that_is_not_json,
    "process-listed-twice": _edit_meta(
        lambda m: m["processes"].append(m["processes"][0]), "run.json: 'processes' does not match the manifest's files"
    ),
    "config-a-list": _edit_meta(lambda m: m.update(config=[]), "run.json: 'config' is a list, not an object"),
    "workload-a-string": _edit_meta(
        lambda m: m.update(workload="kv"), "run.json: 'workload' is a string, not an object"
    ),
    "trace-format-a-string": _edit_meta(
        lambda m: m.update(trace_format="xxh3-128"), "run.json: 'trace_format' is a string, not an object"
    ),
    "unknown-digest": _edit_meta(
        lambda m: m["trace_format"].update(entry_digest="md5"),
        "run.json: 'trace_format.entry_digest' 'md5' is none of xxh3-128, blake2b-128",
    ),
    "workload-spec-a-number": _edit_meta(
        lambda m: m["workload"].update(workload=7), "run.json: 'workload.workload' is a number, not a string"
    ),
    "seed-a-string": _edit_meta(lambda m: m.update(seed="1"), "run.json: 'seed' is a string, not a number"),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_a_resealed_forgery_is_corrupt_and_named(
    sim_run: Path, tmp_path: Path, forgery: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(sim_run, tmp_path / "run", "forged")
    assert check_runs_duckdb([run], write_json=False).status == "PASS"  # the copy passes before the forgery
    said = FORGERIES[forgery](run)
    findings = assess(run, TABLES).findings
    assert [f for f in findings if f.status is Status.CORRUPT and f.describe().startswith(said)], [
        f.describe() for f in findings
    ]
    assert cli_main(["check", str(run), "--engine", "duckdb"]) == 4
    out = capsys.readouterr().out
    assert "CORRUPT" in out and "PASS" not in out, out
    [judged] = json.loads((run / "check.json").read_text())["completeness"].values()
    assert any(f"{f['file']}: {f['problem']}".startswith(said) for f in judged["findings"]), judged


@pytest.mark.parametrize("forgery", ["another-runs-file", "detail-not-json", "no-such-member"])
def test_spark_judges_a_forged_file_as_the_local_verdict_does(
    sim_run: Path, tmp_path: Path, spark, forgery: str
) -> None:
    """The Spark check gathers each file's row values on its executors (the ``files`` table's ``values``)
    and judges them with the same function: the sql plan once said PASS on a detail DuckDB cannot parse."""
    run = copy_run(sim_run, tmp_path / "run", "forged")
    said = FORGERIES[forgery](run)
    report = check_runs([run], spark=spark, write_json=False)
    assert report.status == "CORRUPT"
    assert any(f.describe().startswith(said) for f in report.completeness[str(run)].findings)


def test_every_recorded_trace_holds_its_own_values(sim_run: Path) -> None:
    """The rule each forgery breaks holds for what the recorder writes: a clean run has no value finding."""
    run_ids = {json.loads(f.values or "{}").get("run_ids", [None])[0] for f in _facts(sim_run) if f.values}
    assert len(run_ids) == 1 and None not in run_ids
    assert assess(sim_run, TABLES).ok


def _facts(run: Path) -> list[Any]:
    from clusterlab.harness.completeness import scan

    return [f for f in scan(run, TABLES) if f.table != "log"]
