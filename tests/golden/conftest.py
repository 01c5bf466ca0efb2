"""Fixtures for the Spark and golden tests: one Spark session per xdist worker (it takes seconds to
start), and simulator traces made once per worker (a seeded leader kill: identical every time)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The worker's local Spark session (scratch directories are per process: workers never collide)."""
    from clusterlab.golden.spark.session import spark_session

    session = spark_session("local[2]", app_name="clusterlab-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean simulator leader-kill trace (seed 1). Read-only: copy it before planting."""
    from clusterlab.chaos.runner import run_scenario

    # One client, as the shipped goldens: the planted-variant tests pick log positions of its puts.
    r = run_scenario("leader-kill", seed=1, sim=True, directory=tmp_path_factory.mktemp("sim-leader-kill"), clients=1)
    assert r.ok, r.failure_message()
    return r.trace_dir
