"""Fixtures for simulator tests: clusters in the test's tmp_path with a safety checker attached.

``sim.cluster(...)`` builds a SimCluster whose every event feeds a clusterlab.harness.invariants.SafetyChecker
(election safety and monotonic commit are checked as they happen); ``sim.check(c)`` checks log
matching of the live members now, and ``sim.converge(c)`` waits for one leader whose whole log every
live member has committed, then checks log matching and durability."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from clusterlab.chaos.target import converged
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import decode, peek_template_id
from clusterlab.core.consensus.context import SECOND, ElectionState
from clusterlab.harness.invariants import SafetyChecker
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.simnet import Delivery

M = TypeVar("M", bound=Message)


class SimKit:
    """Builds clusters for one test and closes them afterwards."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._clusters: list[SimCluster] = []
        self._checkers: dict[int, SafetyChecker] = {}
        self._sends: dict[int, list[Delivery]] = {}

    def cluster(self, members: int = 3, seed: int = 0, **kwargs: Any) -> SimCluster:
        c = SimCluster(
            members=members, seed=seed, directory=self._directory / f"cluster-{len(self._clusters)}", **kwargs
        )
        checker = SafetyChecker()
        for event in c.events:  # what the members emitted while starting
            checker.on_event(event)
        c.on_event.append(checker.on_event)
        sends: list[Delivery] = []
        c.network.on_send.append(sends.append)
        self._clusters.append(c)
        self._checkers[id(c)] = checker
        self._sends[id(c)] = sends
        return c

    def safety(self, c: SimCluster) -> SafetyChecker:
        return self._checkers[id(c)]

    def check(self, c: SimCluster) -> None:
        """Log matching and durability of every live member's committed prefix, now."""
        self.safety(c).check_cluster(c)

    def converge(self, c: SimCluster, timeout_ns: int = 10 * SECOND) -> int:
        """Wait until one leader's whole log is committed on every live member; check safety; return
        the leader's id."""
        c.await_condition(lambda: converged(c), timeout_ns, "every live member committed the leader's log")
        self.check(c)
        self.safety(c).check_committed_prefix_at_end(c)
        leader = c.leader_id()
        assert leader is not None
        return leader

    def sent(
        self, c: SimCluster, cls: type[M], src: int | None = None, dst: int | None = None
    ) -> list[tuple[Delivery, M]]:
        """Every ``cls`` message the members sent (dropped ones included), decoded, in send order."""
        out: list[tuple[Delivery, M]] = []
        for d in self._sends[id(c)]:
            if (src is not None and d.src != src) or (dst is not None and d.dst != dst):
                continue
            if d.duplicate or peek_template_id(d.payload) != cls.TEMPLATE_ID:
                continue
            msg = decode(d.payload)
            assert isinstance(msg, cls)
            out.append((d, msg))
        return out

    # ------------------------------------------------------------------ reading the event log
    @staticmethod
    def events(
        c: SimCluster, kind: str, member_id: int | None = None, incarnation: int | None = None
    ) -> list[dict[str, Any]]:
        """Events a member emitted (source ``node-N``), optionally of one incarnation."""
        return [
            e
            for e in c.events
            if e["kind"] == kind
            and e["source"].startswith("node-")
            and (member_id is None or e["source"] == f"node-{member_id}")
            and (incarnation is None or e.get("incarnation") == incarnation)
        ]

    def states(self, c: SimCluster, member_id: int, incarnation: int | None = None) -> list[ElectionState]:
        """The election states one member entered, in order."""
        return [ElectionState[e["detail"]["to"]] for e in self.events(c, "election_state", member_id, incarnation)]

    def entries(self, c: SimCluster, state: ElectionState, member_id: int | None = None) -> list[dict[str, Any]]:
        """``election_state`` events entering ``state``."""
        return [e for e in self.events(c, "election_state", member_id) if e["detail"]["to"] == state.name]

    @staticmethod
    def committed_log(c: SimCluster, member_id: int) -> bytes:
        m = c.member(member_id)
        return m.archive.read(0, m.commit_position)

    def close(self) -> None:
        for c in self._clusters:
            c.close()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimKit]:
    kit = SimKit(tmp_path)
    yield kit
    kit.close()
