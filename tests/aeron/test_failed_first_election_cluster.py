"""Port of Aeron's ``FailedFirstElectionClusterTest`` (aeron-system-tests/src/test/java/io/aeron/cluster) on
the simulator. Aeron instruments ``Election.onRequestVote`` to throw ("Forced failure") for another
candidate's term-0 RequestVote; ours arms the fail-request-vote test hook (clusterlab.testing.intercepts)
for candidate term 0 on every member."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import SECOND
from clusterlab.core.consensus.recording_log import RecordingLog

from tests.aeron.support import aeron_cluster
from tests.aeron.test_recording_log import fields
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim


def test_should_recover_when_follower_is_multiple_terms_behind_from_empty_log(sim: SimKit) -> None:
    """FailedFirstElectionClusterTest.shouldRecoverWhenFollowerIsMultipleTermsBehindFromEmptyLog: two of
    three members start (Aeron ``start(2)``), the first election's votes fail, three leader restarts make
    three terms, then the third member joins with an empty log; every service applies all 40 messages and
    the recording logs are equal (timestamps aside)."""
    a = aeron_cluster(sim, seed=310)
    a.stop_node(2)  # before any time passed: it never took part (Aeron starts only two nodes)
    for m in (0, 1):
        a.c.fail_request_vote(m, 0)
    message_count = 10
    total = 0
    for i in range(3):
        old_leader = a.await_leader(timeout_ns=30 * SECOND)
        if i == 0:  # the first election's votes failed ("Forced failure", counted) before a later term won
            assert sum(a.c.counters(m).errors for m in (0, 1)) >= 1
            assert a.leadership_term_id(old_leader) > 0
        a.reconnect_client()
        a.send_messages(message_count)
        total += message_count
        a.await_response_message_count(total, timeout_ns=30 * SECOND)
        a.stop_node(old_leader)
        a.start_static_node(old_leader)
        a.await_leader(timeout_ns=30 * SECOND)

    a.start_static_node(2, clean_start=True)
    a.await_leader(timeout_ns=30 * SECOND)
    a.reconnect_client()
    a.send_messages(message_count)
    total += message_count
    a.await_response_message_count(total, timeout_ns=30 * SECOND)
    a.await_services_message_count(total, timeout_ns=30 * SECOND)

    def entries(member_id: int) -> list[tuple[object, ...]]:
        """Aeron's ReflectionEquals of two entries, timestamp excluded."""
        with RecordingLog.open(a.c.storage(member_id)) as log:
            return [fields(e)[:4] + fields(e)[5:] for e in log.entries()]

    first = entries(0)
    assert len({e[1] for e in first}) >= 4  # term 0 failed its votes, then three restarts: several terms
    for m in (1, 2):
        assert entries(m) == first, m
