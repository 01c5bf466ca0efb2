"""The workload interface: what a chaos run needs to know about a clustered service to drive it with
seeded requests, turn its replies into a Jepsen-style history and judge that history.

A workload is a class deriving from :class:`ServiceWorkload`, named ``package.module:factory`` (the
factory: a class or function called with no arguments, returning a fresh instance for one run). The
generic driver (:mod:`clusterlab.chaos.workload`) owns pacing, clients, sessions, timeouts, key
retirement, the final reads and the recording; the workload says, per op:

* **generation** — :meth:`ServiceWorkload.next_op`: given the run's seeded ``random.Random`` (the
  only randomness a workload may use, so a seed replays exactly), the op id, the key the driver
  chose (``k0`` .. ``k{keys-1}``, or None for a service that is one object: ``keyed = False``) and
  the client index, the next :class:`~clusterlab.chaos.workload.Op`;
* **requests** — :meth:`ServiceWorkload.payload`: the op's request bytes for a request id. On real
  processes the client speaks JSON: a request is a JSON object with ``id`` (the request id) and
  ``op`` (and, if present, ``key`` and ``value``, which the trace's ``ops`` table records);
* **replies** — :meth:`ServiceWorkload.decode_reply`: egress bytes -> a dict with ``id`` (the request
  id it answers; ValueError if the bytes are no reply), ``error`` when the service refused the op
  (a ``fail``: it changed nothing) and ``value``, the result the history keeps;
* **resending** — ``resend = True`` when the service applies a request once however often it arrives
  (it deduplicates on the ``client`` field the real client adds to every JSON request): the client
  then resends unanswered requests across leader changes; otherwise an op is sent once and silence
  makes it ``info`` (outcome unknown);
* **checking** — :meth:`on_reply` / :meth:`on_unknown` see every outcome of a single client's ops in
  order (one op per key outstanding, so the workload knows what each reply must say; raise
  :func:`violation` when it is wrong); :meth:`check_final_read` judges a final read of concurrent
  clients; ``model``: an optional :class:`clusterlab.chaos.linearizability.Model` of one key (or of
  the one object), with which the history of concurrent clients is checked for linearizability;
  :meth:`operation` maps an op to the checker's :class:`~clusterlab.chaos.linearizability.Operation`;
* **final reads** — after the last fault every key used is read once (:meth:`final_read`), and each
  read must return a value some order of the acknowledged and unknown ops allows.
"""

from __future__ import annotations

import json
import os
import random
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from clusterlab.chaos.linearizability import (
    COUNTER_KEY,
    FAIL,
    INFO,
    OK,
    HistoryVerdict,
    Model,
    Operation,
    check_history,
)
from clusterlab.core.runtime.plugin import import_object
from clusterlab.core.service.api import ClusteredService
from clusterlab.harness.invariants import SafetyViolation
from clusterlab.harness.trace import TraceError
from clusterlab.harness.tripwire import user_site

ENTRY_POINT_GROUP = "clusterlab.workloads"  # installed workloads: name = package.module:factory


@dataclass
class Op:
    """One operation of the history (``outcome``: None while outstanding, then ok / fail / info).
    ``value`` and ``arg`` are a workload's to use (recorded and shown to the checker by default); the
    sample workloads also use the named fields below."""

    op_id: int
    f: str
    key: str | None
    value: str | None
    invoked_at: float
    client: int = 0  # which of the workload's clients runs it
    expected: str | None = None  # kv cas: the value expected
    delta: int = 0  # counter add
    timer: int = 0  # timers: the alarm set or cancelled
    delay_ms: int = 0  # timers: an alarm's delay
    final: bool = False  # a read of the final phase (checked against every possible outcome)
    completed_at: float | None = None
    outcome: str | None = None
    reply: dict[str, Any] | None = None
    arg: Any = None  # a workload's other argument (JSON-able)

    def describe(self) -> str:
        what = {
            "put": f"{self.key}={self.value}",
            "cas": f"{self.key} {self.expected}->{self.value}",
            "add": f"+{self.delta}",
        }.get(self.f, " ".join(str(x) for x in (self.key, self.value, self.arg) if x is not None))
        return f"op {self.op_id} {self.f} {what}".rstrip()


def _object(op: Op) -> str:
    return COUNTER_KEY if op.key is None else op.key


def violation(op: Op, what: str) -> NoReturn:
    """Fail the run: ``op``'s reply contradicts what the acknowledged history says."""
    raise SafetyViolation(f"acknowledged history broken: {op.describe()} got {op.reply}: {what}")


def check_not_refused(op: Op, reply: dict[str, Any]) -> None:
    """The workload only sends well-formed requests: an ``error`` reply is a violation."""
    if "error" in reply:
        violation(op, "the service refused a well-formed request")


class ServiceWorkload(ABC):
    """One run's workload of one service (see the module docstring); an instance per run."""

    name: str = "?"  # names the run's random stream: ``workload:<name>:<seed>``
    keyed: bool = True  # ops address keys k0..; False: the service is one object (the op's key is None)
    resend: bool = False  # the service deduplicates requests: unanswered ones may be resent
    max_clients: int | None = None  # the most concurrent clients it supports (None: any)
    model: Model | None = None  # the linearizability model of one key (None: no such check)

    def __init__(self) -> None:
        self.checked = 0  # replies checked against what the history says (a run reports it)
        self._states: dict[str, set[Any]] = {}  # the default check: key -> the states it may be in

    @abstractmethod
    def next_op(self, rng: random.Random, op_id: int, key: str | None, client: int, now: float, concurrent: bool) -> Op:
        """The next op of ``client`` on ``key``, drawn from ``rng`` only."""

    @abstractmethod
    def payload(self, op: Op, request_id: int) -> bytes:
        """The request bytes of ``op`` (the reply must carry ``request_id`` as ``id``)."""

    @abstractmethod
    def decode_reply(self, payload: bytes) -> dict[str, Any]:
        """A reply as a dict with ``id``; ValueError if ``payload`` is not a reply."""

    def final_read(self, op_id: int, key: str | None, client: int, now: float) -> Op:
        """A read of ``key`` after the last fault (checked by :meth:`on_reply` / :meth:`check_final_read`)."""
        return Op(op_id, "get", key, None, now, client, final=True)

    def on_reply(self, op: Op, reply: dict[str, Any]) -> None:
        """A single client's op answered (ops on a key arrive in log order); raise :func:`violation` if
        wrong. By default: an ``error`` is wrong, and with a ``model`` the reply must be what the op
        gives in one of the states the key may be in (several after an op of unknown outcome)."""
        check_not_refused(op, reply)
        if self.model is not None and op.outcome == "ok":
            self._step_states(replace(op, reply=reply))
            self.checked += 1

    def on_unknown(self, op: Op) -> None:
        """A single client's op whose outcome is unknown: it may be applied now, later or never (by
        default, with a ``model``: the key may be in any state it was in, or that the op leaves)."""
        if self.model is not None:
            before = self._states.get(_object(op), {self.model.init})
            self._step_states(op)
            self._states[_object(op)] |= before

    def _step_states(self, op: Op) -> None:
        assert self.model is not None
        key = _object(op)
        before = self._states.get(key, {self.model.init})
        seen = self.operation(op)
        after = {got for state in before if (got := self.model.step(state, seen)) is not None}
        if not after:
            violation(op, f"no state the {self.model.name} model allows gives that reply")
        self._states[key] = after

    def on_seen(self, op: Op, reply: dict[str, Any]) -> None:  # noqa: B027 - an optional hook
        """Concurrent clients: ``op`` acknowledged with ``reply`` (e.g. to remember a key's last value)."""

    def check_final_read(self, op: Op, reply: dict[str, Any], ops: Sequence[Op]) -> None:  # noqa: B027
        """Concurrent clients: a final read answered; ``ops``: every other op on its key so far."""

    def record(self, op: Op) -> tuple[str | None, str | None]:
        """The (value, arg) the simulator's ``ops`` table records for ``op``'s invocation."""
        return op.value, None if op.arg is None else json.dumps(op.arg)

    def operation(self, op: Op) -> Operation:
        """``op`` as the linearizability checker sees it (in flight: outcome unknown)."""
        ok = op.outcome == "ok"
        return Operation(
            client=op.client,
            op_id=op.op_id,
            f=op.f,
            key=op.key,
            invoke=round(op.invoked_at * 1e9),
            complete=round(op.completed_at * 1e9) if ok and op.completed_at is not None else None,
            status={"ok": OK, "fail": FAIL}.get(op.outcome or "", INFO),
            value=op.value,
            arg=op.arg,
            result=(op.reply or {}).get("value") if ok else None,
        )


class WorkloadSpecError(ValueError):
    """A workload (or service) named ``package.module:factory`` that cannot be loaded."""


def import_factory(spec: str, what: str = "workload") -> Callable[[], Any]:
    """The callable ``package.module:factory`` names (WorkloadSpecError with one clear line if not)."""
    import_from_cwd()
    try:
        obj = import_object(spec)
    except ValueError as e:
        raise WorkloadSpecError(f"{what} {e}") from None
    if not callable(obj):
        raise WorkloadSpecError(f"{what} {spec!r}: {type(obj).__name__} is not callable")
    factory: Callable[[], Any] = obj
    return factory


def import_from_cwd() -> None:
    """Make the current directory importable, as ``python -m`` does (the ``clusterlab`` command's own
    path starts with its script's directory), so a user's ``package.module:factory`` is found there."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def made_by(spec: str, what: str, factory: Callable[[], Any]) -> Any:
    """What ``factory`` (named by ``spec``) makes; WorkloadSpecError naming the spec if calling it raises
    (it needs arguments, or fails as it builds)."""
    try:
        return factory()
    except Exception as e:
        raise WorkloadSpecError(f"{what} {spec!r}: calling the factory raised {type(e).__name__}: {e}") from None


# What the node calls on a service (each a method: a ClusteredService's own default when not defined).
_CALLBACKS = tuple(
    name for name, value in vars(ClusteredService).items() if not name.startswith("_") and callable(value)
)


def check_service_factory(spec: str) -> None:
    """Fail early, with one line, when ``package.module:factory`` does not make a ClusteredService."""
    made = made_by(spec, "service", import_factory(spec, "service"))
    if not isinstance(made, ClusteredService):
        raise WorkloadSpecError(f"service {spec!r} made {type(made).__name__} object, not a ClusteredService")
    for name in _CALLBACKS:
        if not callable(callback := getattr(made, name)):
            required = name in ClusteredService.__abstractmethods__
            fix = "every service defines it" if required else "or leave it out for the default"
            raise WorkloadSpecError(
                f"service {spec!r} made {type(made).__name__} whose {name} is {callback!r}, not a method; "
                f"define it with def, {fix}"
            )


def _entry_point(name: str) -> str | None:
    """The ``package.module:factory`` an installed ``clusterlab.workloads`` entry point names."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return str(ep.value)
    return None


def load_workload(spec: str, builtin: dict[str, Callable[[], ServiceWorkload]]) -> ServiceWorkload:
    """A fresh workload: a name of ``builtin``, an installed entry point, or ``package.module:factory``."""
    if spec in builtin:
        return builtin[spec]()
    target = spec if ":" in spec else _entry_point(spec)
    if target is None:
        raise WorkloadSpecError(
            f"no workload {spec!r}: use one of {', '.join(builtin)}, package.module:factory "
            f"or an installed {ENTRY_POINT_GROUP} entry point"
        )
    made = made_by(spec, "workload", import_factory(target))
    if not isinstance(made, ServiceWorkload):
        raise WorkloadSpecError(f"workload {spec!r}: {target} returned {type(made).__name__}, not a ServiceWorkload")
    return made


def history_verdict(ops: Sequence[Operation], meta: dict[str, Any]) -> HistoryVerdict:
    """A run's history judged for linearizability with its workload's model (run.json's
    ``workload.workload``), the sample services' models when it names none. A workload without a
    model judges no key; one that cannot be imported here, or whose model raises (a ModelError: its
    contract broken), raises TraceError naming where: the run is not judged."""
    spec = (meta.get("workload") or {}).get("workload")
    if not spec:
        return check_history(ops)
    try:
        model = load_workload(str(spec), {}).model
    except WorkloadSpecError as e:  # the history cannot be judged without its model: not a PASS
        raise TraceError(f"the run's {e}; check it where that package is importable") from None
    if model is None:
        return HistoryVerdict(clients=len({o.client for o in ops}), ops=len(ops))
    try:
        return check_history(ops, model=model)
    except Exception as e:  # the model broke its contract or raised: no verdict, never a FAIL or a PASS
        site = user_site(e)
        raise TraceError(
            f"the run's workload {spec}: its model cannot judge the history: {type(e).__name__}: {e}"
            + (f" (at {site})" if site else "")
        ) from e


__all__ = [
    "ENTRY_POINT_GROUP",
    "Op",
    "ServiceWorkload",
    "WorkloadSpecError",
    "check_not_refused",
    "check_service_factory",
    "history_verdict",
    "import_factory",
    "import_from_cwd",
    "load_workload",
    "violation",
]
