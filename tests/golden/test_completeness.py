"""Complete or not judged (docs/trace-schema.md, "Completeness"): deleting, truncating or corrupting any
table of a run makes the local verdict, the Spark check, ``golden bless``, the HTML report and
``trace summary`` say INCOMPLETE or CORRUPT with the file named, never PASS; a torn tail a SIGKILL
explains stays acceptable and is shown; a newer trace schema is a clear error."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from clusterlab.chaos.checks.embedded import check_runs as check_runs_duckdb
from clusterlab.chaos.html_report import render
from clusterlab.chaos.verdict import verify_run
from clusterlab.golden.store import GoldenError, bless, load_golden
from clusterlab.golden.verify import verify_goldens
from clusterlab.harness.completeness import (
    EXIT_CORRUPT,
    EXIT_INCOMPLETE,
    SCHEMA_VERSION,
    Status,
    assess,
    canonical_json,
    exit_code,
)
from clusterlab.harness.recorder import TABLES
from clusterlab.harness.trace import TraceError, open_run
from clusterlab.spark.check import check_runs

from clusterlab.cli import main as cli_main
from tests.golden import plant
from tests.golden.plant import copy_run, killed_run

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


@pytest.mark.parametrize("plan", ["tasks", "sql"])
def test_spark_check_agrees_and_exits_3_or_4(spark, damaged, plan: str) -> None:
    for name, (run, file, status) in damaged.items():
        report = check_runs([run], spark=spark, write_json=False, plan=plan)
        assert report.status == str(status), name
        assert report.exit_code == {Status.INCOMPLETE: EXIT_INCOMPLETE, Status.CORRUPT: EXIT_CORRUPT}[status]
        [c] = report.completeness.values()
        assert any(f.file == file for f in c.findings), (name, c.lines())
        assert c.lines() == verify_run(run).completeness.lines(), "Spark and local judge alike"  # type: ignore[union-attr]
        assert all(r.count == 0 for r in report.checks.values()), "not judged"


@pytest.mark.parametrize("plan", ["tasks", "sql"])
def test_spark_check_of_several_runs_checks_the_complete_ones(
    spark, sim_run: Path, damaged, tmp_path: Path, plan: str
) -> None:
    clean = copy_run(sim_run, tmp_path / "clean", "run-clean")
    broken, _, _ = damaged["delete-applied"]
    report = check_runs([clean, broken], spark=spark, write_json=False, plan=plan)
    assert report.run_status(str(clean)) == "PASS"
    assert report.run_status(str(broken)) == "INCOMPLETE"
    assert report.exit_code == EXIT_INCOMPLETE
    assert report.rows["applied"] > 0  # the complete run was read and judged


def test_cli_check_exit_code_and_message(spark, damaged, capsys) -> None:
    run, file, _ = damaged["only-run-json"]
    assert cli_main(["check", str(run)]) == EXIT_INCOMPLETE
    out = capsys.readouterr().out
    assert "INCOMPLETE" in out and file in out and "PASS" not in out


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_check_json_is_never_ok_for_an_unjudged_run(damaged, name: str) -> None:
    run, _, status = damaged[name]
    try:
        check_runs_duckdb([run])
        doc = json.loads((run / "check.json").read_text())
    finally:
        (run / "check.json").unlink(missing_ok=True)
    assert (doc["status"], doc["ok"]) == (str(status), False)


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


def test_torn_tail_after_an_explained_sigkill_is_acceptable_and_shown(tmp_path: Path) -> None:
    run = killed_run(tmp_path, record_kill=True)
    c = assess(run, TABLES)
    assert c.status is Status.COMPLETE, c.lines()
    [note] = c.notes
    assert note.file == "events/node-0-i0.arrow" and "SIGKILL of node-0" in note.problem
    assert "SIGKILL of node-0" in render(run)


def test_torn_tail_no_kill_explains_is_incomplete(tmp_path: Path) -> None:
    run = killed_run(tmp_path, record_kill=False)
    c = assess(run, TABLES)
    assert c.status is Status.INCOMPLETE
    assert [f.file for f in c.findings] == ["events/node-0-i0.arrow"]
    assert "no kill event explains it" in c.findings[0].problem


def test_cutting_a_killed_file_further_loses_rows(tmp_path: Path) -> None:
    run = killed_run(tmp_path, record_kill=True)
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


def _edit_meta(run: Path, change: Callable[[dict], object], *, canonical: bool = True) -> None:
    meta = json.loads((run / "run.json").read_text())
    change(meta)
    (run / "run.json").write_bytes(canonical_json(meta) if canonical else json.dumps(meta).encode())


def _status(run: Path) -> str:
    return check_runs_duckdb([run], write_json=False).status


# Damage that, with schema_version removed from run.json, once passed `clusterlab check`.
UNVERSIONED_DAMAGE = {
    "ops-deleted": lambda run: shutil.rmtree(run / "ops"),
    "applied-file-deleted": lambda run: next((run / "applied").glob("*.arrow")).unlink(),
    "entry-type-flipped": lambda run: _flip_entry_type(run),
}


def _flip_entry_type(run: Path) -> None:
    victim = next((run / "applied").glob("*.arrow"))
    data = bytearray(victim.read_bytes())
    at = data.index(b"SessionMessage")
    data[at] ^= 0x01  # "RessionMessage": still a valid stream, a different entry type
    victim.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", sorted(UNVERSIONED_DAMAGE))
def test_removing_schema_version_does_not_make_damage_pass(sim_run: Path, tmp_path: Path, damage: str) -> None:
    run = copy_run(sim_run, tmp_path / "unversioned", "run-unversioned")
    _edit_meta(run, lambda m: m.pop("schema_version"))
    assert _status(run) == "CORRUPT", "the seal covers schema_version"
    UNVERSIONED_DAMAGE[damage](run)
    assert _status(run) in ("INCOMPLETE", "CORRUPT")
    # Without the seal and the manifest too, nothing declares what the run recorded: never judged.
    _edit_meta(run, lambda m: [m.pop(k) for k in ("seal", "files", "processes")])
    c = assess(run, TABLES)
    assert (c.schema_version, c.status) == (1, Status.INCOMPLETE)
    assert any("no manifest" in f.problem for f in c.findings), c.lines()


def test_a_version_2_run_with_its_manifest_is_still_read(sim_run: Path, tmp_path: Path) -> None:
    """Version 2 (a manifest, no seal) exists in the wild: it is judged by its manifest."""
    run = copy_run(sim_run, tmp_path / "v2", "run-v2")
    _edit_meta(run, lambda m: (m.pop("seal"), m.update(schema_version=2)), canonical=False)
    assert (assess(run, TABLES).status, _status(run)) == (Status.COMPLETE, "PASS")
    next((run / "applied").glob("*.arrow")).unlink()
    assert _status(run) == "INCOMPLETE"


def test_a_version_3_run_without_its_seal_is_incomplete(sim_run: Path, tmp_path: Path) -> None:
    run = copy_run(sim_run, tmp_path / "unsealed", "run-unsealed")
    _edit_meta(run, lambda m: m.pop("seal"))
    [finding] = assess(run, TABLES).findings
    assert (finding.status, finding.file) == (Status.INCOMPLETE, "run.json") and "no seal" in finding.problem


def test_a_run_none_of_whose_nodes_recorded_is_incomplete(sim_run: Path, tmp_path: Path) -> None:
    """Node files gone and a manifest (unsealed, version 2) that agrees: every protocol check would
    pass on nothing, so the run is not judged."""
    run = copy_run(sim_run, tmp_path / "no-nodes", "run-no-nodes")

    def drop_nodes(meta: dict) -> None:
        meta.pop("seal")
        meta["schema_version"] = 2
        for path in [p for p, w in meta["files"].items() if w["process"].startswith("node-")]:
            (run / path).unlink()
            del meta["files"][path]
        meta["processes"] = [p for p in meta["processes"] if not p["process"].startswith("node-")]

    _edit_meta(run, drop_nodes, canonical=False)
    c = assess(run, TABLES)
    assert c.status is Status.INCOMPLETE, c.lines()
    assert any("none of their nodes recorded" in f.problem for f in c.findings), c.lines()
    assert _status(run) == "INCOMPLETE"


@pytest.mark.parametrize(
    ("field", "value", "status"),
    [
        ("run_id", "another-run", Status.CORRUPT),  # any edit breaks the seal
        ("outcome", "failed", Status.CORRUPT),
        ("members", [], Status.CORRUPT),
        ("trace_format", None, Status.CORRUPT),
    ],
)
def test_any_edit_of_run_json_is_corrupt(sim_run: Path, tmp_path: Path, field: str, value: object, status) -> None:
    run = copy_run(sim_run, tmp_path / "edited", "run-edited")
    _edit_meta(run, lambda m: m.update({field: value}))
    c = assess(run, TABLES)
    assert c.status is status and c.findings[0].file == "run.json", c.lines()
    assert "seal" in c.findings[0].problem


def test_a_reformatted_run_json_is_corrupt(sim_run: Path, tmp_path: Path) -> None:
    run = copy_run(sim_run, tmp_path / "reformatted", "run-reformatted")
    _edit_meta(run, lambda m: None, canonical=False)  # same content, other bytes
    [finding] = assess(run, TABLES).findings
    assert finding.status is Status.CORRUPT and "bytes differ" in finding.problem


@pytest.mark.parametrize(
    ("change", "status", "said"),
    [
        (lambda e: e.update(rows="12"), Status.CORRUPT, "'rows' is '12'"),
        (lambda e: e.pop("chunks"), Status.CORRUPT, "no 'chunks'"),
        (lambda e: e.update(table="ops"), Status.CORRUPT, "not its file's"),
        (lambda e: e.update(rows=e["rows"] + 1), Status.CORRUPT, "rows is not the file's"),
        (lambda e: e.update(closed=False), Status.CORRUPT, "closed is not the file's"),
    ],
)
def test_a_malformed_manifest_of_an_unsealed_run_is_corrupt(
    sim_run: Path, tmp_path: Path, change, status, said
) -> None:
    """Without the seal (version 2), every manifest field is still checked for type and against the file."""
    run = copy_run(sim_run, tmp_path / "malformed", "run-malformed")

    def edit(meta: dict) -> None:
        meta.pop("seal")
        meta["schema_version"] = 2
        change(meta["files"]["applied/service-0-i0.arrow"])

    _edit_meta(run, edit)
    c = assess(run, TABLES)
    assert c.status is status and any(said in f.problem for f in c.findings), c.lines()


def test_a_file_the_manifest_does_not_list_or_bytes_past_its_end_are_corrupt(sim_run: Path, tmp_path: Path) -> None:
    run = copy_run(sim_run, tmp_path / "added", "run-added")
    shutil.copy(run / "events" / "node-0-i0.arrow", run / "events" / "node-0-i7.arrow")
    [finding] = assess(run, TABLES).findings
    assert (finding.status, finding.file) == (Status.CORRUPT, "events/node-0-i7.arrow")
    (run / "events" / "node-0-i7.arrow").unlink()
    with open(run / "log" / "committed.arrow", "ab") as f:
        f.write(b"more")
    [finding] = assess(run, TABLES).findings
    assert (finding.status, finding.file) == (Status.CORRUPT, "log/committed.arrow") and "4 B after" in finding.problem


def test_anything_but_a_stream_file_in_a_table_folder_is_corrupt(sim_run: Path, tmp_path: Path) -> None:
    """A copy kept beside a stream file, a note, a directory, a stream file turned into a directory: the
    readers read only regular ``*.arrow`` files, so each is named as a stray, and the run never passes."""
    run = copy_run(sim_run, tmp_path / "strays", "run-strays")
    shutil.copy(run / "applied" / "service-0-i0.arrow", run / "applied" / "service-0-i0.arrow.bak")
    (run / "messages" / "README.txt").write_text("notes")
    (run / "ops" / "old").mkdir()
    got = {(f.status, f.file, f.problem.split(" in a table folder")[0]) for f in assess(run, TABLES).findings}
    assert got == {
        (Status.CORRUPT, "applied/service-0-i0.arrow.bak", "not a trace file"),
        (Status.CORRUPT, "messages/README.txt", "not a trace file"),
        (Status.CORRUPT, "ops/old", "a directory"),
    }
    assert _status(run) == "CORRUPT"
    for stray in ("applied/service-0-i0.arrow.bak", "messages/README.txt", "ops/old"):
        target = run / stray
        target.rmdir() if target.is_dir() else target.unlink()
    assert _status(run) == "PASS"
    (run / "events" / "node-0-i0.arrow").unlink()
    (run / "events" / "node-0-i0.arrow").mkdir()  # a reader that opened it would raise IsADirectoryError
    found = {(f.status, f.file) for f in assess(run, TABLES).findings}
    assert {(Status.CORRUPT, "events/node-0-i0.arrow"), (Status.INCOMPLETE, "events/node-0-i0.arrow")} <= found
    assert _status(run) == "CORRUPT"


def test_a_file_whose_columns_differ_from_its_tables_is_corrupt_even_resealed(
    sim_run: Path, tmp_path: Path, spark
) -> None:
    """One member's applied file without its state_digest column, the manifest and seal rewritten to
    match: a reader would take the column as nulls and find nothing to disagree with."""
    run = copy_run(sim_run, tmp_path / "columns", "run-columns")
    victim = plant.applied_file(run, 1)
    plant.write_file(victim, plant.read_file(victim).drop_columns(["state_digest"]))
    plant.reseal(run)
    [finding] = assess(run, TABLES).findings
    assert (finding.status, finding.file) == (Status.CORRUPT, f"applied/{victim.name}"), finding
    assert finding.problem == "its columns differ from the other applied files' (missing state_digest)"
    assert _status(run) == "CORRUPT"
    assert check_runs([run], spark=spark, write_json=False).status == "CORRUPT"  # Spark judges it the same


@pytest.mark.parametrize("content", ["[]", '"run"', "7"])
def test_a_run_json_that_is_not_an_object_is_incomplete_on_the_command_line(
    sim_run: Path, tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(sim_run, tmp_path / "not-an-object", "run-not-an-object")
    (run / "run.json").write_text(content)
    assert cli_main(["check", str(run), "--engine", "duckdb"]) == 3
    out = capsys.readouterr().out
    assert "INCOMPLETE" in out and "run.json" in out, out


# ------------------------------------------------------------------------------------------ goldens


def test_bless_into_a_dir_that_is_a_file_is_one_line_and_exit_2(
    sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "goldens").write_text("not a directory")
    assert cli_main(["golden", "bless", str(sim_run), "--name", "g", "--dir", str(tmp_path / "goldens")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"clusterlab golden: --dir {tmp_path / 'goldens'}: is a file, not a directory", err


def _drop_last_log_rows(golden: Path) -> str:
    path = golden / "log" / "committed.arrow"
    table = plant.read_file(path)
    plant.write_file(path, table.slice(0, table.num_rows - 3))
    return "log/committed.arrow"


def _garble_messages(golden: Path) -> str:
    (golden / "messages" / "golden.arrow").write_bytes(b"not an arrow stream at all")
    return "messages/golden.arrow"


def _delete_applied(golden: Path) -> str:
    (golden / "applied" / "golden.arrow").unlink()
    return "applied/golden.arrow: file missing"


def _flip_a_state_digest(golden: Path) -> str:
    """One byte of the golden's recorded state, where a diff would call it a divergence of the code."""
    path = golden / "applied" / "golden.arrow"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    return "applied/golden.arrow at byte"


def _edit_run_json(golden: Path) -> str:
    meta = json.loads((golden / "run.json").read_text())
    meta["golden"]["seed"] += 1
    (golden / "run.json").write_bytes(canonical_json(meta))
    return "run.json: its content differs"


@pytest.mark.parametrize(
    ("damage", "status"),
    [
        (_drop_last_log_rows, "CORRUPT"),
        (_garble_messages, "INCOMPLETE"),
        (_delete_applied, "INCOMPLETE"),
        (_flip_a_state_digest, "CORRUPT"),
        (_edit_run_json, "CORRUPT"),
    ],
)
def test_golden_verify_calls_a_damaged_golden_damaged(sim_run: Path, tmp_path: Path, damage, status: str) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    g = bless(sim_run, "g", traces=traces, manifest=tmp_path / "goldens.json")
    assert load_golden("g", traces).directory == g.directory  # blessed intact
    said = damage(g.directory)
    report = verify_goldens(["g"], traces=traces, rerun=False, spark=_NoSpark())
    assert not report.ok
    [v] = report.verdicts
    [error] = v.errors
    assert error.startswith(f"{status} golden g: ") and said in error, error
    assert v.verdict == status and (v.replay, v.rerun, v.messages) == (None, None, None), "not diffed"
    assert f"{status} golden" in _rendered(report.table())


class _NoSpark:
    """verify_goldens without a Spark session: a damaged golden never reaches the diff (which would
    call the damage a divergence); an intact one's diff is not what these tests are about."""

    class sparkContext:  # the attribute verify_goldens reads
        master = "none"

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a damaged golden reached the Spark diff ({name})")


def _rendered(table: object) -> str:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_cli_bless_exits_3_for_incomplete_and_4_for_corrupt(damaged, tmp_path: Path, capsys) -> None:
    for name, code in (("delete-applied", EXIT_INCOMPLETE), ("flip-log-bytes", EXIT_CORRUPT)):
        run, file, _ = damaged[name]
        assert cli_main(["golden", "bless", str(run), "--name", "x", "--traces", str(tmp_path)]) == code
        err = capsys.readouterr().err
        assert file in err and "not PASS" in err and len(err.strip().splitlines()) == 1


def test_check_of_a_run_that_itself_failed_says_so_beside_the_verdict_on_its_trace(
    sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose harness gave up (outcome ``failed``: no progress, an error) has a trace the checks can
    still judge; ``check`` shows the run's own failure beside that verdict, and check.json carries it."""
    run = copy_run(sim_run, tmp_path / "failed", "run-failed")
    meta = json.loads((run / "run.json").read_text())
    meta.pop("seal")
    meta["outcome"] = "failed"
    (run / "run.json").write_bytes(plant.sealed_json(meta))
    assert cli_main(["check", str(run), "--engine", "duckdb"]) == 0
    out = capsys.readouterr().out
    assert "run outcome" in out and "PASS" in out  # its row (the terminal's width wraps the text)
    [judged] = json.loads((run / "check.json").read_text())["completeness"].values()
    assert judged["outcome"] == "failed"
