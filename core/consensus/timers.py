"""Aeron's ``PriorityHeapTimerService``: the consensus module's timers, keyed by correlation id.

A binary min-heap of entries plus a correlation id -> entry map, so schedule, reschedule and cancel
are O(log n) and ``poll`` pops expired timers earliest first. Aeron orders the heap by deadline only,
so timers sharing a deadline fire in an order that depends on the heap's history; we break ties by
correlation id, which makes the firing order a function of the timer *set* alone. That matters
because a new leader may have rebuilt its heap from a snapshot while the old one built it op by op:
both must append the same TimerEvents in the same order.

Also here: Aeron's per-correlation-id "already expired" counter (``expiredTimerCountByCorrelationIdMap``
in ConsensusModuleAgent, docs/protocol.md b.13/b.15/e.10), used on followers and during replay where a
TimerEvent can be read from the log before the service's ScheduleTimer for it arrives.

Pure and deterministic: no clock (``now`` is passed to ``poll``), no randomness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

POLL_LIMIT = 20  # Aeron TimerService.POLL_LIMIT: timers fired per duty cycle at most


class _Entry:
    __slots__ = ("correlation_id", "deadline", "index")

    def __init__(self, correlation_id: int, deadline: int, index: int) -> None:
        self.correlation_id = correlation_id
        self.deadline = deadline
        self.index = index

    def before(self, other: _Entry) -> bool:
        if self.deadline != other.deadline:
            return self.deadline < other.deadline
        return self.correlation_id < other.correlation_id


class TimerService:
    """Timers by correlation id, fired in (deadline, correlation_id) order."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._by_id: dict[int, _Entry] = {}
        self._expired_count: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, correlation_id: object) -> bool:
        return correlation_id in self._by_id

    def deadline(self, correlation_id: int) -> int | None:
        """The deadline of a scheduled timer, or None."""
        entry = self._by_id.get(correlation_id)
        return None if entry is None else entry.deadline

    def next_deadline(self) -> int | None:
        """The earliest deadline, or None when no timer is scheduled."""
        return self._heap[0].deadline if self._heap else None

    def schedule_timer(self, correlation_id: int, deadline: int) -> None:
        """Schedule a timer; an existing timer with the same id gets the new deadline instead."""
        entry = self._by_id.get(correlation_id)
        if entry is None:
            entry = _Entry(correlation_id, deadline, len(self._heap))
            self._heap.append(entry)
            self._by_id[correlation_id] = entry
            self._shift_up(entry.index)
        elif deadline < entry.deadline:
            entry.deadline = deadline
            self._shift_up(entry.index)
        elif deadline > entry.deadline:
            entry.deadline = deadline
            self._shift_down(entry.index)

    def cancel_timer(self, correlation_id: int) -> bool:
        """Cancel a timer; False if none was scheduled with that id."""
        entry = self._by_id.pop(correlation_id, None)
        if entry is None:
            return False
        self._remove_at(entry.index)
        return True

    def poll(
        self,
        now: int,
        limit: int = POLL_LIMIT,
        on_timer: Callable[[int, int], bool] | None = None,
    ) -> list[tuple[int, int]]:
        """Remove and return up to ``limit`` timers with ``deadline <= now``, earliest first.

        With ``on_timer(correlation_id, deadline)``, each timer is offered to it before removal and
        the poll stops at the first one it refuses (returns False), which stays scheduled: Aeron's
        TimerHandler contract, for a leader whose log append failed.
        """
        fired: list[tuple[int, int]] = []
        heap = self._heap
        while heap and len(fired) < limit:
            top = heap[0]
            if top.deadline > now:
                break
            if on_timer is not None and not on_timer(top.correlation_id, top.deadline):
                break
            del self._by_id[top.correlation_id]
            self._remove_at(0)
            fired.append((top.correlation_id, top.deadline))
        return fired

    def snapshot(self) -> list[tuple[int, int]]:
        """Every scheduled timer as (correlation_id, deadline), in firing order.

        Aeron walks its heap array; sorted order gives every member the same snapshot bytes for the
        same timer set."""
        return sorted(((e.correlation_id, e.deadline) for e in self._heap), key=lambda t: (t[1], t[0]))

    def restore(self, timers: Iterable[tuple[int, int]]) -> None:
        """Replace every timer with ``timers`` (from a snapshot). Expired counters are kept."""
        self._heap.clear()
        self._by_id.clear()
        for correlation_id, deadline in timers:
            self.schedule_timer(correlation_id, deadline)

    def clear(self) -> None:
        """Drop every timer and expired counter."""
        self._heap.clear()
        self._by_id.clear()
        self._expired_count.clear()

    # --- followers and replay: a TimerEvent in the log may precede its ScheduleTimer ---------------

    def on_replay_timer_event(self, correlation_id: int) -> None:
        """A TimerEvent was read from the log: cancel the timer, or if it is not scheduled yet
        remember that it already fired (Aeron ``onReplayTimerEvent``)."""
        if not self.cancel_timer(correlation_id):
            self._expired_count[correlation_id] = self._expired_count.get(correlation_id, 0) + 1

    def on_schedule_timer(self, correlation_id: int, deadline: int) -> bool:
        """A service's ScheduleTimer: schedule it, unless a TimerEvent for this id was already read
        from the log, in which case consume that and return False (Aeron ``onScheduleTimer``)."""
        count = self._expired_count.get(correlation_id, 0)
        if count == 0:
            self.schedule_timer(correlation_id, deadline)
            return True
        if count == 1:
            del self._expired_count[correlation_id]
        else:
            self._expired_count[correlation_id] = count - 1
        return False

    def expired_count(self, correlation_id: int) -> int:
        """How many TimerEvents for this id were read before their ScheduleTimer."""
        return self._expired_count.get(correlation_id, 0)

    # --- heap ---------------------------------------------------------------------------------------

    def _remove_at(self, index: int) -> None:
        heap = self._heap
        last = heap.pop()
        if index == len(heap):
            return
        heap[index] = last
        last.index = index
        # The moved entry can belong above or below its new slot.
        if index > 0 and last.before(heap[(index - 1) >> 1]):
            self._shift_up(index)
        else:
            self._shift_down(index)

    def _shift_up(self, index: int) -> None:
        heap = self._heap
        entry = heap[index]
        while index > 0:
            parent_index = (index - 1) >> 1
            parent = heap[parent_index]
            if not entry.before(parent):
                break
            heap[index] = parent
            parent.index = index
            index = parent_index
        heap[index] = entry
        entry.index = index

    def _shift_down(self, index: int) -> None:
        heap = self._heap
        size = len(heap)
        entry = heap[index]
        half = size >> 1
        while index < half:
            child_index = 2 * index + 1
            child = heap[child_index]
            right_index = child_index + 1
            if right_index < size and heap[right_index].before(child):
                child_index = right_index
                child = heap[right_index]
            if not child.before(entry):
                break
            heap[index] = child
            child.index = index
            index = child_index
        heap[index] = entry
        entry.index = index
