"""Several clustered services per member, the parts without processes: the ``services`` list of
cluster.json, the per-service endpoints and process names, and the address convention by which the
sample services share the log (clusterlab.core.service.addressed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clusterlab.core.consensus.context import Role
from clusterlab.core.runtime.config import (
    ClusterConfig,
    ConfigError,
    parse_services,
    service_control_endpoint,
    service_process_name,
    to_service_endpoint,
)
from clusterlab.core.service.addressed import AddressedService, address, addressed_factory, addressee
from clusterlab.harness.services import CounterService, KeyValueService, counter, kv


class _Session:
    def __init__(self) -> None:
        self.replies: list[bytes] = []
        self.cluster_session_id = 1

    def offer(self, payload: bytes) -> bool:
        self.replies.append(payload)
        return True


class _Cluster:
    def __init__(self) -> None:
        self.offered: list[bytes] = []
        self.role = Role.LEADER

        self.timers: dict[int, int] = {}

    def offer(self, payload: bytes) -> bool:
        self.offered.append(payload)
        return True

    def schedule_timer(self, correlation_id: int, deadline: int) -> bool:
        self.timers[correlation_id] = deadline  # the counter's idle timer (moved back by every add)
        return True

    def cancel_timer(self, correlation_id: int) -> bool:
        return self.timers.pop(correlation_id, None) is not None


def test_services_round_trip_through_cluster_json(tmp_path: Path) -> None:
    config = ClusterConfig.create(tmp_path / "c", 3, services=["kv", "counter"])
    assert config.service == "kv" and config.service_kinds == ["kv", "counter"] and config.service_count == 2
    config.save()
    assert json.loads(config.path.read_text())["services"] == ["kv", "counter"]
    loaded = ClusterConfig.load(config.directory)
    assert loaded.service_kinds == ["kv", "counter"] and loaded.service == "kv"


def test_a_single_service_file_is_unchanged(tmp_path: Path) -> None:
    config = ClusterConfig.create(tmp_path / "c", 1, service="counter")
    config.save()
    assert "services" not in json.loads(config.path.read_text())
    assert ClusterConfig.load(config.directory).service_kinds == ["counter"]
    assert ClusterConfig.create(tmp_path / "d", 1, service=None).service_count == 0


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("kv,,counter", "an empty service name"),
        ([1, "kv"], "must be a list of service names"),
        (",".join(["kv"] * 9), "at most 8 services"),
    ],
)
def test_bad_services_are_named(given: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_services(given)


def test_a_bad_services_entry_in_cluster_json_is_a_config_error(tmp_path: Path) -> None:
    config = ClusterConfig.create(tmp_path / "c", 1)
    config.save()
    raw = json.loads(config.path.read_text())
    raw["services"] = ["kv", ""]
    config.path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=r"not a valid cluster configuration: ValueError: .*empty service name"):
        ClusterConfig.load(config.directory)


def test_service_zero_keeps_its_endpoints_and_name_the_others_get_their_own(tmp_path: Path) -> None:
    member = ClusterConfig.create(tmp_path / "c", 2, services=["kv", "counter", "echo"]).member(1)
    assert to_service_endpoint(member, 0) == member.to_service
    assert service_control_endpoint(member, 0) == member.service_control
    endpoints = {to_service_endpoint(member, s) for s in range(3)} | {
        service_control_endpoint(member, s) for s in range(3)
    }
    assert len(endpoints) == 6
    assert [service_process_name(1, s) for s in range(3)] == ["service-1", "service-s1-1", "service-s2-1"]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"@1:abc", (1, b"abc")),
        (b"@12:", (12, b"")),
        (b'{"op":"get"}', (0, b'{"op":"get"}')),
        (b"@x:abc", (0, b"@x:abc")),  # not a service id: addressed to service 0 as it is
        (b"@1abc", (0, b"@1abc")),
        (b"@:abc", (0, b"@:abc")),
        (b"", (0, b"")),
    ],
)
def test_addressee(payload: bytes, expected: tuple[int, bytes]) -> None:
    assert addressee(payload) == expected


def test_each_service_acts_only_on_what_is_addressed_to_it() -> None:
    kv_service = addressed_factory(KeyValueService, 0, 2)()
    counter_service = addressed_factory(CounterService, 1, 2)()
    assert isinstance(kv_service, AddressedService) and isinstance(counter_service, AddressedService)
    for s in (kv_service, counter_service):
        s.on_start(_Cluster(), None)  # type: ignore[arg-type]
    session = _Session()
    for payload in (kv.put(1, "k", "v"), address(1, counter.add(2, 5)), address(0, kv.get(3, "k"))):
        kv_service.on_session_message(session, 0, payload)  # type: ignore[arg-type]
        counter_service.on_session_message(session, 0, payload)  # type: ignore[arg-type]
    replies = [json.loads(r) for r in session.replies]
    assert [r["id"] for r in replies] == [1, 2, 3], "exactly one reply per message, from its service"
    assert replies[1]["value"] == 5 and replies[2]["value"] == "v"
    assert counter_service.value == 5 and counter_service.ignored_messages == 2
    assert kv_service.ignored_messages == 1


def test_a_service_offer_comes_back_to_the_same_service() -> None:
    cluster = _Cluster()
    service = addressed_factory(CounterService, 1, 2)()
    service.on_start(cluster, None)  # type: ignore[arg-type]
    service.inner.cluster.offer(b"x")  # type: ignore[attr-defined]
    assert cluster.offered == [b"@1:x"]


def test_single_service_and_services_that_see_everything_are_not_wrapped() -> None:
    assert addressed_factory(CounterService, 0, 1) is CounterService
    assert type(addressed_factory(_Cluster, 1, 2)()) is _Cluster  # type: ignore[arg-type]
