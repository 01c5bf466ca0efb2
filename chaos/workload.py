"""Workloads: a client driving a sample service with a seeded mix of operations at a configured rate
while nemeses act, keeping a Jepsen-style history and checking every reply as it arrives.

* kv: ``put`` / ``get`` / ``cas`` / ``delete`` over a small key space (weights in ``KV_MIX``);
* counter: ``add`` / ``get``.

The history goes to the trace's ``ops`` table: on a real cluster LocalClient records every invoke and
its ok / fail / info; in the simulator the workload writes the rows itself through the recording.

**The model check** (the online checker's "an acknowledged write missing"): the service applies
committed log entries in log order and every reply reports the state the op saw (kv: a put or
delete returns the previous value, a get the current one, a cas the value after it; counter: the
value and revision after it). The workload keeps at most one op per key outstanding, so the ops
on a key are in the log in the order they were invoked, and it knows what every reply must say.
An op whose outcome is unknown (no reply in time, its session replaced) might still be applied
later, so its key is retired (``k3`` becomes ``k3.1``) and never checked again. A reply that
contradicts the model raises :class:`~clusterlab.harness.invariants.SafetyViolation` at once.

**Concurrent clients** (``clients`` > 1, the chaos runs' default 3): each client its own session,
client ``i`` asking member ``i`` first (so followers redirect it), at most one op in flight per
client, keys shared, so ops on a key overlap. The sequential model above no longer applies (it
assumes one op per key at a time); the history is judged after the run by the linearizability
checker (:mod:`clusterlab.chaos.linearizability`, in :func:`clusterlab.chaos.verify.verify_run`).

Acknowledgement times give the client-visible failover: from a leader fault to the first op
*invoked after it* that is acknowledged (an op already in flight may be acknowledged by egress
that was on the wire when the leader died, which says nothing about failover).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, NoReturn

from clusterlab.chaos.linearizability import (
    COUNTER_KEY,
    FAIL,
    INFO,
    OK,
    VIOLATION,
    Operation,
    check_key,
)
from clusterlab.core.consensus.context import SECOND
from clusterlab.harness.invariants import SafetyViolation
from clusterlab.harness.local import LocalClientTimeout
from clusterlab.harness.services import counter, kv

KV_MIX: dict[str, float] = {"put": 0.45, "get": 0.25, "cas": 0.2, "delete": 0.1}
COUNTER_MIX: dict[str, float] = {"add": 0.7, "get": 0.3}
# The ``timers`` workload: the counter service with alarms set and cancelled, service-originated
# ticks and sessions the service closes (harness/services/counter.py); checked like the counter.
TIMERS_MIX: dict[str, float] = {"add": 0.35, "get": 0.1, "alarm": 0.3, "disarm": 0.12, "tick": 0.1, "close": 0.03}
SERVICES = ("kv", "counter", "timers")
_UNKNOWN = object()  # the model does not know a key's value (never happens for a fresh key)


@dataclass
class Op:
    """One operation of the history (``outcome``: None while outstanding, then ok / fail / info)."""

    op_id: int
    f: str
    key: str | None
    value: str | None
    invoked_at: float
    client: int = 0  # which of the workload's clients runs it
    expected: str | None = None  # cas: the value expected
    delta: int = 0  # counter add
    timer: int = 0  # timers: the alarm set or cancelled
    delay_ms: int = 0  # timers: an alarm's delay
    final: bool = False  # a read of the final phase (checked against every possible outcome)
    completed_at: float | None = None
    outcome: str | None = None
    reply: dict[str, Any] | None = None

    def payload(self, request_id: int) -> bytes:
        if self.f == "put":
            return kv.put(request_id, str(self.key), str(self.value))
        if self.f == "cas":
            return kv.cas(request_id, str(self.key), self.expected, str(self.value))
        if self.f == "delete":
            return kv.delete(request_id, str(self.key))
        if self.f == "add":
            return counter.add(request_id, self.delta)
        if self.f == "alarm":
            return counter.alarm(request_id, self.timer, self.delay_ms)
        if self.f == "disarm":
            return counter.disarm(request_id, self.timer)
        if self.f == "tick":
            return counter.tick(request_id)
        if self.f == "close":
            return counter.close(request_id)
        return kv.get(request_id, str(self.key)) if self.key is not None else counter.get(request_id)

    def describe(self) -> str:
        what = {
            "put": f"{self.key}={self.value}",
            "cas": f"{self.key} {self.expected}->{self.value}",
            "add": f"+{self.delta}",
        }.get(self.f, self.key or "")
        return f"op {self.op_id} {self.f} {what}".rstrip()


class Model:
    """What every reply must say, given the acknowledged ops so far (see the module docstring)."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.values: dict[str, Any] = {}  # kv: key -> value (None: absent)
        # kv: key -> every value the key may hold now (the known one, or any an unknown op may have left)
        self.possible: dict[str, set[str | None]] = {}
        self.counter: tuple[int, int] | None = (0, 0)  # (value, revision); None once an add is unknown
        self.acked_adds = [0, 0]  # (sum of deltas, count) of acknowledged adds
        self.unknown_adds = [0, 0]  # the same for adds of unknown outcome
        self.last_revision = -1
        self.checked = 0

    def _fail(self, op: Op, what: str) -> NoReturn:
        raise SafetyViolation(f"acknowledged history broken: {op.describe()} got {op.reply}: {what}")

    def on_reply(self, op: Op, reply: dict[str, Any]) -> None:
        if "error" in reply:
            self._fail(op, "the service refused a well-formed request")
        if self.service == "counter":
            self._on_counter(op, reply)
            return
        assert op.key is not None
        before = self.values.get(op.key)
        known = before is not _UNKNOWN
        got = reply.get("value")
        if op.final:
            possible = self.possible.get(op.key, {None})
            if got not in possible:
                self._fail(op, f"final read: an acknowledged write is missing (possible: {sorted(map(str, possible))})")
            self.checked += 1
            return
        if op.f == "put":
            if known and got != before:
                self._fail(op, f"previous value should be {before!r}")
            self.values[op.key] = op.value
        elif op.f == "get":
            if known and (got != before or bool(reply.get("ok")) != (before is not None)):
                self._fail(op, f"the value should be {before!r}")
            self.values[op.key] = got
        elif op.f == "cas":
            if known:
                swapped = before == op.expected
                if bool(reply.get("ok")) != swapped or got != (op.value if swapped else before):
                    self._fail(op, f"the value before was {before!r}")
            self.values[op.key] = got
        elif op.f == "delete":
            if known and (got != before or bool(reply.get("ok")) != (before is not None)):
                self._fail(op, f"previous value should be {before!r}")
            self.values[op.key] = None
        self.possible[op.key] = {self.values[op.key]}
        self.checked += known

    def _on_counter(self, op: Op, reply: dict[str, Any]) -> None:
        value, revision = reply.get("value"), reply.get("revision")
        if not isinstance(value, int) or not isinstance(revision, int):
            self._fail(op, "no value/revision")
        if op.f == "add":
            self.acked_adds[0] += op.delta
            self.acked_adds[1] += 1
        if op.final:  # every acknowledged add counted, each unknown one at most once
            lo, n = self.acked_adds
            if not (lo <= value <= lo + self.unknown_adds[0] and n <= revision <= n + self.unknown_adds[1]):
                self._fail(
                    op,
                    f"final read: acknowledged adds sum to {lo} over {n} adds, with "
                    f"{self.unknown_adds[1]} adds ({self.unknown_adds[0]}) of unknown outcome",
                )
            self.checked += 1
            return
        if revision < self.last_revision or (op.f == "add" and revision == self.last_revision):
            self._fail(op, f"the revision went back (or an add did not count) after {self.last_revision}")
        self.last_revision = revision
        if self.counter is not None:
            expect = (self.counter[0] + op.delta, self.counter[1] + 1) if op.f == "add" else self.counter
            if (value, revision) != expect:
                self._fail(op, f"(value, revision) should be {expect}")
            self.checked += 1
            self.counter = (value, revision)

    def on_unknown(self, op: Op) -> None:
        """An op that may or may not be applied (now or later)."""
        if self.service == "counter":
            if op.f == "add":
                self.counter = None  # exact values are unknowable from here on; revisions still checked
                self.unknown_adds[0] += op.delta
                self.unknown_adds[1] += 1
        elif op.key is not None:
            self.values[op.key] = _UNKNOWN
            possible = self.possible.setdefault(op.key, {None})
            if op.f in ("put", "cas"):
                possible.add(op.value)
            elif op.f == "delete":
                possible.add(None)


@dataclass
class Workload:
    """The op generator, the model and the history every workload shares."""

    service: str = "kv"
    seed: int = 0
    rate: float = 100.0  # ops per second offered (target time)
    keys: int = 8
    clients: int = 1  # concurrent clients (sessions); >1: judged by the linearizability checker
    history: list[Op] = field(default_factory=list)
    unknown: int = 0
    model: Model = field(init=False)
    _rng: random.Random = field(init=False)
    _generation: dict[int, int] = field(default_factory=dict)  # key slot -> retirements
    _busy: set[str] = field(default_factory=set)  # keys with an op outstanding
    _next_at: float = 0.0
    _final: list[str] | None = None  # keys still to read in the final phase
    _in_flight: int = 0
    _last_seen: dict[str, str | None] = field(default_factory=dict)  # concurrent: a key's last value seen
    _judged: bool = False  # concurrent: the history was checked for linearizability after the final reads
    _mix: dict[str, float] = field(init=False, default_factory=dict)  # the counter's op mix

    def __post_init__(self) -> None:
        if self.service not in SERVICES:
            raise ValueError(f"no workload for service {self.service!r}; known: {', '.join(SERVICES)}")
        if self.clients < 1:
            raise ValueError(f"clients must be at least 1, not {self.clients}")
        self._mix = COUNTER_MIX
        if self.service == "timers":  # the counter's workload and model, with the timer ops mixed in
            if self.clients > 1:
                raise ValueError("the timers workload runs one client")
            self.service, self._mix = "counter", TIMERS_MIX
        self.model = Model(self.service)
        self._rng = random.Random(f"workload:{self.service}:{self.seed}")

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
            ["counter"] if self.service == "counter" else sorted({op.key for op in self.history if op.key is not None})
        )

    @property
    def final_done(self) -> bool:
        return self._final is not None and not self._final and not self._busy and not self._in_flight

    @property
    def concurrent(self) -> bool:
        """Several clients: keys are shared and the sequential model is off."""
        return self.clients > 1

    # --- generating ops
    def _key(self, slot: int) -> str:
        g = self._generation.get(slot, 0)
        return f"k{slot}" if g == 0 else f"k{slot}.{g}"

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
            op = Op(op_id, "get", None if self.service == "counter" else free[0], None, now, final=True)
            self.history.append(op)
            return op
        if self.service == "counter":
            if "counter" in self._busy:
                return None
            f = self._rng.choices(list(self._mix), weights=list(self._mix.values()))[0]
            op = Op(op_id, f, None, None, now, delta=self._rng.randrange(1, 10) if f == "add" else 0)
            if f in ("alarm", "disarm"):
                op.timer, op.delay_ms = self._rng.randrange(4), self._rng.choice((20, 60, 150, 400))
            self._busy.add("counter")
        else:
            slots = [s for s in range(self.keys) if self._key(s) not in self._busy]
            if not slots:
                return None
            key = self._key(self._rng.choice(slots))
            f = self._rng.choices(list(KV_MIX), weights=list(KV_MIX.values()))[0]
            value = f"v{op_id}" if f in ("put", "cas") else None
            expected = None
            if f == "cas":
                known = self.model.values.get(key)
                expected = known if isinstance(known, str) and self._rng.random() < 0.8 else f"v{op_id - 1}"
            op = Op(op_id, f, key, value, now, expected=expected)
            self._busy.add(key)
        self.history.append(op)
        return op

    def _new_concurrent_op(self, now: float, client: int) -> Op | None:
        op_id = len(self.history) + 1
        if self._final is not None:
            if not self._final:
                return None
            key = self._final.pop(0)
            op = Op(op_id, "get", None if self.service == "counter" else key, None, now, client, final=True)
        elif self.service == "counter":
            f = self._rng.choices(list(COUNTER_MIX), weights=list(COUNTER_MIX.values()))[0]
            op = Op(op_id, f, None, None, now, client, delta=self._rng.randrange(1, 10) if f == "add" else 0)
        else:
            key = self._key(self._rng.randrange(self.keys))
            f = self._rng.choices(list(KV_MIX), weights=list(KV_MIX.values()))[0]
            value = f"v{op_id}" if f in ("put", "cas") else None  # unique: the checker needs that
            expected = None
            if f == "cas":
                seen = self._last_seen.get(key)
                expected = seen if self._rng.random() < 0.8 else f"v{op_id - 1}"
            op = Op(op_id, f, key, value, now, client, expected=expected)
        self.history.append(op)
        return op

    def _judge_when_done(self) -> None:
        """Concurrent clients: once the final reads are answered, every key's history so far is
        checked for linearizability (ops in flight count as of unknown outcome), so a run fails with
        the violation at once instead of at the trace check."""
        if self._judged or not self.final_done:
            return
        self._judged = True
        by_key: dict[str, list[Operation]] = {}
        for o in self.history:
            by_key.setdefault(o.key or COUNTER_KEY, []).append(_operation(o))
        for key, ops in sorted(by_key.items()):
            got = check_key(key, ops, max_states=50_000, max_seconds=5.0)
            if got.verdict == VIOLATION:
                raise SafetyViolation(
                    f"acknowledged history broken: key {key} is not linearizable across {self.clients} clients "
                    "(an acknowledged write is missing, or a read is stale); "
                    + ("minimal sub-history: " if got.minimal_complete else "sub-history (not minimal): ")
                    + "; ".join(got.texts())
                )

    def _check_final_read(self, op: Op, reply: dict[str, Any]) -> None:
        """Concurrent clients, a final read: it must return what some write could have left last (one
        no acknowledged write was invoked after the completion of; unknown and in-flight ones may land
        any time), the counter a sum of every acknowledged add and some of the unknown ones. The same
        online "acknowledged write is missing" as the sequential model's; the linearizability checker
        judges the whole history after the run."""
        never = float("inf")
        mine = [o for o in self.history if o.key == op.key and not o.final and o is not op]
        got = reply.get("value")
        if self.service == "counter":
            adds = [o for o in mine if o.f == "add"]
            lo = sum(o.delta for o in adds if o.outcome == "ok")
            hi = lo + sum(o.delta for o in adds if o.outcome in (None, "info"))
            if not isinstance(got, int) or not lo <= got <= hi:
                self.model._fail(op, f"final read: an acknowledged write is missing (possible: {lo}..{hi})")
            self.model.checked += 1
            return
        writes = [
            o
            for o in mine
            if o.outcome in (None, "info", "ok")
            and (o.f in ("put", "delete") or (o.f == "cas" and (o.outcome != "ok" or (o.reply or {}).get("ok"))))
        ]
        acked = [o.invoked_at for o in writes if o.outcome == "ok"]
        possible: set[str | None] = set() if acked else {None}
        for o in writes:
            done = o.completed_at if o.outcome == "ok" and o.completed_at is not None else never
            if not any(t > done for t in acked):
                possible.add(None if o.f == "delete" else o.value)
        if got not in possible:
            self.model._fail(
                op, f"final read: an acknowledged write is missing (possible: {sorted(map(str, possible))})"
            )
        self.model.checked += 1

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
                self._check_final_read(op, reply)
            self._judge_when_done()
            if op.key is not None and op.outcome == "ok":
                self._last_seen[op.key] = (
                    None if op.f == "delete" else op.value if op.f == "put" else reply.get("value")
                )
            return
        self._busy.discard(op.key or "counter")
        self.model.on_reply(op, reply)

    def _give_up(self, op: Op, now: float) -> None:
        """No reply: the outcome is unknown; retire the key (a late application is never checked)."""
        op.completed_at, op.outcome = now, "info"
        self.unknown += 1
        if self.concurrent:
            self._in_flight -= 1
            if op.final:
                self._final = [*(self._final or []), op.key or "counter"]  # read it again
            self._judge_when_done()
            return  # the key stays: the checker allows for the unknown outcome
        self._busy.discard(op.key or "counter")
        self.model.on_unknown(op)
        if op.final:
            self._final = [*(self._final or []), op.key or "counter"]  # read it again
        elif op.key is not None:
            slot = int(op.key[1:].split(".")[0])
            self._generation[slot] = self._generation.get(slot, 0) + 1

    # --- driving
    def step(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


@dataclass
class LocalWorkload(Workload):
    """One LocalClient, one op at a time (so per-key order is invocation order), paced at ``rate``.

    kv requests carry the client's id, so the service applies a resend once: the client resends an
    unanswered request every ``attempt_timeout_s`` (and reconnects after two silent attempts), which
    rides through a leader change. The counter has no such deduplication, so its ops are sent once.
    A request with no reply within ``request_timeout_s`` is an unknown outcome (``info``)."""

    cluster: Any = None
    request_timeout_s: float = 3.0
    attempt_timeout_s: float = 0.5
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
            self._client.connect_timeout_s = self.attempt_timeout_s
            self._client.attempt_timeout_s = self.attempt_timeout_s if self.service == "kv" else self.request_timeout_s
        if not self._client.client.is_connected:
            try:
                self._client.connect(self.attempt_timeout_s)
            except LocalClientTimeout:
                return  # no leader to talk to (yet): nothing invoked
        op = self._new_op(time.monotonic())
        if op is None:
            return
        try:
            reply = self._client.request(op.payload, timeout_s=self.request_timeout_s)
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
                elif now >= flight.attempt_at and self.service == "kv":  # a counter op is sent once
                    flight.attempts += 1
                    c.resend(flight.payload, reconnect=flight.attempts % 2 == 1)
                    flight.attempt_at = time.monotonic() + self.attempt_timeout_s
                continue
            if not self._due(now):
                continue
            if not c.client.is_connected:
                try:
                    c.connect(self.attempt_timeout_s)
                except LocalClientTimeout:
                    continue  # no leader to talk to (yet): nothing invoked
            op = self._new_op(time.monotonic(), i)
            if op is None:
                continue
            rid, payload = c.begin(op.payload)
            now = time.monotonic()
            self._flights[i] = _Flight(op, rid, payload, now + self.request_timeout_s, now + self.attempt_timeout_s)
            waiting = False
        if waiting:
            time.sleep(0.001)  # pacing the poll of replies, not synchronisation

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


def _operation(op: Op) -> Operation:
    """A workload op as the linearizability checker sees it (in flight: outcome unknown)."""
    ok = op.outcome == "ok"
    status = {"ok": OK, "fail": FAIL}.get(op.outcome or "", INFO)
    return Operation(
        client=op.client,
        op_id=op.op_id,
        f=op.f,
        key=op.key,
        invoke=round(op.invoked_at * 1e9),
        complete=round(op.completed_at * 1e9) if ok and op.completed_at is not None else None,
        status=status,
        value=op.delta if op.f == "add" else op.value,
        arg=op.expected if op.f == "cas" else None,
        result=(op.reply or {}).get("value") if ok else None,
    )


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
    recorded to the run's ``ops`` table through ``recording`` (a SimRecording, or None). Simulator
    clients never resend: an op unanswered for ``request_timeout_s``, or outstanding when the session
    moves to a new leader, is an unknown outcome (it may still be in the new leader's log)."""

    cluster: Any = None
    recording: Any = None
    request_timeout_s: float = 2.0  # virtual seconds without a reply: the outcome is unknown
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
            value = op.value if op.f != "add" else None
            arg = json.dumps(op.expected) if op.f == "cas" else str(op.delta) if op.f == "add" else None
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

    def _ensure_client(self, now: float) -> Any:
        c = self._client
        if c is None or c.client.is_closed or c.errors:
            if c is not None:
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
        decode = kv.decode_reply if self.service == "kv" else counter.decode_reply
        for msg in c.received[self._seen :]:
            try:
                reply = decode(msg.payload)
            except ValueError:
                continue
            op_id = reply.get("id")
            op = self._open.pop(op_id, None) if isinstance(op_id, int) else None
            if op is None:
                continue
            self._record(op, "fail" if "error" in reply else "ok", kv._dumps(reply).decode())
            self._complete(op, reply, now)
        self._seen = len(c.received)

    def _step_concurrent(self) -> None:
        """Each client: its replies, its op given up when unanswered or its session moved, its next op."""
        now = self.cluster.now_ns / SECOND
        decode = kv.decode_reply if self.service == "kv" else counter.decode_reply
        for i in range(self.clients):
            c = self._sim_clients.get(i)
            if c is None or c.client.is_closed or c.errors:
                if c is not None:
                    self.reconnects += 1
                c = self.cluster.add_client(first_member=i % self.cluster.member_count)
                c.client.connect(self.cluster.now_ns)
                self._sim_clients[i], self._sim_seen[i], self._sim_moves[i] = c, 0, 0
            op: Op | None = self._sim_flights.get(i)
            for msg in c.received[self._sim_seen[i] :]:
                try:
                    reply = decode(msg.payload)
                except ValueError:
                    continue
                if op is not None and reply.get("id") == op.op_id:
                    del self._sim_flights[i]
                    self._record(op, "fail" if "error" in reply else "ok", kv._dumps(reply).decode(), c)
                    self._complete(op, reply, now)
                    op = None
            self._sim_seen[i] = len(c.received)
            moved = c.client.leader_changes != self._sim_moves[i]
            self._sim_moves[i] = c.client.leader_changes
            if op is not None and (moved or c.errors or now - op.invoked_at > self.request_timeout_s):
                del self._sim_flights[i]
                self._record(op, "info", None, c)
                self._give_up(op, now)
                op = None
            if op is not None or not c.client.is_connected or not self._due(now):
                continue
            op = self._new_op(now, i)
            if op is None:
                continue
            self._sim_flights[i] = op
            self._record(op, "invoke", None, c)
            c.client.offer(op.payload(op.op_id), self.cluster.now_ns)

    def step(self) -> None:
        if self.concurrent:
            self._step_concurrent()
            return
        now = self.cluster.now_ns / SECOND
        c = self._ensure_client(now)
        self._drain(now)
        moved = c.client.leader_changes != self._leader_changes  # NewLeaderEvent: sent to the old leader
        self._leader_changes = c.client.leader_changes
        for op in [o for o in self._open.values() if moved or now - o.invoked_at > self.request_timeout_s]:
            del self._open[op.op_id]  # sent to a leader that died, or lost: it frees its key
            self._record(op, "info")
            self._give_up(op, now)
        if not c.client.is_connected:
            return
        while self._due(now):
            new = self._new_op(now)
            if new is None:
                return
            self._open[new.op_id] = new
            self._record(new, "invoke")
            c.client.offer(new.payload(new.op_id), self.cluster.now_ns)

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
    target: Any, service: str, seed: int, rate: float | None = None, recording: Any = None, clients: int = 1
) -> Workload:
    """The workload for ``target`` (a chaos Target): LocalWorkload or SimWorkload, with ``clients``
    concurrent clients."""
    if target.kind == "sim":
        return SimWorkload(
            service=service,
            seed=seed,
            rate=rate or 100.0,
            cluster=target.cluster,
            recording=recording,
            clients=clients,
        )
    return LocalWorkload(service=service, seed=seed, rate=rate or 200.0, cluster=target.cluster, clients=clients)


__all__ = [
    "COUNTER_MIX",
    "KV_MIX",
    "SERVICES",
    "LocalWorkload",
    "Model",
    "Op",
    "SimWorkload",
    "Workload",
    "make_workload",
]
