"""Sample clustered services for tests, the simulator and the demo: a key-value store, a counter and
an echo service with timers. Each keeps an incremental ``state_digest()`` (``digest.py``) whose cost
does not depend on the state's size, and snapshots and restores its whole state."""

import importlib
import site
from collections.abc import Callable, Iterable
from pathlib import Path

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
        module_name, _, attr = name.partition(":")
        factory: Callable[[], ClusteredService] = getattr(importlib.import_module(module_name), attr)
        return factory
    return SERVICES[name]


def import_roots(names: Iterable[str]) -> list[str]:
    """The directories member processes need on their import path to load the services ``names`` from
    where this process loaded them (a user's ``package.module:factory`` outside any installed
    package: its top-level package's parent directory), so nothing is copied; clusterlab's own and
    installed modules need none."""
    roots: list[str] = []
    for name in names:
        module_name = name.partition(":")[0]
        top = module_name.split(".")[0]
        if ":" not in name or top == "clusterlab":
            continue
        module = importlib.import_module(top)
        package_dirs = list(getattr(module, "__path__", []))  # a package (also a namespace package)
        root = str(Path(package_dirs[0] if package_dirs else str(module.__file__)).resolve().parent)
        if root not in roots and root not in {str(Path(p).resolve()) for p in site.getsitepackages()}:
            roots.append(root)
    return roots


__all__ = ["SERVICES", "CounterService", "EchoService", "KeyValueService", "import_roots", "service_factory"]
