"""One face for the two drivers: a chaos run talks to a :class:`Target`, which is either a real
:class:`~clusterlab.harness.local.LocalCluster` (OS processes, wall time) or a
:class:`~clusterlab.harness.sim.SimCluster`
(seeded virtual time). Nemeses, workloads and scenarios are written once against it.

Time is always in seconds of the target's own clock (virtual in the simulator), so a scenario's
"quiet 1 s" means the same thing on both.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from clusterlab.core.archive.storage import Storage
from clusterlab.core.consensus.cluster_backup import BackupState, ReplayStart
from clusterlab.core.consensus.context import SECOND, ElectionState
from clusterlab.harness.cluster_api import Cluster
from clusterlab.harness.local import LocalClientTimeout, LocalCluster, LocalTimeout
from clusterlab.harness.sim import SimCluster, SimTimeout
from clusterlab.harness.sim_backup import SimBackup, restore_from_backup, start_backup

from clusterlab.testing.mutants import backup_snapshot_filter


class Unsupported(Exception):
    """A fault this driver cannot inject (e.g. SIGSTOP in the simulator)."""


class Target(ABC):
    """The operations nemeses need. ``rng`` is the run's seeded randomness (never global). Each driver
    implements the abstract ones; a fault a driver cannot inject raises :class:`Unsupported`."""

    kind = "?"
    cluster: Cluster

    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.paused: set[int] = set()
        # The run's workload step (the runner sets it): a nemesis that lets time pass inside its apply
        # passes it to :meth:`advance` when the clients must keep sending meanwhile.
        self.work: Callable[[], None] = lambda: None

    # --- what the cluster is
    @property
    def members(self) -> list[int]:
        return list(range(self.cluster.member_count))

    def leader(self) -> int | None:
        return self.cluster.leader_id()

    def alive(self) -> list[int]:
        return self.cluster.members_alive()

    def storage(self, member_id: int) -> Storage:
        """The member's durable storage, for disk faults: its MemoryStorage in the simulator, a
        FileStorage on its directory for real processes (apply damage only while it is down)."""
        return self.cluster.storage(member_id)

    @abstractmethod
    def storage_fault(self, member_id: int, code: int, path_prefix: str = "archive/") -> None:
        """Make the running member's storage refuse writes with errno ``code`` (a full or failing disk)."""
        raise NotImplementedError

    @abstractmethod
    def clear_storage_fault(self, member_id: int) -> None:
        raise NotImplementedError

    def event(self, kind: str, member_id: int = -1, **detail: Any) -> None:
        self.cluster.event(kind, member_id, source="chaos", **detail)

    # --- faults every driver has
    def kill(self, member_id: int) -> None:
        self.cluster.kill(member_id)

    def restart(self, member_id: int) -> None:
        self.cluster.restart(member_id)

    def restart_wiped(self, member_id: int) -> None:
        self.cluster.restart_wiped(member_id)

    def partition(self, groups: list[list[int]]) -> None:
        self.cluster.partition(groups)

    def block(self, src: int, dst: int) -> None:
        self.cluster.block(src, dst)

    def unblock(self, src: int, dst: int) -> None:
        """Let src -> dst through again (the other links stay as they are)."""
        self.cluster.unblock(src, dst)

    @abstractmethod
    def set_link(self, src: int, dst: int, loss: float, delay_s: float) -> None:
        """Lose ``loss`` of the messages from ``src`` to ``dst`` and delay the rest by ``delay_s``."""
        raise NotImplementedError

    def heal_network(self) -> None:
        self.cluster.heal()

    def snapshot(self) -> bool:
        return bool(self.cluster.control("snapshot"))

    # --- differ per driver
    def pause(self, member_id: int) -> None:
        """Stop the member (SIGSTOP; in the simulator it runs nothing and its messages wait)."""
        self.cluster.pause(member_id)
        self.paused.add(member_id)

    def resume(self, member_id: int) -> None:
        self.cluster.resume(member_id)
        self.paused.discard(member_id)

    def kill_service(self, member_id: int) -> None:
        raise Unsupported(f"{self.kind}: kill only a service")

    def clock_skew(self, member_id: int, offset_s: float) -> None:
        raise Unsupported(f"{self.kind}: clock skew")

    # --- ClusterBackup (nemeses backup-start / backup-restore)
    def start_backup(self, replay_start: str, query_interval_s: float) -> None:
        """Start a ClusterBackup of the cluster (``replay_start``: ``beginning`` or ``latest-snapshot``;
        it asks a member what there is to back up every ``query_interval_s``)."""
        raise Unsupported(f"{self.kind}: ClusterBackup")

    def backup_caught_up(self) -> bool:
        """The running backup holds the committed log up to every live member's commit position."""
        raise Unsupported(f"{self.kind}: ClusterBackup")

    def await_backup_caught_up(self, timeout_s: float) -> None:
        """Let the run go on (the workload too) until :meth:`backup_caught_up`; ChaosTimeout past ``timeout_s``."""
        end = self.now_s() + timeout_s
        while not self.backup_caught_up():
            if self.now_s() > end:
                raise ChaosTimeout(f"the backup did not reach the cluster's commit position within {timeout_s} s")
            self.advance(0.01, self.work)

    def restore_from_backup(self) -> None:
        """Destroy every member's disk and start each member on a copy of the backup."""
        raise Unsupported(f"{self.kind}: ClusterBackup")

    @abstractmethod
    def election_state(self, member_id: int) -> ElectionState | None:
        """The member's election state (None: not in an election, down or not answering)."""
        raise NotImplementedError

    def fail_next_request_vote(self, member_id: int, armed: bool = True) -> None:
        """Test hook (Aeron's FailFirstElectionIntercept): the member's handling of other candidates'
        RequestVote for the next candidate term (its leadership term + 1) fails; ``armed=False`` clears it."""
        raise Unsupported(f"{self.kind}: fail a RequestVote")

    def delay_member_messages(self, member_id: int, message: str, delay_s: float, duplicate: bool = False) -> None:
        """Test hook: every ``message`` (``Vote``, ``AppendPosition``...) the member sends to another member
        is held ``delay_s``, or sent at once and again ``delay_s`` later (``duplicate``); 0 s removes the rule."""
        raise Unsupported(f"{self.kind}: delay member messages")

    def lose_replies(self, lost: bool) -> list[int]:
        """Lose (``lost``) or stop losing every reply from the members to the clients connected now;
        returns the client ids whose replies are lost."""
        raise Unsupported(f"{self.kind}: lose replies")

    def duplicate_ingress(self, duplicated: bool) -> list[int]:
        """Deliver (``duplicated``) or stop delivering every client's ingress to the members twice (the copy
        a few ms later); returns the ids of the clients connected now."""
        raise Unsupported(f"{self.kind}: duplicate ingress")

    def silence_client(self) -> int | None:
        """Make the newest connected client hang without closing its session (no more keepalives); the
        workload moves to a new session. Returns the client id (None: no client connected)."""
        raise Unsupported(f"{self.kind}: silence a client")

    @abstractmethod
    def now_s(self) -> float:
        raise NotImplementedError

    @abstractmethod
    def advance(self, seconds: float, work: Callable[[], None]) -> None:
        """Let ``seconds`` of target time pass, calling ``work`` (one workload step) meanwhile."""
        raise NotImplementedError

    @abstractmethod
    def await_leader(self, timeout_s: float, exclude: tuple[int, ...] = ()) -> int:
        raise NotImplementedError

    @abstractmethod
    def converged(self) -> bool:
        raise NotImplementedError

    @abstractmethod
    def commit_positions(self) -> dict[int, int]:
        """Each answering member's commit position (members down, paused or in an election left out)."""
        raise NotImplementedError

    def caught_up_to(self, position: int) -> bool:
        """Every member is up, out of elections, with a leader among them, and has committed (and, on
        real processes, its service applied) at least ``position``: recovered from a fault even while
        the workload keeps the log moving."""
        if self.leader() is None or len(self.alive()) != len(self.members) or self.paused:
            return False
        positions = self.commit_positions()
        return len(positions) == len(self.members) and min(positions.values()) >= position


class LocalTarget(Target):
    """A real LocalCluster: wall-clock time, SIGKILL/SIGSTOP, the chaos gate."""

    kind = "local"
    cluster: LocalCluster

    def set_link(self, src: int, dst: int, loss: float, delay_s: float) -> None:
        self.cluster.set_link(src, dst, loss=loss, delay_s=delay_s)

    def kill_service(self, member_id: int) -> None:
        self.cluster.kill_service(member_id)

    def delay_member_messages(self, member_id: int, message: str, delay_s: float, duplicate: bool = False) -> None:
        if not self.cluster.delay_member_messages(member_id, message, delay_s, duplicate) and delay_s > 0:
            raise Unsupported(f"member {member_id} did not accept a delay of its {message} messages")

    def clock_skew(self, member_id: int, offset_s: float) -> None:
        if not self.cluster.set_clock_offset(member_id, offset_s):
            raise Unsupported(f"member {member_id} did not accept a clock offset")

    def storage_fault(self, member_id: int, code: int, path_prefix: str = "archive/") -> None:
        if not self.cluster.storage_fault(member_id, code, path_prefix):
            raise Unsupported(f"member {member_id} did not accept a storage fault")

    def clear_storage_fault(self, member_id: int) -> None:
        self.cluster.clear_storage_fault(member_id)  # a member down or restarted has none to clear

    def election_state(self, member_id: int) -> ElectionState | None:
        status = self.cluster.status(member_id, timeout_s=0.5)
        return None if status is None else status.election_state

    def start_backup(self, replay_start: str, query_interval_s: float) -> None:
        self.cluster.start_backup(replay_start=replay_start, query_interval_s=query_interval_s)

    def backup_caught_up(self) -> bool:
        status = self.cluster.backup_status()
        if status is None or status.get("state") != "BACKING_UP" or self.leader() is None:
            return False
        commits = [s.commit_position for m in self.alive() if (s := self.cluster.status(m)) is not None]
        return bool(commits) and int(status["live_log_position"]) >= max(commits)

    def await_backup_caught_up(self, timeout_s: float) -> None:
        """Wait, the workload's clients sending nothing new, until the backup has held every live member's
        commit position at two checks 0.2 s apart: requests sent before the wait have committed by then, so
        no write is acknowledged that the backup lacks."""
        since: list[float] = []

        def steady() -> bool:
            if not self.backup_caught_up():
                since.clear()
                return False
            since.append(time.monotonic())
            return since[-1] - since[0] >= 0.2

        try:
            self.cluster.await_condition(steady, timeout_s, "the backup at every member's commit position")
        except LocalTimeout as e:
            raise ChaosTimeout(str(e)) from None

    def restore_from_backup(self) -> None:
        for m in self.alive():
            self.kill(m)
        self.cluster.restore_from_backup()
        self.paused.clear()

    def now_s(self) -> float:
        return time.monotonic()

    def advance(self, seconds: float, work: Callable[[], None]) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            work()

    def await_leader(self, timeout_s: float, exclude: tuple[int, ...] = ()) -> int:
        try:
            return self.cluster.await_leader(timeout_s, exclude=exclude)
        except LocalTimeout as e:
            raise ChaosTimeout(str(e)) from None

    def converged(self) -> bool:
        return self.cluster.leader_id() is not None and self.cluster.caught_up() is not None

    def commit_positions(self) -> dict[int, int]:
        out = {}
        for m in self.alive():
            status = self.cluster.status(m)
            service = self.cluster.service_status(m) if self.cluster.config.service else None
            if status is not None and status.election_state is None:
                out[m] = (
                    min(status.commit_position, service.log_position if service is not None else -1)
                    if self.cluster.config.service
                    else status.commit_position
                )
        return out


class SimTarget(Target):
    """A SimCluster: virtual time; a pause stops a member in it; clock skew does not exist there."""

    kind = "sim"
    cluster: SimCluster
    backup: SimBackup | None = None

    def now_s(self) -> float:
        return self.cluster.now_ns / SECOND

    def storage_fault(self, member_id: int, code: int, path_prefix: str = "archive/") -> None:
        self.cluster.storage(member_id).fail_writes(code, path_prefix)
        self.cluster.event("storage_fault", member_id, code=code, path_prefix=path_prefix)

    def clear_storage_fault(self, member_id: int) -> None:
        self.cluster.storage(member_id).clear()

    def silence_client(self) -> int | None:
        for c in reversed(self.cluster.clients):
            if not c.silent and not c.errors and c.client.is_connected:
                c.silent = True
                c.errors.append(ConnectionAbortedError("silenced by chaos: hung without closing its session"))
                self.cluster.event("client_silenced", -1, client_id=c.client_id)
                return int(c.client_id)
        return None

    def fail_next_request_vote(self, member_id: int, armed: bool = True) -> None:
        term = self.cluster.member(member_id).leadership_term_id + 1 if armed else None
        self.cluster.fail_request_vote(member_id, term)

    def delay_member_messages(self, member_id: int, message: str, delay_s: float, duplicate: bool = False) -> None:
        self.cluster.delay_member_messages(member_id, message, max(0, int(delay_s * SECOND)), duplicate)

    def lose_replies(self, lost: bool) -> list[int]:
        return self.cluster.lose_replies(lost)

    def duplicate_ingress(self, duplicated: bool) -> list[int]:
        return self.cluster.duplicate_ingress(duplicated)

    def election_state(self, member_id: int) -> ElectionState | None:
        if member_id not in self.cluster.members_alive():
            return None
        state: ElectionState | None = self.cluster.member(member_id).election_state
        return state

    def set_link(self, src: int, dst: int, loss: float, delay_s: float) -> None:
        self.cluster.set_link(src, dst, loss=loss, latency_ns=max(1, int(delay_s * SECOND)))

    def advance(self, seconds: float, work: Callable[[], None]) -> None:
        end = self.cluster.now_ns + int(seconds * SECOND)
        step = 10 * SECOND // 1000
        while self.cluster.now_ns < end:
            work()
            self.cluster.run_for(min(step, end - self.cluster.now_ns))

    def await_leader(self, timeout_s: float, exclude: tuple[int, ...] = ()) -> int:
        try:
            self.cluster.await_condition(
                lambda: (lid := self.cluster.leader_id()) is not None and lid not in exclude,
                int(timeout_s * SECOND),
                "a leader",
            )
        except SimTimeout as e:
            raise ChaosTimeout(str(e)) from None
        leader = self.cluster.leader_id()
        assert leader is not None
        return leader

    def converged(self) -> bool:
        return converged(self.cluster)

    def start_backup(self, replay_start: str, query_interval_s: float) -> None:
        if self.backup is not None:
            raise Unsupported("a ClusterBackup already runs")
        self.backup = start_backup(
            self.cluster,
            replay_start=ReplayStart(replay_start),
            backup_query_interval_ns=int(query_interval_s * SECOND),
            snapshot_filter=backup_snapshot_filter(self.cluster.mutants),
        )

    def backup_caught_up(self) -> bool:
        if self.backup is None or self.backup.state is not BackupState.BACKING_UP or self.leader() is None:
            return False
        commits = [self.cluster.member(m).commit_position for m in self.alive()]
        return bool(commits) and self.backup.live_log_position >= max(commits)

    def restore_from_backup(self) -> None:
        if self.backup is None:
            raise Unsupported("no ClusterBackup runs to restore from")
        restore_from_backup(self.cluster, self.backup)
        self.paused.clear()
        self.backup = None

    def commit_positions(self) -> dict[int, int]:
        members = (self.cluster.member(m) for m in self.alive())
        return {m.member_id: m.commit_position for m in members if m.election_state is None}


def converged(cluster: SimCluster) -> bool:
    """A settled leader, and every live member has committed the leader's whole log."""
    leader = cluster.leader_id()
    if leader is None:
        return False
    lm = cluster.member(leader)
    target = lm.append_position
    if lm.commit_position < target:
        return False
    return all(
        cluster.member(i).election_state is None and cluster.member(i).commit_position >= target
        for i in cluster.members_alive()
    )


class ChaosTimeout(AssertionError):
    """The cluster did not reach a required state in time (the final-phase progress bound)."""


__all__ = ["ChaosTimeout", "LocalClientTimeout", "LocalTarget", "SimTarget", "Target", "Unsupported", "converged"]
