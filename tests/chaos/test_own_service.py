"""A user's own service, workload and model (examples/ledger) through ``clusterlab run`` from its
own directory: in the simulator and on real processes, every check passing; bad names rejected
with one line before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

LEDGER = Path(__file__).resolve().parents[2] / "examples" / "ledger"
CLUSTERLAB = Path(sys.executable).parent / "clusterlab"  # the console script a user runs
OWN = ["--service", "ledger.service:make", "--workload", "ledger.workload:make"]


def _run(*args: str, timeout_s: float = 600.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLUSTERLAB), "run", *args], cwd=LEDGER, capture_output=True, text=True, timeout=timeout_s
    )


def _summary(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_ledger_passes_leader_kill_in_the_simulator(tmp_path: Path) -> None:
    got = _run(
        "leader-kill", "--sim", "--seed", "3", *OWN, "--dir", str(tmp_path / "run"), "--json", str(tmp_path / "s.json")
    )
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert s["ok"] and s["workload"] == "ledger.workload:make" and s["service"] == "ledger.service:make"
    assert s["linearizability"] == "ok"
    assert s["acked"] > 50 and {"deposit", "hold", "balance"} <= set(s["op_counts"])
    assert "--workload ledger.workload:make" in s["rerun"]


def test_the_ledger_one_client_is_checked_by_its_model_as_replies_arrive(tmp_path: Path) -> None:
    got = _run(
        "leader-kill",
        "--sim",
        "--seed",
        "5",
        "--clients",
        "1",
        *OWN,
        "--dir",
        str(tmp_path / "run"),
        "--json",
        str(tmp_path / "s.json"),
        "--no-spark",
    )
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert s["ok"] and s["model_checked"] > 50  # replies stepped through LedgerModel, one by one


def test_the_ledger_passes_leader_kill_on_real_processes(tmp_path: Path) -> None:
    got = _run(
        "leader-kill",
        "--seed",
        "2",
        "--duration",
        "4",
        *OWN,
        "--dir",
        str(tmp_path / "run"),
        "--json",
        str(tmp_path / "s.json"),
        "--no-spark",
    )
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    # Real processes on a loaded machine: ops sent once (the ledger does not deduplicate) are few.
    assert s["ok"] and s["linearizability"] == "ok" and s["acked"] >= 1 and not s["sim"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--service", "ledger.nosuch:make", "--workload", "ledger.workload:make"], "cannot import ledger.nosuch"),
        (["--service", "ledger.service:nope", "--workload", "ledger.workload:make"], "has no 'nope'"),
        (["--service", "ledger.workload:make", "--workload", "ledger.workload:make"], "not a ClusteredService"),
        (["--service", "ledger.service:make"], "needs its workload"),
        (["--service", "ledger.service:make", "--workload", "ledger.service:make"], "not a ServiceWorkload"),
    ],
)
def test_a_bad_service_or_workload_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    got = _run("leader-kill", "--sim", *args, "--dir", str(tmp_path / "run"), timeout_s=120.0)
    assert got.returncode == 2 and message in got.stderr and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert not (tmp_path / "run").exists()  # nothing started


def test_the_ledgers_own_pytest_suite_passes_with_the_plugin() -> None:
    got = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
        cwd=LEDGER,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert got.returncode == 0 and "3 passed" in got.stdout, got.stdout[-3000:] + got.stderr[-2000:]


@pytest.mark.parametrize(("planted", "check"), [("stale_balance", "linearizability"), ("wall_clock", "agreement")])
def test_a_bug_planted_in_the_ledger_fails_the_run_named_by_its_check(tmp_path: Path, planted: str, check: str) -> None:
    service = ["--service", f"ledger.planted:{planted}", "--workload", "ledger.workload:make"]
    got = _run(
        "leader-kill",
        "--sim",
        "--seed",
        "3",
        *service,
        "--dir",
        str(tmp_path / "run"),
        "--json",
        str(tmp_path / "s.json"),
        "--no-spark",
    )
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert not s["ok"] and check in s["failed_checks"], s["failed_checks"]


def test_a_seed_sweep_of_the_ledger_runs_every_seed_with_its_workload(tmp_path: Path) -> None:
    got = subprocess.run(
        [str(CLUSTERLAB), "sweep", "leader-kill", "--seeds", "1-2", "--jobs", "1", "--duration", "2", *OWN,
         "--dir", str(tmp_path / "sweep"), "--json", str(tmp_path / "s.json")],
        cwd=LEDGER, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert s["runs"] == 2 and s["failed"] == 0 and s["config"]["workload"] == "ledger.workload:make"
