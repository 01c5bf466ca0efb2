"""Timers a service cancels, and alarms the timers workload's model follows.

* The check ``cancelled_timers_stay_cancelled``: a consensus module that cancels a scheduled timer for its
  service records whether it is still scheduled; the planted ``cancel-timer-ignored`` (the module keeps the
  timer, so a leader fires it after the cancel) fails the check in a simulator run, black-box.
* The timers workload's model: every reply of a counter that uses timers carries its pending alarms,
  ``fired`` and ``ticks``; an alarm leaves the pending set only by a disarm or by firing once, ``fired``
  counts each firing once, no tick appears that no tick op asked for. The planted ``alarm-counted-twice``
  (a counter that counts a firing twice, every member alike, so the members' states agree) fails the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.sample_workloads import TimersWorkload
from clusterlab.chaos.workload_api import Op
from clusterlab.harness.invariants import SafetyViolation
from clusterlab.harness.trace import Run, open_run

from clusterlab.testing.mutants import ALARM_COUNTED_TWICE, CANCEL_TIMER_IGNORED
from tests.chaos.test_protocol_checks import judge, rows


def _op(op_id: int, f: str, timer: int = 0) -> Op:
    return Op(op_id, f, None, None, 0.0, timer=timer)


def _reply(op: Op, alarms: list[int], fired: int, ticks: int = 0) -> dict[str, Any]:
    return {"id": op.op_id, "ok": True, "value": 0, "revision": 0, "alarms": alarms, "fired": fired, "ticks": ticks}


def _feed(workload: TimersWorkload, steps: list[tuple[Op, list[int], int, int]]) -> None:
    for op, alarms, fired, ticks in steps:
        op.reply = _reply(op, alarms, fired, ticks)
        workload.check_alarms(op, op.reply)


def test_alarms_that_fire_once_or_are_disarmed_pass() -> None:
    w = TimersWorkload()
    _feed(
        w,
        [
            (_op(1, "alarm", 1), [1], 0, 0),
            (_op(2, "alarm", 2), [1, 2], 0, 0),
            (_op(3, "get"), [2], 1, 0),  # alarm 1 fired
            (_op(4, "disarm", 2), [], 1, 0),  # disarmed: no firing
            (_op(5, "tick"), [], 1, 0),
            (_op(6, "get"), [], 1, 1),  # the tick applied
            (_op(7, "alarm", 3), [3], 1, 1),
            (_op(8, "disarm", 3), [], 2, 1),  # alarm 3 fired just before the disarm was applied
        ],
    )
    assert (w.pending, w.fired, w.ticks) == (set(), 2, 1)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([(_op(1, "alarm", 1), [1], 0, 0), (_op(2, "get"), [1], 1, 0)], "'fired' went 0 -> 1"),  # fired twice
        ([(_op(1, "alarm", 1), [1], 0, 0), (_op(2, "get"), [], 0, 0)], "'fired' went 0 -> 0"),  # lost, unfired
        ([(_op(1, "alarm", 1), [1], 0, 0), (_op(2, "disarm", 1), [], 2, 0)], "'fired' went 0 -> 2"),
        ([(_op(1, "get"), [2], 0, 0)], "alarms [2] are pending though none was armed"),
        ([(_op(1, "get"), [], 0, 1)], "ticks went 0 -> 1"),
    ],
)
def test_alarms_the_history_does_not_allow_fail(steps: list[tuple[Op, list[int], int, int]], message: str) -> None:
    with pytest.raises(SafetyViolation, match=message.replace("[", r"\[").replace("]", r"\]")):
        _feed(TimersWorkload(), steps)


@pytest.mark.parametrize(
    "fields",
    [{"alarms": "1"}, {"alarms": [1.5]}, {"alarms": [True]}, {"fired": None}, {"fired": "2"}, {"ticks": [0]}],
)
def test_a_malformed_alarms_reply_is_a_violation(fields: dict[str, Any]) -> None:
    op = _op(1, "get")
    op.reply = {**_reply(op, [], 0), **fields}
    with pytest.raises(SafetyViolation, match="malformed alarms/fired/ticks"):
        TimersWorkload().check_alarms(op, op.reply)


def test_alarms_an_unknown_op_touched_are_left_out() -> None:
    w = TimersWorkload()
    lost = _op(1, "alarm", 1)
    w.on_unknown(lost)
    tick = _op(2, "tick")
    w.on_unknown(tick)
    # The lost alarm was applied after all, fired, and the lost tick landed: none contradicts the history.
    _feed(w, [(_op(3, "get"), [1], 0, 0), (_op(4, "get"), [], 1, 1)])
    with pytest.raises(SafetyViolation, match="'fired' went 1 -> 0"):
        _feed(w, [(_op(5, "get"), [], 0, 1)])  # 'fired' never goes back


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A seeded simulator leader kill of the timers workload: alarms set, fired and cancelled across it."""
    r = run_scenario("leader-kill", 1, sim=True, directory=tmp_path_factory.mktemp("clean"), service="timers")
    assert r.ok, r.failure_message()
    return open_run(r.trace_dir)


def test_a_service_that_counts_a_firing_twice_fails_the_run(clean: Run, tmp_path: Path) -> None:
    replies = [json.loads(o["result"]) for o in rows(clean, "ops") if o["kind"] == "ok"]
    assert any(r.get("fired") for r in replies), "the clean run's alarms fire"
    planted = run_scenario(
        "leader-kill", 1, sim=True, directory=tmp_path, service="timers", mutants=[ALARM_COUNTED_TWICE]
    )
    assert not planted.ok and (planted.error or "").startswith("SafetyViolation"), planted.failure_message()
    assert "fired since the last reply" in planted.failure_message(), planted.failure_message()


def test_an_ignored_cancel_fails_cancelled_timers_stay_cancelled(clean: Run, tmp_path: Path) -> None:
    run = clean
    cancels = [e for e in rows(run, "events") if e["kind"] == "timer_cancel"]
    assert cancels, "the modules record the cancels of scheduled timers"
    assert all(json.loads(e["detail"])["scheduled"] is False for e in cancels)
    assert judge(run.tables, "cancelled_timers_stay_cancelled") == []
    planted = run_scenario(
        "leader-kill", 1, sim=True, directory=tmp_path, service="timers", mutants=[CANCEL_TIMER_IGNORED]
    )
    assert not planted.ok
    got = judge(open_run(planted.trace_dir).tables, "cancelled_timers_stay_cancelled")
    assert got and "still has that timer scheduled" in got[0], got


def test_the_counter_variant_is_refused_for_a_kv_run(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"mutant alarm-counted-twice plants a bug in the counter/timers service, not 'kv'"
    ):
        run_scenario("leader-kill", 1, sim=True, directory=tmp_path, mutants=[ALARM_COUNTED_TWICE])
    assert not any(tmp_path.iterdir()), "refused before anything ran"
