"""Seeded random fault schedules (clusterlab.chaos.fuzz) must never break safety, and must recover.

Each seed runs a cluster of 3 or 5 members through kills, restarts, partitions, an isolated leader,
truncated and wiped disks and a lossy network, with clusterlab.harness.invariants.SafetyChecker sampling after
every phase, then heals everything and requires convergence. The default seeds are split into
chunks so pytest-xdist spreads them over workers.

Choose the seeds with ``CLUSTERLAB_SEEDS``: ``"7"``, ``"1,2,3"``, ``"100-150"`` (inclusive) or a mix
(``"1,5,100-120"``). A failure names each failing seed and the command that re-runs it alone.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from clusterlab.chaos.fuzz import ScheduleResult, run_random_schedule
from clusterlab.chaos.runner import MUTANT_SERVICES
from clusterlab.chaos.workload import SimWorkload
from clusterlab.core.consensus.context import SECOND
from clusterlab.harness.invariants import SafetyViolation
from clusterlab.harness.sim import SimCluster, SimTimeout

from clusterlab.pytest_plugin import parse_seeds
from clusterlab.testing.mutants import STALE_READ, mutant_set

pytestmark = pytest.mark.sim

SEEDS_ENV = "CLUSTERLAB_SEEDS"
DEFAULT_SEEDS = range(200)
CHUNKS = 10
# A chunk this large must show every kind of fault; a handful of hand-picked seeds need not.
MIN_SEEDS_FOR_COVERAGE = 15
FAULT_KINDS = ("kill", "restart", "partition", "isolate", "truncate", "wipe")


def split(seeds: list[int], n: int) -> list[list[int]]:
    """At most ``n`` contiguous chunks of nearly equal size."""
    n = max(1, min(n, len(seeds)))
    size, extra = divmod(len(seeds), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(seeds[start:end])
        start = end
    return out


def rerun_command(seed: int) -> str:
    return f"{SEEDS_ENV}={seed} .venv/bin/python -m pytest tests/sim/test_random_safety.py"


SEEDS = parse_seeds(os.environ[SEEDS_ENV]) if os.environ.get(SEEDS_ENV) else list(DEFAULT_SEEDS)
SEED_CHUNKS = split(SEEDS, CHUNKS)


def test_parse_seeds() -> None:
    assert parse_seeds("7") == [7]
    assert parse_seeds("1,2,3") == [1, 2, 3]
    assert parse_seeds("100-103") == [100, 101, 102, 103]
    assert parse_seeds(" 1, 5 ,10-11,") == [1, 5, 10, 11]
    with pytest.raises(ValueError):
        parse_seeds("9-3")
    with pytest.raises(ValueError):
        parse_seeds(",")
    assert split(list(range(200)), 10) == [list(range(i, i + 20)) for i in range(0, 200, 20)]
    assert split([4, 5, 6], 10) == [[4], [5], [6]]
    assert [s for chunk in split(list(range(23)), 10) for s in chunk] == list(range(23))


@pytest.mark.parametrize("seeds", SEED_CHUNKS, ids=[f"seeds-{c[0]}-{c[-1]}" for c in SEED_CHUNKS])
def test_random_fault_schedules_are_safe_and_recover(seeds: list[int], tmp_path: Path) -> None:
    failures: list[str] = []
    results: list[ScheduleResult] = []
    for seed in seeds:
        try:
            result = run_random_schedule(seed, directory=str(tmp_path / f"seed-{seed}"))
            assert result.seed == seed
            assert result.committed_bytes > 0, "nothing was committed"
            assert result.terms >= 1, "no leader was seen"
        except Exception as e:  # any failure of a seed is reported with the seed, then the next seed runs
            detail = f"{type(e).__name__}: {e}".strip()
            if len(detail) > 2_000:
                detail = detail[:2_000] + " ..."
            failures.append(f"seed {seed} failed: {detail}\n    re-run: {rerun_command(seed)}")
            continue
        results.append(result)
    if failures:
        pytest.fail(f"{len(failures)} of {len(seeds)} seeds failed:\n" + "\n".join(failures), pytrace=False)

    # The schedules did what they are for: faults happened and leadership changed hands.
    if len(seeds) >= MIN_SEEDS_FOR_COVERAGE:
        kinds = Counter(a.split()[0] for r in results for a in r.actions)
        missing = [k for k in FAULT_KINDS if kinds[k] == 0]
        assert not missing, f"seeds {seeds[0]}..{seeds[-1]} never did {missing}: {dict(kinds)}"
        assert sum(1 for r in results if r.terms > 1) >= len(results) // 2, "leadership rarely changed"
        assert {r.members for r in results} == {3, 5}, "both cluster sizes ran"
    assert max(r.terms for r in results) >= 1


# Longer schedules (more phases) that found bugs. Each stays as a regression once it is fixed.
LONG_SCHEDULES = [
    pytest.param(
        1190,
        25,
        id="seed-1190-phases-25",
    ),
]


@pytest.mark.parametrize(("seed", "phases"), LONG_SCHEDULES)
def test_long_random_schedule_regressions(seed: int, phases: int, tmp_path: Path) -> None:
    result = run_random_schedule(seed, phases=phases, directory=str(tmp_path))
    assert result.committed_bytes > 0


# The same schedules with every member running the key-value service and its workload's client
# (clusterlab.chaos.workload.SimWorkload) going through the leader: snapshots join the faults, and on
# top of the log checks every member's service must agree on entry and state digest at every log
# position, apply contiguously, answer every op as the kv model allows and, read back after the heal,
# hold every acknowledged write.
SERVICE_SEEDS = SEEDS[:100] if not os.environ.get(SEEDS_ENV) else SEEDS
SERVICE_CHUNKS = split(SERVICE_SEEDS, 5)


@pytest.mark.parametrize("seeds", SERVICE_CHUNKS, ids=[f"kv-seeds-{c[0]}-{c[-1]}" for c in SERVICE_CHUNKS])
def test_random_fault_schedules_with_kv_service_agree_at_every_position(seeds: list[int], tmp_path: Path) -> None:
    failures: list[str] = []
    results: list[ScheduleResult] = []
    for seed in seeds:
        try:
            result = run_random_schedule(seed, directory=str(tmp_path / f"kv-{seed}"), service="kv")
            assert result.applied_rows > 0, "no service applied anything"
            assert result.acked_ops > 0, "no op was acknowledged"
        except Exception as e:
            detail = f"{type(e).__name__}: {e}".strip()[:2_000]
            failures.append(f"seed {seed} (service kv) failed: {detail}\n    re-run: {rerun_command(seed)}")
            continue
        results.append(result)
    if failures:
        pytest.fail(f"{len(failures)} of {len(seeds)} seeds failed:\n" + "\n".join(failures), pytrace=False)
    if len(seeds) >= MIN_SEEDS_FOR_COVERAGE:
        kinds = Counter(a.split()[0] for r in results for a in r.actions)
        assert kinds["snapshot"] > 0 and kinds["kill"] > 0 and kinds["truncate"] > 0, dict(kinds)


def test_a_service_that_serves_stale_reads_fails_the_schedule_the_correct_one_passes(tmp_path: Path) -> None:
    """The schedule's client checks every reply against the service's model: a kv store that answers
    reads from a stale copy (planted, black-box) fails seed 1, which the correct store passes."""
    passed = run_random_schedule(1, directory=str(tmp_path / "kv"), service="kv")
    assert passed.acked_ops > 0 and passed.invoked_ops >= passed.acked_ops

    with pytest.raises(SafetyViolation, match="acknowledged history broken"):
        run_random_schedule(
            1,
            directory=str(tmp_path / "stale"),
            service=MUTANT_SERVICES[STALE_READ],
            workload="kv",
            mutants=mutant_set([STALE_READ]),
        )


def test_a_service_that_does_not_deduplicate_gets_raw_payloads_on_a_duplicating_network(tmp_path: Path) -> None:
    """Seed 1's network duplicates messages, clients' requests among them (which Aeron's ingress never
    does): the counter would count a copy twice, so its schedule offers raw payloads; seed 3's network
    does not, and the counter's workload runs and is checked."""
    duplicating = run_random_schedule(1, directory=str(tmp_path / "s1"), service="counter")
    assert duplicating.invoked_ops == 0 and duplicating.committed_bytes > 0
    clean = run_random_schedule(3, directory=str(tmp_path / "s3"), service="counter")
    assert clean.acked_ops > 0


LEDGER = Path(__file__).resolve().parents[2] / "examples" / "ledger"  # a user's service, workload and model


def test_a_users_service_runs_the_schedule_under_its_own_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``service`` and ``workload`` as ``package.module:factory``: the ledger passes seed 3 with its
    replies checked by its model; its planted wall-clock variant fails the same seed (the members'
    states disagree)."""
    monkeypatch.syspath_prepend(str(LEDGER))
    own = run_random_schedule(
        3, directory=str(tmp_path / "ledger"), service="ledger.service:make", workload="ledger.workload:make"
    )
    assert own.acked_ops > 0

    with pytest.raises(SafetyViolation, match="agreement"):
        run_random_schedule(
            3, directory=str(tmp_path / "planted"), service="ledger.planted:wall_clock", workload="ledger.workload:make"
        )


def test_the_workload_step_until_names_what_did_not_happen_and_the_seed() -> None:
    """Nothing can be acknowledged with every member down: SimTimeout after the bound, saying what and
    which seed."""
    with SimCluster(members=3, seed=11, service="kv") as c:
        c.await_leader()
        workload = SimWorkload(service="kv", seed=11, rate=100.0, cluster=c)
        for m in c.members_alive():
            c.kill(m)
        with pytest.raises(SimTimeout, match=r"an op acknowledged not reached within 1\.000s simulated; .*seed=11"):
            workload.step_until(lambda: workload.acked > 0, SECOND, "an op acknowledged")
