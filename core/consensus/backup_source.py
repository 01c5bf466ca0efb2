"""A member as the source of a ClusterBackup: its answer to ``BackupQuery`` (Aeron's
``ConsensusModuleAgent.onBackupQuery``) and the archive replays a backup reads through (the committed
log, and each snapshot recording of the latest set).

A backup copies the log only up to the answering member's commit position: everything it holds is
committed, so a cluster restored from it never replays an entry the original cluster lost. The node
and the simulator both answer with these functions; the node on its control socket, the simulator by
direct delivery.
"""

from __future__ import annotations

from clusterlab.core.archive.errors import ArchiveError as StoreError
from clusterlab.core.archive.layout import SNAPSHOT_DIR, service_snapshot_store_dirs
from clusterlab.core.archive.snapshots import SNAPSHOT_SUFFIX
from clusterlab.core.archive.storage import Storage, join
from clusterlab.core.codec.control import (
    BackupResponse,
    BackupSnapshot,
    BackupTerm,
    ControlResponse,
    ControlResponseCode,
    SnapshotReplayRequest,
)
from clusterlab.core.codec.enums import ReplayPurpose
from clusterlab.core.codec.transport import ArchiveError, ReplayBlock, ReplayRequest
from clusterlab.core.consensus.context import NULL_POSITION, ConsensusModuleState
from clusterlab.core.consensus.log_replication import MAX_BLOCK_BYTES
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.recording_log import EntryType, RecordingLogError

ARCHIVE_ERROR_GENERIC = 0  # ArchiveError.code: the request cannot be served (Aeron's ArchiveException.GENERIC)
ARCHIVE_ERROR_UNKNOWN_RECORDING = 5  # Aeron's ArchiveException.UNKNOWN_RECORDING


def backup_response(module: ConsensusModule, correlation_id: int) -> BackupResponse | ControlResponse:
    """The member's ``BackupResponse``; REFUSED during an election, before start, after a storage failure
    or outside ACTIVE/SUSPENDED (Aeron answers a backup query only then)."""
    s = module.s
    if s.election is not None or s.state not in (ConsensusModuleState.ACTIVE, ConsensusModuleState.SUSPENDED):
        state = "an election" if s.election is not None else s.state.name
        return ControlResponse(correlation_id, ControlResponseCode.REFUSED, f"member {s.member_id} is in {state}")
    if module.storage_failure is not None:
        return ControlResponse(correlation_id, ControlResponseCode.REFUSED, "storage failed")
    terms = tuple(
        BackupTerm(e.leadership_term_id, e.term_base_log_position, e.log_position, e.timestamp)
        for e in module.recording_log.entries()
        if e.type is EntryType.TERM and e.is_valid
    )
    try:
        plan = module.recording_log.create_recovery_plan(
            module.ctx.service_count, module.archive_store.recording_extent
        )
        snapshots = tuple(
            BackupSnapshot(
                sn.recording_id,
                sn.leadership_term_id,
                sn.term_base_log_position,
                sn.log_position,
                sn.timestamp,
                sn.service_id,
            )
            for sn in plan.snapshots
        )
    except (RecordingLogError, StoreError) as e:
        return ControlResponse(correlation_id, ControlResponseCode.ERROR, f"no recovery plan: {e}"[:200])
    archive = module.archive
    return BackupResponse(
        correlation_id=correlation_id,
        log_recording_id=module.log_recording_id,
        log_start_position=archive.start_position,
        log_stop_position=archive.stop_position,
        commit_position=s.commit_position,
        leadership_term_id=s.leadership_term_id,
        leader_member_id=s.leader_member_id,
        member_id=s.member_id,
        terms=terms,
        snapshots=snapshots,
        cluster_members=",".join(str(m.member_id) for m in module.ctx.members),
    )


def log_replay(module: ConsensusModule, msg: ReplayRequest) -> ReplayBlock | ArchiveError:
    """One block of the committed log from ``msg.from_position`` (empty once caught up). The block
    ends at ``min(msg.to_position, commit position)``; ``recording_stop_position`` is the commit position."""
    archive = module.archive
    if msg.recording_id != module.log_recording_id:
        return ArchiveError(
            msg.correlation_id, ARCHIVE_ERROR_UNKNOWN_RECORDING, f"unknown recording {msg.recording_id}"
        )
    commit = min(module.s.commit_position, archive.stop_position)
    to = commit if msg.to_position == NULL_POSITION else min(msg.to_position, commit)
    position = msg.from_position
    if position < archive.start_position or position > archive.stop_position:
        reason = f"from_position {position} outside [{archive.start_position}, {archive.stop_position}]"
        return ArchiveError(msg.correlation_id, ARCHIVE_ERROR_GENERIC, reason)
    limit = min(max(msg.max_bytes, 0) or MAX_BLOCK_BYTES, MAX_BLOCK_BYTES)
    try:
        data = archive.read(position, to, max_bytes=limit) if position < to else b""
    except StoreError as e:
        return ArchiveError(msg.correlation_id, ARCHIVE_ERROR_GENERIC, str(e)[:200])
    return ReplayBlock(
        correlation_id=msg.correlation_id,
        recording_id=msg.recording_id,
        start_position=position,
        recording_stop_position=commit,
        leadership_term_id=module.s.leadership_term_id,
        purpose=ReplayPurpose.REPLICATION,
        flags=1 if position + len(data) >= to else 0,
        entries=data,
    )


def snapshot_path(service_id: int, recording_id: int) -> str:
    """Storage path of a snapshot recording of service ``service_id`` (-1: the consensus module)."""
    directory = SNAPSHOT_DIR if service_id < 0 else service_snapshot_store_dirs(service_id)[1]
    return join(directory, f"{recording_id:016d}{SNAPSHOT_SUFFIX}")


def snapshot_replay(storage: Storage, msg: SnapshotReplayRequest) -> ReplayBlock | ArchiveError:
    """A block of a snapshot recording's bytes (its records framed from position 0) from
    ``msg.from_position``; ``recording_stop_position`` is the recording's length."""
    path = snapshot_path(msg.service_id, msg.recording_id)
    try:
        data = storage.read_file(path)
    except FileNotFoundError:
        reason = f"no snapshot recording {msg.recording_id} of service {msg.service_id}"
        return ArchiveError(msg.correlation_id, ARCHIVE_ERROR_UNKNOWN_RECORDING, reason)
    except OSError as e:
        return ArchiveError(msg.correlation_id, ARCHIVE_ERROR_GENERIC, f"snapshot {msg.recording_id}: {e}"[:200])
    if not 0 <= msg.from_position <= len(data):
        reason = f"from_position {msg.from_position} outside [0, {len(data)}]"
        return ArchiveError(msg.correlation_id, ARCHIVE_ERROR_GENERIC, reason)
    limit = min(max(msg.max_bytes, 0) or MAX_BLOCK_BYTES, MAX_BLOCK_BYTES)
    chunk = data[msg.from_position : msg.from_position + limit]
    return ReplayBlock(
        correlation_id=msg.correlation_id,
        recording_id=msg.recording_id,
        start_position=msg.from_position,
        recording_stop_position=len(data),
        leadership_term_id=-1,
        purpose=ReplayPurpose.SNAPSHOT,
        flags=1 if msg.from_position + len(chunk) >= len(data) else 0,
        entries=chunk,
    )
