"""The chaos harness's parts: the workload's model (what makes a reply wrong), seeded schedules,
the nemeses on the simulator, and a runtime fix the chaos suite exposed."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.chaos.nemesis import NEMESES, DiskFault, Kill, Partition
from clusterlab.chaos.sample_workloads import CounterWorkload, KvWorkload
from clusterlab.chaos.scenarios import SCENARIOS, scenario
from clusterlab.chaos.schedule import random_schedule
from clusterlab.chaos.workload import Op
from clusterlab.core.runtime.client import ClusterConnection
from clusterlab.harness.invariants import SafetyViolation


def _op(op_id: int, f: str, key: str | None = "k0", value: str | None = None, **kw: object) -> Op:
    return Op(op_id, f, key, value, 0.0, **kw)  # type: ignore[arg-type]


def test_model_accepts_a_consistent_kv_history() -> None:
    m = KvWorkload()
    m.on_reply(_op(1, "put", value="a"), {"ok": True, "value": None})
    m.on_reply(_op(2, "get"), {"ok": True, "value": "a"})
    m.on_reply(_op(3, "cas", value="b", expected="a"), {"ok": True, "value": "b"})
    m.on_reply(_op(4, "cas", value="c", expected="a"), {"ok": False, "value": "b"})
    m.on_reply(_op(5, "delete"), {"ok": True, "value": "b"})
    m.on_reply(_op(6, "get"), {"ok": False, "value": None})
    assert m.checked == 6


@pytest.mark.parametrize(
    ("op", "reply"),
    [
        (_op(2, "get"), {"ok": True, "value": "old"}),  # the acknowledged put of "a" is missing
        (_op(2, "put", value="b"), {"ok": True, "value": None}),  # previous value should be "a"
        (_op(2, "cas", value="b", expected="a"), {"ok": False, "value": "a"}),  # should have swapped
        (_op(2, "delete"), {"ok": False, "value": None}),  # the key exists
        (_op(2, "get"), {"ok": False, "error": "bad request"}),  # a well-formed request refused
    ],
)
def test_model_rejects_a_reply_that_contradicts_acknowledged_writes(op: Op, reply: dict) -> None:
    m = KvWorkload()
    m.on_reply(_op(1, "put", value="a"), {"ok": True, "value": None})
    with pytest.raises(SafetyViolation, match="acknowledged history broken"):
        m.on_reply(op, reply)


def test_model_final_read_allows_unknown_outcomes_only() -> None:
    m = KvWorkload()
    m.on_reply(_op(1, "put", value="a"), {"ok": True, "value": None})
    m.on_unknown(_op(2, "put", value="b"))
    m.on_reply(_op(3, "get", final=True), {"ok": True, "value": "b"})  # the unknown put landed: fine
    m.on_reply(_op(4, "get", final=True), {"ok": True, "value": "a"})  # or it did not: fine
    with pytest.raises(SafetyViolation, match="acknowledged write is missing"):
        m.on_reply(_op(5, "get", final=True), {"ok": False, "value": None})


def test_counter_model_checks_sums_and_bounds_unknown_adds() -> None:
    m = CounterWorkload()
    m.on_reply(_op(1, "add", None, delta=3), {"ok": True, "value": 3, "revision": 1})
    with pytest.raises(SafetyViolation):
        m.on_reply(_op(2, "add", None, delta=2), {"ok": True, "value": 4, "revision": 2})
    m = CounterWorkload()
    m.on_reply(_op(1, "add", None, delta=3), {"ok": True, "value": 3, "revision": 1})
    m.on_unknown(_op(2, "add", None, delta=5))
    m.on_reply(_op(3, "get", None, final=True), {"ok": True, "value": 8, "revision": 2})
    with pytest.raises(SafetyViolation, match="acknowledged adds"):
        m.on_reply(_op(4, "get", None, final=True), {"ok": True, "value": 0, "revision": 0})


def test_schedules_are_a_function_of_the_seed() -> None:
    a, b = random_schedule(7, 10.0, sim=False), random_schedule(7, 10.0, sim=False)
    assert a.describe() == b.describe()
    assert random_schedule(8, 10.0, sim=False).describe() != a.describe()
    sim_only = {s.split("(")[0] for s in random_schedule(7, 60.0, sim=True).describe()}
    assert not sim_only & {"pause", "kill-service", "clock-skew"}  # no fault the simulator lacks
    assert random_schedule(7, 10.0, sim=False).steps[-1].kind == "quiet"


def test_every_scenario_is_named_sized_and_builds() -> None:
    assert len(SCENARIOS) >= 12
    for spec in SCENARIOS.values():
        for members in spec.sizes:
            sched = spec.schedule(1, members=members)
            assert (sched.steps and any(s.nemesis is not None for s in sched.steps)) or spec.name == "random"
    with pytest.raises(KeyError, match="known: leader-kill"):
        scenario("no-such-scenario")
    rolling = SCENARIOS["rolling-restart"].schedule(1, members=5).steps
    assert [s.nemesis.member for s in rolling if s.nemesis] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]


def test_nemeses_on_the_simulator_record_themselves(sim_cluster, nemesis) -> None:  # type: ignore[no-untyped-def]
    """The plugin's fixtures: faults on a SimCluster, each recorded as chaos_apply / chaos_heal."""
    from clusterlab.core.consensus.context import SECOND

    leader = sim_cluster.await_leader(5 * SECOND)
    iso = nemesis(sim_cluster, Partition(shape="leader-isolation"))
    assert iso.victims == [leader] and iso.leader_fault
    sim_cluster.await_condition(lambda: sim_cluster.leader_id() not in (None, leader), 5 * SECOND, "new leader")
    nemesis.heal(iso)
    disk = nemesis(sim_cluster, DiskFault(fault="truncate", n_bytes=64))
    assert disk.position is not None
    nemesis.heal(disk)
    nemesis(sim_cluster, "kill", who="minority")
    kinds = [e["kind"] for e in sim_cluster.events if e.get("detail", {}).get("source") == "chaos"]
    assert kinds == ["chaos_apply", "chaos_heal", "truncate", "chaos_apply", "chaos_heal", "chaos_apply"]
    assert set(NEMESES) >= {"partition", "kill", "disk", "pause", "clock-skew", "one-way-link", "flaky-links"}
    assert isinstance(nemesis.applied[0][0], Kill)


def test_a_timed_out_connect_can_be_retried(tmp_path: Path) -> None:
    """Regression (found by the full-restart scenario): ClusterConnection.connect timing out while
    no member answered left the client CONNECTING, and the next connect raised ClientError instead
    of waiting on; a workload retrying with short timeouts while the cluster restarts crashed."""
    sockets = tmp_path / "s"
    sockets.mkdir()
    conn = ClusterConnection({0: f"ipc://{sockets}/m0.sock"}, f"ipc://{sockets}/clients/c.sock")
    try:
        for _ in range(2):
            with pytest.raises(TimeoutError):
                conn.connect(0.05)
    finally:
        conn.close()


def test_simulated_kills_leak_no_file_descriptors(tmp_path: Path) -> None:
    """A SimCluster kill closes the member's files: two descriptors leaked per kill would take a pytest
    worker running the chaos suite to fd 1024, where select() fails elsewhere."""
    from clusterlab.chaos.runner import run_scenario

    fds = Path("/proc/self/fd")
    run_scenario("rolling-restart", 1, sim=True, duration_s=3.0, directory=tmp_path / "warm")  # imports, caches
    before = len(list(fds.iterdir()))
    result = run_scenario("rolling-restart", 2, sim=True, duration_s=3.0, directory=tmp_path / "run")
    assert result.ok, result.failure_message()
    assert len(list(fds.iterdir())) <= before


def test_simulated_runs_of_different_sizes_have_different_run_ids(tmp_path: Path) -> None:
    """Sim run ids tell sizes apart: named ``sim-<scenario>-<seed>`` alone, a directory of the suite's runs
    (what Spark checks in one job) would mix the 3- and 5-member runs of a seed into one run."""
    import json

    from clusterlab.chaos.runner import run_scenario

    ids = {
        json.loads(
            (
                run_scenario("bridge", 1, members=n, sim=True, duration_s=2.0, directory=tmp_path / str(n)).trace_dir
                / "run.json"
            ).read_text()
        )["run_id"]
        for n in (3, 5)
    }
    assert len(ids) == 2, ids
