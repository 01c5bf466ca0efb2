"""``clusterlab report``: one self-contained HTML file with the verdict, the timeline and the first
divergence."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from clusterlab.chaos.html_report import ReportError, fault_spans, op_latencies, role_spans, value_html, write_report
from clusterlab.harness.trace import open_run

from clusterlab.cli import main
from tests.golden import plant


def test_clean_run_report_has_verdict_and_timeline(sim_run: Path, tmp_path: Path) -> None:
    run = plant.copy_run(sim_run, tmp_path / "clean", "clean")
    path = write_report(run)
    assert path == run / "report.html"
    page = path.read_text()
    assert "PASS" in page and "local verdict (DuckDB)" in page
    for m in (0, 1, 2):
        assert f">member {m}</text>" in page
    assert page.count('class="role"') >= 4 and page.count('class="commit"') >= 3
    assert page.count('class="op"') > 100
    assert re.search(r'class="fault"[^>]*><title>kill 0:', page)
    assert "term 0" in page and "term 1" in page
    assert "None: every member reached the same state" in page
    # Self-contained: no script, nothing fetched.
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert [u for u in re.findall(r"https?://[^\"' ]+", page) if u != "http://www.w3.org/2000/svg"] == []


def test_timeline_data_follows_the_events(sim_run: Path) -> None:
    run = open_run(sim_run)
    events = run.events.to_pylist()
    end = max(e["wall_ns"] for e in events)
    spans = role_spans(events, [0, 1, 2], end)
    assert "LEADER" in [s.label for s in spans[0]] and "DOWN" in [s.label for s in spans[0]]
    assert [s.label for s in spans[1]] == ["FOLLOWER"]
    kill = next(e["wall_ns"] for e in events if e["kind"] == "kill")
    assert [(f.start, f.label) for f in fault_spans(events, end)] == [(kill, "kill 0")]
    lats = op_latencies(run.ops.to_pylist())
    assert len(lats) == sum(1 for o in run.ops.to_pylist() if o["kind"] != "invoke")
    assert all(lat >= 0 for _, lat, _, _ in lats)


def test_divergent_run_report_shows_the_first_divergence(sim_run: Path, tmp_path: Path) -> None:
    run = plant.copy_run(sim_run, tmp_path / "bad", "bad")
    p = plant.middle_entry(run, 1)["log_position"]
    plant.plant_state_digest(run, 1, p)
    page = write_report(run, tmp_path / "out" / "r.html").read_text()
    assert "FAIL" in page and f"position {p}" in page


def test_report_shows_values_not_reprs(sim_run: Path, tmp_path: Path) -> None:
    run = plant.copy_run(sim_run, tmp_path / "bad", "bad")
    p = plant.middle_entry(run, 1)["log_position"]
    plant.plant_state_digest(run, 1, p)
    page = write_report(run).read_text()
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", page, flags=re.S))
    for mark in ("{'", '{"', "['", "':", '":', "[0]"):
        assert mark not in html.unescape(text), f"{mark!r} in the report's text"
    # Rows per table as a definition list; the first violation's text in its cell.
    assert re.search(r'<dt>rows</dt><dd><dl class="kv">(<dt>\w+</dt><dd>\d+</dd>)*<dt>applied</dt><dd>\d+</dd>', page)
    assert f'<td class="first">at log position {p} ' in page


def test_value_html_renders_structures_as_lists() -> None:
    assert value_html({"a": 1, "b": {"c": None}}) == (
        '<dl class="kv"><dt>a</dt><dd>1</dd><dt>b</dt><dd><dl class="kv"><dt>c</dt><dd>-</dd></dl></dd></dl>'
    )
    assert value_html([1, 2, "<x>"]) == "1, 2, &lt;x&gt;"
    assert value_html([{"k": 1}]) == '<ol class="kv"><li><dl class="kv"><dt>k</dt><dd>1</dd></dl></li></ol>'
    assert value_html({}) == "-" and value_html("x" * 500).endswith("...")


def test_report_cli(sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(sim_run), "--out", str(out)]) == 0
    assert out.is_file() and str(out) in capsys.readouterr().out
    # The run's directory (what `clusterlab run --dir` made, its trace inside) is taken as check takes it.
    assert main(["report", str(sim_run.parent), "--out", str(tmp_path / "d.html")]) == 0
    run_id = json.loads((sim_run / "run.json").read_text())["run_id"]
    assert str(tmp_path / "d.html") in capsys.readouterr().out and run_id in (tmp_path / "d.html").read_text()
    assert main(["report", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "no such run directory" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ReportError):
        write_report(tmp_path / "missing")


def test_report_cli_exits_as_check_does_for_the_verdict_it_shows(
    sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report is written for every verdict, and its exit code is check's: a script that reports a
    damaged or failing run must not read 0."""
    from tests.golden import plant

    clean = plant.copy_run(sim_run, tmp_path / "clean", "clean")
    assert main(["report", str(clean)]) == 0
    assert "verdict: PASS" in capsys.readouterr().out
    failing = plant.copy_run(sim_run, tmp_path / "failing", "failing")
    plant.plant_state_digest(failing, 1, plant.middle_entry(failing, 1)["log_position"])
    assert main(["report", str(failing)]) == 1
    assert "verdict: FAIL" in capsys.readouterr().out and (failing / "report.html").is_file()
    corrupt = plant.copy_run(sim_run, tmp_path / "corrupt", "corrupt")
    victim = plant.applied_file(corrupt, 1)
    victim.write_bytes(victim.read_bytes()[:-9] + b"x" * 9)
    assert main(["report", str(corrupt)]) == 4
    out = capsys.readouterr().out
    assert "verdict: CORRUPT (not judged)" in out and (corrupt / "report.html").is_file()
