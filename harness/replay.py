"""Replay a committed log through today's consensus module and service, recording the state at every
log position: what ``golden verify`` diffs against a golden's digests.

The log goes through the same code a recovering follower runs: the entries are appended to a real
archive recording, a :class:`ConsensusModule` (member 0 of a one-member cluster, in a scratch
directory) consumes them with its log adapter (``start_log_replay`` / ``poll_log_replay``: sessions,
timers, term entries, cluster actions — Aeron's ``LogAdapter``) and forwards them as ``LogBlock``s to a
:class:`ClusteredServiceAgent` running the service, which applies each committed entry and reports an
:class:`AppliedEntry` (entry and state digest) per position.

At every position the consensus module's open sessions are compared with the service's: the two
halves must agree on what the log said (a divergence there is reported like a state divergence).
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from clusterlab.core.archive.catalogue import Catalogue
from clusterlab.core.archive.snapshots import SnapshotStore
from clusterlab.core.archive.storage import MemoryStorage
from clusterlab.core.codec import Frame
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.framing import walk_frames
from clusterlab.core.codec.registry import decode, message_name
from clusterlab.core.codec.service import JoinLog, ServiceAck
from clusterlab.core.codec.transport import LogBlock
from clusterlab.core.consensus.context import Channel, ClusterMember, ConsensusModuleContext, Role
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.service.agent import AppliedEntry, ClusteredServiceAgent
from clusterlab.core.service.api import ClusteredService

MAX_POLLS_PER_ENTRY = 8  # the log adapter yields at least one whole entry per poll
# Where a replay with ``on_restored`` also takes a snapshot of its own (fractions of the log): a run
# whose log asks for none, or only late, still has its snapshots restored and followed by much of the
# log, where a field the snapshot forgot shows in the state that follows from it.
PROBE_FRACTIONS = (1 / 3, 2 / 3)


class ReplayError(Exception):
    """The log could not be replayed (not contiguous, undecodable, the service failed): says where."""


@dataclass(frozen=True, slots=True)
class ReplayedEntry:
    """The state after one entry of the replayed log."""

    log_position: int
    length: int
    leadership_term_id: int
    entry_type: str
    cluster_time: int
    entry_digest: bytes
    state_digest: bytes
    cm_sessions: tuple[int, ...]  # open sessions in the consensus module after the entry
    service_sessions: tuple[int, ...]  # open sessions in the service agent after the entry


@dataclass
class Replay:
    """The outcome of :func:`replay_log`."""

    entries: list[ReplayedEntry] = field(default_factory=list)
    end_position: int = 0
    error: str | None = None  # set when the replay stopped early; entries hold what it got to
    session_mismatches: list[int] = field(default_factory=list)  # positions where CM and service disagree


def describe_entry(entry: bytes, position: int | None = None) -> str:
    """The decoded entry's ``describe()`` (the framed bytes of one log entry)."""
    start = position if position is not None else _frame_position(entry)
    walked = walk_frames(entry, start)
    if walked.error is not None or not walked.frames:
        return f"undecodable frame at {start}: {walked.error}"
    payload = walked.frames[0].payload
    try:
        return decode(payload).describe()
    except DecodeError as e:
        return f"{message_name(payload)} (undecodable: {e})"


def _frame_position(entry: bytes) -> int:
    # Frame header: length, version, flags, type (int32,u8,u8,u16), term (int64), position (int64).
    return int.from_bytes(entry[16:24], "little", signed=True) if len(entry) >= 24 else 0


class _Outbox:
    """The consensus module's outbox: service-stream messages go to the agent, the rest is dropped
    (a one-member cluster has no peers, and replay sends no egress worth keeping)."""

    def __init__(self) -> None:
        self.to_service: list[bytes] = []

    def send(self, member_id: int, channel: Channel, payload: bytes) -> None:
        if channel == Channel.SERVICE:
            self.to_service.append(payload)

    def send_egress(self, response_channel: str, payload: bytes) -> None:
        """Replies to clients: none in a replay."""


def replay_log(
    log_rows: Iterable[dict[str, Any]],
    service_factory: Callable[[], ClusteredService],
    *,
    scratch: Path | None = None,
    on_entry: Callable[[ReplayedEntry], None] | None = None,
    on_restored: Callable[[int, AppliedEntry], None] | None = None,
) -> Replay:
    """Replay ``log_rows`` (rows of the trace's ``log`` table, in position order, from position 0)
    through a fresh consensus module and service. Never raises for a bad log: the result's ``error``
    says where the replay stopped.

    With ``on_restored``, every snapshot the replay takes (at the log's snapshot actions, where the
    members took theirs) is restored into another fresh service, which then follows the rest of the
    log beside the replay; each entry it applies is reported with the snapshot's position (the first
    is the ``Snapshot`` row of the restore itself). The replay also takes a snapshot of its own at the
    first block boundary past each of :data:`PROBE_FRACTIONS` of the log, and one more at its end, and
    restores them the same way."""
    rows = sorted(log_rows, key=lambda r: r["log_position"])
    own_scratch = scratch is None
    directory = Path(tempfile.mkdtemp(prefix="clusterlab-replay-")) if scratch is None else scratch
    try:
        return _replay(rows, service_factory, directory, on_entry, on_restored)
    finally:
        if own_scratch:
            shutil.rmtree(directory, ignore_errors=True)


def _replay(
    rows: Sequence[dict[str, Any]],
    service_factory: Callable[[], ClusteredService],
    directory: Path,
    on_entry: Callable[[ReplayedEntry], None] | None,
    on_restored: Callable[[int, AppliedEntry], None] | None = None,
) -> Replay:
    result = Replay()
    outbox = _Outbox()
    cm = _replay_module(directory, outbox)
    service_storage = MemoryStorage("replay-service")
    store = _TakenStore(service_storage, Catalogue.open(service_storage))
    cm_sessions: dict[int, tuple[int, ...]] = {}
    cm.log_listeners.append(lambda f, _replay: cm_sessions.__setitem__(f.end_position, tuple(sorted(cm.sessions))))

    agent: ClusteredServiceAgent

    def applied(e: AppliedEntry) -> None:
        sessions = tuple(s.id for s in agent.client_sessions())
        cm_view = cm_sessions.pop(e.log_position, sessions)
        entry = ReplayedEntry(
            e.log_position,
            e.length,
            e.leadership_term_id,
            str(e.entry_type),
            e.cluster_time,
            e.entry_digest,
            e.state_digest,
            cm_view,
            sessions,
        )
        if cm_view != sessions:
            result.session_mismatches.append(e.log_position)
        result.entries.append(entry)
        if on_entry is not None:
            on_entry(entry)

    to_module: list[bytes] = []  # what the service sends its module: only acks matter here (snapshots)
    agent = ClusteredServiceAgent(0, 0, service_factory(), to_module.append, lambda *_a: None, store, applied)
    end = rows[-1]["log_position"] if rows else 0
    probes = [int(end * f) for f in PROBE_FRACTIONS]
    restorer = _Restorer(service_factory, store, on_restored, probes) if on_restored is not None else None
    try:
        agent.start(None)
        end = _append_log(cm, rows)
        _replay_committed(cm, end, len(rows), outbox, agent, to_module, restorer)
        result.end_position = end
        if restorer is not None and end > 0:
            restorer.at_end(agent)
    except ReplayError as e:
        result.error = str(e)
    except Exception as e:  # the service or agent failed on an entry: report where, keep what we have
        result.error = f"{type(e).__name__}: {e}"
    finally:
        cm.close()
    return result


def _replay_module(directory: Path, outbox: _Outbox) -> ConsensusModule:
    """A consensus module for the replay: member 0 of a one-member cluster in ``directory``, keeping
    nothing on disk, sending to ``outbox``."""
    ctx = ConsensusModuleContext(
        member_id=0,
        members=[ClusterMember(0)],
        cluster_dir=directory / "node",
        storage=MemoryStorage("replay-node"),  # the replay keeps nothing on disk
        outbox=outbox,
        rng=random.Random(0),
    )
    return ConsensusModule(ctx)


def _append_log(cm: ConsensusModule, rows: Sequence[dict[str, Any]]) -> int:
    """Appends the rows' entries to the module's archive in order and returns the log's end position;
    ReplayError when the log is not contiguous or the archive rejects an entry."""
    position = 0
    for r in rows:
        entry = bytes(r["entry"])
        start = r["log_position"] - len(entry)
        if start != position:
            raise ReplayError(
                f"the log is not contiguous: entry ending at {r['log_position']} starts at "
                f"{start}, the previous ended at {position}"
            )
        try:
            cm.archive.append(entry, start)
        except Exception as e:  # ArchiveError: a frame today's framing rejects
            raise ReplayError(f"entry at {start}..{r['log_position']} rejected by the archive: {e}") from e
        position = r["log_position"]
    return position


def _replay_committed(
    cm: ConsensusModule,
    end: int,
    entries: int,
    outbox: _Outbox,
    agent: ClusteredServiceAgent,
    to_module: list[bytes],
    restorer: _Restorer | None,
) -> None:
    """Commits the archived log up to ``end`` and runs the module's log adapter over it (``entries``
    entries), pumping what it forwards into the agent; ReplayError when the adapter stops short."""
    cm.role = Role.FOLLOWER
    cm.s.advance_commit_position(end)
    cm.start_log_replay(0, end, 0)
    _pump(outbox, agent, to_module, cm, restorer)
    polls = 0
    while cm.consumed_position < end:
        polls += 1
        # A replayed SNAPSHOT action holds the log adapter until the module has its service's ack
        # and writes its snapshot, as in a member's duty cycle (snapshot_work).
        if polls > MAX_POLLS_PER_ENTRY * (entries + 1) or not (cm.poll_log_replay(0) or cm.snapshot_work(0)):
            raise ReplayError(f"the consensus module's log adapter stopped at {cm.consumed_position} of {end}")
        _pump(outbox, agent, to_module, cm, restorer)


def _pump(
    outbox: _Outbox,
    agent: ClusteredServiceAgent,
    to_module: list[bytes],
    cm: ConsensusModule,
    restorer: _Restorer | None = None,
) -> None:
    while outbox.to_service:
        payload = outbox.to_service.pop(0)
        for part in restorer.split(payload) if restorer is not None else (payload,):
            agent.on_service_message(part, is_replay=True)
            if restorer is not None:
                restorer.follow(part)
                restorer.probe(agent)
    for payload in to_module:
        msg = decode(payload)
        if isinstance(msg, ServiceAck):
            cm.on_service_message(msg, 0)
    to_module.clear()


class _TakenStore(SnapshotStore):
    """The replay's snapshot store, remembering each snapshot it writes: (recording id, position)."""

    def __init__(self, storage: MemoryStorage, catalogue: Catalogue) -> None:
        super().__init__(storage, catalogue)
        self.taken: list[tuple[int, int]] = []

    def write_snapshot(
        self, records: Iterable[bytes], leadership_term_id: int, log_position: int, service_id: int
    ) -> int:
        recording_id = super().write_snapshot(records, leadership_term_id, log_position, service_id)
        self.taken.append((recording_id, log_position))
        return recording_id


class _Restorer:
    """For every snapshot the replay takes, a fresh service restored from it, fed the same log
    messages as the replay from then on (frames it already holds are ignored as duplicates)."""

    def __init__(
        self,
        factory: Callable[[], ClusteredService],
        store: _TakenStore,
        on_restored: Callable[[int, AppliedEntry], None],
        probes: Sequence[int] = (),
    ) -> None:
        self.factory, self.store, self.on_restored = factory, store, on_restored
        self.probes = sorted(p for p in probes if p > 0)  # positions still to pass: a snapshot of our own
        self.join: JoinLog | None = None
        self.blocks: list[bytes] = []  # every LogBlock since the replay joined the log
        self.agents: list[ClusteredServiceAgent] = []
        self.restored = 0

    def follow(self, payload: bytes) -> None:
        msg = decode(payload)
        if isinstance(msg, JoinLog):
            self.join = msg
        elif isinstance(msg, LogBlock):
            self.blocks.append(payload)
        for agent in self.agents:
            if not isinstance(msg, JoinLog):
                agent.on_service_message(payload, is_replay=True)
        self._restore_new()

    def split(self, payload: bytes) -> tuple[bytes, ...]:
        """A LogBlock that crosses the next probe position as two blocks, cut at the first entry
        boundary at or past it (the replay's blocks are large; a probe falls between entries)."""
        if not self.probes or self.join is None:
            return (payload,)
        msg = decode(payload)
        if not isinstance(msg, LogBlock) or not msg.start_position < self.probes[0] < msg.end_position:
            return (payload,)
        cut = next(f.end_position for f in msg.walk().frames if f.end_position >= self.probes[0])
        if cut >= msg.end_position:
            return (payload,)
        at = cut - msg.start_position
        head = replace(msg, entries=msg.entries[:at])
        return (head.encode(), replace(msg, start_position=cut, entries=msg.entries[at:]).encode())

    def probe(self, agent: ClusteredServiceAgent) -> None:
        """A snapshot of the replay's service where it first passes a probe position (after a whole
        block: between entries, where a member may take one), restored like the log's own."""
        if self.probes and self.join is not None and agent.log_position >= self.probes[0]:
            while self.probes and agent.log_position >= self.probes[0]:
                self.probes.pop(0)
            agent.take_snapshot()
            self._restore_new()

    def at_end(self, agent: ClusteredServiceAgent) -> None:
        """One more snapshot, at the end of the log, restored too (a run that took none is still probed)."""
        agent.take_snapshot()
        self._restore_new()

    def _restore_new(self) -> None:
        taken = self.store.taken
        while self.restored < len(taken):
            self._restore(*taken[self.restored])
            self.restored += 1

    def _restore(self, recording_id: int, log_position: int) -> None:
        storage = MemoryStorage(f"restored-{log_position}")
        own = SnapshotStore(storage, Catalogue.open(storage))
        descriptor = self.store.descriptor(recording_id)
        copy = own.write_snapshot(
            self.store.read_snapshot(recording_id), descriptor.leadership_term_id, log_position, 0
        )
        report = self.on_restored
        agent = ClusteredServiceAgent(
            0, 0, self.factory(), lambda _m: None, lambda *_a: None, own, lambda e: report(log_position, e)
        )
        agent.start(copy)
        assert self.join is not None, "a snapshot before the replay joined the log"
        agent.on_join_log(replace(self.join, log_position=log_position))
        for block in self.blocks:
            agent.on_service_message(block, is_replay=True)
        self.agents.append(agent)


def frames_of(entry: bytes, position: int) -> list[Frame]:
    """The frames of one log entry's bytes (a helper for tests and the report)."""
    return walk_frames(entry, position).frames
