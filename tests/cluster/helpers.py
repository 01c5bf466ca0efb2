"""Helpers for the real-process cluster tests (tests/cluster): clusters in the test's tmp_path,
bounded waits on conditions, and the check that no process outlives its test.

Every test here starts real OS processes (a node and a service per member) talking ZeroMQ over
``ipc://`` sockets inside its own tmp_path, so tests run in parallel (pytest -n auto) without
sharing a port or a file. Waits are bounded polls (LocalCluster.await_condition, tenacity)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from clusterlab.harness.local import LocalCluster, pid_alive

# Generous bounds for a loaded 2-core CI machine; a healthy run takes a fraction of each.
CATCH_UP_S = 15.0
LEADER_S = 10.0


def assert_no_process_outlives(cluster: LocalCluster) -> None:
    """Every process the cluster ever started is gone (stray ones are killed, then reported)."""
    stray = [pid for pid in cluster.pids() if pid_alive(pid)]
    for pid in stray:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not stray, f"processes outlived the cluster: {stray}"


@contextlib.contextmanager
def running_cluster(tmp_path: Path, name: str = "cluster", **kwargs: Any) -> Iterator[LocalCluster]:
    """A started LocalCluster (a leader elected) in ``tmp_path/name``; on exit every process is
    stopped and checked gone, also when the test body fails."""
    cluster = LocalCluster(directory=tmp_path / name, **kwargs)
    try:
        with cluster:
            yield cluster
    finally:
        assert_no_process_outlives(cluster)


def caught_up(cluster: LocalCluster, members: list[int] | None = None) -> int | None:
    """LocalCluster.caught_up: the common position of the listed members, or None."""
    return cluster.caught_up(members)


def await_caught_up(cluster: LocalCluster, members: list[int] | None = None, timeout_s: float = CATCH_UP_S) -> int:
    """Wait until ``caught_up`` holds; return the position."""
    found: list[int] = []

    def check() -> bool:
        position = caught_up(cluster, members)
        if position is None:
            return False
        found.append(position)
        return True

    cluster.await_condition(check, timeout_s, f"members {members or 'all'} caught up")
    return found[-1]


def service_digests(cluster: LocalCluster, members: list[int] | None = None) -> dict[int, tuple[int, bytes]]:
    """(log position, state digest) of each listed member's service."""
    ids = list(range(cluster.member_count)) if members is None else members
    out = {}
    for i in ids:
        s = cluster.service_status(i)
        assert s is not None, f"service of member {i} does not answer"
        out[i] = (s.log_position, s.state_digest)
    return out


def assert_services_agree(cluster: LocalCluster, members: list[int] | None = None) -> tuple[int, bytes]:
    """The services' (position, state digest), once they are all at one position (the cluster may
    still be appending, e.g. a new term's first entry); at that position the digests must agree."""
    seen: list[dict[int, tuple[int, bytes]]] = []

    def same_position() -> bool:
        seen.append(service_digests(cluster, members))
        return len({position for position, _ in seen[-1].values()}) == 1

    cluster.await_condition(same_position, CATCH_UP_S, "services at one log position")
    digests = seen[-1]
    assert len(set(digests.values())) == 1, f"services disagree at one position: {digests}"
    return next(iter(digests.values()))


def node_log(cluster: LocalCluster, member_id: int, incarnation: int | None = None) -> str:
    inc = cluster.incarnation(member_id) if incarnation is None else incarnation
    return (cluster.config.log_dir / f"member-{member_id}-node-{inc}.log").read_text(errors="replace")


def service_log(cluster: LocalCluster, member_id: int, incarnation: int | None = None) -> str:
    inc = cluster.incarnation(member_id) if incarnation is None else incarnation
    return (cluster.config.log_dir / f"member-{member_id}-service-{inc}.log").read_text(errors="replace")


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path``, for a real ENOSPC (skips the test where mounting is
    not allowed; the injected-fault tests still run there); unmounted on exit."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
