"""Workloads: clients driving the kv service while nemeses act, keeping a Jepsen-style history.

On a real cluster the history goes to the trace's ``ops`` table (LocalClient records every invoke and
its ok / fail / info); in the simulator ``harness.workload.KvWorkload`` keeps it and the recorder
writes it. Both count acknowledgements with their time, which is how failover is measured: from a
leader SIGKILL to the first op acknowledged after it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from core.consensus.context import SECOND
from harness.local import LocalClientTimeout
from harness.services import kv
from harness.workload import KvWorkload


@dataclass
class Workload:
    """What every workload reports."""

    ack_times: list[float] = field(default_factory=list)  # target time of each acknowledgement
    invoked: int = 0
    unknown: int = 0  # ops without a reply in time (outcome unknown: ``info``)

    @property
    def acked(self) -> int:
        return len(self.ack_times)

    def first_ack_after(self, t: float) -> float | None:
        return next((a for a in self.ack_times if a > t), None)

    def step(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


@dataclass
class LocalKvWorkload(Workload):
    """One LocalClient putting unique values over a small key space at up to ``rate`` ops/s.

    A request that gets no reply within ``request_timeout_s`` (no leader: a partition, a kill) is
    recorded ``info`` and the next one is tried; the client reconnects by itself."""

    cluster: Any = None
    rate: float = 200.0
    keys: int = 16
    request_timeout_s: float = 3.0
    _client: Any = None
    _next_at: float = 0.0

    def step(self) -> None:
        now = time.monotonic()
        if now < self._next_at:
            time.sleep(min(self._next_at - now, 0.01))  # pacing the offered rate, not synchronisation
            return
        self._next_at = now + 1.0 / self.rate
        if self._client is None:
            self._client = self.cluster.client(connect=False)
        n = self.invoked
        self.invoked += 1
        key, value = f"k{n % self.keys}", f"c{self._client.client_id}-v{n}"
        try:
            self._client.request(lambda rid: kv.put(rid, key, value), timeout_s=self.request_timeout_s)
        except LocalClientTimeout:
            self.unknown += 1
            return
        self.ack_times.append(time.monotonic())

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


@dataclass
class SimKvWorkload(Workload):
    """harness.workload.KvWorkload (unique keys, one put per step) with acknowledgement times."""

    cluster: Any = None
    puts_per_step: int = 1
    inner: KvWorkload | None = None

    def __post_init__(self) -> None:
        self.inner = KvWorkload(self.cluster)

    def step(self) -> None:
        assert self.inner is not None
        before = len(self.inner.acked)
        self.inner.step(self.puts_per_step)
        self.invoked = self.inner.invoked
        now = self.cluster.now_ns / SECOND
        self.ack_times.extend([now] * (len(self.inner.acked) - before))

    def close(self) -> None:
        if self.inner is not None:
            self.inner.collect()
