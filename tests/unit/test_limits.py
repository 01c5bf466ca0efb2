"""The bounds of every size and time (clusterlab.chaos.limits): NaN, infinities, negatives, fractions
and values past the top are refused with one line, by the library as by the CLI, before a run starts;
every bounded option's --help shows its bound."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from clusterlab.chaos.limits import CLIENTS, DURATION_S, MEMBERS, RATE, SEED, Limit, run_arguments_error
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.sweep import SweepConfig, bounds_error, parse_seeds

from clusterlab.cli import main


@pytest.mark.parametrize(
    ("limit", "value", "message"),
    [
        (MEMBERS, 0, "x must be 1 to 9, not 0"),
        (MEMBERS, 10, "x must be 1 to 9, not 10"),
        (MEMBERS, 3.5, "x must be 1 to 9, not 3.5"),
        (MEMBERS, True, "x must be 1 to 9, not True"),
        (MEMBERS, "3", "x must be 1 to 9, not '3'"),
        (DURATION_S, 0.0, "x must be above 0 and at most 3600 seconds, not 0"),
        (DURATION_S, -1.0, "x must be above 0 and at most 3600 seconds, not -1"),
        (DURATION_S, math.nan, "x must be above 0 and at most 3600 seconds, not nan"),
        (DURATION_S, math.inf, "x must be above 0 and at most 3600 seconds, not inf"),
        (DURATION_S, 1e12, "x must be above 0 and at most 3600 seconds, not 1e+12"),
        (RATE, -math.inf, "x must be above 0 and at most 10000 ops per second, not -inf"),
        (CLIENTS, 65, "x must be 1 to 64, not 65"),
        (SEED, -1, "x must be 0 to 9223372036854775807, not -1"),
        (SEED, 2**63, "x must be 0 to 9223372036854775807, not 9223372036854775808"),
    ],
)
def test_a_value_out_of_its_limit_is_named(limit: Limit, value: object, message: str) -> None:
    assert limit.error("x", value) == message


@pytest.mark.parametrize(
    ("limit", "value"), [(MEMBERS, 1), (MEMBERS, 9), (DURATION_S, 3600), (DURATION_S, 1e-3), (SEED, 2**63 - 1)]
)
def test_a_value_within_its_limit_passes(limit: Limit, value: float) -> None:
    assert limit.error("x", value) is None


def test_run_scenario_refuses_sizes_and_times_out_of_bounds_before_starting(tmp_path: Path) -> None:
    for kwargs, message in [
        ({"duration_s": 1e12}, "duration must be above 0 and at most 3600 seconds"),
        ({"duration_s": math.nan}, "duration must be above 0 and at most 3600 seconds, not nan"),
        ({"rate": 1e9}, "rate must be above 0 and at most 10000 ops per second"),
        ({"settle_s": math.inf}, "settle must be above 0 and at most 600 seconds, not inf"),
        ({"clients": 100}, "clients must be 1 to 64, not 100"),
        ({"members": 100}, "members must be 1 to 9, not 100"),
    ]:
        with pytest.raises(ValueError, match=message):
            run_scenario("leader-kill", 1, sim=True, directory=tmp_path / "run", **kwargs)  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="seed must be 0 to"):
        run_scenario("leader-kill", -1, sim=True, directory=tmp_path / "run")


def test_sweeps_bound_their_seeds_jobs_and_runs() -> None:
    with pytest.raises(ValueError, match="more than 1000000 seeds"):
        parse_seeds("1-1000000000000")
    assert len(parse_seeds("1-1000000")) == 1_000_000
    assert bounds_error(SweepConfig("random", (1, 2)), jobs=0) == "jobs must be 1 to 256, not 0"
    assert bounds_error(SweepConfig("random", (1,), duration_s=1e12), jobs=1) == (
        "duration must be above 0 and at most 3600 seconds, not 1e+12"
    )
    assert bounds_error(SweepConfig("random", (-3,)), jobs=1) == "a seed must be 0 to 9223372036854775807, not -3"
    assert run_arguments_error(members=3, duration_s=10.0, rate=100.0, clients=3, settle_s=30.0, seed=1) is None


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (("run",), ["cluster size (3; partition scenarios also 5) [1 to 9]", "[above 0 and at most 3600 seconds]"]),
        (
            ("run",),
            [
                "[above 0 and at most 10000 ops per second]",
                "(default 3, or the most the workload runs if fewer) [1 to 64]",
            ],
        ),
        (("sweep",), ["at most 1000000]", "(default: every core) [1 to 256]", "(default 30) [above 0 and at most 600"]),
        (("cluster", "start"), ["number of members (default 3) [1 to 9]", "[above 0 and at most 60 seconds]"]),
        (("client",), ["seconds to wait for the reply (default 10) [above 0 and at most 3600 seconds]"]),
        (("tool",), ["[0 to 8]", "seconds to wait for each member (default 2) [above 0 and at most 3600 seconds]"]),
        (("shrink",), ["(default 80) [1 to 10000]"]),
        (("check",), ["(default 50) [1 to 100000]"]),
        (("mutants",), ["[1 to 1000000]", "[above 0 and at most 86400 seconds]"]),
    ],
)
def test_help_shows_the_bounds(command: tuple[str, ...], shown: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="0"):
        main([*command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for part in shown:
        assert part in text, text
