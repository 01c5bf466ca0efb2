"""Mistakes in a user's code are the run's finding, named where they are: an exception raised by the
user's workload (or service, or model) ends the run with its class, message and the user's file:line."""

from __future__ import annotations

from pathlib import Path

from clusterlab.chaos.runner import run_scenario


def test_an_exception_in_the_users_workload_names_its_file_and_line(tmp_path: Path) -> None:
    r = run_scenario(
        "leader-kill", 1, sim=True, duration_s=2.0, directory=tmp_path, workload="tests.chaos.broken_workload:make"
    )
    assert not r.ok and r.error is not None and r.error.startswith("KeyError: 'boom in next_op'"), r.error
    assert "(at tests/chaos/broken_workload.py:" in r.error and "in RaisingWorkload.next_op)" in r.error, r.error
