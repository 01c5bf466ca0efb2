"""Crashes, restarts, wiped disks and partitions on a real cluster: the protocol's recovery paths
over real processes and sockets."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from clusterlab.core.consensus.context import Role
from clusterlab.harness.services import kv

from tests.cluster.helpers import (
    LEADER_S,
    assert_services_agree,
    await_caught_up,
    node_log,
    running_cluster,
    service_log,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def _put_many(client, prefix: str, n: int) -> dict[str, str]:
    """n pipelined puts; every one must be acknowledged."""
    ids = {client.submit(lambda rid, i=i: kv.put(rid, f"{prefix}{i}", f"{prefix}-value-{i}")): i for i in range(n)}
    replies = client.wait(ids, 15.0)
    assert len(replies) == n and all(r["ok"] for r in replies.values())
    return {f"{prefix}{i}": f"{prefix}-value-{i}" for i in range(n)}


def test_leader_sigkill_the_client_follows_the_new_leader_and_no_acknowledged_write_is_lost(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        acknowledged = {}
        for i in range(10):
            assert client.put(f"before{i}", str(i))["ok"]
            acknowledged[f"before{i}"] = str(i)
        old = c.leader_id()
        c.kill(old)
        assert not c.is_alive(old)
        # Writes go on through the failover: the client rides it (resend, NewLeaderEvent).
        for i in range(10):
            assert client.put(f"after{i}", str(i))["ok"]
            acknowledged[f"after{i}"] = str(i)
        new = c.await_leader(LEADER_S, exclude={old})
        assert new != old
        assert client.client.leader_member_id == new
        assert c.status(new).leadership_term_id > 0
        for key, value in acknowledged.items():
            assert client.get(key)["value"] == value, key
        # The old leader comes back from its disk as a follower and catches up.
        c.restart(old)
        await_caught_up(c)
        assert c.status(old).role == Role.FOLLOWER
        assert_services_agree(c)


def test_requests_sent_to_a_dead_leader_are_resent_on_new_leader_event_and_applied_once(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        client.attempt_timeout_s = 600.0  # the client's own resend timer never fires in this test
        revision = client.put("warm", "up")["revision"]
        old = c.leader_id()
        c.kill(old)
        # Offered to the dead leader: dropped on the way. Only the ClusterClient's resend on the
        # new leader's NewLeaderEvent can get them into the log.
        ids = [client.submit(lambda rid, i=i: kv.put(rid, f"lost{i}", str(i))) for i in range(20)]
        replies = client.wait(ids, 60.0)
        assert sorted(replies) == sorted(ids)
        assert all(r["ok"] for r in replies.values())
        assert client.client.resent_on_new_leader >= len(ids)
        assert client.client.outstanding == {}
        assert c.await_leader(LEADER_S, exclude={old}) != old
        # Exactly once: 20 writes moved the store's revision by 20, not more.
        assert client.get("lost19")["revision"] == revision + 20


def test_a_killed_follower_restarts_from_disk_and_catches_up(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        written = _put_many(client, "a", 100)
        before = await_caught_up(c)
        follower = next(i for i in range(3) if i != c.leader_id())
        c.kill(follower)
        written |= _put_many(client, "b", 100)  # a majority still commits
        c.restart(follower)
        position = await_caught_up(c)
        assert position > before
        # It started from what it had on disk, not from an empty log.
        assert f"'append_position': {before}," in node_log(c, follower)
        assert "snapshot=None" in service_log(c, follower)
        assert_services_agree(c)
        assert client.get("b99")["value"] == written["b99"]


def test_a_wiped_follower_rebuilds_its_log_and_state_from_the_others(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        _put_many(client, "w", 300)
        position = await_caught_up(c)
        follower = next(i for i in range(3) if i != c.leader_id())
        digest_before = assert_services_agree(c)
        c.restart_wiped(follower)
        assert "'append_position': 0," in node_log(c, follower), "it really started empty"
        assert await_caught_up(c) >= position
        assert assert_services_agree(c)[1] == digest_before[1], "the same state, rebuilt from the log"
        assert client.get("w299")["value"] == "w-value-299"
        status = c.status(follower)
        assert status.append_position == c.status(c.leader_id()).append_position


def test_a_partitioned_leader_steps_down_and_the_majority_elects(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        assert client.put("before", "partition")["ok"]
        old = c.leader_id()
        old_term = c.status(old).leadership_term_id
        c.isolate(old)
        new = c.await_leader(LEADER_S, exclude={old})
        assert c.status(new).leadership_term_id > old_term
        # Without a quorum of followers the old leader gives up leadership (Aeron: inactive follower quorum).
        c.await_condition(
            lambda: (s := c.status(old)) is not None and (s.role != Role.LEADER or s.election_state is not None),
            LEADER_S,
            "the isolated leader stepping down",
        )
        assert c.status(old).gate_dropped_count > 0
        # The majority side serves writes; the client followed the new leader.
        assert client.put("during", "partition")["ok"]
        assert client.client.leader_member_id == new
        c.heal()
        await_caught_up(c)
        statuses = c.statuses()
        assert statuses[old].role == Role.FOLLOWER and statuses[old].leader_member_id == new
        assert client.get("before")["value"] == "partition"
        assert client.get("during")["value"] == "partition"
        assert_services_agree(c)


def test_pause_and_resume_a_follower(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        follower = next(i for i in range(3) if i != c.leader_id())
        c.pause(follower)
        assert c.status(follower) is None, "a stopped process does not answer"
        _put_many(client, "p", 50)
        c.resume(follower)
        await_caught_up(c)
        assert_services_agree(c)


def test_lossy_and_slow_links_still_commit_and_heal(tmp_path: Path) -> None:
    with running_cluster(tmp_path) as c:
        client = c.client()
        assert client.put("k", "before")["ok"]
        leader = c.leader_id()
        for src in range(3):
            for dst in range(3):
                if src != dst:
                    c.set_link(src, dst, loss=0.2, delay_s=0.03)
        started = time.monotonic()
        assert client.put("k", "lossy")["ok"]
        assert time.monotonic() - started >= 0.06, "a commit needs the leader -> follower -> leader round trip"
        _put_many(client, "l", 30)
        assert c.status(leader).gate_dropped_count > 0
        assert c.set_clock_offset(leader, 0.2), "clock skew is accepted (and time never runs backwards)"
        c.heal()
        assert not c.gate_rules()
        assert client.put("k", "healed")["ok"]
        await_caught_up(c)
        assert_services_agree(c)
        assert client.get("k")["value"] == "healed"
