"""Port of Aeron's ``RecoverAfterFailedCatchupClusterTest`` (aeron-system-tests/src/test/java/io/aeron/cluster)
on the simulator. Aeron instruments ``Election.state`` to throw once when a member enters FOLLOWER_CATCHUP
("For catchup failure"); ours arms the fail-catch-up test hook (clusterlab.testing.intercepts)."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import SECOND

from tests.aeron.support import aeron_cluster
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim


def test_should_catchup_from_empty_log(sim: SimKit) -> None:
    """RecoverAfterFailedCatchupClusterTest.shouldCatchupFromEmptyLog: the restarted (empty) follower's
    first catch-up fails inside FOLLOWER_CATCHUP; its election starts over and it still applies every
    message. The hook fired once and the error was counted (Aeron's counted error handler)."""
    a = aeron_cluster(sim, seed=303)
    a.await_leader()
    follower = a.followers()[1]
    a.await_election_closed(follower)
    a.stop_node(follower)
    a.connect_client()
    a.send_messages(10)
    a.await_response_message_count(10)
    a.start_static_node(follower, clean_start=True)
    a.c.fail_catchup(follower, 1)  # Aeron: FailFirstFollowerCatchup (every member; only this one catches up)
    a.await_service_message_count(follower, 10, timeout_ns=30 * SECOND)
    hooks = a.c.member(follower).intercepts  # type: ignore[attr-defined]
    assert hooks.catchup_failures == 1
    assert a.c.counters(follower).errors >= 1
