"""The workloads of the sample services (clusterlab.harness.services), written against the workload
interface (:mod:`clusterlab.chaos.workload_api`) like any user's:

* ``kv``: ``put`` / ``get`` / ``cas`` / ``delete`` over a small key space (weights in ``KV_MIX``);
  the service deduplicates requests, so unanswered ones are resent;
* ``counter``: ``add`` / ``get`` on one object, each sent once;
* ``timers``: the counter with alarms set and cancelled, service-originated ticks and sessions the
  service closes (harness/services/counter.py), one client, checked like the counter.

**The sequential check** (one client): the service applies committed entries in log order and every
reply reports the state the op saw (kv: a put or delete returns the previous value, a get the current
one, a cas the value after it; counter: the value and revision after it). With at most one op per key
outstanding the workload knows what every reply must say. An op of unknown outcome might still be
applied later: a kv key's value becomes unknown (the driver retires the key), the counter's exact
value unknowable (its revisions still checked). Final reads must return a value some order of the
acknowledged and unknown ops allows.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from clusterlab.chaos.linearizability import MODELS, Operation
from clusterlab.chaos.workload_api import Op, ServiceWorkload, check_not_refused, violation
from clusterlab.harness.services import counter, kv

KV_MIX: dict[str, float] = {"put": 0.45, "get": 0.25, "cas": 0.2, "delete": 0.1}
COUNTER_MIX: dict[str, float] = {"add": 0.7, "get": 0.3}
TIMERS_MIX: dict[str, float] = {"add": 0.35, "get": 0.1, "alarm": 0.3, "disarm": 0.12, "tick": 0.1, "close": 0.03}
_UNKNOWN = object()  # the model does not know a key's value (never happens for a fresh key)


def _pick(rng: random.Random, mix: dict[str, float]) -> str:
    return rng.choices(list(mix), weights=list(mix.values()))[0]


class KvWorkload(ServiceWorkload):
    """The key-value service's workload (see the module docstring)."""

    name = "kv"
    resend = True
    model = MODELS["kv"]

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, Any] = {}  # key -> value (None: absent; _UNKNOWN after an unknown op)
        # key -> every value the key may hold now (the known one, or any an unknown op may have left)
        self.possible: dict[str, set[str | None]] = {}
        self._last_seen: dict[str, str | None] = {}  # concurrent: a key's last value seen

    def next_op(self, rng: random.Random, op_id: int, key: str | None, client: int, now: float, concurrent: bool) -> Op:
        f = _pick(rng, KV_MIX)
        value = f"v{op_id}" if f in ("put", "cas") else None  # unique: the linearizability checker needs that
        expected = None
        if f == "cas" and concurrent:
            seen = self._last_seen.get(str(key))
            expected = seen if rng.random() < 0.8 else f"v{op_id - 1}"
        elif f == "cas":
            known = self.values.get(str(key))
            expected = known if isinstance(known, str) and rng.random() < 0.8 else f"v{op_id - 1}"
        return Op(op_id, f, key, value, now, client, expected=expected)

    def payload(self, op: Op, request_id: int) -> bytes:
        key = str(op.key)
        if op.f == "put":
            return kv.put(request_id, key, str(op.value))
        if op.f == "cas":
            return kv.cas(request_id, key, op.expected, str(op.value))
        if op.f == "delete":
            return kv.delete(request_id, key)
        return kv.get(request_id, key)

    def decode_reply(self, payload: bytes) -> dict[str, Any]:
        return kv.decode_reply(payload)

    def on_reply(self, op: Op, reply: dict[str, Any]) -> None:
        check_not_refused(op, reply)
        assert op.key is not None
        before = self.values.get(op.key)
        known = before is not _UNKNOWN
        got = reply.get("value")
        if op.final:
            possible = self.possible.get(op.key, {None})
            if got not in possible:
                violation(op, f"final read: an acknowledged write is missing (possible: {sorted(map(str, possible))})")
            self.checked += 1
            return
        if op.f == "put":
            if known and got != before:
                violation(op, f"previous value should be {before!r}")
            self.values[op.key] = op.value
        elif op.f == "cas":
            if known:
                swapped = before == op.expected
                if bool(reply.get("ok")) != swapped or got != (op.value if swapped else before):
                    violation(op, f"the value before was {before!r}")
            self.values[op.key] = got
        else:  # get, delete: the value before, ok iff the key existed
            if known and (got != before or bool(reply.get("ok")) != (before is not None)):
                violation(op, f"{'previous value' if op.f == 'delete' else 'the value'} should be {before!r}")
            self.values[op.key] = None if op.f == "delete" else got
        self.possible[op.key] = {self.values[op.key]}
        self.checked += known

    def on_unknown(self, op: Op) -> None:
        if op.key is None:
            return
        self.values[op.key] = _UNKNOWN
        possible = self.possible.setdefault(op.key, {None})
        if op.f in ("put", "cas"):
            possible.add(op.value)
        elif op.f == "delete":
            possible.add(None)

    def on_seen(self, op: Op, reply: dict[str, Any]) -> None:
        if op.key is not None:
            self._last_seen[op.key] = None if op.f == "delete" else op.value if op.f == "put" else reply.get("value")

    def check_final_read(self, op: Op, reply: dict[str, Any], ops: Sequence[Op]) -> None:
        """What some write could have left last: one no acknowledged write was invoked after the
        completion of (unknown and in-flight ones may land any time), or absent if none was acknowledged."""
        never = float("inf")
        writes = [
            o
            for o in ops
            if o.outcome in (None, "info", "ok")
            and (o.f in ("put", "delete") or (o.f == "cas" and (o.outcome != "ok" or (o.reply or {}).get("ok"))))
        ]
        acked = [o.invoked_at for o in writes if o.outcome == "ok"]
        possible: set[str | None] = set() if acked else {None}
        for o in writes:
            done = o.completed_at if o.outcome == "ok" and o.completed_at is not None else never
            if not any(t > done for t in acked):
                possible.add(None if o.f == "delete" else o.value)
        if reply.get("value") not in possible:
            violation(op, f"final read: an acknowledged write is missing (possible: {sorted(map(str, possible))})")
        self.checked += 1

    def record(self, op: Op) -> tuple[str | None, str | None]:
        return op.value, json.dumps(op.expected) if op.f == "cas" else None

    def operation(self, op: Op) -> Operation:
        got = super().operation(op)
        return got if op.f != "cas" else replace(got, arg=op.expected)


class CounterWorkload(ServiceWorkload):
    """The counter service's workload: one object, ops sent once (see the module docstring)."""

    name = "counter"
    keyed = False
    model = MODELS["counter"]
    mix = COUNTER_MIX

    def __init__(self) -> None:
        super().__init__()
        self.counter: tuple[int, int] | None = (0, 0)  # (value, revision); None once an add is unknown
        self.acked_adds = [0, 0]  # (sum of deltas, count) of acknowledged adds
        self.unknown_adds = [0, 0]  # the same for adds of unknown outcome
        self.last_revision = -1

    def next_op(self, rng: random.Random, op_id: int, key: str | None, client: int, now: float, concurrent: bool) -> Op:
        f = _pick(rng, self.mix)
        op = Op(op_id, f, None, None, now, client, delta=rng.randrange(1, 10) if f == "add" else 0)
        if f in ("alarm", "disarm"):
            op.timer, op.delay_ms = rng.randrange(4), rng.choice((20, 60, 150, 400))
        return op

    def payload(self, op: Op, request_id: int) -> bytes:
        build: dict[str, Callable[[], bytes]] = {
            "add": lambda: counter.add(request_id, op.delta),
            "alarm": lambda: counter.alarm(request_id, op.timer, op.delay_ms),
            "disarm": lambda: counter.disarm(request_id, op.timer),
            "tick": lambda: counter.tick(request_id),
            "close": lambda: counter.close(request_id),
        }
        return build.get(op.f, lambda: counter.get(request_id))()

    def decode_reply(self, payload: bytes) -> dict[str, Any]:
        return counter.decode_reply(payload)

    def on_reply(self, op: Op, reply: dict[str, Any]) -> None:
        check_not_refused(op, reply)
        value, revision = reply.get("value"), reply.get("revision")
        if not isinstance(value, int) or not isinstance(revision, int):
            violation(op, "no value/revision")
        if op.f == "add":
            self.acked_adds[0] += op.delta
            self.acked_adds[1] += 1
        if op.final:  # every acknowledged add counted, each unknown one at most once
            lo, n = self.acked_adds
            if not (lo <= value <= lo + self.unknown_adds[0] and n <= revision <= n + self.unknown_adds[1]):
                violation(
                    op,
                    f"final read: acknowledged adds sum to {lo} over {n} adds, with "
                    f"{self.unknown_adds[1]} adds ({self.unknown_adds[0]}) of unknown outcome",
                )
            self.checked += 1
            return
        if revision < self.last_revision or (op.f == "add" and revision == self.last_revision):
            violation(op, f"the revision went back (or an add did not count) after {self.last_revision}")
        self.last_revision = revision
        if self.counter is not None:
            expect = (self.counter[0] + op.delta, self.counter[1] + 1) if op.f == "add" else self.counter
            if (value, revision) != expect:
                violation(op, f"(value, revision) should be {expect}")
            self.checked += 1
            self.counter = (value, revision)

    def on_unknown(self, op: Op) -> None:
        if op.f == "add":
            self.counter = None  # exact values are unknowable from here on; revisions still checked
            self.unknown_adds[0] += op.delta
            self.unknown_adds[1] += 1

    def check_final_read(self, op: Op, reply: dict[str, Any], ops: Sequence[Op]) -> None:
        """The sum of every acknowledged add and some of the unknown ones."""
        adds = [o for o in ops if o.f == "add"]
        lo = sum(o.delta for o in adds if o.outcome == "ok")
        hi = lo + sum(o.delta for o in adds if o.outcome in (None, "info"))
        got = reply.get("value")
        if not isinstance(got, int) or not lo <= got <= hi:
            violation(op, f"final read: an acknowledged write is missing (possible: {lo}..{hi})")
        self.checked += 1

    def record(self, op: Op) -> tuple[str | None, str | None]:
        return (None, str(op.delta)) if op.f == "add" else (op.value, None)

    def operation(self, op: Op) -> Operation:
        got = super().operation(op)
        return got if op.f != "add" else replace(got, value=op.delta)


class TimersWorkload(CounterWorkload):
    """The counter with timer ops mixed in; one client; the counter's random stream and checks, and a
    model of the alarms (see :meth:`check_alarms`)."""

    mix = TIMERS_MIX
    max_clients = 1

    def __init__(self) -> None:
        super().__init__()
        self.pending: set[int] = set()  # alarms armed and neither fired nor disarmed, as last seen
        self.fired = 0  # alarms fired, as last seen
        self.ticks = 0  # ticks applied, as last seen
        self.uncertain: set[int] = set()  # alarms an op of unknown outcome armed or disarmed
        self.tick_ops = [0, 0]  # tick ops acknowledged, and of unknown outcome

    def on_reply(self, op: Op, reply: dict[str, Any]) -> None:
        self.check_alarms(op, reply)
        super().on_reply(op, reply)

    def on_unknown(self, op: Op) -> None:
        super().on_unknown(op)
        if op.f in ("alarm", "disarm"):
            self.uncertain.add(op.timer)
        elif op.f == "tick":
            self.tick_ops[1] += 1

    def check_alarms(self, op: Op, reply: dict[str, Any]) -> None:
        """An alarm leaves the pending set only by a disarm or by firing once; a fired alarm counts
        once in ``fired``; no tick is applied that no tick op asked for. Alarms an op of unknown
        outcome touched are left out, and then ``fired`` is only bounded from below."""
        alarms, fired, ticks = reply.get("alarms", []), reply.get("fired", 0), reply.get("ticks", 0)
        if not (isinstance(alarms, list) and all(type(a) is int for a in alarms)) or not (
            type(fired) is int and type(ticks) is int
        ):
            violation(op, "malformed alarms/fired/ticks")
        expected = set(self.pending)
        if op.f == "alarm":
            expected.add(op.timer)
        elif op.f == "disarm":
            expected.discard(op.timer)
        seen = set(alarms)
        unarmed = (seen - expected) - self.uncertain
        if unarmed:
            violation(op, f"alarms {sorted(unarmed)} are pending though none was armed (pending: {sorted(expected)})")
        vanished = len((expected - seen) - self.uncertain)
        # the alarm this op re-armed or disarmed may have fired just before the op was applied
        touched = int(op.f in ("alarm", "disarm") and op.timer in self.pending - self.uncertain)
        gained = fired - self.fired
        if gained < vanished or (not self.uncertain and gained > vanished + touched):
            violation(op, f"{vanished} alarm(s) fired since the last reply, but 'fired' went {self.fired} -> {fired}")
        if op.f == "tick":
            self.tick_ops[0] += 1
        if not self.ticks <= ticks <= sum(self.tick_ops):
            violation(op, f"ticks went {self.ticks} -> {ticks} with {self.tick_ops} tick ops (acked, unknown)")
        self.pending, self.fired, self.ticks = seen, fired, ticks


WORKLOADS: dict[str, Callable[[], ServiceWorkload]] = {
    "kv": KvWorkload,
    "counter": CounterWorkload,
    "timers": TimersWorkload,
}

__all__ = ["COUNTER_MIX", "KV_MIX", "TIMERS_MIX", "WORKLOADS", "CounterWorkload", "KvWorkload", "TimersWorkload"]
