"""The workload interface: loading workloads by name, the default sequential check with a user's
model, the linearizability verdict with a user's model, and where member processes find a user's
package (examples/ledger is the user's project)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.linearizability import INFO, OK, VIOLATION, Operation
from clusterlab.chaos.sample_workloads import WORKLOADS, CounterWorkload, KvWorkload, TimersWorkload
from clusterlab.chaos.workload_api import Op, WorkloadSpecError, history_verdict, load_workload
from clusterlab.harness.invariants import SafetyViolation
from clusterlab.harness.services import import_roots
from clusterlab.harness.trace import TraceError

LEDGER = Path(__file__).resolve().parents[2] / "examples" / "ledger"
LEDGER_META = {"workload": {"workload": "ledger.workload:make"}}


@pytest.fixture
def ledger(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(LEDGER))
    return load_workload("ledger.workload:make", WORKLOADS)


def _op(
    op_id: int, f: str, value: str | None, result: list[int] | None, t: tuple[int, int], status: str = OK
) -> Operation:
    return Operation(
        0 if op_id % 2 else 1, op_id, f, "k0", t[0], t[1] if status == OK else None, status, value, None, result
    )


def test_the_sample_workloads_load_by_name_and_an_unknown_name_lists_them() -> None:
    assert [type(load_workload(n, WORKLOADS)) for n in ("kv", "counter", "timers")] == [
        KvWorkload,
        CounterWorkload,
        TimersWorkload,
    ]
    with pytest.raises(WorkloadSpecError, match="no workload 'echo': use one of kv, counter, timers"):
        load_workload("echo", WORKLOADS)
    with pytest.raises(WorkloadSpecError, match=r"cannot import no\.such"):
        load_workload("no.such:make", WORKLOADS)


def test_a_user_model_checks_one_clients_replies_in_order(ledger: Any) -> None:
    ledger.on_reply(Op(1, "deposit", "k0", "5", 0.0, outcome="ok"), {"id": 1, "ok": True, "value": [5, 0]})
    ledger.on_reply(Op(2, "hold", "k0", "h2:3", 0.0, outcome="ok"), {"id": 2, "ok": True, "value": [2, 3]})
    assert ledger.checked == 2
    with pytest.raises(SafetyViolation, match="no state the ledger model allows"):  # the deposit is missing
        ledger.on_reply(Op(3, "balance", "k0", None, 0.0, outcome="ok"), {"id": 3, "ok": True, "value": [0, 3]})


def test_after_an_unknown_outcome_either_state_is_allowed(ledger: Any) -> None:
    ledger.on_reply(Op(1, "deposit", "k0", "5", 0.0, outcome="ok"), {"id": 1, "ok": True, "value": [5, 0]})
    ledger.on_unknown(Op(2, "deposit", "k0", "4", 0.0, outcome="info"))
    ledger.on_reply(Op(3, "balance", "k0", None, 0.0, outcome="ok", final=True), {"id": 3, "ok": True, "value": [9, 0]})
    with pytest.raises(SafetyViolation):  # 5 + 4 or 5, never 4
        ledger.on_reply(Op(4, "balance", "k0", None, 0.0, outcome="ok", final=True), {"id": 4, "value": [4, 0]})


def test_the_history_is_judged_with_the_runs_own_model(ledger: Any) -> None:
    fine = [_op(1, "deposit", "5", [5, 0], (0, 10)), _op(2, "balance", None, [5, 0], (5, 20))]
    assert history_verdict(fine, LEDGER_META).verdict == "ok"
    # A read that finishes after an acknowledged deposit completed, and does not see it: stale.
    stale = [_op(1, "deposit", "5", [5, 0], (0, 10)), _op(2, "balance", None, [0, 0], (11, 20))]
    got = history_verdict(stale, LEDGER_META)
    assert got.verdict == VIOLATION and got.keys[0].model == "ledger"
    # An unknown deposit may or may not have happened.
    maybe = [_op(1, "deposit", "5", None, (0, 10), INFO), _op(2, "balance", None, [0, 0], (11, 20))]
    assert history_verdict(maybe, LEDGER_META).verdict == "ok"


def test_members_find_a_users_package_where_this_process_found_it(ledger: Any) -> None:
    assert import_roots(["ledger.service:make"]) == [str(LEDGER)]
    assert import_roots(["kv", "clusterlab.harness.services.planted:stale_read_service"]) == []


@pytest.mark.parametrize(
    ("factory", "says"),
    [
        ("in_place_model", r"ModelError: model in-place: step modified its state in place"),
        ("raising_model", r"ZeroDivisionError: boom in step \(at .*broken_workload\.py:\d+ in RaisingModel\.step\)"),
    ],
)
def test_a_broken_model_leaves_the_history_unjudged_and_says_where(factory: str, says: str) -> None:
    """A model that breaks its contract or raises is the user's bug, not the run's: no verdict (not
    a FAIL), a TraceError naming the workload and, when the model raised, its file and line."""
    ops = [_op(1, "put", "5", [5], (0, 10)), _op(2, "get", None, [5], (11, 20))]
    with pytest.raises(TraceError, match=rf"the run's workload tests\.chaos\.broken_workload:{factory}: .*{says}"):
        history_verdict(ops, {"workload": {"workload": f"tests.chaos.broken_workload:{factory}"}})


def test_a_history_whose_workload_cannot_be_imported_is_not_judged() -> None:
    ops = [_op(1, "deposit", "5", [5, 0], (0, 10))]
    with pytest.raises(TraceError, match=r"the run's workload 'nosuch\.workload:make': cannot import"):
        history_verdict(ops, {"workload": {"workload": "nosuch.workload:make"}})
