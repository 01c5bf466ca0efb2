"""The node's control answers for counters and segment purging (core/runtime/control_replies.py) and
the test context's for test hooks (clusterlab/testing/intercepts.py): what each TestHook arms, and a
clear ERROR/REFUSED for a bad value or a node whose module has not started."""

from __future__ import annotations

import pytest
from clusterlab.core.codec import decode
from clusterlab.core.codec.consensus import AppendPosition, Vote
from clusterlab.core.codec.control import ControlResponseCode, PurgeSegments, TestHook, TestHookKind
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.consensus.context import Channel, ElectionState
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.runtime.control_replies import counters_of, counters_reply, purge_segments
from clusterlab.harness.sim import SimCluster

from clusterlab.testing.intercepts import HookedOutbox, TestHooks, apply_test_hook, member_message_template


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
        (TestHook(1, -5, TestHookKind.DELAY_MEMBER_MESSAGE, Vote.TEMPLATE_ID), "delay_ns must be >= 0, got -5"),
        (TestHook(1, 5, TestHookKind.DUPLICATE_MEMBER_MESSAGE, 9999), "no member message has template id 9999"),
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


class _Wire:
    """An outbox that records what reaches the network."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, Channel, type]] = []

    def send(self, member_id: int, channel: Channel, payload: bytes) -> None:
        self.sent.append((member_id, channel, type(decode(payload))))

    def send_egress(self, response_channel: str, payload: bytes) -> None:
        raise AssertionError("no egress here")


def _vote() -> bytes:
    return Vote(3, 1, 64, 0, 2, BooleanType.TRUE).encode()


def test_a_delayed_member_message_is_overtaken_and_goes_when_due() -> None:
    hooks, wire = TestHooks(), _Wire()
    outbox = HookedOutbox(wire, hooks)
    assert apply_test_hook(hooks, TestHook(1, 500, TestHookKind.DELAY_MEMBER_MESSAGE, Vote.TEMPLATE_ID)).code == (
        ControlResponseCode.OK
    )
    outbox.now_ns = 1_000
    outbox.send(0, Channel.CONSENSUS, _vote())
    outbox.send(0, Channel.CONSENSUS, AppendPosition(1, 64, 2, 0).encode())
    assert wire.sent == [(0, Channel.CONSENSUS, AppendPosition)]  # the later message overtook the vote
    assert outbox.next_due_ns() == 1_500 and outbox.release_due(1_499) == 0
    assert outbox.release_due(1_500) == 1 and wire.sent[-1] == (0, Channel.CONSENSUS, Vote)
    assert outbox.next_due_ns() is None and hooks.member_messages_held == 1


def test_a_duplicated_member_message_goes_now_and_again_later_and_a_removed_rule_keeps_what_is_held() -> None:
    hooks, wire = TestHooks(), _Wire()
    outbox = HookedOutbox(wire, hooks)
    apply_test_hook(hooks, TestHook(1, 300, TestHookKind.DUPLICATE_MEMBER_MESSAGE, Vote.TEMPLATE_ID))
    outbox.send(1, Channel.CONSENSUS, _vote())
    assert wire.sent == [(1, Channel.CONSENSUS, Vote)]
    apply_test_hook(hooks, TestHook(2, 0, TestHookKind.DELAY_MEMBER_MESSAGE, Vote.TEMPLATE_ID))  # remove the rule
    assert hooks.member_message_delays == {}
    outbox.send(1, Channel.CONSENSUS, _vote())  # no rule: straight on
    assert len(wire.sent) == 2 and outbox.release_due(300) == 1 and len(wire.sent) == 3


def test_a_member_message_is_named_by_its_codec_name() -> None:
    assert member_message_template("Vote") == Vote.TEMPLATE_ID
    with pytest.raises(ValueError, match="no member message 'Votes'; known: CanvassPosition, RequestVote, Vote"):
        member_message_template("Votes")
