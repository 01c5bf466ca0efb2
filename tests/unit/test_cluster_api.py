"""Both cluster drivers implement the one typed protocol (harness/cluster_api.py) with its parameters."""

from __future__ import annotations

import inspect

import pytest
from clusterlab.harness.cluster_api import Cluster
from clusterlab.harness.local import LocalCluster
from clusterlab.harness.sim import SimCluster

OPERATIONS = sorted(
    name for name, value in vars(Cluster).items() if not name.startswith("_") and inspect.isfunction(value)
)


def _parameters(function: object) -> list[tuple[str, inspect._ParameterKind]]:
    """Names and kinds after ``self`` (mypyc's positional-only ``self`` included)."""
    params = list(inspect.signature(function).parameters.values())[1:]  # type: ignore[arg-type]
    return [
        (p.name, p.kind if p.kind != inspect.Parameter.POSITIONAL_ONLY else p.POSITIONAL_OR_KEYWORD) for p in params
    ]


def test_the_protocol_names_the_shared_operations() -> None:
    assert {"kill", "restart", "partition", "heal", "storage", "event", "leader_id"} <= set(OPERATIONS)
    assert "member_count" in Cluster.__annotations__


@pytest.mark.parametrize("driver", [LocalCluster, SimCluster], ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", OPERATIONS)
def test_each_driver_implements_the_operation_with_its_parameters(driver: type, name: str) -> None:
    implementation = getattr(driver, name, None)
    assert callable(implementation), f"{driver.__name__} lacks {name}"
    assert _parameters(implementation) == _parameters(getattr(Cluster, name)), (
        f"{driver.__name__}.{name}{inspect.signature(implementation)} differs from Cluster.{name}"
    )


def test_a_renamed_parameter_is_a_difference() -> None:
    class Renamed:
        def kill(self, member: int) -> None: ...

    assert _parameters(Renamed.kill) != _parameters(Cluster.kill)
