"""Planted bugs in the ledger, for the guide and the suite to show the checks catching a service's
own bugs black-box (the workload and model are the ordinary ones):

* ``stale_balance``: ``balance`` answers from a cache that deposits do not refresh, so a read can
  miss an acknowledged deposit (caught by the model: linearizability, or the reply-by-reply check);
* ``wall_clock``: a deposit also counts the wall clock's parity into the state, so members that
  apply the same log hold different states (caught by the digest agreement check and the tripwire);
* ``forgets_snapshot_field``: the snapshot leaves the holds out, so a ledger restored from it holds
  different state (caught by the snapshot round-trip check, even when no member restarts);
* ``hash_order``: a deposit also records the order in which a set of account names iterates, an
  order that depends on the process's hash seed (caught by the agreement check on real processes,
  where members run with distinct hash seeds, and by the replay-equivalence check in the simulator,
  where all members share one process).

and one per tripwire (clusterlab.harness.tripwire), each caught by the ``tripwire`` check at its line:

* ``unseeded_random``: every request draws from the module-level ``random`` (a deposit may pay a bonus);
* ``uuid_ids``: a deposit files a receipt under a ``uuid.uuid4()`` name;
* ``thread_start``: a deposit starts an audit thread;
* ``role_dependent``: the leader also counts a fee for each deposit (``cluster.role`` decides state).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
import zlib
from typing import Any

from clusterlab.core.service.api import Cluster, Role, SnapshotImage, SnapshotWriter

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
    """A deposit also notes the order in which a set of account names yields them."""

    def execute(self, payload: bytes) -> dict[str, Any]:
        reply = super().execute(payload)
        if b'"deposit"' in payload and self.accounts:
            names = set(sorted(self.accounts))  # built in one order here and after a restore alike
            order = ",".join(names)  # the bug: a set of strings iterates in hash order
            self._set_account("first", 0, zlib.crc32(order.encode()))
        return reply


def stale_balance() -> Ledger:
    return StaleBalance()


def wall_clock() -> Ledger:
    return WallClock()


def forgets_snapshot_field() -> Ledger:
    return ForgetsSnapshotField()


def hash_order() -> Ledger:
    return HashOrder()


class UnseededRandom(Ledger):
    """A deposit may pay a bonus the global ``random`` draws."""

    def execute(self, payload: bytes) -> dict[str, Any]:
        reply = super().execute(payload)
        lucky = random.random() < 0.5  # the bug: unseeded, a different draw on every member
        if b'"deposit"' in payload and lucky:
            self._set_account("bonus", len(self.accounts), 0)
        return reply


class UuidIds(Ledger):
    """A deposit files a receipt named by ``uuid4``."""

    def execute(self, payload: bytes) -> dict[str, Any]:
        reply = super().execute(payload)
        if b'"deposit"' in payload:
            self._set_account(f"receipt-{uuid.uuid4().hex[:8]}", 0, 0)  # the bug: a random name per member
        return reply


class ThreadStart(Ledger):
    """A deposit starts an audit thread (and waits for it)."""

    def execute(self, payload: bytes) -> dict[str, Any]:
        reply = super().execute(payload)
        if b'"deposit"' in payload:
            audit = threading.Thread(target=self._items, daemon=True)
            audit.start()  # the bug: a thread inside a callback
            audit.join()
        return reply


class RoleDependent(Ledger):
    """The leader counts a fee for each deposit; followers do not."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster: Cluster | None = None

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        super().on_start(cluster, snapshot)
        self.cluster = cluster

    def execute(self, payload: bytes) -> dict[str, Any]:
        reply = super().execute(payload)
        if b'"deposit"' in payload and self.cluster is not None and self.cluster.role is Role.LEADER:
            fees = self.accounts.get("fees", [0, 0])[0]
            self._set_account("fees", fees + 1, 0)  # the bug: only the leader's state changes
        return reply


def unseeded_random() -> Ledger:
    return UnseededRandom()


def uuid_ids() -> Ledger:
    return UuidIds()


def thread_start() -> Ledger:
    return ThreadStart()


def role_dependent() -> Ledger:
    return RoleDependent()
