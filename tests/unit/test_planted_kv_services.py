"""The kv store's planted bugs live in subclasses (harness/services/planted.py), not in the store: the
store carries no fault switch, each variant shows its bug, and the runner's switches start the variant."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from clusterlab.chaos.runner import MUTANT_SERVICES, STALE_READ_SERVICE
from clusterlab.harness.services import kv, planted
from clusterlab.harness.services.kv import KeyValueService

from clusterlab.testing.mutants import SERVICE_WALL_CLOCK, STALE_READ


class _Session:
    """A leader's session: what the service offers it is kept."""

    def __init__(self, session_id: int) -> None:
        self.id = session_id
        self.sent: list[bytes] = []

    def offer(self, payload: bytes) -> bool:
        self.sent.append(payload)
        return True


def _apply(service: KeyValueService, session: Any, command: bytes) -> None:
    service.on_session_message(session, 1, command)


def _replies(session: _Session) -> list[dict[str, Any]]:
    return [kv.decode_reply(p) for p in session.sent]


def _resolve(spec: str) -> Any:
    module, _, factory = spec.partition(":")
    return getattr(importlib.import_module(module), factory)()


def test_the_kv_store_has_no_fault_switch() -> None:
    service = KeyValueService()
    assert not [name for name in dir(service) if name.startswith("fault_")]
    _apply(service, None, kv.put(1, "k", "v"))
    assert service.entries["k"] == ("v", 1), "stamped with the store's revision"


def test_the_stale_read_variant_answers_a_get_from_the_sessions_own_view() -> None:
    for service, expected in ((planted.StaleRead(), None), (KeyValueService(), "new")):
        reader, writer = _Session(1), _Session(2)
        _apply(service, reader, kv.get(1, "k"))  # absent: the reader's view holds k -> None
        _apply(service, writer, kv.put(2, "k", "new"))
        _apply(service, reader, kv.get(3, "k"))
        assert _replies(reader)[1]["value"] == expected
        assert service.entries["k"][0] == "new", "the write itself is applied alike"
    follower = planted.StaleRead()
    _apply(follower, None, kv.put(1, "k", "v"))  # a service-originated message: the store's own path
    assert follower.entries["k"] == ("v", 1)


def test_the_wall_clock_variant_stamps_writes_with_the_members_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    digests = []
    for now in (1_000, 2_000):
        monkeypatch.setattr(planted.time, "time_ns", lambda now=now: now)
        member = planted.WallClockStamp()
        _apply(member, None, kv.put(1, "k", "v"))
        _apply(member, None, kv.cas(2, "k", "v", "w"))
        assert member.entries["k"] == ("w", now) and member.revision == 2
        assert member.state_digest() == member.recompute_digest()
        digests.append(member.state_digest())
    assert digests[0] != digests[1], "two members applying one log disagree"


def test_the_runner_switches_start_the_planted_variants() -> None:
    assert isinstance(_resolve(STALE_READ_SERVICE), planted.StaleRead)  # --fault-stale-read
    assert isinstance(_resolve(MUTANT_SERVICES[STALE_READ]), planted.StaleRead)
    assert isinstance(_resolve(MUTANT_SERVICES[SERVICE_WALL_CLOCK]), planted.WallClockStamp)
