"""``clusterlab cluster start``, ``client`` and ``tool`` (run as ``python -m clusterlab.cli``, the
``clusterlab`` command)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clusterlab.harness.local import LocalCluster, pid_alive, wait_until

from tests.cluster.helpers import running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "clusterlab.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        cwd=ROOT,
    )


def test_client_and_tool_on_a_running_cluster(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        d = str(c.directory)
        put = cli("client", "--dir", d, "put", "colour", "blue")
        assert put.returncode == 0, put.stderr
        assert json.loads(put.stdout) | {"id": 0} == {"id": 0, "ok": True, "value": None, "revision": 1}
        get = cli("client", "--dir", d, "get", "colour")
        assert get.returncode == 0 and json.loads(get.stdout)["value"] == "blue"
        cas = cli("client", "--dir", d, "cas", "colour", "green", "--expected", "blue")
        assert json.loads(cas.stdout)["ok"] is True
        assert json.loads(cli("client", "--dir", d, "delete", "colour").stdout)["value"] == "green"

        listed = cli("tool", d, "list-members")
        assert listed.returncode == 0, listed.stderr
        assert f"leader: {c.leader_id()}" in listed.stdout
        assert listed.stdout.count("LEADER") == 1 and listed.stdout.count("FOLLOWER") == 2

        snap = cli("tool", d, "snapshot")
        assert snap.returncode == 0 and "snapshot: accepted by leader" in snap.stdout
        c.await_condition(lambda: all(s and s.snapshot_count == 1 for s in c.statuses().values()), 10, "snapshot")
        assert cli("tool", d, "suspend").returncode == 0
        refused = cli("tool", d, "suspend")
        assert refused.returncode == 1 and "refused" in refused.stderr and len(refused.stderr.splitlines()) == 1
        assert cli("tool", d, "resume").returncode == 0
        assert cli("tool", d, "shutdown").returncode == 0
        for i in range(3):
            assert c.wait_for_exit(i, 15) == {"node": 0, "service": 0}

        # The cluster is gone: one clear line, non-zero.
        down = cli("tool", d, "list-members", "--timeout", "0.3")
        assert down.returncode == 1 and len(down.stderr.strip().splitlines()) == 1
        assert "is not running" in down.stderr

        # Members that were killed leave their socket files: then the tool asks and gets no answer.
        for i in range(3):
            (c.member_dir(i) / "control.sock").touch()
        silent = cli("tool", d, "list-members", "--timeout", "0.3")
        assert silent.returncode == 1 and "no member of the cluster" in silent.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["tool", "/nonexistent/cluster", "list-members"], "no cluster directory /nonexistent/cluster"),
        (["client", "--dir", "/nonexistent/cluster", "get", "k"], "no cluster directory"),
        (["tool", ".", "list-members"], "not a cluster directory"),
        (["tool", ".", "explode"], "invalid choice: 'explode'"),
        (["client", "--dir", "."], "the following arguments are required: OP"),
        (["cluster", "start", "--members", "x"], "argument --members: 'x' is not a whole number"),
        (["cluster", "start", "--members", "0"], "--members: must be 1 to 9, not 0"),
        (["cluster", "start", "--service", "nosuch"], "unknown service 'nosuch'"),
    ],
)
def test_wrong_arguments_and_missing_directories_give_one_clear_line(args: list[str], message: str) -> None:
    result = cli(*args)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr


def test_client_on_a_stopped_cluster_gives_one_clear_line(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        directory = str(c.directory)
    result = cli("client", "--dir", directory, "--timeout", "1", "get", "k")
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    assert "not running" in result.stderr


def test_cluster_start_runs_in_the_foreground_and_ctrl_c_stops_it_cleanly(tmp_path: Path) -> None:
    directory = tmp_path / "cli-cluster"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterlab.cli", "cluster", "start", "--members", "3",
         "--dir", str(directory), "--refresh", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    try:

        def has_leader() -> bool:
            assert proc.poll() is None, proc.communicate()
            listed = cli("tool", str(directory), "list-members", "--timeout", "0.5")
            return listed.returncode == 0 and "leader: none" not in listed.stdout

        wait_until(has_leader, 30, "the CLI cluster elected a leader", interval_s=0.2)
        assert cli("client", "--dir", str(directory), "put", "via", "cli").returncode == 0
        processes = json.loads((directory / "processes.json").read_text())
        assert len(processes) == 6 and all(pid_alive(p["pid"]) for p in processes)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # the test failed: stop the CLI as a user would, then by force
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        listed = directory / "processes.json"
        for row in json.loads(listed.read_text()) if listed.exists() else []:
            if pid_alive(row["pid"]):
                os.kill(row["pid"], signal.SIGKILL)
    assert proc.returncode == 0, err
    assert "stopped" in out
    assert not [p["pid"] for p in processes if pid_alive(p["pid"])]

    # Restarted from its directory, it still has the data.
    with LocalCluster(members=None, directory=directory) as again:
        assert again.client().get("via")["value"] == "cli"


def test_sigterm_stops_a_run_as_ctrl_c_does(tmp_path: Path) -> None:
    """SIGTERM (a CI timeout, a supervisor) unwinds ``clusterlab run`` as Ctrl-C does: one line, exit 143,
    every member process stopped, the trace closed with its run.json."""
    run = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterlab.cli", "run", "leader-kill", "--duration", "120",
         "--dir", str(run), "--no-spark"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    listed = run / "cluster" / "processes.json"
    processes: list[dict] = []
    try:

        def all_started() -> bool:
            nonlocal processes
            assert proc.poll() is None, proc.communicate()
            try:
                processes = json.loads(listed.read_text())
            except (FileNotFoundError, json.JSONDecodeError):  # not written yet, or being written
                return False
            return len(processes) == 6 and all(pid_alive(p["pid"]) for p in processes)

        wait_until(all_started, 60, "the run started its 6 member processes", interval_s=0.2)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the test failed: stop the CLI by force
            proc.kill()
            proc.communicate()
        for row in json.loads(listed.read_text()) if listed.exists() else []:
            if pid_alive(row["pid"]):
                os.kill(row["pid"], signal.SIGKILL)
    assert proc.returncode == 143 and err.strip().splitlines()[-1] == "clusterlab: terminated (SIGTERM)", err
    assert not [p["pid"] for p in processes if pid_alive(p["pid"])]
    assert (run / "trace" / "run.json").is_file()
