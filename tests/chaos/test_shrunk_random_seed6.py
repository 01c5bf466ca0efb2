"""Shrunk by clusterlab shrink from a failing random run (seed 6, 3 members):
6 faults -> 1, 12.2 s -> 1.9 s of schedule; with the planted bug it fails durability."""

from pathlib import Path

from clusterlab.chaos.runner import RunResult
from clusterlab.chaos.scenarios import scenario
from clusterlab.chaos.shrink import failure_tokens
from clusterlab.chaos.sweep import guarded_run

STEPS = [
    {"quiet": 0.27},
    {"nemesis": "kill", "seconds": 1.67},
]
BUG = {"fault_ack_before_append": True}  # the planted bug the failing run had


def _run(tmp_path: Path, **bug: bool) -> RunResult:
    """The simulator run (a crash is its error, not an exception)."""
    return guarded_run(
        scenario("random"),
        6,
        schedule=STEPS,
        members=3,
        clients=1,
        rate=25.0,
        settle_s=3.0,
        directory=tmp_path,
        **bug,
    )


def test_random_n3_seed6_shrunk_passes(tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert result.ok, result.failure_message()


def test_random_n3_seed6_shrunk_catches_the_bug(tmp_path: Path) -> None:
    result = _run(tmp_path, **BUG)
    assert "durability" in failure_tokens(result), result.failure_message()
