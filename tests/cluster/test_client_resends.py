"""A client resends only for a service that deduplicates: with ``resends`` off (a workload whose
``resend`` is False, e.g. the counter's or a user's service without deduplication) a request goes
out as the workload built it, once, and the ClusterClient keeps nothing to resend on a new leader;
with it on (kv) the request carries the client's id and stays outstanding until its reply. And a
relative trace directory (``clusterlab run --dir runs/x``) holds the member processes' recordings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.workload import LocalWorkload
from clusterlab.harness.local import LocalClient, LocalCluster
from clusterlab.harness.services import counter
from clusterlab.harness.trace import open_run

from tests.cluster.helpers import running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def _reply(cluster: LocalCluster, client: LocalClient, rid: int) -> dict[str, Any]:
    got: list[dict[str, Any]] = []

    def arrived() -> bool:
        reply = client.take_reply(rid)
        if reply is not None:
            got.append(reply)
        return bool(got)

    cluster.await_condition(arrived, 30.0, f"the reply to request {rid}")
    return got[0]


def test_a_client_that_does_not_resend_sends_the_request_as_built_and_keeps_nothing(tmp_path: Path) -> None:
    with running_cluster(tmp_path, members=1, service="counter") as c:
        once = c.client()
        once.resends = False
        rid, payload = once.begin(lambda r: counter.add(r, 5))
        assert payload == counter.add(rid, 5) and "client" not in json.loads(payload)
        assert dict(once.conn.client.outstanding) == {}, "nothing kept for a resend on a new leader"
        assert _reply(c, once, rid)["value"] == 5
        deduped = c.client()  # the default: a deduplicating service's client (kv)
        rid, payload = deduped.begin(lambda r: counter.add(r, 1))
        assert json.loads(payload)["client"] == deduped.dedupe_id
        assert rid in deduped.conn.client.outstanding
        assert _reply(c, deduped, rid)["value"] == 6
        assert rid not in deduped.conn.client.outstanding


class _Used(Exception):
    """The workload went on to use a client: what it set on it before is what the test reads."""


@pytest.mark.parametrize(
    ("service", "resends", "clients"),
    [("kv", True, 1), ("kv", True, 2), ("counter", False, 1), ("counter", False, 2), ("timers", False, 1)],
)
def test_the_workloads_clients_resend_as_their_service_workload_says(service: str, resends: bool, clients: int) -> None:
    made: list[Any] = []

    class Client:
        def __getattr__(self, name: str) -> Any:
            raise _Used(name)

    class Cluster:
        member_count = 3

        def client(self, connect: bool = True, first_member: int = 0) -> Any:
            made.append(Client())
            return made[-1]

    w = LocalWorkload(service=service, cluster=Cluster(), clients=clients, rate=1e6)
    with pytest.raises(_Used):
        w.step()
    assert len(made) == clients and all(vars(c)["resends"] is resends for c in made)


def test_a_relative_trace_directory_holds_the_members_recordings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Members run in the cluster directory: a relative trace directory is the caller's, not theirs."""
    monkeypatch.chdir(tmp_path)
    with LocalCluster(1, service="kv", directory="cluster", trace_dir="runs/t") as c:
        assert c.client().put("k", "v")["ok"]
        assert c.trace_dir == tmp_path / "runs" / "t"
    run = open_run(tmp_path / "runs" / "t")
    assert run.completeness is not None and run.completeness.ok, run.completeness
    assert run.log.num_rows > 0 and run.applied.num_rows > 0
    assert {"node-0", "service-0"} <= set(run.messages.column("process").to_pylist())
    assert not (tmp_path / "cluster" / "runs").exists()
