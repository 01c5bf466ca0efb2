"""Port of Aeron's ``StalledLeaderLogReplicationClusterTest`` (aeron-system-tests/src/test/java/io/aeron/cluster)
on the simulator. Aeron instruments ``Election.leaderLogReplication`` to park the agent 2.5 s once, in
leadership term 0; ours arms the timed stall hook on every member for LEADER_LOG_REPLICATION of term 0
(the member that gets there stalls 2.5 s; the hook then clears itself)."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import SECOND, ElectionState

from tests.aeron.support import aeron_cluster
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim


def test_should_handle_multiple_elections(sim: SimKit) -> None:
    """StalledLeaderLogReplicationClusterTest.shouldHandleMultipleElections: a first leader stalled in
    LEADER_LOG_REPLICATION, then two leader failovers with restarts; 3 messages in each term reach every
    service."""
    a = aeron_cluster(sim, seed=309)
    for m in range(3):
        a.c.stall_election(m, ElectionState.LEADER_LOG_REPLICATION, 2500 * SECOND // 1000, leadership_term_id=0)
    leader0 = a.await_leader(timeout_ns=30 * SECOND)
    assert sum(a.c.member(m).intercepts.stalls_started for m in range(3)) == 1  # type: ignore[attr-defined]
    message_count = 3
    a.connect_client()
    a.send_and_await_messages(message_count, message_count)

    a.stop_node(leader0)
    leader1 = a.await_leader_other_than(leader0)
    a.reconnect_client()
    a.start_static_node(leader0)
    a.await_election_closed(leader0)
    a.reconnect_client()
    a.send_and_await_messages(message_count, message_count * 2)

    a.stop_node(leader1)
    a.await_leader_other_than(leader1)
    a.start_static_node(leader1)
    a.await_election_closed(leader1)
    a.reconnect_client()
    a.send_and_await_messages(message_count, message_count * 3)
