"""A linearizability checker for client histories (Wing & Gong's search with Lowe's memoisation, as
Porcupine and Knossos run it), partitioned per object, with models of the sample services and a
:class:`Model` API for any other.

A history is a list of :class:`Operation`: each has an invocation time and, if the client saw its
outcome, a completion time and result. Per Jepsen/Knossos semantics:

* ``ok``: took effect exactly once, at some instant between invocation and completion, and the
  result is what the object returned at that instant;
* ``fail``: definitely did not take effect (dropped before checking);
* ``info``: the outcome is unknown (a timeout, the session lost): it took effect at some instant
  after its invocation, or never. An op of unknown outcome that changes nothing (a read: the model's
  :meth:`Model.removable`) constrains nothing and is dropped.

The built-in objects (:data:`MODELS`):

* ``kv``: one register per key (P-compositionality: a history is linearizable iff each key's is).
  ``put`` returns the previous value, ``get`` the current one, ``cas`` (``arg``: the expected value)
  the value after it (the new value iff it swapped: values are unique per op), ``delete`` the
  previous value. Absent is None.
* ``counter``: one integer; ``add`` (``value``: the delta) returns the value after it, ``get`` the value.

The search: linearize, one at a time, an operation that no pending ``ok`` operation precedes in real
time (completed before it was invoked), if the model accepts its result in the current state; back
up when stuck; remember every (set of linearized operations, state) already explored. It is
exponential in the worst case, so it has a :class:`Budget` (states explored, and seconds) that the
decision and the shrinking of a violation share: when it runs out before the decision the object's
verdict is ``unknown``, never ``ok``; when it runs out while shrinking, the smallest failing
sub-history found so far is shown, marked as not minimal.

A violation is shrunk to a minimal failing sub-history (:func:`shrink`): a failing prefix, then each
op the model can weaken (:meth:`Model.relax`: a put's previous value left unchecked) where the
history still fails, then ops are removed while the rest stays non-linearizable. An op is only
removed where the model says that cannot make a linearizable history fail (:meth:`Model.may_drop`:
a read always; a register's write only if no kept op could have observed what it wrote), so the
sub-history shown fails because the whole history does, and every candidate is re-checked by the
full search: what is shown is itself non-linearizable. What remains is what the report draws.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

OK, FAIL, INFO = "ok", "fail", "info"
LINEARIZABLE, VIOLATION, UNKNOWN = "ok", "violation", "unknown"
COUNTER_KEY = "counter"  # the partition of operations that carry no key (the counter's)
DEFAULT_MAX_STATES = 200_000  # per key, deciding and shrinking together
DEFAULT_MAX_SECONDS = 20.0  # per key, deciding and shrinking together
DEFAULT_MAX_CHECKS = 2000  # searches one shrink may run
_NEVER = float("inf")
# A cas whose expected value the trace does not have (recorded before the ops table's ``arg``): its
# precondition is not checked, only what it returned.
UNKNOWN_ARG = "\u0000unknown"


class ModelError(ValueError):
    """A model broke its contract: an initial state of None, a state modified in place by ``step``,
    a state with no hashable key."""


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
    checked: bool = True  # False: the result is not checked (an op a model's relax weakened)

    def describe(self) -> str:
        """``c1 #7 cas k2 v3->v9 = v9`` (client, op id, call, result)."""
        call = {
            "put": f"put {self.key}={self.value}",
            "cas": f"cas {self.key} {self.arg}->{self.value}",
            "add": f"add {self.value}",
            "get": f"get {self.key}" if self.key is not None else "get",
            "delete": f"delete {self.key}",
        }.get(self.f) or self._describe_call()
        outcome = f"({self.status})" if self.status != OK else f"= {self.result!r}" if self.checked else "= ?"
        return f"c{self.client} #{self.op_id} {call} {outcome}"

    def _describe_call(self) -> str:
        """A call the built-in models do not name: ``transfer a1 arg=b2 value=10`` (what is set)."""
        parts = [self.f, *([str(self.key)] if self.key is not None else [])]
        parts += [f"{name}={v}" for name, v in (("arg", self.arg), ("value", self.value)) if v is not None]
        return " ".join(parts)

    def as_dict(self, text: str | None = None) -> dict[str, Any]:
        """Plain data (JSON): what check.json and the report keep of a minimal sub-history; ``text``:
        the op as its model describes it (:meth:`Model.describe_op`), :meth:`describe` by default."""
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
            "text": self.describe() if text is None else text,
        }


def freeze(value: Any) -> Hashable:
    """A hashable stand-in for ``value``, equal for equal values: ``value`` itself if it is hashable,
    else its canonical frozen form (a dict as the frozenset of its items, a list or tuple as a tuple,
    a set as a frozenset, a dataclass as its type and fields), frozen all the way down. Raises
    :class:`ModelError` for anything else."""
    try:
        hash(value)
        return value
    except TypeError:
        pass
    if isinstance(value, dict):
        return (dict, frozenset((freeze(k), freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value), tuple(freeze(v) for v in value))
    if isinstance(value, set | frozenset):
        return (set, frozenset(freeze(v) for v in value))
    if isinstance(value, bytearray):
        return (bytearray, bytes(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value), tuple(freeze(getattr(value, f.name)) for f in dataclasses.fields(value)))
    raise ModelError(
        f"a model state holds a {type(value).__name__}, which is neither hashable nor a dict, list, tuple, "
        "set or dataclass: give the model a key(state) that returns a hashable equivalent"
    )


# ---------------------------------------------------------------------------------------------- models


class Model:
    """A sequential specification of one object: what the linearizability check judges a history by.
    Subclass it, set ``name`` and ``init``, and write ``step``; the other methods have defaults.

    ``init``: the object's state before any operation. ``step(state, op)``: the state after ``op``
    took effect in ``state``, or **None if it could not have** — for an ``ok`` op (``op.status ==
    OK``), when the object in ``state`` would not have returned ``op.result``. An op of unknown
    outcome (``op.status == INFO``, ``op.result`` None) is stepped only where it took effect: return
    the state after it, whatever it returned (the search also tries it never taking effect). Failed
    ops never reach ``step``; ``op.checked`` is False only on ops this model's :meth:`relax` made.

    States: a state is never None (None means impossible), and ``step`` never modifies the state it
    is given — it returns a new one (a dict changed in place is detected and raises
    :class:`ModelError`). Two states are the same state when their :meth:`key` is equal; the default
    key is :func:`freeze`, so a state may be anything hashable (compared by ``==``) or a dict, list,
    set or dataclass of such things (compared by contents).

    Shrinking a violation drops ops only where :meth:`may_drop` allows it; by default those that
    :meth:`removable` says never change the state (reads), and those invoked after every kept ``ok``
    op completed (a failing prefix). Reports show ops with :meth:`describe_op`
    and states with :meth:`describe_state`. Ops are split into independent objects by
    :meth:`partition_key` (by default each op's ``key``)."""

    name = "?"
    init: Any = None

    def step(self, state: Any, op: Operation) -> Any:
        """The state after ``op`` in ``state``, or None if ``op`` (with its result) is impossible there."""
        raise NotImplementedError

    def key(self, state: Any) -> Hashable:
        """What states are compared and remembered by: equal keys, the same state (:func:`freeze`)."""
        return freeze(state)

    def removable(self, op: Operation) -> bool:
        """True for an op that never changes the state (a read): it may be dropped from any history
        without making a linearizable one fail, and an unknown-outcome one constrains nothing."""
        return False

    def may_drop(self, kept: Sequence[Operation], dropped: Sequence[Operation]) -> bool:
        """May the shrink drop ``dropped`` and keep ``kept``: is every linearization of the two
        together, with ``dropped`` taken out, still one of ``kept``? Default: each dropped op is
        removable, or was invoked after every kept ``ok`` op completed (it comes after all of them in
        any linearization, so none of them saw what it did)."""
        last = max((o.complete for o in kept if o.status == OK and o.complete is not None), default=-_NEVER)
        return all(self.removable(o) or o.invoke > last for o in dropped)

    def relax(self, op: Operation) -> Operation | None:
        """A weaker op the shrink may put in ``op``'s place (``step`` accepts it wherever it accepts
        ``op``, with the same state after: typically its result unchecked), or None."""
        return None

    def describe_op(self, op: Operation) -> str:
        """One op in a violation report: ``c1 #7 put k=v7 = 'v3'`` by default."""
        return op.describe()

    def describe_state(self, state: Any) -> str:
        """One state in a violation report."""
        return repr(state)

    def partition_key(self, op: Operation) -> str:
        """The object ``op`` acts on; each object's ops are checked alone (P-compositionality)."""
        return COUNTER_KEY if op.key is None else op.key


class RegisterModel(Model):
    """A kv key: the state is ``(value,)`` (a 1-tuple, since the value None, absent, is not a state)."""

    name = "kv"
    init = (None,)

    def step(self, state: Any, op: Operation) -> Any:
        (now,) = state
        ok = op.status == OK and op.checked
        if op.f == "get":
            return state if not ok or op.result == now else None
        if op.f in ("put", "delete"):
            return (op.value if op.f == "put" else None,) if not ok or op.result == now else None
        if op.f == "cas":
            return _cas(now, op, ok)
        raise ValueError(f"kv: unknown operation {op.f!r}")

    def removable(self, op: Operation) -> bool:
        return op.f == "get"

    def may_drop(self, kept: Sequence[Operation], dropped: Sequence[Operation]) -> bool:
        """A read always; a write only if no kept op observed the value it wrote (returned it, or
        found it as a swapping cas) and completed after the write was invoked: so the state every
        kept op saw still comes from a kept write, even when a value is written more than once."""
        seen: dict[Hashable, float] = {}  # a value -> the last completion of a kept op that observed it
        for o in kept:
            for v in _observed(o):
                k = freeze(v)
                seen[k] = max(seen.get(k, -_NEVER), _NEVER if o.complete is None else o.complete)
        return all(freeze(v) not in seen or d.invoke > seen[freeze(v)] for d in dropped for v in _written(d))

    def relax(self, op: Operation) -> Operation | None:
        """A put's or delete's returned previous value, unchecked."""
        return replace(op, checked=False) if op.status == OK and op.checked and op.f in ("put", "delete") else None

    def describe_state(self, state: Any) -> str:
        return "absent" if state[0] is None else repr(state[0])


def _cas(now: Any, op: Operation, ok: bool) -> Any:
    """The register after a cas (None: impossible)."""
    swapped = (op.value,)
    if op.arg == UNKNOWN_ARG:
        if not ok or op.result == op.value:
            return swapped  # an unknown one "took effect" only if it swapped (or never)
        return (now,) if op.result == now else None
    swaps = now == op.arg
    if not ok:
        return swapped if swaps else (now,)
    if op.result == op.value:  # it swapped
        return swapped if swaps else None
    return (now,) if not swaps and op.result == now else None


def _observed(o: Operation) -> list[Any]:
    """The register values an op's acceptance depends on: what it returned, or what a swapping (or
    unknown-outcome) cas expected."""
    if o.status == INFO:
        return [o.arg] if o.f == "cas" and o.arg != UNKNOWN_ARG else []
    if o.status != OK or not o.checked:
        return []
    if o.f == "cas" and o.result == o.value:
        return [] if o.arg == UNKNOWN_ARG else [o.arg]
    return [o.result]


def _written(o: Operation) -> list[Any]:
    """The value an op may have written to the register (none for a read or a cas that did not swap)."""
    if o.f == "put":
        return [o.value]
    if o.f == "delete":
        return [None]
    if o.f == "cas" and not (o.status == OK and o.checked and o.result != o.value):
        return [o.value]
    return []


class CounterModel(Model):
    """The counter: an integer; add returns the value after it."""

    name = "counter"
    init = 0

    def step(self, state: Any, op: Operation) -> Any:
        if op.f == "add":
            after = state + int(op.value)
            return after if op.status != OK or op.result == after else None
        if op.f in _COUNTER_READS:
            return state if op.status != OK or op.result == state else None
        raise ValueError(f"counter: unknown operation {op.f!r}")

    def removable(self, op: Operation) -> bool:
        return op.f in _COUNTER_READS  # dropping an add would change every later value


# The counter's ops that leave the value alone and reply with it (the timers workload's alarm/disarm/tick/close).
_COUNTER_READS = frozenset({"get", "alarm", "disarm", "tick", "close"})


MODELS: dict[str, Model] = {"kv": RegisterModel(), "counter": CounterModel()}


# ---------------------------------------------------------------------------------------------- search


@dataclass
class Budget:
    """What checking one object may spend, deciding and shrinking together: ``max_states`` explored
    states in all, and ``max_seconds`` of wall time from its first search (None: no time limit)."""

    max_states: int = DEFAULT_MAX_STATES
    max_seconds: float | None = DEFAULT_MAX_SECONDS
    spent: int = 0  # states explored so far
    deadline: float | None = None  # clock() when the time runs out (set by the first search)
    clock: Callable[[], float] = time.monotonic

    def start(self) -> None:
        if self.deadline is None and self.max_seconds is not None:
            self.deadline = self.clock() + self.max_seconds

    def out_of_time(self) -> bool:
        return self.deadline is not None and self.clock() > self.deadline

    def spent_reason(self) -> str:
        """Why it ran out."""
        if self.out_of_time():
            return f"time budget of {self.max_seconds} s spent"
        return f"search budget of {self.max_states} states spent"


@dataclass
class Search:
    """The outcome of one search: ``verdict`` and how many states it explored; for a violation, how
    many ops the longest partial linearization placed (``linearized``) and the state it left."""

    verdict: str
    explored: int
    reason: str = ""
    linearized: int = 0
    state: Any = None


def _relevant(ops: Iterable[Operation], model: Model) -> list[Operation]:
    """Drop what constrains nothing: failed ops and reads of unknown outcome, sorted by invocation."""
    kept = [o for o in ops if o.status == OK or (o.status == INFO and not model.removable(o))]
    return sorted(kept, key=lambda o: (o.invoke, o.op_id))


def _state_key(model: Model, state: Any) -> Hashable:
    k = model.key(state)
    try:
        hash(k)
    except TypeError as e:
        raise ModelError(f"model {model.name}: key(state) returned an unhashable {type(k).__name__}") from e
    return k


def linearizable(
    ops: Sequence[Operation],
    model: Model,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    max_seconds: float | None = DEFAULT_MAX_SECONDS,
    budget: Budget | None = None,
) -> Search:
    """Is this history of one object linearizable? ``unknown`` when the budget (``budget``, shared with
    other searches, or ``max_states`` / ``max_seconds`` for this one) ran out first."""
    if model.init is None:
        raise ModelError(f"model {model.name}: init is None, which step's contract reserves for 'impossible'")
    budget = budget or Budget(max_states, max_seconds)
    budget.start()
    got = _search(_relevant(ops, model), model, budget)
    budget.spent += got.explored
    return got


def _search(hist: list[Operation], model: Model, budget: Budget) -> Search:
    n = len(hist)
    invoke = [o.invoke for o in hist]
    complete = [_NEVER if o.status != OK or o.complete is None else o.complete for o in hist]
    required = sum(1 << i for i, o in enumerate(hist) if o.status == OK)
    limit = budget.max_states - budget.spent
    seen: set[tuple[int, Hashable]] = set()
    stack: list[tuple[int, Any]] = [(0, model.init)]
    explored = longest = 0
    stuck = model.init
    plain = type(model).key is Model.key  # the default key: a hashable state is its own key
    while stack:
        done, state = stack.pop()
        if done & required == required:
            return Search(LINEARIZABLE, explored)
        k = state if plain else _state_key(model, state)
        try:
            if (done, k) in seen:
                continue
        except TypeError:  # an unhashable state under the default key: its frozen form
            k = _state_key(model, state)
            if (done, k) in seen:
                continue
        seen.add((done, k))
        explored += 1
        if explored > limit or (explored % 1024 == 0 and budget.out_of_time()):
            return Search(UNKNOWN, explored, _states_spent(budget) if explored > limit else budget.spent_reason())
        if (placed := done.bit_count()) > longest:
            longest, stuck = placed, state
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
            if not done >> i & 1 and (after := model.step(state, hist[i])) is not None:
                children.append((done | 1 << i, after))
        if k is not state and _state_key(model, state) != k:
            raise ModelError(f"model {model.name}: step modified its state in place (it must return a new one)")
        stack.extend(reversed(children))  # earliest invoked first
    return Search(VIOLATION, explored, linearized=longest, state=stuck)


def _states_spent(budget: Budget) -> str:
    return f"search budget of {budget.max_states} states spent"


@dataclass
class Shrunk:
    """A failing sub-history (:func:`shrink`): ``minimal`` unless the budget ran out first
    (``reason``); ``search``: its own failing search (re-checked, never one that passes)."""

    ops: list[Operation]
    minimal: bool
    search: Search
    reason: str = ""


class _Shrinker:
    """The shrink's state: the current failing sub-history, what was spent, and why it stopped."""

    def __init__(self, model: Model, budget: Budget, max_checks: int, ops: list[Operation], search: Search) -> None:
        self.model, self.budget, self.max_checks = model, budget, max_checks
        self.current, self.search = ops, search
        self.checks = 0
        self.stopped = ""  # why it stopped early (the budget); empty while it may go on

    def fails(self, candidate: list[Operation], dropped: Sequence[Operation]) -> bool:
        """Does ``candidate`` fail as shown (the full search) and stand for the current history (the
        model may drop ``dropped``)? On yes it becomes the current history."""
        if self.stopped or not candidate:
            return False
        if self.checks >= self.max_checks:
            self.stopped = f"{self.max_checks} checks run"
        elif self.budget.out_of_time() or self.budget.spent >= self.budget.max_states:
            self.stopped = self.budget.spent_reason()
        if self.stopped:
            return False
        self.checks += 1
        if dropped and not self.model.may_drop(candidate, dropped):
            return False
        got = linearizable(candidate, self.model, budget=self.budget)
        if got.verdict == UNKNOWN:
            self.stopped = got.reason
        if got.verdict != VIOLATION:
            return False
        self.current, self.search = candidate, got
        return True

    def prefix(self) -> None:
        """A failing prefix (by invocation): the ops after the failure rarely matter."""
        ops = self.current
        lo, hi = 1, len(ops)
        while lo < hi and not self.stopped:
            mid = (lo + hi) // 2
            if self.fails(ops[:mid], ops[mid:]):  # the current history is now the shortest failing prefix
                hi = mid
            else:
                lo = mid + 1

    def relax(self) -> None:
        """Each op the model can weaken, weakened where the history still fails."""
        for i, o in enumerate(self.current):
            weaker = self.model.relax(o)
            if weaker is not None:
                self.fails([*self.current[:i], weaker, *self.current[i + 1 :]], ())

    def remove(self) -> None:
        """ddmin-style: chunks, then single ops until no single op can go."""
        chunk = max(1, len(self.current) // 2)
        while not self.stopped:
            changed, i = False, 0
            while i < len(self.current) and not self.stopped:
                cur = self.current
                if self.fails(cur[:i] + cur[i + chunk :], cur[i : i + chunk]):
                    changed = True
                    continue
                i += chunk
            if chunk == 1 and not changed:
                break
            chunk = max(1, chunk // 2)


def shrink(
    ops: Sequence[Operation],
    model: Model,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    max_seconds: float | None = None,
    max_checks: int = DEFAULT_MAX_CHECKS,
    budget: Budget | None = None,
    decided: Search | None = None,
) -> Shrunk:
    """A minimal non-linearizable sub-history of ``ops`` (no single op can be dropped, as the model's
    :meth:`Model.may_drop` allows, with the rest still failing), within ``budget`` (shared with the
    decision; by default ``max_states`` / ``max_seconds``) and ``max_checks`` searches: when they run
    out, the smallest failing one found so far, not minimal. ``decided``: the search that found
    ``ops`` non-linearizable; without it, ``ops`` are searched first (ValueError if they do not fail)."""
    budget = budget or Budget(max_states, max_seconds)
    current = _relevant(ops, model)
    if decided is None:
        decided = linearizable(current, model, budget=budget)
    if decided.verdict != VIOLATION:
        raise ValueError(f"shrink: the history is not shown non-linearizable ({decided.verdict} {decided.reason})")
    s = _Shrinker(model, budget, max_checks, current, decided)
    s.prefix()
    s.relax()
    s.remove()
    return Shrunk(s.current, not s.stopped, s.search, s.stopped)


# ---------------------------------------------------------------------------------------------- histories


@dataclass
class KeyVerdict:
    """The verdict on one key (one object) of one run; a violation's ``minimal`` sub-history, which is
    not minimal when ``minimal_complete`` is False (the budget ran out while shrinking, ``reason``)."""

    key: str
    model: str
    verdict: str
    ops: int
    explored: int
    reason: str = ""
    minimal: list[Operation] = field(default_factory=list)
    minimal_complete: bool = True
    stuck: str = ""  # a violation: how far the sub-history linearizes, and the state it is left in
    spec: Model | None = field(default=None, repr=False, compare=False)  # what describes ops and states

    def texts(self) -> list[str]:
        """The minimal sub-history's ops as the model describes them."""
        return [self.spec.describe_op(o) if self.spec is not None else o.describe() for o in self.minimal]

    def describe(self) -> str:
        if self.verdict == VIOLATION:
            shown = "minimal sub-history" if self.minimal_complete else f"sub-history (not minimal: {self.reason})"
            stuck = f" ({self.stuck})" if self.stuck else ""
            return f"key {self.key}: not linearizable ({self.ops} ops); {shown}{stuck}: " + "; ".join(self.texts())
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
            "minimal": [o.as_dict(t) for o, t in zip(self.minimal, self.texts(), strict=True)],
            "minimal_complete": self.minimal_complete,
            "stuck": self.stuck,
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
    budget: Budget | None = None,
) -> KeyVerdict:
    """Check one key's history with ``model`` (by default :func:`model_for` the ops); a violation comes
    with its minimal sub-history. ``budget`` (by default ``max_states`` and ``max_seconds``) bounds
    deciding and shrinking together."""
    model = model or model_for(ops)
    if model.name == "counter" and any(o.f == "add" and o.value is None for o in ops):
        return KeyVerdict(key, model.name, UNKNOWN, len(ops), 0, "adds recorded without their delta (no arg column)")
    budget = budget or Budget(max_states, max_seconds)
    got = linearizable(ops, model, budget=budget)
    verdict = KeyVerdict(key, model.name, got.verdict, len(ops), got.explored, got.reason, spec=model)
    if got.verdict == VIOLATION and minimise:
        shrunk = shrink(ops, model, budget=budget, decided=got)
        verdict.minimal, verdict.minimal_complete, verdict.reason = shrunk.ops, shrunk.minimal, shrunk.reason
        verdict.stuck = (
            f"at most {shrunk.search.linearized} of {len(shrunk.ops)} ops linearize, "
            f"leaving {model.describe_state(shrunk.search.state)}"
        )
    return verdict


def partition(ops: Iterable[Operation], model: Model | None = None) -> dict[str, list[Operation]]:
    """Ops per object (:meth:`Model.partition_key`; without a model: per kv key, the counter's under
    :data:`COUNTER_KEY`)."""
    key = (model or Model()).partition_key
    out: dict[str, list[Operation]] = defaultdict(list)
    for o in ops:
        out[key(o)].append(o)
    return dict(out)


def check_history(
    ops: Sequence[Operation],
    *,
    model: Model | None = None,
    max_states: int = DEFAULT_MAX_STATES,
    max_seconds: float | None = DEFAULT_MAX_SECONDS,
) -> HistoryVerdict:
    """Check a whole history object by object with ``model`` (by default each key's
    :func:`model_for`: a kv register per key, or the counter). The budget is per object."""
    out = HistoryVerdict(clients=len({o.client for o in ops}), ops=len(ops))
    for key, key_ops in sorted(partition(ops, model).items()):
        out.keys.append(check_key(key, key_ops, model, max_states=max_states, max_seconds=max_seconds))
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
    "Budget",
    "CounterModel",
    "HistoryVerdict",
    "KeyVerdict",
    "Model",
    "ModelError",
    "Operation",
    "RegisterModel",
    "Search",
    "Shrunk",
    "check_history",
    "check_key",
    "freeze",
    "has_concurrency",
    "linearizable",
    "model_for",
    "operations_from_rows",
    "partition",
    "shrink",
]
