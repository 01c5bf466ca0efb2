"""A member process started with ``--exit-with-parent PID`` whose starter is already gone exits at once."""

from __future__ import annotations

import os

import pytest
from clusterlab.core.runtime.dirlock import service_lock_kind
from clusterlab.core.runtime.runner import started_by_a_gone_parent


def test_a_process_whose_starter_is_gone_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    not_our_parent = os.getpid()  # never this process's parent
    assert started_by_a_gone_parent("node", not_our_parent)
    assert capsys.readouterr().err.strip() == f"node: the process that started us ({not_our_parent}) is gone"


def test_a_process_whose_starter_runs_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert not started_by_a_gone_parent("node", os.getppid())
    assert not started_by_a_gone_parent("node", None)
    assert capsys.readouterr().err == ""


def test_service_lock_kinds() -> None:
    assert [service_lock_kind(s) for s in range(3)] == ["service", "service-1", "service-2"]
