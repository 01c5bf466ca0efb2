"""The planted-bug catalogue (clusterlab.testing.mutants): the protocol's rules by default, planted
rules reachable only through the explicit flag, every consensus-module bug a change of one rule of
core/consensus/rules.py (the core names no bug), bad names refused clearly."""

from __future__ import annotations

import inspect
import random
import re
from pathlib import Path

import pytest
from clusterlab.chaos.runner import MUTANT_SERVICES, RunResult, run_scenario
from clusterlab.core.archive.storage import MemoryStorage
from clusterlab.core.consensus.cluster_backup import retrieve_all
from clusterlab.core.consensus.context import ClusterMember, ConsensusModuleContext
from clusterlab.core.consensus.rules import PROTOCOL_RULES, ConsensusRules
from clusterlab.core.runtime.test_context import TEST_CONTEXT_ENV, DiskFaults, load_test_context
from clusterlab.harness.local import LocalCluster
from clusterlab.harness.sim import SimCluster

from clusterlab.cli import main
from clusterlab.testing import mutants as m
from clusterlab.testing.mutants import (
    MUTANTS,
    MUTANTS_ENV,
    PlantedRules,
    UnknownMutant,
    backup_snapshot_filter,
    format_mutants,
    mutant_set,
    parse_mutants,
    rules_for,
)
from clusterlab.testing.node import environment as node_environment

ROOT = Path(__file__).resolve().parents[2]
CORE_SOURCES = sorted((ROOT / "core").glob("**/*.py"))
CONSTANTS = {v: k for k, v in vars(m).items() if isinstance(v, str) and v in MUTANTS}


def test_catalogue_has_at_least_twelve_stable_names() -> None:
    assert len(MUTANTS) >= 12
    assert set(CONSTANTS) == set(MUTANTS)  # every name has its constant
    for name, mutant in MUTANTS.items():
        assert re.fullmatch(r"[a-z]+(-[a-z]+)+", name), name
        assert mutant.name == name and mutant.bug and mutant.where


def test_every_mutant_changes_a_rule_the_core_asks() -> None:
    """No dead catalogue entries: each consensus-module bug changes the answer of the rule its entry
    names, which the core asks at the file it names (a service bug is the kv variant the runner starts)."""
    for name, mutant in MUTANTS.items():
        if mutant.in_service:
            assert name in MUTANT_SERVICES, name
            continue
        if mutant.in_backup:  # a ClusterBackup's snapshot choice, which its agent asks
            assert backup_snapshot_filter([name]) is not retrieve_all, name
            assert "self.ctx.snapshot_filter(" in (ROOT / "core/consensus/cluster_backup.py").read_text()
            assert rules_for([name]) is PROTOCOL_RULES, name
            continue
        rule, where = re.fullmatch(r"rules ([a-z_, ]+) \((\S+).*\)", mutant.where).groups()  # type: ignore[union-attr]
        assert (ROOT / where).is_file(), mutant.where
        source = (ROOT / where).read_text()
        for method in rule.split(", "):
            assert f"rules.{method}(" in source, f"{name}: {where} does not ask rules.{method}"
            assert getattr(PlantedRules, method) is not getattr(ConsensusRules, method), method
        assert rules_for([name]).describe() == f"planted bugs (test-only): {name}"


def test_the_core_names_no_planted_bug() -> None:
    """The core holds no mutant name or catalogue import (import-linter keeps clusterlab.testing out)."""
    for path in CORE_SOURCES:
        text = path.read_text()
        assert not re.search(r"^\s*(from|import) clusterlab\.testing", text, re.M), path.relative_to(ROOT)
        assert not any(name in text for name in MUTANTS), f"{path.relative_to(ROOT)} names a planted bug"


def test_switches_are_off_by_default() -> None:
    ctx = ConsensusModuleContext(
        member_id=0,
        members=[ClusterMember(0, "a", "b", "c", "d", "e")],
        cluster_dir=Path("x"),
        outbox=None,  # type: ignore[arg-type]
        rng=random.Random(0),
    )
    assert ctx.rules is PROTOCOL_RULES and rules_for([]) is PROTOCOL_RULES and not PROTOCOL_RULES.describe()
    with SimCluster(members=3, seed=1) as c:
        assert c.mutants == frozenset() and c.check_invariants
        assert all(c.member(i).ctx.rules is PROTOCOL_RULES for i in range(3))  # type: ignore[attr-defined]
    # SimCluster's default is the one above (mypyc-compiled, its __init__ has no inspectable signature).
    for fn in (run_scenario, LocalCluster.__init__):
        assert not inspect.signature(fn).parameters["mutants"].default
    assert not RunResult("s", 1, 3, True, 1.0, Path("r"), Path("t")).mutants
    assert parse_mutants(None) == parse_mutants("") == frozenset()


def test_only_a_test_context_plants_rules_or_takes_disk_faults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The core never reads the environment; a node process loads the test context CLUSTERLAB_TEST_CONTEXT
    names (set only by LocalCluster, which drops stray ones from its own environment): without one it
    runs the protocol's rules on plain storage, which takes no injected faults."""
    readers = [
        p.relative_to(ROOT).as_posix()
        for p in ROOT.glob("**/*.py")
        if ".venv" not in p.parts and "build" not in p.parts and "TEST_CONTEXT_ENV" in p.read_text()
    ]
    assert sorted(r for r in readers if not r.startswith("tests/")) == [
        "clusterlab/testing/node.py",
        "core/runtime/test_context.py",
        "harness/local.py",
    ]
    local = (ROOT / "harness/local.py").read_text()
    assert "for name in (TEST_CONTEXT_ENV, MUTANTS_ENV):" in local and "env.pop(name, None)" in local
    assert (TEST_CONTEXT_ENV, MUTANTS_ENV) == ("CLUSTERLAB_TEST_CONTEXT", "CLUSTERLAB_MUTANTS")
    monkeypatch.delenv(TEST_CONTEXT_ENV, raising=False)
    assert load_test_context() is None
    env = node_environment([m.COMMIT_ON_OWN_APPEND])
    assert env == {TEST_CONTEXT_ENV: "clusterlab.testing.node:from_environment", MUTANTS_ENV: m.COMMIT_ON_OWN_APPEND}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    made = load_test_context()
    assert made is not None and isinstance(made.rules, PlantedRules) and made.rules.names == {m.COMMIT_ON_OWN_APPEND}
    plain = MemoryStorage()
    assert isinstance(made.storage(plain, 0, 0), DiskFaults) and not isinstance(plain, DiskFaults)
    monkeypatch.setenv(MUTANTS_ENV, "")
    assert load_test_context().rules is PROTOCOL_RULES  # type: ignore[union-attr]
    monkeypatch.setenv(TEST_CONTEXT_ENV, "clusterlab.core.consensus.rules:ConsensusRules")
    with pytest.raises(ValueError, match="made a ConsensusRules, not a test context"):
        load_test_context()


def test_a_simulated_member_carries_the_set() -> None:
    with SimCluster(members=3, seed=1, mutants=frozenset({m.COMMIT_ON_OWN_APPEND})) as c:
        rules = c.member(0).ctx.rules  # type: ignore[attr-defined]
        assert isinstance(rules, PlantedRules) and rules.names == {m.COMMIT_ON_OWN_APPEND}
        assert rules.commit_position(5, 9) == 9 and PROTOCOL_RULES.commit_position(5, 9) == 5
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
