"""The process clock: ``time.monotonic_ns`` plus an offset the harness may set (clock-skew chaos).

CLOCK_MONOTONIC is shared by every process on the host, so the members' clocks agree unless an
offset is set. The clock never runs backwards: after a negative change of offset it stands still
until the monotonic clock has caught up (the consensus core assumes time only moves forward)."""

from __future__ import annotations

import time


class Clock:
    __slots__ = ("_last_ns", "offset_ns")

    def __init__(self, offset_ns: int = 0) -> None:
        self.offset_ns = offset_ns
        self._last_ns = 0

    def now_ns(self) -> int:
        t = time.monotonic_ns() + self.offset_ns
        if t < self._last_ns:
            return self._last_ns
        self._last_ns = t
        return t
