"""ClusterBackup: a node that follows a live cluster's committed log and its snapshots without voting,
into a directory laid out as a member's (Aeron's ``ClusterBackupAgent``), so a cluster can be restored
from it.

The agent is sans-IO. A driver (``clusterlab.core.runtime.backup`` for real processes, the simulator's
backup in ``clusterlab.harness.sim_backup``) asks :meth:`ClusterBackupAgent.poll` for the next request,
sends it to the named member and hands the answer (or its absence) back through
:meth:`ClusterBackupAgent.on_reply` / :meth:`ClusterBackupAgent.on_no_reply`. One request is
outstanding at a time.

States follow ``ClusterBackup.State``:

* ``BACKUP_QUERY``: ask a member for a ``BackupResponse``: its log's extent, commit position, terms and
  latest snapshot set. Snapshots the backup does not hold yet are retrieved first. The query carries the
  backup's credentials; the member's authenticator judges them as it does a client's connect: it may
  challenge (the agent answers with ``ctx.on_challenge``) or reject (AUTHENTICATION_REJECTED: a reset).
* ``SNAPSHOT_RETRIEVE``: copy each snapshot recording in blocks (``SnapshotReplayRequest``); each is
  checked frame by frame and written into the backup's own snapshot store (consensus module's or the
  service's, as on a member).
* ``LIVE_LOG_REPLAY``: an empty log starts at the source's log start (``ReplayStart.BEGINNING``) or at
  the retrieved snapshot's position (``ReplayStart.LATEST_SNAPSHOT``).
* ``UPDATE_RECORDING_LOG``: term entries and snapshot sets the log now covers go into the backup's
  recording log (a snapshot only once the log reaches its position, so a restore never finds a snapshot
  ahead of its log).
* ``BACKING_UP``: read the committed log from the backup's stop position (``ReplayRequest``), block after
  block, then every ``live_log_poll_interval_ns``; query again every ``backup_query_interval_ns``.
* ``RESET_BACKUP``: a member refused, failed, did not answer within ``request_timeout_ns``, made no
  progress within ``backup_progress_timeout_ns``, or is not of the backup's ``SourceType`` (Aeron's
  ``LogSourceValidator``): the next query goes to the next member.

The backup's recording log describes its log: a log frame of a term the last ``BackupResponse`` did not
list stops the copy there until a new query lists it, and a snapshot set is recorded only whole (one
snapshot per service and the consensus module's, at one position).

Only committed entries are copied (each member answers up to its own commit position), so the backup's
log is always a prefix of the cluster's committed log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum
from typing import Any

from clusterlab.core.archive.archive import Archive
from clusterlab.core.archive.catalogue import Catalogue
from clusterlab.core.archive.layout import service_snapshot_store_dirs
from clusterlab.core.archive.snapshots import SnapshotStore
from clusterlab.core.archive.storage import Storage
from clusterlab.core.codec.control import (
    BackupQuery,
    BackupResponse,
    BackupSnapshot,
    BackupTerm,
    ControlResponse,
    SnapshotReplayRequest,
)
from clusterlab.core.codec.enums import ReplayPurpose
from clusterlab.core.codec.framewalk import Frame
from clusterlab.core.codec.framing import walk_frames
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.session import Challenge, ChallengeResponse
from clusterlab.core.codec.transport import ArchiveError, ReplayBlock, ReplayRequest
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE
from clusterlab.core.consensus.recording_log import SERVICE_ID_CONSENSUS_MODULE, RecordingLog
from clusterlab.core.consensus.term_replication import MAX_BLOCK_BYTES

SECOND_NS = 1_000_000_000


class BackupState(IntEnum):
    """Aeron's ``ClusterBackup.State`` (same codes)."""

    BACKUP_QUERY = 0
    SNAPSHOT_RETRIEVE = 1
    LIVE_LOG_RECORD = 2
    LIVE_LOG_REPLAY = 3
    UPDATE_RECORDING_LOG = 4
    BACKING_UP = 5
    RESET_BACKUP = 6
    CLOSED = 7


class ReplayStart(Enum):
    """Where an empty backup's log starts (Aeron's ``ClusterBackup.Configuration.ReplayStart``)."""

    BEGINNING = "beginning"
    LATEST_SNAPSHOT = "latest-snapshot"


class SourceType(Enum):
    """Which member a backup copies from (Aeron's ``ClusterBackup.SourceType``): a member answering a
    query that its type does not accept is left for the next one (Aeron's ``LogSourceValidator``)."""

    ANY = "any"
    LEADER = "leader"
    FOLLOWER = "follower"

    def is_acceptable(self, leader_member_id: int, member_id: int) -> bool:
        """Aeron ``LogSourceValidator.isAcceptable``."""
        if self is SourceType.LEADER:
            return leader_member_id != NULL_VALUE and leader_member_id == member_id
        if self is SourceType.FOLLOWER:
            return leader_member_id == NULL_VALUE or leader_member_id != member_id
        return True


def replay_start_position(
    existing_stop_position: int | None,
    snapshots_retrieved: Sequence[BackupSnapshot],
    replay_start: ReplayStart,
) -> int:
    """Where the backup's log replay starts (Aeron ``ClusterBackupAgent.replayStartPosition``): the stop
    position of the log it already holds; else ``NULL_POSITION`` (the source's log start) for
    ``BEGINNING``; else the highest consensus-module snapshot position retrieved (``NULL_POSITION`` if none)."""
    if existing_stop_position is not None:
        return existing_stop_position
    if replay_start is ReplayStart.BEGINNING:
        return NULL_POSITION
    position = NULL_POSITION
    for sn in snapshots_retrieved:
        if sn.service_id == SERVICE_ID_CONSENSUS_MODULE and sn.log_position > position:
            position = sn.log_position
    return position


SnapshotFilter = Callable[[Sequence[BackupSnapshot]], list[BackupSnapshot]]


def retrieve_all(snapshots: Sequence[BackupSnapshot]) -> list[BackupSnapshot]:
    """The default snapshot choice: retrieve every snapshot the backup lacks."""
    return list(snapshots)


def no_answer(encoded_challenge: bytes) -> bytes:
    """The default answer to a challenge: no credentials (Aeron's ``NullCredentialsSupplier``)."""
    return b""


def _noop_log(line: str) -> None:
    """Default log sink: drop the line."""


def _noop_event(kind: str, detail: dict[str, Any]) -> None:
    """Default event sink: drop the event."""


@dataclass
class BackupContext:
    """What a ClusterBackup is given: where it writes, whom it asks, and its timing."""

    storage: Storage
    source_member_ids: tuple[int, ...]
    service_count: int = 1
    replay_start: ReplayStart = ReplayStart.BEGINNING
    source_type: SourceType = SourceType.ANY
    backup_query_interval_ns: int = SECOND_NS
    backup_progress_timeout_ns: int = 10 * SECOND_NS
    request_timeout_ns: int = SECOND_NS
    live_log_poll_interval_ns: int = 10_000_000
    retry_interval_ns: int = 100_000_000
    file_sync: bool = False
    snapshot_filter: SnapshotFilter = field(default=retrieve_all)  # a test seam: planted backup bugs
    # Aeron's ``CredentialsSupplier``: what a BackupQuery carries, and the answer to a member's challenge.
    credentials: bytes = b""
    on_challenge: Callable[[bytes], bytes] = field(default=no_answer)
    log: Callable[[str], None] = field(default=_noop_log)
    events: Callable[[str, dict[str, Any]], None] = field(default=_noop_event)


@dataclass
class _Retrieval:
    """One snapshot recording being copied."""

    snapshot: BackupSnapshot
    data: bytearray = field(default_factory=bytearray)


class ClusterBackupAgent:
    """The backup's state machine over its storage; see the module docstring."""

    def __init__(self, ctx: BackupContext) -> None:
        if not ctx.source_member_ids:
            raise ValueError("a ClusterBackup needs at least one member to ask")
        self.ctx = ctx
        self.archive = Archive(ctx.storage, file_sync=ctx.file_sync, log=ctx.log)
        self.recording_log = RecordingLog.open(ctx.storage, file_sync=ctx.file_sync, log=ctx.log)
        self._service_stores: dict[int, SnapshotStore] = {}
        self.state = BackupState.BACKUP_QUERY
        self.source_index = 0
        self.source_member_id = ctx.source_member_ids[0]
        self.leader_member_id = NULL_VALUE
        self.cluster_commit_position = NULL_POSITION
        self.snapshots_retrieved_count = 0  # retrieval rounds completed (Aeron's snapshot retrieve count)
        self.errors = 0
        self.time_of_next_backup_query_ns = 0
        self._terms: tuple[BackupTerm, ...] = ()
        self._response: BackupResponse | None = None
        self._to_retrieve: list[_Retrieval] = []
        self._pending_sets: list[list[tuple[BackupSnapshot, int]]] = []  # retrieved, not yet in the recording log
        self._correlation_id = 0
        self._outstanding: Message | None = None
        self._challenge_response: ChallengeResponse | None = None  # due next: the answer to a challenge
        self._request_deadline_ns = 0
        self._time_of_last_progress_ns = 0
        self._next_request_ns = 0

    # ------------------------------------------------------------------ what the driver reads

    @property
    def live_log_position(self) -> int:
        """The backup's log stop position: the cluster's committed log is copied up to here."""
        return self.archive.recording.stop_position

    @property
    def awaiting_reply(self) -> bool:
        return self._outstanding is not None

    def next_deadline_ns(self) -> int:
        """When :meth:`poll` next has something to do."""
        if self.state is BackupState.CLOSED:
            return 2**63 - 1
        if self._outstanding is not None:
            return self._request_deadline_ns
        return self._next_request_ns

    # ------------------------------------------------------------------ requests

    def poll(self, now_ns: int) -> tuple[int, Message] | None:
        """The next request to send now, as (member id, message), or None."""
        if self.state is BackupState.CLOSED:
            return None
        if self._outstanding is not None:
            if now_ns >= self._request_deadline_ns:
                self.on_no_reply(now_ns, "no answer within the request timeout")
            return None
        if now_ns < self._next_request_ns:
            return None
        if self._time_of_last_progress_ns == 0:
            self._time_of_last_progress_ns = now_ns
        if now_ns > self._time_of_last_progress_ns + self.ctx.backup_progress_timeout_ns:
            self._reset(now_ns, "no progress within the backup progress timeout")
            return None
        request = self._request(now_ns)
        if request is None:
            return None
        self._outstanding = request
        self._request_deadline_ns = now_ns + self.ctx.request_timeout_ns
        return self.source_member_id, request

    def _request(self, now_ns: int) -> Message | None:
        self._correlation_id += 1
        cid = self._correlation_id
        if self._challenge_response is not None:
            answer, self._challenge_response = self._challenge_response, None
            return replace(answer, correlation_id=cid)
        if self.state in (BackupState.BACKUP_QUERY, BackupState.RESET_BACKUP):
            self.state = BackupState.BACKUP_QUERY
            return BackupQuery(cid, self.ctx.credentials)
        if self.state is BackupState.SNAPSHOT_RETRIEVE:
            r = self._to_retrieve[0]
            sn = r.snapshot
            return SnapshotReplayRequest(cid, sn.recording_id, len(r.data), sn.service_id, MAX_BLOCK_BYTES)
        if self.state is BackupState.BACKING_UP and now_ns >= self.time_of_next_backup_query_ns:
            self.state = BackupState.BACKUP_QUERY
            return BackupQuery(cid, self.ctx.credentials)
        return ReplayRequest(
            correlation_id=cid,
            recording_id=0,
            from_position=self.live_log_position,
            to_position=NULL_POSITION,
            requester_member_id=NULL_VALUE,
            purpose=ReplayPurpose.REPLICATION,
            max_bytes=MAX_BLOCK_BYTES,
        )

    # ------------------------------------------------------------------ answers

    def on_no_reply(self, now_ns: int, reason: str) -> None:
        """The outstanding request got no answer (timeout, member gone): ask the next member."""
        if self._outstanding is None:
            return
        self._outstanding = None
        self._reset(now_ns, reason)

    def on_reply(self, member_id: int, reply: Message, now_ns: int) -> None:
        """An answer from ``member_id``; answers to anything but the outstanding request are dropped."""
        request = self._outstanding
        if (
            request is None
            or member_id != self.source_member_id
            or getattr(reply, "correlation_id", None) != getattr(request, "correlation_id", None)
        ):
            self.ctx.log(f"backup: dropped a stale or unexpected {type(reply).__name__} from member {member_id}")
            return
        self._outstanding = None
        query = isinstance(request, BackupQuery | ChallengeResponse)
        if isinstance(reply, ControlResponse | ArchiveError):
            text = reply.message if isinstance(reply, ControlResponse) else reply.error_message
            self._reset(now_ns, f"member {member_id} answered {type(request).__name__} with: {text}")
        elif isinstance(reply, BackupResponse) and query:
            self._on_backup_response(reply, now_ns)
        elif isinstance(reply, Challenge) and isinstance(request, BackupQuery):
            self._on_challenge(reply, now_ns)
        elif isinstance(reply, ReplayBlock) and isinstance(request, SnapshotReplayRequest):
            self._on_snapshot_block(reply, now_ns)
        elif isinstance(reply, ReplayBlock) and isinstance(request, ReplayRequest):
            self._on_log_block(reply, now_ns)
        else:
            self._reset(now_ns, f"member {member_id} answered {type(request).__name__} with {type(reply).__name__}")

    def _on_challenge(self, msg: Challenge, now_ns: int) -> None:
        """The member's authenticator challenges the query: the answer goes to it next (Aeron
        ``ClusterBackupAgent.onChallenge``); its verdict arrives as a BackupResponse or a rejection."""
        self._progress(now_ns)
        self._challenge_response = ChallengeResponse(
            0, msg.cluster_session_id, self.ctx.on_challenge(bytes(msg.encoded_challenge))
        )

    def _reset(self, now_ns: int, reason: str) -> None:
        """RESET_BACKUP: count the error, drop a half-copied snapshot, ask the next member after a pause."""
        self.errors += 1
        self.ctx.log(f"backup: member {self.source_member_id}: {reason}; asking the next member")
        self.ctx.events("backup_reset", {"source": self.source_member_id, "reason": reason})
        self.state = BackupState.RESET_BACKUP
        self._challenge_response = None
        self._to_retrieve.clear()
        self.source_index = (self.source_index + 1) % len(self.ctx.source_member_ids)
        self.source_member_id = self.ctx.source_member_ids[self.source_index]
        self._time_of_last_progress_ns = now_ns
        self._next_request_ns = now_ns + self.ctx.retry_interval_ns

    def _progress(self, now_ns: int) -> None:
        self._time_of_last_progress_ns = now_ns
        self._next_request_ns = now_ns

    # ------------------------------------------------------------------ BACKUP_QUERY

    def _on_backup_response(self, msg: BackupResponse, now_ns: int) -> None:
        if not self.ctx.source_type.is_acceptable(msg.leader_member_id, msg.member_id):
            kind = self.ctx.source_type.value
            self._reset(now_ns, f"member {msg.member_id} is not a {kind} source (leader {msg.leader_member_id})")
            return
        self._progress(now_ns)
        self.leader_member_id = msg.leader_member_id
        self.cluster_commit_position = msg.commit_position
        self._terms = msg.terms
        self.time_of_next_backup_query_ns = now_ns + self.ctx.backup_query_interval_ns
        wanted = [sn for sn in msg.snapshots if not self._holds(sn)]
        self._to_retrieve = [_Retrieval(sn) for sn in self.ctx.snapshot_filter(wanted)]
        self.ctx.events(
            "backup_response",
            {
                "source": msg.member_id,
                "leader": msg.leader_member_id,
                "commit_position": msg.commit_position,
                "snapshots": [sn.log_position for sn in msg.snapshots if sn.service_id == SERVICE_ID_CONSENSUS_MODULE],
                "retrieve": len(self._to_retrieve),
            },
        )
        self._response = msg
        if self._to_retrieve:
            self.state = BackupState.SNAPSHOT_RETRIEVE
            return
        self._follow_log(msg)

    def _follow_log(self, msg: BackupResponse | None) -> None:
        """LIVE_LOG_REPLAY, UPDATE_RECORDING_LOG, then BACKING_UP."""
        if msg is not None:
            self._start_log(msg)
        self.state = BackupState.UPDATE_RECORDING_LOG
        self._update_recording_log()
        self.state = BackupState.BACKING_UP

    def _holds(self, sn: BackupSnapshot) -> bool:
        """The backup already holds this service's snapshot at this log position."""
        if any(
            s.service_id == sn.service_id and s.log_position == sn.log_position
            for p in self._pending_sets
            for s, _ in p
        ):
            return True
        entry = self.recording_log.latest_snapshot(sn.service_id)
        return entry is not None and entry.log_position == sn.log_position

    def _start_log(self, msg: BackupResponse) -> None:
        """LIVE_LOG_REPLAY: an empty log starts where the replay start says (a recording cannot begin
        below the source's start, which a purge may have moved)."""
        recording = self.archive.recording
        if recording.segment_count or recording.stop_position:
            if recording.stop_position < msg.log_start_position:
                self.ctx.log(
                    f"backup: the source's log starts at {msg.log_start_position}, beyond the backup's "
                    f"{recording.stop_position}: the gap cannot be copied"
                )
            return
        retrieved = [s for p in self._pending_sets for s, _ in p]
        held = self.recording_log.latest_snapshot(SERVICE_ID_CONSENSUS_MODULE)
        if held is not None:
            retrieved.append(BackupSnapshot(0, 0, 0, held.log_position, 0, SERVICE_ID_CONSENSUS_MODULE))
        start = max(msg.log_start_position, replay_start_position(None, retrieved, self.ctx.replay_start))
        if start > 0:
            recording.start_at(start)
            self.archive.sync_catalogue()
        self.state = BackupState.LIVE_LOG_REPLAY
        self.ctx.log(f"backup: log starts at {start} ({self.ctx.replay_start.value})")

    # ------------------------------------------------------------------ SNAPSHOT_RETRIEVE

    def _on_snapshot_block(self, msg: ReplayBlock, now_ns: int) -> None:
        r = self._to_retrieve[0]
        if msg.start_position != len(r.data):
            self._reset(now_ns, f"snapshot block at {msg.start_position}, expected {len(r.data)}")
            return
        self._progress(now_ns)
        r.data += msg.entries
        if len(r.data) < msg.recording_stop_position:
            return
        walk = walk_frames(bytes(r.data), 0)
        if walk.error is not None or walk.end_position != len(r.data):
            self._reset(now_ns, f"snapshot recording {r.snapshot.recording_id} is corrupt: {walk.error}")
            return
        sn = r.snapshot
        store = self._snapshot_store(sn.service_id)
        recording_id = store.write_snapshot(
            [f.payload for f in walk.frames], sn.leadership_term_id, sn.log_position, sn.service_id
        )
        self._to_retrieve.pop(0)
        self._add_pending(sn, recording_id)
        if self._to_retrieve:
            return
        self.snapshots_retrieved_count += 1
        self.ctx.events("backup_snapshots_retrieved", {"count": self.snapshots_retrieved_count})
        self._follow_log(self._response)

    def _add_pending(self, sn: BackupSnapshot, recording_id: int) -> None:
        for p in self._pending_sets:
            if p[0][0].log_position == sn.log_position:
                p.append((sn, recording_id))
                return
        self._pending_sets.append([(sn, recording_id)])

    def _snapshot_store(self, service_id: int) -> SnapshotStore:
        if service_id == SERVICE_ID_CONSENSUS_MODULE:
            return self.archive.snapshots
        store = self._service_stores.get(service_id)
        if store is None:
            catalogue_dir, snapshot_dir = service_snapshot_store_dirs(service_id)
            catalogue = Catalogue.open(self.ctx.storage, catalogue_dir, file_sync=self.ctx.file_sync, log=self.ctx.log)
            store = SnapshotStore(
                self.ctx.storage, catalogue, snapshot_dir, file_sync=self.ctx.file_sync, log=self.ctx.log
            )
            self._service_stores[service_id] = store
        return store

    # ------------------------------------------------------------------ BACKING_UP

    def _on_log_block(self, msg: ReplayBlock, now_ns: int) -> None:
        recording = self.archive.recording
        stop = recording.stop_position
        if msg.start_position != stop:
            self._reset(now_ns, f"log block at {msg.start_position}, the backup's log ends at {stop}")
            return
        self._progress(now_ns)
        self.cluster_commit_position = max(self.cluster_commit_position, msg.recording_stop_position)
        if msg.entries:
            walk = walk_frames(msg.entries, msg.start_position)
            if walk.error is not None or not walk.frames:
                self._reset(now_ns, f"bad log block at {walk.end_position}: {walk.error}")
                return
            frames = self._frames_of_known_terms(walk.frames, now_ns)
            if frames:
                recording.append_walked(msg.entries[: frames[-1].end_position - msg.start_position], stop, frames)
                self._update_recording_log()
            if len(frames) < len(walk.frames):
                return
        if recording.stop_position >= msg.recording_stop_position:
            self._next_request_ns = now_ns + self.ctx.live_log_poll_interval_ns

    def _frames_of_known_terms(self, frames: list[Frame], now_ns: int) -> list[Frame]:
        """The leading frames of terms the last ``BackupResponse`` described. A frame of a later term
        stops the copy there and brings the next query forward, so the backup's recording log holds
        every term its log does (a restore then elects past them)."""
        known = {t.leadership_term_id for t in self._terms}
        for i, frame in enumerate(frames):
            if frame.leadership_term_id not in known:
                self.ctx.log(f"backup: term {frame.leadership_term_id} begins at {frame.position}; querying again")
                self.time_of_next_backup_query_ns = now_ns
                return frames[:i]
        return frames

    def _update_recording_log(self) -> None:
        """UPDATE_RECORDING_LOG: the terms and snapshot sets the log now covers."""
        stop = self.live_log_position
        log = self.recording_log
        for t in sorted(self._terms, key=lambda t: t.leadership_term_id):
            if t.term_base_log_position > stop:
                break
            entry = log.find_term_entry(t.leadership_term_id)
            if entry is None:
                log.append_term(0, t.leadership_term_id, t.term_base_log_position, t.timestamp)
            if t.log_position != NULL_POSITION and t.log_position <= stop:
                log.commit_log_position(t.leadership_term_id, t.log_position)
        for p in list(self._pending_sets):
            if p[0][0].log_position > stop:
                continue
            if len(p) == self.ctx.service_count + 1:
                self._record_set(p)
            else:
                self._drop_incomplete_set(p)
        log.force()
        self.archive.sync_catalogue()

    def _drop_incomplete_set(self, p: list[tuple[BackupSnapshot, int]]) -> None:
        """A set the log passed with a snapshot missing (its retrieval failed and the members moved on
        to a newer set): never recorded, as a recovery plan needs every service's snapshot at one position."""
        position = p[0][0].log_position
        services = sorted(sn.service_id for sn, _ in p)
        self.ctx.log(f"backup: the snapshot set at {position} is incomplete (services {services}); not recorded")
        self._pending_sets.remove(p)
        self.ctx.events("backup_snapshot_dropped", {"log_position": position, "services": services})

    def _record_set(self, p: list[tuple[BackupSnapshot, int]]) -> None:
        """Services highest id first, the consensus module last (the order a recovery plan reads)."""
        for sn, recording_id in sorted(p, key=lambda x: -x[0].service_id if x[0].service_id >= 0 else 1):
            self.recording_log.append_snapshot(
                recording_id,
                sn.leadership_term_id,
                sn.term_base_log_position,
                sn.log_position,
                sn.timestamp,
                sn.service_id,
            )
        self._pending_sets.remove(p)
        self.ctx.events("backup_snapshot_recorded", {"log_position": p[0][0].log_position})

    def close(self) -> None:
        """CLOSED: release the files (the directory stays a member's, ready to restore from)."""
        if self.state is BackupState.CLOSED:
            return
        self.state = BackupState.CLOSED
        try:
            self.archive.close()
        finally:
            self.recording_log.close()
