"""A member in one process (``LocalCluster(member_process="single")``: clusterlab.core.runtime.member):
its node and its service on one duty cycle, linked by in-process queues instead of sockets.

Real processes, as the other tests here: the cluster elects, commits, survives the SIGKILL of its
leader's one process and its restart without losing an acknowledged write, stops cleanly (every
service told ``on_terminate``, exit 0), and records a trace that verify_run passes; kill_service,
which has no process to aim at, is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.verdict import verify_run
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.runtime.clock import Clock
from clusterlab.core.runtime.node import EXIT_OK, EXIT_SERVICE_GONE
from clusterlab.core.runtime.runner import DutyCycle, InProcessChannel, ProcessLog
from clusterlab.harness.local import MEMBER, LocalCluster, LocalClusterError
from clusterlab.harness.trace import open_run

from tests.aeron.support import EXCEPTION_ON_LOAD_KV, TERMINATE_MARKER, TERMINATE_MARKING_KV
from tests.cluster.helpers import CATCH_UP_S, LEADER_S, assert_services_agree, await_caught_up, running_cluster


def _one_process_per_member(cluster: LocalCluster) -> None:
    """Each member is one running process, which answers both the node's and the service's status."""
    rows = json.loads((cluster.directory / "processes.json").read_text())
    running = [r for r in rows if r["running"]]
    assert sorted(r["member_id"] for r in running) == list(range(cluster.member_count)), rows
    assert {r["kind"] for r in running} == {MEMBER}, rows
    for i in range(cluster.member_count):
        node, service = cluster.status(i), cluster.service_status(i)
        assert node is not None and service is not None, cluster.status_line()
        assert node.pid == service.pid, f"member {i}: node pid {node.pid}, service pid {service.pid}"


def test_a_single_process_cluster_commits_and_survives_the_kill_of_its_leader(tmp_path: Path) -> None:
    with running_cluster(tmp_path, member_process="single") as cluster:
        _one_process_per_member(cluster)
        client = cluster.client()
        acked = {}
        for n in range(20):
            key, value = f"k{n % 5}", f"v{n}"
            assert client.put(key, value, timeout_s=CATCH_UP_S)["ok"]
            acked[key] = value
        await_caught_up(cluster)
        assert_services_agree(cluster)

        leader = cluster.await_leader(LEADER_S)
        pid = cluster.status(leader).pid  # type: ignore[union-attr]
        cluster.kill(leader)
        assert not cluster.is_alive(leader)
        assert cluster.service_status(leader) is None  # the service died with its node: one process
        new_leader = cluster.await_leader(LEADER_S * 2, exclude={leader})
        for key, value in acked.items():
            assert client.get(key, timeout_s=CATCH_UP_S)["value"] == value, f"acknowledged {key}={value} lost"
        assert client.put("after-kill", "yes", timeout_s=CATCH_UP_S)["ok"]

        cluster.restart(leader)
        assert cluster.incarnation(leader) == 1
        cluster.await_services()
        await_caught_up(cluster)
        assert_services_agree(cluster)
        _one_process_per_member(cluster)
        assert cluster.status(leader).pid != pid  # type: ignore[union-attr]
        assert cluster.leader_id() == new_leader
        for key, value in {**acked, "after-kill": "yes"}.items():
            assert client.get(key, timeout_s=CATCH_UP_S)["value"] == value
        trace_dir = cluster.trace_dir
    assert trace_dir is not None

    # The clean stop: every member process exited 0 and told its service on_terminate.
    codes = {(member, pid): code for member, kind, pid, code, _log in cluster.exited() if kind == MEMBER}
    assert len(codes) == cluster.member_count + 1  # the killed incarnation too
    killed = [code for code in codes.values() if code < 0]
    assert killed == [-9] and sorted(code for code in codes.values() if code >= 0) == [0, 0, 0], codes
    events = open_run(trace_dir).tables["events"].to_pylist()
    terminated = sorted((e["member_id"], e["incarnation"]) for e in events if e["kind"] == "service_terminate")
    assert terminated == sorted([(i, 0) for i in range(3) if i != leader] + [(leader, 1)]), terminated

    verdict = verify_run(trace_dir)
    assert verdict.status == "PASS", verdict.failed()
    assert verdict.rows["applied"] > 0 and verdict.rows["ops"] > 0


def test_kill_service_is_refused_when_a_member_is_one_process(tmp_path: Path) -> None:
    with running_cluster(tmp_path, members=1, member_process="single") as cluster:
        client = cluster.client()
        assert client.put("k", "v", timeout_s=CATCH_UP_S)["ok"]
        with pytest.raises(LocalClusterError, match=r"kill_service\(0\).*one process.*kill\(\)"):
            cluster.kill_service(0)
        assert cluster.is_alive(0) and cluster.service_status(0) is not None
        assert client.get("k", timeout_s=CATCH_UP_S)["value"] == "v"


def test_member_process_names_a_mode(tmp_path: Path) -> None:
    with pytest.raises(LocalClusterError, match="member_process 'both'"):
        LocalCluster(directory=tmp_path / "cluster", member_process="both")


def test_pause_resume_and_wiped_restart_of_a_single_process_member(tmp_path: Path) -> None:
    """SIGSTOP/SIGCONT and restart_wiped act on the member's one process: paused, it answers nothing
    (node nor service) while the others commit; resumed, and then rebuilt from an empty directory,
    it catches up and its service agrees with the others."""
    with running_cluster(tmp_path, member_process="single") as cluster:
        leader = cluster.await_leader(LEADER_S)
        follower = next(m for m in range(3) if m != leader)
        client = cluster.client()
        cluster.pause(follower)
        assert cluster.status(follower) is None and cluster.service_status(follower) is None
        assert cluster.is_alive(follower)
        assert client.put("while-paused", "1", timeout_s=CATCH_UP_S)["ok"]
        cluster.resume(follower)
        await_caught_up(cluster)
        assert_services_agree(cluster)

        cluster.restart_wiped(follower)
        assert cluster.incarnation(follower) == 1
        assert client.put("after-wipe", "2", timeout_s=CATCH_UP_S)["ok"]
        await_caught_up(cluster)
        assert_services_agree(cluster)
        _one_process_per_member(cluster)


def _terminate_calls(cluster: LocalCluster, member_id: int) -> int:
    marker = cluster.directory / TERMINATE_MARKER.format(member_id=member_id)
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def _put_and_snapshot(cluster: LocalCluster) -> None:
    client = cluster.client()
    for n in range(5):
        assert client.put(f"k{n}", str(n), timeout_s=CATCH_UP_S)["ok"]
    client.close()
    await_caught_up(cluster)
    assert cluster.control("snapshot")
    cluster.await_condition(
        lambda: all((s := cluster.status(m)) is not None and s.snapshot_count == 1 for m in range(3)),
        CATCH_UP_S,
        "every member took the snapshot",
    )


def test_a_single_process_member_whose_service_fails_to_start_exits_as_its_node_does(tmp_path: Path) -> None:
    """The service cannot load its snapshot: it acks with a NULL client id, the node closes with
    "failed to start service=0" and the member's one process exits with the node's code (3); with the
    snapshot invalidated the member starts again and catches up."""
    with running_cluster(tmp_path, service=EXCEPTION_ON_LOAD_KV, member_process="single") as cluster:
        leader = cluster.await_leader(LEADER_S)
        follower = next(m for m in range(3) if m != leader)
        _put_and_snapshot(cluster)
        cluster.stop(follower)
        cluster.restart(follower)
        assert cluster.wait_for_exit(follower, CATCH_UP_S) == {MEMBER: EXIT_SERVICE_GONE}
        assert "service=0 failed to start" in (cluster.member_dir(follower) / "counters.json").read_text()
        with RecordingLog.open(cluster.storage(follower)) as recording_log:
            assert recording_log.invalidate_latest_snapshot()
        cluster.restart(follower)
        await_caught_up(cluster)
        assert_services_agree(cluster)


def test_single_process_members_tell_their_service_on_terminate_once(tmp_path: Path) -> None:
    """A graceful stop (SIGTERM to the one process) and a cluster SHUTDOWN each close the member's
    service once (``on_terminate``) and exit 0; a SIGKILL runs no close."""
    with running_cluster(tmp_path, service=TERMINATE_MARKING_KV, member_process="single") as cluster:
        leader = cluster.await_leader(LEADER_S)
        follower, other = (m for m in range(3) if m != leader)
        client = cluster.client()
        assert client.put("k", "v", timeout_s=CATCH_UP_S)["ok"]
        client.close()
        await_caught_up(cluster)
        cluster.stop(follower)
        assert cluster.exit_codes(follower) == {"node": EXIT_OK}
        assert _terminate_calls(cluster, follower) == 1
        cluster.kill(other)
        assert _terminate_calls(cluster, other) == 0
        for m in (follower, other):
            cluster.restart(m)
        cluster.await_leader(LEADER_S)
        await_caught_up(cluster)
        assert cluster.control("shutdown")
        for m in range(3):
            assert cluster.wait_for_exit(m, CATCH_UP_S) == {MEMBER: EXIT_OK}
        assert {m: _terminate_calls(cluster, m) for m in range(3)} == {follower: 2, other: 1, leader: 1}


class _PollTimeouts:
    """A poller that notes each poll's timeout (ms)."""

    def __init__(self, poller: Any) -> None:
        self._poller = poller
        self.timeouts: list[int] = []

    def poll(self, timeout_ms: int) -> Any:
        self.timeouts.append(timeout_ms)
        return self._poller.poll(timeout_ms)

    def register(self, *args: Any) -> None:
        self._poller.register(*args)


def test_the_duty_cycle_does_not_wait_in_poll_while_an_in_process_queue_holds_messages() -> None:
    """A ping-pong over the two in-process links, with no deadline for an hour: every message is
    handled in the cycle after it was sent, each poll with timeout 0 while a queue is not empty."""
    channel = InProcessChannel(member_id=0, service_count=1)
    cycle = DutyCycle(Clock(), ProcessLog("test"))
    channel.attach(cycle)
    to_service, from_service = channel.to_service[0], channel.from_service[0]
    polls = _PollTimeouts(cycle.poller)
    cycle.poller = polls  # type: ignore[assignment]
    seen: list[tuple[str, bytes]] = []

    def service(_now: int) -> int:
        payload = to_service.queue.popleft()
        seen.append(("service", payload))
        from_service.send(b"", payload + b"-ack")
        return 1

    def node(_now: int) -> int:
        payload = from_service.queue.popleft()
        seen.append(("node", payload))
        if len(seen) >= 6:
            cycle.request_stop("done")
        return 1

    cycle.register_queue(from_service.queue, node)
    cycle.register_queue(to_service.queue, service, first=True)
    sent = iter(b"abc")

    def do_work(_now: int) -> int:
        if not to_service.queue and not from_service.queue and (n := next(sent, None)) is not None:
            to_service.send(b"", bytes([n]))
            return 1
        return 0

    try:
        assert cycle.run(do_work, lambda: cycle.clock.now_ns() + 3600 * 10**9) == 0
    finally:
        cycle.close()
    assert seen == [
        ("service", b"a"),
        ("node", b"a-ack"),
        ("service", b"b"),
        ("node", b"b-ack"),
        ("service", b"c"),
        ("node", b"c-ack"),
    ]
    assert polls.timeouts[1:] == [0] * (len(polls.timeouts) - 1), polls.timeouts  # the first: nothing queued
    assert to_service.sent == 3 and from_service.sent == 3
