"""An echo service with timers: exercises egress, timers, service-originated messages and
service-initiated session close.

Commands are UTF-8 text, one per session message; replies go to the sending session:

==========================  ===========================================================================
``timer <id> <delay_ms>``   schedule (or reschedule) this session's timer ``<id>``; reply
                            ``timer <id> scheduled <deadline>``; when it fires the session gets
                            ``timer <id> fired <timestamp>``
``cancel <id>``             cancel it; reply ``cancel <id> ok`` or ``cancel <id> unknown``
``offer <text>``            ``Cluster.offer(<text>)``: the text comes back through the log as a
                            service-originated message, and is sent to every open session as
                            ``broadcast <text>``
``close``                   the service closes the session (SessionCloseEvent SERVICE_ACTION)
``terminate``               the service raises ClusterTerminationException: it stops and its member
                            terminates (Aeron ClusterTest's TERMINATE message); on every member
anything else               echoed back unchanged
==========================  ===========================================================================

``<id>`` is any token chosen by the client; the service maps (session, id) to its own correlation id
(a counter, so every member allocates the same ones). A session's timers are cancelled when it closes.
Delays are converted to the cluster's time unit.

State: the pending timers, the next correlation id, and counts of messages and broadcasts.
Snapshot: one JSON record holding all of it.
"""

from __future__ import annotations

import json
from typing import Any

from clusterlab.core.codec import CloseReason, ClusterTimeUnit
from clusterlab.core.service.api import (
    ClientSession,
    Cluster,
    ClusteredService,
    ClusterTerminationException,
    Role,
    SnapshotImage,
    SnapshotWriter,
)
from clusterlab.harness.services.digest import MultisetDigest

DOMAIN = b"clusterlab-echo"
_UNITS_PER_MS = {ClusterTimeUnit.MILLIS: 1, ClusterTimeUnit.MICROS: 1_000, ClusterTimeUnit.NANOS: 1_000_000}


class EchoService(ClusteredService):
    """Echo plus per-session timers."""

    # Several services per member: acts on messages addressed to it (clusterlab.core.service.addressed).
    SHARES_LOG_BY_ADDRESS = True

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        # correlation id -> (cluster_session_id, client timer id, deadline)
        self.timers: dict[int, tuple[int, str, int]] = {}
        self._timer_by_client: dict[tuple[int, str], int] = {}
        self.next_correlation_id = 1
        self.messages = 0
        self.broadcasts = 0
        self._digest = MultisetDigest(DOMAIN)
        self._digest.add(*self._meta())

    # --- state ---------------------------------------------------------------------------------------

    def _meta(self) -> tuple[str, int, int, int]:
        return ("meta", self.next_correlation_id, self.messages, self.broadcasts)

    def _update_meta(self, *, correlation: int = 0, messages: int = 0, broadcasts: int = 0) -> None:
        old = self._meta()
        self.next_correlation_id += correlation
        self.messages += messages
        self.broadcasts += broadcasts
        self._digest.replace(old, self._meta())

    def _add_timer(self, correlation_id: int, session_id: int, timer_id: str, deadline: int) -> None:
        self.timers[correlation_id] = (session_id, timer_id, deadline)
        self._timer_by_client[(session_id, timer_id)] = correlation_id
        self._digest.add("timer", correlation_id, session_id, timer_id, deadline)

    def _remove_timer(self, correlation_id: int) -> tuple[int, str, int]:
        session_id, timer_id, deadline = self.timers.pop(correlation_id)
        del self._timer_by_client[(session_id, timer_id)]
        self._digest.remove("timer", correlation_id, session_id, timer_id, deadline)
        return session_id, timer_id, deadline

    def state_digest(self) -> bytes:
        return self._digest.digest()

    def recompute_digest(self) -> bytes:
        """The digest computed from scratch over the current state."""
        items: list[tuple[Any, ...]] = [self._meta()]
        items.extend(("timer", cid, *t) for cid, t in self.timers.items())
        return MultisetDigest.of(DOMAIN, items).digest()

    def _cluster(self) -> Cluster:
        if self.cluster is None:
            raise RuntimeError("EchoService used before on_start")
        return self.cluster

    # --- ClusteredService ----------------------------------------------------------------------------

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        self.timers = {}
        self._timer_by_client = {}
        self.next_correlation_id, self.messages, self.broadcasts = 1, 0, 0
        if snapshot is not None and snapshot.records:
            state = json.loads(snapshot.records[0])
            self.next_correlation_id = int(state["next_correlation_id"])
            self.messages = int(state["messages"])
            self.broadcasts = int(state["broadcasts"])
            for cid, session_id, timer_id, deadline in state["timers"]:
                self.timers[cid] = (session_id, timer_id, deadline)
                self._timer_by_client[(session_id, timer_id)] = cid
        self._digest = MultisetDigest(DOMAIN)
        self._digest.value = int.from_bytes(self.recompute_digest(), "little")

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        pass

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        for cid in sorted(cid for cid, t in self.timers.items() if t[0] == session.id):
            self._remove_timer(cid)
            self._cluster().cancel_timer(cid)

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        if payload == b"terminate":
            raise ClusterTerminationException("terminate requested by a client")
        self._update_meta(messages=1)
        if session is None:
            self._update_meta(broadcasts=1)
            for s in self._cluster().client_sessions():
                s.offer(b"broadcast " + payload)
            return
        words = payload.split(b" ")
        command = words[0]
        if command == b"timer" and len(words) == 3 and words[2].isdigit():
            self._schedule(session, words[1].decode("utf-8", "replace"), int(words[2]), timestamp)
        elif command == b"cancel" and len(words) == 2:
            timer_id = words[1].decode("utf-8", "replace")
            cid = self._timer_by_client.get((session.id, timer_id))
            if cid is None:
                session.offer(f"cancel {timer_id} unknown".encode())
            else:
                self._remove_timer(cid)
                self._cluster().cancel_timer(cid)
                session.offer(f"cancel {timer_id} ok".encode())
        elif command == b"offer" and len(words) >= 2:
            self._cluster().offer(payload[len(b"offer ") :])
        elif payload == b"close":
            self._cluster().close_client_session(session.id)
        else:
            session.offer(payload)

    def _schedule(self, session: ClientSession, timer_id: str, delay_ms: int, timestamp: int) -> None:
        cluster = self._cluster()
        deadline = timestamp + delay_ms * _UNITS_PER_MS.get(cluster.time_unit, 1)
        cid = self._timer_by_client.get((session.id, timer_id))
        if cid is None:
            cid = self.next_correlation_id
            self._update_meta(correlation=1)
        else:
            self._remove_timer(cid)  # rescheduling replaces the deadline under the same correlation id
        self._add_timer(cid, session.id, timer_id, deadline)
        cluster.schedule_timer(cid, deadline)
        session.offer(f"timer {timer_id} scheduled {deadline}".encode())

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        if correlation_id not in self.timers:
            return  # cancelled after the TimerEvent was appended
        session_id, timer_id, _deadline = self._remove_timer(correlation_id)
        session = self._cluster().get_client_session(session_id)
        if session is not None:
            session.offer(f"timer {timer_id} fired {timestamp}".encode())

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        state = {
            "next_correlation_id": self.next_correlation_id,
            "messages": self.messages,
            "broadcasts": self.broadcasts,
            "timers": [[cid, *self.timers[cid]] for cid in sorted(self.timers)],
        }
        writer.write(json.dumps(state, sort_keys=True, separators=(",", ":")).encode("ascii"))

    def on_role_change(self, new_role: Role) -> None:
        pass

    def on_terminate(self, cluster: Cluster) -> None:
        pass
