"""The ledger service: accounts with an available and a held balance.

Requests and replies are UTF-8 JSON objects (the clusterlab client's convention: a request carries
``id``, ``op``, ``key`` and ``value`` — the op's argument as text, which the trace records — and a
reply the request's ``id``):

* ``deposit``, value ``"5"``: available += 5;
* ``hold``, value ``"h2:3"``: moves 3 from available to held under hold ``h2``, if available covers
  it and ``h2`` is new (else ``ok`` false, nothing changes);
* ``capture``, value ``"h2"``: the held amount leaves the account;
* ``release``, value ``"h2"``: the held amount returns to available;
* ``balance``: reads.

Every reply is ``{"id": .., "ok": bool, "value": [available, held]}`` after the op (capture or
release of a hold the account does not have: ``ok`` false, nothing changes). A request that cannot
be parsed gets an ``error`` and changes nothing. The state digest is the sum of per-item hashes (an
account's balances, a hold), maintained incrementally; the snapshot holds every account and hold.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from clusterlab.core.codec import CloseReason
from clusterlab.core.service.api import ClientSession, Cluster, ClusteredService, Role, SnapshotImage, SnapshotWriter

_MOD = 1 << 128
Item = tuple[str, str, int | str, int]  # ("account", key, available, held) or ("hold", key, hold id, amount)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _item_hash(item: Item) -> int:
    return int.from_bytes(hashlib.blake2b(repr(item).encode(), digest_size=16).digest(), "little")


class Ledger(ClusteredService):
    """See the module docstring."""

    def __init__(self) -> None:
        self.accounts: dict[str, list[int]] = {}  # key -> [available, held]
        self.holds: dict[str, tuple[str, int]] = {}  # hold id -> (key, amount)
        self._digest = 0

    # --- the state and its digest
    def _items(self) -> list[Item]:
        items: list[Item] = [("account", k, a, h) for k, (a, h) in sorted(self.accounts.items())]
        return items + [("hold", k, hid, amount) for hid, (k, amount) in sorted(self.holds.items())]

    def _set_account(self, key: str, available: int, held: int) -> None:
        old = self.accounts.get(key)
        if old is not None:
            self._digest -= _item_hash(("account", key, old[0], old[1]))
        self.accounts[key] = [available, held]
        self._digest += _item_hash(("account", key, available, held))

    def _set_hold(self, hold: str, key: str, amount: int | None) -> None:
        old = self.holds.pop(hold, None)
        if old is not None:
            self._digest -= _item_hash(("hold", old[0], hold, old[1]))
        if amount is not None:
            self.holds[hold] = (key, amount)
            self._digest += _item_hash(("hold", key, hold, amount))

    def state_digest(self) -> bytes:
        return (self._digest % _MOD).to_bytes(16, "little")

    # --- the commands
    def execute(self, payload: bytes) -> dict[str, Any]:
        """Apply one request; the reply."""
        try:
            command = json.loads(payload)
            rid, op, key, arg = command["id"], command["op"], command["key"], command.get("value")
            if not isinstance(rid, int) or not isinstance(key, str):
                raise ValueError("id must be int, key str")
            hold, _, amount_text = str(arg).partition(":") if op == "hold" else (str(arg), "", "")
            amount = int(arg if op == "deposit" else amount_text or 0)
        except (ValueError, TypeError, KeyError) as e:
            return {"id": None, "ok": False, "error": f"bad request: {e}"}
        available, held = self.accounts.get(key, [0, 0])
        ok = True
        if op == "deposit" and amount > 0:
            available += amount
        elif op == "hold" and amount > 0:
            ok = available >= amount and hold not in self.holds
            if ok:
                available, held = available - amount, held + amount
                self._set_hold(hold, key, amount)
        elif op in ("capture", "release"):
            ok = self.holds.get(hold, ("", 0))[0] == key
            if ok:
                amount = self.holds[hold][1]
                self._set_hold(hold, key, None)
                available, held = available + (amount if op == "release" else 0), held - amount
        elif op != "balance":
            return {"id": rid, "ok": False, "error": f"bad request: op {op!r}"}
        if [available, held] != self.accounts.get(key, [0, 0]):
            self._set_account(key, available, held)
        return {"id": rid, "ok": ok, "value": [available, held]}

    # --- ClusteredService
    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.accounts, self.holds, self._digest = {}, {}, 0
        for record in snapshot.records if snapshot is not None else []:
            kind, key, a, b = json.loads(record)
            if kind == "account":
                self._set_account(key, a, b)
            else:
                self._set_hold(a, key, b)

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        reply = self.execute(payload)
        if session is not None:
            session.offer(_dumps(reply))

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        for item in self._items():
            writer.write(_dumps(list(item)))

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        pass

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        pass

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        pass

    def on_role_change(self, new_role: Role) -> None:
        pass

    def on_terminate(self, cluster: Cluster) -> None:
        pass


def make() -> Ledger:
    """The factory clusterlab names: ``ledger.service:make``."""
    return Ledger()
