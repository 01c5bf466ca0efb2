"""Complete or not judged (docs/trace-schema.md, "Completeness"): deleting, truncating or corrupting any
table of a run makes the local verdict, the Spark check, ``golden bless``, the HTML report and
``trace summary`` say INCOMPLETE or CORRUPT with the file named, never PASS; a torn tail a SIGKILL
explains stays acceptable and is shown; a newer trace schema is a clear error."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from clusterlab.chaos.verify import verify_run
from clusterlab.golden.report import render
from clusterlab.golden.spark.check import check_runs
from clusterlab.golden.store import GoldenError, bless
from clusterlab.golden.verify import verify_goldens
from clusterlab.harness.completeness import (
    EXIT_CORRUPT,
    EXIT_INCOMPLETE,
    SCHEMA_VERSION,
    Status,
    assess,
    exit_code,
)
from clusterlab.harness.recorder import TABLES, RunRecorder
from clusterlab.harness.trace import TraceError, open_run

from clusterlab.cli import main as cli_main
from tests.golden import plant
from tests.golden.plant import copy_run

# ------------------------------------------------------------------------------------------- damage


def _largest(run: Path, table: str) -> Path:
    return max((run / table).glob("*.arrow"), key=lambda p: p.stat().st_size)


def delete_applied(run: Path) -> str:
    shutil.rmtree(run / "applied")
    return "applied/"


def delete_one_process_file(run: Path) -> str:
    victim = run / "events" / "node-2-i0.arrow"
    victim.unlink()
    return "events/node-2-i0.arrow"


def truncate_mid_stream(run: Path) -> str:
    """Cut the largest applied file in the middle: rows lost before its process's recorded end."""
    victim = _largest(run, "applied")
    os.truncate(victim, victim.stat().st_size // 2)
    return f"applied/{victim.name}"


def flip_log_bytes(run: Path) -> str:
    victim = run / "log" / "committed.arrow"
    data = bytearray(victim.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 4):
        data[i] ^= 0xFF
    victim.write_bytes(bytes(data))
    return "log/committed.arrow"


def only_run_json(run: Path) -> str:
    for table in TABLES:
        shutil.rmtree(run / table, ignore_errors=True)
    return "applied/"


def only_messages(run: Path) -> str:
    for table in TABLES:
        if table != "messages":
            shutil.rmtree(run / table, ignore_errors=True)
    return "applied/"


def recorder_sidecar(run: Path) -> str:
    """The robust recorder's contract: a process that gave up on a disk error leaves a sidecar."""
    (run / "incomplete").mkdir()
    (run / "incomplete" / "service-1.json").write_text(
        json.dumps(
            {"process": "service-1", "reason": "ENOSPC: no space left on device", "at_ns": 123, "table": "applied"}
        )
    )
    return "incomplete/service-1.json"


DAMAGE: dict[str, tuple[Callable[[Path], str], Status]] = {
    "delete-applied": (delete_applied, Status.INCOMPLETE),
    "delete-process-file": (delete_one_process_file, Status.INCOMPLETE),
    "truncate-mid-stream": (truncate_mid_stream, Status.INCOMPLETE),
    "flip-log-bytes": (flip_log_bytes, Status.CORRUPT),
    "only-run-json": (only_run_json, Status.INCOMPLETE),
    "only-messages": (only_messages, Status.INCOMPLETE),
    "recorder-sidecar": (recorder_sidecar, Status.INCOMPLETE),
}


@pytest.fixture(scope="module")
def damaged(sim_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str, Status]]:
    """One damaged copy of the clean simulator run per kind of damage: name -> (run, file named, status)."""
    root = tmp_path_factory.mktemp("damaged")
    out = {}
    for name, (damage, status) in DAMAGE.items():
        run = copy_run(sim_run, root / name, f"run-{name}")
        out[name] = (run, damage(run), status)
    return out


def test_the_clean_run_is_complete_and_passes(sim_run: Path) -> None:
    v = verify_run(sim_run)
    assert v.completeness is not None and v.completeness.status is Status.COMPLETE
    assert v.completeness.schema_version == SCHEMA_VERSION
    assert v.status == "PASS"


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_local_verdict_names_the_file_and_never_passes(damaged, name: str) -> None:
    run, file, status = damaged[name]
    v = verify_run(run)
    assert v.status == str(status) and not v.ok
    assert v.completeness is not None
    assert any(f.file == file for f in v.completeness.findings), v.completeness.lines()
    assert not any(v.violations.values()), "an incomplete run is not judged, so no protocol violation"


def test_truncation_counts_the_rows_lost(damaged) -> None:
    run, file, _ = damaged["truncate-mid-stream"]
    [finding] = [f for f in assess(run, TABLES).findings if f.file == file]
    assert finding.rows_lost is not None and finding.rows_lost > 0


def test_flipped_bytes_are_corruption_at_an_offset_not_a_protocol_violation(damaged) -> None:
    run, file, _ = damaged["flip-log-bytes"]
    [finding] = assess(run, TABLES).findings
    assert (finding.file, finding.status) == (file, Status.CORRUPT)
    size = (run / file).stat().st_size
    assert finding.offset is not None and 0 < finding.offset <= size // 2


def test_sidecar_names_the_process_and_reason(damaged) -> None:
    run, _, _ = damaged["recorder-sidecar"]
    [finding] = assess(run, TABLES).findings
    assert "service-1" in finding.problem and "ENOSPC" in finding.problem and "applied" in finding.problem


def test_spark_check_agrees_and_exits_3_or_4(spark, damaged) -> None:
    for name, (run, file, status) in damaged.items():
        report = check_runs([run], spark=spark, write_json=False)
        assert report.status == str(status), name
        assert report.exit_code == {Status.INCOMPLETE: EXIT_INCOMPLETE, Status.CORRUPT: EXIT_CORRUPT}[status]
        [c] = report.completeness.values()
        assert any(f.file == file for f in c.findings), (name, c.lines())
        assert c.lines() == verify_run(run).completeness.lines(), "Spark and local judge alike"  # type: ignore[union-attr]
        assert all(r.count == 0 for r in report.checks.values()), "not judged"


def test_spark_check_of_several_runs_checks_the_complete_ones(spark, sim_run: Path, damaged, tmp_path: Path) -> None:
    clean = copy_run(sim_run, tmp_path / "clean", "run-clean")
    broken, _, _ = damaged["delete-applied"]
    report = check_runs([clean, broken], spark=spark, write_json=False)
    assert report.run_status("run-clean") == "PASS"
    assert report.run_status("run-delete-applied") == "INCOMPLETE"
    assert report.exit_code == EXIT_INCOMPLETE
    assert report.rows["applied"] > 0  # the complete run was read and judged


def test_cli_check_exit_code_and_message(spark, damaged, capsys) -> None:
    run, file, _ = damaged["only-run-json"]
    assert cli_main(["check", str(run)]) == EXIT_INCOMPLETE
    out = capsys.readouterr().out
    assert "INCOMPLETE" in out and file in out and "PASS" not in out


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_bless_refuses(damaged, tmp_path: Path, name: str) -> None:
    run, file, status = damaged[name]
    with pytest.raises(GoldenError) as e:
        bless(run, "g", traces=tmp_path, manifest=tmp_path / "goldens.json")
    assert e.value.status == str(status) and file in str(e.value)
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_report_is_red_and_names_the_file(damaged, name: str) -> None:
    run, file, status = damaged[name]
    # A check.json written before the damage must not turn the report green.
    (run / "check.json").write_text(json.dumps({"ok": True, "checks": {}}))
    try:
        html = render(run)
    finally:
        (run / "check.json").unlink()
    assert f'Verdict: <span class="fail">{status}</span>' in html
    assert f"<code>{file}</code>" in html
    assert "every member reached the same state" not in html


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_trace_summary_names_the_file(damaged, name: str, capsys) -> None:
    run, file, status = damaged[name]
    code = cli_main(["trace", "summary", str(run)])
    out = capsys.readouterr().out
    assert code == exit_code([str(status)])
    assert f"completeness: {status}" in out and file in out


# ------------------------------------------------------------------------------------------ SIGKILL

CHILD = textwrap.dedent(
    """
    import sys
    from clusterlab.harness.recorder import ProcessRecorder

    rec = ProcessRecorder(sys.argv[1], "r", "node-0", 0, 0, max_rows=7)
    i = 0
    while True:  # never closed: SIGKILL ends it mid-write or between batches
        rec.event("commit", 0, 1, i, {"n": i})
        i += 1
        if i == 70:
            print("ready", flush=True)
    """
)


def _killed_run(tmp_path: Path, *, record_kill: bool) -> Path:
    """A run whose node-0 recorder was really SIGKILLed while writing; the harness records the kill
    (or, with ``record_kill`` False, nothing explains the torn file)."""
    run_dir = tmp_path / ("killed" if record_kill else "unexplained")
    rec = RunRecorder(run_dir, "r", scenario="sigkill")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    if record_kill:
        rec.event("kill", 0)
    rec.finish("ok")
    return run_dir


def test_torn_tail_after_an_explained_sigkill_is_acceptable_and_shown(tmp_path: Path) -> None:
    run = _killed_run(tmp_path, record_kill=True)
    c = assess(run, TABLES)
    assert c.status is Status.COMPLETE, c.lines()
    [note] = c.notes
    assert note.file == "events/node-0-i0.arrow" and "SIGKILL of node-0" in note.problem
    assert "SIGKILL of node-0" in render(run)


def test_torn_tail_no_kill_explains_is_incomplete(tmp_path: Path) -> None:
    run = _killed_run(tmp_path, record_kill=False)
    c = assess(run, TABLES)
    assert c.status is Status.INCOMPLETE
    assert [f.file for f in c.findings] == ["events/node-0-i0.arrow"]
    assert "no kill event explains it" in c.findings[0].problem


def test_cutting_a_killed_file_further_loses_rows(tmp_path: Path) -> None:
    run = _killed_run(tmp_path, record_kill=True)
    victim = run / "events" / "node-0-i0.arrow"
    meta = json.loads((run / "run.json").read_text())
    recorded = meta["files"]["events/node-0-i0.arrow"]
    os.truncate(victim, recorded["chunks"][1][0] + 10)  # inside the second batch: one batch kept
    [finding] = assess(run, TABLES).findings
    assert finding.status is Status.INCOMPLETE and finding.file == "events/node-0-i0.arrow"
    assert finding.rows_lost == recorded["rows"] - 7


# ----------------------------------------------------------------------------------- schema version


def test_a_newer_schema_version_is_a_clear_error(sim_run: Path, tmp_path: Path, capsys) -> None:
    run = copy_run(sim_run, tmp_path / "newer", "run-newer")
    meta = json.loads((run / "run.json").read_text())
    meta["schema_version"] = SCHEMA_VERSION + 1
    (run / "run.json").write_text(json.dumps(meta))
    with pytest.raises(TraceError, match=f"schema version {SCHEMA_VERSION + 1} is newer than this clusterlab"):
        open_run(run)
    assert cli_main(["trace", "summary", str(run)]) == 2
    assert "newer than this clusterlab reads" in capsys.readouterr().err


def test_a_missing_schema_version_is_version_1_judged_from_the_files(sim_run: Path, tmp_path: Path) -> None:
    run = copy_run(sim_run, tmp_path / "v1", "run-v1")
    meta = json.loads((run / "run.json").read_text())
    for key in ("schema_version", "files", "processes"):
        meta.pop(key)
    (run / "run.json").write_text(json.dumps(meta))
    c = assess(run, TABLES)
    assert (c.schema_version, c.status) == (1, Status.COMPLETE)
    shutil.rmtree(run / "applied")
    assert [f.file for f in assess(run, TABLES).findings] == ["applied/"]


# ------------------------------------------------------------------------------------------ goldens


def _drop_last_log_rows(golden: Path) -> str:
    path = golden / "log" / "committed.arrow"
    table = plant.read_file(path)
    plant.write_file(path, table.slice(0, table.num_rows - 3))
    return "log/committed.arrow has"


def _garble_messages(golden: Path) -> str:
    (golden / "messages" / "golden.arrow").write_bytes(b"not an arrow stream at all")
    return "CORRUPT golden file"


def _delete_applied(golden: Path) -> str:
    (golden / "applied" / "golden.arrow").unlink()
    return "INCOMPLETE golden"


@pytest.mark.parametrize("damage", [_drop_last_log_rows, _garble_messages, _delete_applied])
def test_golden_verify_refuses_a_damaged_golden(sim_run: Path, tmp_path: Path, damage) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    g = bless(sim_run, "g", traces=traces, manifest=tmp_path / "goldens.json")
    said = damage(g.directory)
    report = verify_goldens(["g"], traces=traces, rerun=False)
    assert not report.ok
    [error] = report.verdicts[0].errors
    assert said in error and ("INCOMPLETE" in error or "CORRUPT" in error), error


def test_cli_bless_exits_3_for_incomplete_and_4_for_corrupt(damaged, tmp_path: Path, capsys) -> None:
    for name, code in (("delete-applied", EXIT_INCOMPLETE), ("flip-log-bytes", EXIT_CORRUPT)):
        run, file, _ = damaged[name]
        assert cli_main(["golden", "bless", str(run), "--name", "x", "--traces", str(tmp_path)]) == code
        err = capsys.readouterr().err
        assert file in err and "not PASS" in err and len(err.strip().splitlines()) == 1
