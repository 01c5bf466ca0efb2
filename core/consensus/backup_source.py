"""A member as the source of a ClusterBackup: its answer to ``BackupQuery`` (Aeron's
``ConsensusModuleAgent.onBackupQuery``: the query's credentials judged by the member's authenticator,
:class:`BackupSessions`) and the archive replays a backup reads through (the committed log, and each
snapshot recording of the latest set).

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
from clusterlab.core.codec.session import Challenge, ChallengeResponse
from clusterlab.core.codec.transport import ArchiveError, ReplayBlock, ReplayRequest
from clusterlab.core.consensus.context import NULL_POSITION, ConsensusModuleState
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.recording_log import EntryType, RecordingLogError
from clusterlab.core.consensus.term_replication import MAX_BLOCK_BYTES

ARCHIVE_ERROR_GENERIC = 0  # ArchiveError.code: the request cannot be served (Aeron's ArchiveException.GENERIC)
ARCHIVE_ERROR_UNKNOWN_RECORDING = 5  # Aeron's ArchiveException.UNKNOWN_RECORDING


AUTHENTICATION_REJECTED = "AUTHENTICATION_REJECTED"  # the REFUSED message of a rejected backup (Aeron's EventCode)
BACKUP_SESSION_ID_BASE = -(1 << 40)  # backup sessions' ids, counting down: never a client session's
MAX_CHALLENGED_BACKUP_SESSIONS = 64  # challenges awaiting an answer; the oldest is forgotten beyond


class _BackupSessionProxy:
    """The authenticator's handle on one backup session (a ``SessionProxy``): its verdict."""

    def __init__(self, cluster_session_id: int) -> None:
        self._id = cluster_session_id
        self.verdict = ""  # "", "challenged", "authenticated" or "rejected"
        self.encoded_challenge = b""

    @property
    def cluster_session_id(self) -> int:
        return self._id

    def challenge(self, encoded_challenge: bytes) -> bool:
        self.verdict, self.encoded_challenge = "challenged", bytes(encoded_challenge)
        return True

    def authenticate(self, encoded_principal: bytes) -> bool:
        self.verdict = "authenticated"
        return True

    def reject(self) -> None:
        self.verdict = "rejected"


class BackupSessions:
    """A member's backup sessions (Aeron's ``pendingBackupSessions``): each ``BackupQuery`` is a session that
    the member's authenticator (the one client sessions meet) authenticates, challenges or rejects, as it
    does a client's connect. The node and the simulator each keep one per running member; nothing of it is
    replicated. An authenticator that has not decided when asked gets the query REFUSED (the backup asks
    again after its retry interval)."""

    def __init__(self) -> None:
        self._next_session_id = BACKUP_SESSION_ID_BASE
        self._challenged: dict[int, int] = {}  # session id -> correlation id of the query it answers

    def on_backup_query(self, module: ConsensusModule, msg: BackupQuery, now_ns: int) -> Message:
        """A BackupQuery: refused unless the member can answer, then judged by the authenticator."""
        refused = _refusal(module, msg.correlation_id)
        if refused is not None:
            return refused
        session_id = self._next_session_id
        self._next_session_id -= 1
        authenticator = module.client_sessions.authenticator
        now_ms = module.s.cluster_time_ms(now_ns)
        authenticator.on_connect_request(session_id, bytes(msg.encoded_credentials), now_ms)
        proxy = _BackupSessionProxy(session_id)
        authenticator.on_connected_session(proxy, now_ms)
        return self._answer(module, proxy, msg.correlation_id)

    def on_challenge_response(self, module: ConsensusModule, msg: ChallengeResponse, now_ns: int) -> Message:
        """A backup's answer to the challenge of one of its queries."""
        if self._challenged.pop(msg.cluster_session_id, None) is None:
            reason = f"no challenged backup session {msg.cluster_session_id}"
            return ControlResponse(msg.correlation_id, ControlResponseCode.ERROR, reason)
        refused = _refusal(module, msg.correlation_id)
        if refused is not None:
            return refused
        authenticator = module.client_sessions.authenticator
        now_ms = module.s.cluster_time_ms(now_ns)
        authenticator.on_challenge_response(msg.cluster_session_id, bytes(msg.encoded_credentials), now_ms)
        proxy = _BackupSessionProxy(msg.cluster_session_id)
        authenticator.on_challenged_session(proxy, now_ms)
        return self._answer(module, proxy, msg.correlation_id)

    def _answer(self, module: ConsensusModule, proxy: _BackupSessionProxy, correlation_id: int) -> Message:
        if proxy.verdict == "authenticated":
            return backup_response(module, correlation_id)
        if proxy.verdict == "challenged":
            if len(self._challenged) >= MAX_CHALLENGED_BACKUP_SESSIONS:
                del self._challenged[next(iter(self._challenged))]
            self._challenged[proxy.cluster_session_id] = correlation_id
            return Challenge(correlation_id, proxy.cluster_session_id, proxy.encoded_challenge)
        if proxy.verdict == "rejected":
            return ControlResponse(correlation_id, ControlResponseCode.REFUSED, AUTHENTICATION_REJECTED)
        return ControlResponse(correlation_id, ControlResponseCode.REFUSED, "authentication pending")


def _refusal(module: ConsensusModule, correlation_id: int) -> ControlResponse | None:
    """REFUSED during an election, before start, after a storage failure or outside ACTIVE/SUSPENDED
    (Aeron answers a backup query only then); None when the member can answer."""
    s = module.s
    if s.election is not None or s.state not in (ConsensusModuleState.ACTIVE, ConsensusModuleState.SUSPENDED):
        state = "an election" if s.election is not None else s.state.name
        return ControlResponse(correlation_id, ControlResponseCode.REFUSED, f"member {s.member_id} is in {state}")
    if module.storage_failure is not None:
        return ControlResponse(correlation_id, ControlResponseCode.REFUSED, "storage failed")
    return None


def backup_response(module: ConsensusModule, correlation_id: int) -> BackupResponse | ControlResponse:
    """The member's ``BackupResponse`` to an authenticated query (REFUSED as :func:`_refusal` says)."""
    refused = _refusal(module, correlation_id)
    if refused is not None:
        return refused
    s = module.s
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
