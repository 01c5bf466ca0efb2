"""Planting violations into copies of real traces: each helper rewrites one table file of a run
directory (Arrow stream in, Arrow stream out) so a check has something precise to find.

A planted file stands for what a faulty build would have *recorded*, so every rewrite also reseals the
run's manifest in run.json (what the recorder writes at the end of a run): otherwise the edit would be,
correctly, CORRUPT and the checks would never judge it."""

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
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from clusterlab.core.codec.framing import FRAME_ALIGNMENT
from clusterlab.harness.completeness import SEAL, manifest, sealed_json
from clusterlab.harness.recorder import TABLES, RunRecorder

Rows = list[dict[str, Any]]

# The run ids of the ``planted`` fixture (tests/golden/conftest.py): the clean copy, then one per planted violation.
PLANTED_RUNS = (
    "clean",
    "state",
    "gap",
    "leaders",
    "acked",
    "lost",
    "commit-back",
    "stale-vote",
    "double-vote",
    "own-candidacy-vote",
    "local-timer",
)


def read_file(path: Path) -> pa.Table:
    # Read into memory, not mapped: the file is rewritten in place next.
    return ipc.open_stream(pa.BufferReader(path.read_bytes())).read_all()


def write_file(path: Path, table: pa.Table) -> None:
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, table.schema) as w:
        w.write_table(table, max_chunksize=512)


def reseal(run: Path) -> None:
    """Rewrite run.json's manifest from the files as they are now and seal it (as RunRecorder.finish does)."""
    meta = json.loads((run / "run.json").read_text())
    meta.pop(SEAL, None)
    meta.update(manifest(run, TABLES))
    (run / "run.json").write_bytes(sealed_json(meta))


def rewrite(path: Path, change: Callable[[Rows], Rows]) -> None:
    """Replace the rows of one stream file by ``change(rows)`` (same schema); reseal the run."""
    table = read_file(path)
    write_file(path, pa.Table.from_pylist(change(table.to_pylist()), schema=table.schema))
    reseal(path.parent.parent)


def copy_run(src: Path, dst: Path, run_id: str) -> Path:
    """A copy of run ``src`` whose run_id (run.json and every table's column) is ``run_id``."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / "run.json").read_text())
    meta["run_id"] = run_id
    (dst / "run.json").write_text(json.dumps(meta))  # sealed again below
    for path in dst.glob("*/*.arrow"):
        table = read_file(path)
        if "run_id" in table.column_names:
            i = table.schema.get_field_index("run_id")
            write_file(
                path, table.set_column(i, table.schema.field(i), pa.array([run_id] * table.num_rows, pa.string()))
            )
    for stale in ("check.json", "report.html"):
        (dst / stale).unlink(missing_ok=True)
    reseal(dst)
    return dst


def applied_file(run: Path, member: int, incarnation: int = 0) -> Path:
    return run / "applied" / f"service-{member}-i{incarnation}.arrow"


def middle_entry(run: Path, member: int) -> dict[str, Any]:
    """A SessionMessage row from the middle of a member's first incarnation."""
    rows = [r for r in read_file(applied_file(run, member)).to_pylist() if r["entry_type"] == "SessionMessage"]
    return rows[len(rows) // 2]


def plant_state_digest(run: Path, member: int, position: int) -> None:
    """Member ``member`` reports a different state digest at ``position`` only."""

    def change(rows: Rows) -> Rows:
        for r in rows:
            if r["log_position"] == position:
                r["state_digest"] = bytes(16)
        return rows

    rewrite(applied_file(run, member), change)


def plant_gap(run: Path, member: int, position: int) -> int:
    """Drop the applied row at ``position``; returns the position of the row after it (where the gap shows)."""
    rows = read_file(applied_file(run, member)).to_pylist()
    i = next(i for i, r in enumerate(rows) if r["log_position"] == position)
    rewrite(applied_file(run, member), lambda rs: rs[:i] + rs[i + 1 :])
    return rows[i + 1]["log_position"]


def plant_second_leader(run: Path, member: int, term: int) -> None:
    """Member ``member`` also claims leadership of ``term``."""
    path = run / "events" / f"node-{member}-i0.arrow"

    def change(rows: Rows) -> Rows:
        extra = dict(
            rows[-1], kind="leader", leadership_term_id=term, log_position=0, detail="{}", seq=rows[-1]["seq"] + 1
        )
        return [*rows, extra]

    rewrite(path, change)


def plant_acked_op(run: Path, op_id: int) -> None:
    """The client says op ``op_id`` (a put that never happened) was acknowledged."""
    path = next((run / "ops").glob("*.arrow"))

    def change(rows: Rows) -> Rows:
        last = rows[-1]
        invoke = dict(
            last, op_id=op_id, kind="invoke", f="put", key="ghost", value="never", result=None, seq=last["seq"] + 1
        )
        ok = dict(invoke, kind="ok", result="null", seq=last["seq"] + 2)
        return [*rows, invoke, ok]

    rewrite(path, change)


def plant_lost_entry(run: Path, position: int) -> None:
    """The committed log loses the entry ending at ``position`` (and every later one: a shrunk prefix)."""
    rewrite(run / "log" / "committed.arrow", lambda rows: [r for r in rows if r["log_position"] < position])


def plant_commit_back(run: Path, member: int) -> int:
    """Member ``member``'s node reports its commit position moving back; returns the lower position."""
    path = run / "events" / f"node-{member}-i0.arrow"
    low = 32

    def change(rows: Rows) -> Rows:
        commits = [r for r in rows if r["kind"] == "commit" and r["log_position"] and r["log_position"] > 1000]
        last = commits[-1]
        extra = dict(last, log_position=low, wall_ns=last["wall_ns"] + 1, seq=rows[-1]["seq"] + 1)
        return [*rows, extra]

    rewrite(path, change)
    return low


def node_events_file(run: Path, member: int, incarnation: int = 0) -> Path:
    return run / "events" / f"node-{member}-i{incarnation}.arrow"


def _last_yes_vote(rows: Rows, voter: int) -> int:
    """The index of the voter's last YES vote for another member."""
    return max(
        i
        for i, r in enumerate(rows)
        if r["kind"] == "vote" and json.loads(r["detail"]).get("vote") and json.loads(r["detail"])["candidate"] != voter
    )


def plant_stale_vote(run: Path, voter: int) -> tuple[int, int]:
    """Member ``voter``'s last YES vote for another member went to a candidate whose log ends one frame before
    the voter's (same log term): a vote granted to a less recent log. Returns the vote's (term, voter's log
    position)."""
    rows = read_file(node_events_file(run, voter)).to_pylist()
    vote = rows[_last_yes_vote(rows, voter)]
    assert vote["log_position"] >= FRAME_ALIGNMENT, vote

    def change(rows: Rows) -> Rows:
        r = rows[_last_yes_vote(rows, voter)]
        detail = json.loads(r["detail"])
        detail.update(
            candidate_log_leadership_term_id=detail["log_leadership_term_id"],
            candidate_log_position=r["log_position"] - FRAME_ALIGNMENT,
        )
        r["detail"] = json.dumps(detail, separators=(",", ":"), sort_keys=True)
        return rows

    rewrite(node_events_file(run, voter), change)
    return vote["leadership_term_id"], vote["log_position"]


def plant_second_vote(run: Path, voter: int, members: int = 3) -> int:
    """Member ``voter`` also votes YES, in the term of its last YES vote for another member, for a third
    member (one with the same log: only the second ballot is wrong). Returns that term."""
    rows = read_file(node_events_file(run, voter)).to_pylist()
    vote = rows[_last_yes_vote(rows, voter)]
    first = json.loads(vote["detail"])["candidate"]
    other = next(m for m in range(members) if m not in (voter, first))

    def change(rows: Rows) -> Rows:
        detail = dict(json.loads(vote["detail"]), candidate=other)
        extra = dict(
            vote,
            detail=json.dumps(detail, separators=(",", ":"), sort_keys=True),
            wall_ns=vote["wall_ns"] + 1,
            seq=rows[-1]["seq"] + 1,
        )
        return [*rows, extra]

    rewrite(node_events_file(run, voter), change)
    return int(vote["leadership_term_id"])


def plant_vote_in_own_candidacy(run: Path, voter: int) -> int:
    """The candidate member ``voter`` last voted YES for also votes YES, in that very term, for ``voter``: a
    candidate's RequestVote is its vote for itself, so that is a second YES vote in the term (both logs the
    candidate's: only the ballot is wrong). Returns the term."""
    voter_rows = read_file(node_events_file(run, voter)).to_pylist()
    vote = voter_rows[_last_yes_vote(voter_rows, voter)]
    detail = json.loads(vote["detail"])
    candidate = int(detail["candidate"])

    def change(rows: Rows) -> Rows:
        ballot = dict(
            detail,
            candidate=voter,
            log_leadership_term_id=detail["candidate_log_leadership_term_id"],
        )
        extra = dict(
            rows[-1],
            kind="vote",
            leadership_term_id=vote["leadership_term_id"],
            log_position=detail["candidate_log_position"],
            detail=json.dumps(ballot, separators=(",", ":"), sort_keys=True),
            wall_ns=vote["wall_ns"] + 1,
            seq=rows[-1]["seq"] + 1,
        )
        return [*rows, extra]

    rewrite(node_events_file(run, candidate), change)
    return int(vote["leadership_term_id"])


def plant_local_timer(run: Path, member: int, position: int) -> None:
    """Member ``member`` applies a Timer entry at ``position``, where the committed log and every other member
    have the entry it replaced (its bytes kept: only the kind differs, as a timer fired locally in its place)."""

    def change(rows: Rows) -> Rows:
        for r in rows:
            if r["log_position"] == position:
                r["entry_type"] = "Timer"
        return rows

    rewrite(applied_file(run, member), change)


def tear(path: Path, keep_fraction: float = 0.6) -> int:
    """Cut a stream file inside a record batch (as SIGKILL mid-write would); returns the new size."""
    data = path.read_bytes()
    size = int(len(data) * keep_fraction)
    path.write_bytes(data[:size])
    return size


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


def killed_run(tmp_path: Path, *, record_kill: bool) -> Path:
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
