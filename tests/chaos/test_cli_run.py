"""``clusterlab run`` / ``clusterlab scenarios``: verdicts, exit codes, and the same seed giving the
same simulated run; the Spark check agreeing with the local verdict on a broken build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.harness.trace import open_run

from clusterlab.cli import main

pytestmark = pytest.mark.chaos


def test_scenarios_lists_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    from clusterlab.chaos.scenarios import SCENARIOS

    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in SCENARIOS)
    cells = [line.split("│") for line in out.splitlines() if line.count("│") > 4]
    drivers = {c[1].strip(): c[3].strip() for c in cells}
    for name, spec in SCENARIOS.items():
        assert drivers[name] == ("real" if spec.real_only else "sim" if spec.sim_only else "real, sim"), name
    assert (
        drivers["client-silence"] == "sim"
        and drivers["kill-service"] == "real"
        and drivers["pause-leader"] == "real, sim"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "nope"], "unknown scenario 'nope'; known: leader-kill"),
        (["run", "bridge", "--members", "4"], "scenario bridge runs on 3 or 5 members, not 4"),
        (["run", "kill-service", "--sim"], "needs real processes"),
        (["run", "client-silence"], "scenario client-silence runs in the simulator only; add --sim"),
        (["run", "random", "--sim", "--service", "timers", "--clients", "2"], "timers workload runs at most 1 client"),
        (["run", "leader-kill", "--duration", "-1"], "--duration: must be above 0 and at most 3600 seconds, not -1"),
        (["run", "leader-kill", "--rate", "0"], "--rate: must be above 0 and at most 10000 ops per second, not 0"),
        (["run", "leader-kill", "--sim", "--member-process", "single"], "the simulator runs no processes"),
        (["run", "kill-service", "--member-process", "single"], "its schedule kills a service alone"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse refused the value
        code = int(e.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.sim
def test_run_in_the_simulator_passes_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "run.json"
    assert (
        main(
            [
                "run",
                "leader-kill",
                "--sim",
                "--seed",
                "2",
                "--no-spark",
                "--dir",
                str(tmp_path / "run"),
                "--json",
                str(summary),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "local verdict (DuckDB): PASS" in out and "PASS" in out.splitlines()[-1]
    assert "re-run: clusterlab run leader-kill --seed 2 --members 3 --duration 6 --sim" in out
    data = json.loads(summary.read_text())
    assert data["ok"] and data["elections_s"] and data["failovers_s"] and data["acked"] > 0
    assert 0.5 < data["elections_s"][0] < 5.0  # heartbeat timeout 1 s, then an election
    assert set(data["op_counts"]) == {"put", "get", "cas", "delete"}


@pytest.mark.sim
def test_run_exits_1_on_a_violation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["run", "leader-kill", "--sim", "--no-spark", "--fault-ack-before-append", "--dir", str(tmp_path / "run")])
        == 1
    )
    out = capsys.readouterr().out
    assert "acknowledged write is missing" in out and "FAIL" in out.splitlines()[-1]


@pytest.mark.sim
@pytest.mark.parametrize("service", ["kv", "counter"])
def test_same_seed_same_simulated_run(tmp_path: Path, service: str) -> None:
    a = run_scenario("random", 11, sim=True, duration_s=4.0, directory=tmp_path / "a", service=service)
    b = run_scenario("random", 11, sim=True, duration_s=4.0, directory=tmp_path / "b", service=service)
    assert a.ok and b.ok, (a.failure_message(), b.failure_message())
    assert a.schedule == b.schedule and a.acked == b.acked and a.elections_s == b.elections_s
    ra, rb = open_run(a.trace_dir), open_run(b.trace_dir)
    for table in ("applied", "ops", "events", "log"):
        ta, tb = ra.tables[table], rb.tables[table]
        drop = [c for c in ("run_id",) if c in ta.column_names]
        assert ta.drop_columns(drop).equals(tb.drop_columns(drop)), table


@pytest.mark.sim
@pytest.mark.spark
@pytest.mark.slow
def test_spark_check_agrees_with_the_local_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "run.json"
    code = main(
        [
            "run",
            "leader-kill",
            "--sim",
            "--fault-ack-before-append",
            "--engine",
            "spark",
            "--dir",
            str(tmp_path / "run"),
            "--json",
            str(summary),
        ]
    )
    assert code == 1
    data = json.loads(summary.read_text())
    spark_failed = {name for name, c in data["spark"]["checks"].items() if not c["ok"]}
    assert spark_failed == set(data["failed_checks"]) >= {"durability"}
    out = capsys.readouterr().out
    assert "Spark check of 1 run(s)" in out
    report = tmp_path / "run" / "trace" / "report.html"
    assert f"report: {report}" in out.replace("\n", "")
    assert report.is_file() and "durability" in report.read_text()


@pytest.mark.sim
def test_the_rerun_command_carries_the_offered_rate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run's outcome depends on its rate (too slow a rate acknowledges nothing): the printed re-run
    command repeats it, and running that command gives the same run."""
    argv = ["run", "leader-kill", "--sim", "--seed", "4", "--duration", "2", "--rate", "40", "--no-spark"]
    assert main([*argv, "--dir", str(tmp_path / "a")]) == 0
    rerun = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("re-run: "))
    assert rerun.split()[1:] == ["clusterlab", "run", "leader-kill", "--seed", "4", "--members", "3", "--duration", "2",
                                 "--rate", "40", "--sim"], rerun  # fmt: skip
    assert main([*rerun.split()[2:], "--no-spark", "--dir", str(tmp_path / "b")]) == 0
    ops = [open_run(tmp_path / d / "trace").ops.num_rows for d in ("a", "b")]
    assert ops[0] == ops[1] > 0
