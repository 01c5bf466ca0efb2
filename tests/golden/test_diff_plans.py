"""The golden diff's two plans compute the same thing: Spark tasks each running the embedded diff of
one comparison (``tasks``) and Spark SQL over all comparisons (``sql``) give equal PositionDiffs and
MessageDiffs (every field, the first divergent row included) on the shipped golden traces, on a
simulator run against its own golden, and on copies with planted divergences, which both find."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from clusterlab.golden.diff_embedded import position_diff
from clusterlab.golden.spark_diff import Comparison, diff_messages, diff_positions
from clusterlab.golden.store import bless

from tests.golden import plant

pytestmark = pytest.mark.spark

TRACES = Path(__file__).resolve().parents[2] / "golden" / "traces"


def _drop_position(run: Path, position: int) -> None:
    """No member of ``run`` applied ``position``."""

    def change(rows: plant.Rows) -> plant.Rows:
        return [r for r in rows if r["log_position"] != position]

    for path in sorted((run / "applied").glob("*.arrow")):
        plant.rewrite(path, change)


def _middle(run: Path) -> int:
    return int(plant.middle_entry(run, 1)["log_position"])


@pytest.fixture(scope="module")
def cases(sim_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The golden of the simulator run, and copies of the run each with one planted divergence: what
    was planted where, by name."""
    root = tmp_path_factory.mktemp("diff-plans")
    golden = bless(sim_run, "g", traces=root / "traces", manifest=root / "goldens.json").directory
    out: dict[str, Any] = {"golden": golden, "planted": {}}

    def copy(name: str) -> Path:
        return plant.copy_run(sim_run, root / name, name)

    d = copy("state")
    p = _middle(d)
    plant.plant_state_digest(d, 1, p)
    out["planted"]["state"] = (d, p, "state")
    d = copy("dropped")
    p = _middle(d)
    _drop_position(d, p)
    out["planted"]["dropped"] = (d, p, "missing")
    d = copy("added")
    last = max(max(plant.read_file(f).column("log_position").to_pylist()) for f in (d / "applied").glob("*.arrow"))
    plant.rewrite(plant.applied_file(d, 1), lambda rows: [*rows, dict(rows[-1], log_position=last + 64)])
    out["planted"]["added"] = (d, last + 64, "extra")
    d = copy("entry")
    p = _middle(d)
    plant.rewrite(
        plant.applied_file(d, 2),
        lambda rows: [dict(r, entry_digest=bytes(16)) if r["log_position"] == p else r for r in rows],
    )
    out["planted"]["entry"] = (d, p, "entry")
    out["messages"] = _planted_messages(copy("payload"), copy("lost-message"))
    return out


def _replace_row(path: Path, i: int, new: plant.Rows) -> None:
    """Row ``i`` of the stream file at ``path`` replaced by the rows ``new``."""

    def change(rows: plant.Rows) -> plant.Rows:
        return [*rows[:i], *new, *rows[i + 1 :]]

    plant.rewrite(path, change)


def _planted_messages(payload: Path, lost: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    """One message's payload altered in ``payload``, one message dropped in ``lost``: the keys."""
    out = {}
    for run, drop in ((payload, False), (lost, True)):
        path = next((run / "messages").glob("*.arrow"))
        rows = plant.read_file(path).to_pylist()
        i = len(rows) // 2
        key = {k: rows[i][k] for k in ("process", "incarnation", "seq")}
        changed = dict(rows[i], payload=rows[i]["payload"] + b"!")
        _replace_row(path, i, [] if drop else [changed])
        out[run.name] = (run, key)
    return out


def _shipped() -> list[Path]:
    return sorted(d for d in TRACES.iterdir() if (d / "applied").is_dir())


def _position_comparisons(cases: dict[str, Any], sim_run: Path) -> list[Comparison]:
    shipped = _shipped()
    golden = str(cases["golden"])
    out = [Comparison("self-" + d.name, "replay", str(d), str(d)) for d in shipped]
    # Different traces: positions missing, extra, of other entries and states.
    out += [Comparison(f"{a.name}~{b.name}", "rerun", str(a), str(b)) for a, b in pairwise(shipped)]
    out.append(Comparison("sim", "rerun", golden, str(sim_run)))
    out.append(Comparison("sim-reversed", "rerun", str(sim_run), golden))
    out += [Comparison(n, "replay", golden, str(d)) for n, (d, _p, _k) in cases["planted"].items()]
    return out


def test_the_plans_agree_on_every_position_diff(spark: Any, cases: dict[str, Any], sim_run: Path) -> None:
    comparisons = _position_comparisons(cases, sim_run)
    tasks = diff_positions(spark, comparisons, plan="tasks")
    sql = diff_positions(spark, comparisons, plan="sql")
    assert set(tasks) == {(c.name, c.mode) for c in comparisons}
    for key in tasks:
        assert tasks[key] == sql[key], key
    assert all(tasks[(f"self-{d.name}", "replay")].ok for d in _shipped())
    assert tasks[("sim", "rerun")].ok and tasks[("sim", "rerun")].golden_positions > 100
    differing = [d for d in tasks.values() if not d.ok]
    assert {k for d in differing for k in d.kinds} == {"entry", "state", "missing", "extra"}
    assert any(d.first and len(d.first["members"]) > 1 for d in differing)


def test_both_plans_find_each_planted_divergence_at_its_position(
    spark: Any, cases: dict[str, Any], sim_run: Path
) -> None:
    comparisons = [Comparison(n, "replay", str(cases["golden"]), str(d)) for n, (d, _p, _k) in cases["planted"].items()]
    for plan in ("tasks", "sql"):
        diffs = diff_positions(spark, comparisons, plan=plan)
        for name, (_d, position, kind) in cases["planted"].items():
            d = diffs[(name, "replay")]
            assert d.divergent == 1 and d.kinds == {kind: 1}, (plan, d)
            assert d.first is not None and d.first["log_position"] == position and d.first["kind"] == kind, (plan, d)
    state = diffs[("state", "replay")].first
    assert (
        state is not None
        and len(state["actual_state_digests"]) == 2
        and bytes(16).hex() in state["actual_state_digests"]
    )
    assert [m["member"] for m in state["members"]] == sorted(m["member"] for m in state["members"])
    entry = diffs[("entry", "replay")].first
    assert entry is not None and bytes(16).hex() in entry["actual_entry_digests"]


def test_the_plans_agree_on_every_message_diff(spark: Any, cases: dict[str, Any], sim_run: Path) -> None:
    golden = str(cases["golden"])
    sims = [d for d in _shipped() if (d / "messages").is_dir()]
    comparisons = [Comparison("sim", "rerun", golden, str(sim_run), messages=True)]
    comparisons += [Comparison(n, "rerun", golden, str(d), messages=True) for n, (d, _k) in cases["messages"].items()]
    comparisons += [Comparison(f"self-{d.name}", "rerun", str(d), str(d), messages=True) for d in sims]
    comparisons += [Comparison(f"{a.name}~{b.name}", "rerun", str(a), str(b), messages=True) for a, b in pairwise(sims)]
    comparisons.append(Comparison("no-messages", "replay", golden, str(sim_run)))  # not diffed
    tasks = diff_messages(spark, comparisons, plan="tasks")
    sql = diff_messages(spark, comparisons, plan="sql")
    assert set(tasks) == set(sql) == {c.name for c in comparisons if c.messages}
    for name in tasks:
        assert tasks[name] == sql[name], name
    assert tasks["sim"].ok and tasks["sim"].golden_rows > 1000
    assert all(tasks[f"self-{d.name}"].ok for d in sims)
    for name, (_d, key) in cases["messages"].items():
        d = tasks[name]
        assert d.divergent == 1 and d.first is not None, d
        assert {k: d.first[k] for k in key} == key
    lost = tasks["lost-message"]
    assert lost.actual_rows == lost.golden_rows - 1 and lost.first is not None and lost.first["actual_payload"] is None
    changed = tasks["payload"].first
    assert changed is not None and changed["actual_payload"] == changed["golden_payload"] + b"!".hex()


def test_a_comparison_that_cannot_be_read_fails_the_diff(spark: Any, cases: dict[str, Any], tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    (broken / "applied").mkdir(parents=True)
    (broken / "applied" / "service-0-i0.arrow").write_bytes(b"not an arrow stream")
    comparisons = [Comparison("broken", "replay", str(cases["golden"]), str(broken))]
    with pytest.raises(Exception, match="no readable applied file"):
        position_diff(comparisons[0])
    with pytest.raises(Exception, match="no readable applied file"):
        diff_positions(spark, comparisons, plan="tasks")
    with pytest.raises(ValueError, match="plan must be one of"):
        diff_positions(spark, comparisons, plan="fast")


def test_an_empty_set_of_comparisons_is_an_empty_diff(spark: Any) -> None:
    for plan in ("tasks", "sql"):
        assert diff_positions(spark, [], plan=plan) == {} and diff_messages(spark, [], plan=plan) == {}


def test_a_comparison_too_large_for_one_task_is_diffed_by_spark_sql(
    spark: Any, cases: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusterlab.golden import spark_diff as diff

    d, _p, _k = cases["planted"]["state"]
    comparisons = [Comparison("state", "replay", str(cases["golden"]), str(d), messages=True)]
    by_tasks = diff_positions(spark, comparisons), diff_messages(spark, comparisons)
    monkeypatch.setattr(diff, "UNIT_BYTES", 0)

    def no_tasks(_spark: Any, _fn: Any, items: list[Any], *_a: Any, **_k: Any) -> list[Any]:
        assert not items, "a comparison over UNIT_BYTES went to a task"
        return []

    monkeypatch.setattr(diff, "map_in_tasks", no_tasks)
    assert (diff_positions(spark, comparisons), diff_messages(spark, comparisons)) == by_tasks
    assert not by_tasks[0][("state", "replay")].ok
