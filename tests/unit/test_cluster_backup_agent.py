"""Ports of Aeron's ``ClusterBackupAgentTest`` (aeron-cluster/src/test/java/io/aeron/cluster) and unit
tests of :class:`ClusterBackupAgent` driven by hand: each request it asks for, each answer handed back.

Aeron's ``replayStartPosition(lastTerm, snapshotsRetrieved, replayStart, backupArchive)`` reads the stop
position of the last term's recording from the backup's archive; ours takes that stop position (None:
the backup holds no log yet)."""

from __future__ import annotations

from clusterlab.core.archive.storage import MemoryStorage
from clusterlab.core.codec.control import (
    BackupQuery,
    BackupResponse,
    BackupSnapshot,
    BackupTerm,
    ControlResponse,
    ControlResponseCode,
    SnapshotReplayRequest,
)
from clusterlab.core.codec.enums import ReplayPurpose
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.transport import ReplayBlock, ReplayRequest
from clusterlab.core.consensus.cluster_backup import (
    BackupContext,
    BackupState,
    ClusterBackupAgent,
    ReplayStart,
    SourceType,
    replay_start_position,
)
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE, SERVICE_ID_CONSENSUS_MODULE

MS = 1_000_000


def test_should_return_replay_start_position_if_already_existing() -> None:
    """ClusterBackupAgentTest.shouldReturnReplayStartPositionIfAlreadyExisting"""
    expected_start_position = 892374
    assert replay_start_position(expected_start_position, [], ReplayStart.BEGINNING) == expected_start_position


def test_should_return_null_position_if_last_term_is_null_and_snapshots_is_empty() -> None:
    """ClusterBackupAgentTest.shouldReturnNullPositionIfLastTermIsNullAndSnapshotsIsEmpty"""
    assert replay_start_position(None, [], ReplayStart.BEGINNING) == NULL_POSITION


def test_should_largest_position_less_than_or_equal_to_initial_replay_position() -> None:
    """ClusterBackupAgentTest.shouldLargestPositionLessThanOrEqualToInitialReplayPosition"""
    snapshots = [BackupSnapshot(1, 0, 0, p, 0, SERVICE_ID_CONSENSUS_MODULE) for p in range(1000, 7000, 1000)]
    assert replay_start_position(None, snapshots, ReplayStart.BEGINNING) == NULL_POSITION
    assert replay_start_position(None, snapshots, ReplayStart.LATEST_SNAPSHOT) == 6000


def test_latest_snapshot_replay_start_reads_only_consensus_module_snapshots() -> None:
    """A service snapshot further on does not move the start (Aeron reads the consensus module's only)."""
    snapshots = [BackupSnapshot(1, 0, 0, 1000, 0, SERVICE_ID_CONSENSUS_MODULE), BackupSnapshot(2, 0, 0, 9000, 0, 0)]
    assert replay_start_position(None, snapshots, ReplayStart.LATEST_SNAPSHOT) == 1000


def test_source_type_is_acceptable() -> None:
    """Aeron ``LogSourceValidator.isAcceptable``."""
    assert SourceType.LEADER.is_acceptable(1, 1) and not SourceType.LEADER.is_acceptable(1, 2)
    assert not SourceType.LEADER.is_acceptable(NULL_VALUE, 1)
    assert SourceType.FOLLOWER.is_acceptable(1, 2) and not SourceType.FOLLOWER.is_acceptable(1, 1)
    assert SourceType.FOLLOWER.is_acceptable(NULL_VALUE, 1)
    assert SourceType.ANY.is_acceptable(1, 1) and SourceType.ANY.is_acceptable(1, 2)


def _cid(request: Message) -> int:
    """The correlation id of a request the agent sent."""
    assert isinstance(request, BackupQuery | ReplayRequest | SnapshotReplayRequest)
    return request.correlation_id


def _agent(**options: object) -> ClusterBackupAgent:
    return ClusterBackupAgent(BackupContext(storage=MemoryStorage("backup"), source_member_ids=(0, 1, 2), **options))  # type: ignore[arg-type]


def _response(correlation_id: int, member_id: int, leader_member_id: int = 0, commit: int = 0) -> BackupResponse:
    return BackupResponse(
        correlation_id=correlation_id,
        log_recording_id=0,
        log_start_position=0,
        log_stop_position=commit,
        commit_position=commit,
        leadership_term_id=0,
        leader_member_id=leader_member_id,
        member_id=member_id,
        terms=(BackupTerm(0, 0, NULL_POSITION, 1),),
        snapshots=(),
        cluster_members="0,1,2",
    )


def test_agent_queries_the_first_member_then_backs_up_from_it() -> None:
    agent = _agent()
    sent = agent.poll(0)
    assert sent is not None and sent[0] == 0 and isinstance(sent[1], BackupQuery)
    assert agent.poll(0) is None  # one request outstanding
    agent.on_reply(0, _response(_cid(sent[1]), 0), MS)
    assert agent.state is BackupState.BACKING_UP
    assert agent.time_of_next_backup_query_ns == MS + agent.ctx.backup_query_interval_ns
    replay = agent.poll(MS)
    assert replay is not None and replay[0] == 0 and isinstance(replay[1], ReplayRequest)
    assert replay[1].from_position == 0 and replay[1].recording_id == 0
    empty = ReplayBlock(_cid(replay[1]), 0, 0, 0, 0, ReplayPurpose.REPLICATION, 1, b"")
    agent.on_reply(0, empty, 2 * MS)
    assert agent.poll(2 * MS) is None  # caught up: the next replay waits a poll interval
    assert agent.next_deadline_ns() == 2 * MS + agent.ctx.live_log_poll_interval_ns


def test_refused_query_resets_to_the_next_member() -> None:
    """RESET_BACKUP: a REFUSED answer counts an error; the next query goes to the next member after a pause."""
    agent = _agent()
    sent = agent.poll(0)
    assert sent is not None
    agent.on_reply(0, ControlResponse(_cid(sent[1]), ControlResponseCode.REFUSED, "election"), MS)
    assert (agent.state, agent.errors, agent.source_member_id) == (BackupState.RESET_BACKUP, 1, 1)
    assert agent.poll(MS) is None
    again = agent.poll(MS + agent.ctx.retry_interval_ns)
    assert again is not None and again[0] == 1 and isinstance(again[1], BackupQuery)
    assert agent.state is BackupState.BACKUP_QUERY


def test_unanswered_request_times_out_to_the_next_member() -> None:
    agent = _agent()
    assert agent.poll(0) is not None
    assert agent.next_deadline_ns() == agent.ctx.request_timeout_ns
    assert agent.poll(agent.ctx.request_timeout_ns) is None
    assert (agent.state, agent.source_member_id, agent.errors) == (BackupState.RESET_BACKUP, 1, 1)


def test_stale_or_foreign_answers_are_dropped() -> None:
    agent = _agent()
    sent = agent.poll(0)
    assert sent is not None
    agent.on_reply(0, _response(_cid(sent[1]) + 1, 0), MS)  # another correlation id
    agent.on_reply(1, _response(_cid(sent[1]), 1), MS)  # another member
    assert agent.state is BackupState.BACKUP_QUERY and agent.awaiting_reply and agent.errors == 0


def test_source_type_leader_resets_on_a_follower_answer() -> None:
    """Aeron ``onBackupResponse``: a member the source type does not accept leads to RESET_BACKUP."""
    agent = _agent(source_type=SourceType.LEADER)
    sent = agent.poll(0)
    assert sent is not None
    agent.on_reply(0, _response(_cid(sent[1]), 0, leader_member_id=2), MS)
    assert (agent.state, agent.source_member_id) == (BackupState.RESET_BACKUP, 1)
    assert agent.cluster_commit_position == NULL_POSITION  # nothing taken from the refused answer


def test_each_error_answer_moves_to_the_next_member_in_turn() -> None:
    """Every ERROR answer resets the backup to the next member, round the members in order."""
    agent = _agent(backup_progress_timeout_ns=50 * MS, retry_interval_ns=MS)
    now = 0
    sources = []
    for _ in range(4):
        sent = agent.poll(now)
        assert sent is not None
        sources.append(sent[0])
        agent.on_reply(sent[0], ControlResponse(_cid(sent[1]), ControlResponseCode.ERROR, "x"), now)
        now += agent.ctx.retry_interval_ns
    assert sources == [0, 1, 2, 0] and agent.errors == 4
