"""Failures show where an operator looks: a member whose disk is full or failing (fenced), whose trace
recording stopped, or whose service process died appears so in the status table (``cluster start``'s
lines, ``tool list-members``), in ``tool errors`` (the node's distinct error log, live), in its
counters, and in the client's message when a request fails for that reason — never as a healthy
FOLLOWER, 0 errors or "an election may be running"."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest
from clusterlab.core.consensus.context import Role
from clusterlab.core.runtime.node import EXIT_SERVICE_GONE
from clusterlab.harness.local import LocalCluster
from clusterlab.harness.recorder import TRACE_WRITE_FAULT_ENV

from clusterlab.cli import main
from clusterlab.cli.cluster import EXIT_UNKNOWN, plain_status
from tests.cluster.helpers import LEADER_S, await_caught_up, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

PROBLEM = {errno.ENOSPC: "disk full (ENOSPC)", errno.EIO: "disk error (EIO)"}
HEALTH_S = 30.0  # bound on a member noticing its fault (a write must hit it), loaded machine


def tool(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``clusterlab tool ARGS``: (exit code, stdout + stderr)."""
    capsys.readouterr()
    code = main(["tool", *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def error_count(text: str) -> int:
    """The error count ``tool errors`` prints on its first line."""
    match = re.search(r"\): (\d+) errors, (\d+) distinct", text)
    assert match is not None, text
    return int(match[1])


def member_line(listing: str, member_id: int) -> str:
    """``tool list-members``'s row of ``member_id``."""
    return next(line for line in listing.splitlines() if line.split()[:1] == [str(member_id)])


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_member_whose_whole_disk_fails_shows_it_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        assert client.put("before", "1")["ok"]
        old = c.leader_id()
        assert old is not None
        # The whole member directory refuses writes, as a full disk does: the archive and counters.json.
        assert c.storage_fault(old, code, "")
        assert client.put("after", "2")["ok"]  # the old leader fences itself; the others elect
        c.await_leader(LEADER_S, exclude={old})
        name = errno.errorcode[code]
        status = c.status(old)
        assert status is not None and status.role == Role.FOLLOWER
        assert f"fenced: {PROBLEM[code]}" in status.health
        assert f"{old}:FOLLOWER" in plain_status(c) and f"[fenced: {PROBLEM[code]}]" in plain_status(c)
        directory = str(c.directory)
        rc, listing = tool(capsys, directory, "list-members")
        assert rc == 0 and member_line(listing, old).endswith(f"fenced: {PROBLEM[code]}"), listing
        # tool errors: the live error log (counters.json cannot be written on this disk).
        rc, errors = tool(capsys, directory, "errors", "--member", str(old))
        assert rc == 0 and "(running, live)" in errors, errors
        assert error_count(errors) >= 1 and f"storage: {name}: " in errors, errors
        rc, counters = tool(capsys, directory, "counters", "--member", str(old))
        match = re.search(r"Cluster errors\s+(\d+)", counters)
        assert rc == 0 and match is not None and int(match[1]) >= 1, counters
        live = c.counters(old)
        assert live is not None and live.errors >= 1


def test_a_fenced_single_member_cluster_tells_the_client_why_not_an_election(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_cluster(tmp_path, members=1) as c:
        assert c.client().put("before", "1")["ok"]
        assert c.storage_fault(0, errno.ENOSPC, "")
        capsys.readouterr()
        code = main(["client", "--dir", str(c.directory), "--timeout", "6", "put", "k", "v"])
        err = capsys.readouterr().err
        assert code in (1, EXIT_UNKNOWN), err
        assert "member 0: fenced: disk full (ENOSPC)" in err, err
        assert "election" not in err, err
        rc, out = tool(capsys, str(c.directory), "snapshot")
        assert rc == 1 and "member 0: fenced: disk full (ENOSPC)" in out and "election" not in out, out


def test_a_member_whose_service_died_shows_why_it_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with running_cluster(tmp_path) as c:
        assert c.client().put("k", "v")["ok"]
        await_caught_up(c)  # every service connected to its node and applying
        leader = c.leader_id()
        victim = next(i for i in range(c.member_count) if i != leader)
        c.kill_service(victim)
        assert c.wait_for_exit(victim, 20.0)["node"] == EXIT_SERVICE_GONE
        why = "the service process went away"
        assert f"{victim}:down [{why}]" in plain_status(c)
        directory = str(c.directory)
        rc, listing = tool(capsys, directory, "list-members")
        line = member_line(listing, victim)
        assert rc == 0 and "DOWN" in line and line.endswith(why), listing
        rc, errors = tool(capsys, directory, "errors", "--member", str(victim))
        assert rc == 0 and f"(stopped: {why})" in errors, errors
        assert error_count(errors) >= 1 and "service closed unexpectedly" in errors, errors
        counters = c.counters(victim)
        assert counters is not None and counters.errors >= 1


def test_a_member_whose_recording_stopped_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRACE_WRITE_FAULT_ENV, "ENOSPC,after=6,process=node-1")
    with running_cluster(tmp_path, seed=5) as c:
        client = c.client()

        def recording_stopped(cluster: LocalCluster = c) -> bool:
            client.put("k", "x", timeout_s=20.0)  # traffic makes the node flush, and fail
            status = cluster.status(1)
            return status is not None and "recording stopped: disk full (ENOSPC)" in status.health

        c.await_condition(recording_stopped, HEALTH_S, "member 1 shows its recording stopped")
        rc, listing = tool(capsys, str(c.directory), "list-members")
        assert rc == 0 and member_line(listing, 1).endswith("recording stopped: disk full (ENOSPC)"), listing

        def counted() -> bool:
            rc, errors = tool(capsys, str(c.directory), "errors", "--member", "1")
            return rc == 0 and "recording: trace recording stopped: ENOSPC" in errors and error_count(errors) >= 1

        c.await_condition(counted, HEALTH_S, "tool errors counts the stopped recording")
