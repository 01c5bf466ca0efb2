"""Tripwires through ``clusterlab run`` (on by default): each planted ledger variant fails the run with
the ``tripwire`` check naming ledger/planted.py at the bug's line, in the simulator and on real
processes; the clean ledger and the sample services pass with them on; ``--no-tripwire`` turns them off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.chaos.test_own_service import LEDGER, _run, _summary

PLANTED = LEDGER / "ledger" / "planted.py"


def _bug_line(marker: str) -> int:
    """The line of ledger/planted.py holding ``marker`` (the planted bug's own text)."""
    lines = PLANTED.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text)


def _tripwire_findings(trace: Path) -> list[str]:
    """The ``tripwire`` check's violations of a run, judged again where the ledger is importable."""
    code = (
        "import sys; from clusterlab.chaos.verdict import verify_run; "
        "print('\\n'.join(verify_run(sys.argv[1]).violations['tripwire']))"
    )
    got = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, str(trace)],
        cwd=LEDGER,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert got.returncode == 0, got.stderr[-2000:]
    return [line for line in got.stdout.splitlines() if line]


@pytest.mark.parametrize(
    ("planted", "marker", "expected"),
    [
        (
            "wall_clock",
            "time.time_ns() // 1000",
            "read the wall clock at ledger/planted.py:{line} in WallClock.execute (time.time_ns)",
        ),
        (
            "unseeded_random",
            "random.random() < 0.5",
            "used the module-level random at ledger/planted.py:{line} in UnseededRandom.execute (random.random)",
        ),
        (
            "uuid_ids",
            'f"receipt-{uuid.uuid4()',
            "read OS randomness at ledger/planted.py:{line} in UuidIds.execute (uuid.uuid4)",
        ),
        (
            "thread_start",
            "audit.start()",
            "started a thread at ledger/planted.py:{line} in ThreadStart.execute (threading.Thread.start)",
        ),
        (
            "role_dependent",
            "self.cluster.role is Role.LEADER",
            "read cluster.role and then changed its state at "
            "ledger/planted.py:{line} in RoleDependent.execute (cluster.role)",
        ),
    ],
)
def test_a_planted_tripwire_fails_the_simulated_run_at_its_line(
    tmp_path: Path, planted: str, marker: str, expected: str
) -> None:
    service = ["--service", f"ledger.planted:{planted}", "--workload", "ledger.workload:make"]
    run = tmp_path / "run"
    got = _run("leader-kill", "--sim", "--seed", "3", *service, "--dir", str(run), "--json", str(tmp_path / "s.json"))
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert "tripwire" in s["failed_checks"], s["failed_checks"]
    findings = _tripwire_findings(run / "trace")
    want = f"service 0 on_session_message {expected.format(line=_bug_line(marker))} at log position "
    planted_class = expected.split(" in ")[1].split(" ")[0]
    assert any(want in f for f in findings), findings
    assert all(f"in {planted_class} " in f for f in findings), findings  # nothing else was reported
    assert "tripwire" in got.stdout and f"ledger/planted.py:{_bug_line(marker)}" in got.stdout


@pytest.mark.parametrize(
    "service",
    [
        ["--service", "ledger.service:make", "--workload", "ledger.workload:make"],
        ["--service", "kv"],
        ["--service", "counter"],
        ["--service", "timers", "--clients", "1"],
    ],
)
def test_the_clean_ledger_and_the_sample_services_pass_with_tripwires_on(tmp_path: Path, service: list[str]) -> None:
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
    )
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert s["ok"] and s["failed_checks"] == [] and "--no-tripwire" not in s["rerun"]
    assert "tripwire" in got.stdout  # the check ran (and passed)


def test_no_tripwire_turns_them_off(tmp_path: Path) -> None:
    service = ["--service", "ledger.planted:uuid_ids", "--workload", "ledger.workload:make"]
    run = tmp_path / "run"
    got = _run(
        "leader-kill",
        "--sim",
        "--seed",
        "3",
        *service,
        "--no-tripwire",
        "--dir",
        str(run),
        "--json",
        str(tmp_path / "s.json"),
    )
    s = _summary(tmp_path / "s.json")
    # The uuid names still make the members' states differ (agreement), but nothing was watched.
    assert got.returncode == 1 and "tripwire" not in s["failed_checks"] and "agreement" in s["failed_checks"]
    assert _tripwire_findings(run / "trace") == [] and "--no-tripwire" in s["rerun"]


def test_a_planted_tripwire_fails_a_run_on_real_processes(tmp_path: Path) -> None:
    service = ["--service", "ledger.planted:unseeded_random", "--workload", "ledger.workload:make"]
    run = tmp_path / "run"
    got = _run(
        "leader-kill",
        "--seed",
        "2",
        "--duration",
        "4",
        *service,
        "--dir",
        str(run),
        "--json",
        str(tmp_path / "s.json"),
        "--no-spark",
    )
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert "tripwire" in s["failed_checks"] and not s["sim"], s["failed_checks"]
    line = _bug_line("random.random() < 0.5")
    findings = _tripwire_findings(run / "trace")
    want = f"on_session_message used the module-level random at ledger/planted.py:{line} in UnseededRandom.execute"
    assert findings and all(want in f for f in findings), findings
