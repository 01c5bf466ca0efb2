"""The determinism checks that replay a run's committed log (clusterlab.chaos.determinism): the
ledger's planted bugs fail black-box through ``clusterlab run``, named by the check that should name
them; the clean ledger and the sample services pass; ``clusterlab check RUN`` runs them from the
trace alone; a service without its own ``state_digest`` still gets digests the checks compare."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clusterlab.chaos import determinism
from clusterlab.chaos.determinism import (
    REPLAY_EQUIVALENCE,
    REPLAYS_ELSEWHERE,
    SNAPSHOT_ROUNDTRIP,
    ReplayWorkerError,
    determinism_violations,
    elsewhere_cpu_s,
    first_divergence,
    replay_equivalence,
    replay_worker,
    worker_hash_seeds,
)
from clusterlab.chaos.runner import run_scenario
from clusterlab.core.service.api import UNDIGESTED, ClusteredService, digest_due, has_own_digest, snapshot_digest
from clusterlab.harness import replay
from clusterlab.harness.local import member_hash_seed
from clusterlab.harness.services.kv import KeyValueService
from clusterlab.harness.trace import TraceError, open_run

from tests.chaos import pair_order
from tests.golden import plant

LEDGER = Path(__file__).resolve().parents[2] / "examples" / "ledger"
CLUSTERLAB = Path(sys.executable).parent / "clusterlab"
WORKLOAD = ["--workload", "ledger.workload:make"]


def _cli(*args: str, timeout_s: float = 600.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLUSTERLAB), *args], cwd=LEDGER, capture_output=True, text=True, timeout=timeout_s)


def _sim_run(tmp_path: Path, service: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    got = _cli(
        "run", "leader-kill", "--sim", "--seed", "3", "--service", service, *WORKLOAD,
        "--dir", str(tmp_path / "run"), "--json", str(tmp_path / "s.json"), "--no-spark",
    )  # fmt: skip
    return got, json.loads((tmp_path / "s.json").read_text())


def _row(stdout: str, check: str) -> str:
    return next((line for line in stdout.splitlines() if line.strip("│ ").startswith(check)), "")


def test_the_first_divergence_names_position_members_and_callback() -> None:
    a, b = bytes(16), bytes([1]) + bytes(15)
    live = {64: {0: a, 1: a, 2: a}, 128: {0: a, 1: a, 2: a}, 192: {0: a, 1: b}}
    assert first_divergence([(64, "SessionMessage", a), (192, "Timer", a)], live) is None  # 192: members disagree
    got = first_divergence([(64, "SessionMessage", a), (128, "Timer", b)], live)
    assert got is not None and "log position 128" in got and "member(s) 0, 1, 2" in got and "on_timer_event" in got


def test_a_snapshot_that_forgets_a_field_fails_the_snapshot_roundtrip(tmp_path: Path) -> None:
    got, s = _sim_run(tmp_path, "ledger.planted:forgets_snapshot_field")
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-2000:]
    row = _row(got.stdout, SNAPSHOT_ROUNDTRIP)
    assert "FAIL" in row and "snapshot at log position" in got.stdout, got.stdout[-4000:]
    assert "on_start(snapshot)" in got.stdout  # the restore itself is where it diverges
    assert "FAIL" not in _row(got.stdout, "agreement") and not s["ok"]


def test_hash_order_fails_replay_equivalence_in_the_simulator(tmp_path: Path) -> None:
    got, _s = _sim_run(tmp_path, "ledger.planted:hash_order")
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-2000:]
    assert "FAIL" in _row(got.stdout, REPLAY_EQUIVALENCE), got.stdout[-4000:]
    assert "PYTHONHASHSEED=" in got.stdout and "on_session_message" in got.stdout
    assert "FAIL" not in _row(got.stdout, "agreement")  # one process, one hash seed: the members agree


def test_the_clean_ledger_passes_both_checks_and_check_reruns_them(tmp_path: Path) -> None:
    got, s = _sim_run(tmp_path, "ledger.service:make")
    assert got.returncode == 0 and s["ok"], got.stdout[-3000:] + got.stderr[-2000:]
    for check in (SNAPSHOT_ROUNDTRIP, REPLAY_EQUIVALENCE):
        assert "ok" in _row(got.stdout, check), got.stdout[-3000:]
    checked = _cli("check", str(tmp_path / "run" / "trace"))
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert SNAPSHOT_ROUNDTRIP in checked.stdout and REPLAY_EQUIVALENCE in checked.stdout


def test_clusterlab_check_finds_hash_order_from_the_trace_alone(tmp_path: Path) -> None:
    got, _s = _sim_run(tmp_path, "ledger.planted:hash_order")
    assert got.returncode == 1
    checked = _cli("check", str(tmp_path / "run" / "trace"))
    assert checked.returncode == 1 and REPLAY_EQUIVALENCE in checked.stdout, checked.stdout[-3000:]
    assert "FAIL" in _row(checked.stdout, REPLAY_EQUIVALENCE)
    # This process's hash seed is not the recording's either: the snapshot is not blamed for hash order.
    assert "FAIL" not in _row(checked.stdout, SNAPSHOT_ROUNDTRIP), checked.stdout[-3000:]
    # Nor can it be blessed: a failing run, exit 1 as for any FAIL.
    blessed = _cli("golden", "bless", str(tmp_path / "run" / "trace"), "--name", "ho", "--dir", str(tmp_path / "g"))
    assert blessed.returncode == 1 and "the service is not deterministic" in blessed.stderr, blessed.stderr


def test_a_run_whose_service_cannot_be_imported_here_is_not_judged(tmp_path: Path) -> None:
    run = run_scenario("leader-kill", 1, sim=True, duration_s=2.0, directory=tmp_path / "w").trace_dir
    meta = json.loads((run / "run.json").read_text())
    meta["config"]["service"] = "nowhere_to_be_found.service:make"
    (run / "run.json").write_text(json.dumps(meta))
    plant.reseal(run)  # a run recorded with a service this process cannot import
    with pytest.raises(TraceError, match=r"cannot load the run's service 'nowhere_to_be_found\.service:make'"):
        determinism_violations(run)
    checked = subprocess.run(
        [str(CLUSTERLAB), "check", str(run)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert checked.returncode == 2 and "where that package is importable" in checked.stderr, checked.stderr
    assert len(checked.stderr.strip().splitlines()) == 1 and "PASS" not in checked.stdout


@pytest.mark.parametrize("service", ["kv", "counter", "timers"])
def test_the_sample_services_pass_the_replay_checks(tmp_path: Path, service: str) -> None:
    clients = 1 if service == "timers" else 3  # the timers workload drives one client
    r = run_scenario("leader-kill", 2, sim=True, service=service, clients=clients, directory=tmp_path, determinism=True)
    assert r.verdict is not None
    assert r.verdict.violations[SNAPSHOT_ROUNDTRIP] == [] and r.verdict.violations[REPLAY_EQUIVALENCE] == []
    assert r.ok, r.error or r.verdict.failed()


def test_snapshot_scenarios_restore_every_snapshot_the_log_asks_for(tmp_path: Path) -> None:
    r = run_scenario("snapshot-under-chaos", 4, sim=True, directory=tmp_path, determinism=True)
    assert r.verdict is not None and r.verdict.violations[SNAPSHOT_ROUNDTRIP] == [], r.verdict.violations
    assert r.ok, r.error or r.verdict.failed()


class _NoDigest(KeyValueService):
    """The kv store without its own digest: the base class's snapshot-derived one."""

    state_digest = ClusteredService.state_digest
    digest_interval = 4


def test_a_service_without_a_digest_gets_one_from_its_snapshot_at_its_interval() -> None:
    s = _NoDigest()
    assert not has_own_digest(s) and has_own_digest(KeyValueService())
    before = snapshot_digest(s)
    s._set("k", "v")
    assert snapshot_digest(s) != before and len(before) == 16 and before != UNDIGESTED
    due = [p for p in range(32, 32 * 401, 32) if digest_due(p, 4)]
    assert 50 < len(due) < 150 and all(digest_due(p, 1) for p in range(0, 640, 32))


def test_a_forgotten_field_is_found_through_a_snapshot_derived_digest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No state_digest and no snapshot action in the log: the replay's own snapshots, restored, lose
    the holds, and the captures that follow change the restored ledger differently."""
    monkeypatch.syspath_prepend(str(LEDGER))
    r = run_scenario(
        "leader-kill", 3, sim=True, duration_s=4.0, directory=tmp_path, clients=3,
        service="tests.chaos.forgetful_ledger:make", workload="ledger.workload:make", determinism=True,
    )  # fmt: skip
    assert r.verdict is not None and SNAPSHOT_ROUNDTRIP in r.verdict.failed(), r.failure_message()
    assert "agreement" not in r.verdict.failed(), r.failure_message()  # no member restored from one
    found = r.verdict.violations[SNAPSHOT_ROUNDTRIP]
    assert found and all(f.startswith("snapshot at log position ") for f in found), found
    # Only the replay's own snapshots see it: restored at the log's end alone, nothing follows.
    monkeypatch.setattr(replay, "PROBE_FRACTIONS", ())
    assert determinism_violations(r.trace_dir)[SNAPSHOT_ROUNDTRIP] == []


def test_members_run_with_distinct_hash_seeds_the_same_each_run() -> None:
    seeds = [member_hash_seed(7, m) for m in range(5)]
    assert len(set(seeds)) == 5 and seeds == [member_hash_seed(7, m) for m in range(5)]
    assert all(0 < x <= 4_294_967_295 for x in seeds) and seeds != [member_hash_seed(8, m) for m in range(5)]


def test_hash_order_fails_agreement_on_real_processes(tmp_path: Path) -> None:
    got = _cli(
        "run", "leader-kill", "--seed", "3", "--duration", "8", "--service", "ledger.planted:hash_order", *WORKLOAD,
        "--dir", str(tmp_path / "run"), "--no-spark",
    )  # fmt: skip
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-2000:]
    assert "FAIL" in _row(got.stdout, "agreement"), got.stdout[-4000:]  # members hash with distinct seeds
    seeds = json.loads((tmp_path / "run" / "trace" / "run.json").read_text())["hash_seeds"]
    assert seeds == {str(m): member_hash_seed(3, m) for m in range(3)}


def test_each_of_several_services_is_replayed_and_named_by_its_service_id(tmp_path: Path) -> None:
    """Members running kv and a hash-order-dependent second service: the replay of service 1 in
    another process diverges and the finding names service 1; kv (service 0) replays clean."""
    r = run_scenario(
        "leader-kill", 2, sim=True, duration_s=3.0, directory=tmp_path, clients=3,
        services=["kv", "tests.chaos.session_order:make"], determinism=True,
    )  # fmt: skip
    assert r.verdict is not None and REPLAY_EQUIVALENCE in r.verdict.failed(), r.failure_message()
    found = r.verdict.violations[REPLAY_EQUIVALENCE]
    assert found and all(f.startswith("service 1: ") for f in found), found
    assert "on_session_open" in found[0] and "agreement" not in r.verdict.failed()


def test_a_replay_elsewhere_that_cannot_answer_is_not_judged_and_frees_its_worker(tmp_path: Path) -> None:
    """The other process replays beside this one's replay (started first, collected after): one that
    cannot finish in time is reported as not judged and stopped, and the next replay gets a worker
    (the request did not keep it)."""
    r = run_scenario("leader-kill", 5, sim=True, duration_s=2.0, directory=tmp_path, clients=1, service="kv")
    assert r.verdict is not None and r.verdict.ok, r.failure_message()
    run = open_run(r.trace_dir, whole_payloads=False)
    late = replay_equivalence(run, timeout_s=0.0)  # the first replay overruns (the later ones may finish meanwhile)
    assert late, "a replay that did not finish is never a PASS"
    assert all(
        f.startswith("the replay with PYTHONHASHSEED=") and "did not finish in 0s (not judged)" in f for f in late
    )
    cpu = elsewhere_cpu_s()
    assert replay_equivalence(run) == []
    assert elsewhere_cpu_s() > cpu  # the workers' CPU reaches this process (a sweep's CPU per run counts it)
    assert determinism_violations(r.trace_dir) == {SNAPSHOT_ROUNDTRIP: [], REPLAY_EQUIVALENCE: []}


def test_a_replay_worker_that_is_gone_is_reported_and_its_request_released(tmp_path: Path) -> None:
    """A request to a worker whose process died cannot be written: the result says so (not judged),
    and the worker is no longer held, so the next replay starts a new one."""
    r = run_scenario("leader-kill", 5, sim=True, duration_s=2.0, directory=tmp_path, clients=1, service="kv")
    run = open_run(r.trace_dir, whole_payloads=False)
    worker = replay_worker([os.getcwd()])
    worker.proc.kill()
    worker.proc.wait()
    with pytest.raises(ReplayWorkerError, match=r"cannot reach the replay process: .* \(exit -9\): "):
        worker.replay(run.directory, 0, timeout_s=30.0)
    assert not worker.lock.locked() and not worker.alive()
    assert replay_equivalence(run) == []


def _seeds_ordering_the_pair(want_same: int, want_other: int) -> tuple[list[int], list[int]]:
    """Hash seeds whose process puts the same name of tests.chaos.pair_order first as this process
    does (``want_same`` of them), and seeds that put the other first (``want_other``)."""
    mine = pair_order.first_side()
    same: list[int] = []
    other: list[int] = []
    for seed in range(1, 200):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        got = subprocess.run(
            [sys.executable, "-c", "from tests.chaos.pair_order import first_side; print(first_side())"],
            env=env, capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()  # fmt: skip
        (same if got == mine else other).append(seed)
        if len(same) >= want_same and len(other) >= want_other:
            return same[:want_same], other[:want_other]
    raise AssertionError("no hash seeds order the pair both ways")


def test_every_replay_elsewhere_is_compared_so_one_seed_that_orders_differently_is_enough(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A set of two names orders as this process did in half the hash seeds, so one other process
    misses such a state half the time. With replays in several processes the check fails when any
    one of them diverges, and names it; replays that all order as the run did see nothing."""
    assert len(set(worker_hash_seeds())) == REPLAYS_ELSEWHERE >= 3
    assert str(os.environ.get("PYTHONHASHSEED")) not in {str(s) for s in worker_hash_seeds()}
    same, [other] = _seeds_ordering_the_pair(REPLAYS_ELSEWHERE, 1)
    monkeypatch.setattr(determinism, "worker_hash_seeds", lambda: (*same[: REPLAYS_ELSEWHERE - 1], other))
    r = run_scenario(
        "leader-kill", 2, sim=True, duration_s=2.0, directory=tmp_path / "a", clients=1,
        services=["kv", "tests.chaos.pair_order:make"], determinism=True,
    )  # fmt: skip
    assert r.verdict is not None and r.verdict.failed() == [REPLAY_EQUIVALENCE], r.failure_message()
    [found] = r.verdict.violations[REPLAY_EQUIVALENCE]
    assert found.startswith(f"service 1: replayed in another process (PYTHONHASHSEED={other}; 1 of 3 replays"), found
    monkeypatch.setattr(determinism, "worker_hash_seeds", lambda: tuple(same))
    assert determinism_violations(r.trace_dir) == {SNAPSHOT_ROUNDTRIP: [], REPLAY_EQUIVALENCE: []}
