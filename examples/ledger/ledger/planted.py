"""Planted bugs in the ledger, for the guide and the suite to show the checks catching a service's
own bugs black-box (the workload and model are the ordinary ones):

* ``stale_balance``: ``balance`` answers from a cache that deposits do not refresh, so a read can
  miss an acknowledged deposit (caught by the model: linearizability, or the reply-by-reply check);
* ``wall_clock``: a deposit also counts the wall clock's parity into the state, so members that
  apply the same log hold different states (caught by the digest agreement check);
* ``forgets_snapshot_field``: the snapshot leaves the holds out, so a ledger restored from it holds
  different state (caught by the snapshot round-trip check, even when no member restarts);
* ``hash_order``: a deposit also records which account comes first when iterating a set of account
  names, an order that depends on the process's hash seed (caught by the agreement check on real
  processes, where members run with distinct hash seeds, and by the replay-equivalence check in the
  simulator, where all members share one process).
"""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

from clusterlab.core.service.api import SnapshotWriter

from ledger.service import Ledger, _dumps


class StaleBalance(Ledger):
    """``balance`` answers from a cache of the last non-deposit reply on the account."""

    def __init__(self) -> None:
        super().__init__()
        self.cached: dict[str, list[int]] = {}

    def execute(self, payload: bytes) -> dict[str, Any]:
        reply = super().execute(payload)
        command = json.loads(payload)
        key, value = command.get("key"), reply.get("value")
        if command.get("op") == "balance" and key in self.cached:
            reply["value"] = self.cached[key]  # the bug: deposits never refresh the cache
        elif command.get("op") != "deposit" and isinstance(value, list):
            self.cached[key] = list(value)
        return reply


class WallClock(Ledger):
    """A deposit may also change an account the clock picks."""

    def execute(self, payload: bytes) -> dict[str, Any]:
        reply = super().execute(payload)
        if b'"deposit"' in payload and time.time_ns() // 1000 % 2:  # the bug: state depends on the clock
            self._set_account("clock", 0, time.time_ns() % 7)
        return reply


class ForgetsSnapshotField(Ledger):
    """The snapshot writes the accounts but not the holds."""

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        for item in self._items():
            if item[0] == "account":  # the bug: the holds are left out
                writer.write(_dumps(list(item)))


class HashOrder(Ledger):
    """A deposit also notes the account a set of account names yields first."""

    def execute(self, payload: bytes) -> dict[str, Any]:
        reply = super().execute(payload)
        if b'"deposit"' in payload and self.accounts:
            first = next(iter(set(self.accounts)))  # the bug: a set of strings iterates in hash order
            self._set_account("first", 0, zlib.crc32(first.encode()) % 1000)
        return reply


def stale_balance() -> Ledger:
    return StaleBalance()


def wall_clock() -> Ledger:
    return WallClock()


def forgets_snapshot_field() -> Ledger:
    return ForgetsSnapshotField()


def hash_order() -> Ledger:
    return HashOrder()
