"""The planted-bug catalogue (clusterlab.core.consensus.mutants): every switch off by default, reachable
only through the explicit flag, every catalogue name planted somewhere, bad names refused clearly."""

from __future__ import annotations

import inspect
import random
import re
from pathlib import Path

import pytest
from clusterlab.chaos.runner import MUTANT_SERVICES, RunResult, run_scenario
from clusterlab.core.consensus import mutants as m
from clusterlab.core.consensus.context import ClusterMember, ConsensusModuleContext
from clusterlab.core.consensus.mutants import MUTANTS, UnknownMutant, format_mutants, mutant_set, parse_mutants
from clusterlab.core.runtime.config import MUTANTS_ENV
from clusterlab.harness.local import LocalCluster
from clusterlab.harness.sim import SimCluster

from clusterlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
CORE_SOURCES = sorted((ROOT / "core").glob("**/*.py"))
CONSTANTS = {v: k for k, v in vars(m).items() if isinstance(v, str) and v in MUTANTS}


def test_catalogue_has_at_least_twelve_stable_names() -> None:
    assert len(MUTANTS) >= 12
    assert set(CONSTANTS) == set(MUTANTS)  # every name has its constant
    for name, mutant in MUTANTS.items():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)+", name), name
        assert mutant.name == name and mutant.bug and mutant.where


def test_every_mutant_is_planted_in_the_code() -> None:
    """No dead catalogue entries: each constant is tested in the code it names (a service bug by the
    kv variant the runner starts for it)."""
    for name, mutant in MUTANTS.items():
        if mutant.in_service:
            assert name in MUTANT_SERVICES, name
            continue
        assert (ROOT / mutant.where.split()[0]).is_file(), mutant.where
        pattern = re.compile(rf"\b{CONSTANTS[name]} (not )?in ")
        assert any(pattern.search(p.read_text()) for p in CORE_SOURCES), f"{name} is planted nowhere in core/"


def test_switches_are_off_by_default() -> None:
    ctx = ConsensusModuleContext(
        member_id=0,
        members=[ClusterMember(0, "a", "b", "c", "d", "e")],
        cluster_dir=Path("x"),
        outbox=None,  # type: ignore[arg-type]
        rng=random.Random(0),
    )
    assert ctx.mutants == frozenset()
    with SimCluster(members=3, seed=1) as c:
        assert c.mutants == frozenset() and c.check_invariants
        assert all(c.member(i).ctx.mutants == frozenset() for i in range(3))  # type: ignore[attr-defined]
    # SimCluster's default is the one above (mypyc-compiled, its __init__ has no inspectable signature).
    for fn in (run_scenario, LocalCluster.__init__):
        assert not inspect.signature(fn).parameters["mutants"].default
    assert not RunResult("s", 1, 3, True, 1.0, Path("r"), Path("t")).mutants
    assert parse_mutants(None) == parse_mutants("") == frozenset()


def test_only_the_runtime_reads_the_environment_switch() -> None:
    """The core never reads the environment; the node reads CLUSTERLAB_MUTANTS (set only by
    LocalCluster(mutants=...)), and LocalCluster drops a stray one from its own environment."""
    readers = [
        p.relative_to(ROOT).as_posix()
        for p in ROOT.glob("**/*.py")
        if ".venv" not in p.parts and "build" not in p.parts and "MUTANTS_ENV" in p.read_text()
    ]
    assert sorted(r for r in readers if not r.startswith("tests/")) == [
        "core/runtime/config.py",
        "core/runtime/node.py",
        "harness/local.py",
    ]
    local = (ROOT / "harness/local.py").read_text()
    assert "env.pop(MUTANTS_ENV, None)" in local
    assert MUTANTS_ENV == "CLUSTERLAB_MUTANTS"


def test_a_simulated_member_carries_the_set() -> None:
    with SimCluster(members=3, seed=1, mutants=frozenset({m.COMMIT_ON_OWN_APPEND})) as c:
        assert c.member(0).ctx.mutants == {m.COMMIT_ON_OWN_APPEND}  # type: ignore[attr-defined]
        assert c.mutants == {m.COMMIT_ON_OWN_APPEND}


def test_unknown_names_are_refused_listing_the_valid_ones() -> None:
    with pytest.raises(UnknownMutant, match=r"unknown mutant 'bogus'; valid mutants: vote-without-log-recency, "):
        mutant_set(["bogus", m.STALE_READ])
    with pytest.raises(UnknownMutant):
        SimCluster(members=1, mutants=frozenset({"bogus"}))
    assert parse_mutants(format_mutants({m.STALE_READ, m.ACK_BEFORE_APPEND})) == {m.STALE_READ, m.ACK_BEFORE_APPEND}


def test_run_rejects_a_bogus_mutant(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "leader-kill", "--sim", "--no-spark", "--mutant", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "--mutant: unknown mutant 'bogus'; valid mutants: " in err
    assert all(name in err for name in MUTANTS)
    assert len(err.strip().splitlines()) == 1, err


def test_run_rejects_a_service_mutant_on_another_service(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "leader-kill", "--sim", "--no-spark", "--service", "counter", "--mutant", m.STALE_READ]) == 2
    assert "plants a bug in the kv service, not 'counter'" in capsys.readouterr().err


def test_mutants_command_rejects_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mutants", "--only", "nope"]) == 2
    assert "unknown mutant 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        main(["mutants", "--seeds", "0"])
    assert "argument --seeds: must be 1 to 1000000, not 0" in capsys.readouterr().err
    assert main(["mutants", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in MUTANTS)


def test_the_rerun_command_names_the_mutant() -> None:
    r = RunResult("leader-kill", 1, 3, True, 1.0, Path("r"), Path("t"), mutants=frozenset({m.QUORUM_OFF_BY_ONE}))
    assert r.rerun_command().endswith("--sim --mutant quorum-off-by-one")
    assert r.run_id.endswith("-m-quorum-off-by-one")
    assert r.summary()["mutants"] == [m.QUORUM_OFF_BY_ONE]
