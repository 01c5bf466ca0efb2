"""The tripwires (clusterlab.harness.tripwire): what a callback must not do is reported at the user's
line, once, only inside the callback and only in its thread; a seeded Random and the harness's own
clock are not findings; the agent calls its scope around the service's callbacks."""

from __future__ import annotations

import datetime
import os
import random
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from time import time as imported_time
from typing import Any

import pytest
from clusterlab.core.service.agent import ClusteredServiceAgent
from clusterlab.harness.services.kv import KeyValueService
from clusterlab.harness.tripwire import (
    CPU_CLOCK,
    GLOBAL_RANDOM,
    OS_RANDOMNESS,
    ROLE_STATE,
    THREAD,
    WALL_CLOCK,
    Tripwire,
)

HERE = "tests/unit/test_tripwire.py"


class _State:
    def __init__(self) -> None:
        self.value = 0

    def digest(self) -> bytes:
        return self.value.to_bytes(16, "little")


def _tripwire(state: _State | None = None) -> tuple[Tripwire, list[tuple[int, dict[str, Any]]]]:
    reports: list[tuple[int, dict[str, Any]]] = []
    wire = Tripwire(1, 0, (state or _State()).digest, lambda position, detail: reports.append((position, detail)))
    return wire, reports


def _in_callback(wire: Tripwire, call: Callable[[], object], callback: str = "on_session_message") -> None:
    wire.enter(callback, 1234)
    try:
        call()
    finally:
        wire.exit()


def _line_of(marker: str) -> int:
    """The line of this file that holds ``marker`` (a comment at the call that must be named)."""
    lines = open(__file__).read().splitlines()  # noqa: SIM115
    return next(i for i, text in enumerate(lines, 1) if text.endswith(f"# {marker}") and "def " not in text)


def _reads_the_clock() -> float:
    return time.time()  # CLOCK


def _reads_datetime() -> object:
    return datetime.datetime.now()  # DATETIME


def _reads_the_imported_clock() -> float:
    return imported_time()  # IMPORTED


def _reads_the_cpu_clock() -> float:
    return time.process_time()  # CPU_CLOCK


def _draws_global_random() -> int:
    return random.randint(1, 6)  # RANDINT


def _draws_global_random_c() -> float:
    return random.random()  # RANDOM


def _makes_uuid() -> object:
    return uuid.uuid4()  # UUID4


def _reads_urandom() -> bytes:
    return os.urandom(4)  # URANDOM


def _uses_secrets() -> str:
    return secrets.token_hex(4)  # SECRETS


def _starts_a_thread() -> None:
    t = threading.Thread(target=lambda: None)
    t.start()  # THREAD
    t.join()


@pytest.mark.parametrize(
    ("call", "marker", "kind", "name"),
    [
        (_reads_the_clock, "CLOCK", WALL_CLOCK, "time.time"),
        (_reads_datetime, "DATETIME", WALL_CLOCK, "datetime.now"),
        (_reads_the_imported_clock, "IMPORTED", WALL_CLOCK, "time.time"),
        (_reads_the_cpu_clock, "CPU_CLOCK", CPU_CLOCK, "time.process_time"),
        (_draws_global_random, "RANDINT", GLOBAL_RANDOM, "random.randint"),
        (_draws_global_random_c, "RANDOM", GLOBAL_RANDOM, "random.random"),
        (_makes_uuid, "UUID4", OS_RANDOMNESS, "uuid.uuid4"),
        (_reads_urandom, "URANDOM", OS_RANDOMNESS, "os.urandom"),
        (_uses_secrets, "SECRETS", OS_RANDOMNESS, "secrets.token_hex"),
        (_starts_a_thread, "THREAD", THREAD, "threading.Thread.start"),
    ],
)
def test_a_forbidden_call_in_a_callback_is_reported_once_at_the_users_line(
    call: Callable[[], object], marker: str, kind: str, name: str
) -> None:
    wire, reports = _tripwire()
    for _ in range(3):
        _in_callback(wire, call)
    assert len(reports) == 1, reports  # one per (callback, finding, call, line); the inner calls not again
    position, detail = reports[0]
    line = _line_of(marker)
    assert position == 1234
    assert (detail["finding"], detail["call"], detail["file"], detail["line"]) == (kind, name, HERE, line)
    assert detail["function"] == call.__name__
    assert detail["message"] == (
        f"member 1 service 0 on_session_message {kind} at {HERE}:{line} in {call.__name__} ({name}) "
        "at log position 1234"
    )


def test_a_seeded_random_and_the_cluster_time_are_fine() -> None:
    wire, reports = _tripwire()
    rng = random.Random(7)
    _in_callback(wire, lambda: (rng.random(), rng.randint(1, 6), rng.choice([1, 2]), random.Random(3).shuffle([1, 2])))
    assert reports == []


def test_nothing_is_watched_outside_a_callback_nor_in_another_thread() -> None:
    wire, reports = _tripwire()
    time.time(), random.random(), uuid.uuid4()  # the harness's own use, outside any callback
    go, done = threading.Event(), threading.Event()

    def other_thread() -> None:
        go.wait(30)
        time.time(), random.random()
        done.set()

    worker = threading.Thread(target=other_thread)
    worker.start()
    _in_callback(wire, lambda: (go.set(), done.wait(30)))
    worker.join(30)
    assert done.is_set() and reports == []


def test_reading_the_role_and_then_changing_state_is_reported_at_the_read() -> None:
    state = _State()
    wire, reports = _tripwire(state)

    def role_dependent() -> None:
        wire.role_read()  # ROLE READ
        state.value += 1

    def role_logged() -> None:
        state.value += 1
        wire.role_read()  # the state changed before the read, not after it

    _in_callback(wire, role_logged)
    assert reports == []
    _in_callback(wire, role_dependent)
    assert [(d["finding"], d["line"], d["function"]) for _, d in reports] == [
        (
            ROLE_STATE,
            _line_of("ROLE READ"),
            "test_reading_the_role_and_then_changing_state_is_reported_at_the_read.<locals>.role_dependent",
        )
    ]


def test_a_role_change_callback_that_changes_state_is_reported() -> None:
    state = _State()
    wire, reports = _tripwire(state)

    def on_role_change() -> None:
        state.value += 1

    _in_callback(wire, lambda: None, "on_role_change")
    assert reports == []
    _in_callback(wire, on_role_change, "on_role_change")
    assert [(d["callback"], d["finding"], d["function"]) for _, d in reports] == [
        ("on_role_change", ROLE_STATE, on_role_change.__qualname__)
    ]


class _Counting:
    """A callback scope that counts what the agent tells it."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.depth = 0
        self.role_reads = 0

    def enter(self, callback: str, log_position: int) -> None:
        assert self.depth == 0
        self.depth += 1
        self.entered.append(callback)

    def exit(self) -> None:
        self.depth -= 1

    def role_read(self) -> None:
        self.role_reads += 1


def test_the_agent_calls_its_scope_around_the_services_callbacks() -> None:
    scope = _Counting()
    sent: list[bytes] = []
    agent = ClusteredServiceAgent(0, 0, KeyValueService(), sent.append, lambda *_: None, None, callback_scope=scope)
    agent.start()
    assert scope.entered == ["on_start"] and scope.depth == 0
    agent.role  # noqa: B018 (a read is what is counted)
    assert scope.role_reads == 1
