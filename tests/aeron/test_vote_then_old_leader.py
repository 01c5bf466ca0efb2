"""A member that voted in candidate term T never follows a leader of an earlier term afterwards.

Found by arming Aeron's stalled-leader hook for *any* term (tests/aeron/test_stalled_leader_log_replication_cluster
arms it for term 0 only, as Aeron does): a member votes for a term-1 candidate, its ballot times out, and back
in CANVASS it accepted a NewLeadershipTerm of term 0 from the stalled first leader and committed with it; the
term-1 leader, elected on that vote with a shorter log, then ordered it to truncate committed entries (the
core's assertion "asked to truncate committed log"). Raft's rule, which Aeron's persisted candidate term
stands in for: a vote for term T is a promise to ignore every leader of a term below T."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import SECOND, ElectionState

from tests.aeron.support import aeron_cluster
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("seed", [300, 305, 309, 317, 329])
def test_stalled_leaders_in_any_term_never_truncate_committed_entries(sim: SimKit, seed: int) -> None:
    a = aeron_cluster(sim, seed=seed)
    for m in range(3):
        a.c.stall_election(m, ElectionState.LEADER_LOG_REPLICATION, 2500 * SECOND // 1000)
    leader0 = a.await_leader(timeout_ns=60 * SECOND)
    a.connect_client()
    a.send_and_await_messages(3, 3)
    a.stop_node(leader0)
    a.await_leader_other_than(leader0)
    a.start_static_node(leader0)
    a.await_election_closed(leader0)
    a.reconnect_client()
    a.send_and_await_messages(3, 6)
