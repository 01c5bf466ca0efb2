"""The client benchmark at a tiny size: every request reaches the stand-in leader, every reply is taken
by the client (none ignored), and the figures are reported (speed itself is never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.client_bench import main


def test_every_request_is_sent_and_every_reply_taken(tmp_path: Path) -> None:
    out = tmp_path / "client.json"
    assert main(["--ops", "300", "--window", "100", "--repeat", "2", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert (doc["ops"], doc["window"], doc["ignored"]) == (300, 100, 0)
    assert doc["offer_us_per_op"] > 0 and doc["reply_us_per_op"] > 0
    assert abs(doc["client_us_per_op"] - doc["offer_us_per_op"] - doc["reply_us_per_op"]) <= 0.002
