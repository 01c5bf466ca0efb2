"""Fixtures of the Aeron ports: the simulator kit of tests/sim (``sim``), and the Aeron test
services registered in clusterlab.harness.services.SERVICES for these tests only (so the registry
other tests see - and parametrize over - is unchanged)."""

from collections.abc import Iterator

import pytest
from clusterlab.harness.services import SERVICES

from tests.aeron.services import AERON_SERVICES
from tests.aeron.support import SERVICE_NAME, AeronTestService
from tests.sim.conftest import sim  # noqa: F401 - re-exported fixture


@pytest.fixture(autouse=True)
def aeron_services(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(SERVICES, SERVICE_NAME, AeronTestService)
    for name, factory in AERON_SERVICES.items():
        monkeypatch.setitem(SERVICES, name, factory)
    yield
