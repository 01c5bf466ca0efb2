"""``clusterlab cluster start`` without a terminal (background, CI): plain status lines, the last line
ending in a newline, SIGTERM stops it cleanly; ``--no-record`` writes no trace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clusterlab.harness.local import pid_alive, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def test_cluster_start_without_a_terminal_prints_plain_lines_and_records_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    out_path = tmp_path / "out.txt"
    with open(out_path, "w") as out:  # a file: not a terminal
        proc = subprocess.Popen(
            [sys.executable, "-m", "clusterlab.cli", "cluster", "start", "--dir", str(directory),
             "--refresh", "0.2", "--no-record"],
            stdout=out, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    processes: list[dict] = []
    try:

        def status_printed() -> bool:
            assert proc.poll() is None, proc.communicate()
            return "LEADER" in out_path.read_text()

        wait_until(status_printed, 60, "a status line with a leader", interval_s=0.2)
        processes = json.loads((directory / "processes.json").read_text())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for row in processes:
            if pid_alive(row["pid"]):
                os.kill(row["pid"], signal.SIGKILL)
    text = out_path.read_text()
    assert proc.returncode == 0, err
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines[0].startswith("starting a 3-member cluster") and "not recorded" in lines[0]
    assert lines[-1].startswith("stopped; the cluster's files are in")
    status = [line for line in lines if "LEADER" in line]
    assert status and all(line.count("|") == 2 for line in status)  # one line: three members
    assert not any(ch in text for ch in "\x1b┃━│─┏"), "no escape codes or box drawing without a terminal"
    assert not (directory / "trace").exists()
    assert not [p["pid"] for p in processes if pid_alive(p["pid"])]


def test_cluster_start_beyond_the_open_file_limit_is_refused_before_starting(tmp_path: Path) -> None:
    import resource

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    done = subprocess.run(
        [sys.executable, "-m", "clusterlab.cli", "cluster", "start", "--dir", str(tmp_path / "c"),
         "--members", "9"],
        capture_output=True, text=True, timeout=60, preexec_fn=low_limit,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "clusterlab cluster start: --members 9 needs about 176 open files per member process, "
        "but the limit is 128 (ulimit -n); at most 6 members fit"
    )
    assert not (tmp_path / "c").exists()
