"""Several clustered services per member in the simulator (Aeron's service ids 0..N-1): every
service applies every log entry and acknowledges it, the consensus module waits for all of them
before a snapshot counts, each service snapshots into its own store and the recording log holds one
entry per service; a restarted member restores each service from its own snapshot; the chaos
leader-kill scenario passes with ``applied`` rows for every (member, service id); the online checker
compares states within one service id only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.core.consensus.context import SECOND, SERVICE_ID_CONSENSUS_MODULE
from clusterlab.core.consensus.recording_log import EntryType, RecordingLog
from clusterlab.core.service.addressed import address
from clusterlab.harness.invariants import SafetyChecker, SafetyViolation
from clusterlab.harness.services import counter, kv
from clusterlab.harness.sim import SimCluster
from clusterlab.harness.sim_parts import SimClient

pytestmark = pytest.mark.sim

SERVICES = ["kv", "counter"]


def _request(c: SimCluster, client: SimClient, payload: bytes, request_id: int) -> dict[str, Any]:
    """Offer ``payload`` and wait for the reply whose id is ``request_id``."""
    c.await_condition(lambda: client.client.offer(payload, c.now_ns) > 0, 5 * SECOND, "offered")

    def reply() -> dict[str, Any] | None:
        for m in client.received:
            r = json.loads(m.payload)
            if r.get("id") == request_id:
                return r  # type: ignore[no-any-return]
        return None

    c.await_condition(lambda: reply() is not None, 10 * SECOND, f"reply to {request_id}")
    r = reply()
    assert r is not None
    return r


def _snapshot_entries(c: SimCluster, member_id: int) -> list[tuple[int, int]]:
    """(service id, log position) of the member's valid SNAPSHOT entries, in recording-log order."""
    with RecordingLog.open(c.storage(member_id)) as recording_log:
        return [
            (e.service_id, e.log_position)
            for e in recording_log.entries()
            if e.type == EntryType.SNAPSHOT and e.is_valid
        ]


def test_every_service_applies_every_entry_and_replies_for_its_own_messages(sim: Any) -> None:
    c = sim.cluster(3, seed=3, services=SERVICES)
    c.await_leader()
    client = c.connect_client()
    assert _request(c, client, kv.put(1, "k", "v"), 1)["ok"] is True
    assert _request(c, client, address(1, counter.add(2, 7)), 2)["value"] == 7
    assert _request(c, client, address(1, counter.add(3, 5)), 3)["value"] == 12
    sim.converge(c)
    c.await_condition(
        lambda: len({c.service(m, s).log_position for m in range(3) for s in range(2)}) == 1,
        5 * SECOND,
        "every service of every member applied the whole log",
    )
    replies = [json.loads(m.payload)["id"] for m in client.received]
    assert sorted(replies) == [1, 2, 3], "one reply per request: the addressed service's"
    for m in range(3):
        assert c.service(m, 0).service_id == 0 and c.service(m, 1).service_id == 1
        assert c.service(m, 0).service.entries["k"][0] == "v"
        assert c.service(m, 1).service.value == 12
        assert c.service(m, 0).service.ignored_messages == 2 and c.service(m, 1).service.ignored_messages == 1
    rows: dict[tuple[int, int], list[int]] = {}
    for row in c.applied:
        rows.setdefault((row["member_id"], row.get("service_id", 0)), []).append(row["entry"].log_position)
    assert set(rows) == {(m, s) for m in range(3) for s in range(2)}
    for m in range(3):
        assert rows[(m, 0)] == rows[(m, 1)], "both services applied the same entries at the same positions"
    with pytest.raises(Exception, match="has no service 2"):
        c.service(0, 2)


def test_a_snapshot_waits_for_every_service_and_each_restores_from_its_own(sim: Any) -> None:
    c = sim.cluster(3, seed=5, services=SERVICES)
    c.await_leader()
    client = c.connect_client()
    _request(c, client, kv.put(1, "a", "1"), 1)
    _request(c, client, address(1, counter.add(2, 40)), 2)
    assert c.control("snapshot")
    c.await_condition(
        lambda: all(c.member(m).snapshot_count == 1 for m in range(3)),  # type: ignore[attr-defined]
        10 * SECOND,
        "every member took the snapshot",
    )
    position = _snapshot_entries(c, 0)[-1][1]
    for m in range(3):
        # Aeron's order within one snapshot set: services N-1..0, then the consensus module.
        assert _snapshot_entries(c, m) == [(1, position), (0, position), (SERVICE_ID_CONSENSUS_MODULE, position)]
    _request(c, client, address(1, counter.add(3, 2)), 3)  # after the snapshot: replayed from the log
    sim.converge(c)
    for m in range(3):
        c.restart(m)
    sim.converge(c, 20 * SECOND)
    c.await_condition(
        lambda: all(c.service(m, 1).service.value == 42 for m in range(3)), 10 * SECOND, "counters restored"
    )
    for m in range(3):
        assert c.service(m, 0).service.entries["a"][0] == "1"
        restored = [
            (row.get("service_id", 0), row["entry"].log_position)
            for row in c.applied
            if row["member_id"] == m and row["incarnation"] == 1 and row["entry"].entry_type.value == "Snapshot"
        ]
        assert sorted(restored) == [(0, position), (1, position)], "each service loaded its own snapshot"


def test_a_failed_service_snapshot_is_not_recorded(sim: Any) -> None:
    c = sim.cluster(3, seed=7, services=SERVICES)
    c.await_leader()
    client = c.connect_client()
    _request(c, client, address(1, counter.add(1, 1)), 1)
    for m in range(3):
        host = c.service_hosts(m)[1]

        def fail(_writer: Any) -> None:
            raise RuntimeError("planted snapshot failure")

        host.agent.service.inner.on_take_snapshot = fail
    assert c.control("snapshot")
    c.await_condition(
        lambda: all(c.service_hosts(m)[1].errors for m in range(3)), 10 * SECOND, "service 1 failed everywhere"
    )
    c.run_for(2 * SECOND)
    for m in range(3):
        assert c.member(m).snapshot_count == 0  # type: ignore[attr-defined]
        assert _snapshot_entries(c, m) == []
        assert not c.service_hosts(m)[0].errors
    assert _request(c, client, address(1, counter.add(2, 1)), 2)["value"] == 2, "the services keep serving"


def test_leader_kill_with_two_services_per_member(tmp_path: Any) -> None:
    r = run_scenario("leader-kill", seed=2, sim=True, directory=tmp_path / "run", services=SERVICES, clients=2)
    assert r.ok, r.failure_message()
    assert r.services == SERVICES and "kv+counter" in r.run_id and "--services kv,counter" in r.rerun_command()
    from clusterlab.harness.trace import open_run

    applied = open_run(r.trace_dir).applied
    pairs = set(zip(applied.column("member_id").to_pylist(), applied.column("service_id").to_pylist(), strict=True))
    assert pairs == {(m, s) for m in range(3) for s in range(2)}
    files = sorted(p.name for p in (r.trace_dir / "applied").glob("*.arrow"))
    assert {"service-0-i0.arrow", "service-s1-0-i0.arrow"} <= set(files)


class _Entry:
    def __init__(self, position: int, state: bytes) -> None:
        self.log_position = position
        self.length = 32
        self.entry_type = "SessionMessage"
        self.entry_digest = b"e" * 16
        self.state_digest = state


def test_the_online_checker_compares_states_within_one_service_id() -> None:
    checker = SafetyChecker()
    checker.on_applied(0, 0, _Entry(32, b"a" * 16), service_id=0)
    checker.on_applied(0, 0, _Entry(32, b"b" * 16), service_id=1)  # another service: another state
    checker.on_applied(1, 0, _Entry(32, b"a" * 16), service_id=0)
    checker.on_applied(1, 0, _Entry(32, b"b" * 16), service_id=1)
    with pytest.raises(SafetyViolation, match="service 1: agreement: at log position 64"):
        checker.on_applied(0, 0, _Entry(64, b"c" * 16), service_id=1)
        checker.on_applied(1, 0, _Entry(64, b"d" * 16), service_id=1)
