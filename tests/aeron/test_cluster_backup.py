"""Ports of Aeron's ``ClusterBackupTest`` (aeron-system-tests/src/test/java/io/aeron/cluster) onto the
simulator, and the edge cases of the ClusterBackup agent (``clusterlab.core.consensus.cluster_backup``).

Aeron's ``TestCluster.startClusterBackupNode`` is :meth:`AeronBackupCluster.start_cluster_backup_node`
(a :class:`~clusterlab.harness.sim_backup.SimBackup` in the run loop) and ``startStaticNodeFromBackup``
restarts every member from a copy of the backup's directory (``restore_from_backup``): Aeron starts one
node from it; here the whole cluster restarts from it, and each member's service is checked.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from clusterlab.core.archive.layout import SNAPSHOT_DIR, service_snapshot_store_dirs
from clusterlab.core.archive.snapshots import SNAPSHOT_SUFFIX
from clusterlab.core.codec.control import (
    BackupQuery,
    BackupResponse,
    ControlResponse,
    ControlResponseCode,
    SnapshotReplayRequest,
)
from clusterlab.core.codec.enums import ReplayPurpose
from clusterlab.core.codec.framing import FRAME_HEADER_LENGTH, walk_frames
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.session import Challenge, ChallengeResponse
from clusterlab.core.codec.transport import ReplayBlock, ReplayRequest
from clusterlab.core.consensus.backup_source import AUTHENTICATION_REJECTED, BackupSessions
from clusterlab.core.consensus.cluster_backup import BackupState, ReplayStart, SourceType
from clusterlab.core.consensus.context import SECOND, SERVICE_ID_CONSENSUS_MODULE
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.recording_log import EntryType, RecordingLog
from clusterlab.harness.sim_backup import SimBackup

from tests.aeron.support import (
    CHALLENGE_RESPONSE_CREDENTIALS_SUPPLIER,
    INVALID_CHALLENGE_RESPONSE_CREDENTIALS_SUPPLIER,
    INVALID_SIMPLE_CREDENTIALS_SUPPLIER,
    SAMPLE_CHALLENGE,
    SIMPLE_CREDENTIALS_SUPPLIER,
    AeronBackupCluster,
    CredentialsSupplier,
    SampleAuthenticator,
    aeron_backup_cluster,
    connect_client_with,
)
from tests.sim.conftest import SimKit

pytestmark = pytest.mark.sim


def _restore_and_await(a: AeronBackupCluster, message_count: int) -> int:
    """``stopAllNodes``, ``startStaticNodeFromBackup``, ``awaitLeader``: the new leader, every service
    having applied ``message_count`` messages (and no more)."""
    a.stop_all_nodes()
    a.start_static_node_from_backup()
    leader = a.await_leader()
    a.await_services_message_count(message_count)
    for m in range(a.c.member_count):
        assert a.service(m).message_count == message_count
    return leader


def _backup_snapshot_entries(backup: SimBackup) -> list[Any]:
    """The valid SNAPSHOT entries of the backup's recording log."""
    return [e for e in backup.agent.recording_log.entries() if e.type is EntryType.SNAPSHOT and e.is_valid]


# ---------------------------------------------------------------------------------------- Aeron's tests


def test_should_backup_cluster_no_snapshots_and_empty_log(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterNoSnapshotsAndEmptyLog"""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.start_cluster_backup_node(True)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(a.log_position(leader))
    _restore_and_await(a, 0)
    assert not any(a.service(m).was_snapshot_loaded for m in range(3))


@pytest.mark.parametrize("source_type", list(SourceType), ids=lambda t: t.name)
def test_should_backup_cluster_no_snapshots_and_non_empty_log(sim: SimKit, source_type: SourceType) -> None:
    """ClusterBackupTest.shouldBackupClusterNoSnapshotsAndNonEmptyLog"""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    log_position = a.log_position(leader)
    backup = a.start_cluster_backup_node(True, source_type=source_type)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    if source_type is SourceType.LEADER:
        assert backup.agent.source_member_id == leader
    elif source_type is SourceType.FOLLOWER:
        assert backup.agent.source_member_id != leader
    _restore_and_await(a, 10)
    assert not any(a.service(m).was_snapshot_loaded for m in range(3))


def test_should_backup_cluster_no_snapshots_and_then_send_messages(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterNoSnapshotsAndThenSendMessages"""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.start_cluster_backup_node(True)
    a.await_backup_state(BackupState.BACKING_UP)
    a.connect_client()
    a.send_and_await_messages(10)
    a.await_backup_live_log_position(a.log_position(leader))
    _restore_and_await(a, 10)
    assert not any(a.service(m).was_snapshot_loaded for m in range(3))


def test_should_backup_cluster_with_snapshot(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterWithSnapshot (Aeron's response channels are transport)"""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.take_snapshot_on(leader)
    a.await_snapshot_count_everywhere(1)
    log_position = a.log_position(leader)
    a.start_cluster_backup_node(True)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    a.await_backup_snapshot_retrieved_count(1)
    _restore_and_await(a, 10)
    assert all(a.service(m).was_snapshot_loaded for m in range(3))


def test_should_backup_cluster_after_clean_shutdown(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterAfterCleanShutdown"""
    a = aeron_backup_cluster(sim)
    a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.shutdown_cluster()
    a.await_node_terminations()
    assert all(a.service(m).was_snapshot_taken for m in range(3))
    a.stop_all_nodes()
    a.restart_all_nodes(False)
    new_leader = a.await_leader()
    a.await_election_closed(new_leader)
    log_position = a.log_position(new_leader)
    backup = a.start_cluster_backup_node(True)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    assert backup.snapshots_retrieved_count == 1


def _snapshot_and_non_empty_log(a: AeronBackupCluster) -> tuple[int, int]:
    """10 messages, a snapshot, 7 more: (leader, the leader's log position)."""
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.take_snapshot_on(leader)
    a.await_snapshot_count_everywhere(1)
    a.send_messages(7)
    a.await_response_message_count(17)
    a.await_service_message_count(leader, 17)
    return leader, a.log_position(leader)


def test_should_backup_cluster_with_snapshot_and_non_empty_log(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterWithSnapshotAndNonEmptyLog"""
    a = aeron_backup_cluster(sim)
    _, log_position = _snapshot_and_non_empty_log(a)
    a.start_cluster_backup_node(True)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    _restore_and_await(a, 17)
    assert all(a.service(m).was_snapshot_loaded for m in range(3))


def test_should_backup_cluster_with_snapshot_then_send(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterWithSnapshotThenSend"""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.take_snapshot_on(leader)
    a.await_snapshot_count_everywhere(1)
    a.start_cluster_backup_node(True)
    a.send_messages(7)
    a.await_response_message_count(17)
    a.await_service_message_count(leader, 17)
    log_position = a.log_position(leader)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    _restore_and_await(a, 17)
    assert all(a.service(m).was_snapshot_loaded for m in range(3))


def test_should_backup_cluster_with_from_latest_snapshot_log_position(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterWithFromLatestSnapshotLogPosition"""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.take_snapshot_on(leader)
    a.await_snapshot_count_everywhere(1)
    snapshot_position = a.log_position(leader)
    a.send_messages(7)
    a.await_response_message_count(17)
    a.await_service_message_count(leader, 17)
    log_position = a.log_position(leader)
    backup = a.start_cluster_backup_node(True, replay_start=ReplayStart.LATEST_SNAPSHOT)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    assert backup.agent.archive.recording.start_position == snapshot_position
    _restore_and_await(a, 17)
    assert all(a.service(m).was_snapshot_loaded for m in range(3))


def test_should_be_able_to_get_time_of_next_backup_query(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBeAbleToGetTimeOfNextBackupQuery"""
    a = aeron_backup_cluster(sim)
    a.await_leader()
    a.start_cluster_backup_node(True)
    a.await_backup_state(BackupState.BACKING_UP)
    assert a.next_backup_query_deadline_ns() > a.c.now_ns


def test_should_backup_cluster_no_snapshots_and_non_empty_log_with_re_query(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterNoSnapshotsAndNonEmptyLogWithReQuery"""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    log_position = a.log_position(leader)
    backup = a.start_cluster_backup_node(True, backup_query_interval_ns=3600 * SECOND)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    queries_before = sum(1 for e in a.c.events if e.get("kind") == "backup_response")
    a.set_next_backup_query_deadline_ns(0)
    a.send_messages(5)
    a.await_response_message_count(15)
    a.await_service_message_count(leader, 15)
    next_log_position = a.log_position(leader)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(next_log_position)
    assert sum(1 for e in a.c.events if e.get("kind") == "backup_response") > queries_before  # re-queried
    assert backup.agent.errors == 0
    _restore_and_await(a, 15)


def test_should_backup_cluster_no_snapshots_and_non_empty_log_after_failure(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterNoSnapshotsAndNonEmptyLogAfterFailure"""
    a = aeron_backup_cluster(sim)
    leader_one = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.stop_node(leader_one)
    leader_two = a.await_leader_other_than(leader_one)
    a.await_election_closed(leader_two)
    log_position = a.log_position(leader_two)
    a.start_cluster_backup_node(True)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    _restore_and_await(a, 10)
    assert not any(a.service(m).was_snapshot_loaded for m in range(3))


def test_should_backup_cluster_no_snapshots_and_non_empty_log_with_failure(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterNoSnapshotsAndNonEmptyLogWithFailure"""
    a = aeron_backup_cluster(sim)
    leader_one = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    log_position = a.log_position(leader_one)
    a.start_cluster_backup_node(True)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    a.stop_node(leader_one)
    leader_two = a.await_leader_other_than(leader_one)
    a.await_new_leadership_event(1)
    a.send_messages(5)
    a.await_response_message_count(15)
    a.await_service_message_count(leader_two, 15)
    next_log_position = a.log_position(leader_two)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(next_log_position)
    _restore_and_await(a, 15)
    assert not any(a.service(m).was_snapshot_loaded for m in range(3))


def test_should_backup_cluster_and_join_live(sim: SimKit) -> None:
    """ClusterBackupTest.shouldBackupClusterAndJoinLive"""
    a = aeron_backup_cluster(sim)
    a.await_leader()
    a.connect_client()
    a.send_messages(100)
    a.start_cluster_backup_node(True)
    a.send_messages(100)
    a.await_response_message_count(200)
    a.await_backup_state(BackupState.BACKING_UP)
    leader = a.find_leader()
    assert leader is not None
    a.await_services_message_count(200)
    a.await_backup_live_log_position(a.log_position(leader))
    _restore_and_await(a, 200)


RESUME_MESSAGE_COUNT = 2_000  # enough log for many replay blocks (Aeron: 100_000 to span its replay window)


def test_should_resume_backup_if_stopped(sim: SimKit) -> None:
    """ClusterBackupTest.shouldResumeBackupIfStopped (the catchup-port case is Aeron transport)"""
    a = aeron_backup_cluster(sim)
    a.await_leader()
    a.connect_client()
    a.send_messages(RESUME_MESSAGE_COUNT)
    a.await_services_message_count(RESUME_MESSAGE_COUNT, 60 * SECOND)
    first = a.start_cluster_backup_node(True, source_type=SourceType.FOLLOWER)
    a.await_backup_live_log_position(1)
    first.close()
    stopped_at = first.live_log_position
    a.send_messages(1000)
    a.await_services_message_count(RESUME_MESSAGE_COUNT + 1000, 60 * SECOND)
    a.await_response_message_count(RESUME_MESSAGE_COUNT + 1000, 60 * SECOND)
    replays_from: list[int] = []
    second = a.start_cluster_backup_node(False, source_type=SourceType.FOLLOWER)
    _watch_requests(
        second, lambda msg: replays_from.append(msg.from_position) if isinstance(msg, ReplayRequest) else None
    )
    a.await_backup_state(BackupState.BACKING_UP)
    leader = a.find_leader()
    assert leader is not None
    a.await_backup_live_log_position(a.log_position(leader), 30 * SECOND)
    assert 0 < stopped_at < a.log_position(leader)
    assert replays_from[0] == stopped_at  # resumed where the first stopped, nothing copied twice
    assert second.agent.archive.recording.start_position == 0
    _restore_and_await(a, RESUME_MESSAGE_COUNT + 1000)


# ---------------------------------------------------------------------------------------- edge cases


def _watch_requests(backup: SimBackup, hook: Any) -> None:
    """Call ``hook(request)`` for every request the backup sends (before it is answered)."""
    answer = backup._answer

    def watched(member_id: int, msg: Message) -> Message | None:
        hook(msg)
        return answer(member_id, msg)

    backup._answer = watched  # type: ignore[method-assign]


def _corrupt_first(backup: SimBackup, purpose: ReplayPurpose, corrupted: list[int]) -> None:
    """Flip a payload byte of the last frame of the first non-empty ``purpose`` block the backup
    receives; ``corrupted`` gets the backup's log position at that moment."""
    answer = backup._answer

    def corrupting(member_id: int, msg: Message) -> Message | None:
        reply = answer(member_id, msg)
        if isinstance(reply, ReplayBlock) and reply.purpose is purpose and reply.entries and not corrupted:
            corrupted.append(backup.live_log_position)
            last = walk_frames(reply.entries, reply.start_position).frames[-1]
            entries = bytearray(reply.entries)
            entries[last.position - reply.start_position + FRAME_HEADER_LENGTH] ^= 0xFF
            return dataclasses.replace(reply, entries=bytes(entries))
        return reply

    backup._answer = corrupting  # type: ignore[method-assign]


def _stored_snapshots(backup: SimBackup) -> list[str]:
    """Snapshot recording files in the backup's storage (the consensus module's and service 0's)."""
    dirs = [SNAPSHOT_DIR, service_snapshot_store_dirs(0)[1]]
    return [f for d in dirs for f in backup.storage.list_dir(d) if f.endswith(SNAPSHOT_SUFFIX)]


def _resets(a: AeronBackupCluster) -> list[dict[str, Any]]:
    """The details (``source``, ``reason``) of the backup's RESET_BACKUPs so far."""
    return [e["detail"] for e in a.c.events if e.get("kind") == "backup_reset"]


def test_backup_skips_a_member_that_is_down(sim: SimKit) -> None:
    """A down member answers nothing: the agent resets to the next member and still completes."""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    down = next(m for m in range(3) if m != leader)
    a.stop_node(down)
    backup = a.start_cluster_backup_node(True)
    backup.agent.source_index = down  # the first query goes to the down member
    backup.agent.source_member_id = down
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(a.log_position(leader))
    assert [e["source"] for e in _resets(a)][:1] == [down]
    assert backup.agent.source_member_id != down


def test_backup_skips_a_paused_member(sim: SimKit) -> None:
    """A paused member answers nothing until resumed: the request times out, the next member serves."""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    backup = a.start_cluster_backup_node(True, source_type=SourceType.LEADER)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(a.log_position(leader))
    assert [r["source"] for r in _resets(a)] == [m for m in range(leader)]  # not LEADER sources
    before = len(_resets(a))
    a.c.pause(leader)
    a.await_condition(lambda: len(_resets(a)) > before, "the backup gave up on the paused member", 5 * SECOND)
    assert _resets(a)[before]["source"] == leader
    assert "no answer" in _resets(a)[before]["reason"]
    a.c.resume(leader)
    new_leader = a.await_leader()
    a.await_election_closed(new_leader)
    a.reconnect_client()
    a.send_and_await_messages(5)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(a.log_position(new_leader), 20 * SECOND)
    assert backup.agent.source_member_id == a.c.leader_id()
    _restore_and_await(a, 15)


def test_backup_is_refused_by_a_member_in_an_election(sim: SimKit) -> None:
    """A member in an election answers REFUSED: the backup tries the next one until the election ends."""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    a.stop_node(leader)
    a.await_condition(
        lambda: all(a.c.member(m).election_state is not None for m in a.c.members_alive()),
        "the survivors are in an election",
    )
    backup = a.start_cluster_backup_node(True)
    a.await_condition(lambda: bool(_resets(a)), "a refused query")
    assert "in an election" in _resets(a)[0]["reason"]
    new_leader = a.await_leader_other_than(leader)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(a.log_position(new_leader))
    assert backup.live_log_position == a.c.member(new_leader).commit_position
    _restore_and_await(a, 10)


def test_backup_follows_a_leader_change_as_a_leader_source(sim: SimKit) -> None:
    """A LEADER-source backup whose leader stops moves to the new leader and copies its new entries."""
    a = aeron_backup_cluster(sim)
    leader_one = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    backup = a.start_cluster_backup_node(True, source_type=SourceType.LEADER)
    a.await_backup_live_log_position(a.log_position(leader_one))
    a.stop_node(leader_one)
    leader_two = a.await_leader_other_than(leader_one)
    a.await_new_leadership_event(1)
    a.send_and_await_messages(5)
    a.await_backup_live_log_position(a.log_position(leader_two))
    assert backup.agent.source_member_id == leader_two
    assert backup.agent.leader_member_id == leader_two
    terms = [e for e in backup.agent.recording_log.entries() if e.type is EntryType.TERM]
    assert [e.leadership_term_id for e in terms] == [t for t in range(a.leadership_term_id(leader_two) + 1)]
    _restore_and_await(a, 15)


def test_new_snapshot_is_retrieved_on_the_next_query_and_recorded_once_the_log_reaches_it(sim: SimKit) -> None:
    """A snapshot taken while backing up is retrieved at the next query (a second retrieval round) and
    enters the backup's recording log only when the backup's log reaches its position."""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    recorded_at: list[tuple[int, int]] = []  # (snapshot position, backup log position) when recorded
    backup = a.start_cluster_backup_node(True, backup_query_interval_ns=3600 * SECOND)
    a.c.on_event.append(
        lambda e: (
            recorded_at.append((e["log_position"], backup.live_log_position))
            if e.get("kind") == "backup_snapshot_recorded"
            else None
        )
    )
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(a.log_position(leader))
    assert backup.snapshots_retrieved_count == 0 and not _backup_snapshot_entries(backup)
    a.take_snapshot_on(leader)
    a.await_snapshot_count_everywhere(1)
    snapshot_position = a.log_position(leader)
    a.send_and_await_messages(5)
    a.await_backup_live_log_position(a.log_position(leader))
    assert backup.snapshots_retrieved_count == 0  # not before the next query
    a.set_next_backup_query_deadline_ns(0)
    a.await_backup_snapshot_retrieved_count(1)
    a.await_backup_state(BackupState.BACKING_UP)
    entries = _backup_snapshot_entries(backup)
    assert sorted(e.service_id for e in entries) == [SERVICE_ID_CONSENSUS_MODULE, 0]
    assert {e.log_position for e in entries} == {snapshot_position}
    assert recorded_at and all(snapshot <= log for snapshot, log in recorded_at)
    a.set_next_backup_query_deadline_ns(0)  # the same snapshot is not retrieved twice
    a.await_condition(lambda: a.next_backup_query_deadline_ns() > a.c.now_ns, "a second re-query")
    a.await_backup_state(BackupState.BACKING_UP)
    assert backup.snapshots_retrieved_count == 1
    _restore_and_await(a, 15)
    assert all(a.service(m).was_snapshot_loaded for m in range(3))


def test_snapshot_is_recorded_only_when_the_log_reaches_it(sim: SimKit) -> None:
    """A BEGINNING backup retrieves the snapshot before copying the log, and records it in its recording
    log only once its log reaches the snapshot's position (a restore never finds a snapshot past its log)."""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(800)
    a.take_snapshot_on(leader)
    a.await_snapshot_count_everywhere(1)
    snapshot_position = a.log_position(leader)
    assert snapshot_position > 64 * 1024  # the log takes several replay blocks
    checks: list[tuple[int, int]] = []
    backup = a.start_cluster_backup_node(True)
    a.c.on_event.append(
        lambda e: (
            checks.append(
                (max((s.log_position for s in _backup_snapshot_entries(backup)), default=-1), backup.live_log_position)
            )
            if e.get("kind") in ("backup_snapshots_retrieved", "backup_snapshot_recorded")
            else None
        )
    )
    a.await_backup_snapshot_retrieved_count(1)
    assert backup.live_log_position < snapshot_position and not _backup_snapshot_entries(backup)
    a.await_backup_live_log_position(a.log_position(leader))
    assert all(snapshot <= log for snapshot, log in checks)
    assert {e.log_position for e in _backup_snapshot_entries(backup)} == {snapshot_position}


def test_latest_snapshot_backup_log_starts_at_the_snapshot(sim: SimKit) -> None:
    """LATEST_SNAPSHOT: the backup's log starts at the snapshot's position; its first replay is from
    there; the restored cluster loads the snapshot and applies only the log after it."""
    a = aeron_backup_cluster(sim)
    leader, log_position = _snapshot_and_non_empty_log(a)
    snapshot_position = consensus_snapshot_position(a, leader)
    replays_from: list[int] = []
    backup = a.start_cluster_backup_node(True, replay_start=ReplayStart.LATEST_SNAPSHOT)
    _watch_requests(backup, lambda m: replays_from.append(m.from_position) if isinstance(m, ReplayRequest) else None)
    a.await_backup_live_log_position(log_position)
    assert replays_from[0] == snapshot_position
    recording = backup.agent.archive.recording
    assert (recording.start_position, recording.stop_position) == (snapshot_position, log_position)
    _restore_and_await(a, 17)
    assert all(a.service(m).was_snapshot_loaded for m in range(3))


def consensus_snapshot_position(a: AeronBackupCluster, member_id: int) -> int:
    with RecordingLog.open(a.c.storage(member_id)) as rl:
        entry = rl.latest_snapshot(SERVICE_ID_CONSENSUS_MODULE)
    assert entry is not None
    return int(entry.log_position)


def test_corrupt_snapshot_block_is_rejected(sim: SimKit) -> None:
    """A snapshot block failing its frame checks resets the backup: nothing of it is stored or recorded;
    the snapshot is retrieved again, whole, from the next member."""
    a = aeron_backup_cluster(sim)
    _, log_position = _snapshot_and_non_empty_log(a)
    backup = a.start_cluster_backup_node(True)
    corrupted: list[int] = []
    _corrupt_first(backup, ReplayPurpose.SNAPSHOT, corrupted)
    a.await_condition(lambda: bool(_resets(a)), "the corrupt snapshot is rejected")
    assert "corrupt" in _resets(a)[0]["reason"]
    assert backup.snapshots_retrieved_count == 0 and not _backup_snapshot_entries(backup)
    assert not _stored_snapshots(backup)  # nothing of it stored
    a.await_backup_live_log_position(log_position)
    assert backup.snapshots_retrieved_count == 1
    assert len(_backup_snapshot_entries(backup)) == 2
    _restore_and_await(a, 17)
    assert all(a.service(m).was_snapshot_loaded for m in range(3))


def test_corrupt_log_block_is_rejected(sim: SimKit) -> None:
    """A log block with a corrupt frame resets the backup with nothing of the block appended (not even
    its whole frames before the corrupt one); the log is then copied from the next member."""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    backup = a.start_cluster_backup_node(True)
    corrupted: list[int] = []
    _corrupt_first(backup, ReplayPurpose.REPLICATION, corrupted)
    at_reset: list[int] = []
    a.c.on_event.append(
        lambda e: at_reset.append(backup.live_log_position) if e.get("kind") == "backup_reset" else None
    )
    a.await_condition(lambda: bool(at_reset), "the corrupt log block is rejected")
    assert "bad log block" in _resets(a)[0]["reason"]
    assert at_reset[0] == corrupted[0] == 0
    a.await_backup_live_log_position(a.log_position(leader))
    _restore_and_await(a, 10)


def test_backup_never_holds_more_than_the_cluster_commit_position(sim: SimKit) -> None:
    """After every block the backup's log ends at or below the highest commit position of the members,
    through a leader change with uncommitted entries on the old leader."""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    backup = a.start_cluster_backup_node(True, source_type=SourceType.LEADER)
    violations: list[tuple[int, int]] = []
    blocks = [0]
    on_log_block = backup.agent._on_log_block

    def checked(msg: ReplayBlock, now_ns: int) -> None:
        on_log_block(msg, now_ns)
        blocks[0] += 1
        commit = max(a.c.member(m).commit_position for m in a.c.members_alive())
        if backup.live_log_position > commit:
            violations.append((backup.live_log_position, commit))

    backup.agent._on_log_block = checked  # type: ignore[method-assign]
    a.await_backup_live_log_position(a.log_position(leader))
    for follower in a.followers():
        a.c.pause(follower)  # the leader appends what nobody acknowledges
    a.send_messages(5)
    a.await_condition(lambda: a.c.member(leader).append_position > a.c.member(leader).commit_position, "uncommitted")
    a.c.run_for(SECOND // 10)
    assert backup.live_log_position <= a.c.member(leader).commit_position
    a.stop_node(leader)
    for m in range(3):
        if m != leader:
            a.c.resume(m)
    new_leader = a.await_leader_other_than(leader)
    a.await_election_closed(new_leader)
    a.reconnect_client()
    a.send_messages(3)
    a.await_response_message_count(13)
    a.await_backup_live_log_position(a.c.member(new_leader).commit_position, 20 * SECOND)
    assert blocks[0] > 1 and not violations


def test_restored_cluster_holds_every_acknowledged_message(sim: SimKit) -> None:
    """Every message acknowledged before the backup caught up is applied by the restored cluster, in
    the same order (the services' states equal the original leader's)."""
    a = aeron_backup_cluster(sim)
    leader = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(30)
    a.take_snapshot_on(leader)
    a.await_snapshot_count_everywhere(1)
    a.start_cluster_backup_node(True)
    a.send_and_await_messages(20)
    acknowledged = a.response_count()
    digest = a.service(leader).state_digest()
    a.await_backup_live_log_position(a.c.member(leader).commit_position)
    _restore_and_await(a, acknowledged)
    assert acknowledged == 50
    assert all(a.service(m).state_digest() == digest for m in range(3))


def test_backup_of_a_cluster_without_snapshots_retrieves_none(sim: SimKit) -> None:
    """The first request is a query; a cluster without snapshots has none to retrieve."""
    a = aeron_backup_cluster(sim)
    a.await_leader()
    requests: list[Message] = []
    backup = a.start_cluster_backup_node(True)
    _watch_requests(backup, requests.append)
    a.await_backup_state(BackupState.BACKING_UP)
    assert isinstance(requests[0], BackupQuery)
    assert not any(isinstance(r, SnapshotReplayRequest) for r in requests)


def test_backup_recording_log_holds_every_term_of_its_log(sim: SimKit) -> None:
    """A backup copying from a surviving follower across a leader change (no query due) stops at the
    new term's first frame, queries again, and records the term before copying it: its recording log
    describes every term its log holds, so a restore elects a term after them."""
    a = aeron_backup_cluster(sim)
    leader_one = a.await_leader()
    a.connect_client()
    a.send_and_await_messages(10)
    backup = a.start_cluster_backup_node(True, source_type=SourceType.FOLLOWER, backup_query_interval_ns=3600 * SECOND)
    a.await_backup_live_log_position(a.log_position(leader_one))
    a.stop_node(leader_one)
    leader_two = a.await_leader_other_than(leader_one)
    a.await_new_leadership_event(1)
    a.send_and_await_messages(5)
    a.await_backup_live_log_position(a.log_position(leader_two))
    recording = backup.agent.archive.recording
    frames = recording.read_frames(recording.start_position, recording.stop_position)
    frame_terms = {f.leadership_term_id for f in frames}
    recorded = {e.leadership_term_id for e in backup.agent.recording_log.entries() if e.type is EntryType.TERM}
    term_two = a.leadership_term_id(leader_two)
    assert frame_terms == {0, term_two} and frame_terms <= recorded
    restored_leader = _restore_and_await(a, 15)
    assert a.leadership_term_id(restored_leader) > term_two


def test_incomplete_snapshot_set_is_never_recorded(sim: SimKit) -> None:
    """The second snapshot of a set arrives corrupt and the members take a newer snapshot before the
    backup gets an answer again: the backup retrieves the newer set, and never records the older set
    it holds only part of (every recorded position has the consensus module's and the service's)."""
    a = aeron_backup_cluster(sim)
    leader, _ = _snapshot_and_non_empty_log(a)
    backup = a.start_cluster_backup_node(True)
    retrieving: list[tuple[int, int]] = []
    silent = [False]
    answer = backup._answer

    def second_snapshot_corrupt(member_id: int, msg: Message) -> Message | None:
        if silent[0]:
            return None
        reply = answer(member_id, msg)
        if isinstance(msg, SnapshotReplayRequest) and (msg.service_id, msg.recording_id) not in retrieving:
            retrieving.append((msg.service_id, msg.recording_id))
            if len(retrieving) == 2 and isinstance(reply, ReplayBlock):
                silent[0] = True
                entries = bytearray(reply.entries)
                entries[FRAME_HEADER_LENGTH] ^= 0xFF
                return dataclasses.replace(reply, entries=bytes(entries))
        return reply

    backup._answer = second_snapshot_corrupt  # type: ignore[method-assign]
    a.await_condition(lambda: bool(_resets(a)), "the corrupt snapshot is rejected")
    assert "corrupt" in _resets(a)[0]["reason"]
    a.take_snapshot_on(leader)
    a.await_snapshot_count_everywhere(2)
    a.send_and_await_messages(3)
    silent[0] = False
    a.await_backup_snapshot_retrieved_count(1)
    a.await_backup_live_log_position(a.log_position(leader))
    by_position: dict[int, list[int]] = {}
    for e in _backup_snapshot_entries(backup):
        by_position.setdefault(e.log_position, []).append(e.service_id)
    assert by_position == {consensus_snapshot_position(a, leader): [0, SERVICE_ID_CONSENSUS_MODULE]}
    assert [e["detail"]["services"] for e in a.c.events if e.get("kind") == "backup_snapshot_dropped"] != []
    _restore_and_await(a, 20)
    assert all(a.service(m).was_snapshot_loaded for m in range(3))


# --- authentication: the members' authenticator judges a backup's query as it does a client's connect


def _authenticated_cluster_with_snapshot(sim: SimKit, supplier: CredentialsSupplier) -> tuple[AeronBackupCluster, int]:
    """Aeron's common start of the authentication tests: three members with SampleAuthenticator, a client
    with ``supplier``'s credentials, 10 messages, a snapshot, 7 more; (the cluster, the leader's log position)."""
    a = aeron_backup_cluster(sim, authenticator_factory=SampleAuthenticator)
    leader = a.await_leader()
    connect_client_with(a, supplier)
    a.send_and_await_messages(10)
    a.take_snapshot_on(leader)
    a.await_snapshot_count_everywhere(1)
    a.send_messages(7)
    a.await_response_message_count(17)
    a.await_service_message_count(leader, 17)
    return a, a.log_position(leader)


@pytest.mark.parametrize(
    "supplier", [SIMPLE_CREDENTIALS_SUPPLIER, CHALLENGE_RESPONSE_CREDENTIALS_SUPPLIER], ids=["simple", "challenge"]
)
def test_should_backup_cluster_with_snapshot_and_non_empty_log_with_authentication(
    sim: SimKit, supplier: CredentialsSupplier
) -> None:
    """ClusterBackupTest.shouldBackupClusterWithSnapshotAndNonEmptyLogWithSimpleAuthentication and
    ClusterBackupTest.shouldBackupClusterWithSnapshotAndNonEmptyLogWithChallengeResponseAuthentication"""
    a, log_position = _authenticated_cluster_with_snapshot(sim, supplier)
    a.start_cluster_backup_node(True, credentials=supplier.encoded_credentials, on_challenge=supplier.on_challenge)
    a.await_backup_state(BackupState.BACKING_UP)
    a.await_backup_live_log_position(log_position)
    _restore_and_await(a, 17)
    assert all(a.service(m).was_snapshot_loaded for m in range(3))


@pytest.mark.parametrize(
    "supplier",
    [INVALID_SIMPLE_CREDENTIALS_SUPPLIER, INVALID_CHALLENGE_RESPONSE_CREDENTIALS_SUPPLIER],
    ids=["credentials", "challenge-response"],
)
def test_should_log_error_with_invalid_credentials(sim: SimKit, supplier: CredentialsSupplier) -> None:
    """ClusterBackupTest.shouldLogErrorWithInvalidCredentials and
    ClusterBackupTest.shouldLogErrorWithInvalidChallengeResponse"""
    a = aeron_backup_cluster(sim, authenticator_factory=SampleAuthenticator)
    a.await_leader()
    lines = len(a.c.log_lines)
    backup = a.start_cluster_backup_node(
        True, credentials=supplier.encoded_credentials, on_challenge=supplier.on_challenge
    )
    a.await_backup_state(BackupState.RESET_BACKUP)
    a.await_condition(
        lambda: any("AUTHENTICATION_REJECTED" in line for _t, _m, line in list(a.c.log_lines)[lines:]),
        "the backup logs AUTHENTICATION_REJECTED",
    )
    assert backup.agent.errors >= 1 and backup.live_log_position == 0


def test_a_challenged_backup_answers_once_and_a_stale_answer_is_refused(sim: SimKit) -> None:
    """The member keeps a challenged backup session until its answer: a second answer to the same session,
    or an answer to a session it never challenged, is an error, not a BackupResponse."""
    a = aeron_backup_cluster(sim, authenticator_factory=SampleAuthenticator)
    leader = a.await_leader()
    module = a.c.member(leader)
    assert isinstance(module, ConsensusModule)
    sessions = BackupSessions()
    challenge = sessions.on_backup_query(module, BackupQuery(1, b"admin:adminC"), a.c.now_ns)
    assert isinstance(challenge, Challenge) and challenge.encoded_challenge == SAMPLE_CHALLENGE
    answer = ChallengeResponse(2, challenge.cluster_session_id, b"admin:CSadmin")
    assert isinstance(sessions.on_challenge_response(module, answer, a.c.now_ns), BackupResponse)
    again = sessions.on_challenge_response(module, dataclasses.replace(answer, correlation_id=3), a.c.now_ns)
    assert isinstance(again, ControlResponse) and again.code is ControlResponseCode.ERROR
    rejected = sessions.on_backup_query(module, BackupQuery(4, b"admin:nope"), a.c.now_ns)
    assert isinstance(rejected, ControlResponse) and rejected.message == AUTHENTICATION_REJECTED
