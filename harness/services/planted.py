"""Planted service bugs (tests only) that wrap or extend a sample service instead of switching a branch
inside it.

``forgetful_dedupe_service`` is the kv store with its exactly-once deduplication lost: the ``client``
field a resending client adds to each request is dropped before the store sees it, so a resent request
(after a timeout or a leader change) is applied again, as a service that forgot its dedupe table would.
Everything else is the kv store's own behaviour, and every member runs the same bug, so the members'
states still agree: only a client-side check (linearizability, durability) can see it.

``double_fire_service`` is the counter that counts each alarm that fires twice in ``fired``. Every member
counts alike, so their states agree: only the timers workload's model of the alarms sees it.

``stale_read_service`` is the kv store that answers a session's get from what that session last saw of
the key (a per-session read cache never invalidated by other sessions' writes). Every member keeps the
same cache from the log, so agreement and the state digests see nothing, and one client never sees it
(its own writes are in its cache): only a linearizability check of concurrent clients does.

``wall_clock_service`` is the kv store that stamps each write with the member's wall clock instead of
the store's revision, so the members' states (and digests) diverge: an agreement check sees it."""

from __future__ import annotations

import time
from typing import Any

import orjson
from clusterlab.core.codec import CloseReason
from clusterlab.core.consensus.context import Role
from clusterlab.core.service.api import ClientSession, Cluster, ClusteredService
from clusterlab.core.service.snapshot import SnapshotImage, SnapshotWriter
from clusterlab.harness.services.counter import CounterService
from clusterlab.harness.services.kv import KeyValueService, encode_reply


def without_client(payload: bytes) -> bytes:
    """The JSON request without its ``client`` field (other payloads as they are)."""
    try:
        command = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return payload
    if not isinstance(command, dict) or "client" not in command:
        return payload
    del command["client"]
    return orjson.dumps(command)


class ForgetfulDedupe(ClusteredService):
    """The kv store, except that it never recognises a request it has already applied."""

    def __init__(self) -> None:
        self.store = KeyValueService()

    def __getattr__(self, name: str) -> Any:  # the store's own attributes (entries, replies, ...)
        return getattr(self.store, name)

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.store.on_start(cluster, snapshot)

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        self.store.on_session_open(session, timestamp)

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        self.store.on_session_close(session, timestamp, close_reason)

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        self.store.on_session_message(session, timestamp, without_client(payload))

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        self.store.on_timer_event(correlation_id, timestamp)

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        self.store.on_take_snapshot(writer)

    def on_role_change(self, new_role: Role) -> None:
        self.store.on_role_change(new_role)

    def on_terminate(self, cluster: Cluster) -> None:
        self.store.on_terminate(cluster)

    def state_digest(self) -> bytes:
        return self.store.state_digest()


def forgetful_dedupe_service() -> ForgetfulDedupe:
    """The kv store with its deduplication lost (mutant ``resend-applied-twice``; tests only)."""
    return ForgetfulDedupe()


class DoubleFire(CounterService):
    """The counter, except that an alarm that fires counts twice in ``fired``."""

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        before = self.fired
        super().on_timer_event(correlation_id, timestamp)
        if self.fired != before:
            self._set_timers(lambda: setattr(self, "fired", self.fired + 1))


def double_fire_service() -> DoubleFire:
    """The counter that counts a fired alarm twice (mutant ``alarm-counted-twice``; tests only)."""
    return DoubleFire()


class StaleRead(KeyValueService):
    """The kv store, except that a session's get is answered from what that session saw last."""

    def __init__(self) -> None:
        super().__init__()
        self._session_view: dict[int, dict[str, str | None]] = {}  # session -> key -> value it last saw

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        if session is None:  # a service-originated message: applied as the store applies it
            super().on_session_message(session, timestamp, payload)
            return
        reply = self._stale_read_execute(session.id, payload)
        if self._answers():
            session.offer(encode_reply(reply))

    def _stale_read_execute(self, session_id: int, payload: bytes) -> dict[str, Any]:
        """A get answered from this session's view when the view holds the key; any other command
        executed, and the key's value after it kept in the view."""
        view = self._session_view.setdefault(session_id, {})
        try:
            command = orjson.loads(payload)
        except orjson.JSONDecodeError:
            command = None
        key = command.get("key") if type(command) is dict else None
        request_id = command.get("id") if type(command) is dict else None
        # A request without an int id falls through: execute() answers it as malformed.
        is_get = type(command) is dict and command.get("op") == "get"
        if is_get and isinstance(key, str) and key in view and isinstance(request_id, int):
            value = view[key]
            return self._reply(request_id, value is not None, value)
        reply = self.execute(payload)
        if isinstance(key, str) and "error" not in reply:
            op = command.get("op") if type(command) is dict else None
            view[key] = None if op == "delete" else command.get("value") if op == "put" else reply.get("value")
        return reply


def stale_read_service() -> StaleRead:
    """The kv store with the planted stale read (mutant ``stale-read``, ``--fault-stale-read``; tests only)."""
    return StaleRead()


class WallClockStamp(KeyValueService):
    """The kv store, except that a write is stamped with the member's wall clock instead of the store's
    revision."""

    def _set(self, key: str, value: str) -> None:
        self.revision += 1
        self.entries[key] = (value, time.time_ns())
        self._digests.written(key)


def wall_clock_service() -> WallClockStamp:
    """The kv store with the planted non-determinism (mutant ``service-wall-clock``; tests only)."""
    return WallClockStamp()
