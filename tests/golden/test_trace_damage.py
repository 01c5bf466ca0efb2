"""No damaged trace ever passes: random damage to real traces — a file or directory deleted, a file cut
short, grown or with a flipped byte, a file added (a stream file or any other), a stream file turned into
a directory, any run.json field (nested ones too) edited or dropped, a manifest entry edited and run.json
resealed, a row given a value no run records (another run's id, no member's id, an event detail that is
not JSON) and run.json resealed, several of these at once — and the verdict of ``clusterlab check``'s
path (completeness, then the DuckDB engine, then check.json) is never PASS: it is INCOMPLETE, CORRUPT or
a clear error (a newer schema version). A golden's damage also makes ``load_golden`` (what ``golden
verify`` reads) refuse it.

The traces are built once per session (a simulator leader-kill run, a run whose process a real SIGKILL
tore, a golden blessed from the simulator run) and copied per case; 3 x 400 cases, one per trace kind,
so ``pytest -n auto`` spreads them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from clusterlab.chaos.checks.embedded import check_runs
from clusterlab.golden.store import GoldenError, bless, load_golden
from clusterlab.harness.completeness import SEAL, SchemaVersionError, canonical_json, sealed_json
from clusterlab.harness.trace import TraceError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.golden import plant
from tests.golden.plant import killed_run

CASES_PER_TRACE = 400  # x 3 trace kinds: 1,200 damaged traces per run of the suite
NOT_TRACE = ("check.json", "report.html")  # written by readers, not part of the trace
JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(0, 9), max_size=2),
)


@pytest.fixture(scope="module")
def traces(sim_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The clean traces damage starts from (each checked to PASS first)."""
    root = tmp_path_factory.mktemp("clean-traces")
    killed = killed_run(root, record_kill=True)
    (root / "goldens").mkdir()
    golden = bless(sim_run, "g", traces=root / "goldens", manifest=root / "goldens.json").directory
    out = {"sim": sim_run, "killed": killed, "golden": golden}
    for name, run in out.items():
        assert check_runs([run], write_json=False).status == "PASS", name
    return out


# ------------------------------------------------------------------------------------------- damage


def _files(run: Path) -> list[Path]:
    return sorted(p for p in run.rglob("*") if p.is_file() and p.name not in NOT_TRACE)


def _snapshot(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in _files(run)} if run.is_dir() else {}


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON document (keys and list indexes), containers and leaves alike."""
    if at:
        yield at
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield from _paths(v, (*at, k))


def _edit(doc: Any, path: tuple[Any, ...], value: Any, drop: bool) -> None:
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


def edit_run_json(run: Path, data: st.DataObject, *, reseal: bool) -> str | None:
    """Edit or drop one field of run.json, at any depth; with ``reseal``, only inside the manifest
    (``files``, ``processes``), and run.json sealed again as if the run had written it so. None when
    run.json is gone or no longer an object (an earlier damage)."""
    try:
        meta = json.loads((run / "run.json").read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    where = {k: v for k, v in meta.items() if k in ("files", "processes")} if reseal else meta
    paths = list(_paths(where))
    if not paths:
        return None
    path = data.draw(st.sampled_from(paths), label="field")
    drop = data.draw(st.booleans(), label="drop")
    value = None if drop else data.draw(JSON_VALUES, label="value")
    _edit(meta, path, value, drop)
    if reseal:
        meta.pop(SEAL, None)
    (run / "run.json").write_bytes(sealed_json(meta) if reseal else canonical_json(meta))
    return f"run.json {'drop' if drop else f'set {value!r}'} at {list(path)}{' (resealed)' if reseal else ''}"


FORGED_DETAILS = ("", "{", "not json", "[1]", '"text"', "null", "7")


def forge_row(run: Path, data: st.DataObject) -> str | None:
    """Give one row of a stream file a value no run records — another run's ``run_id``, a ``member_id``
    no member has, an event ``detail`` that is not a JSON object — and reseal run.json as if the run had
    written it so. None when there is no readable file with such a column, or run.json is gone."""
    try:
        meta = json.loads((run / "run.json").read_bytes())
    except (OSError, ValueError):
        return None
    files = [p for p in _files(run) if p.parent.name in ("messages", "applied", "events", "ops")]
    if not isinstance(meta, dict) or not files:
        return None
    victim = data.draw(st.sampled_from(files), label="forged file")
    try:
        table = plant.read_file(victim)
    except (OSError, pa.ArrowException):
        return None
    columns = [c for c in ("run_id", "member_id", "detail") if c in table.column_names]
    if not columns or not table.num_rows:
        return None
    column = data.draw(st.sampled_from(columns), label="column")
    row = data.draw(st.integers(0, table.num_rows - 1), label="row")
    value: Any
    if column == "run_id":
        value = "forged-" + data.draw(st.text(max_size=8), label="run id")
    elif column == "member_id":
        value = data.draw(st.one_of(st.integers(-(2**15), -2), st.integers(10, 2**15 - 1)), label="member")
    else:
        value = data.draw(st.sampled_from(FORGED_DETAILS), label="detail")
    rows = table.to_pylist()
    rows[row][column] = value
    plant.write_file(victim, pa.Table.from_pylist(rows, schema=table.schema))
    try:
        plant.reseal(run)
    except (OSError, ValueError, pa.ArrowException):  # an earlier damage left nothing to reseal
        return f"forged {column} {value!r} in row {row} of {victim.relative_to(run)} (not resealed)"
    return f"forged {column} {value!r} in row {row} of {victim.relative_to(run)} (resealed)"


def damage_once(run: Path, data: st.DataObject) -> str:
    """One random damage to the trace in ``run``; returns what was done."""
    files = _files(run)
    kind = data.draw(
        st.sampled_from(["delete", "rmdir", "truncate", "flip", "append", "add", "dir", "edit", "reseal", "forge"]),
        label="kind",
    )
    if kind in ("edit", "reseal") and (said := edit_run_json(run, data, reseal=kind == "reseal")) is not None:
        return said
    if kind == "forge" and (said := forge_row(run, data)) is not None:
        return said
    if not files:
        shutil.rmtree(run)
        return "removed the run directory"
    victim = data.draw(st.sampled_from(files), label="file")
    rel = victim.relative_to(run)
    content = victim.read_bytes()
    if kind == "rmdir" and victim.parent != run:
        shutil.rmtree(victim.parent)
        return f"deleted {rel.parent}/"
    if kind == "truncate" and content:
        size = data.draw(st.integers(0, len(content) - 1), label="size")
        victim.write_bytes(content[:size])
        return f"truncated {rel} to {size} B"
    if kind == "flip" and content:
        at = data.draw(st.integers(0, len(content) - 1), label="offset")
        mask = data.draw(st.integers(1, 255), label="mask")
        victim.write_bytes(content[:at] + bytes([content[at] ^ mask]) + content[at + 1 :])
        return f"flipped byte {at} of {rel} with {mask:#04x}"
    if kind == "append":
        extra = data.draw(st.binary(min_size=1, max_size=64), label="bytes")
        victim.write_bytes(content + extra)
        return f"appended {len(extra)} B to {rel}"
    if kind == "add":  # a stream file beside the others, any other file, or a recorder sidecar
        name = data.draw(st.sampled_from([f"extra-{victim.name}", f"{victim.name}.bak", "notes.txt"]), label="name")
        copy = victim.with_name(name)
        if victim.parent == run:
            copy = run / "incomplete" / f"{victim.stem}.json"
            copy.parent.mkdir(exist_ok=True)
        copy.write_bytes(content)
        return f"added {copy.relative_to(run)}"
    if kind == "dir" and victim.parent != run:  # a stream file that became a directory (with a file in it)
        victim.unlink()
        victim.mkdir()
        (victim / "x").write_bytes(content[:16])
        return f"replaced {rel} with a directory"
    victim.unlink()
    return f"deleted {rel}"


# ------------------------------------------------------------------------------------------ verdict


def verdict(run: Path) -> str:
    """What ``clusterlab check RUN`` concludes: its status and check.json, or the clear error it gives."""
    try:
        report = check_runs([run], write_json=True)
    except (TraceError, SchemaVersionError) as e:
        return f"error: {e}"
    doc = json.loads((run / "check.json").read_text())
    assert doc["status"] == report.status and doc["ok"] == (report.status == "PASS"), doc
    return report.status


def _golden_refused(run: Path) -> bool:
    try:
        load_golden(run.name, run.parent)
    except GoldenError:
        return True
    return False


def _never_passes(traces: dict[str, Path], name: str, tmp: Path, data: st.DataObject) -> None:
    run = tmp / name
    shutil.copytree(traces[name], run)
    clean = _snapshot(run)
    done = [damage_once(run, data) for _ in range(data.draw(st.integers(1, 3), label="damages"))]
    if _snapshot(run) == clean:
        return  # the damages undid each other (or touched nothing of the trace): nothing to find
    said = verdict(run) if run.is_dir() else "error: no run directory"
    assert said != "PASS", f"a damaged trace passed: {done}"
    if name == "golden":
        assert _golden_refused(run), f"golden verify read a damaged golden: {done}"


DamageTest = Callable[[dict[str, Path], pytest.TempPathFactory, st.DataObject], None]


def _case(name: str) -> DamageTest:
    @settings(
        max_examples=CASES_PER_TRACE,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def test(traces: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
        tmp = tmp_path_factory.mktemp(f"damaged-{name}")
        try:
            _never_passes(traces, name, tmp, data)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    return test


@pytest.mark.timeout(1800)  # 400 small cases; ~0.1 s each, far more on a loaded 2-core machine
def test_a_damaged_simulator_trace_never_passes(traces, tmp_path_factory) -> None:
    _case("sim")(traces, tmp_path_factory)


@pytest.mark.timeout(1800)
def test_a_damaged_sigkilled_trace_never_passes(traces, tmp_path_factory) -> None:
    _case("killed")(traces, tmp_path_factory)


@pytest.mark.timeout(1800)
def test_a_damaged_golden_never_passes(traces, tmp_path_factory) -> None:
    _case("golden")(traces, tmp_path_factory)
