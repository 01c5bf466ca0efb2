"""Disk faults of the trace recorder degrade, never kill: on ENOSPC/EIO a ProcessRecorder stops recording
(no exception reaches the caller), records the fact (a ``recording_stopped`` event if it still can, the
``incomplete/<process>.json`` marker, a line on stderr) and RunRecorder.finish puts it in run.json. The
faults are real (a full tmpfs) where the machine lets us mount one, and injected (the
CLUSTERLAB_TRACE_WRITE_FAULT hook) otherwise and for EIO."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
from clusterlab.core.codec import AppendPosition
from clusterlab.harness.recorder import (
    INCOMPLETE_DIR,
    TRACE_WRITE_FAULT_ENV,
    ProcessRecorder,
    RunRecorder,
    WriteFault,
    recording_stopped,
)
from clusterlab.harness.trace import open_run

from tests.cluster.helpers import small_tmpfs

PAYLOAD = AppendPosition(leadership_term_id=1, log_position=4096, follower_member_id=1, flags=0).encode()
MARKER_KEYS = {"process", "reason", "at_ns", "table"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def fill(rec: ProcessRecorder, clock: FakeClock, rows: int) -> None:
    for i in range(rows):
        clock.now += 1_000_000
        rec.message("send", "consensus", 1, PAYLOAD, msg_id=i)
        if i % 50 == 0:
            rec.event("tick", 0, 1, i)


def marker(run_dir: Path, process: str) -> dict:
    return json.loads((run_dir / INCOMPLETE_DIR / f"{process}.json").read_text())


def test_injected_enospc_stops_recording_without_raising(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(TRACE_WRITE_FAULT_ENV, "ENOSPC,after=3,table=messages")
    clock = FakeClock()
    rec = ProcessRecorder(tmp_path, "r", "node-0", 0, 0, clock, wall_clock=clock, max_rows=10)
    fill(rec, clock, 200)  # far past the third write: every later row is discarded, none raises
    assert rec.stopped is not None
    assert rec.stopped["reason"].startswith("ENOSPC: ")
    assert rec.stopped["table"] == "messages"
    rec.close()
    m = marker(tmp_path, "node-0")
    assert m.keys() >= MARKER_KEYS and m["process"] == "node-0" and m["reason"].startswith("ENOSPC")
    assert "trace recording stopped (ENOSPC" in capsys.readouterr().err
    run = open_run(tmp_path)
    events = run.tables["events"].to_pylist()
    stopped = [e for e in events if e["kind"] == "recording_stopped"]
    assert len(stopped) == 1 and json.loads(stopped[0]["detail"])["table"] == "messages"
    # Three writes made it (the file open and two batches of 10 rows), nothing after the fault.
    assert run.tables["messages"].num_rows == 20
    # The reservation is used or released: only the marker is left.
    assert sorted(p.name for p in (tmp_path / INCOMPLETE_DIR).iterdir()) == ["node-0.json"]


def test_eio_on_close_is_reported_not_raised(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(TRACE_WRITE_FAULT_ENV, "EIO,after=1")
    clock = FakeClock()
    rec = ProcessRecorder(tmp_path, "r", "service-2", 2, 0, clock, wall_clock=clock)
    fill(rec, clock, 5)  # buffered only: the first (open) write passes, the batch at close fails
    rec.close()
    assert marker(tmp_path, "service-2")["reason"].startswith("EIO: ")


def test_a_clean_run_leaves_no_incomplete_directory(tmp_path: Path) -> None:
    clock = FakeClock()
    run = RunRecorder(tmp_path, "r", clock=clock, wall_clock=clock)
    rec = run.process("node-0", 0)
    fill(rec, clock, 30)
    meta = run.finish("ok")
    assert not (tmp_path / INCOMPLETE_DIR).exists()
    assert "recording_stopped" not in meta


def test_run_json_lists_the_stopped_processes(tmp_path: Path, monkeypatch) -> None:
    clock = FakeClock()
    run = RunRecorder(tmp_path, "r", clock=clock, wall_clock=clock)
    monkeypatch.setenv(TRACE_WRITE_FAULT_ENV, "ENOSPC,after=2,process=node-1")
    fine = run.process("node-0", 0)
    broken = run.process("node-1", 1)
    fill(fine, clock, 30)
    fill(broken, clock, 5000)
    meta = run.finish("ok")
    assert fine.stopped is None and broken.stopped is not None
    on_disk = json.loads((tmp_path / "run.json").read_text())
    assert (
        [m["process"] for m in on_disk["recording_stopped"]]
        == ["node-1"]
        == [m["process"] for m in meta["recording_stopped"]]
    )
    assert recording_stopped(tmp_path)[0]["reason"].startswith("ENOSPC")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("NOSUCH", "'NOSUCH' is not an errno name"),
        ("ENOSPC,after=x", "unknown option 'after=x'"),
        ("ENOSPC,table=bogus", "unknown option 'table=bogus'"),
        ("ENOSPC,color=red", "unknown option 'color=red'"),
    ],
)
def test_a_bad_fault_spec_is_a_clear_error(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        WriteFault.from_env("node-0", {TRACE_WRITE_FAULT_ENV: spec})


def test_fault_spec_selects_processes() -> None:
    env = {TRACE_WRITE_FAULT_ENV: "EIO,after=4,process=node-"}
    fault = WriteFault.from_env("node-2", env)
    assert fault is not None and fault.error == errno.EIO and fault.after == 4
    assert WriteFault.from_env("service-2", env) is None
    assert WriteFault.from_env("node-2", {}) is None


def test_a_full_tmpfs_stops_recording_and_the_marker_still_fits(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "128k") as disk:
        clock = FakeClock()
        rec = ProcessRecorder(disk, "r", "node-0", 0, 0, clock, wall_clock=clock, max_rows=64)
        fill(rec, clock, 20_000)  # ~1.5 MB of rows into 128 KiB
        assert rec.stopped is not None and rec.stopped["reason"].startswith("ENOSPC: ")
        rec.close()
        m = marker(disk, "node-0")  # written into the page reserved when recording started
        assert m.keys() >= MARKER_KEYS
        run = open_run(disk)  # what was written reads back: whole batches, a torn tail at most
        assert 0 < run.tables["messages"].num_rows < 20_000


def test_a_killed_process_leaves_no_reservation_after_the_run(tmp_path: Path) -> None:
    """A SIGKILLed process never releases its reserved page; the run's finish does (every process of
    the run has stopped by then), so a run with kills has no incomplete/ directory."""
    clock = FakeClock()
    run = RunRecorder(tmp_path, "r", clock=clock, wall_clock=clock)
    killed = ProcessRecorder(tmp_path, "r", "node-0", 0, 0, clock, wall_clock=clock)  # another process's
    fill(killed, clock, 30)
    killed.flush()  # written, never closed: as a SIGKILL leaves it
    assert any((tmp_path / INCOMPLETE_DIR).rglob("node-0-i0"))
    run.finish("ok")
    assert not (tmp_path / INCOMPLETE_DIR).exists()
