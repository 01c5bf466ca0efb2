"""Fixtures for the Spark and golden tests: one Spark session per xdist worker (it takes seconds to
start), and simulator traces made once per worker (a seeded leader kill: identical every time)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The worker's local Spark session (scratch directories are per process: workers never collide)."""
    from clusterlab.spark.session import spark_session

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


def _first_leader_term(run: Path) -> int:
    from clusterlab.harness.trace import open_run

    return min(e["leadership_term_id"] for e in open_run(run).events.to_pylist() if e["kind"] == "leader")


@pytest.fixture(scope="module")
def planted(sim_run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Copies of one clean run, each with one planted violation; what and where, by run id."""
    from tests.golden import plant

    root = tmp_path_factory.mktemp("planted")
    runs: dict[str, dict[str, Any]] = {}

    def copy(name: str) -> Path:
        return plant.copy_run(sim_run, root / name, name)

    runs["clean"] = {"dir": copy("clean"), "fails": set()}
    d = copy("state")
    p = plant.middle_entry(d, 1)["log_position"]
    plant.plant_state_digest(d, 1, p)
    runs["state"] = {"dir": d, "fails": {"agreement"}, "position": p}
    d = copy("gap")
    p = plant.middle_entry(d, 2)["log_position"]
    runs["gap"] = {"dir": d, "fails": {"contiguity"}, "position": plant.plant_gap(d, 2, p)}
    d = copy("leaders")
    term = _first_leader_term(d)
    plant.plant_second_leader(d, 1, term)
    # A second leader event is a second leader in that member's own view too, and one without votes.
    runs["leaders"] = {
        "dir": d,
        "fails": {"election_safety", "one_leader_per_term", "leader_has_quorum_of_votes"},
        "term": term,
    }
    d = copy("acked")
    plant.plant_acked_op(d, 999_999)
    runs["acked"] = {"dir": d, "fails": {"durability"}}
    d = copy("lost")
    p = plant.middle_entry(d, 1)["log_position"]
    plant.plant_lost_entry(d, p)
    # Acknowledged writes after the lost entry are gone from the log too.
    runs["lost"] = {"dir": d, "fails": {"committed_prefix", "durability"}, "position": p}
    d = copy("commit-back")
    runs["commit-back"] = {"dir": d, "fails": {"committed_prefix"}, "position": plant.plant_commit_back(d, 1)}
    d = copy("stale-vote")
    term, p = plant.plant_stale_vote(d, 1)
    runs["stale-vote"] = {"dir": d, "fails": {"vote_log_recency"}, "term": term, "position": p}
    d = copy("double-vote")
    runs["double-vote"] = {"dir": d, "fails": {"one_vote_per_term"}, "term": plant.plant_second_vote(d, 1)}
    d = copy("own-candidacy-vote")
    runs["own-candidacy-vote"] = {
        "dir": d,
        "fails": {"one_vote_per_term"},
        "term": plant.plant_vote_in_own_candidacy(d, 1),
    }
    d = copy("local-timer")
    p = plant.middle_entry(d, 1)["log_position"]
    plant.plant_local_timer(d, 1, p)
    runs["local-timer"] = {"dir": d, "fails": {"timers_and_closes_agree"}, "position": p}
    assert tuple(runs) == plant.PLANTED_RUNS
    return runs
