"""A linearizability checker for client histories of the sample services (Wing & Gong's search with
Lowe's memoisation, as Porcupine and Knossos run it), partitioned per key.

A history is a list of :class:`Operation`: each has an invocation time and, if the client saw its
outcome, a completion time and result. Per Jepsen/Knossos semantics:

* ``ok``: took effect exactly once, at some instant between invocation and completion, and the
  result is what the object returned at that instant;
* ``fail``: definitely did not take effect (dropped before checking);
* ``info``: the outcome is unknown (a timeout, the session lost): it took effect at some instant
  after its invocation, or never. A read of unknown outcome constrains nothing and is dropped.

The objects (:data:`MODELS`):

* ``kv``: one register per key (P-compositionality: a history is linearizable iff each key's is).
  ``put`` returns the previous value, ``get`` the current one, ``cas`` (``arg``: the expected value)
  the value after it (the new value iff it swapped: values are unique per op), ``delete`` the
  previous value. Absent is None.
* ``counter``: one integer; ``add`` (``value``: the delta) returns the value after it, ``get`` the value.

The search: linearize, one at a time, an operation that no pending ``ok`` operation precedes in real
time (completed before it was invoked), if the model accepts its result in the current state; back
up when stuck; remember every (set of linearized operations, state) already explored. It is
exponential in the worst case, so it has a budget (states explored, and seconds): when it runs out
the key's verdict is ``unknown``, never ``ok``.

A violation is shrunk to a minimal failing sub-history (:func:`shrink`): first the previous values
that puts and deletes returned are left unchecked where the history stays non-linearizable without
them (a weaker history that fails still proves the failure), then operations are removed while the
rest stays non-linearizable and still explains itself — every value a kept operation returned was
written by a kept operation (a counter keeps its adds: only reads are removed). What remains is what
the report draws.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

OK, FAIL, INFO = "ok", "fail", "info"
LINEARIZABLE, VIOLATION, UNKNOWN = "ok", "violation", "unknown"
COUNTER_KEY = "counter"  # the partition of a counter's operations (they carry no key)
DEFAULT_MAX_STATES = 200_000  # per key
DEFAULT_MAX_SECONDS = 20.0  # per key
_NEVER = float("inf")
# A cas whose expected value the trace does not have (recorded before the ops table's ``arg``): its
# precondition is not checked, only what it returned.
UNKNOWN_ARG = "\u0000unknown"


@dataclass(frozen=True)
class Operation:
    """One client operation as the checker sees it. ``complete`` is None for an ``info`` op."""

    client: int
    op_id: int
    f: str
    key: str | None
    invoke: int
    complete: int | None
    status: str  # ok / fail / info
    value: Any = None  # put / cas: the value written; add: the delta
    arg: Any = None  # cas: the expected value
    result: Any = None  # ok: what the service returned (the value, see the module docstring)
    checked: bool = True  # False: the result is not checked (a shrunk history's put / delete)

    def describe(self) -> str:
        """``c1 #7 cas k2 v3->v9 = v9`` (client, op id, call, result)."""
        call = {
            "put": f"put {self.key}={self.value}",
            "cas": f"cas {self.key} {self.arg}->{self.value}",
            "add": f"add {self.value}",
            "get": f"get {self.key}" if self.key is not None else "get",
            "delete": f"delete {self.key}",
        }.get(self.f, f"{self.f} {self.key}")
        outcome = f"({self.status})" if self.status != OK else f"= {self.result!r}" if self.checked else "= ?"
        return f"c{self.client} #{self.op_id} {call} {outcome}"

    def as_dict(self) -> dict[str, Any]:
        """Plain data (JSON): what check.json and the report keep of a minimal sub-history."""
        return {
            "client": self.client,
            "op_id": self.op_id,
            "f": self.f,
            "key": self.key,
            "invoke": self.invoke,
            "complete": self.complete,
            "status": self.status,
            "value": self.value,
            "arg": self.arg,
            "result": self.result,
            "checked": self.checked,
            "text": self.describe(),
        }


# ---------------------------------------------------------------------------------------------- models


class Model:
    """A sequential specification: ``step(state, op)`` -> the next state, or None if ``op`` (with its
    result, for an ``ok`` op) is impossible in ``state``."""

    name = "?"
    init: Any = None

    def step(self, state: Any, op: Operation) -> Any:
        raise NotImplementedError

    def removable(self, op: Operation) -> bool:
        """May shrinking drop this op (the rest still meaning something)?"""
        return True

    def explains(self, ops: Sequence[Operation]) -> bool:
        """Is every value the kept ops returned one they could have produced (the shrink's guard)?"""
        return True


_IMPOSSIBLE = object()


class RegisterModel(Model):
    """A kv key: the value, or None when absent."""

    name = "kv"
    init = None

    def step(self, state: Any, op: Operation) -> Any:
        ok = op.status == OK and op.checked
        if op.f == "get":
            return state if not ok or op.result == state else _IMPOSSIBLE
        if op.f == "put":
            return op.value if not ok or op.result == state else _IMPOSSIBLE
        if op.f == "delete":
            return None if not ok or op.result == state else _IMPOSSIBLE
        if op.f == "cas" and op.arg == UNKNOWN_ARG:
            if not ok or op.result == op.value:
                return op.value  # an unknown one "took effect" only if it swapped (or never)
            return state if op.result == state else _IMPOSSIBLE
        if op.f == "cas":
            swaps = state == op.arg
            if not ok:
                return op.value if swaps else state
            if op.result == op.value:  # it swapped
                return op.value if swaps else _IMPOSSIBLE
            return state if not swaps and op.result == state else _IMPOSSIBLE
        raise ValueError(f"kv: unknown operation {op.f!r}")

    def explains(self, ops: Sequence[Operation]) -> bool:
        written = {None} | {o.value for o in ops if o.f in ("put", "cas")}
        # What each kept op returned, and what a cas that swapped found, was written by a kept op.
        swapped = (o.arg for o in ops if o.f == "cas" and o.status == OK and o.result == o.value)
        return all(o.result in written for o in ops if o.status == OK and o.checked) and all(
            a in written for a in swapped if a != UNKNOWN_ARG
        )


class CounterModel(Model):
    """The counter: an integer; add returns the value after it."""

    name = "counter"
    init = 0

    def step(self, state: Any, op: Operation) -> Any:
        if op.f == "add":
            after = state + int(op.value)
            return after if op.status != OK or op.result == after else _IMPOSSIBLE
        if op.f in _COUNTER_READS:
            return state if op.status != OK or op.result == state else _IMPOSSIBLE
        raise ValueError(f"counter: unknown operation {op.f!r}")

    def removable(self, op: Operation) -> bool:
        return op.f in _COUNTER_READS  # dropping an add would change every later value


# The counter's ops that leave the value alone and reply with it (the timers workload's alarm/disarm/tick/close).
_COUNTER_READS = frozenset({"get", "alarm", "disarm", "tick", "close"})


MODELS: dict[str, Model] = {"kv": RegisterModel(), "counter": CounterModel()}


# ---------------------------------------------------------------------------------------------- search


@dataclass
class Search:
    """The outcome of one search: ``verdict`` and how many states it explored."""

    verdict: str
    explored: int
    reason: str = ""


def _relevant(ops: Iterable[Operation]) -> list[Operation]:
    """Drop what constrains nothing: failed ops and reads of unknown outcome."""
    return [o for o in ops if o.status == OK or (o.status == INFO and o.f != "get")]


def linearizable(
    ops: Sequence[Operation],
    model: Model,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    max_seconds: float | None = DEFAULT_MAX_SECONDS,
) -> Search:
    """Is this history of one object linearizable? ``unknown`` when the budget ran out first."""
    hist = sorted(_relevant(ops), key=lambda o: (o.invoke, o.op_id))
    n = len(hist)
    invoke = [o.invoke for o in hist]
    complete = [_NEVER if o.status != OK or o.complete is None else o.complete for o in hist]
    required = 0
    for i, o in enumerate(hist):
        if o.status == OK:
            required |= 1 << i
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    seen: set[tuple[int, Any]] = set()
    stack: list[tuple[int, Any]] = [(0, model.init)]
    explored = 0
    while stack:
        done, state = stack.pop()
        if done & required == required:
            return Search(LINEARIZABLE, explored)
        if (done, state) in seen:
            continue
        seen.add((done, state))
        explored += 1
        if explored > max_states:
            return Search(UNKNOWN, explored, f"search budget of {max_states} states spent")
        if deadline is not None and explored % 1024 == 0 and time.monotonic() > deadline:
            return Search(UNKNOWN, explored, f"time budget of {max_seconds} s spent")
        # The earliest completion among pending ok ops bounds what may be linearized next. Ops are
        # sorted by invocation and everything below ``low`` is linearized, so both scans start at
        # ``low`` and stop at the first op invoked after the bound (it completes later still).
        low = (~done & (done + 1)).bit_length() - 1
        bound = _NEVER
        for i in range(low, n):
            if invoke[i] > bound:
                break
            if not done >> i & 1 and complete[i] < bound:
                bound = complete[i]
        children = []
        for i in range(low, n):
            if invoke[i] > bound:
                break
            if done >> i & 1:
                continue
            after = model.step(state, hist[i])
            if after is not _IMPOSSIBLE:
                children.append((done | 1 << i, after))
        stack.extend(reversed(children))  # earliest invoked first
    return Search(VIOLATION, explored)


def shrink(
    ops: Sequence[Operation],
    model: Model,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    max_checks: int = 2000,
) -> list[Operation]:
    """A minimal non-linearizable sub-history of ``ops`` (which must be non-linearizable): no single
    removable op can be dropped (ddmin-style, chunks then single ops) without the rest becoming
    linearizable, undecided or unexplained (see the module docstring)."""
    current = sorted(_relevant(ops), key=lambda o: (o.invoke, o.op_id))
    checks = 0

    def fails(candidate: list[Operation]) -> bool:
        nonlocal checks
        checks += 1
        if not model.explains(candidate):
            return False
        return linearizable(candidate, model, max_states=max_states, max_seconds=None).verdict == VIOLATION

    # A failing prefix first (by invocation): the ops after the failure rarely matter.
    lo, hi = 1, len(current)
    while lo < hi and checks < max_checks:
        mid = (lo + hi) // 2
        if fails(current[:mid]):
            hi = mid
        else:
            lo = mid + 1
    if hi < len(current) and fails(current[:hi]):
        current = current[:hi]
    # Relax: a put's or delete's returned previous value, unchecked where the failure does not need it.
    for i, o in enumerate(current):
        if checks >= max_checks:
            break
        if o.status == OK and o.f in ("put", "delete") and o.checked:
            candidate = [*current[:i], replace(o, checked=False), *current[i + 1 :]]
            if fails(candidate):
                current = candidate
    chunk = max(1, len(current) // 2)
    while checks < max_checks:
        i = 0
        while i < len(current) and checks < max_checks:
            removed = current[i : i + chunk]
            if all(model.removable(o) for o in removed):
                candidate = current[:i] + current[i + chunk :]
                if candidate and fails(candidate):
                    current = candidate
                    continue
            i += chunk
        if chunk == 1:
            break
        chunk = max(1, chunk // 2)
    return current


# ---------------------------------------------------------------------------------------------- histories


@dataclass
class KeyVerdict:
    """The verdict on one key (one object) of one run."""

    key: str
    model: str
    verdict: str
    ops: int
    explored: int
    reason: str = ""
    minimal: list[Operation] = field(default_factory=list)

    def describe(self) -> str:
        if self.verdict == VIOLATION:
            return f"key {self.key}: not linearizable ({self.ops} ops); minimal sub-history: " + "; ".join(
                o.describe() for o in self.minimal
            )
        if self.verdict == UNKNOWN:
            return f"key {self.key}: unknown after {self.explored} states ({self.reason})"
        return f"key {self.key}: linearizable ({self.ops} ops)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "model": self.model,
            "verdict": self.verdict,
            "ops": self.ops,
            "explored": self.explored,
            "reason": self.reason,
            "minimal": [o.as_dict() for o in self.minimal],
        }


@dataclass
class HistoryVerdict:
    """Every key's verdict; the history's is the worst of them (violation > unknown > ok)."""

    keys: list[KeyVerdict] = field(default_factory=list)
    clients: int = 0
    ops: int = 0

    @property
    def verdict(self) -> str:
        got = {k.verdict for k in self.keys}
        return VIOLATION if VIOLATION in got else UNKNOWN if UNKNOWN in got else LINEARIZABLE

    def violations(self) -> list[KeyVerdict]:
        return [k for k in self.keys if k.verdict == VIOLATION]

    def unknown(self) -> list[KeyVerdict]:
        return [k for k in self.keys if k.verdict == UNKNOWN]


def model_for(ops: Iterable[Operation]) -> Model:
    """kv if the ops carry keys, else the counter."""
    return MODELS["kv"] if any(o.key is not None for o in ops) else MODELS["counter"]


def check_key(
    key: str,
    ops: Sequence[Operation],
    model: Model | None = None,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    max_seconds: float | None = DEFAULT_MAX_SECONDS,
    minimise: bool = True,
) -> KeyVerdict:
    """Check one key's history; a violation comes with its minimal sub-history."""
    model = model or model_for(ops)
    if model.name == "counter" and any(o.f == "add" and o.value is None for o in ops):
        return KeyVerdict(key, model.name, UNKNOWN, len(ops), 0, "adds recorded without their delta (no arg column)")
    got = linearizable(ops, model, max_states=max_states, max_seconds=max_seconds)
    verdict = KeyVerdict(key, model.name, got.verdict, len(ops), got.explored, got.reason)
    if got.verdict == VIOLATION and minimise:
        verdict.minimal = shrink(ops, model, max_states=max_states)
    return verdict


def partition(ops: Iterable[Operation]) -> dict[str, list[Operation]]:
    """Ops per object: per kv key, the counter's under :data:`COUNTER_KEY`."""
    out: dict[str, list[Operation]] = defaultdict(list)
    for o in ops:
        out[COUNTER_KEY if o.key is None else o.key].append(o)
    return dict(out)


def check_history(
    ops: Sequence[Operation],
    *,
    max_states: int = DEFAULT_MAX_STATES,
    max_seconds: float | None = DEFAULT_MAX_SECONDS,
) -> HistoryVerdict:
    """Check a whole history, key by key."""
    out = HistoryVerdict(clients=len({o.client for o in ops}), ops=len(ops))
    for key, key_ops in sorted(partition(ops).items()):
        out.keys.append(check_key(key, key_ops, max_states=max_states, max_seconds=max_seconds))
    return out


# ---------------------------------------------------------------------------------------------- the trace


def _result(text: str | None) -> Any:
    """The value of a recorded result: JSON of the value, or of the whole reply (``{"value": ...}``)."""
    if text is None:
        return None
    try:
        got = json.loads(text)
    except ValueError:
        return text
    return got.get("value") if isinstance(got, dict) else got


def _arg(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def operations_from_rows(rows: Iterable[dict[str, Any]]) -> list[Operation]:
    """The trace's ``ops`` rows (invoke, then ok / fail / info per client and op id) as operations.
    An op whose completion was never recorded (its client killed) is ``info``; rows of other runs
    must be filtered out first. A counter's ``add`` takes its delta from ``arg`` (or ``value``)."""
    invokes: dict[tuple[int, int], dict[str, Any]] = {}
    completions: dict[tuple[int, int], dict[str, Any]] = {}
    rank = {OK: 0, FAIL: 1, INFO: 2}
    for r in rows:
        k = (r["client_id"], r["op_id"])
        if r["kind"] == "invoke":
            invokes.setdefault(k, r)
        elif r["kind"] in rank:
            prev = completions.get(k)
            if prev is None or rank[r["kind"]] < rank[prev["kind"]]:
                completions[k] = r
    out = []
    for k, inv in invokes.items():
        done = completions.get(k)
        status = INFO if done is None else done["kind"]
        f = inv["f"]
        arg = _arg(inv.get("arg"))
        value: Any = inv.get("value")
        if f == "add":
            value = arg if arg is not None else _arg(value)  # None: the counter's verdict is unknown
            arg = None
        elif f == "cas" and inv.get("arg") is None:
            arg = UNKNOWN_ARG
        result = _result(done.get("result")) if status == OK and done is not None else None
        out.append(
            Operation(
                client=k[0],
                op_id=k[1],
                f=f,
                key=inv.get("key"),
                invoke=int(inv["wall_ns"]),
                complete=int(done["wall_ns"]) if status == OK and done is not None else None,
                status=status,
                value=value,
                arg=arg,
                result=result,
            )
        )
    return out


def has_concurrency(ops: Sequence[Operation]) -> bool:
    """Whether more than one client issued operations (what the checker is for)."""
    return len({o.client for o in ops}) > 1


__all__ = [
    "COUNTER_KEY",
    "INFO",
    "LINEARIZABLE",
    "MODELS",
    "OK",
    "UNKNOWN",
    "UNKNOWN_ARG",
    "VIOLATION",
    "CounterModel",
    "HistoryVerdict",
    "KeyVerdict",
    "Model",
    "Operation",
    "RegisterModel",
    "Search",
    "check_history",
    "check_key",
    "has_concurrency",
    "linearizable",
    "model_for",
    "operations_from_rows",
    "partition",
    "shrink",
]
