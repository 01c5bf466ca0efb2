"""A counter service: add / get.

Commands and replies are UTF-8 JSON objects (compact, sorted keys):

* ``{"id": 3, "op": "add", "delta": 5}`` -> ``{"id": 3, "ok": true, "value": <after>, "revision": <adds so far>}``
* ``{"id": 4, "op": "get"}`` -> ``{"id": 4, "ok": true, "value": <current>, "revision": ...}``

A request that cannot be parsed gets ``{"id": <id or null>, "ok": false, "error": "..."}`` and changes
nothing. State = (value, revision = number of adds applied), so "add 0" still changes the state. A
command in a service-originated message (session None) is applied without a reply.

Snapshot: one record ``{"revision": r, "value": v}``.
"""

from __future__ import annotations

import json
from typing import Any

from clusterlab.core.codec import CloseReason
from clusterlab.core.service.api import ClientSession, Cluster, ClusteredService, Role, SnapshotImage, SnapshotWriter
from clusterlab.harness.services.digest import MultisetDigest

DOMAIN = b"clusterlab-ctr"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def add(request_id: int, delta: int) -> bytes:
    """An encoded add command."""
    return _dumps({"id": request_id, "op": "add", "delta": delta})


def get(request_id: int) -> bytes:
    """An encoded get command."""
    return _dumps({"id": request_id, "op": "get"})


def decode_reply(payload: bytes) -> dict[str, Any]:
    """A reply as a dict."""
    reply = json.loads(payload.decode("utf-8"))
    if not isinstance(reply, dict):
        raise ValueError(f"counter reply is not an object: {payload!r:.80}")
    return reply


class CounterService(ClusteredService):
    """One integer; every add is counted in ``revision``."""

    # Several services per member: acts on messages addressed to it (clusterlab.core.service.addressed).
    SHARES_LOG_BY_ADDRESS = True

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.value = 0
        self.revision = 0
        self._digest = MultisetDigest.of(DOMAIN, [("counter", 0, 0)])

    def state_digest(self) -> bytes:
        return self._digest.digest()

    def recompute_digest(self) -> bytes:
        """The digest computed from scratch over the current state."""
        return MultisetDigest.of(DOMAIN, [("counter", self.value, self.revision)]).digest()

    def execute(self, payload: bytes) -> dict[str, Any]:
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
        elif op != "get":
            return {"id": request_id, "ok": False, "error": f"bad request: unknown op {op!r}"}
        return {"id": request_id, "ok": True, "value": self.value, "revision": self.revision}

    # --- ClusteredService ----------------------------------------------------------------------------

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        self.value = 0
        self.revision = 0
        if snapshot is not None and snapshot.records:
            state = json.loads(snapshot.records[0])
            self.value = int(state["value"])
            self.revision = int(state["revision"])
        self._digest = MultisetDigest.of(DOMAIN, [("counter", self.value, self.revision)])

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        pass

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        pass

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        reply = self.execute(payload)
        if session is not None:
            session.offer(_dumps(reply))

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        pass

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        writer.write(_dumps({"revision": self.revision, "value": self.value}))

    def on_role_change(self, new_role: Role) -> None:
        pass

    def on_terminate(self, cluster: Cluster) -> None:
        pass
