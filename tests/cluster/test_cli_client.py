"""``clusterlab client`` says what it knows: ``--timeout`` bounds the whole command; a
request sent without a reply is "outcome unknown (the request may still be applied)", exit 3; a reply
with ``ok: false`` exits 1; a suspended cluster says it is suspended. Driven through the real
``clusterlab`` entry point in-process (``main([...])``) against real member processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterlab.harness.local import LocalCluster

from clusterlab.cli import main
from tests.cluster.helpers import running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

# What a bounded command may overrun its --timeout by on a loaded 2-core machine (one poll interval,
# closing the sockets); the bug this guards against overran 4 s by 8.6 s.
OVERRUN_S = 1.5


def client(capsys: pytest.CaptureFixture[str], cluster: LocalCluster, *args: str) -> tuple[int, str, str, float]:
    """Run ``clusterlab client --dir DIR ARGS``; returns (exit code, stdout, stderr, seconds)."""
    capsys.readouterr()
    started = time.monotonic()
    code = main(["client", "--dir", str(cluster.directory), *args])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    return code, out, err, elapsed


@contextlib.contextmanager
def services_stopped(cluster: LocalCluster) -> Iterator[None]:
    """Every service process stopped (SIGSTOP): entries commit, nobody applies them or answers."""
    rows = json.loads((cluster.directory / "processes.json").read_text())
    pids = [r["pid"] for r in rows if r["kind"] == "service" and r["running"]]
    assert len(pids) == cluster.member_count
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_no_reply_is_outcome_unknown_exit_3_and_the_request_may_still_apply(tmp_path: Path, capsys) -> None:
    with running_cluster(tmp_path, record=False) as cluster:
        assert cluster.client().put("warm", "up")["ok"]
        with services_stopped(cluster):
            code, out, err, elapsed = client(capsys, cluster, "--timeout", "3", "put", "k", "applied-later")
        assert code == 3, (out, err)
        assert err.startswith("clusterlab client: outcome unknown (the request may still be applied)")
        assert len(err.strip().splitlines()) == 1 and out == ""
        assert elapsed < 3 + OVERRUN_S
        # It was: the resumed services applied it.
        code, out, err, _ = client(capsys, cluster, "--timeout", "20", "get", "k")
        assert code == 0 and json.loads(out)["value"] == "applied-later", err


def test_timeout_bounds_the_whole_command_when_no_member_can_reach_another(tmp_path: Path, capsys) -> None:
    with running_cluster(tmp_path, record=False) as cluster:
        cluster.partition([[0], [1], [2]])
        code, out, err, elapsed = client(capsys, cluster, "--timeout", "4", "put", "c", "1")
        assert elapsed < 4 + OVERRUN_S, err
        assert code in (1, 3) and out == "" and len(err.strip().splitlines()) == 1
        if code == 1:  # no session: then the put was never sent, and says so
            assert "the request was not sent" in err
        else:
            assert "outcome unknown (the request may still be applied)" in err


def test_a_suspended_cluster_says_it_is_suspended(tmp_path: Path, capsys) -> None:
    with running_cluster(tmp_path, record=False) as cluster:
        assert main(["tool", str(cluster.directory), "suspend"]) == 0
        code, out, err, elapsed = client(capsys, cluster, "--timeout", "3", "put", "s", "1")
        assert code in (1, 3) and out == ""
        assert "the cluster is suspended" in err and "resume" in err
        assert len(err.strip().splitlines()) == 1
        assert elapsed < 3 + OVERRUN_S
        assert main(["tool", str(cluster.directory), "resume"]) == 0


def test_ok_false_exits_1_and_ok_true_exits_0(tmp_path: Path, capsys) -> None:
    with running_cluster(tmp_path, record=False) as cluster:
        code, out, _, _ = client(capsys, cluster, "put", "colour", "blue")
        assert code == 0 and json.loads(out)["ok"] is True
        code, out, _, _ = client(capsys, cluster, "cas", "colour", "red", "--expected", "green")
        assert code == 1 and json.loads(out)["ok"] is False  # the reply is still printed
        code, out, _, _ = client(capsys, cluster, "get", "colour")
        assert code == 0 and json.loads(out)["value"] == "blue"
        code, out, _, _ = client(capsys, cluster, "get", "never-written")
        assert code == 1 and json.loads(out) | {"id": 0} == {"id": 0, "ok": False, "revision": 1, "value": None}
