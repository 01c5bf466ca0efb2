"""Workloads: clients driving a clustered service with a seeded mix of operations at a configured
rate while nemeses act, keeping a Jepsen-style history and checking every reply as it arrives.

What the ops are, their request bytes, how replies decode and what each reply must say belong to
the service's workload (:class:`~clusterlab.chaos.workload_api.ServiceWorkload`: the sample
services' in :mod:`clusterlab.chaos.sample_workloads`, a user's named ``package.module:factory``);
this module drives any of them: pacing, clients and sessions, timeouts, key retirement, the final
reads and the history.

The history goes to the trace's ``ops`` table: on a real cluster LocalClient records every invoke and
its ok / fail / info; in the simulator the workload writes the rows itself through the recording.

**One client** (the sequential check): the workload keeps at most one op per key outstanding, so
the ops on a key are in the log in the order they were invoked, and the service's workload knows
what every reply must say (``on_reply``). An op whose outcome is unknown (no reply in time, its
session replaced) might still be applied later, so its key is retired (``k3`` becomes ``k3.1``) and
never checked again. A reply that contradicts the model raises
:class:`~clusterlab.harness.invariants.SafetyViolation` at once.

**Concurrent clients** (``clients`` > 1, the chaos runs' default 3): each client its own session,
client ``i`` asking member ``i`` first (so followers redirect it), at most one op in flight per
client, keys shared, so ops on a key overlap. The history is judged after the final reads by the
linearizability checker (:mod:`clusterlab.chaos.linearizability`) with the workload's model, and
again from the trace in :func:`clusterlab.chaos.verdict.verify_run`.

Acknowledgement times give the client-visible failover: from a leader fault to the first op
*invoked after it* that is acknowledged (an op already in flight may be acknowledged by egress
that was on the wire when the leader died, which says nothing about failover).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clusterlab.chaos.linearizability import COUNTER_KEY, VIOLATION, Operation, check_key
from clusterlab.chaos.sample_workloads import COUNTER_MIX, KV_MIX, TIMERS_MIX, WORKLOADS
from clusterlab.chaos.target import LocalTarget, SimTarget, Target
from clusterlab.chaos.workload_api import Op, ServiceWorkload, load_workload
from clusterlab.core.client.client import CLUSTER_UNAVAILABLE
from clusterlab.core.client.errors import ConnectError
from clusterlab.core.consensus.context import SECOND
from clusterlab.core.consensus.sessions import SESSION_LIMIT
from clusterlab.harness.invariants import SafetyViolation
from clusterlab.harness.local import LocalClientTimeout, tag_client
from clusterlab.harness.sim_errors import SimTimeout

SERVICES = tuple(WORKLOADS)  # the sample services' workloads, by name
_ONE = COUNTER_KEY  # the one object of a service whose ops carry no key


def _reply_text(reply: dict[str, Any]) -> str:
    """A reply as the ops table's ``result``: compact JSON, sorted keys."""
    return json.dumps(reply, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _one(op: Op) -> str:
    return op.key if op.key is not None else _ONE


@dataclass
class Workload:
    """The op generator, the service's checks and the history every workload shares. ``service``
    names the service's workload (a sample's name or ``package.module:factory``) unless ``spec``
    gives it."""

    service: str = "kv"
    seed: int = 0
    rate: float = 100.0  # ops per second offered (target time)
    keys: int = 8
    clients: int = 1  # concurrent clients (sessions); >1: judged by the linearizability checker
    spec: ServiceWorkload | None = None
    history: list[Op] = field(default_factory=list)
    unknown: int = 0
    refused_replies: int = 0  # egress messages decode_reply refused (ValueError: not a reply)
    first_refusal: str | None = None
    _rng: random.Random = field(init=False)
    _generation: dict[int, int] = field(default_factory=dict)  # key slot -> retirements
    _busy: set[str] = field(default_factory=set)  # keys with an op outstanding
    _next_at: float = 0.0
    _final: list[str] | None = None  # keys still to read in the final phase
    _in_flight: int = 0
    _judged: bool = False  # concurrent: the history was checked for linearizability after the final reads

    def __post_init__(self) -> None:
        if self.clients < 1:
            raise ValueError(f"clients must be at least 1, not {self.clients}")
        if self.spec is None:
            self.spec = load_workload(self.service, WORKLOADS)
        limit = self.spec.max_clients
        if limit is not None and self.clients > limit:
            raise ValueError(f"the {self.service} workload runs at most {limit} client{'s' * (limit > 1)}")
        self._rng = random.Random(f"workload:{self.spec.name}:{self.seed}")

    @property
    def service_workload(self) -> ServiceWorkload:
        """The service's workload: its ops, replies and checks (``checked``: replies checked)."""
        assert self.spec is not None
        return self.spec

    # --- what a run reports
    @property
    def invoked(self) -> int:
        return len(self.history)

    @property
    def acked(self) -> int:
        return sum(1 for op in self.history if op.outcome == "ok")

    def first_ack_after(self, t: float) -> float | None:
        """When the first op invoked at or after ``t`` was acknowledged."""
        return min(
            (
                op.completed_at
                for op in self.history
                if op.outcome == "ok" and op.invoked_at >= t and op.completed_at is not None
            ),
            default=None,
        )

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in self.history:
            if op.outcome == "ok":
                out[op.f] = out.get(op.f, 0) + 1
        return out

    # --- the final reads
    def begin_final_reads(self) -> None:
        """From now on ``step`` reads every key ever used (retired ones too) once, instead of the mix;
        each read must return a value some history of the acknowledged and unknown ops allows."""
        self._final = (
            sorted({op.key for op in self.history if op.key is not None}) if self.service_workload.keyed else [_ONE]
        )

    @property
    def final_done(self) -> bool:
        return self._final is not None and not self._final and not self._busy and not self._in_flight

    @property
    def concurrent(self) -> bool:
        """Several clients: keys are shared and the sequential check is off."""
        return self.clients > 1

    # --- generating ops
    def _key(self, slot: int) -> str:
        g = self._generation.get(slot, 0)
        return f"k{slot}" if g == 0 else f"k{slot}.{g}"

    def _final_op(self, op_id: int, key: str, now: float, client: int) -> Op:
        return self.service_workload.final_read(
            op_id, None if key == _ONE and not self.service_workload.keyed else key, client, now
        )

    def _new_op(self, now: float, client: int = 0) -> Op | None:
        """The next op on a key with nothing outstanding (None if every key is busy); with concurrent
        clients, on any key (their ops overlap)."""
        if self.concurrent:
            op = self._new_concurrent_op(now, client)
            self._in_flight += op is not None
            return op
        op_id = len(self.history) + 1
        if self._final is not None:
            free = [k for k in self._final if k not in self._busy]
            if not free:
                return None
            self._final.remove(free[0])
            self._busy.add(free[0])
            op = self._final_op(op_id, free[0], now, client)
        elif not self.service_workload.keyed:
            if _ONE in self._busy:
                return None
            op = self.service_workload.next_op(self._rng, op_id, None, client, now, False)
            self._busy.add(_ONE)
        else:
            slots = [s for s in range(self.keys) if self._key(s) not in self._busy]
            if not slots:
                return None
            key = self._key(self._rng.choice(slots))
            op = self.service_workload.next_op(self._rng, op_id, key, client, now, False)
            self._busy.add(key)
        self.history.append(op)
        return op

    def _new_concurrent_op(self, now: float, client: int) -> Op | None:
        op_id = len(self.history) + 1
        if self._final is not None:
            if not self._final:
                return None
            op = self._final_op(op_id, self._final.pop(0), now, client)
        else:
            key = self._key(self._rng.randrange(self.keys)) if self.service_workload.keyed else None
            op = self.service_workload.next_op(self._rng, op_id, key, client, now, True)
        self.history.append(op)
        return op

    def _judge_when_done(self) -> None:
        """Concurrent clients: once the final reads are answered, every key's history so far is
        checked for linearizability (ops in flight count as of unknown outcome) with the workload's
        model, so a run fails with the violation at once instead of at the trace check."""
        if self._judged or not self.final_done:
            return
        self._judged = True
        if self.service_workload.model is None:
            return
        by_key: dict[str, list[Operation]] = {}
        for o in self.history:
            by_key.setdefault(_one(o), []).append(self.service_workload.operation(o))
        for key, ops in sorted(by_key.items()):
            got = check_key(key, ops, self.service_workload.model, max_states=50_000, max_seconds=5.0)
            if got.verdict == VIOLATION:
                raise SafetyViolation(
                    f"acknowledged history broken: key {key} is not linearizable across {self.clients} clients "
                    "(an acknowledged write is missing, a read is stale, or the model does not describe the service); "
                    + ("minimal sub-history: " if got.minimal_complete else "sub-history (not minimal): ")
                    + "; ".join(got.texts())
                )

    def _due(self, now: float) -> bool:
        if now < self._next_at:
            return False
        self._next_at = max(self._next_at + 1.0 / self.rate, now - 0.05)  # no burst after a stall
        return True

    def _complete(self, op: Op, reply: dict[str, Any], now: float) -> None:
        op.completed_at, op.reply = now, reply
        op.outcome = "fail" if "error" in reply else "ok"
        if self.concurrent:
            self._in_flight -= 1
            if op.final and op.outcome == "ok":
                mine = [o for o in self.history if o.key == op.key and not o.final and o is not op]
                self.service_workload.check_final_read(op, reply, mine)
            self._judge_when_done()
            if op.outcome == "ok":
                self.service_workload.on_seen(op, reply)
            return
        self._busy.discard(_one(op))
        self.service_workload.on_reply(op, reply)

    def _give_up(self, op: Op, now: float) -> None:
        """No reply: the outcome is unknown; retire the key (a late application is never checked)."""
        op.completed_at, op.outcome = now, "info"
        self.unknown += 1
        if self.concurrent:
            self._in_flight -= 1
            if op.final:
                self._final = [*(self._final or []), _one(op)]  # read it again
            self._judge_when_done()
            return  # the key stays: the checker allows for the unknown outcome
        self._busy.discard(_one(op))
        self.service_workload.on_unknown(op)
        if op.final:
            self._final = [*(self._final or []), _one(op)]  # read it again
        elif op.key is not None:
            slot = int(op.key[1:].split(".")[0])
            self._generation[slot] = self._generation.get(slot, 0) + 1

    def payload(self, op: Op) -> Any:
        """``op``'s request builder (request id -> bytes), as LocalClient takes it."""
        return lambda request_id: self.service_workload.payload(op, request_id)

    def _decode(self, payload: bytes) -> dict[str, Any] | None:
        """A reply of the service's (None if ``payload`` is none)."""
        try:
            return self.service_workload.decode_reply(payload)
        except ValueError as e:
            self.refused_replies += 1
            if self.first_refusal is None:
                self.first_refusal = f"{type(e).__name__}: {e} (payload {payload[:32]!r})"
            return None

    def refusal_note(self) -> str:
        """What decode_reply refused (empty when nothing), for the error of a run whose replies did not come:
        a workload that cannot read its service's replies acknowledges nothing."""
        if not self.refused_replies:
            return ""
        return (
            f"; the workload's decode_reply refused {self.refused_replies} egress message(s) as not a reply, "
            f"the first {self.first_refusal}"
        )

    # --- driving
    def step(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


@dataclass
class LocalWorkload(Workload):
    """One LocalClient, one op at a time (so per-key order is invocation order), paced at ``rate``.

    A workload whose service deduplicates (``resend``: kv requests carry the client's id, so the
    service applies a resend once) has the client resend an unanswered request every
    ``attempt_timeout_s`` (and reconnect after two silent attempts), which rides through a leader
    change; without such deduplication (the counter) an op is sent once.
    A request with no reply within ``request_timeout_s`` is an unknown outcome (``info``).

    A connect refused for the cluster's concurrent session limit is retried like a connect with no
    leader: a client that reconnects while its leader is gone cannot close its old session, which
    stays open on the cluster until the session timeout, so a leader change can leave the limit full
    of this workload's own stale sessions for a while. A refusal that lasts ``session_limit_wait_s``
    (None: twice the cluster's session timeout, by which every stale session has expired) is raised."""

    cluster: Any = None
    request_timeout_s: float = 3.0
    attempt_timeout_s: float = 0.5
    session_limit_wait_s: float | None = None
    _session_limit_since: float | None = None  # when connects began to be refused for the session limit
    _client: Any = None
    _clients: list[Any] = field(default_factory=list)  # concurrent: one LocalClient per client
    _flights: dict[int, _Flight] = field(default_factory=dict)  # concurrent: client -> its op in flight

    def step(self) -> None:
        if self.concurrent:
            self._step_concurrent()
            return
        now = time.monotonic()
        if not self._due(now):
            time.sleep(min(self._next_at - now, 0.005))  # pacing the offered rate, not synchronisation
            return
        if self._client is None:
            self._client = self.cluster.client(connect=False)
            self._client.resends = self.service_workload.resend
            self._client.connect_timeout_s = self.attempt_timeout_s
            self._client.attempt_timeout_s = (
                self.attempt_timeout_s if self.service_workload.resend else self.request_timeout_s
            )
        if not self._connected(self._client):
            return  # no leader to talk to (yet): nothing invoked
        op = self._new_op(time.monotonic())
        if op is None:
            return
        try:
            reply = self._client.request(self.payload(op), timeout_s=self.request_timeout_s)
        except LocalClientTimeout:
            self._give_up(op, time.monotonic())
            return
        self._complete(op, reply, time.monotonic())

    def _step_concurrent(self) -> None:
        """Every client: collect its reply, resend or give up on silence, or start its next op; one
        thread drives them all without blocking on any (``LocalClient.request``'s logic per client)."""
        if not self._clients:
            for i in range(self.clients):
                c = self.cluster.client(connect=False, first_member=i % self.cluster.member_count)
                c.resends = self.service_workload.resend
                c.connect_timeout_s = self.attempt_timeout_s
                self._clients.append(c)
        waiting = True
        for i, c in enumerate(self._clients):
            now = time.monotonic()
            flight = self._flights.get(i)
            if flight is not None:
                reply = c.take_reply(flight.rid)
                now = time.monotonic()
                if reply is not None:
                    del self._flights[i]
                    self._complete(flight.op, reply, now)
                    waiting = False
                elif now >= flight.deadline:
                    del self._flights[i]
                    self._give_up(flight.op, now)
                elif now >= flight.attempt_at and self.service_workload.resend:  # else an op is sent once
                    flight.attempts += 1
                    c.resend(flight.payload, reconnect=flight.attempts % 2 == 1)
                    flight.attempt_at = time.monotonic() + self.attempt_timeout_s
                continue
            if not self._due(now):
                continue
            if not self._connected(c):
                continue  # no leader to talk to (yet): nothing invoked
            op = self._new_op(time.monotonic(), i)
            if op is None:
                continue
            rid, payload = c.begin(self.payload(op))
            now = time.monotonic()
            self._flights[i] = _Flight(op, rid, payload, now + self.request_timeout_s, now + self.attempt_timeout_s)
            waiting = False
        if waiting:
            time.sleep(0.001)  # pacing the poll of replies, not synchronisation

    def _connected(self, c: Any) -> bool:
        """Whether ``c`` has a session, opening one if not: False while there is no leader to open it
        with, or while the cluster refuses it for its session limit (see the class docstring)."""
        if c.client.is_connected:
            return True
        try:
            c.connect(self.attempt_timeout_s)
        except LocalClientTimeout:
            return False
        except ConnectError as e:
            if SESSION_LIMIT not in e.detail:
                raise
            now = time.monotonic()
            if self._session_limit_since is None:
                self._session_limit_since = now
            wait_s = self.session_limit_wait_s
            if wait_s is None:
                wait_s = 2 * self.cluster.config.timeouts.session_timeout_ns / SECOND
            if now - self._session_limit_since > wait_s:
                raise ConnectError(
                    e.client_id,
                    e.code,
                    f"{e.detail}, still after {wait_s:g} s: the cluster's other sessions, not stale ones of "
                    f"this workload's {self.clients} client(s), fill it",
                    e.member_id,
                ) from e
            return False
        self._session_limit_since = None
        return True

    def close(self) -> None:
        now = time.monotonic()
        for _i, flight in sorted(self._flights.items()):
            self._give_up(flight.op, now)
        self._flights.clear()
        for c in self._clients:
            c.close()
        self._clients.clear()
        if self._client is not None:
            self._client.close()
            self._client = None


@dataclass
class _Flight:
    """A concurrent client's op in flight: its request id and bytes, deadlines and attempts."""

    op: Op
    rid: int
    payload: bytes
    deadline: float
    attempt_at: float
    attempts: int = 1


@dataclass
class SimWorkload(Workload):
    """Ops offered through a simulator client at ``rate`` per virtual second, pipelined (one per key),
    recorded to the run's ``ops`` table through ``recording`` (a SimRecording, or None). An op
    unanswered for ``request_timeout_s`` is an unknown outcome (it may still be in the new leader's log).
    Unless ``resends``, an op outstanding when the session moves to a new leader is unknown at once.
    With ``resends`` and a service that deduplicates (``ServiceWorkload.resend``) a request carries the
    client's id (the ``client`` field, as a real client adds it) and is resent, the same bytes, when the
    session moves and every ``attempt_timeout_s``, until answered or ``request_timeout_s``: the
    service must apply it once. With ``resends`` a client whose requests go unanswered ``silent_limit`` times
    in a row reconnects (whatever the service), as the real resending client does."""

    cluster: Any = None
    recording: Any = None
    request_timeout_s: float = 2.0  # virtual seconds without a reply: the outcome is unknown
    resends: bool = False
    attempt_timeout_s: float = 0.5
    resent: int = 0  # requests sent again (the run's count of resends)
    _attempt_at: dict[int, float] = field(default_factory=dict)  # op id -> when it is next resent
    _sender: dict[int, int] = field(default_factory=dict)  # op id -> the client that first sent it (its tag)
    silent_limit: int = 2  # with resends: requests in a row given up unanswered before the client reconnects
    _unanswered: dict[int, int] = field(default_factory=dict)  # client id -> requests given up in a row
    reconnects: int = 0
    _client: Any = None
    _seen: int = 0
    _leader_changes: int = 0
    _open: dict[int, Op] = field(default_factory=dict)  # request id (= op id) -> op

    _sim_clients: dict[int, Any] = field(default_factory=dict)  # concurrent: client -> SimClient
    _sim_seen: dict[int, int] = field(default_factory=dict)
    _sim_moves: dict[int, int] = field(default_factory=dict)
    _sim_flights: dict[int, Op] = field(default_factory=dict)

    def _rec(self, c: Any = None) -> Any:
        c = c or self._client
        return self.recording.recorder(f"client-{c.client_id}", -1, 0) if self.recording else None

    def _record(self, op: Op, kind: str, result: str | None = None, c: Any = None) -> None:
        c = c or self._client
        rec = self._rec(c)
        if rec is not None:
            value, arg = self.service_workload.record(op)
            rec.op(
                c.client_id,
                op.op_id,
                kind,
                op.f,
                op.key,
                value,
                result,
                cluster_session_id=c.client.cluster_session_id,
                arg=arg if kind == "invoke" else None,
            )

    @property
    def _resending(self) -> bool:
        return self.resends and self.service_workload.resend

    def _payload(self, op: Op, c: Any) -> bytes:
        """The request of ``op``; with resends tagged with the client that first sent it, so a request
        resent through a replacement client (its first one hung or failed) is the same request."""
        payload: bytes = self.service_workload.payload(op, op.op_id)
        if not self._resending:
            return payload
        return tag_client(payload, self._sender.setdefault(op.op_id, int(c.client_id)))

    def _send(self, op: Op, c: Any, now: float) -> None:
        """Offer ``op`` (again) through client ``c``; the next resend is due an attempt timeout later."""
        c.client.offer(self._payload(op, c), self.cluster.now_ns)
        if self._resending:
            self._attempt_at[op.op_id] = now + self.attempt_timeout_s

    def _keeps_trying(self, op: Op, c: Any, moved: bool, now: float) -> bool:
        """With resends: whether ``op`` stays outstanding (resent now if its session moved or its attempt
        timed out); without, or once ``request_timeout_s`` passed or the client failed, False."""
        if not self._resending or c.errors or now - op.invoked_at > self.request_timeout_s:
            self._attempt_at.pop(op.op_id, None)
            self._sender.pop(op.op_id, None)
            return False
        if c.client.is_connected and (moved or now >= self._attempt_at.get(op.op_id, now)):
            self._send(op, c, now)
            self.resent += 1
        return True

    def _answered(self, c: Any) -> None:
        self._unanswered[int(c.client_id)] = 0

    def _unanswered_op(self, c: Any) -> None:
        """An op of ``c`` given up with no reply (not for a leader change). With ``resends`` the client
        reconnects after ``silent_limit`` in a row, as the real resending client does: a session the
        cluster closed while its replies (the close among them) were lost never answers again."""
        n = self._unanswered.get(int(c.client_id), 0) + 1
        self._unanswered[int(c.client_id)] = n
        if self.resends and n >= self.silent_limit and not c.errors:
            c.errors.append(TimeoutError(f"no reply to {n} requests in a row: reconnecting"))

    def _note_closed(self, c: Any) -> None:
        """A client that closed by itself because the cluster was gone (its new-leader timeout ran out:
        ``close_detail`` "cluster unavailable: ...") is recorded as a ``client_closed`` harness event (read by
        the check ``clients_close_when_cluster_gone``); a session the cluster closed is not recorded."""
        if c.client.is_closed and not c.errors and c.client.close_detail.startswith(CLUSTER_UNAVAILABLE):
            self.cluster.event(
                "client_closed",
                -1,
                client_id=int(c.client_id),
                reason=c.client.close_detail,
                new_leader_timeout_ns=int(c.client.new_leader_timeout_ns),
            )

    def _ensure_client(self, now: float) -> Any:
        c = self._client
        if c is None or c.client.is_closed or c.errors:
            if c is not None:
                self._note_closed(c)
                self._drain(now)
                for op in sorted(self._open.values(), key=lambda o: o.op_id):  # the session is gone
                    self._record(op, "info")
                    self._give_up(op, now)
                self._open.clear()
                self.reconnects += 1
            c = self.cluster.add_client()
            c.client.connect(self.cluster.now_ns)
            self._client, self._seen, self._leader_changes = c, 0, 0
        return c

    def _drain(self, now: float) -> None:
        c = self._client
        for msg in c.received[self._seen :]:
            reply = self._decode(msg.payload)
            if reply is None:
                continue
            op_id = reply.get("id")
            op = self._open.pop(op_id, None) if isinstance(op_id, int) else None
            if op is None:
                continue
            self._sender.pop(op.op_id, None)
            self._answered(c)
            self._record(op, "fail" if "error" in reply else "ok", _reply_text(reply))
            self._complete(op, reply, now)
        self._seen = len(c.received)

    def _step_concurrent(self) -> None:
        """Each client: its replies, its op given up when unanswered or its session moved, its next op."""
        now = self.cluster.now_ns / SECOND
        for i in range(self.clients):
            c = self._sim_clients.get(i)
            if c is None or c.client.is_closed or c.errors:
                if c is not None:
                    self._note_closed(c)
                    self.reconnects += 1
                c = self.cluster.add_client(first_member=i % self.cluster.member_count)
                c.client.connect(self.cluster.now_ns)
                self._sim_clients[i], self._sim_seen[i], self._sim_moves[i] = c, 0, 0
            op: Op | None = self._sim_flights.get(i)
            for msg in c.received[self._sim_seen[i] :]:
                reply = self._decode(msg.payload)
                if reply is None:
                    continue
                if op is not None and reply.get("id") == op.op_id:
                    del self._sim_flights[i]
                    self._sender.pop(op.op_id, None)
                    self._answered(c)
                    self._record(op, "fail" if "error" in reply else "ok", _reply_text(reply), c)
                    self._complete(op, reply, now)
                    op = None
            self._sim_seen[i] = len(c.received)
            moved = c.client.leader_changes != self._sim_moves[i]
            self._sim_moves[i] = c.client.leader_changes
            if op is not None and self._keeps_trying(op, c, moved, now):
                continue
            if op is not None and (moved or c.errors or now - op.invoked_at > self.request_timeout_s):
                del self._sim_flights[i]
                self._record(op, "info", None, c)
                self._give_up(op, now)
                if not (moved or c.errors):
                    self._unanswered_op(c)
                op = None
            if op is not None or not c.client.is_connected or not self._due(now):
                continue
            op = self._new_op(now, i)
            if op is None:
                continue
            self._sim_flights[i] = op
            self._record(op, "invoke", None, c)
            self._send(op, c, now)

    def step(self) -> None:
        if self.concurrent:
            self._step_concurrent()
            return
        now = self.cluster.now_ns / SECOND
        c = self._ensure_client(now)
        self._drain(now)
        moved = c.client.leader_changes != self._leader_changes  # NewLeaderEvent: sent to the old leader
        self._leader_changes = c.client.leader_changes
        for op in sorted(self._open.values(), key=lambda o: o.op_id):
            if self._keeps_trying(op, c, moved, now) or not (moved or now - op.invoked_at > self.request_timeout_s):
                continue
            del self._open[op.op_id]  # sent to a leader that died, or lost: it frees its key
            self._record(op, "info")
            self._give_up(op, now)
            if not moved:
                self._unanswered_op(c)
        if not c.client.is_connected:
            return
        while self._due(now):
            new = self._new_op(now)
            if new is None:
                return
            self._open[new.op_id] = new
            self._record(new, "invoke")
            self._send(new, c, now)

    def step_until(self, done: Callable[[], bool], timeout_ns: int, what: str) -> None:
        """Run the simulator and this workload (a step every 10 ms of virtual time) until ``done()``;
        SimTimeout, with the seed, when it does not hold within ``timeout_ns``."""
        c = self.cluster
        end = c.now_ns + timeout_ns
        while not done():
            if c.now_ns >= end:
                raise SimTimeout(
                    f"{what} not reached within {timeout_ns / SECOND:.3f}s simulated; {c.status_line()}; "
                    f"seed={c.seed} re-run: {c.repro()}"
                )
            c.run_for(SECOND // 100)
            self.step()

    def read_back(self, timeout_ns: int) -> None:
        """The final reads in the simulator: every key read once more within ``timeout_ns``, each answer
        checked (an acknowledged write that is gone raises SafetyViolation)."""
        self.begin_final_reads()
        self.step_until(lambda: self.final_done, timeout_ns, "every key read back")

    def close(self) -> None:
        for i, op in sorted(self._sim_flights.items()):
            self._record(op, "info", None, self._sim_clients[i])
            self._give_up(op, self.cluster.now_ns / SECOND)
        self._sim_flights.clear()
        if self._client is not None:
            now = self.cluster.now_ns / SECOND
            self._drain(now)
            for op in sorted(self._open.values(), key=lambda o: o.op_id):
                self._record(op, "info")
                self._give_up(op, now)
            self._open.clear()


def make_workload(
    target: Target,
    service: str,
    seed: int,
    rate: float | None = None,
    recording: Any = None,
    clients: int = 1,
    workload: str | None = None,
    resends: bool = False,
) -> Workload:
    """The workload for ``target`` (a chaos Target): LocalWorkload or SimWorkload, with ``clients``
    concurrent clients; ``workload`` names the service's workload (default: the sample service's,
    by ``service``), a sample's name or ``package.module:factory``. ``resends``: simulator clients
    resend unanswered requests of a deduplicating service (real clients always do)."""
    name = workload or service
    if isinstance(target, SimTarget):
        return SimWorkload(
            service=name,
            seed=seed,
            rate=rate or 100.0,
            cluster=target.cluster,
            recording=recording,
            clients=clients,
            resends=resends,
        )
    if isinstance(target, LocalTarget):
        return LocalWorkload(service=name, seed=seed, rate=rate or 200.0, cluster=target.cluster, clients=clients)
    raise TypeError(f"no workload driver for a {type(target).__name__}")


__all__ = [
    "COUNTER_MIX",
    "KV_MIX",
    "SERVICES",
    "TIMERS_MIX",
    "LocalWorkload",
    "Op",
    "ServiceWorkload",
    "SimWorkload",
    "Workload",
    "make_workload",
]
