"""One PySyncObj node process: a replicated dict, with a control socket that runs the load driver.

Run (by :class:`benchmarks.cluster_bench.PySyncObjSubject`, never by hand)::

    python -m benchmarks.peers.pysyncobj_node --self 127.0.0.1:P --partners 127.0.0.1:Q,127.0.0.1:R \
        --profile default|fast --parent-pid PID [--max-seconds S]

PySyncObj has no client protocol: its clients are threads of a member process calling
``@replicated`` methods with a callback. So the load driver of :mod:`benchmarks.peers.common` runs
here, in this process's main thread, against :class:`InProcessClient` (``put(key, value,
callback=…)``; an op counts when its callback reports ``FAIL_REASON.SUCCESS``). The bench sends it
to the leader for throughput and latency (the best case for PySyncObj: no forwarding hop), and to
both survivors for the failover probe.

Profiles: ``default`` is ``SyncObjConf()`` untouched (election timeout 0.4-1.4 s, append-entries
period 0.1 s); ``fast`` is ~100 ms detection (election timeout 0.1-0.2 s, append-entries period
30 ms); ``nobatch`` is ``default`` with ``appendEntriesUseBatch=False``
(entries go out as they are appended, not every append-entries period: lower latency, fewer ops/s).
All keep the log in memory (no journal file).

Control requests (JSON): ``status`` (from ``SyncObj.getStatus()``), ``saturation``, ``paced``,
``probe``, ``exit``. The process stops on SIGTERM, when its parent goes away, or after
``--max-seconds``.
"""

from __future__ import annotations

import argparse
import functools
import threading
import time
from collections import deque
from typing import Any

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

from benchmarks.peers.common import (
    ChildLife,
    add_child_args,
    announce_ready,
    payload_of,
    run_paced,
    run_probe,
    run_saturation,
    serve_control,
)

KEYS = 256  # the dict stays small, so PySyncObj's periodic log compaction stays cheap

PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "fast": {
        "raftMinTimeout": 0.1,
        "raftMaxTimeout": 0.2,
        "appendEntriesPeriod": 0.03,
        # connectionTimeout stays at its 3.5 s default: followers exchange nothing while a leader
        # lives, so a short one drops the follower-follower link, and after a leader kill the
        # survivors then wait connectionRetryTime (5 s) to reconnect before they can elect
    },
    # default timeouts, but each command is sent to the followers at once instead of every
    # appendEntriesPeriod (PySyncObj's documented latency-over-throughput switch)
    "nobatch": {"appendEntriesUseBatch": False},
}


def make_conf(profile: str) -> SyncObjConf:
    conf = SyncObjConf(**PROFILES[profile])
    conf.validate()
    return conf


class ReplicatedDict(SyncObj):
    """The replicated state machine: a dict and a counter of applied puts."""

    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_addr, partners, conf)
        self._data: dict[int, bytes] = {}
        self._applied = 0

    @replicated
    def put(self, key: int, value: bytes) -> int:
        self._data[key] = value
        self._applied += 1
        return self._applied


class InProcessClient:
    """:class:`benchmarks.peers.common.AckClient` over ``put(…, callback=…)``.

    Callbacks arrive on PySyncObj's tick thread; they go through a deque to the driver's thread.
    """

    def __init__(self, obj: ReplicatedDict) -> None:
        self.obj = obj
        self.done: deque[tuple[int, bool]] = deque()
        self.wake = threading.Event()

    def _callback(self, rid: int, _result: Any, err: int) -> None:
        self.done.append((rid, err == FAIL_REASON.SUCCESS))
        self.wake.set()

    def offer(self, rid: int, payload: bytes) -> bool:
        self.obj.put(rid % KEYS, payload, callback=functools.partial(self._callback, rid))
        return True

    def poll(self, timeout_s: float) -> tuple[list[int], list[int]]:
        if not self.done and timeout_s > 0:
            self.wake.wait(timeout_s)
        self.wake.clear()
        acked: list[int] = []
        bad: list[int] = []
        while self.done:
            rid, ok = self.done.popleft()
            (acked if ok else bad).append(rid)
        return acked, bad


def status_of(obj: ReplicatedDict) -> dict[str, Any]:
    """The node's view from PySyncObj's status API (``getStatus()``), JSON-friendly."""
    for _ in range(5):  # getStatus iterates dicts the tick thread may be resizing
        try:
            s = obj.getStatus()
            break
        except RuntimeError:
            time.sleep(0.001)
    else:
        s = obj.getStatus()
    partners = [k for k in s if k.startswith("partner_node_status_server_")]
    leader = s.get("leader")
    return {
        "self": str(s["self"].id if hasattr(s["self"], "id") else s["self"]),
        "state": int(s["state"]),  # 0 follower, 1 candidate, 2 leader
        "leader": None if leader is None else str(getattr(leader, "id", leader)),
        "has_quorum": bool(s["has_quorum"]),
        "partners_connected": sum(1 for k in partners if s[k] == 2),
        "partners": len(partners),
        "commit_idx": int(s["commit_idx"]),
        "last_applied": int(s["last_applied"]),
        "term": int(s["raft_term"]),
        "ready": bool(obj.isReady()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--self", dest="self_addr", required=True)
    parser.add_argument("--partners", required=True)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    add_child_args(parser)
    args = parser.parse_args()
    life = ChildLife(args.parent_pid, args.max_seconds)
    obj = ReplicatedDict(args.self_addr, args.partners.split(","), make_conf(args.profile))

    def handle(req: dict[str, Any]) -> dict[str, Any]:
        cmd = req.get("cmd")
        if cmd == "status":
            return status_of(obj)
        if cmd == "exit":
            return {"ok": True}
        client = InProcessClient(obj)
        payload = payload_of(int(req.get("size", 64)))
        if cmd == "saturation":
            return run_saturation(client, payload, int(req["window"]), float(req["warmup"]), float(req["duration"]))
        if cmd == "paced":
            return run_paced(
                client,
                payload,
                float(req["rate"]),
                float(req["warmup"]),
                float(req["duration"]),
                max_outstanding=int(req.get("max_outstanding", 100_000)),
            )
        if cmd == "probe":
            return run_probe(client, payload, float(req["interval"]), float(req["timeout"]))
        raise ValueError(f"unknown command {cmd!r}")

    try:
        serve_control(life, handle, lambda endpoint: announce_ready({"control": endpoint, "self": args.self_addr}))
    finally:
        obj.destroy()


if __name__ == "__main__":
    main()
