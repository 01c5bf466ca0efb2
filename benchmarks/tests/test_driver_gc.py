"""The load driver measures with its own collector quiet (benchmarks.peers.common.driver_gc_quiet) and
leaves the process's collector settings as it found them, also when a measurement fails."""

from __future__ import annotations

import gc

import pytest

from benchmarks.peers.common import DRIVER_GC_THRESHOLDS, driver_gc_quiet, run_probe


def test_quiet_block_freezes_and_restores() -> None:
    before = gc.get_threshold()
    with driver_gc_quiet():
        assert gc.get_threshold() == DRIVER_GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_driver_functions_run_quiet_and_restore_on_error() -> None:
    seen: list[tuple[int, int, int]] = []

    class Failing:
        def offer(self, rid: int, payload: bytes) -> bool:
            seen.append(gc.get_threshold())
            raise RuntimeError("down")

        def poll(self, timeout_s: float) -> tuple[list[int], list[int]]:
            raise KeyboardInterrupt  # not swallowed by run_probe: ends the measurement

    before = gc.get_threshold()
    with pytest.raises(KeyboardInterrupt):
        run_probe(Failing(), b"x", 0.001, 1.0)
    assert seen == [DRIVER_GC_THRESHOLDS]
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
