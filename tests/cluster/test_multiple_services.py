"""Several clustered services per member on real processes: one service process per service id,
each with its own sockets, snapshot store, recording-log entries and trace files; every service
applies the whole log, a message addressed to a service is answered by that service only; a snapshot
records one entry per service and a restarted cluster restores each service from its own; a member
is its node and all its services (one service killed stops the node)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterlab.core.consensus.context import SERVICE_ID_CONSENSUS_MODULE
from clusterlab.core.consensus.recording_log import EntryType, RecordingLog
from clusterlab.core.runtime.node import EXIT_SERVICE_GONE
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.core.service.addressed import address
from clusterlab.harness.local import LocalCluster
from clusterlab.harness.services import counter, kv
from clusterlab.harness.trace import open_run

from tests.cluster.helpers import CATCH_UP_S, await_caught_up, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

SERVICES = ["kv", "counter"]


def _snapshots(cluster: LocalCluster, member_id: int) -> list[tuple[int, int]]:
    """(service id, log position) of the member's valid snapshot entries."""
    with RecordingLog.open(FileStorage(cluster.member_dir(member_id))) as log:
        return [(e.service_id, e.log_position) for e in log.entries() if e.type is EntryType.SNAPSHOT and e.is_valid]


def _service_states(cluster: LocalCluster, service_id: int) -> set[tuple[int, bytes]]:
    out = set()
    for m in range(cluster.member_count):
        status = cluster.service_status(m, service_id=service_id)
        assert status is not None, f"service {service_id} of member {m} does not answer"
        out.add((status.log_position, bytes(status.state_digest)))
    return out


def test_two_services_per_member_snapshot_and_restart_each_from_its_own(tmp_path: Path) -> None:
    with running_cluster(tmp_path, services=SERVICES) as c:
        assert c.service_kinds == ["service", "service-s1"]
        client = c.client()
        assert client.request(lambda rid: kv.put(rid, "k", "v"))["ok"] is True
        assert client.request(lambda rid: address(1, counter.add(rid, 30)))["value"] == 30
        assert c.control("snapshot")
        c.await_condition(
            lambda: all((s := c.status(i)) is not None and s.snapshot_count == 1 for i in range(3)),
            CATCH_UP_S,
            "every member took the snapshot",
        )
        assert client.request(lambda rid: address(1, counter.add(rid, 12)))["value"] == 42  # replayed on restart
        position = await_caught_up(c)  # every service of every member applied the whole log
        states = {s: _service_states(c, s) for s in range(2)}
        assert all(len(v) == 1 for v in states.values()), f"members disagree within a service id: {states}"
        assert states[0] != states[1], "the two services hold different states"
    for m in range(3):
        [(_, at)] = {(0, p) for _, p in _snapshots(c, m)}
        assert _snapshots(c, m) == [(1, at), (0, at), (SERVICE_ID_CONSENSUS_MODULE, at)]
        assert 0 < at < position
    processes = json.loads((c.directory / "processes.json").read_text())
    assert {(p["member_id"], p["kind"]) for p in processes} == {
        (m, k) for m in range(3) for k in ("node", *c.service_kinds)
    }

    with running_cluster(tmp_path, services=SERVICES) as again:
        assert await_caught_up(again) >= position
        # The same states (the new term's entries move the position, not the state).
        assert {s: {d for _, d in _service_states(again, s)} for s in range(2)} == {
            s: {d for _, d in v} for s, v in states.items()
        }
        client = again.client()
        assert client.request(lambda rid: address(1, counter.get(rid)))["value"] == 42
        assert client.request(lambda rid: kv.get(rid, "k"))["value"] == "v"
    restored = {
        (r["member_id"], r["service_id"], r["log_position"])
        for r in open_run(again.trace_dir).applied.to_pylist()
        if r["entry_type"] == "Snapshot"
    }
    assert restored == {(m, s, at) for m in range(3) for s in range(2)}, "each service loaded its own snapshot"


def test_a_member_whose_second_service_dies_stops(tmp_path: Path) -> None:
    with running_cluster(tmp_path, services=SERVICES) as c:
        await_caught_up(c)  # every service connected to its node and applied the log
        victim = next(m for m in range(3) if m != c.leader_id())
        c.kill_service(victim, service_id=1)
        c.await_condition(lambda: not c.is_alive(victim), CATCH_UP_S, f"node {victim} stopped")
        codes = c.exit_codes(victim)
        assert codes["node"] == EXIT_SERVICE_GONE and codes["service-s1"] == -9
        c.restart(victim)  # its service 0, still running, is stopped first (as LocalCluster.stop does)
        await_caught_up(c)
        assert len(_service_states(c, 1)) == 1
