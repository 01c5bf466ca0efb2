"""Ports of Aeron's ``PriorityHeapTimerServiceTest`` onto clusterlab.core.consensus.timers.TimerService.

Aeron's ``poll(now)`` calls a TimerHandler per expired timer and returns how many expired; ours
returns the expired (correlation id, deadline) pairs and takes the handler as ``on_timer``. A mocked
handler's ``InOrder`` verification is the order of the returned ids. Entries sharing a deadline fire
in correlation-id order here (Aeron: "undefined"); every expected order below is Aeron's."""

from __future__ import annotations

import random

from clusterlab.core.consensus.timers import POLL_LIMIT, TimerService

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


def scheduled(*timers: tuple[int, int]) -> TimerService:
    ts = TimerService()
    for correlation_id, deadline in timers:
        ts.schedule_timer(correlation_id, deadline)
    return ts


def ids(fired: list[tuple[int, int]]) -> list[int]:
    return [correlation_id for correlation_id, _ in fired]


def test_poll_is_a_no_op_when_no_timers_where_scheduled() -> None:
    """PriorityHeapTimerServiceTest.pollIsANoOpWhenNoTimersWhereScheduled"""
    calls: list[int] = []
    assert TimerService().poll(LONG_MIN, on_timer=lambda c, d: calls.append(c) or True) == []
    assert calls == []


def test_poll_is_a_no_op_when_no_scheduled_timers_are_expired() -> None:
    """PriorityHeapTimerServiceTest.pollIsANoOpWhenNoScheduledTimersAreExpired"""
    calls: list[int] = []
    assert scheduled((1, 100)).poll(7, on_timer=lambda c, d: calls.append(c) or True) == []
    assert calls == []


def test_poll_should_not_expire_timer_if_handler_returns_false() -> None:
    """PriorityHeapTimerServiceTest.pollShouldNotExpireTimerIfHandlerReturnsFalse"""
    calls: list[int] = []
    ts = scheduled((1, 100))
    assert ts.poll(LONG_MAX, on_timer=lambda c, d: bool(calls.append(c))) == []
    assert calls == [1]
    assert 1 in ts


def test_poll_should_expire_single_timer() -> None:
    """PriorityHeapTimerServiceTest.pollShouldExpireSingleTimer"""
    ts = scheduled((1, 100))
    assert ids(ts.poll(200)) == [1]
    assert ts.poll(200) == []


def test_poll_should_removed_expired_timers() -> None:
    """PriorityHeapTimerServiceTest.pollShouldRemovedExpiredTimers"""
    ts = scheduled((1, 100), (2, 200), (3, 300), (4, 400), (5, 500))
    first = ts.poll(200)
    second = ts.poll(500)
    assert (len(first), len(second)) == (2, 3)
    assert ids(first + second) == [1, 2, 3, 4, 5]


def test_poll_should_expire_timers_in_order_of_deadline_but_within_the_deadline_order_is_undefined() -> None:
    """PriorityHeapTimerServiceTest.pollShouldExpireTimersInOrderOfDeadlineButWithinTheDeadlineOrderIsUndefined"""
    ts = scheduled((1, 10), (4, 3), (2, 0), (3, 3), (5, 0), (6, 11))
    assert ids(ts.poll(10)) == [2, 5, 3, 4, 1]


def test_cancel_timer_by_correlation_id_is_a_no_op_if_no_timers_registered() -> None:
    """PriorityHeapTimerServiceTest.cancelTimerByCorrelationIdIsANoOpIfNoTimersRegistered"""
    assert not TimerService().cancel_timer(100)


def test_cancel_timer_by_correlation_id_returns_false_for_unknown_correlation_id() -> None:
    """PriorityHeapTimerServiceTest.cancelTimerByCorrelationIdReturnsFalseForUnknownCorrelationId"""
    assert not scheduled((1, 100), (7, 50)).cancel_timer(3)


def test_cancel_timer_by_correlation_id_returns_true_after_cancelling_the_timer() -> None:
    """PriorityHeapTimerServiceTest.cancelTimerByCorrelationIdReturnsTrueAfterCancellingTheTimer"""
    ts = scheduled((1, 100), (7, 50), (2, 90))
    assert ts.cancel_timer(7)
    assert ids(ts.poll(111)) == [2, 1]


def test_cancel_timer_by_correlation_id_returns_true_after_cancelling_the_last_timer() -> None:
    """PriorityHeapTimerServiceTest.cancelTimerByCorrelationIdReturnsTrueAfterCancellingTheLastTimer"""
    ts = scheduled((1, 100), (7, 50), (2, 90))
    assert ts.cancel_timer(1)
    assert ids(ts.poll(111)) == [7, 2]


def test_cancel_timer_by_correlation_id_after_poll() -> None:
    """PriorityHeapTimerServiceTest.cancelTimerByCorrelationIdAfterPoll"""
    ts = scheduled((1, 30), (5, 15), (2, 20), (4, 40))
    first = ts.poll(19)
    assert len(first) == 1
    assert ts.cancel_timer(1)
    second = ts.poll(40)
    assert len(second) == 2
    assert ids(first + second) == [5, 2, 4]


def test_schedule_timer_for_an_existing_correlation_id_is_a_no_op_if_deadline_does_not_change() -> None:
    """PriorityHeapTimerServiceTest.scheduleTimerForAnExistingCorrelationIdIsANoOpIfDeadlineDoesNotChange"""
    ts = scheduled((3, 30), (5, 50), (7, 70), (5, 50))
    assert ids(ts.poll(70)) == [3, 5, 7]


def test_schedule_timer_for_an_existing_correlation_id_should_shift_entry_up_when_deadline_is_decreasing() -> None:
    """PriorityHeapTimerServiceTest.scheduleTimerForAnExistingCorrelationIdShouldShiftEntryUpWhenDeadlineIsDecreasing"""
    ts = scheduled((1, 10), (2, 10), (3, 30), (4, 30), (5, 50), (5, 10))
    assert ids(ts.poll(10)) == [1, 2, 5]


def test_schedule_timer_for_an_existing_correlation_id_should_shift_entry_down_when_deadline_is_increasing() -> None:
    """PriorityHeapTimerServiceTest.scheduleTimerForAnExistingCorrelationIdShouldShiftEntryDownWhenDeadlineIsIncreasing
    (timers 2 and 4, 1 and 3 share deadlines: Aeron's order 2, 4, 1, 3 is heap history; ours is
    correlation-id order within a deadline, 2, 1, 3, 4 - see docs/aeron-parity.md)."""
    ts = scheduled((1, 10), (2, 10), (3, 30), (4, 30), (5, 50), (1, 30))
    fired = ts.poll(30)
    assert len(fired) == 4
    assert fired == [(2, 10), (1, 30), (3, 30), (4, 30)]


def test_poll_should_stop_after_poll_limit_is_reached() -> None:
    """PriorityHeapTimerServiceTest.pollShouldStopAfterPollLimitIsReached"""
    ts = scheduled(*((i, i) for i in range(POLL_LIMIT * 2)))
    calls: list[int] = []
    assert len(ts.poll(LONG_MAX, on_timer=lambda c, d: calls.append(c) is None)) == POLL_LIMIT
    assert len(calls) == POLL_LIMIT


def test_snapshot_processes_all_scheduled_timers() -> None:
    """PriorityHeapTimerServiceTest.snapshotProcessesAllScheduledTimers"""
    ts = scheduled((1, 10), (2, 14), (3, 30), (4, 29), (5, 15))
    assert ids(ts.poll(14)) == [1, 2]
    assert ts.snapshot() == [(5, 15), (4, 29), (3, 30)]


def test_expire_than_cancel_timer() -> None:
    """PriorityHeapTimerServiceTest.expireThanCancelTimer"""
    ts = scheduled((1, 100), (2, 2), (3, 30), (4, 4), (5, 50))
    first = ts.poll(5)
    assert len(first) == 2
    assert ts.cancel_timer(1)
    second = ts.poll(1000)
    assert ids(first + second) == [2, 4, 3, 5]


def test_move_up_an_existing_timer_and_cancel_another_one() -> None:
    """PriorityHeapTimerServiceTest.moveUpAnExistingTimerAndCancelAnotherOne"""
    ts = scheduled((1, 1), (2, 1), (3, 3), (4, 4), (5, 5), (5, 1))
    assert ts.cancel_timer(3)
    assert ids(ts.poll(5)) == [1, 2, 5, 4]


def test_move_down_an_existing_timer_and_cancel_another_one() -> None:
    """PriorityHeapTimerServiceTest.moveDownAnExistingTimerAndCancelAnotherOne"""
    ts = scheduled((1, 1), (2, 1), (3, 3), (4, 4), (5, 5), (1, 5))
    assert ts.cancel_timer(3)
    assert ids(ts.poll(5)) == [2, 4, 1, 5]


def test_cancel_expired_timer_is_a_no_op() -> None:
    """PriorityHeapTimerServiceTest.cancelExpiredTimerIsANoOp"""
    ts = scheduled((1, 1), (2, 1), (3, 3))
    assert len(ts.poll(1)) == 2
    assert not ts.cancel_timer(1)
    assert not ts.cancel_timer(2)


def test_schedule_must_retain_order_between_deadlines() -> None:
    """PriorityHeapTimerServiceTest.scheduleMustRetainOrderBetweenDeadlines"""
    ts = scheduled((3, 3), (4, 4), (5, 5), (6, 0))
    assert ids(ts.poll(5)) == [6, 3, 4, 5]


def test_should_reuse_expired_entries_then_fire_in_order() -> None:
    """PriorityHeapTimerServiceTest.shouldReuseExpiredEntriesFromAFreeList (the firing order; the free
    list is a JVM allocation detail with no Python counterpart)."""
    ts = scheduled((1, 1), (2, 2), (3, 3))
    assert len(ts) == 3
    assert len(ts.poll(2)) == 2
    for t in ((4, 4), (5, 5), (6, 0)):
        ts.schedule_timer(*t)
    assert len(ts) == 4
    assert ids(ts.poll(5)) == [6, 3, 4, 5]


def test_should_reuse_canceled_timer_entries_then_fire_in_order() -> None:
    """PriorityHeapTimerServiceTest.shouldReuseCanceledTimerEntriesFromAFreeList (the firing order)."""
    ts = scheduled((1, 1), (2, 2), (3, 3), (4, 4))
    assert len(ts) == 4
    assert ts.cancel_timer(2) and ts.cancel_timer(4)
    ts.schedule_timer(5, 5)
    ts.schedule_timer(6, 0)
    assert len(ts) == 4
    assert ids(ts.poll(5)) == [6, 1, 3, 5]


def test_many_random_operations() -> None:
    """PriorityHeapTimerServiceTest.manyRandomOperations: 10,000 seeded random schedules, cancels and
    polls checked against a plain dict model."""
    rng = random.Random(1)
    ts = TimerService()
    model: dict[int, int] = {}
    now = 0
    for _ in range(10_000):
        op = rng.randrange(3)
        if op == 0:
            correlation_id, deadline = rng.randrange(1000), now + rng.randrange(1000)
            ts.schedule_timer(correlation_id, deadline)
            model[correlation_id] = deadline
        elif op == 1:
            correlation_id = rng.randrange(1000)
            assert ts.cancel_timer(correlation_id) == (model.pop(correlation_id, None) is not None)
        else:
            now += rng.randrange(100)
            fired = ts.poll(now)
            expected = sorted(((c, d) for c, d in model.items() if d <= now), key=lambda t: (t[1], t[0]))
            assert fired == expected[:POLL_LIMIT]
            for c, _ in fired:
                del model[c]
        assert len(ts) == len(model)
        assert ts.next_deadline() == (min(model.values()) if model else None)
