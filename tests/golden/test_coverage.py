"""``clusterlab golden coverage`` and the coverage-chosen golden set: the measurement names what a
golden does not exercise, the shipped set exercises every must-cover item, the greedy cover keeps the
smallest covering set, and golden verify fails when the core's behaviour changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterlab.core.consensus.context import ElectionState
from clusterlab.core.consensus.election import TRANSITIONS
from clusterlab.golden.coverage import (
    CATEGORIES,
    MUST_COVER,
    UNREACHABLE,
    Measurement,
    callback_lines,
    callbacks,
    coverage_report,
    greedy_cover,
    required,
    universe,
)
from clusterlab.golden.store import MANIFEST, load_manifest
from clusterlab.golden.verify import verify_goldens

from clusterlab.cli import main


def test_the_universe_is_read_from_the_code() -> None:
    u = universe()
    assert u["election_state"] == {s.name for s in ElectionState}
    assert u["transition"] == {f"{a.name}->{b.name}" for a, b in TRANSITIONS} and len(u["transition"]) == 30
    assert {"on_start", "on_timer_event", "on_terminate", "on_new_leadership_term_event"} <= set(callbacks())
    assert {"Timer", "SessionClose", "ClusterAction", "NewLeadershipTerm"} <= u["entry_type"]
    assert "Snapshot" not in u["entry_type"]  # a pseudo-row, not a log entry
    assert {"RequestVote", "Vote", "AppendPosition", "CommitPosition"} <= u["message"]
    for (category, item), why in UNREACHABLE.items():
        assert item in u[category] and item not in required()[category] and why


def test_every_sample_service_callback_is_marked() -> None:
    marks = callback_lines()
    by_file: dict[str, set[str]] = {}
    for (path, _line), name in marks.items():
        by_file.setdefault(Path(path).name, set()).add(name)
    # Every abstract callback of the counter (the timers workload) and kv is located by its first line.
    wanted = {"on_start", "on_session_open", "on_session_close", "on_session_message", "on_timer_event"}
    assert wanted | {"on_take_snapshot", "on_role_change", "on_terminate"} <= by_file["counter.py"]
    assert wanted <= by_file["kv.py"]


def _m(name: str, elapsed: float = 1.0, lines: int = 0, **items: set[str]) -> Measurement:
    m = Measurement(name, elapsed_s=elapsed)
    for c, values in items.items():
        m.add(c, values)
    m.lines = {f"core/x.py:{i}" for i in range(lines)}
    return m


def test_greedy_cover_keeps_the_smallest_covering_set() -> None:
    a = _m("a", election_state={"INIT", "CANVASS"}, transition={"INIT->CANVASS"}, lines=100)
    b = _m("b", election_state={"LEADER_READY"}, lines=50)
    c = _m("c", election_state={"INIT", "CANVASS", "LEADER_READY"}, transition={"INIT->CANVASS"}, lines=120)
    d = _m("d", message={"RequestVote"}, lines=5)
    chosen = [m.name for m in greedy_cover([a, b, c, d], min_lines=10)]
    assert chosen == ["c", "d"]  # c covers what a and b cover together; d adds a message type
    failed = _m("failed", election_state={"CLOSED"})
    failed.error = "the run failed"
    assert "failed" not in [m.name for m in greedy_cover([a, failed])]
    # Over the budget: only what adds must-cover items still goes in.
    slow = _m("slow", message={"Vote"}, lines=500)
    slow.messages, c.messages = 100_000, 1_000
    assert [m.name for m in greedy_cover([c, slow], budget_messages=10_000)] == ["c"]


@pytest.mark.sim
def test_coverage_names_what_a_golden_does_not_exercise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real-process golden has no events (no election states) and its kv service sets no timers:
    the command reports those as not exercised, and exits 1."""
    real = next(r.name for r in load_manifest(MANIFEST) if r.driver == "real" and r.service == "kv")
    out = tmp_path / "coverage.json"
    assert main(["golden", "coverage", real, "--json", str(out), "--quiet"]) == 1
    report = json.loads(out.read_text())
    missing = report["missing_required"]
    assert "LEADER_READY" in missing["election_state"] and "Timer" in missing["entry_type"]
    assert "on_timer_event" in missing["callback"]
    [golden] = report["goldens"]
    assert golden["name"] == real and golden["error"] is None
    assert "SessionMessage" in golden["entry_type"] and "on_session_message" in golden["callback"]
    assert golden["core_lines"] > 500
    text = capsys.readouterr().out
    assert "not exercised by any golden" in text and "on_timer_event" in text and "FAIL" in text


def test_compiled_modules_are_measured_from_their_sources(tmp_path: Path) -> None:
    """coverage.py cannot see inside mypyc-compiled modules: where they are compiled, a golden is
    measured in a child interpreter running their sources, so the service agent's and the KV service's
    lines count (a real golden replays its log through both) and the KV service's callbacks are seen."""
    from clusterlab.golden.coverage import measure_golden

    real = next(r.name for r in load_manifest(MANIFEST) if r.driver == "real" and r.service == "kv")
    m = measure_golden(real, work=tmp_path)
    assert m.error is None and m.recipe is not None and m.recipe.name == real
    files = {line.rsplit(":", 1)[0] for line in m.lines}
    assert {"core/service/agent.py", "core/codec/session_header.py", "core/consensus/module.py"} <= files, files
    assert "on_start" in m.items["callback"] and "on_session_message" in m.items["callback"]


def test_coverage_refuses_an_unknown_golden(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["golden", "coverage", "no-such-golden"]) == 2
    err = capsys.readouterr().err
    assert "no golden named no-such-golden" in err and len(err.strip().splitlines()) == 1


@pytest.mark.sim
@pytest.mark.slow
def test_the_shipped_set_exercises_every_must_cover_item() -> None:
    report = coverage_report()
    assert not [m.name for m in report.measurements if m.error], [m.error for m in report.measurements if m.error]
    # Every election state, transition of the table, log entry type and service callback: the command exits 0.
    assert report.missing_required() == {}, report.missing_required()
    assert report.ok
    got = report.union()
    for c in MUST_COVER:
        assert required()[c] <= got[c]
    assert (
        "CANDIDATE_BALLOT->FOLLOWER_LOG_REPLICATION"
        in next(m for m in report.measurements if m.name == "sim-mute-candidate-n5-s5").items["transition"]
    )
    # Several cluster sizes and both services among the simulator goldens.
    sims = [r for r in load_manifest(MANIFEST) if r.driver == "sim"]
    assert {1, 3, 5} <= {r.members for r in sims} and {"kv", "timers"} <= {r.service for r in sims}
    assert set(CATEGORIES) == set(report.to_json()["set"])


@pytest.mark.sim
@pytest.mark.spark
def test_verify_fails_when_the_core_changes_behaviour(spark, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted consensus bug (the leader never steps down when it loses its quorum) changes what a
    golden whose leader loses its quorum sends when re-run: verify FAILs it, naming the first
    divergent message."""
    import clusterlab.core.consensus.module as module

    sims = {r.scenario: r.name for r in load_manifest(MANIFEST) if r.driver == "sim"}
    name = next(sims[s] for s in ("quorum-loss", "leader-isolation", "random") if s in sims)
    clean = verify_goldens([name], spark=spark)
    assert clean.ok, clean.details()
    monkeypatch.setattr(module, "has_active_quorum", lambda *a, **k: True)
    report = verify_goldens([name], spark=spark)
    [v] = report.verdicts
    assert not v.ok and not report.ok
    assert v.messages is not None and not v.messages.ok and v.messages.divergent > 0
    assert any("first divergent message" in line for line in report.details())
