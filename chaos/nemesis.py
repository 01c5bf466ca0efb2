"""Nemeses: the faults a chaos run injects, each a small object with ``apply`` and ``heal``.

Every nemesis works on a :class:`clusterlab.chaos.target.Target` (a LocalCluster or a SimCluster), chooses its
victims with the run's seeded ``rng`` and records itself as a harness event (``chaos_apply`` /
``chaos_heal`` with the nemesis name and victims), besides the events the cluster records for the
fault itself (kill, partition, truncate…). Disk faults are applied while the member is down, between
its kill and its restart, as a crash would leave them.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import Any, ClassVar

from clusterlab.chaos.target import ChaosTimeout, LocalTarget, SimTarget, Target, Unsupported
from clusterlab.core.archive.storage import Storage
from clusterlab.core.client.client import NEW_LEADER_TIMEOUT_DEFAULT_NS
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.consensus.context import ConsensusModuleState, ElectionState
from clusterlab.core.consensus.recording_log import RecordingLog

from clusterlab.testing import disk_faults as faults


@dataclass
class Nemesis:
    """Base: ``apply`` injects the fault, ``heal`` undoes it (restart, heal the network…)."""

    name: str = "nemesis"
    victims: list[int] = field(default_factory=list)
    applied_at: float | None = None
    healed_at: float | None = None
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}  # an option's allowed values

    def options_error(self) -> str | None:
        """Why this nemesis's options cannot run, or None: an option outside its ``choices``."""
        for option, allowed in self.choices.items():
            if (value := getattr(self, option)) not in allowed:
                return f"{option} must be one of {', '.join(allowed)}, not {value!r}"
        return None

    @property
    def leader_fault(self) -> bool:
        """This fault takes the leader away (what failover is measured from)."""
        return False

    def apply(self, t: Target) -> None:
        self.applied_at = t.now_s()
        self._apply(t)
        t.event(
            "chaos_apply",
            self.victims[0] if len(self.victims) == 1 else -1,
            nemesis=self.name,
            victims=self.victims,
            leader_fault=self.leader_fault,
            **self.detail(),
        )

    def heal(self, t: Target) -> None:
        self._heal(t)
        self.healed_at = t.now_s()
        t.event(
            "chaos_heal", self.victims[0] if len(self.victims) == 1 else -1, nemesis=self.name, victims=self.victims
        )

    def detail(self) -> dict[str, Any]:
        return {}

    def _apply(self, t: Target) -> None:
        raise NotImplementedError

    def _heal(self, t: Target) -> None:
        pass

    def describe(self) -> str:
        return f"{self.name}{self.victims}"


def _leader_or_any(t: Target) -> int:
    leader = t.leader()
    return leader if leader is not None else t.rng.choice(t.alive())


def _followers(t: Target) -> list[int]:
    leader = t.leader()
    return [m for m in t.alive() if m != leader]


# ------------------------------------------------------------------------------------- network


# Partition shapes, named as the scenarios that use them (clusterlab scenarios).
PARTITION_SHAPES = (
    "leader-isolation",
    "isolate",
    "follower-isolation",
    "minority-partition",
    "majority-ring",
    "bridge",
)


@dataclass
class Partition(Nemesis):
    """Cut the cluster into groups. ``shape`` (:data:`PARTITION_SHAPES`): ``leader-isolation``,
    ``isolate`` (a random member), ``follower-isolation`` (a random follower), ``minority-partition``
    (a random minority | majority), ``bridge``
    (two sides and one member seeing both), ``majority-ring`` (every member sees only its
    neighbours: overlapping majorities)."""

    name: str = "partition"
    shape: str = "leader-isolation"
    groups: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.shape not in PARTITION_SHAPES:
            raise ValueError(f"unknown partition shape {self.shape!r}; valid shapes: {', '.join(PARTITION_SHAPES)}")

    def detail(self) -> dict[str, Any]:
        return {"shape": self.shape, "groups": self.groups}

    @property
    def leader_fault(self) -> bool:
        return self.shape == "leader-isolation"

    def _apply(self, t: Target) -> None:
        members = t.members
        n = len(members)
        if self.shape in ("leader-isolation", "isolate", "follower-isolation"):
            if self.shape == "leader-isolation":
                victim = _leader_or_any(t)
            elif self.shape == "follower-isolation":
                victim = t.rng.choice(_followers(t) or members)
            else:
                victim = t.rng.choice(members)
            self.victims = [victim]
            self.groups = [[victim], [m for m in members if m != victim]]
            t.partition(self.groups)
        elif self.shape == "minority-partition":
            shuffled = members[:]
            t.rng.shuffle(shuffled)
            minority = sorted(shuffled[: (n - 1) // 2])
            self.victims = minority
            self.groups = [minority, sorted(shuffled[(n - 1) // 2 :])]
            t.partition(self.groups)
        elif self.shape == "bridge":
            shuffled = members[:]
            t.rng.shuffle(shuffled)
            bridge = shuffled[0]
            rest = shuffled[1:]
            a, b = sorted(rest[: len(rest) // 2]), sorted(rest[len(rest) // 2 :])
            self.victims = [bridge]
            self.groups = [[*a, bridge], [*b, bridge]]
            for x in a:
                for y in b:
                    t.block(x, y)
                    t.block(y, x)
        elif self.shape == "majority-ring":
            order = members[:]
            t.rng.shuffle(order)
            self.victims = order
            self.groups = [[order[i], order[(i + 1) % n]] for i in range(n)]
            for i, x in enumerate(order):
                neighbours = {order[(i - 1) % n], order[(i + 1) % n]}
                for y in members:
                    if y != x and y not in neighbours:
                        t.block(x, y)
        else:
            raise ValueError(f"unknown partition shape {self.shape!r}")

    def _heal(self, t: Target) -> None:
        t.heal_network()


@dataclass
class OneWayLink(Nemesis):
    """Drop every message on one directed link (the leader's messages to one follower)."""

    name: str = "one-way-link"

    def _apply(self, t: Target) -> None:
        src = _leader_or_any(t)
        dst = t.rng.choice([m for m in t.members if m != src])
        self.victims = [src, dst]
        t.block(src, dst)

    def _heal(self, t: Target) -> None:
        t.heal_network()


@dataclass
class FlakyLinks(Nemesis):
    """Every link loses ``loss`` of its messages and delays the rest by ``delay_s`` ± ``jitter_s``."""

    name: str = "flaky-links"
    loss: float = 0.2
    delay_s: float = 0.005
    jitter_s: float = 0.005

    def detail(self) -> dict[str, Any]:
        return {"loss": self.loss, "delay_s": self.delay_s, "jitter_s": self.jitter_s}

    def _apply(self, t: Target) -> None:
        self.victims = t.members
        for src in t.members:
            for dst in t.members:
                if src != dst:
                    delay = max(0.0, self.delay_s + t.rng.uniform(-self.jitter_s, self.jitter_s))
                    t.set_link(src, dst, self.loss, delay)

    def _heal(self, t: Target) -> None:
        t.heal_network()


# ------------------------------------------------------------------------------------- processes


@dataclass
class Kill(Nemesis):
    """SIGKILL members; ``heal`` restarts them from disk (``wipe``: with an empty disk).
    ``who``: ``leader``, ``follower``, ``random``, ``minority``, ``all`` or ``member`` (``member=``)."""

    name: str = "kill"
    who: str = "leader"
    wipe: bool = False
    member: int | None = None  # who="member": this one (a rolling restart)
    hit_leader: bool = False
    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "who": ("leader", "follower", "random", "all", "minority", "member")
    }

    def options_error(self) -> str | None:
        if (self.who == "member") != (self.member is not None):
            return (
                "who='member' goes with member=N (and member= with who='member'), "
                f"not who={self.who!r}, member={self.member!r}"
            )
        return super().options_error()

    def detail(self) -> dict[str, Any]:
        return {"who": self.who, "wipe": self.wipe, "member": self.member}

    @property
    def leader_fault(self) -> bool:
        return self.hit_leader

    def _apply(self, t: Target) -> None:
        alive = t.alive()
        leader = t.leader()
        if self.who == "member":
            assert self.member is not None, "who='member' needs member="
            self.victims = [self.member]
        elif self.who == "leader":
            self.victims = [_leader_or_any(t)]
        elif self.who == "follower":
            self.victims = [t.rng.choice(_followers(t) or alive)]
        elif self.who == "random":
            self.victims = [t.rng.choice(alive)]
        elif self.who == "all":
            self.victims = sorted(alive)
        elif self.who == "minority":
            self.victims = sorted(t.rng.sample(alive, (len(t.members) - 1) // 2))
        else:
            raise ValueError(f"unknown victim choice {self.who!r}")
        self.hit_leader = leader is not None and leader in self.victims
        for m in self.victims:
            t.kill(m)
        self.while_down(t)

    def while_down(self, t: Target) -> None:
        """What happens to the victims' disks before they restart (disk nemeses override this)."""

    def _heal(self, t: Target) -> None:
        for m in self.victims:
            if self.wipe:
                t.restart_wiped(m)
            else:
                t.restart(m)


@dataclass
class DiskFault(Kill):
    """Kill a member, damage its log recording while it is down, restart it. ``fault``:
    ``truncate`` (lose the last ``n_bytes``, or everything from stream position ``at`` when given),
    ``torn`` (cut the last frame in half), ``flip`` (flip
    bits in the tail), ``unflushed`` (lose a random unflushed tail below one segment page),
    ``snapshot`` (invalidate the latest snapshot in the recording log)."""

    name: str = "disk"
    who: str = "follower"
    fault: str = "truncate"
    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        **Kill.choices,
        "fault": ("truncate", "torn", "flip", "unflushed", "snapshot"),
    }
    n_bytes: int = 512
    at: int | None = None  # truncate: cut at this stream position instead of n_bytes from the end
    position: int | None = None  # the stream position the damage left (for the report)

    def detail(self) -> dict[str, Any]:
        return {"who": self.who, "fault": self.fault, "n_bytes": self.n_bytes, "at": self.at}

    def while_down(self, t: Target) -> None:
        for m in self.victims:
            d = t.storage(m)
            if self.fault == "truncate" and self.at is not None:
                self.position = faults.truncate_at(d, min(self.at, faults.stream_end(d)))
            elif self.fault == "truncate":
                self.position = faults.truncate_tail(d, self.n_bytes)
            elif self.fault == "torn":
                self.position = faults.tear_last_frame(d)
            elif self.fault == "flip":
                self.position = faults.flip_bits_in_tail(d, t.rng, count=3)
            elif self.fault == "unflushed":
                self.position = faults.lose_unflushed_tail(d, t.rng, 4096)
            elif self.fault == "snapshot":
                self.position = _invalidate_latest_snapshot(d)
            else:
                raise ValueError(f"unknown disk fault {self.fault!r}")
            t.event(
                "truncate" if self.fault != "snapshot" else "snapshot_invalidated",
                m,
                fault=self.fault,
                position=self.position,
            )


@dataclass
class DiskFull(Nemesis):
    """The leader's disk fills up (``code`` ENOSPC; EIO for a failing one) while it runs: its next
    append fails, it steps down and stays fenced. Heal frees the space and restarts it."""

    name: str = "disk-full"
    who: str = "leader"
    code: int = errno.ENOSPC
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"who": ("leader", "follower")}

    @property
    def leader_fault(self) -> bool:
        return self.who == "leader"

    def detail(self) -> dict[str, Any]:
        return {"who": self.who, "errno": errno.errorcode.get(self.code, str(self.code))}

    def _apply(self, t: Target) -> None:
        self.victims = [_leader_or_any(t) if self.who == "leader" else t.rng.choice(_followers(t) or t.alive())]
        t.storage_fault(self.victims[0], self.code)

    def _heal(self, t: Target) -> None:
        t.clear_storage_fault(self.victims[0])
        t.restart(self.victims[0])


def _invalidate_latest_snapshot(storage: Storage) -> int | None:
    with RecordingLog.open(storage) as log:
        entry = log.latest_snapshot(0)
        return entry.log_position if entry is not None and log.invalidate_latest_snapshot() else None


@dataclass
class Pause(Nemesis):
    """SIGSTOP a member (the leader by default) and SIGCONT it on heal: a GC pause, a VM stall."""

    name: str = "pause"
    who: str = "leader"
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"who": ("leader", "random")}

    @property
    def leader_fault(self) -> bool:
        return self.who == "leader"

    def _apply(self, t: Target) -> None:
        self.victims = [_leader_or_any(t) if self.who == "leader" else t.rng.choice(t.alive())]
        t.pause(self.victims[0])

    def _heal(self, t: Target) -> None:
        t.resume(self.victims[0])


@dataclass
class KillService(Nemesis):
    """SIGKILL only a follower's service process; heal restarts the member (node and service)."""

    name: str = "kill-service"

    def _apply(self, t: Target) -> None:
        self.victims = [t.rng.choice(_followers(t) or t.alive())]
        t.kill_service(self.victims[0])

    def _heal(self, t: Target) -> None:
        t.restart(self.victims[0])


@dataclass
class ClockSkew(Nemesis):
    """Jump one member's clock forward by ``offset_s`` (heal leaves it: clocks never run back)."""

    name: str = "clock-skew"
    offset_s: float = 5.0

    def detail(self) -> dict[str, Any]:
        return {"offset_s": self.offset_s}

    def _apply(self, t: Target) -> None:
        self.victims = [t.rng.choice(t.alive())]
        t.clock_skew(self.victims[0], self.offset_s)


@dataclass
class Snapshot(Nemesis):
    """Ask the leader for a snapshot (ClusterTool SNAPSHOT) in the middle of the faults."""

    name: str = "snapshot"

    def _apply(self, t: Target) -> None:
        self.victims = []
        t.snapshot()


@dataclass
class KillVoter(Nemesis):
    """Kill the leader (an election follows), then SIGKILL the first member seen voting YES (in
    FOLLOWER_BALLOT) and restart it at once from disk: its vote must survive the restart (at most one YES
    per voter and term, ``one_vote_per_term``). Heal restarts the old leader."""

    name: str = "kill-voter"
    wait_s: float = 5.0  # how long to watch for a voter (target time)
    poll_s: float = 0.0005
    candidate_too: bool = False  # also kill the candidate it voted for: its ballot is lost, a new one follows

    def detail(self) -> dict[str, Any]:
        return {"candidate_too": self.candidate_too}

    @property
    def leader_fault(self) -> bool:
        return True

    def _apply(self, t: Target) -> None:
        leader = _leader_or_any(t)
        t.kill(leader)
        self.victims = [leader]
        end = t.now_s() + self.wait_s
        while t.now_s() < end:
            states = {m: t.election_state(m) for m in t.alive()}
            voters = [m for m, s in states.items() if s == ElectionState.FOLLOWER_BALLOT]
            if voters:
                t.kill(voters[0])
                t.restart(voters[0])
                self.victims.append(voters[0])
                candidates = [m for m, s in states.items() if s == ElectionState.CANDIDATE_BALLOT]
                if self.candidate_too and candidates:
                    t.kill(candidates[0])
                    self.victims.append(candidates[0])
                return
            t.advance(self.poll_s, lambda: None)

    def _heal(self, t: Target) -> None:
        alive = t.alive()
        for m in dict.fromkeys([self.victims[0], *self.victims[2:]]):
            if m not in alive:
                t.restart(m)


@dataclass
class StalledCandidate(Nemesis):
    """A voter whose candidate stalls while the old leader lives. The leader's messages to its followers are
    dropped (it still hears them, so it keeps leading until its heartbeat timeout); they start an election,
    and each nominee's messages to the leader are dropped too (its RequestVote would depose the leader).
    Once a member has voted YES, its candidate is paused (the ballot stalls) and the others hear only the
    leader: when a voter's ballot times out and it canvasses again, the leader answers its
    CanvassPosition with a NewLeadershipTerm of the older term, which the voter's YES vote promised to
    refuse (``vote_promise_kept``). Heal resumes the candidate and heals the network."""

    name: str = "stalled-candidate"
    wait_s: float = 5.0  # how long to watch for each step (target time)
    poll_s: float = 0.0005

    @property
    def leader_fault(self) -> bool:
        return True

    def _states(self, t: Target) -> dict[int, ElectionState | None]:
        return {m: t.election_state(m) for m in t.alive() if m not in t.paused}

    def _ballot(self, t: Target, leader: int) -> tuple[int, int] | None:
        """(voter, candidate) once a member has voted YES in a running ballot; nominees cut off the leader."""
        cut: set[int] = set()
        end = t.now_s() + self.wait_s
        while t.now_s() < end:
            states = self._states(t)
            for m, s in states.items():
                if m != leader and m not in cut and s in (ElectionState.NOMINATE, ElectionState.CANDIDATE_BALLOT):
                    t.block(m, leader)
                    cut.add(m)
            candidates = [m for m, s in states.items() if s == ElectionState.CANDIDATE_BALLOT]
            voters = [m for m, s in states.items() if s == ElectionState.FOLLOWER_BALLOT]
            if candidates and voters:
                return voters[0], candidates[0]
            t.advance(self.poll_s, t.work)
        return None

    def _apply(self, t: Target) -> None:
        leader = _leader_or_any(t)
        self.victims = [leader]
        for m in t.alive():
            if m != leader:
                t.block(leader, m)
        ballot = self._ballot(t, leader)
        if ballot is None:
            return
        voter, candidate = ballot
        t.pause(candidate)
        self.victims += [candidate, voter]
        # A star around the leader: each voter's first CanvassPosition after its ballot times out reaches
        # the leader, and no voter hears another's canvass (which would let them nominate before the
        # leader's answer arrives).
        others = [m for m in t.alive() if m not in (leader, candidate)]
        for m in others:
            t.unblock(leader, m)
            t.unblock(m, leader)
            for other in others:
                if other != m:
                    t.block(m, other)

    def _heal(self, t: Target) -> None:
        for m in self.victims:
            if m in t.paused:
                t.resume(m)
        t.heal_network()


@dataclass
class SlowElection(Nemesis):
    """Every link delays its messages by ``delay_s`` (past the election timeout), then the leader is
    killed: votes arrive after their ballot timed out (stale ballots) and appends late. Heal restores the
    links and restarts the old leader."""

    name: str = "slow-election"
    delay_s: float = 0.4

    @property
    def leader_fault(self) -> bool:
        return True

    def detail(self) -> dict[str, Any]:
        return {"delay_s": self.delay_s}

    def _apply(self, t: Target) -> None:
        leader = _leader_or_any(t)
        for src in t.members:
            for dst in t.members:
                if src != dst:
                    t.set_link(src, dst, 0.0, self.delay_s)
        t.kill(leader)
        self.victims = [leader]

    def _heal(self, t: Target) -> None:
        t.heal_network()
        t.restart(self.victims[0])


LATE_MESSAGES = ("Vote", "RequestVote", "CanvassPosition", "NewLeadershipTerm", "AppendPosition", "CommitPosition")
"""The member messages :class:`LateMessages` holds back: the ones whose late arrival crosses a ballot or a term."""


@dataclass
class LateMessages(Nemesis):
    """Every live member's ``message`` (``Vote``, ``AppendPosition``...) to the others is held ``delay_s``
    (later messages overtake it) or, with ``duplicate``, sent at once and again ``delay_s`` later; then,
    unless ``then`` is empty, a leader fault starts an election into which the late copies arrive
    (``kill-leader``, ``isolate-leader`` or ``pause-leader`` on real processes): a vote counted in a later
    ballot, an AppendPosition of an older term at a new leader. Heal removes the rule (what is held still
    arrives) and undoes the leader fault."""

    name: str = "late-messages"
    message: str = "Vote"
    delay_s: float = 0.4
    duplicate: bool = True
    then: str = "kill-leader"
    _fault: Nemesis | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.message not in LATE_MESSAGES:
            raise ValueError(f"late-messages: message {self.message!r} is not one of {', '.join(LATE_MESSAGES)}")
        if self.then not in _LEADER_FAULTS:
            raise ValueError(f"late-messages: then {self.then!r} is not one of {', '.join(_LEADER_FAULTS)}")
        if not 0 < self.delay_s <= 10:
            raise ValueError(f"late-messages: delay_s must be in (0, 10] seconds, not {self.delay_s!r}")

    @property
    def leader_fault(self) -> bool:
        return bool(self.then)

    def detail(self) -> dict[str, Any]:
        return {"message": self.message, "delay_s": self.delay_s, "duplicate": self.duplicate, "then": self.then}

    def _apply(self, t: Target) -> None:
        self.victims = list(t.alive())
        for m in self.victims:
            t.delay_member_messages(m, self.message, self.delay_s, self.duplicate)
        if self.then:
            self._fault = _LEADER_FAULTS[self.then]()
            self._fault._apply(t)

    def _heal(self, t: Target) -> None:
        for m in self.victims:
            if m in t.alive():
                t.delay_member_messages(m, self.message, 0.0)
        if self._fault is not None:
            self._fault._heal(t)


@dataclass
class SnapshotElection(Nemesis):
    """Ask for a snapshot and cut the leader off at once: the snapshot is taken (or not) across a
    leadership change, and every member must take it at the same log position (``snapshots_agree``)."""

    name: str = "snapshot-election"
    after_s: float | None = None  # the cut this long after the request (default: drawn in 2-20 ms)

    @property
    def leader_fault(self) -> bool:
        return True

    def _apply(self, t: Target) -> None:
        leader = _leader_or_any(t)
        t.snapshot()
        # The cut lands while the action is appended, committed on some members, applied on others.
        t.advance(self.after_s if self.after_s is not None else t.rng.uniform(0.002, 0.02), lambda: None)
        self.victims = [leader]
        t.partition([[leader], [m for m in t.members if m != leader]])

    def _heal(self, t: Target) -> None:
        t.heal_network()


@dataclass
class SilentClient(Nemesis):
    """A client hangs without closing its session (no keepalives): the leader must time the session out,
    and every member must apply that SessionClose at the same log position (``timers_and_closes_agree``)."""

    name: str = "silent-client"

    def _apply(self, t: Target) -> None:
        self.victims = []
        try:
            t.silence_client()
        except Unsupported as e:  # real processes: the schedule goes on without it (said in the trace)
            t.event("chaos_skipped", -1, nemesis=self.name, reason=str(e))

    def _heal(self, t: Target) -> None:
        pass  # a hung client stays hung; the workload already moved to a new session


# --- nemeses for the coverage-chosen goldens (golden/coverage.py; docs/trace-schema.md "Goldens") ---


@dataclass
class Down(Kill):
    """Kill like :class:`Kill`, but leave the victims down until the run's final heal: leadership terms
    pass without them, so they come back missing whole terms (FOLLOWER_LOG_REPLICATION)."""

    name: str = "down"

    def _heal(self, t: Target) -> None:
        pass  # the final heal restarts every member that is down


@dataclass
class QuorumLoss(Kill):
    """Kill every follower: the leader is left without a quorum and must step down; heal restarts them."""

    name: str = "quorum-loss"

    def _apply(self, t: Target) -> None:
        leader = t.leader()
        self.victims = sorted(m for m in t.alive() if m != leader)
        self.hit_leader = False
        for m in self.victims:
            t.kill(m)


@dataclass
class Control(Nemesis):
    """Cluster control through the leader's toggle (simulator): ``suspend`` (heal: resume) or
    ``shutdown`` (the members terminate; heal: restart every one from disk)."""

    name: str = "control"
    action: str = "suspend"

    def detail(self) -> dict[str, Any]:
        return {"action": self.action}

    def _cluster(self, t: Target) -> Any:
        if t.kind != "sim":
            raise Unsupported(f"cluster control {self.action} is wired for the simulator only")
        return t.cluster

    def _apply(self, t: Target) -> None:
        self.victims = []
        self._cluster(t).control(self.action)

    def _heal(self, t: Target) -> None:
        c = self._cluster(t)
        if self.action == "suspend":
            if not c.control("resume"):
                c.run_until(lambda: c.control("resume"), 5 * 1_000_000_000)
        elif self.action == "shutdown":
            for m in t.members:
                t.restart(m)


@dataclass
class ClientSilence(Nemesis):
    """Cut every client off the network (simulator) for longer than the session timeout: the leader
    times their sessions out (SessionCloseEvent TIMEOUT, at the same log position everywhere); heal
    reconnects the network, and the workload opens a new session."""

    name: str = "client-silence"
    clients: list[int] = field(default_factory=list)

    def _apply(self, t: Target) -> None:
        if not isinstance(t, SimTarget):
            raise Unsupported("client silence is wired for the simulator only")
        self.victims = []
        for client in t.cluster.clients:
            t.cluster.network.isolate(client.network_id)
        self.clients = [c.client_id for c in t.cluster.clients]
        t.event("isolate_clients", -1, clients=self.clients)

    def _heal(self, t: Target) -> None:
        t.heal_network()
        assert isinstance(t, SimTarget)  # _apply refused any other
        # The silenced clients' sessions are gone (timed out); each client closes its end, as one that
        # noticed its keepalives went unanswered, and the workload opens a new session.
        for client in t.cluster.clients:
            if client.client_id in self.clients and not client.client.is_closed:
                client.client.close(t.cluster.now_ns)


@dataclass
class LostReplies(Nemesis):
    """Every reply (egress) from every member to the clients connected now is lost; requests still
    arrive and are applied. Clients that resend (same request id) send each unanswered request again:
    a service that does not deduplicate applies it twice. Simulator only."""

    name: str = "lost-replies"

    def _apply(self, t: Target) -> None:
        self.victims = t.lose_replies(True)

    def _heal(self, t: Target) -> None:
        t.lose_replies(False)


@dataclass
class DuplicateIngress(Nemesis):
    """Every message a client sends to a member (connect, session messages, keepalives, close) arrives
    twice, the copy 1-20 ms after the original (later messages may overtake it), for clients connected now
    and those that connect meanwhile. After ``before_s`` the leader fault ``then`` (``kill-leader``,
    ``isolate-leader``...; empty: none) follows, so duplicated requests, and the clients' resends, meet a
    new leader. A service that does not deduplicate applies a request twice. Simulator only; heal stops
    the duplicates and undoes the leader fault."""

    name: str = "duplicate-ingress"
    before_s: float = 0.3
    then: str = "kill-leader"
    clients: list[int] = field(default_factory=list, init=False)
    _fault: Nemesis | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.then not in _LEADER_FAULTS:
            raise ValueError(f"duplicate-ingress: then {self.then!r} is not one of {', '.join(_LEADER_FAULTS)}")
        if not 0 <= self.before_s <= 10:
            raise ValueError(f"duplicate-ingress: before_s must be in [0, 10] seconds, not {self.before_s!r}")

    @property
    def leader_fault(self) -> bool:
        return bool(self.then)

    def detail(self) -> dict[str, Any]:
        return {"before_s": self.before_s, "then": self.then, "clients": self.clients}

    def _apply(self, t: Target) -> None:
        self.clients = t.duplicate_ingress(True)
        if self.before_s > 0:
            t.advance(self.before_s, t.work)
        if self.then:
            self._fault = _LEADER_FAULTS[self.then]()
            self._fault._apply(t)
            self.victims = self._fault.victims

    def _heal(self, t: Target) -> None:
        t.duplicate_ingress(False)
        if self._fault is not None:
            self._fault._heal(t)


@dataclass
class Deaf(Nemesis):
    """A follower hears no one (every link into it is cut) but is heard: its peers' ballots to it are
    lost, so their elections fail round after round and their candidate terms climb."""

    name: str = "deaf"
    pick: int | None = None  # the pick-th live non-leader member (by id) instead of a random follower

    def _apply(self, t: Target) -> None:
        if self.pick is None:
            self.victims = [t.rng.choice(_followers(t) or t.alive())]
        else:
            leader = t.leader()
            others = sorted(m for m in t.alive() if m != leader)
            self.victims = [others[self.pick % len(others)]]
        for m in t.members:
            if m != self.victims[0]:
                t.block(m, self.victims[0])

    def _heal(self, t: Target) -> None:
        t.heal_network()


@dataclass
class Mute(Nemesis):
    """A follower is heard by no one (every link out of it is cut) but hears everyone: its canvass
    positions, ballots and votes are lost, while the others' ballots and NewLeadershipTerms reach it
    (a candidate that never learns it lost, until the winner's NewLeadershipTerm arrives)."""

    name: str = "mute"
    fail_votes: bool = False  # also fail its handling of the next term's RequestVotes (simulator hook)

    def detail(self) -> dict[str, Any]:
        return {"fail_votes": self.fail_votes}

    def _apply(self, t: Target) -> None:
        self.victims = [t.rng.choice(_followers(t) or t.alive())]
        for m in t.members:
            if m != self.victims[0]:
                t.block(self.victims[0], m)
        if self.fail_votes:
            # It never learns the winner's candidate term from a RequestVote, so it stands in that term.
            t.fail_next_request_vote(self.victims[0])

    def _heal(self, t: Target) -> None:
        t.heal_network()
        if self.fail_votes and self.victims[0] in t.alive():
            t.fail_next_request_vote(self.victims[0], armed=False)


@dataclass
class Together(Nemesis):
    """Several nemeses at once: applied in order, healed in reverse (e.g. slow links during a leader
    kill, so that two candidates stand in the same election)."""

    name: str = "together"
    parts: tuple[Nemesis, ...] = ()

    @property
    def leader_fault(self) -> bool:
        return any(p.leader_fault for p in self.parts)

    def detail(self) -> dict[str, Any]:
        return {"parts": [{"nemesis": p.name, **p.detail()} for p in self.parts]}

    def _apply(self, t: Target) -> None:
        # The parts' own _apply/_heal: one chaos_apply/chaos_heal event for the whole fault.
        for p in self.parts:
            p.applied_at = t.now_s()
            p._apply(t)
        self.victims = sorted({v for p in self.parts for v in p.victims})

    def _heal(self, t: Target) -> None:
        for p in reversed(self.parts):
            p._heal(t)
            p.healed_at = t.now_s()


@dataclass
class OlderTermTail(Nemesis):
    """Leave a deposed leader with a tail of its own term, then change leaders once more as it returns.
    The leader's messages to the others are dropped first while theirs still reach it: what it has
    sent commits, its clients send their next requests, and it appends them where nobody else does.
    ``tail_s`` later it is cut off entirely; once the others have elected a new leader (and it has led
    ``lead_s``), that leader is killed and the network healed. The third leader's log ends in the middle
    term, while the old leader canvasses a longer log that ends in the oldest term: its bytes at those
    positions are not the new leader's and must not count toward the new leader's commit position. Heal
    restarts the killed leader."""

    name: str = "older-term-tail"
    tail_s: float = 0.1
    lead_s: float = 0.0
    wait_s: float = 10.0  # how long the others may take to elect (target time)

    def __post_init__(self) -> None:
        for name in ("tail_s", "lead_s"):
            if not 0 <= getattr(self, name) <= 10:
                raise ValueError(f"older-term-tail: {name} must be in [0, 10] seconds, not {getattr(self, name)!r}")

    @property
    def leader_fault(self) -> bool:
        return True

    def detail(self) -> dict[str, Any]:
        return {"tail_s": self.tail_s, "lead_s": self.lead_s}

    def _apply(self, t: Target) -> None:
        old = _leader_or_any(t)
        others = [m for m in t.members if m != old]
        self.victims = [old]
        try:
            for m in others:
                t.block(old, m)
            t.advance(self.tail_s, t.work)  # the clients keep sending: to the old leader's tail
            t.partition([[old], others])
            t.await_leader(self.wait_s, exclude=(old,))
            if self.lead_s > 0:
                t.advance(self.lead_s, t.work)
            middle = t.leader()
            if middle is not None and middle != old:
                t.kill(middle)
                self.victims.append(middle)
        finally:
            t.heal_network()

    def _heal(self, t: Target) -> None:
        for m in self.victims[1:]:
            if m not in t.alive():
                t.restart(m)


_LEADER_FAULTS: dict[str, Any] = {
    "": lambda: None,
    "kill-leader": lambda: Kill(who="leader"),
    "isolate-leader": lambda: Partition(shape="leader-isolation"),
    "pause-leader": lambda: Pause(),
}

RESUME_WAIT_NS = 5 * 1_000_000_000


@dataclass
class SuspendIsolatedLeader(Nemesis):
    """Isolate the leader from the other members, then set its control toggle to SUSPEND (simulator: the
    toggle of that member, not of whoever leads). Heal: reconnect it; should a SUSPEND have committed
    after all (the old leader led again), resume the cluster so the run can finish."""

    name: str = "suspend-isolated-leader"
    accepted: bool = False

    @property
    def leader_fault(self) -> bool:
        return True

    def detail(self) -> dict[str, Any]:
        return {"accepted": self.accepted}

    def _sim(self, t: Target) -> SimTarget:
        if not isinstance(t, SimTarget):
            raise Unsupported("suspending an isolated leader is wired for the simulator only")
        return t

    def _apply(self, t: Target) -> None:
        c = self._sim(t).cluster
        leader = t.leader()
        if leader is None:
            self.victims = []
            return
        self.victims = [leader]
        t.partition([[leader], [m for m in t.members if m != leader]])
        self.accepted = bool(c.member(leader).toggle_control(ToggleState.SUSPEND))  # type: ignore[attr-defined]
        c.event("control", leader, action="suspend", accepted=self.accepted)

    def _heal(self, t: Target) -> None:
        c = self._sim(t).cluster
        t.heal_network()

        def resumed() -> bool:
            leader = c.leader_id()
            if leader is None:
                return False
            return c.member(leader).state != ConsensusModuleState.SUSPENDED or c.control("resume")

        c.run_until(resumed, RESUME_WAIT_NS)


NEMESES: dict[str, type[Nemesis]] = {
    "partition": Partition,
    "one-way-link": OneWayLink,
    "flaky-links": FlakyLinks,
    "kill": Kill,
    "disk": DiskFault,
    "disk-full": DiskFull,
    "pause": Pause,
    "kill-service": KillService,
    "clock-skew": ClockSkew,
    "snapshot": Snapshot,
    "kill-voter": KillVoter,
    "slow-election": SlowElection,
    "snapshot-election": SnapshotElection,
    "silent-client": SilentClient,
    "late-messages": LateMessages,
    "lost-replies": LostReplies,
    "duplicate-ingress": DuplicateIngress,
    "older-term-tail": OlderTermTail,
    "stalled-candidate": StalledCandidate,
    "suspend-isolated-leader": SuspendIsolatedLeader,
}

__all__ = [
    "NEMESES",
    "ClockSkew",
    "DiskFault",
    "DiskFull",
    "DuplicateIngress",
    "FlakyLinks",
    "Kill",
    "KillService",
    "KillVoter",
    "LateMessages",
    "LostReplies",
    "Mute",
    "Nemesis",
    "OlderTermTail",
    "OneWayLink",
    "Partition",
    "Pause",
    "SilentClient",
    "SlowElection",
    "Snapshot",
    "SnapshotElection",
    "StalledCandidate",
    "SuspendIsolatedLeader",
    "Unsupported",
]


@dataclass
class SnapshotCorrupt(Kill):
    """Kill a member (a follower by default), make its service's latest snapshot unloadable while it is
    down (a bit flipped under the frame CRC: clusterlab.testing.disk_faults), and restart it: its service
    cannot load the snapshot, so the member must close by itself (the service acks its recovery with a
    NULL client id and the consensus module closes, Aeron "failed to start clustered service(s)"; on
    processes the service exits 5 and its node 3). Heal waits up to ``close_wait_s`` for that close
    (ChaosTimeout naming the member if it runs on), then invalidates the latest snapshot (ClusterTool
    invalidate-latest-snapshot) and restarts the member: it recovers from the snapshot before, or from
    the log, and replays. A member with no snapshot restarts undamaged and heal has nothing to wait for."""

    name: str = "snapshot-corrupt"
    who: str = "follower"
    close_wait_s: float = 10.0
    corrupted: dict[int, int] = field(default_factory=dict, init=False)  # member -> snapshot recording id

    def detail(self) -> dict[str, Any]:
        return {"who": self.who, "close_wait_s": self.close_wait_s}

    def while_down(self, t: Target) -> None:
        for m in self.victims:
            recording_id = faults.corrupt_latest_service_snapshot(t.storage(m), t.rng)
            if recording_id is not None:
                self.corrupted[m] = recording_id
            t.event("snapshot_corrupted", m, service_id=0, recording_id=recording_id)
            t.restart(m)

    def _heal(self, t: Target) -> None:
        for m in self.victims:
            if m not in self.corrupted:
                continue  # restarted undamaged by apply: it runs
            self._await_closed(t, m)
            if m in t.alive():
                t.kill(m)  # the simulator keeps a terminated member until it is taken down
            position = _invalidate_latest_snapshot(t.storage(m))
            t.event("snapshot_invalidated", m, fault=self.name, position=position)
            t.restart(m)

    def _await_closed(self, t: Target, member_id: int) -> None:
        end = t.now_s() + self.close_wait_s
        while not _closed_by_itself(t, member_id):
            if t.now_s() > end:
                raise ChaosTimeout(
                    f"member {member_id} did not close within {self.close_wait_s:g} s of restarting with an "
                    f"unloadable service snapshot (recording {self.corrupted[member_id]}): it runs on without "
                    "its service"
                )
            t.advance(0.05, t.work)


def _closed_by_itself(t: Target, member_id: int) -> bool:
    """The member closed: in the simulator its consensus module terminated and its services are gone; on
    processes its node and service processes exited."""
    if isinstance(t, SimTarget):
        c = t.cluster
        if not c.is_alive(member_id):
            return True
        terminated = bool(c.member(member_id).terminated)  # type: ignore[attr-defined]
        return terminated and not c.service_hosts(member_id)
    if isinstance(t, LocalTarget):
        return member_id not in t.alive() and all(code is not None for code in t.cluster.exit_codes(member_id).values())
    raise Unsupported(f"{t.kind}: tell whether a member closed")


NEMESES["snapshot-corrupt"] = SnapshotCorrupt
__all__ += ["SnapshotCorrupt"]


@dataclass
class BackupStart(Nemesis):
    """Start a ClusterBackup of the cluster (``replay_start``: ``beginning`` or ``latest-snapshot``; a query
    every ``query_interval_s``, besides the one a log entry of a term it does not know triggers); it runs on
    through the faults that follow, until :class:`BackupRestore` restores from it."""

    name: str = "backup-start"
    replay_start: str = "beginning"
    query_interval_s: float = 1.0

    def detail(self) -> dict[str, Any]:
        return {"replay_start": self.replay_start, "query_interval_s": self.query_interval_s}

    def _apply(self, t: Target) -> None:
        self.victims = []
        t.start_backup(self.replay_start, self.query_interval_s)


@dataclass
class BackupRestore(Nemesis):
    """Destroy the cluster and restore it from the running ClusterBackup: wait (up to ``catch_up_wait_s``,
    the workload running) until the backup holds the committed log up to every live member's commit
    position, then at that instant kill every member, replace each disk by a copy of the backup and
    start them all. Every write acknowledged before then must survive, and every member's state must
    match the destroyed cluster's at every log position."""

    name: str = "backup-restore"
    catch_up_wait_s: float = 20.0

    @property
    def leader_fault(self) -> bool:
        return True

    def detail(self) -> dict[str, Any]:
        return {"catch_up_wait_s": self.catch_up_wait_s}

    def _apply(self, t: Target) -> None:
        self.victims = list(t.members)
        end = t.now_s() + self.catch_up_wait_s
        while not t.backup_caught_up():
            if t.now_s() > end:
                raise ChaosTimeout(
                    f"the backup did not reach the cluster's commit position within {self.catch_up_wait_s} s"
                )
            t.advance(0.01, t.work)
        t.restore_from_backup()


NEMESES["backup-start"] = BackupStart
NEMESES["backup-restore"] = BackupRestore
__all__ += ["BackupRestore", "BackupStart"]


@dataclass
class ClusterDown(Kill):
    """Kill every member and keep the whole cluster down for the step (longer than the clients'
    new-leader timeout in the ``cluster-down`` scenario): each client must notice and close by itself
    (``clients_close_when_cluster_gone``); heal restarts every member from disk."""

    name: str = "cluster-down"
    who: str = "all"
    new_leader_timeout_ns: int = 0  # the longest of the clients' (read at apply)

    def detail(self) -> dict[str, Any]:
        return {"who": self.who, "new_leader_timeout_ns": self.new_leader_timeout_ns}

    def _apply(self, t: Target) -> None:
        if not isinstance(t, SimTarget):
            raise Unsupported("cluster-down reads the simulator clients' new-leader timeout")
        timeouts = [int(c.client.new_leader_timeout_ns) for c in t.cluster.clients]
        self.new_leader_timeout_ns = max(timeouts, default=NEW_LEADER_TIMEOUT_DEFAULT_NS)
        super()._apply(t)


NEMESES["cluster-down"] = ClusterDown
__all__ += ["ClusterDown"]


@dataclass
class LogRecordingStop(Nemesis):
    """The leader's archive stops recording the log where it ends (simulator; Aeron's
    ``tryStopRecordingByIdentity``): the leader must enter an election and the cluster go on under a
    leader whose recording runs (the run's final progress bound fails a leader that keeps leading with
    a stopped recording, since nothing it takes in is appended)."""

    name: str = "log-recording-stop"
    position: int | None = None

    @property
    def leader_fault(self) -> bool:
        return True

    def detail(self) -> dict[str, Any]:
        return {"position": self.position}

    def _apply(self, t: Target) -> None:
        if not isinstance(t, SimTarget):
            raise Unsupported("stopping a log recording is wired for the simulator only")
        leader = t.leader()
        self.victims = [] if leader is None else [leader]
        if leader is not None:
            self.position = t.cluster.stop_log_recording(leader)


NEMESES["log-recording-stop"] = LogRecordingStop
__all__ += ["LogRecordingStop"]
