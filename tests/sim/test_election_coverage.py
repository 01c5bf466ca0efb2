"""Every ElectionState is reachable: a handful of ordinary scenarios between them enter all 18.

One test on purpose, so the union is taken in one process (safe under pytest-xdist)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from clusterlab.chaos.target import converged
from clusterlab.core.consensus.context import MS, SECOND, ElectionState
from clusterlab.harness.invariants import SafetyChecker
from clusterlab.harness.sim import SimCluster

pytestmark = pytest.mark.sim


def _offer(c: SimCluster, tag: str, count: int = 5) -> None:
    for i in range(count):
        assert c.offer(f"{tag}-{i}".encode()) > 0, c.status_line()
        c.run_for(2 * MS)


def _converge(c: SimCluster) -> None:
    c.await_condition(lambda: converged(c), 10 * SECOND, "convergence")
    checker = SafetyChecker()
    for e in c.events:
        checker.on_event(e)
    checker.check_cluster(c)
    checker.check_committed_prefix_at_end(c)


def _new_leader(c: SimCluster, old: int) -> int:
    c.await_condition(lambda: c.leader_id() not in (None, old), 5 * SECOND, f"a leader other than {old}")
    leader = c.leader_id()
    assert leader is not None
    return leader


def cold_start(c: SimCluster) -> None:
    c.await_leader()
    _offer(c, "cold")
    _converge(c)


def leader_kill_and_rejoin(c: SimCluster) -> None:
    old = c.await_leader()
    _offer(c, "before")
    _converge(c)
    c.kill(old)
    _new_leader(c, old)
    _offer(c, "after")
    c.restart(old)
    _converge(c)


def wiped_follower(c: SimCluster) -> None:
    leader = c.await_leader()
    _offer(c, "before")
    _converge(c)
    c.restart_wiped((leader + 1) % c.member_count)
    _offer(c, "after")
    _converge(c)


def follower_several_terms_behind(c: SimCluster) -> None:
    leader = c.await_leader()
    _offer(c, "term-a")
    _converge(c)
    behind = (leader + 1) % c.member_count
    c.kill(behind)
    for n in range(3):
        old = c.leader_id()
        assert old is not None
        c.kill(old)
        _new_leader(c, old)
        c.restart(old)
        _offer(c, f"change-{n}")
        _converge(c)
    c.restart(behind)
    _offer(c, "recovering")
    _converge(c)


SCENARIOS: list[tuple[str, int, Callable[[SimCluster], None]]] = [
    ("cold start", 3, cold_start),
    ("leader kill and rejoin", 3, leader_kill_and_rejoin),
    ("wiped follower", 3, wiped_follower),
    ("follower several terms behind", 5, follower_several_terms_behind),
]


def test_every_election_state_is_entered(tmp_path: Path) -> None:
    entered: dict[ElectionState, list[str]] = {}
    for i, (name, members, scenario) in enumerate(SCENARIOS):
        with SimCluster(members=members, seed=100 + i, directory=tmp_path / f"scenario-{i}") as c:
            scenario(c)
            for state in c.election_states_entered():
                entered.setdefault(state, []).append(name)

    missing = [s.name for s in ElectionState if s not in entered]
    assert not missing, f"never entered: {missing}; entered: { {s.name: v for s, v in entered.items()} }"
    assert len(entered) == 18
