"""The service apply benchmark at a tiny size: every block is applied, recording on writes the
trace it measures, and the figures are reported (speed itself is never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from clusterlab.core.consensus.context import Role
from clusterlab.harness.trace import open_run

from benchmarks.apply_bench import build_blocks, main, run_once


def test_every_entry_is_applied_and_recorded(tmp_path: Path) -> None:
    blocks = build_blocks(300, 64)
    assert len(blocks) == 5  # 301 entries (the session open and 300 puts) in blocks of 64
    seconds, applied = run_once(blocks, Role.LEADER, True, str(tmp_path / "rec"))
    assert applied == 301 and seconds > 0
    run = open_run(tmp_path / "rec")
    assert run.tables["applied"].num_rows == 301
    directions = run.tables["messages"].column("direction").to_pylist()
    assert directions.count("recv") == 5 and directions.count("send") == 300  # a block each, a reply each


def test_main_reports_every_configuration(tmp_path: Path) -> None:
    out = tmp_path / "apply.json"
    assert main(["--entries", "200", "--repeat", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["us_per_entry"]) == {"follower rec. off", "follower rec. on", "leader rec. off", "leader rec. on"}
    assert all(v > 0 for v in doc["us_per_entry"].values())
