"""The protocol-level checks give the same rows on Spark (spark/check.py runs their SQL on temp views of
the clustertrace source) as on DuckDB (the local verdict), on a clean trace and on a violating one: a simulator
run with the planted bug of a leader that never finds its quorum inactive, one whose new leader counts a
log of an older term toward its commit position, one whose members restart from snapshots without their
timers, one whose voter follows an older leader after its YES vote (a stalled candidate), one whose modules
keep the timers their services cancel, plus a copy of a
clean trace whose events gained a second YES vote in one term from a restarted voter and two copies of a clean
full restart whose module took a snapshot with a session too many, or with as many sessions but other ids."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from clusterlab.chaos.checks.protocol import CHECKS, evaluate_duckdb
from clusterlab.chaos.runner import run_scenario
from clusterlab.harness.arrow_stream import read_stream
from clusterlab.harness.recorder import SCHEMAS
from clusterlab.harness.sim_parts import SimServiceHost
from clusterlab.harness.trace import open_run
from clusterlab.spark.check import check_runs

from clusterlab.testing.mutants import (
    CANCEL_TIMER_IGNORED,
    OLDER_TERM_LOG_COUNTED,
    TIMERS_LEFT_OUT_OF_SNAPSHOT,
    VOTE_PROMISE_BROKEN,
)
from tests.golden import plant

pytestmark = pytest.mark.spark


def _double_vote(clean: Path, into: Path) -> Path:
    """A copy of ``clean`` whose first YES voter votes again in that term, for another member, as incarnation +1
    (a new events file of that incarnation; the manifest resealed, so the copy is COMPLETE)."""
    shutil.copytree(clean, into)
    run = open_run(into)
    vote = next(e for e in run.events.to_pylist() if e["kind"] == "vote" and json.loads(e["detail"])["vote"])
    detail = json.loads(vote["detail"])
    other = next(m for m in range(3) if m not in (vote["member_id"], detail["candidate"]))
    again = dict(vote, incarnation=vote["incarnation"] + 1, seq=10**6, detail=json.dumps(dict(detail, candidate=other)))
    # Rewrite harness/node events as one file per process: simplest is a new file for the planted row.
    path = into / "events" / f"node-{vote['member_id']}-i9.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, SCHEMAS["events"]) as w:
        w.write_table(pa.Table.from_pylist([again], schema=SCHEMAS["events"]))
    plant.reseal(into)  # the planted file stands for what the faulty build recorded
    assert read_stream(str(path)).closed
    return into


def _planted_snapshot(run: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Path:
    """``run`` (a copy, changed in place) with one more ``snapshot`` event, of a later incarnation of the first
    member that took one, whose module held ``change`` of what that member's module held."""
    taken = next(
        e for e in open_run(run).events.to_pylist() if e["kind"] == "snapshot" and e["source"].startswith("node-")
    )
    detail = json.loads(taken["detail"])
    state = change(detail["module_state"])
    again = dict(
        taken, incarnation=taken["incarnation"] + 9, seq=10**6, detail=json.dumps(dict(detail, module_state=state))
    )
    path = run / "events" / f"node-{taken['member_id']}-i9.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, SCHEMAS["events"]) as w:
        w.write_table(pa.Table.from_pylist([again], schema=SCHEMAS["events"]))
    plant.reseal(run)
    return run


def _extra_session(restored: Path, into: Path) -> Path:
    """A copy of ``restored`` whose module took a snapshot holding a session the committed log never opened."""
    shutil.copytree(restored, into)
    return _planted_snapshot(into, lambda state: dict(state, sessions=state["sessions"] + 1))


def _other_sessions(restored: Path, into: Path) -> Path:
    """A copy of ``restored`` (a run id of its own) whose module took a snapshot holding as many sessions as the
    committed log has open, but with ids summing to one more."""
    plant.copy_run(restored, into, f"{open_run(restored).meta['run_id']}-other-sessions")
    return _planted_snapshot(into, lambda state: dict(state, session_id_sum=state["session_id_sum"] + 1))


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("protocol-spark")
    clean = run_scenario("leader-kill", seed=4, sim=True, directory=base / "clean", clients=1)
    assert clean.ok, clean.failure_message()
    voted = run_scenario("kill-voter", seed=1, sim=True, directory=base / "voted", clients=1)
    assert voted.ok, voted.failure_message()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("clusterlab.core.consensus.module.has_active_quorum", lambda *a, **k: True)
        stuck = run_scenario("leader-isolation", seed=2, sim=True, directory=base / "stuck", clients=1)
    counted = run_scenario(
        "older-term-tail", seed=1, sim=True, directory=base / "counted", clients=1, mutants=[OLDER_TERM_LOG_COUNTED]
    )
    restored = run_scenario("full-restart", seed=1, sim=True, directory=base / "restored", service="counter")
    assert restored.ok, restored.failure_message()
    forgotten = run_scenario(
        "full-restart",
        seed=1,
        sim=True,
        directory=base / "forgotten",
        service="counter",
        mutants=[TIMERS_LEFT_OUT_OF_SNAPSHOT],
    )
    kept = run_scenario(
        "leader-kill", seed=1, sim=True, directory=base / "kept", service="timers", mutants=[CANCEL_TIMER_IGNORED]
    )
    promise = run_scenario(
        "stalled-candidate", seed=1, sim=True, directory=base / "promise", clients=1, mutants=[VOTE_PROMISE_BROKEN]
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SimServiceHost, "close", lambda self: None)  # a graceful stop never tells the service
        untold = run_scenario("shutdown-restart", seed=1, sim=True, directory=base / "untold", clients=1)
    return {
        "clean": clean.trace_dir,
        "promise": promise.trace_dir,
        "stuck": stuck.trace_dir,
        "counted": counted.trace_dir,
        "forgotten": forgotten.trace_dir,
        "kept": kept.trace_dir,
        "untold": untold.trace_dir,
        "double-vote": _double_vote(voted.trace_dir, base / "double-vote"),
        "extra-session": _extra_session(restored.trace_dir, base / "extra-session"),
        "other-sessions": _other_sessions(restored.trace_dir, base / "other-sessions"),
    }


def _duckdb_rows(run_dir: Path) -> dict[str, set[str]]:
    run = open_run(run_dir)
    run_id = run.meta["run_id"]
    return {c.name: {r["detail"] for r in evaluate_duckdb(c, run.tables, run_id)} for c in CHECKS}


@pytest.mark.timeout(1200)  # nine simulator runs and one Spark job on a loaded 2-core machine
def test_spark_and_duckdb_give_the_same_rows(spark: Any, traces: dict[str, Path]) -> None:
    expected = {name: _duckdb_rows(d) for name, d in traces.items()}
    assert not any(expected["clean"].values())
    assert expected["stuck"]["leader_steps_down_without_quorum"]
    assert expected["counted"]["commit_backed_by_quorum"]
    assert expected["double-vote"]["one_vote_per_term"]
    assert expected["promise"]["vote_promise_kept"]
    assert expected["forgotten"]["snapshot_restores_module_state"]
    assert expected["kept"]["cancelled_timers_stay_cancelled"]
    assert expected["untold"]["services_terminate_once"]
    assert not expected["forgotten"]["open_sessions_agree"]
    assert expected["extra-session"]["open_sessions_agree"]
    assert any("not the same ids" in d for d in expected["other-sessions"]["open_sessions_agree"])
    run_ids = {name: open_run(d).meta["run_id"] for name, d in traces.items()}
    assert len(set(run_ids.values())) == len(run_ids)
    for plan in ("sql", "tasks"):  # one SQL job over them all; each run in its own task
        report = check_runs(list(traces.values()), spark=spark, write_json=False, plan=plan)
        assert report.complete
        for name, run_id in run_ids.items():
            for check in CHECKS:
                got = {v["detail"] for v in report.checks[check.name].violations if v["run_id"] == run_id}
                assert got == expected[name][check.name], (plan, name, check.name)
            assert report.run_status(str(traces[name])) == ("PASS" if name == "clean" else "FAIL"), (plan, name)
