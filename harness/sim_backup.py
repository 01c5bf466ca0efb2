"""ClusterBackup in the simulator: the same :class:`ClusterBackupAgent` as the real backup process, over
a MemoryStorage, driven by the SimCluster's run loop (``SimCluster.actors``).

A request reaches a member and its answer comes back after :data:`LINK_LATENCY_NS` each way, answered by
the functions the node answers its control socket with (clusterlab.core.consensus.backup_source). The
backup's link is its own, outside the members' network: partitions do not cut it, but a member that is
down or paused answers nothing (the agent times out and asks the next member). No random draw is made,
so a run with a backup keeps every other seeded choice of the run it extends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clusterlab.core.archive.storage import MemoryStorage
from clusterlab.core.codec.control import BackupQuery, SnapshotReplayRequest
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.session import ChallengeResponse
from clusterlab.core.codec.transport import ReplayRequest
from clusterlab.core.consensus.backup_source import BackupSessions, log_replay, snapshot_replay
from clusterlab.core.consensus.cluster_backup import (
    BackupContext,
    BackupState,
    ClusterBackupAgent,
    ReplayStart,
    SnapshotFilter,
    SourceType,
    no_answer,
    retrieve_all,
)
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.harness.sim import SimCluster

LINK_LATENCY_NS = 1_000_000  # the backup <-> member link, each way
NEVER_NS = 2**63 - 1


class SimBackup:
    """A ClusterBackup process in a SimCluster; see the module docstring."""

    def __init__(
        self,
        cluster: SimCluster,
        *,
        replay_start: ReplayStart = ReplayStart.BEGINNING,
        source_type: SourceType = SourceType.ANY,
        backup_query_interval_ns: int = 1_000_000_000,
        snapshot_filter: SnapshotFilter = retrieve_all,
        storage: MemoryStorage | None = None,
        credentials: bytes = b"",
        on_challenge: Callable[[bytes], bytes] = no_answer,
    ) -> None:
        self.cluster = cluster
        self.storage = MemoryStorage("sim-backup") if storage is None else storage  # given: resume a stopped backup
        self.agent = ClusterBackupAgent(
            BackupContext(
                storage=self.storage,
                source_member_ids=tuple(range(cluster.member_count)),
                service_count=len(cluster.service_names),
                replay_start=replay_start,
                source_type=source_type,
                backup_query_interval_ns=backup_query_interval_ns,
                snapshot_filter=snapshot_filter,
                credentials=credentials,
                on_challenge=on_challenge,
                log=self._log,
                events=self._event,
            )
        )
        self._reply: tuple[int, Message, int] | None = None  # (member, answer, when it arrives)
        # Each member incarnation's backup sessions (the node process keeps them in its memory).
        self._sessions: dict[tuple[int, int], BackupSessions] = {}

    # ------------------------------------------------------------------ SimActor

    def next_deadline_ns(self) -> int:
        if self.agent.state is BackupState.CLOSED:
            return NEVER_NS
        if self._reply is not None:
            return min(self._reply[2], self.agent.next_deadline_ns())
        return self.agent.next_deadline_ns()

    def do_work(self, now_ns: int) -> bool:
        """Deliver a due answer, then send the next request (answered on arrival, if anyone is there)."""
        busy = False
        reply = self._reply
        if reply is not None and reply[2] <= now_ns:
            self._reply = None
            self.agent.on_reply(reply[0], reply[1], now_ns)
            busy = True
        request = self.agent.poll(now_ns)
        if request is not None:
            member_id, msg = request
            answer = self._answer(member_id, msg)
            if answer is not None:
                self._reply = (member_id, answer, now_ns + 2 * LINK_LATENCY_NS)
            busy = True
        return busy

    def _answer(self, member_id: int, msg: Message) -> Message | None:
        c = self.cluster
        if not c.is_alive(member_id) or c.is_paused(member_id):
            return None  # nobody there: the agent's request times out
        module = c.member(member_id)
        if not isinstance(module, ConsensusModule):
            return None
        if isinstance(msg, BackupQuery | ChallengeResponse):
            sessions = self._sessions.setdefault((member_id, c.incarnation(member_id)), BackupSessions())
            if isinstance(msg, BackupQuery):
                return sessions.on_backup_query(module, msg, self.cluster.now_ns)
            return sessions.on_challenge_response(module, msg, self.cluster.now_ns)
        if isinstance(msg, ReplayRequest):
            return log_replay(module, msg)
        if isinstance(msg, SnapshotReplayRequest):
            return snapshot_replay(c.storage(member_id), msg)
        return None

    # ------------------------------------------------------------------ what tests and scenarios read

    @property
    def state(self) -> BackupState:
        return self.agent.state

    @property
    def live_log_position(self) -> int:
        return self.agent.live_log_position

    @property
    def snapshots_retrieved_count(self) -> int:
        return self.agent.snapshots_retrieved_count

    def close(self) -> None:
        """Stop backing up (the backup's storage stays, to restore from)."""
        self.agent.close()
        if self in self.cluster.actors:
            self.cluster.actors.remove(self)
        self.cluster.event("backup_stop", -1, live_log_position=self.agent.live_log_position)

    def _log(self, line: str) -> None:
        self.cluster.log_lines.append((self.cluster.now_ns, -1, line))

    def _event(self, kind: str, detail: dict[str, Any]) -> None:
        self.cluster.event(kind, -1, **detail)


def start_backup(cluster: SimCluster, **options: Any) -> SimBackup:
    """Start a ClusterBackup of ``cluster`` (options: see :class:`SimBackup`)."""
    backup = SimBackup(cluster, **options)
    cluster.actors.append(backup)
    cluster.event("backup_start", -1, replay_start=backup.agent.ctx.replay_start.value)
    return backup


def restore_from_backup(cluster: SimCluster, backup: SimBackup) -> None:
    """Destroy every member's storage and start each member from a copy of the backup (Aeron's restore:
    a member started on the backup's directory). The backup is closed first."""
    if backup.state is not BackupState.CLOSED:
        backup.close()
    for member_id in range(cluster.member_count):
        if cluster.is_alive(member_id):
            cluster.kill(member_id)
    for member_id in range(cluster.member_count):
        retired = MemoryStorage(f"sim-member-{member_id}-before-restore")
        retired.copy_from(cluster.memory_storage(member_id))
        cluster.retired_storages.append(retired)
        cluster.storage(member_id).clear()
        cluster.memory_storage(member_id).copy_from(backup.storage)
    cluster.event("restore_from_backup", -1, live_log_position=backup.live_log_position)
    for member_id in range(cluster.member_count):
        cluster.restart(member_id)
