"""The ledger's workload and its linearizability model (clusterlab.chaos.workload_api).

Per account (a key, ``a0`` ..), a seeded mix of deposits, holds, captures, releases and balance reads;
hold ids are unique per op (``h<op id>``), captures and releases name a hold issued on that account
before (or ``h0``, which never exists). The model of one account is (available, held, holds): every
reply's ``[available, held]`` must be what the op leaves.
"""

from __future__ import annotations

import json
import random
from typing import Any

from clusterlab.chaos.linearizability import OK, Model, Operation
from clusterlab.chaos.workload_api import Op, ServiceWorkload

MIX = {"deposit": 0.3, "hold": 0.25, "capture": 0.1, "release": 0.1, "balance": 0.25}
State = tuple[int, int, tuple[tuple[str, int], ...]]  # available, held, holds (sorted: hashable)


class LedgerModel(Model):
    """One account; ``step`` returns None when an op (with its result) is impossible."""

    name = "ledger"
    init: State = (0, 0, ())

    def step(self, state: State, op: Operation) -> State | None:
        available, held, holds = state
        open_holds = dict(holds)
        after: State = state
        if op.f == "deposit":
            after = (available + int(op.value), held, holds)
        elif op.f == "hold":
            hold, _, text = str(op.value).partition(":")
            amount = int(text)
            if available >= amount and hold not in open_holds:
                after = (available - amount, held + amount, tuple(sorted({**open_holds, hold: amount}.items())))
        elif op.f in ("capture", "release") and op.value in open_holds:
            amount = open_holds.pop(str(op.value))
            back = amount if op.f == "release" else 0
            after = (available + back, held - amount, tuple(sorted(open_holds.items())))
        elif op.f not in ("capture", "release", "balance"):
            return None
        if op.status == OK and op.checked and list(op.result or []) != [after[0], after[1]]:
            return None  # the reply is not what the op leaves
        return after


class LedgerWorkload(ServiceWorkload):
    """See the module docstring."""

    name = "ledger"
    model = LedgerModel()

    def __init__(self) -> None:
        super().__init__()
        self.issued: dict[str, list[str]] = {}  # account -> hold ids issued on it

    def next_op(self, rng: random.Random, op_id: int, key: str | None, client: int, now: float, concurrent: bool) -> Op:
        account = str(key)
        f = rng.choices(list(MIX), weights=list(MIX.values()))[0]
        value: str | None = None
        if f == "deposit":
            value = str(rng.randrange(1, 10))
        elif f == "hold":
            value = f"h{op_id}:{rng.randrange(1, 8)}"
            self.issued.setdefault(account, []).append(f"h{op_id}")
        elif f in ("capture", "release"):
            value = rng.choice(self.issued.get(account) or ["h0"])
        return Op(op_id, f, account, value, now, client)

    def final_read(self, op_id: int, key: str | None, client: int, now: float) -> Op:
        return Op(op_id, "balance", key, None, now, client, final=True)

    def payload(self, op: Op, request_id: int) -> bytes:
        return json.dumps({"id": request_id, "op": op.f, "key": op.key, "value": op.value}).encode()

    def decode_reply(self, payload: bytes) -> dict[str, Any]:
        reply = json.loads(payload)
        if not isinstance(reply, dict):
            raise ValueError("not a ledger reply")
        return reply


def make() -> LedgerWorkload:
    """The factory clusterlab names: ``ledger.workload:make``."""
    return LedgerWorkload()
