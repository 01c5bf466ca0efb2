"""What ``clusterlab run`` and ``clusterlab sweep`` show through a pipe: their progress on stderr while
they work (a status line every few seconds), a re-run command on one line that runs as printed, and a
run directory ``clusterlab shrink`` takes as it is."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from clusterlab.chaos.scenarios import SCENARIOS
from clusterlab.chaos.schedule import load_schedule_option, schedule_spec

from clusterlab.cli import build_parser, main

pytestmark = [pytest.mark.chaos, pytest.mark.sim]

# The status line's period, short so a simulated run of well under a second prints several in its schedule.
FAST_PROGRESS = {"CLUSTERLAB_PROGRESS_INTERVAL": "0.05"}
STATUS = re.compile(
    r"^clusterlab run \[\d+ s\]: simulated (\d+\.\d) of (\d+\.\d) s in [\d.]+ s, (\d+) of \d+ ops acknowledged"
)


class PipedRun:
    """A failing ``clusterlab run --sim`` with an explicit schedule (a long re-run command), run through pipes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.steps = schedule_spec(SCENARIOS["leader-kill"].schedule(1, sim=True))
        self.argv = [
            "run", "leader-kill", "--sim", "--seed", "1", "--clients", "2", "--fault-ack-before-append",
            "--schedule", json.dumps(self.steps), "--no-spark", "--dir", str(directory),
        ]  # fmt: skip
        self.done = subprocess.run(
            [sys.executable, "-m", "clusterlab.cli", *self.argv],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, **FAST_PROGRESS, "COLUMNS": "80"},
        )


@pytest.fixture(scope="module")
def piped_run(tmp_path_factory: pytest.TempPathFactory) -> PipedRun:
    return PipedRun(tmp_path_factory.mktemp("piped") / "run")


def test_a_simulator_run_shows_its_progress_on_stderr(piped_run: PipedRun) -> None:
    done = piped_run.done
    assert done.returncode == 1, (done.stdout, done.stderr)  # the broken build: a violation
    status = [m for m in map(STATUS.match, done.stderr.splitlines()) if m]
    assert len(status) >= 2, done.stderr
    simulated = [float(m.group(1)) for m in status]
    assert simulated == sorted(simulated) and simulated[-1] > simulated[0], done.stderr
    assert {m.group(2) for m in status} == {f"{sum(s.get('quiet', s.get('seconds', 0)) for s in piped_run.steps):.1f}"}
    assert int(status[-1].group(3)) > 0  # ops acknowledged so far
    assert "clusterlab run [" not in done.stdout  # stdout keeps the results alone


def test_piped_output_keeps_the_re_run_command_on_one_line_and_it_runs_as_printed(piped_run: PipedRun) -> None:
    lines = piped_run.done.stdout.splitlines()
    rerun = [line for line in lines if line.startswith("re-run: ")]
    assert len(rerun) == 1, piped_run.done.stdout
    assert len(rerun[0]) > 80  # long enough that an 80-column console would have split it
    argv = shlex.split(rerun[0].removeprefix("re-run: "))
    assert argv[:3] == ["clusterlab", "run", "leader-kill"]
    args = build_parser().parse_args(argv[1:])
    assert (args.scenario, args.seed, args.members, args.clients, args.sim) == ("leader-kill", 1, 3, 2, True)
    assert args.fault_ack_before_append
    assert load_schedule_option(args.schedule) == piped_run.steps
    trace = [line for line in lines if line.startswith("trace: ")]
    assert trace == [f"trace: {piped_run.directory / 'trace'}"]


@pytest.mark.parametrize("given", ["run", "trace"])
def test_shrink_takes_a_clusterlab_run_directory(
    given: str, piped_run: PipedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = piped_run.directory if given == "run" else piped_run.directory / "trace"
    out_json = tmp_path / "shrink.json"
    assert main(["shrink", str(run), "--max-runs", "2", "--dir", str(tmp_path / "s"), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "def test_leader_kill_n3_seed1_shrunk_catches_the_bug" in out
    result = json.loads(out_json.read_text())
    assert result["runs"] == 2 and result["run_kwargs"]["fault_ack_before_append"] is True
    assert result["run_kwargs"]["clients"] == 2


def test_shrink_names_what_a_directory_lacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "bare"
    trace.mkdir()
    (trace / "run.json").write_text(json.dumps({"scenario": "leader-kill", "seed": 1}))
    assert main(["shrink", str(trace)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a trace (run.json) without chaos.json" in err[0], err
    (tmp_path / "chaos.json").write_text(json.dumps({"scenario": "leader-kill"}))
    assert main(["shrink", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lacks seed, members, steps" in err[0], err


def test_a_sweep_shows_its_progress_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLUSTERLAB_PROGRESS_INTERVAL", "0.2")
    argv = ["sweep", "leader-kill", "--seeds", "1-2", "--duration", "1", "--jobs", "1", "--dir", str(tmp_path / "s")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    status = [line for line in err.splitlines() if line.startswith("clusterlab sweep [")]
    assert len(status) >= 2 and re.search(r"\]: 2 of 2 runs done \(0 failed\), [\d.]+ runs/minute$", status[-1]), err
    assert "clusterlab sweep [" not in out
    assert "reach: what the 2 runs reached" in out and "election transitions" in out  # the reach report
