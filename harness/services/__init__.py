"""Sample clustered services for tests, the simulator and the demo: a key-value store, a counter and
an echo service with timers. Each keeps an incremental ``state_digest()`` (``digest.py``) whose cost
does not depend on the state's size, and snapshots and restores its whole state."""

from collections.abc import Callable

from clusterlab.core.service.api import ClusteredService
from clusterlab.harness.services.counter import CounterService
from clusterlab.harness.services.echo import EchoService
from clusterlab.harness.services.kv import KeyValueService

SERVICES: dict[str, Callable[[], ClusteredService]] = {
    "kv": KeyValueService,
    "counter": CounterService,
    "timers": CounterService,  # the counter driven by the timers workload (chaos/workload.py)
    "echo": EchoService,
}


def service_factory(name: str) -> Callable[[], ClusteredService]:
    """A service by name (``kv``, ``counter``, ``echo``) or ``package.module:factory`` (KeyError if unknown)."""
    if ":" in name:
        import importlib

        module_name, _, attr = name.partition(":")
        factory: Callable[[], ClusteredService] = getattr(importlib.import_module(module_name), attr)
        return factory
    return SERVICES[name]


__all__ = ["SERVICES", "CounterService", "EchoService", "KeyValueService", "service_factory"]
