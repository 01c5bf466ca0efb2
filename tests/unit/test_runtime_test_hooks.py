"""The node's control answers for counters and segment purging (core/runtime/control_replies.py) and
the test context's for test hooks (clusterlab/testing/intercepts.py): what each TestHook arms, and a
clear ERROR/REFUSED for a bad value or a node whose module has not started."""

from __future__ import annotations

import pytest
from clusterlab.core.codec.control import ControlResponseCode, PurgeSegments, TestHook, TestHookKind
from clusterlab.core.consensus.context import ElectionState
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.runtime.control_replies import counters_of, counters_reply, purge_segments
from clusterlab.harness.sim import SimCluster

from clusterlab.testing.intercepts import TestHooks, apply_test_hook


@pytest.fixture
def module() -> ConsensusModule:
    c = SimCluster(members=1, seed=5)
    c.await_leader()
    m = c.member(0)
    assert isinstance(m, ConsensusModule)
    return m


def _hooks(module: ConsensusModule) -> TestHooks:
    assert isinstance(module.intercepts, TestHooks)
    return module.intercepts


def test_each_hook_is_armed_and_cleared(module: ConsensusModule) -> None:
    hooks = _hooks(module)
    reply = apply_test_hook(
        _hooks(module), TestHook(1, 2_000, TestHookKind.STALL_ELECTION_STATE, int(ElectionState.CANVASS))
    )
    assert reply.code == ControlResponseCode.OK and "stall=CANVASS" in reply.message
    assert (hooks.stall_election_state, hooks.stall_duration_ns) == (ElectionState.CANVASS, 2_000)
    assert apply_test_hook(hooks, TestHook(2, 0, TestHookKind.FAIL_CATCHUP, 2)).code == ControlResponseCode.OK
    assert (
        apply_test_hook(_hooks(module), TestHook(3, 0, TestHookKind.FAIL_REQUEST_VOTE, 0)).code
        == ControlResponseCode.OK
    )
    assert (
        apply_test_hook(_hooks(module), TestHook(4, 9, TestHookKind.DELAY_SERVICE_MESSAGE, 0)).code
        == ControlResponseCode.OK
    )
    assert (hooks.fail_catchup, hooks.fail_request_vote_term, hooks.delay_service_message_ns) == (2, 0, 9)
    assert apply_test_hook(hooks, TestHook(5, 0, TestHookKind.CLEAR, 0)).code == ControlResponseCode.OK
    assert (hooks.stall_election_state, hooks.fail_catchup, hooks.fail_request_vote_term) == (None, 0, None)
    assert hooks.delay_service_message_ns == 0


@pytest.mark.parametrize(
    ("hook", "message"),
    [
        (TestHook(1, 0, TestHookKind.STALL_ELECTION_STATE, 99), "no election state 99"),
        (TestHook(1, -1, TestHookKind.STALL_ELECTION_STATE, 1), "stall duration must be >= 0 ns, got -1"),
        (TestHook(1, 0, TestHookKind.FAIL_CATCHUP, -2), "fail_catchup count must be >= 0, got -2"),
        (TestHook(1, -5, TestHookKind.DELAY_SERVICE_MESSAGE, 0), "delay_ns must be >= 0, got -5"),
    ],
)
def test_a_bad_hook_value_is_an_error_naming_it(module: ConsensusModule, hook: TestHook, message: str) -> None:
    reply = apply_test_hook(_hooks(module), hook)
    assert (reply.code, reply.message) == (ControlResponseCode.ERROR, message)


def test_before_the_module_started_purges_are_refused_and_counters_say_so() -> None:
    assert purge_segments(None, PurgeSegments(1)).code == ControlResponseCode.REFUSED
    reply = counters_reply(None, 2, 7, 0)
    assert (reply.started, reply.member_id, reply.correlation_id, reply.election_state) == (0, 2, 7, -1)


def test_counters_reply_carries_the_module_counters(module: ConsensusModule) -> None:
    reply = counters_reply(module, 0, 3, 5_000_000_000)
    assert reply.started == 1
    assert counters_of(reply) == module.counters(5_000_000_000)
    assert counters_of(reply).cluster_time_ms == 5_000


def test_purge_without_a_snapshot_keeps_the_log(module: ConsensusModule) -> None:
    reply = purge_segments(module, PurgeSegments(1))
    assert (reply.code, reply.message) == (ControlResponseCode.OK, "start_position=0")
