"""The simulator's exceptions, apart from harness/sim.py (mypyc compiles it, and a compiled class cannot
subclass RuntimeError or AssertionError). ``clusterlab.harness.sim`` re-exports them."""

from __future__ import annotations


class SimError(RuntimeError):
    """The simulation itself cannot continue (livelock, misuse of a fault operation)."""


class SimTimeout(AssertionError):
    """An awaited condition did not hold within its simulated timeout. An AssertionError so pytest
    reports it as a test failure, not an error in the harness."""
