"""Two linearizability models written from the Model docstring alone (docs/linearizability.md,
"Writing your own model", shows this file): a key-value store whose state is a dict, and a counter."""

from __future__ import annotations

from typing import Any

from clusterlab.chaos.linearizability import OK, Model, Operation


class KvStoreModel(Model):
    """A key-value store. ``put`` returns the previous value, ``get`` the current one, ``delete`` the
    previous one, ``cas`` (``arg``: the expected value) the value after it. An absent key is None."""

    name = "kv-store"
    init: dict[str, Any] = {}  # key -> value; a dict is not hashable: states are compared by freeze()

    def step(self, state: dict[str, Any], op: Operation) -> dict[str, Any] | None:
        key = str(op.key)
        now = state.get(key)
        if op.f == "get":
            after, returned = now, now
        elif op.f == "put":
            after, returned = op.value, now
        elif op.f == "delete":
            after, returned = None, now
        elif op.f == "cas":
            after = op.value if now == op.arg else now
            returned = after
        else:
            raise ValueError(f"kv-store: unknown operation {op.f!r}")
        if op.status == OK and op.result != returned:
            return None  # it could not have returned that in this state
        new = {k: v for k, v in state.items() if k != key}  # a new state: never change the given one
        if after is not None:
            new[key] = after
        return new

    def removable(self, op: Operation) -> bool:
        return op.f == "get"  # a read changes nothing: the shrink may drop it

    def describe_op(self, op: Operation) -> str:
        call = f"{op.f}({op.key}" + (f", {op.arg!r}" if op.f == "cas" else "")
        call += f", {op.value!r})" if op.f in ("put", "cas") else ")"
        return f"client {op.client}: {call} -> " + (repr(op.result) if op.status == OK else "unknown")

    def describe_state(self, state: dict[str, Any]) -> str:
        return "{" + ", ".join(f"{k}: {v!r}" for k, v in sorted(state.items())) + "}"


class TallyModel(Model):
    """A counter: ``add`` (``value``: the delta) returns the total after it; any other op reads it."""

    name = "tally"
    init = 0

    def step(self, state: int, op: Operation) -> int | None:
        after = state + int(op.value) if op.f == "add" else state
        return None if op.status == OK and op.result != after else after

    def removable(self, op: Operation) -> bool:
        return op.f != "add"
