"""A paused member in the simulator (SIGSTOP as the real harness sends it): it runs nothing while paused,
what arrives for it waits in order, the others elect a new leader, and on resume the stale leader reads
the new term and follows; a kill ends the pause."""

from __future__ import annotations

import pytest
from clusterlab.core.consensus.context import Role
from clusterlab.harness.sim import SECOND, SimCluster
from clusterlab.harness.sim_errors import SimError

pytestmark = pytest.mark.sim


def test_a_paused_leader_is_replaced_and_follows_the_new_term_on_resume() -> None:
    with SimCluster(members=3, seed=11) as c:
        old = c.await_leader()
        term = c.member(old).leadership_term_id
        c.pause(old)
        assert c.leader_id() is None  # a stopped leader answers no one
        new = c.await_leader(timeout_ns=10 * SECOND)
        assert new != old and c.member(new).leadership_term_id > term
        assert c.member(old).role == Role.LEADER and c.member(old).leadership_term_id == term  # it ran nothing
        c.resume(old)
        c.await_condition(
            lambda: (
                c.member(old).leadership_term_id == c.member(new).leadership_term_id
                and c.member(old).role == Role.FOLLOWER
            ),
            5 * SECOND,
            "the resumed member follows the new term",
        )
        assert c.leader_id() == new


def test_a_paused_member_dies_if_killed_and_only_a_running_member_is_paused() -> None:
    with SimCluster(members=3, seed=12) as c:
        leader = c.await_leader()
        follower = next(m for m in c.members_alive() if m != leader)
        c.pause(follower)
        c.kill(follower)
        c.restart(follower)  # a fresh incarnation runs: the pause died with the old one
        c.await_condition(
            lambda: (
                c.member(follower).commit_position == c.member(leader).commit_position
                and c.member(follower).election_state is None
            ),
            10 * SECOND,
            "the restarted follower catches up",
        )
        c.kill(follower)
        with pytest.raises(SimError, match="not running, so it cannot be paused"):
            c.pause(follower)
