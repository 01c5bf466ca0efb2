"""Fixtures of the Aeron ports: the simulator kit of tests/sim (``sim``)."""

from tests.sim.conftest import sim  # noqa: F401 - re-exported fixture
