"""BUGGIFY, the simulator's seeded fault points (clusterlab.testing.buggify): off unless a run asks, the
same firings for the same seed, and a buggified run still passes every check while its members stall and
its services lag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.harness.trace import open_run

from clusterlab.cli import main
from clusterlab.testing.buggify import OFF, SITES, Buggify

pytestmark = pytest.mark.sim


def test_off_never_fires() -> None:
    assert not any(OFF(site) for site in SITES for _ in range(1000))
    assert not any(Buggify(7)(site) for site in SITES for _ in range(1000))  # not asked for


def test_the_same_seed_enables_and_fires_the_same_sites() -> None:
    def firings(seed: int) -> tuple[dict[str, bool], list[str]]:
        b = Buggify(seed, on=True)
        return b.enabled, [site for _ in range(2000) for site in SITES if b(site)]

    assert firings(11) == firings(11)
    runs = [firings(seed) for seed in range(1, 21)]
    assert {frozenset(k for k, on in enabled.items() if on) for enabled, _ in runs} > {frozenset()}
    for enabled, fired in runs:
        assert set(fired) <= {site for site, on in enabled.items() if on}
        if any(enabled.values()):
            assert 0 < len(fired) < 2000 * 0.1


def test_a_buggified_run_stalls_members_and_still_passes(tmp_path: Path) -> None:
    seed = next(s for s in range(1, 50) if Buggify(s, on=True).enabled["member-stall"])
    r = run_scenario("leader-kill", seed=seed, sim=True, directory=tmp_path, buggify=True)
    assert r.ok, r.failure_message()
    assert "--buggify" in r.rerun_command()
    meta = json.loads((r.trace_dir / "run.json").read_text())
    assert "member-stall" in meta["buggify"]["enabled"] and meta["buggify"]["fired"]["member-stall"] > 0
    events = open_run(r.trace_dir).tables["events"].to_pylist()
    stalls = [e for e in events if e["kind"] == "pause" and "member-stall" in (e["detail"] or "")]
    assert len(stalls) == meta["buggify"]["fired"]["member-stall"]


def test_buggify_needs_the_simulator(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sim=True"):
        run_scenario("leader-kill", seed=1, directory=tmp_path, buggify=True)
    assert main(["run", "leader-kill", "--buggify", "--dir", str(tmp_path / "cli")]) == 2


@pytest.mark.parametrize("seed", [3, 7])
def test_a_leader_elect_left_by_its_followers_stands_again(tmp_path: Path, seed: int) -> None:
    """Buggified ``random`` on 5 members: stalls make the followers of a leader in LEADER_READY leave it and
    vote in later terms; they will not follow it (their vote promise) and its more recent log refuses every
    candidate. It must stand again when asked to vote in a later term, as it does in LEADER_LOG_REPLICATION;
    before, no leader was reached within 30 s of the final heal."""
    r = run_scenario("random", seed=seed, members=5, duration_s=10.0, sim=True, directory=tmp_path, buggify=True)
    assert r.ok, r.failure_message()


def test_a_sweep_passes_buggify_to_its_runs_and_resumes_only_its_own_kind() -> None:
    from clusterlab.chaos.sweep import SweepConfig

    plain, buggified = SweepConfig("random", (1, 2)), SweepConfig("random", (1, 2), buggify=True)
    assert "buggify" not in plain.run_kwargs(1) and "buggify" not in plain.identity()
    assert buggified.run_kwargs(1)["buggify"] is True and buggified.identity()["buggify"] is True
