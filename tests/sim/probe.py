"""A single-member probe for rule tests: one real ConsensusModule, its peers played by the test.

The module under test is member ``member_id`` of a ``members``-member cluster (``ClusterMember(0..n-1)``)
living in a test's ``tmp_path``, driven as a :class:`SteppedModule`: each input returns the step's
effects as values, which the probe keeps in order (the sends with the probe time, the events). The
test plays the other members by handing it message objects with :meth:`Probe.deliver` and moves time
with :meth:`Probe.work` / :meth:`Probe.run_until`. Nothing else runs: no network, no other members,
so a test states exactly what the member saw and checks exactly what it did.

The ``to_*`` helpers walk the member into an election state the way peers would, by feeding it
CanvassPosition, Vote, NewLeadershipTerm and AppendPosition messages::

    probe = Probe(tmp_path)
    probe.to_candidate_ballot()          # canvass from both peers, nomination back-off elapsed
    probe.deliver(1, probe.vote(1, yes=True))
    probe.deliver(2, probe.vote(2, yes=True))
    probe.work()
    assert probe.state == ElectionState.LEADER_LOG_REPLICATION
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from clusterlab.core.archive.layout import LOG_DIR
from clusterlab.core.archive.storage import StorageChange
from clusterlab.core.codec.consensus import (
    AppendPosition,
    CanvassPosition,
    CommitPosition,
    NewLeadershipTerm,
    RequestVote,
    Vote,
)
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.session import encode_session_message
from clusterlab.core.codec.transport import LogBlock
from clusterlab.core.consensus.context import (
    APP_VERSION,
    NULL_POSITION,
    NULL_VALUE,
    PROTOCOL_VERSION,
    Channel,
    ClusterMember,
    ConsensusModuleContext,
    ElectionState,
    EventSink,
    Outbox,
    Role,
    Timeouts,
)
from clusterlab.core.consensus.effects import Effects, MemberSend, Received, SteppedModule
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.node_state import NODE_STATE_FILE_NAME, _decode
from clusterlab.core.consensus.rules import PROTOCOL_RULES, ConsensusRules
from clusterlab.core.runtime.storage import FileStorage

M = TypeVar("M", bound=Message)

# How many duty cycles one instant may take before the probe calls it a livelock.
MAX_CYCLES_PER_INSTANT = 10_000


@dataclass(frozen=True, slots=True)
class Sent:
    """One message the module sent, with the probe time of the step that sent it."""

    time_ns: int
    dst: int
    channel: Channel
    msg: Message


@dataclass(slots=True)
class SendLog:
    """Every message the module sent, and ``on_send`` hooks called the moment each leaves (so a hook
    sees the world, the disk included, exactly as it was then)."""

    sent: list[Sent] = field(default_factory=list)
    on_send: list[Callable[[Sent], None]] = field(default_factory=list)


_SEGMENT = re.compile(r"^(\d{16})\.seg$")


@dataclass(slots=True)
class StoredLog:
    """How far the member's log reaches on its storage, kept from the steps' storage effects: each
    archive segment's base position and size (a segment file is named by its base position)."""

    sizes: dict[int, int] = field(default_factory=dict)

    @classmethod
    def read(cls, storage: FileStorage) -> StoredLog:
        """The segments as they are on disk now."""
        sizes = {}
        for name in storage.list_dir(LOG_DIR):
            if (m := _SEGMENT.match(name)) is not None:
                sizes[int(m.group(1))] = storage.size(f"{LOG_DIR}/{name}")
        return cls(sizes)

    def apply(self, change: StorageChange) -> None:
        directory, _, name = change.path.rpartition("/")
        m = _SEGMENT.match(name)
        if directory != LOG_DIR or m is None:
            return
        base = int(m.group(1))
        if change.op == "create":
            self.sizes.setdefault(base, 0)
        elif change.op == "write":
            self.sizes[base] = max(self.sizes.get(base, 0), change.offset + change.length)
        elif change.op == "truncate":
            self.sizes[base] = change.length
        elif change.op == "remove":
            self.sizes.pop(base, None)

    @property
    def end(self) -> int:
        return max((base + size for base, size in self.sizes.items()), default=0)


class Probe:
    """One ConsensusModule driven by hand through :class:`SteppedModule`. See the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        member_id: int = 0,
        members: int = 3,
        timeouts: Timeouts | None = None,
        appointed_leader_id: int = NULL_VALUE,
        rng: random.Random | None = None,
        service_count: int = 0,
        start: bool = True,
        rules: ConsensusRules = PROTOCOL_RULES,
    ) -> None:
        self.directory = Path(directory)
        self.member_id = member_id
        self.members = [ClusterMember(i) for i in range(members)]
        self.timeouts = timeouts if timeouts is not None else Timeouts.fast()
        self.appointed_leader_id = appointed_leader_id
        self.service_count = service_count  # 0: the consensus rules alone, no service to wait for
        self.rng = rng if rng is not None else random.Random(f"probe:{member_id}")
        self.rules = rules  # the protocol's, or a test's planted bug (clusterlab.testing.mutants)
        self.now_ns = 0
        self._sends = SendLog()
        self._events: list[dict[str, Any]] = []
        self.log_lines: list[str] = []
        self.incarnation = 0
        self.stepped = self._build()
        if start:
            self._record(self.stepped.start(self.now_ns))

    # ------------------------------------------------------------------ construction
    def _build(self) -> SteppedModule:
        self._storage = FileStorage(self.directory)  # on disk: tests read the node-state file behind its back
        self._stored = StoredLog.read(self._storage)

        def context(outbox: Outbox, events: EventSink) -> ConsensusModuleContext:
            return ConsensusModuleContext(
                member_id=self.member_id,
                members=list(self.members),
                cluster_dir=self.directory,
                storage=self._storage,
                outbox=outbox,
                rng=self.rng,
                timeouts=self.timeouts,
                appointed_leader_id=self.appointed_leader_id,
                service_count=self.service_count,
                events=events,
                log=self.log_lines.append,
                check_invariants=True,
                rules=self.rules,
            )

        return SteppedModule(context, observe_send=self._observe_send)

    def _observe_send(self, send: MemberSend) -> None:
        if self._sends.on_send:
            sent = Sent(self.now_ns, send.member_id, send.channel, send.message)
            for hook in self._sends.on_send:
                hook(sent)

    def _record(self, effects: Effects) -> Effects:
        """Append one step's effects to the send log and the event list, at the probe's time.

        Every step is also held to the rule its storage effects make checkable: an AppendPosition
        never reports more log than the storage holds when it is sent (Aeron's follower reports its
        recording's position, appended before it is acknowledged)."""
        stored = self._stored
        for effect in effects.ordered:
            if isinstance(effect, StorageChange):
                stored.apply(effect)
            elif isinstance(effect, MemberSend) and isinstance(effect.message, AppendPosition):
                assert effect.message.log_position <= stored.end, (
                    f"AppendPosition reports {effect.message.log_position} but the storage holds the log to "
                    f"{stored.end} when it is sent"
                )
        self._stored = StoredLog.read(self._storage)  # what a test changed behind the module's back counts next
        self._sends.sent.extend(Sent(self.now_ns, s.member_id, s.channel, s.message) for s in effects.sends)
        self._events.extend(
            {
                "time_ns": self.now_ns,
                "incarnation": self.incarnation,
                "member_id": e.member_id,
                "kind": e.kind,
                "leadership_term_id": e.leadership_term_id,
                "log_position": e.log_position,
                "detail": e.detail,
            }
            for e in effects.events
        )
        return effects

    def _drain(self) -> Effects:
        """Record what calls made on ``cm`` directly did, at the time they were made."""
        return self._record(self.stepped.drain())

    @property
    def cm(self) -> ConsensusModule:
        return self.stepped.module

    @property
    def outbox(self) -> SendLog:
        self._drain()
        return self._sends

    @property
    def events(self) -> list[dict[str, Any]]:
        self._drain()
        return self._events

    def restart(self) -> None:
        """Close the module cleanly and start a new one on the same directory (a process restart)."""
        self._drain()
        self._record(self.stepped.close())
        self.incarnation += 1
        self.stepped = self._build()
        self._record(self.stepped.start(self.now_ns))

    @property
    def peers(self) -> list[int]:
        return [m.member_id for m in self.members if m.member_id != self.member_id]

    # ------------------------------------------------------------------ driving
    def _at(self, now_ns: int | None) -> int:
        self._drain()
        if now_ns is not None:
            if now_ns < self.now_ns:
                raise ValueError(f"probe time cannot go back: {now_ns} < {self.now_ns}")
            self.now_ns = now_ns
        return self.now_ns

    def deliver(self, src: int, msg: Message, now_ns: int | None = None, channel: Channel = Channel.CONSENSUS) -> None:
        """Hand the module ``msg`` as if ``src`` had sent it (no duty cycle runs)."""
        self.deliver_bytes(src, msg.encode(), now_ns, channel)

    def deliver_bytes(
        self, src: int, payload: bytes, now_ns: int | None = None, channel: Channel = Channel.CONSENSUS
    ) -> None:
        now = self._at(now_ns)
        self._record(self.stepped.receive(now, Received(src, channel, payload)))

    def work(self, now_ns: int | None = None) -> int:
        """One duty cycle at ``now_ns`` (default: the current probe time)."""
        now = self._at(now_ns)
        return self._record(self.stepped.tick(now)).work_count

    def run_until(self, end_ns: int, until: Callable[[], bool] | None = None) -> bool:
        """Run every duty cycle the module asks for (its ``next_deadline_ns``) up to and including
        ``end_ns``; stop early when ``until()`` holds. The clock ends at ``end_ns`` unless stopped early.
        Returns whether ``until`` held (True when no predicate is given)."""
        if until is not None and until():
            return True
        cycles_at_instant = 0
        while True:
            deadline = max(self._drain().next_deadline_ns, self.now_ns)
            if deadline > end_ns:
                break
            cycles_at_instant = cycles_at_instant + 1 if deadline == self.now_ns else 0
            if cycles_at_instant > MAX_CYCLES_PER_INSTANT:
                raise AssertionError(f"probe livelock at t={self.now_ns}: {self.cm.describe()}")
            self.work(deadline)
            if until is not None and until():
                return True
        self._at(end_ns)
        return until is None or until()

    def run_for(self, duration_ns: int, until: Callable[[], bool] | None = None) -> bool:
        return self.run_until(self.now_ns + duration_ns, until)

    def settle(self, until: Callable[[], bool] | None = None) -> bool:
        """One duty cycle now (as the simulator runs one after every delivery), then every further
        cycle due at this instant; stops early when ``until()`` holds."""
        self.work()
        return self.run_until(self.now_ns, until)

    # ------------------------------------------------------------------ observing
    @property
    def state(self) -> ElectionState | None:
        return self.cm.election_state

    @property
    def election(self) -> Any:
        assert self.cm.election is not None, f"no election running: {self.cm.describe()}"
        return self.cm.election

    def sent(self, cls: type[M], dst: int | None = None, since: int = 0, channel: Channel | None = None) -> list[M]:
        """Messages of type ``cls`` sent (to ``dst``, on ``channel``) from index ``since`` of the send log."""
        return [
            s.msg
            for s in self.outbox.sent[since:]
            if isinstance(s.msg, cls) and (dst is None or s.dst == dst) and (channel is None or s.channel == channel)
        ]

    def sends(self, cls: type[Message] | None = None, since: int = 0) -> list[Sent]:
        return [s for s in self.outbox.sent[since:] if cls is None or isinstance(s.msg, cls)]

    def mark(self) -> int:
        """An index into the send log, for ``sent(..., since=mark)``."""
        return len(self.outbox.sent)

    def states_entered(self) -> list[ElectionState]:
        return [ElectionState[e["detail"]["to"]] for e in self.events if e["kind"] == "election_state"]

    def events_of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == kind]

    def candidate_term_on_disk(self) -> int:
        """The candidate term in the node-state file, read from disk (not from the module's memory)."""
        path = self.directory / NODE_STATE_FILE_NAME
        term, _timestamp, _position = _decode(str(path), path.read_bytes())
        return term

    # ------------------------------------------------------------------ messages from peers
    def canvass(
        self,
        src: int,
        log_leadership_term_id: int = NULL_VALUE,
        log_position: int = 0,
        leadership_term_id: int | None = None,
    ) -> CanvassPosition:
        return CanvassPosition(
            log_leadership_term_id=log_leadership_term_id,
            log_position=log_position,
            leadership_term_id=log_leadership_term_id if leadership_term_id is None else leadership_term_id,
            follower_member_id=src,
            protocol_version=PROTOCOL_VERSION,
        )

    def request_vote(
        self, src: int, candidate_term_id: int, log_leadership_term_id: int = NULL_VALUE, log_position: int = 0
    ) -> RequestVote:
        return RequestVote(
            log_leadership_term_id=log_leadership_term_id,
            log_position=log_position,
            candidate_term_id=candidate_term_id,
            candidate_member_id=src,
            protocol_version=PROTOCOL_VERSION,
        )

    def vote(
        self,
        src: int,
        yes: bool,
        candidate_term_id: int | None = None,
        candidate_member_id: int | None = None,
        log_leadership_term_id: int = NULL_VALUE,
        log_position: int = 0,
    ) -> Vote:
        """A peer's Vote for this member's current candidate term (unless told otherwise)."""
        return Vote(
            candidate_term_id=self.election.candidate_term_id if candidate_term_id is None else candidate_term_id,
            log_leadership_term_id=log_leadership_term_id,
            log_position=log_position,
            candidate_member_id=self.member_id if candidate_member_id is None else candidate_member_id,
            follower_member_id=src,
            vote=BooleanType.TRUE if yes else BooleanType.FALSE,
        )

    @staticmethod
    def new_leadership_term(
        leader: int,
        leadership_term_id: int,
        *,
        log_leadership_term_id: int = NULL_VALUE,
        term_base_log_position: int = 0,
        log_position: int | None = None,
        next_leadership_term_id: int | None = None,
        next_term_base_log_position: int | None = None,
        next_log_position: int = NULL_POSITION,
        log_session_id: int = 7_777,
        is_startup: bool = False,
        app_version: int = APP_VERSION,
    ) -> NewLeadershipTerm:
        """An NLT as a new leader sends it (b.4); by default for a recipient whose log ends where the
        leader's new term begins (next term = this term, next base = term base)."""
        return NewLeadershipTerm(
            log_leadership_term_id=log_leadership_term_id,
            next_leadership_term_id=leadership_term_id if next_leadership_term_id is None else next_leadership_term_id,
            next_term_base_log_position=(
                term_base_log_position if next_term_base_log_position is None else next_term_base_log_position
            ),
            next_log_position=next_log_position,
            leadership_term_id=leadership_term_id,
            term_base_log_position=term_base_log_position,
            log_position=term_base_log_position if log_position is None else log_position,
            leader_recording_id=0,
            timestamp=0,
            leader_member_id=leader,
            log_session_id=log_session_id,
            app_version=app_version,
            is_startup=BooleanType.TRUE if is_startup else BooleanType.FALSE,
        )

    @staticmethod
    def append_position(src: int, leadership_term_id: int, log_position: int, flags: int = 0) -> AppendPosition:
        return AppendPosition(
            leadership_term_id=leadership_term_id, log_position=log_position, follower_member_id=src, flags=flags
        )

    @staticmethod
    def commit_position(leader: int, leadership_term_id: int, log_position: int) -> CommitPosition:
        return CommitPosition(leadership_term_id=leadership_term_id, log_position=log_position, leader_member_id=leader)

    @staticmethod
    def log_block(
        leader: int,
        leadership_term_id: int,
        start_position: int,
        entries: bytes,
        commit_position: int = 0,
        log_session_id: int = 7_777,
    ) -> LogBlock:
        return LogBlock(
            leadership_term_id=leadership_term_id,
            start_position=start_position,
            commit_position=commit_position,
            leader_member_id=leader,
            log_session_id=log_session_id,
            entries=entries,
        )

    # ------------------------------------------------------------------ walking into a state
    def to_canvass(self) -> None:
        """INIT -> CANVASS (the first duty cycle after start)."""
        self.settle()
        assert self.state == ElectionState.CANVASS, self.cm.describe()

    def all_peers_canvass(self, log_leadership_term_id: int = NULL_VALUE, log_position: int = 0) -> None:
        for p in self.peers:
            self.deliver(p, self.canvass(p, log_leadership_term_id, log_position))

    def to_nominate(self, log_leadership_term_id: int = NULL_VALUE, log_position: int = 0) -> None:
        """Every peer canvasses a log no more recent than ours: unanimous candidate -> NOMINATE."""
        if self.state != ElectionState.CANVASS:
            self.to_canvass()
        self.all_peers_canvass(log_leadership_term_id, log_position)
        self.work()
        assert self.state == ElectionState.NOMINATE, self.cm.describe()

    def to_candidate_ballot(self, log_leadership_term_id: int = NULL_VALUE, log_position: int = 0) -> None:
        """NOMINATE, then run until the nomination back-off has passed -> CANDIDATE_BALLOT."""
        self.to_nominate(log_leadership_term_id, log_position)
        self.run_until(self.election.nomination_deadline_ns, lambda: self.state != ElectionState.NOMINATE)
        assert self.state == ElectionState.CANDIDATE_BALLOT, self.cm.describe()
        self.settle()  # the RequestVotes go out

    def to_leader_ready(self, log_leadership_term_id: int = NULL_VALUE, log_position: int = 0) -> int:
        """Win unanimously, quorum holds the whole log -> LEADER_READY; returns the new term."""
        self.to_candidate_ballot(log_leadership_term_id, log_position)
        for p in self.peers:
            self.deliver(
                p, self.vote(p, yes=True, log_leadership_term_id=log_leadership_term_id, log_position=log_position)
            )
        self.run_for(self.timeouts.election_timeout_ns, lambda: self.state == ElectionState.LEADER_READY)
        assert self.state == ElectionState.LEADER_READY, self.cm.describe()
        return self.election.leadership_term_id

    def to_leader(self) -> int:
        """A fresh member elected leader, every peer joined at the term base -> steady-state leader.
        Returns the term. The leader's log then holds its NewLeadershipTermEvent."""
        term = self.to_leader_ready()
        base = self.election.log_position
        for p in self.peers:
            self.deliver(p, self.append_position(p, term, base))
        self.settle(lambda: self.cm.election is None)
        assert self.cm.election is None and self.cm.role == Role.LEADER, self.cm.describe()
        return term

    def to_follower(self, leader: int = 1, leadership_term_id: int = 0) -> None:
        """A fresh member in CANVASS gets the leader's NLT for an empty log -> steady-state follower."""
        if self.state != ElectionState.CANVASS:
            self.to_canvass()
        self.deliver(leader, self.new_leadership_term(leader, leadership_term_id, is_startup=True))
        self.run_for(self.timeouts.election_timeout_ns, lambda: self.cm.election is None)
        assert self.cm.election is None and self.cm.role == Role.FOLLOWER, self.cm.describe()
        assert self.cm.leader_member_id == leader

    def with_uncommitted_log(self, entries: int = 3, payload: bytes = b"uncommitted") -> tuple[int, int]:
        """Become leader of a fresh cluster, append ``entries`` nobody acknowledges, restart.

        Returns (log leadership term, append position): the restarted member's log ends in that term
        at that position, and none of it is committed."""
        term = self.to_leader()
        for i in range(entries):
            self.cm.offer(payload + str(i).encode(), self.now_ns)
        position = self.cm.append_position
        self.restart()
        return term, position


def session_entries(start_position: int, leadership_term_id: int, payloads: list[bytes]) -> list[bytes]:
    """Framed log entries (one per payload, application messages) laid end to end from ``start_position``."""
    from clusterlab.core.codec.framing import frame

    out = []
    position = start_position
    for p in payloads:
        f = frame(encode_session_message(leadership_term_id, 0, 0, p), position, leadership_term_id)
        out.append(f)
        position += len(f)
    return out


class ScriptedBackoffs(random.Random):
    """A member's context rng whose first nomination back-off draws are given; everything else (and
    every later back-off) comes from the real rng."""

    def __init__(self, inner: random.Random, backoffs_ns: list[int], election_timeout_ns: int) -> None:
        super().__init__()
        self._inner = inner
        self._backoffs = list(backoffs_ns)
        self._bound = election_timeout_ns // 2

    def randrange(self, *args: Any, **kwargs: Any) -> int:
        if args == (self._bound,) and not kwargs and self._backoffs:
            return self._backoffs.pop(0)
        return self._inner.randrange(*args, **kwargs)


def scripted_backoffs(
    backoffs_ns: dict[int, list[int]], timeouts: Timeouts | None = None
) -> Callable[[ConsensusModuleContext], Any]:
    """A SimCluster ``member_factory``: member ``m``'s first nomination back-offs are ``backoffs_ns[m]``
    (in its first incarnation only)."""
    from clusterlab.harness.sim import consensus_module_factory

    election_timeout_ns = (timeouts or Timeouts.fast()).election_timeout_ns
    started: set[int] = set()

    def factory(ctx: ConsensusModuleContext) -> Any:
        if ctx.member_id in backoffs_ns and ctx.member_id not in started:
            ctx.rng = ScriptedBackoffs(ctx.rng, backoffs_ns[ctx.member_id], election_timeout_ns)
        started.add(ctx.member_id)
        return consensus_module_factory(ctx)

    return factory
