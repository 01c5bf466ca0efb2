"""The trace check ``services_terminate_once`` (clusterlab.chaos.checks.service_terminate), judged by DuckDB,
on the simulator's ``shutdown-restart`` scenario with two services per member.

Each service incarnation's agent records ``start`` (declaring ``service_terminate_events``) and one
``service_terminate`` whenever the service is told ``on_terminate``: at the SHUTDOWN's termination
position, then again in the next incarnation when the run ends and every member is stopped gracefully
(the agent's close, Aeron ``ClusteredServiceAgent.onClose``). With the simulator's service host not
closing its agent on a graceful stop (the service never told), every other check still passes and
this one names each stopped member's services; a service told twice, or a trace whose services declare
nothing, are judged from edited events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from clusterlab.chaos.checks.protocol import evaluate_duckdb
from clusterlab.chaos.checks.service_terminate import SERVICES_TERMINATE_ONCE
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.scenarios import SCENARIOS
from clusterlab.harness.sim_parts import SimServiceHost
from clusterlab.harness.trace import Run, open_run

from tests.aeron.support import AeronCluster
from tests.sim.conftest import sim  # noqa: F401 - the simulator kit fixture

pytestmark = [pytest.mark.chaos, pytest.mark.sim]

SEED = 1
SHUTDOWN_RESTART = SCENARIOS["shutdown-restart"]
SERVICES = ["kv", "counter"]


def run(directory: Path, *, failing: tuple[str, ...] = ()) -> Run:
    """The scenario's run; its verdict fails by exactly the ``failing`` checks (none: it passes)."""
    r = run_scenario(SHUTDOWN_RESTART, seed=SEED, sim=True, directory=directory, clients=1, services=SERVICES)
    if failing:
        assert not r.ok
        assert r.failure_message().splitlines()[0].endswith("trace checks failed: " + ", ".join(failing))
    else:
        assert r.ok, r.failure_message()
    return open_run(r.trace_dir)


def judge(tables: dict[str, pa.Table]) -> list[str]:
    run_id = tables["events"].column("run_id")[0].as_py()
    return sorted(r["detail"] for r in evaluate_duckdb(SERVICES_TERMINATE_ONCE, tables, run_id))


def events(r: Run) -> list[dict[str, Any]]:
    return list(r.tables["events"].to_pylist())


def with_events(r: Run, rows: list[dict[str, Any]]) -> dict[str, pa.Table]:
    return dict(r.tables, events=pa.Table.from_pylist(rows, schema=r.tables["events"].schema))


def terminations(r: Run) -> list[tuple[str, int, str]]:
    """(process, incarnation, reason) of every service_terminate event, in order."""
    return sorted(
        (e["source"], e["incarnation"], json.loads(e["detail"])["reason"])
        for e in events(r)
        if e["kind"] == "service_terminate"
    )


def stopped_members(r: Run) -> list[int]:
    return sorted({e["member_id"] for e in events(r) if e["source"] == "harness" and e["kind"] == "stop"})


@pytest.fixture(scope="module")
def passing(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run(tmp_path_factory.mktemp("service-terminate"))


def test_every_service_is_told_once_per_incarnation_and_the_run_passes(passing: Run) -> None:
    members = stopped_members(passing)
    assert members == [0, 1, 2], "the run ends with every member stopped gracefully"
    processes = [f"service-{m}" for m in members] + [f"service-s1-{m}" for m in members]
    declared = {
        (e["source"], e["incarnation"])
        for e in events(passing)
        if e["kind"] == "start" and json.loads(e["detail"]).get("service_terminate_events") is True
    }
    assert declared == {(p, i) for p in processes for i in (0, 1)}
    assert terminations(passing) == sorted(
        [(p, 0, "termination_position") for p in processes] + [(p, 1, "close") for p in processes]
    )
    assert judge(passing.tables) == []


def test_a_graceful_stop_that_never_tells_the_service_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SimServiceHost, "close", lambda self: None)  # the container closes without its agent
    r = run(tmp_path, failing=("services_terminate_once",))  # every other check passes
    assert all(i == 0 for _, i, _ in terminations(r)), "only the SHUTDOWN tells the services"
    got = judge(r.tables)
    assert len(got) == 6, got
    for m in stopped_members(r):
        for service_id, process in ((0, f"service-{m}"), (1, f"service-s1-{m}")):
            prefix = f"member {m} service {service_id} ({process}, incarnation 1) was never told on_terminate"
            assert any(d.startswith(prefix + " although its member was stopped gracefully at ") for d in got), got


def test_a_service_told_twice_fails(passing: Run) -> None:
    rows = events(passing)
    [told] = [
        e for e in rows if e["kind"] == "service_terminate" and (e["source"], e["incarnation"]) == ("service-1", 1)
    ]
    again = dict(told, seq=told["seq"] + 1, detail=json.dumps({"reason": "close", "service_id": 0}))
    got = judge(with_events(passing, [*rows, again]))
    assert got == ["member 1 service 0 (service-1, incarnation 1) was told on_terminate 2 times (close,close)"]


def test_services_that_declare_nothing_are_not_judged(passing: Run) -> None:
    """An older trace: no service records a start or a service_terminate."""
    rows = [e for e in events(passing) if not e["source"].startswith("service-")]
    assert judge(with_events(passing, rows)) == []


def test_an_incarnation_ended_by_a_kill_is_judged_only_for_being_told_twice(passing: Run) -> None:
    """A kill (SIGKILL) runs no close: a service killed without being told is no violation."""
    rows = events(passing)
    untold = [e for e in rows if not (e["kind"] == "service_terminate" and e["incarnation"] == 1)]
    assert len(judge(with_events(passing, untold))) == 6
    killed = [dict(e, kind="kill") if e["source"] == "harness" and e["kind"] == "stop" else e for e in untold]
    assert judge(with_events(passing, killed)) == []  # every stop a kill instead: nothing to tell


def _held(host: SimServiceHost) -> list[tuple[str, str | None]]:
    """(kind, reason) of the agent's events its host holds (no recorder attached)."""
    return [(kind, detail.get("reason")) for kind, _m, _t, _p, detail in host.pending_events]


def test_the_agent_records_its_start_and_each_on_terminate(sim: Any) -> None:  # noqa: F811
    """The event seam without a recorder: a started service declares ``service_terminate_events``; a
    graceful stop records one ``service_terminate`` (close), a kill none, a SHUTDOWN one
    (termination_position) and the stop after it no second."""
    a = AeronCluster(sim.cluster(members=3, seed=0, service="kv"))
    a.await_leader()
    follower, other = a.followers()
    stopped, killed = a.c.service_hosts(follower)[0], a.c.service_hosts(other)[0]
    [(kind, _m, _t, _p, detail)] = stopped.pending_events
    assert kind == "start" and detail["service_terminate_events"] is True and detail["service_id"] == 0
    a.stop_node(follower)
    assert _held(stopped) == [("start", None), ("service_terminate", "close")]
    a.kill_node(other)
    assert _held(killed) == [("start", None)], "a kill tells nothing"
    a.c.restart(follower)
    a.c.restart(other)
    a.await_leader()
    hosts = [h for m in range(3) for h in a.c.service_hosts(m)]
    assert a.c.control("shutdown")
    a.await_condition(lambda: all(a.is_terminated(m) for m in range(3)), "every member terminated")
    for m in range(3):
        a.stop_node(m)
    assert all(_held(h)[1:] == [("service_terminate", "termination_position")] for h in hosts), [
        _held(h) for h in hosts
    ]
