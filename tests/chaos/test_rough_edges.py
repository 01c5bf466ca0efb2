"""The rough edges a new user meets: ``trace summary|show`` on the directory ``clusterlab
run --dir`` made, ``trace show`` times from the run's start; one vocabulary for partition shapes and
scenarios with a one-line error for an unknown shape; the ``sim_cluster`` fixture has a leader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from clusterlab.chaos.nemesis import NEMESES, PARTITION_SHAPES, Partition
from clusterlab.chaos.scenarios import SCENARIOS

from clusterlab.cli import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``clusterlab run leader-kill --sim --dir D`` leaves: D holding trace/ (and member files)."""
    directory = tmp_path_factory.mktemp("run") / "d"
    assert main(["run", "leader-kill", "--sim", "--duration", "2", "--no-spark", "--dir", str(directory)]) == 0
    assert (directory / "trace" / "run.json").is_file() and not (directory / "run.json").exists()
    return directory


@pytest.mark.sim
def test_trace_commands_accept_the_run_directory_as_well_as_its_trace(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    outputs = []
    for path in (run_dir, run_dir / "trace"):
        assert main(["trace", "summary", str(path)]) == 0
        assert main(["trace", "show", str(path), "--member", "1", "--from", "0", "--channel", "log"]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        outputs.append(re.sub(r"report written .*", "", out))
    assert outputs[0] == outputs[1] and "messages per channel" in outputs[0]


@pytest.mark.sim
def test_trace_show_prints_seconds_from_the_run_start(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["trace", "show", str(run_dir), "--member", "0", "--from", "0"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("    ")]
    times = [float(m[1]) for line in rows if (m := re.match(r"\s*([+-]\d+\.\d{6})s (node|service)-0/i\d+ #\d+ ", line))]
    assert len(times) == len(rows) > 10
    # The simulator's run starts at its virtual time 0: a 2 s scenario (plus start-up and heal) stays small.
    assert min(times) >= 0 and max(times) < 60
    assert times == sorted(times)


def test_partition_shapes_are_named_as_their_scenarios() -> None:
    for shape in PARTITION_SHAPES:
        if shape in ("isolate", "follower-isolation"):  # building blocks (random schedules; stale-candidate)
            continue
        steps = SCENARIOS[shape].build(6.0, 3)
        shapes = {s.nemesis.shape for s in steps if isinstance(getattr(s, "nemesis", None), Partition)}
        assert shapes == {shape}, (shape, shapes)


@pytest.mark.parametrize("shape", ["isolate-leader", "halves", "ring", ""])
def test_an_unknown_shape_is_one_line_listing_the_valid_ones(shape: str) -> None:
    with pytest.raises(ValueError) as raised:
        NEMESES["partition"](shape=shape)
    message = str(raised.value)
    assert message == f"unknown partition shape {shape!r}; valid shapes: {', '.join(PARTITION_SHAPES)}"
    assert "\n" not in message


@pytest.mark.sim
def test_sim_cluster_fixture_returns_with_a_leader(sim_cluster) -> None:  # type: ignore[no-untyped-def]
    leader = sim_cluster.leader_id()
    assert leader is not None
    assert sim_cluster.member(leader).role.name == "LEADER"
