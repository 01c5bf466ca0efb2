"""A counter service: add / get, and timers.

Commands and replies are UTF-8 JSON objects (compact, sorted keys):

* ``{"id": 3, "op": "add", "delta": 5}`` -> ``{"id": 3, "ok": true, "value": <after>, "revision": <adds so far>}``
* ``{"id": 4, "op": "get"}`` -> ``{"id": 4, "ok": true, "value": <current>, "revision": ...}``

Timers and session control (the ``timers`` workload; they never change value or revision):

* ``{"id": 5, "op": "alarm", "timer": 2, "delay_ms": 40}``: schedule (or reschedule) alarm 2 at the
  entry's time + 40 ms (``Cluster.schedule_timer``); when it fires (``on_timer_event``) ``fired`` counts it
* ``{"id": 6, "op": "disarm", "timer": 2}``: cancel alarm 2 (``Cluster.cancel_timer``)
* ``{"id": 7, "op": "tick"}``: ``Cluster.offer`` a service-originated ``tick`` back into the log
  (applied by every member with session None: ``ticks`` counts it)
* ``{"id": 8, "op": "close"}``: reply, then ``Cluster.close_client_session`` on the sender's session

Each of these replies like ``get``. Pending alarms, ``fired`` and ``ticks`` are part of the state
(digest and snapshot) once any exists; from then on every reply also carries them:
``"alarms": [<pending timer numbers, sorted>], "fired": <alarms fired>, "ticks": <ticks applied>``.

A request that cannot be parsed gets ``{"id": <id or null>, "ok": false, "error": "..."}`` and changes
nothing. State = (value, revision = number of adds applied), so "add 0" still changes the state. A
command in a service-originated message (session None) is applied without a reply.

Snapshot: one record ``{"revision": r, "value": v}`` (plus ``alarms``, ``fired``, ``ticks`` once used).
"""

from __future__ import annotations

import json
from typing import Any

from clusterlab.core.codec import CloseReason, ClusterTimeUnit
from clusterlab.core.service.api import ClientSession, Cluster, ClusteredService, Role, SnapshotImage, SnapshotWriter
from clusterlab.harness.services.digest import MultisetDigest

DOMAIN = b"clusterlab-ctr"
_UNITS_PER_MS = {ClusterTimeUnit.MILLIS: 1, ClusterTimeUnit.MICROS: 1_000, ClusterTimeUnit.NANOS: 1_000_000}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def add(request_id: int, delta: int) -> bytes:
    """An encoded add command."""
    return _dumps({"id": request_id, "op": "add", "delta": delta})


def get(request_id: int) -> bytes:
    """An encoded get command."""
    return _dumps({"id": request_id, "op": "get"})


def alarm(request_id: int, timer: int, delay_ms: int) -> bytes:
    """An encoded alarm command: schedule timer ``timer`` ``delay_ms`` after the entry's time."""
    return _dumps({"id": request_id, "op": "alarm", "timer": timer, "delay_ms": delay_ms})


def disarm(request_id: int, timer: int) -> bytes:
    """An encoded disarm command: cancel timer ``timer``."""
    return _dumps({"id": request_id, "op": "disarm", "timer": timer})


def tick(request_id: int) -> bytes:
    """An encoded tick command: the service offers a message to the log."""
    return _dumps({"id": request_id, "op": "tick"})


def close(request_id: int) -> bytes:
    """An encoded close command: the service closes the sender's session after replying."""
    return _dumps({"id": request_id, "op": "close"})


def decode_reply(payload: bytes) -> dict[str, Any]:
    """A reply as a dict."""
    reply = json.loads(payload.decode("utf-8"))
    if not isinstance(reply, dict):
        raise ValueError(f"counter reply is not an object: {payload!r:.80}")
    return reply


IDLE_TIMER_ID = 1  # the counter's one timer (scheduling it again moves its deadline)
IDLE_TIMER_MS = 200


class CounterService(ClusteredService):
    """One integer; every add is counted in ``revision``."""

    # Several services per member: acts on messages addressed to it (clusterlab.core.service.addressed).
    SHARES_LOG_BY_ADDRESS = True

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.value = 0
        self.revision = 0
        self.alarms: dict[int, tuple[int, int]] = {}  # timer -> (correlation id, deadline)
        self.fired = 0
        self.ticks = 0
        self._closing: int | None = None  # the session to close once its reply is sent
        self._digest = MultisetDigest.of(DOMAIN, [("counter", 0, 0)])

    def _items(self) -> list[tuple[Any, ...]]:
        items: list[tuple[Any, ...]] = [("counter", self.value, self.revision)]
        items += [("alarm", t, cid, deadline) for t, (cid, deadline) in sorted(self.alarms.items())]
        if self.fired or self.ticks:
            items.append(("timers", self.fired, self.ticks))
        return items

    def _set_timers(self, update: Any) -> None:
        """Apply ``update()`` (a change of alarms/fired/ticks) and keep the digest incremental."""
        before = [i for i in self._items() if i[0] != "counter"]
        update()
        after = [i for i in self._items() if i[0] != "counter"]
        for item in before:
            self._digest.remove(*item)
        for item in after:
            self._digest.add(*item)

    def state_digest(self) -> bytes:
        return self._digest.digest()

    def recompute_digest(self) -> bytes:
        """The digest computed from scratch over the current state."""
        return MultisetDigest.of(DOMAIN, self._items()).digest()

    def _timer_command(self, op: str, command: dict[str, Any], session: ClientSession | None) -> str | None:
        """alarm / disarm / tick / close; the error text for a bad one."""
        cluster = self.cluster
        if cluster is None:
            return "the service has not started"
        if op == "tick":
            if session is None:
                self._set_timers(lambda: setattr(self, "ticks", self.ticks + 1))
            else:
                cluster.offer(_dumps({"id": 0, "op": "tick"}))
            return None
        if op == "close":
            if session is not None:
                self._closing = session.id
            return None
        timer = command.get("timer")
        if not isinstance(timer, int) or isinstance(timer, bool):
            return "'timer' must be int"
        if op == "disarm":
            pending = self.alarms.get(timer)
            if pending is not None:
                self._set_timers(lambda: self.alarms.pop(timer))
                cluster.cancel_timer(pending[0])
            return None
        delay = command.get("delay_ms")
        if not isinstance(delay, int) or isinstance(delay, bool) or delay < 0:
            return "'delay_ms' must be a non-negative int"
        deadline = cluster.time + delay * _UNITS_PER_MS.get(cluster.time_unit, 1)
        cid = self.alarms[timer][0] if timer in self.alarms else 1_000_000 + timer  # one correlation per alarm
        self._set_timers(lambda: self.alarms.__setitem__(timer, (cid, deadline)))
        cluster.schedule_timer(cid, deadline)
        return None

    def execute(self, payload: bytes, session: ClientSession | None = None) -> dict[str, Any]:
        """Apply one command and return the reply."""
        try:
            command = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            return {"id": None, "ok": False, "error": f"bad request: not JSON: {e}"}
        if not isinstance(command, dict):
            return {"id": None, "ok": False, "error": "bad request: not a JSON object"}
        request_id = command.get("id")
        if not isinstance(request_id, int) or isinstance(request_id, bool):
            return {"id": None, "ok": False, "error": "bad request: 'id' must be int"}
        op = command.get("op")
        if op == "add":
            delta = command.get("delta")
            if not isinstance(delta, int) or isinstance(delta, bool):
                return {"id": request_id, "ok": False, "error": "bad request: 'delta' must be int"}
            old = ("counter", self.value, self.revision)
            self.value += delta
            self.revision += 1
            self._digest.replace(old, ("counter", self.value, self.revision))
        elif op in ("alarm", "disarm", "tick", "close"):
            error = self._timer_command(op, command, session)
            if error is not None:
                return {"id": request_id, "ok": False, "error": f"bad request: {error}"}
        elif op != "get":
            return {"id": request_id, "ok": False, "error": f"bad request: unknown op {op!r}"}
        reply: dict[str, Any] = {"id": request_id, "ok": True, "value": self.value, "revision": self.revision}
        if self.alarms or self.fired or self.ticks:
            reply.update(alarms=sorted(self.alarms), fired=self.fired, ticks=self.ticks)
        return reply

    # --- ClusteredService ----------------------------------------------------------------------------

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        self.value = 0
        self.revision = 0
        self.alarms, self.fired, self.ticks = {}, 0, 0
        if snapshot is not None and snapshot.records:
            state = json.loads(snapshot.records[0])
            self.value = int(state["value"])
            self.revision = int(state["revision"])
            self.alarms = {int(t): (int(cid), int(d)) for t, cid, d in state.get("alarms", [])}
            self.fired = int(state.get("fired", 0))
            self.ticks = int(state.get("ticks", 0))
        self._digest = MultisetDigest.of(DOMAIN, self._items())

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        pass

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        pass

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        revision = self.revision
        reply = self.execute(payload, session)
        if self.revision != revision and self.cluster is not None:
            # An idle timer, pushed back by every add: it fires (a Timer entry in the log) only when
            # adds pause for IDLE_TIMER_MS of cluster time, e.g. across a failover.
            self.cluster.schedule_timer(IDLE_TIMER_ID, timestamp + IDLE_TIMER_MS)
        if session is not None:
            session.offer(_dumps(reply))
        if self._closing is not None and self.cluster is not None:
            closing, self._closing = self._closing, None
            self.cluster.close_client_session(closing)

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        # The idle timer's firing is in the log (what the trace checks compare); no state of its own.
        timer = next((t for t, (cid, _d) in self.alarms.items() if cid == correlation_id), None)
        if timer is None:
            return  # the idle timer, or an alarm disarmed after its TimerEvent was appended

        def fire() -> None:
            del self.alarms[timer]
            self.fired += 1

        self._set_timers(fire)

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        state: dict[str, Any] = {"revision": self.revision, "value": self.value}
        if self.alarms or self.fired or self.ticks:
            state["alarms"] = [[t, cid, d] for t, (cid, d) in sorted(self.alarms.items())]
            state["fired"], state["ticks"] = self.fired, self.ticks
        writer.write(_dumps(state))

    def on_role_change(self, new_role: Role) -> None:
        pass

    def on_terminate(self, cluster: Cluster) -> None:
        pass
