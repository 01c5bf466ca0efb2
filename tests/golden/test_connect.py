"""A warm Spark: ``clusterlab spark start`` runs a Spark Connect server (stopped by its PID), and
``clusterlab check --engine spark`` judges through it — given ``--remote`` or found by its state
directory — with the verdict the embedded engine gives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clusterlab.golden.store import TRACES
from clusterlab.harness.local import pid_alive
from clusterlab.spark import connect

from clusterlab.cli import main

pytestmark = pytest.mark.spark
CHECK_TIMEOUT_S = 600  # a Spark job on a loaded 2-core machine


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    # In a child: a Spark Connect session puts pyspark in Connect mode for the rest of its process,
    # and this pytest process keeps a classic session for the other Spark tests.
    return subprocess.run(
        [sys.executable, "-m", "clusterlab.cli", "check", *args],
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
        check=False,
    )


def test_check_through_a_started_spark_connect_server(
    planted: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "spark-state"
    monkeypatch.setenv("CLUSTERLAB_SPARK_STATE", str(state))
    assert main(["spark", "status"]) == 1
    with pytest.raises(SystemExit) as refused:  # an out-of-range argument: argparse's exit 2, nothing started
        main(["spark", "start", "--warm", "-1"])
    assert refused.value.code == 2 and connect.status() is None
    try:
        # In a child (its warm-up check is a Connect session); warmed on a shipped golden, left unwritten.
        golden_json = TRACES / "real-leader-kill" / "check.json"
        start = [
            sys.executable,
            "-m",
            "clusterlab.cli",
            "spark",
            "start",
            "--master",
            "local[1]",
            "--driver-memory",
            "1g",
        ]
        started = subprocess.run(
            [*start, "--warm", "1"],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
        assert started.returncode == 0, started.stderr
        assert "warmed: 1 check(s) of the real-leader-kill golden" in started.stdout
        assert not golden_json.exists()
        info = connect.status()
        assert info is not None and pid_alive(info.pid)
        assert main(["spark", "start"]) == 0 and connect.status() == info, "a second start reuses the server"
        bad = planted["state"]["dir"]
        assert _check(str(bad), "--remote", info.url).returncode == 1
        doc = json.loads((bad / "check.json").read_text())
        assert doc["engine"] == "spark" and doc["status"] == "FAIL"
        assert doc["checks"]["agreement"]["violations"][0]["log_position"] == planted["state"]["position"]
        got = _check(str(planted["clean"]["dir"]), "--engine", "spark")  # the server found by its state dir
        assert got.returncode == 0, got.stderr
        assert f"on {info.url}" in got.stdout and "PASS" in got.stdout
    finally:
        stopped = connect.stop()
    assert stopped is not None and not pid_alive(stopped.pid)
    assert connect.status() is None and main(["spark", "stop"]) == 1
