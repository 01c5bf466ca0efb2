"""A user's own service, workload and model (examples/ledger) through the command line from its
own directory: ``run`` in the simulator and on real processes, every check passing; bad names
rejected with one line before anything starts; ``sweep``, ``golden bless``/``verify`` with the
project's own goldens, ``shrink`` of a planted bug, ``cluster start``, and ``check --engine spark``
judging with the ledger's model."""

from __future__ import annotations

import json
import os
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


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_workload_without_its_service_is_refused_not_run_against_kv(tmp_path: Path, command: str) -> None:
    extra = ["--seeds", "1"] if command == "sweep" else ["--sim"]
    got = subprocess.run(
        [str(CLUSTERLAB), command, "leader-kill", *extra, "--workload", "ledger.workload:make", "--dir", str(tmp_path)],
        cwd=LEDGER,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 2 and "name the service it drives" in got.stderr, got.stdout[-2000:] + got.stderr
    assert len(got.stderr.strip().splitlines()) == 1 and not any(tmp_path.iterdir())


# A user's module that is itself broken, and factories that cannot make what they name.
_BROKEN = {
    "syntax.py": "def make(:\n",
    "raiser.py": "raise RuntimeError('boom at import')\n",
    "factories.py": (
        "from ledger.service import make as _make\n"
        "def needs_arg(x):\n    return _make()\n"
        "def fails():\n    raise ValueError('factory boom')\n"
        "def no_digest():\n    s = _make()\n    s.state_digest = None\n    return s\n"
    ),
}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--service", "mine.syntax:make"], "importing mine.syntax raised SyntaxError: invalid syntax ("),
        (["--service", "mine.raiser:make"], "importing mine.raiser raised RuntimeError: boom at import"),
        (["--service", "mine.factories:needs_arg"], "'mine.factories:needs_arg': calling the factory raised TypeError"),
        (
            ["--service", "mine.factories:fails"],
            "'mine.factories:fails': calling the factory raised ValueError: factory boom",
        ),
        (["--service", "mine.factories:no_digest"], "made Ledger whose state_digest is None, not a method"),
        (
            ["--service", "ledger.service:make", "--workload", "mine.raiser:make"],
            "importing mine.raiser raised RuntimeError",
        ),
    ],
)
def test_a_broken_module_or_factory_of_the_user_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    package = tmp_path / "mine"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in _BROKEN.items():
        (package / name).write_text(text)
    if "--workload" not in args:
        args = [*args, "--workload", "ledger.workload:make"]
    env = {**os.environ, "PYTHONPATH": str(LEDGER)}
    got = subprocess.run(
        [str(CLUSTERLAB), "run", "leader-kill", "--sim", *args, "--dir", str(tmp_path / "run")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 2 and message in got.stderr and len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert "Traceback" not in got.stderr and not (tmp_path / "run").exists()


def test_a_workload_that_reads_no_reply_says_so_in_the_runs_error(tmp_path: Path) -> None:
    (tmp_path / "deaf.py").write_text(
        "from ledger.workload import LedgerWorkload\n"
        "class Deaf(LedgerWorkload):\n"
        "    def decode_reply(self, payload):\n"
        "        raise ValueError('not my format')\n"
        "def make():\n    return Deaf()\n"
    )
    run = str(tmp_path / "run")
    args = ["leader-kill", "--sim", "--duration", "2", *OWN[:2], "--workload", "deaf:make", "--dir", run]
    got = subprocess.run(
        [str(CLUSTERLAB), "run", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(LEDGER)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = " ".join((got.stdout + got.stderr).split())
    assert got.returncode == 1 and "decode_reply refused" in out and "ValueError: not my format" in out, out[-3000:]


@pytest.mark.timeout(1800)  # its golden's verify starts a Spark session
def test_the_ledgers_own_pytest_suite_passes_with_the_plugin() -> None:
    got = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
        cwd=LEDGER,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert got.returncode == 0 and "4 passed" in got.stdout, got.stdout[-3000:] + got.stderr[-2000:]


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
    # The online check stopped the run where it saw the bug; the table's first violation may be earlier.
    stopped = got.stdout.split("run failed: SafetyViolation: ", 1)[1].splitlines()
    assert stopped[1].strip().startswith("(found while the run ran,"), got.stdout[-3000:]


def test_a_seed_sweep_of_the_ledger_runs_every_seed_with_its_workload(tmp_path: Path) -> None:
    got = subprocess.run(
        [str(CLUSTERLAB), "sweep", "leader-kill", "--seeds", "1-2", "--jobs", "1", "--duration", "2", *OWN,
         "--dir", str(tmp_path / "sweep"), "--json", str(tmp_path / "s.json")],
        cwd=LEDGER, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert s["runs"] == 2 and s["failed"] == 0 and s["config"]["workload"] == "ledger.workload:make"


def _cli(*args: str, cwd: Path = LEDGER, timeout_s: float = 600.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CLUSTERLAB), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout_s)


def _ledger_run(tmp_path: Path, service: str = "ledger.service:make", seed: int = 3) -> Path:
    """A finished simulator run of the ledger (its run directory), passing or failing."""
    run = tmp_path / "run"
    _run("leader-kill", "--sim", "--seed", str(seed), "--duration", "2", "--service", service,
         "--workload", "ledger.workload:make", "--dir", str(run), "--no-spark")  # fmt: skip
    assert (run / "chaos.json").is_file()
    return run


@pytest.mark.spark
@pytest.mark.timeout(1200)  # a Spark session, two simulator runs: minutes on a loaded machine
def test_a_ledger_run_blessed_in_the_projects_own_goldens_verifies(tmp_path: Path) -> None:
    run, goldens = _ledger_run(tmp_path), tmp_path / "goldens"
    blessed = _cli("golden", "bless", str(run / "trace"), "--name", "ledger-lk", "--dir", str(goldens))
    assert blessed.returncode == 0 and "blessed ledger-lk (sim, leader-kill seed 3)" in blessed.stdout, blessed.stderr
    info = json.loads((goldens / "ledger-lk" / "run.json").read_text())
    assert info["golden"]["service"] == "ledger.service:make" and info["golden"]["workload"] == "ledger.workload:make"
    assert info["seal"] and info["files"]  # its manifest, sealed as a recorded run's run.json is
    verified = _cli("golden", "verify", "ledger-lk", "--dir", str(goldens), "--master", "local[1]")
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-2000:]
    assert "PASS" in verified.stdout and "ledger-lk" in verified.stdout
    # Where the ledger is not importable its golden is not judged: one line, exit 2.
    elsewhere = _cli("golden", "verify", "ledger-lk", "--dir", str(goldens), cwd=tmp_path)
    assert elsewhere.returncode == 2 and len(elsewhere.stderr.strip().splitlines()) == 1, elsewhere.stderr
    assert "cannot import ledger" in elsewhere.stderr and "where that package is importable" in elsewhere.stderr
    listed = _cli("golden", "list", "--dir", str(goldens))
    assert listed.returncode == 0 and "ledger-lk" in listed.stdout and "leader-kill" in listed.stdout, listed.stderr
    assert "sim-random" not in listed.stdout  # the project's goldens, not clusterlab's


def test_golden_coverage_measures_the_projects_own_goldens_with_their_workload(tmp_path: Path) -> None:
    report = tmp_path / "coverage.json"
    got = _cli("golden", "coverage", "--dir", str(LEDGER / "goldens"), "--quiet", "--json", str(report))
    assert got.returncode in (0, 1), got.stderr  # 1: one golden does not exercise every must-cover item
    (golden,) = json.loads(report.read_text())["goldens"]
    assert golden["name"] == "ledger-leader-kill" and golden["error"] is None, golden["error"]
    assert "on_session_message" in golden["callback"] and "LEADER_READY" in golden["election_state"]
    missing = _cli("golden", "list", "--dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no goldens' directory" in missing.stderr


def test_a_planted_stale_read_in_the_ledger_shrinks_with_its_service_and_workload(tmp_path: Path) -> None:
    run = _ledger_run(tmp_path, "ledger.planted:stale_balance")
    shrink, summary = str(tmp_path / "shrink"), str(tmp_path / "s.json")
    got = _cli("shrink", str(run), "--max-runs", "3", "--dir", shrink, "--json", summary)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert s["target"] == "linearizability" and s["runs"] >= 1
    assert s["run_kwargs"]["service"] == "ledger.planted:stale_balance"
    assert s["run_kwargs"]["workload"] == "ledger.workload:make"
    assert 'workload="ledger.workload:make"' in got.stdout  # the pasteable test re-runs the same workload


def test_a_determinism_failure_shrinks_and_its_test_reruns_the_checks(tmp_path: Path) -> None:
    """A snapshot that forgets a field fails only a replay check: shrink's runs get those checks (as
    `clusterlab run`'s do), and the printed test asks for them."""
    run = _ledger_run(tmp_path, "ledger.planted:forgets_snapshot_field")
    summary = tmp_path / "s.json"
    got = _cli("shrink", str(run), "--max-runs", "3", "--dir", str(tmp_path / "shrink"), "--json", str(summary))
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(summary)
    assert s["target"] == "snapshot-roundtrip" and s["run_kwargs"]["determinism"] is True
    assert "determinism=True" in got.stdout and "BUG" not in got.stdout and "failure_tokens" not in got.stdout


@pytest.mark.spark
@pytest.mark.timeout(1800)  # two runs, two Spark sessions
def test_spark_judges_a_ledger_history_with_the_ledgers_model(tmp_path: Path) -> None:
    """Executors import the ledger (its package shipped to them): a planted stale balance read
    FAILS linearizability on Spark as on DuckDB, a clean run PASSES."""
    verdicts = {}
    for service in ("ledger.service:make", "ledger.planted:stale_balance"):
        run = _ledger_run(tmp_path / service.replace(":", "-"), service)
        got = _cli("check", str(run / "trace"), "--engine", "spark", "--master", "local[1]",
                   "--json", str(tmp_path / "c.json"))  # fmt: skip
        report = _summary(tmp_path / "c.json")
        verdicts[service] = got.returncode, report
    code, report = verdicts["ledger.service:make"]
    assert code == 0 and report["ok"], report
    code, report = verdicts["ledger.planted:stale_balance"]
    lin = report["checks"]["linearizability"]
    assert code == 1 and lin["count"] >= 1 and lin["violations"][0]["model"] == "ledger", lin


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_cluster_start_runs_the_ledger_on_member_processes(tmp_path: Path) -> None:
    """``cluster start --service ledger.service:make`` from the project: members import the ledger
    (its parent on their PYTHONPATH); ``client`` speaks kv, so the ledger refuses its op in a reply."""
    import signal

    from clusterlab.harness.local import pid_alive, wait_until

    directory, out_path = tmp_path / "c", tmp_path / "out.txt"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            [str(CLUSTERLAB), "cluster", "start", "--service", "ledger.service:make", "--dir", str(directory),
             "--refresh", "0.2", "--no-record"],
            cwd=LEDGER, stdout=out, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    processes: list[dict] = []
    try:

        def leader_shown() -> bool:
            assert proc.poll() is None, proc.communicate()
            return "LEADER" in out_path.read_text()

        wait_until(leader_shown, 120, "a status line with a leader", interval_s=0.2)
        processes = json.loads((directory / "processes.json").read_text())
        reply = _cli("client", "--dir", str(directory), "--timeout", "30", "get", "k0", timeout_s=60)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for row in processes:
            if pid_alive(row["pid"]):
                os.kill(row["pid"], signal.SIGKILL)
    assert proc.returncode == 0, err
    assert "(service ledger.service:make," in out_path.read_text().splitlines()[0]
    assert reply.returncode == 1 and "bad request: op 'get'" in reply.stdout, reply.stdout + reply.stderr
    assert not [p["pid"] for p in processes if pid_alive(p["pid"])]


def test_a_sweep_runs_the_replay_checks_and_check_finds_the_runs_a_sweep_kept(tmp_path: Path) -> None:
    """A snapshot that forgets state fails every seed of a sweep by snapshot-roundtrip (no member
    restarts from a snapshot in leader-kill, so nothing else sees it) unless the sweep leaves the
    replay checks out; ``check`` given that sweep's directory finds the runs it kept and fails them."""
    forgetful = ["--service", "ledger.planted:forgets_snapshot_field", "--workload", "ledger.workload:make"]
    common = ["sweep", "leader-kill", "--seeds", "1-2", "--jobs", "1", "--duration", "2", *forgetful]
    got = _cli(*common, "--dir", str(tmp_path / "sweep"), "--json", str(tmp_path / "s.json"))
    assert got.returncode == 1, got.stdout[-3000:] + got.stderr[-2000:]
    s = _summary(tmp_path / "s.json")
    assert s["runs"] == 2 and s["failed"] == 2, s
    assert all(f["failed_checks"] == ["snapshot-roundtrip"] for f in s["failures"]), s["failures"]
    quick = _cli(*common, "--no-determinism", "--keep-traces", "--dir", str(tmp_path / "quick"))
    assert quick.returncode == 0, quick.stdout[-3000:] + quick.stderr[-2000:]
    checked = _cli("check", str(tmp_path / "quick"), "--engine", "duckdb")
    assert checked.returncode == 1, checked.stdout[-3000:] + checked.stderr[-2000:]
    assert "check of 2 run(s): FAIL" in checked.stdout and "snapshot-roundtrip" in checked.stdout, checked.stdout
