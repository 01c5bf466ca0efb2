"""TimerService: Aeron's priority-heap timer service with a total (deadline, correlation_id) order."""

from __future__ import annotations

from clusterlab.core.consensus.timers import POLL_LIMIT, TimerService
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule


def test_poll_fires_expired_timers_in_deadline_then_correlation_id_order() -> None:
    timers = TimerService()
    for cid, deadline in [(5, 30), (3, 10), (9, 10), (1, 20), (7, 10), (2, 40)]:
        timers.schedule_timer(cid, deadline)
    assert timers.poll(25) == [(3, 10), (7, 10), (9, 10), (1, 20)]
    assert len(timers) == 2
    assert timers.next_deadline() == 30


def test_deadline_equal_to_now_is_expired_and_later_is_not() -> None:
    timers = TimerService()
    timers.schedule_timer(1, 100)
    timers.schedule_timer(2, 101)
    assert timers.poll(99) == []
    assert timers.poll(100) == [(1, 100)]
    assert timers.poll(100) == []
    assert timers.poll(101) == [(2, 101)]
    assert timers.next_deadline() is None


def test_poll_limit_defaults_to_aerons_twenty() -> None:
    timers = TimerService()
    for cid in range(50):
        timers.schedule_timer(cid, 0)
    assert POLL_LIMIT == 20
    assert [cid for cid, _ in timers.poll(0)] == list(range(20))
    assert [cid for cid, _ in timers.poll(0, limit=5)] == list(range(20, 25))
    assert len(timers) == 25


def test_cancel() -> None:
    timers = TimerService()
    timers.schedule_timer(1, 10)
    timers.schedule_timer(2, 20)
    timers.schedule_timer(3, 30)
    assert timers.cancel_timer(2) is True
    assert timers.cancel_timer(2) is False
    assert timers.cancel_timer(99) is False
    assert 2 not in timers and 1 in timers
    assert timers.poll(100) == [(1, 10), (3, 30)]


def test_rescheduling_an_id_replaces_its_deadline() -> None:
    timers = TimerService()
    timers.schedule_timer(1, 10)
    timers.schedule_timer(2, 20)
    timers.schedule_timer(1, 30)  # later
    assert len(timers) == 2
    assert timers.deadline(1) == 30
    assert timers.poll(25) == [(2, 20)]
    timers.schedule_timer(1, 5)  # earlier
    assert timers.next_deadline() == 5
    assert timers.poll(5) == [(1, 5)]
    assert len(timers) == 0


def test_refusing_handler_stops_the_poll_and_keeps_the_timer() -> None:
    timers = TimerService()
    for cid in (1, 2, 3):
        timers.schedule_timer(cid, cid)
    offered: list[int] = []

    def append_succeeds_twice(cid: int, deadline: int) -> bool:
        offered.append(cid)
        return len(offered) <= 2

    assert timers.poll(10, on_timer=append_succeeds_twice) == [(1, 1), (2, 2)]
    assert offered == [1, 2, 3]
    assert 3 in timers
    assert timers.poll(10) == [(3, 3)]


def test_snapshot_is_in_firing_order_and_restore_reproduces_the_schedule() -> None:
    timers = TimerService()
    for cid, deadline in [(4, 7), (1, 9), (3, 7), (8, 1), (2, 9)]:
        timers.schedule_timer(cid, deadline)
    timers.cancel_timer(8)
    snap = timers.snapshot()
    assert snap == [(3, 7), (4, 7), (1, 9), (2, 9)]
    restored = TimerService()
    restored.schedule_timer(100, 0)  # replaced by restore
    restored.restore(reversed(snap))
    assert restored.snapshot() == snap
    assert restored.poll(100) == timers.poll(100)


def test_timer_event_read_before_its_schedule_makes_the_schedule_a_no_op() -> None:
    timers = TimerService()
    timers.on_replay_timer_event(7)  # a follower reads the TimerEvent first
    timers.on_replay_timer_event(7)
    assert timers.expired_count(7) == 2
    assert timers.on_schedule_timer(7, 100) is False
    assert timers.on_schedule_timer(7, 100) is False
    assert 7 not in timers
    assert timers.on_schedule_timer(7, 100) is True
    assert timers.deadline(7) == 100
    timers.on_replay_timer_event(7)  # scheduled: the event cancels it
    assert 7 not in timers and timers.expired_count(7) == 0


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 50)), max_size=60))
def test_same_timer_set_fires_in_the_same_order_whatever_the_history(ops: list[tuple[int, int]]) -> None:
    forward, backward = TimerService(), TimerService()
    final: dict[int, int] = {}
    for cid, deadline in ops:
        forward.schedule_timer(cid, deadline)
        final[cid] = deadline
    for cid, deadline in sorted(final.items(), reverse=True):
        backward.schedule_timer(cid, deadline)
    expected = sorted(final.items(), key=lambda t: (t[1], t[0]))
    assert forward.poll(10**9, limit=10**6) == expected
    assert backward.poll(10**9, limit=10**6) == expected


class TimerModel(RuleBasedStateMachine):
    """The heap against a dict model under random schedule / cancel / poll."""

    def __init__(self) -> None:
        super().__init__()
        self.timers = TimerService()
        self.model: dict[int, int] = {}

    @rule(cid=st.integers(0, 15), deadline=st.integers(0, 100))
    def schedule(self, cid: int, deadline: int) -> None:
        self.timers.schedule_timer(cid, deadline)
        self.model[cid] = deadline

    @rule(cid=st.integers(0, 15))
    def cancel(self, cid: int) -> None:
        assert self.timers.cancel_timer(cid) == (cid in self.model)
        self.model.pop(cid, None)

    @rule(now=st.integers(0, 100), limit=st.integers(1, 8))
    def poll(self, now: int, limit: int) -> None:
        expected = sorted(((c, d) for c, d in self.model.items() if d <= now), key=lambda t: (t[1], t[0]))[:limit]
        assert self.timers.poll(now, limit) == expected
        for cid, _ in expected:
            del self.model[cid]

    @invariant()
    def agrees_with_model(self) -> None:
        assert len(self.timers) == len(self.model)
        assert self.timers.next_deadline() == (min(self.model.values()) if self.model else None)
        assert self.timers.snapshot() == sorted(self.model.items(), key=lambda t: (t[1], t[0]))
        heap = self.timers._heap
        for i, entry in enumerate(heap):
            assert entry.index == i
            if i:
                assert not entry.before(heap[(i - 1) >> 1]), "heap property"


TestTimerModel = TimerModel.TestCase
TestTimerModel.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
