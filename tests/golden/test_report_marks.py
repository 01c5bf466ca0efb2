"""The HTML report's timeline: each member's commit line can be told apart (dash
pattern and offset, not colour alone), the op a violation names is marked, and members cut off by a
partition are shown on their own lanes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from clusterlab.chaos.html_report import PartitionSpan, failing_ops, partition_spans, write_report

from tests.golden import plant


def _event(t: int, kind: str, source: str = "harness", **detail: object) -> dict:
    return {"wall_ns": t, "kind": kind, "source": source, "member_id": -1, "detail": json.dumps(detail)}


def test_commit_lines_differ_by_more_than_colour(sim_run: Path, tmp_path: Path) -> None:
    page = write_report(plant.copy_run(sim_run, tmp_path / "r", "r")).read_text()
    styles = {}
    for m in (0, 1, 2):
        line = re.search(rf'<polyline class="commit" data-member="{m}"[^>]*>', page)
        assert line is not None, m
        dash = re.search(r'stroke-dasharray="([^"]*)"', line[0])
        offset = re.search(r'transform="translate\(0 ([^)]*)\)"', line[0])
        assert offset is not None
        styles[m] = (dash[1] if dash else "", offset[1])
    assert len(set(styles.values())) == 3  # no two members drawn alike, even where they overlap
    assert page.count('class="commit-key"') == 3  # the legend shows each line's pattern


def test_the_op_a_violation_names_is_marked_on_the_timeline(sim_run: Path, tmp_path: Path) -> None:
    run = plant.copy_run(sim_run, tmp_path / "acked", "acked")
    plant.plant_acked_op(run, 999_999)
    page = write_report(run).read_text()
    assert "FAIL" in page
    marks = re.findall(r'<rect class="failing-op"[^>]*><title>([^<]*)</title>', page)
    assert len(marks) == 1 and "client 0 op 999999 put ghost -&gt; ok" in marks[0] and "durability" in marks[0]
    clean = write_report(plant.copy_run(sim_run, tmp_path / "clean", "clean")).read_text()
    assert 'class="failing-op"' not in clean


def test_failing_ops_from_spark_rows_and_local_lines() -> None:
    ops = [
        {"client_id": 2, "op_id": 7, "kind": "invoke", "wall_ns": 100, "f": "put", "key": "k"},
        {"client_id": 2, "op_id": 7, "kind": "ok", "wall_ns": 250, "f": "put", "key": "k"},
        {"client_id": 1, "op_id": 3, "kind": "invoke", "wall_ns": 50, "f": "get", "key": "j"},
    ]
    spark = {"checks": {"durability": {"violations": [{"client_id": 2, "op_id": 7, "problem": "missing"}]}}}
    local = {"checks": {"durability": {"violations": ["client 1 op 3 get j=None: acknowledged but not in the log"]}}}
    assert [(o["client_id"], o["op_id"], o["start"], o["end"]) for o in failing_ops(spark, ops)] == [(2, 7, 100, 250)]
    assert [(o["client_id"], o["op_id"], o["start"], o["end"]) for o in failing_ops(local, ops)] == [(1, 3, 50, 50)]
    assert failing_ops({"checks": {"agreement": {"violations": ["position 96: states differ"]}}}, ops) == []


def test_partition_spans_name_the_members_cut_off() -> None:
    events = [
        _event(10, "chaos_apply", "harness", nemesis="partition", groups=[[2], [0, 1]]),
        _event(10, "partition", groups=[[2], [0, 1]]),  # the cluster's own event of the same cut
        _event(40, "chaos_heal", nemesis="partition"),
        _event(50, "partition", groups=[[0, 1], [2, 3, 4]]),
        _event(60, "role", "node-0", role="LEADER"),
    ]
    spans = partition_spans(events, 99)
    assert spans == [PartitionSpan(10, 40, [[2], [0, 1]]), PartitionSpan(50, 99, [[0, 1], [2, 3, 4]])]
    assert [s.cut_off() for s in spans] == [[2], [0, 1]]


def test_partitioned_members_are_shown_on_their_lanes(tmp_path: Path) -> None:
    from clusterlab.chaos.runner import run_scenario

    result = run_scenario("leader-isolation", seed=3, sim=True, duration_s=3.0, directory=tmp_path / "iso")
    assert result.ok, result.failure_message()
    page = write_report(result.trace_dir).read_text()
    marks = re.findall(r'<rect class="partitioned" data-member="(\d)"[^>]*><title>([^<]*)</title>', page)
    applied = [e for e in result_events(result.trace_dir) if e["kind"] == "chaos_apply"]
    victim = json.loads(applied[0]["detail"])["victims"][0]
    assert [int(m) for m, _ in marks] == [victim]
    assert f"member {victim} partitioned off" in marks[0][1]


def result_events(trace_dir: Path) -> list[dict]:
    from clusterlab.harness.trace import open_run

    return open_run(trace_dir).events.to_pylist()
