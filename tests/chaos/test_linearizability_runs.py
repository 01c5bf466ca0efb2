"""Concurrent clients judged for linearizability on whole chaos runs, black-box: clean runs pass, the
planted stale read (``fault_stale_read``: kv gets answered from a per-session cache blind to other
sessions' writes) is caught with a minimal sub-history, in the simulator and on real processes, and
the HTML report draws it. One client never sees the bug: that is why concurrent clients matter. The
model written from the Model docstring (the docs' example) gives every run's keys the same verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.chaos.html_report import render
from clusterlab.chaos.linearizability import LINEARIZABLE, VIOLATION, KeyVerdict, linearizable
from clusterlab.chaos.runner import run_scenario

from tests.chaos.model_agreement import assert_docs_model_agrees


def _clients_in_trace(result) -> set[int]:  # type: ignore[no-untyped-def]
    from clusterlab.harness.trace import open_run

    return set(open_run(result.trace_dir).ops.column("client_id").to_pylist())


@pytest.mark.parametrize("seed", [1, 2])
def test_sim_concurrent_clients_are_linearizable(seed: int, tmp_path: Path) -> None:
    r = run_scenario("leader-isolation", seed, sim=True, duration_s=4.0, directory=tmp_path)
    assert r.ok, r.failure_message()
    lin = r.verdict.linearizability if r.verdict else None
    assert lin is not None and lin.verdict == LINEARIZABLE
    assert lin.clients >= 3 and len(_clients_in_trace(r)) >= 3
    # The keys were shared: some key was used by several clients, with overlapping ops.
    assert any(k.ops > 10 for k in lin.keys) and r.model_checked > 0
    assert assert_docs_model_agrees(r.trace_dir).verdict == LINEARIZABLE


def test_sim_counter_with_concurrent_clients(tmp_path: Path) -> None:
    r = run_scenario("leader-kill", 3, sim=True, duration_s=4.0, directory=tmp_path, service="counter")
    assert r.ok, r.failure_message()
    assert r.verdict is not None and r.verdict.linearizability is not None
    assert [(k.key, k.verdict) for k in r.verdict.linearizability.keys] == [("counter", LINEARIZABLE)]
    assert assert_docs_model_agrees(r.trace_dir).verdict == LINEARIZABLE


@pytest.mark.parametrize("seed", [1, 2])
def test_sim_stale_read_is_caught_minimal(seed: int, tmp_path: Path) -> None:
    r = run_scenario("leader-isolation", seed, sim=True, duration_s=4.0, directory=tmp_path, fault_stale_read=True)
    assert not r.ok
    # Online: a final read returning an overwritten value, or the history checked once they are in.
    assert r.error is not None and "SafetyViolation" in r.error, r.error
    assert "not linearizable" in r.error or "final read: an acknowledged write is missing" in r.error, r.error
    assert r.verdict is not None and r.verdict.failed() == ["linearizability"], r.verdict.violations
    bad = r.verdict.linearizability.violations() if r.verdict.linearizability else []
    assert bad
    for k in bad:
        # Minimal: a read, the write of what it read, what overwrote it (and little else).
        assert 2 <= len(k.minimal) <= 6 < k.ops, k.describe()
        assert any(o.f == "get" for o in k.minimal)
    assert "--fault-stale-read" in r.rerun_command()
    assert assert_docs_model_agrees(r.trace_dir).verdict == VIOLATION
    page = render(r.trace_dir)
    assert "minimal non-linearizable sub-histories" in page and "<svg" in page
    assert bad[0].minimal[-1].describe().split(" ", 2)[-1] in page.replace("&#x27;", "'")


def test_sim_stale_read_is_invisible_to_one_client(tmp_path: Path) -> None:
    r = run_scenario(
        "leader-isolation", 1, sim=True, duration_s=4.0, directory=tmp_path, fault_stale_read=True, clients=1
    )
    assert r.ok, r.failure_message()  # its own writes are always in its cache: nothing stale to see


def _one_minimal(k: KeyVerdict) -> bool:
    """``k.minimal`` fails, and dropping any one op the model lets the shrink drop leaves a history that
    does not (the shrink's promise; how many ops that takes depends on the run's interleaving)."""
    model, ops = k.spec, k.minimal
    assert model is not None
    if linearizable(ops, model).verdict != VIOLATION:
        return False
    for i, op in enumerate(ops):
        rest = [*ops[:i], *ops[i + 1 :]]
        if rest and model.may_drop(rest, [op]) and linearizable(rest, model).verdict == VIOLATION:
            return False
    return True


def test_real_stale_read_is_caught(tmp_path: Path) -> None:
    r = run_scenario("leader-isolation", 1, duration_s=4.0, directory=tmp_path, fault_stale_read=True)
    # Caught online once the final reads are in (the run stops there), and by the trace check.
    assert r.error is not None and "SafetyViolation" in r.error, r.error
    assert "not linearizable" in r.error or "final read: an acknowledged write is missing" in r.error, r.error
    assert r.verdict is not None and "linearizability" in r.verdict.failed()
    lin = r.verdict.linearizability
    assert lin is not None and lin.verdict == VIOLATION
    assert len(_clients_in_trace(r)) >= 3
    # Shrunk: a failing sub-history smaller than the key's history, from which no single op can be
    # dropped (as the model allows) with the rest still failing. On a loaded machine the shrinking budget
    # (seconds) may run out first, and the sub-history then says it is not minimal and why.
    for k in lin.violations():
        assert 0 < len(k.minimal) < k.ops, (len(k.minimal), k.ops)
        if k.minimal_complete:
            assert _one_minimal(k), k.minimal
        else:
            assert k.reason
    assert assert_docs_model_agrees(r.trace_dir).verdict == VIOLATION


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="clients must be 1 to 64, not 0"):
        run_scenario("leader-kill", 1, sim=True, clients=0, directory=tmp_path)
    with pytest.raises(ValueError, match="kv service"):
        run_scenario("leader-kill", 1, sim=True, service="counter", fault_stale_read=True, directory=tmp_path)
