"""Smoke test of the cluster benchmark's peers: the raw ZeroMQ bound and the PySyncObj harness start,
commit a handful of ops through the shared load driver, and leave no process behind. Part of the
benchmark (``make bench`` runs benchmarks/tests first, with the bench extra installed: pysyncobj)."""

from __future__ import annotations

import os

import pytest

from benchmarks.cluster_bench import PySyncObjSubject, RawZmqSubject, Settings
from benchmarks.peers.common import payload_of, run_saturation

pytestmark = pytest.mark.slow

SETTINGS = Settings.make(quick=True, window=200, kills=0, duration=0.5)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # still listed: only acceptable as a zombie that is not ours to reap
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_raw_zmq_bound_commits_and_stops() -> None:
    subject = RawZmqSubject()
    subject.start("default", SETTINGS)
    try:
        pids = list(subject.pids().values())
        assert len(pids) == 3
        result = run_saturation(subject.client(), payload_of(64), 200, 0.1, 0.5, drain_s=2.0)
        assert result["acked"] > 10, result
        assert result["failed"] == 0
        assert result["left_outstanding"] == 0
    finally:
        subject.stop()
    assert all(_gone(pid) for pid in pids), pids


def test_pysyncobj_harness_commits_fails_over_and_stops() -> None:
    subject = PySyncObjSubject()
    subject.start("fast", SETTINGS)  # ~100 ms timeouts: the cluster settles quickly
    pids = list(subject.pids().values())
    try:
        assert len(pids) == 3
        leader = subject.leader()
        assert leader is not None
        result = subject.saturation(64, SETTINGS)
        assert result["acked"] > 10, result
        assert result["failed"] == 0
        member, t_kill = subject.kill_leader()
        assert member == leader
        assert _gone(pids[member])
        first_ack = subject.probe(Settings.make(quick=True, window=200, kills=0, duration=0.5))
        assert first_ack is not None and first_ack > t_kill
        assert first_ack - t_kill < 10.0
    finally:
        subject.stop()
    assert all(_gone(pid) for pid in pids), pids
