"""SimCluster: the real consensus code, N members in one process, on a seeded network and clock.

Nothing here is threaded or timed by the OS: the scheduler jumps the virtual clock to the next
thing that can happen (a message due, or a member's deadline), delivers and runs work at that
instant until nothing more happens, and repeats. Every choice is made in a fixed order (message
sequence, then member id) and every random draw comes from generators derived from ``seed``, so a
seed is a complete recipe for a run: :meth:`SimCluster.repro` prints it and failures include it.

Members keep their durable state (archive, recording log, node state, service snapshots) in a
MemoryStorage each (core/archive/storage.py), wrapped in a FaultyStorage: no directories, no syscalls.
A member's storage outlives its member object, so a killed member restarts from what it wrote (a
process crash keeps written data; :meth:`SimCluster.power_loss` drops what was never synced), and disk
faults are injected through it (:meth:`SimCluster.storage`).

Typical use::

    with SimCluster(members=3, seed=7) as cluster:
        leader = cluster.await_leader(5 * SECOND)
        cluster.kill(leader)
        cluster.await_condition(lambda: cluster.leader_id() not in (None, leader), 5 * SECOND,
                                "a new leader")
"""

from __future__ import annotations

import os
import random
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from clusterlab.core.archive.storage import MemoryStorage
from clusterlab.core.client.client import NEW_LEADER_TIMEOUT_DEFAULT_NS
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.consensus.context import (
    NULL_VALUE,
    SECOND,
    Channel,
    ClusterMember,
    ConsensusModuleContext,
    ConsensusModuleState,
    ElectionState,
    Role,
    Timeouts,
)
from clusterlab.core.consensus.counters import ClusterCounters
from clusterlab.core.consensus.member_driver import MemberDriver, MemberSetup
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.runtime.config import service_process_name
from clusterlab.core.service.addressed import addressed_factory
from clusterlab.harness.services import service_factory
from clusterlab.harness.sim_errors import SimError, SimTimeout
from clusterlab.harness.sim_parts import (
    CLIENT_ID_BASE,
    SimClient,
    SimServiceHost,
    client_network_id,
    parse_client_channel,
)
from clusterlab.harness.simnet import NEVER_NS, Delivery, NetworkConfig, SimNetwork, VirtualClock
from clusterlab.harness.tripwire import Tripwire, watchable

from clusterlab.testing import disk_faults as faults
from clusterlab.testing.buggify import OFF, Buggify
from clusterlab.testing.faulty_storage import FaultyStorage
from clusterlab.testing.intercepts import TestHooks, member_message_template
from clusterlab.testing.mutants import mutant_set, rules_for

# How many rounds of "deliver due messages, run due members" one instant may take before the
# scheduler calls it a livelock. Real work settles in a handful of rounds.
DEFAULT_MAX_ROUNDS_PER_INSTANT = 10_000


_UNKNOWN = -1  # a cached deadline that must be asked for again (deadlines are never negative)


def _deadline_or_never(client: SimClient) -> int:
    d = client.next_deadline_ns()
    return NEVER_NS if d is None else d


def _no_delivery(src: int, channel: Channel, payload: bytes, now_ns: int) -> None:
    raise SimError("delivery to a member that never started")


class ArchiveLike(Protocol):
    """What the simulator needs from a member's archive (core/archive RecordingStore)."""

    @property
    def start_position(self) -> int: ...

    @property
    def stop_position(self) -> int: ...

    def close(self) -> None: ...


class Member(Protocol):
    """The surface SimCluster drives: ConsensusModule's, and any fake with the same shape."""

    @property
    def member_id(self) -> int: ...
    @property
    def role(self) -> Role: ...
    @property
    def leadership_term_id(self) -> int: ...
    @property
    def commit_position(self) -> int: ...
    @property
    def append_position(self) -> int: ...
    @property
    def election_state(self) -> ElectionState | None: ...
    @property
    def state(self) -> ConsensusModuleState: ...
    @property
    def archive(self) -> ArchiveLike: ...
    @property
    def snapshot_count(self) -> int: ...

    def on_start(self, now_ns: int) -> None: ...
    def on_message(self, src_member_id: int, channel: Channel, payload: bytes, now_ns: int) -> None: ...
    def do_work(self, now_ns: int) -> int: ...
    def next_deadline_ns(self) -> int: ...
    def offer(self, payload: bytes, now_ns: int) -> int: ...
    def close(self) -> None: ...


MemberFactory = Callable[[ConsensusModuleContext], Member]


class SimActor(Protocol):
    """A process the run loop drives beside members and clients: work at its deadline, nothing else."""

    def next_deadline_ns(self) -> int: ...
    def do_work(self, now_ns: int) -> bool: ...


def consensus_module_factory(ctx: ConsensusModuleContext) -> Member:
    """The default member: the real ConsensusModule (imported lazily so fakes need no core)."""

    return ConsensusModule(ctx)


class _SimPorts:
    """A member's ports (clusterlab.core.consensus.member_driver) on the simulator: peers and clients
    through the network, stamped with the virtual time; its own services through their hosts' queues
    (same-host IPC, which the network does not carry)."""

    __slots__ = ("_clock", "_network", "member_id", "service_inboxes")

    def __init__(self, member_id: int, clock: VirtualClock, network: SimNetwork) -> None:
        self.member_id = member_id
        self._clock = clock
        self._network = network
        self.service_inboxes: list[Any] = []  # the queue of each of the member's service hosts

    def peers(self, member_id: int, channel: Channel, payload: bytes) -> None:
        self._network.send(self._clock.now_ns, self.member_id, member_id, channel, payload)

    def services(self, payload: bytes) -> None:
        for inbox in self.service_inboxes:
            inbox.append(payload)

    def egress(self, response_channel: str, payload: bytes) -> None:
        client_id = parse_client_channel(response_channel)
        if client_id is not None:
            self._network.send(
                self._clock.now_ns, self.member_id, client_network_id(client_id), Channel.EGRESS, payload
            )


class SimCluster:
    """N members on one SimNetwork and one VirtualClock; see the module docstring.

    ``events`` holds dicts shaped like the trace's events table, with the virtual ``time_ns`` in
    place of wall time: harness events (source ``harness``: start, restart, kill, stop, partition,
    heal, truncate) and whatever members emit through ``ctx.events`` (source ``node-N``). Hooks in
    ``on_event`` and ``network.on_send/on_deliver/on_drop`` are where a recorder attaches."""

    def __init__(
        self,
        members: int = 3,
        seed: int = 0,
        directory: Path | str | None = None,
        timeouts: Timeouts | None = None,
        network: NetworkConfig | None = None,
        appointed_leader_id: int = NULL_VALUE,
        member_factory: MemberFactory | None = None,
        *,
        start_time_ns: int = 0,
        max_rounds_per_instant: int = DEFAULT_MAX_ROUNDS_PER_INSTANT,
        log_lines_kept: int = 10_000,
        service: str | None = None,
        authenticator_factory: Callable[[], Any] | None = None,
        archive_segment_length: int | None = None,
        mutants: frozenset[str] = frozenset(),
        check_invariants: bool = True,
        services: list[str] | None = None,
        tripwire: bool = False,
        buggify: Buggify = OFF,
    ) -> None:
        if members < 1:
            raise ValueError(f"members must be >= 1, got {members}")
        self.seed = seed
        self.member_count = members
        self.mutants = mutant_set(mutants)  # planted bugs (clusterlab.testing.mutants)
        self.check_invariants = check_invariants
        self.tripwire = tripwire  # report what the services' callbacks must not do (clusterlab.harness.tripwire)
        self.buggify = buggify  # seeded fault points in this driver (clusterlab.testing.buggify)
        self._stall_ends: dict[int, int] = {}  # members BUGGIFY stalled -> when they run again
        self.timeouts = timeouts if timeouts is not None else Timeouts.fast()
        self.timeouts.validate()
        self.network_config = network if network is not None else NetworkConfig()
        self.appointed_leader_id = appointed_leader_id
        self.archive_segment_length = archive_segment_length  # None: ConsensusModuleContext's default
        self._factory: MemberFactory = member_factory or consensus_module_factory
        self._max_rounds = max_rounds_per_instant
        # Nothing is written here any more (members run on MemoryStorage); kept for callers and reports.
        self.directory = Path(directory) if directory is not None else None
        self._create_world(members, seed, start_time_ns, log_lines_kept)
        self._create_hosts(members, service, services, authenticator_factory)
        self._drivers: list[MemberDriver | None] = [None] * members
        self._ports: list[_SimPorts | None] = [None] * members
        self._incarnations = [-1] * members
        self._closed = False
        for i in range(members):
            self._start_member(i)

    def _create_world(self, members: int, seed: int, start_time_ns: int, log_lines_kept: int) -> None:
        """The members' disks, the virtual clock, the network and what the run keeps of the members
        (events, log lines, each member's slot, deliverer and deadline)."""
        self._storages = [
            FaultyStorage(MemoryStorage(f"sim-member-{i}"), random.Random(f"{seed}:disk:{i}")) for i in range(members)
        ]

        self.clock = VirtualClock(start_time_ns)
        self.network = SimNetwork(random.Random(f"{seed}:network"), self.network_config)
        self.cluster_members = [
            ClusterMember(
                i,
                ingress_endpoint=f"sim-member:{i}",
                consensus_endpoint=f"sim-member:{i}/consensus",
                log_endpoint=f"sim-member:{i}/log",
                catchup_endpoint=f"sim-member:{i}/catchup",
                archive_endpoint=f"sim-member:{i}/archive",
            )
            for i in range(members)
        ]
        self.events: list[dict[str, Any]] = []
        self.on_event: list[Callable[[dict[str, Any]], None]] = []  # recorder attaches here
        self.log_lines: deque[tuple[int, int, str]] = deque(maxlen=log_lines_kept)  # (now_ns, member, line)
        self.undeliverable = 0  # messages addressed to an id that is not a member
        self._members: list[Member | None] = [None] * members
        # Each member's "deliver one message, then run its duty cycle" (one input: MemberDriver.deliver).
        self._deliverers: list[Callable[[int, Channel, bytes, int], object]] = [_no_delivery] * members
        self._deadlines: list[int | None] = [None] * members  # see _forget_deadlines
        self._last_counters: dict[int, ClusterCounters] = {}  # a down member's counters at its end

    def _create_hosts(
        self,
        members: int,
        service: str | None,
        services: list[str] | None,
        authenticator_factory: Callable[[], Any] | None,
    ) -> None:
        """The members' service hosts, the clients and other actors, and the hooks a recorder attaches to."""
        # ``services``: several clustered services per member (service ids 0..N-1, see
        # clusterlab.core.service.addressed); ``service`` alone: one. ``service_name`` is service 0's.
        self.service_names: list[str] = list(services) if services else ([service] if service else [])
        self.service_name = self.service_names[0] if self.service_names else None
        self._authenticator_factory = authenticator_factory
        self._service_hosts: list[list[SimServiceHost]] = [[] for _ in range(members)]
        self._services: list[SimServiceHost | None] = [None] * members  # service 0's host of each member
        self.clients: list[SimClient] = []
        self._replies_lost: list[int] = []  # clients whose egress lose_replies drops
        self._ingress_duplicated = False  # duplicate_ingress: every client's ingress arrives twice
        # Paused members (a SIGSTOPped node and its services): member -> what arrived for it meanwhile.
        self._paused: dict[int, list[Delivery]] = {}
        self._client_deadlines: list[int] = []  # cached like _deadlines; _UNKNOWN: ask the client
        # Other processes the run loop drives beside members and clients (a ClusterBackup: sim_backup).
        self.actors: list[SimActor] = []
        # Copies of member storages taken before a restore from a backup replaced them: the recorder reads
        # the committed log's start from them when the restored log starts at a snapshot.
        self.retired_storages: list[MemoryStorage] = []
        self.applied: list[dict[str, Any]] = []  # the trace's `applied` rows (member, incarnation, entry)
        self.on_applied: list[Callable[[dict[str, Any]], None]] = []  # recorder attaches here: each new row
        self.on_member_start: list[Callable[[int], None]] = []  # and here: a member (re)started, services up

    # ----------------------------------------------------------------------------- accessors

    @property
    def now_ns(self) -> int:
        return self.clock.now_ns

    def member(self, member_id: int) -> Member:
        """The running member object; raises SimError if that member is down."""
        m = self._members[member_id]
        if m is None:
            raise SimError(f"member {member_id} is not running")
        return m

    def is_alive(self, member_id: int) -> bool:
        return self._members[member_id] is not None

    def members_alive(self) -> list[int]:
        return [i for i, m in enumerate(self._members) if m is not None]

    def incarnation(self, member_id: int) -> int:
        return self._incarnations[member_id]

    def storage(self, member_id: int) -> FaultyStorage:
        """The member's storage (a FaultyStorage over its MemoryStorage): outlives incarnations; inject
        disk faults here (``fail_writes``) or damage it while the member is down (clusterlab/testing/disk_faults.py)."""
        return self._storages[member_id]

    def memory_storage(self, member_id: int) -> MemoryStorage:
        """The MemoryStorage under the member's fault wrapper."""
        inner = self._storages[member_id].inner
        assert isinstance(inner, MemoryStorage)
        return inner

    def message_digest(self) -> str:
        return self.network.digest

    def leader_id(self) -> int | None:
        """The settled leader: a live, running (not paused) member with role LEADER and no election
        running, whose term is the highest term among live members, and the only such leader in that term."""
        # One pass (it is asked before every offer and in most await predicates): the top term so far
        # and the settled leaders in it.
        top_term = -(1 << 63)
        leaders: list[Member] = []
        paused = self._paused
        for i, m in enumerate(self._members):
            if m is None or (paused and i in paused):
                continue
            term = m.leadership_term_id
            if term > top_term:
                top_term = term
                leaders = []
            if term == top_term and m.role == Role.LEADER and m.election_state is None:
                leaders.append(m)
        return leaders[0].member_id if len(leaders) == 1 else None

    def election_states_entered(self) -> set[ElectionState]:
        """Every ElectionState some member transitioned into (from ``election_state`` events)."""
        entered: set[ElectionState] = set()
        for e in self.events:
            if e["kind"] == "election_state":
                to = e["detail"].get("to")
                entered.add(ElectionState[to] if isinstance(to, str) else ElectionState(to))
        return entered

    def repro(self) -> str:
        """How to re-create this run: the constructor call (and the test, when under pytest)."""
        factory = getattr(self._factory, "__qualname__", repr(self._factory))
        call = (
            f"SimCluster(members={self.member_count}, seed={self.seed}, timeouts={self.timeouts!r}, "
            f"network={self.network_config!r}, appointed_leader_id={self.appointed_leader_id}, "
            f"member_factory={factory})"
        )
        test = os.environ.get("PYTEST_CURRENT_TEST")
        if test:
            call += f"; test: pytest '{test.rsplit(' ', 1)[0]}'"
        return call

    # ----------------------------------------------------------------------------- scheduler

    def next_event_ns(self) -> int:
        """The next instant something can happen: a delivery or a member deadline (NEVER_NS if none)."""
        self._forget_deadlines()
        return self._next_event_ns()

    def _next_event_ns(self) -> int:
        t = self.network.next_delivery_ns()
        if self._stall_ends:
            t = min(t, min(self._stall_ends.values()))
        deadlines = self._deadlines
        paused = self._paused
        for i, m in enumerate(self._members):
            if m is not None and not (paused and i in paused):
                d = deadlines[i]
                if d is None:
                    d = deadlines[i] = m.next_deadline_ns()
                if d < t:
                    t = d
        client_deadlines = self._client_deadlines
        for k, c in enumerate(self.clients):
            d = client_deadlines[k]
            if d == _UNKNOWN:
                d = client_deadlines[k] = _deadline_or_never(c)
            if d < t:
                t = d
        for a in self.actors:
            d = a.next_deadline_ns()
            if d < t:
                t = d
        return t

    def _forget_deadlines(self) -> None:
        """Members' deadlines are cached between calls into them (a deadline is a function of a member's
        state, which only our calls change); anything outside the run loop may have called in."""
        self._deadlines = [None] * self.member_count
        self._client_deadlines = [_UNKNOWN] * len(self.clients)

    def step(self) -> bool:
        """Advance to the next instant with work and settle it. Returns False when nothing at all is
        scheduled (the clock does not move)."""
        t = self.next_event_ns()
        if t >= NEVER_NS:
            return False
        self._step_to(t)
        return True

    def _step_to(self, t: int) -> None:
        now = self.clock.now_ns
        self.clock.advance_to(t if t > now else now)  # a deadline in the past means "now"
        try:
            self._settle()
        except SimError:
            raise  # already carries the seed
        except Exception as e:
            # A member crashed: make the failure reproducible from its report alone.
            e.add_note(f"in SimCluster at t={self.clock.now_ns} ns; seed={self.seed} re-run: {self.repro()}")
            raise

    def _settle(self) -> None:
        """Run the current instant to a fixed point: deliver what is due (on_message then do_work on
        the receiver), then do_work on every member whose deadline has come, in member-id order;
        repeat while anything happened, so zero-latency chains complete within the instant."""
        now = self.clock.now_ns
        members = self._members
        network = self.network
        deadlines = self._deadlines
        paused = self._paused
        buggify = self.buggify
        for _ in range(self._max_rounds):
            busy = False
            if self._stall_ends:
                busy = self._end_stalls(now)
            if network.next_delivery_ns() <= now:
                for msg in network.pop_due(now):
                    self._deliver(msg, now)
                busy = True
            for i, m in enumerate(members):
                if m is None or (paused and i in paused):
                    continue
                d = deadlines[i]
                if d is None:
                    d = deadlines[i] = m.next_deadline_ns()
                if d <= now:
                    if buggify.on and buggify("member-stall"):
                        self._stall(i, now)
                        continue
                    m.do_work(now)
                    deadlines[i] = None
                    busy = True
            if self._pump_services(now):
                busy = True
            client_deadlines = self._client_deadlines
            for k, c in enumerate(self.clients):
                d = client_deadlines[k]
                if d == _UNKNOWN:
                    d = client_deadlines[k] = _deadline_or_never(c)
                if d <= now:
                    c.do_work(now)
                    d = client_deadlines[k] = _deadline_or_never(c)
                    busy = busy or d <= now
            for a in self.actors:
                if a.next_deadline_ns() <= now and a.do_work(now):
                    busy = True
            if not busy:
                return
        self._raise_livelock(now)

    def _pump_services(self, now: int) -> bool:
        busy = False
        paused = self._paused
        buggify = self.buggify
        for i, hosts in enumerate(self._service_hosts):
            if paused and i in paused:
                continue  # its services stop with it
            if buggify.on and hosts and buggify("service-lag"):
                continue  # they catch up at the next instant anything happens
            for host in hosts:
                # Most rounds bring a service nothing and it sends nothing: two cheap queue tests.
                if host.from_node and host.pump():
                    busy = True
                if host.outgoing:
                    m = self._members[i]
                    while host.to_node and m is not None:
                        self._deliverers[i](i, Channel.SERVICE, host.to_node.popleft(), now)
                        self._deadlines[i] = None
                        busy = True
                if host.closed_reason is not None:
                    self._close_service(i, host.closed_reason)  # any service gone: its member closes (Aeron)
                    self._deadlines[i] = None
                    busy = True
                    break
        return busy

    def _deliver(self, msg: Delivery, now: int) -> None:
        dst = msg.dst
        if dst <= CLIENT_ID_BASE:
            client_id = CLIENT_ID_BASE - dst
            if client_id < len(self.clients):
                self.clients[client_id].on_egress(msg.payload, now)
                self._client_deadlines[client_id] = _UNKNOWN
            return
        m = self._members[dst] if 0 <= dst < self.member_count else None
        if m is None:
            # Dead destinations are dropped by the network (mark_down); this is an id with no member.
            self.undeliverable += 1
            return
        held = self._paused.get(dst) if self._paused else None
        if held is not None:
            held.append(msg)  # waits in its socket until the member runs again
            return
        self._deliverers[dst](msg.src, msg.channel, msg.payload, now)
        self._deadlines[dst] = None

    def _stall(self, member_id: int, now: int) -> None:
        """BUGGIFY ``member-stall``: pause the member for up to half an election timeout."""
        self._paused.setdefault(member_id, [])
        self._harness_event("pause", member_id, buggify="member-stall")
        self._stall_ends[member_id] = now + self.buggify.uniform_ns(1, self.timeouts.election_timeout_ns // 2)

    def _end_stalls(self, now: int) -> bool:
        due = [i for i, end in self._stall_ends.items() if end <= now]
        for i in due:
            del self._stall_ends[i]
            self.resume(i)
        return bool(due)

    def _raise_livelock(self, now: int) -> None:
        stuck = [
            f"member {m.member_id} (incarnation {self._incarnations[m.member_id]}, deadline {m.next_deadline_ns()})"
            for m in self._members
            if m is not None and m.next_deadline_ns() <= now
        ]
        due = [msg.describe() for msg in self.network.in_flight() if msg.deliver_ns <= now][:5]
        culprits = "; ".join(stuck) or "no member (messages keep arriving at this instant)"
        raise SimError(
            f"livelock at t={now} ns: still busy after {self._max_rounds} rounds at one instant; "
            f"deadline <= now: {culprits}; due messages: {due}; seed={self.seed} re-run: {self.repro()}"
        )

    def run_for(self, duration_ns: int) -> None:
        """Run every instant in (now, now + duration_ns]; the clock ends exactly at now + duration."""
        self.run_until_time(self.clock.now_ns + duration_ns)

    def run_until_time(self, end_ns: int) -> None:
        self._forget_deadlines()
        while (t := self._next_event_ns()) <= end_ns:
            self._step_to(t)
        if end_ns > self.clock.now_ns:
            self.clock.advance_to(end_ns)

    def run_until(self, predicate: Callable[[], bool], timeout_ns: int) -> bool:
        """Step until ``predicate()`` holds (checked now and after every instant) or ``timeout_ns``
        of simulated time passes. Returns whether it held."""
        if predicate():
            return True
        end_ns = self.clock.now_ns + timeout_ns
        self._forget_deadlines()
        while (t := self._next_event_ns()) <= end_ns:
            self._step_to(t)
            if predicate():
                return True
            self._forget_deadlines()  # the predicate may have called into a member
        if end_ns > self.clock.now_ns:
            self.clock.advance_to(end_ns)
        return predicate()

    def await_condition(self, predicate: Callable[[], bool], timeout_ns: int, what: str) -> None:
        """run_until, raising SimTimeout (with the seed and how to re-run) when it does not hold."""
        start_ns = self.clock.now_ns
        if not self.run_until(predicate, timeout_ns):
            raise SimTimeout(
                f"{what} not reached within {timeout_ns / SECOND:.3f}s simulated "
                f"(from t={start_ns} to t={self.clock.now_ns} ns); {self.status_line()}; "
                f"seed={self.seed} re-run: {self.repro()}"
            )

    def await_leader(self, timeout_ns: int = 10 * SECOND) -> int:
        """Wait for a settled leader (see leader_id) and return its id."""
        found: list[int] = []

        def has_leader() -> bool:
            leader = self.leader_id()
            if leader is None:
                return False
            found[:] = [leader]
            return True

        self.await_condition(has_leader, timeout_ns, "a leader")
        return found[0]

    def status_line(self) -> str:
        """One line per member: role, term, election state, positions (for failure messages)."""
        parts = []
        for i, m in enumerate(self._members):
            if m is None:
                parts.append(f"{i}:down")
                continue
            es = m.election_state
            parts.append(
                f"{i}:{m.role.name} term={m.leadership_term_id} "
                f"election={es.name if es is not None else '-'} "
                f"append={m.append_position} commit={m.commit_position}"
            )
        return "members [" + ", ".join(parts) + "]"

    # ----------------------------------------------------------------------------- lifecycle

    def _start_member(self, member_id: int, wiped: bool = False) -> None:
        self._incarnations[member_id] += 1
        incarnation = self._incarnations[member_id]
        storage = self._storages[member_id]
        ports = _SimPorts(member_id, self.clock, self.network)
        setup = MemberSetup(
            member_id=member_id,
            members=list(self.cluster_members),
            # A name only (nothing is written there): the member's state lives in ``storage``.
            cluster_dir=(self.directory or Path("sim")) / f"member-{member_id}",
            storage=storage,
            seed=self.seed,
            incarnation=incarnation,
            timeouts=self.timeouts,
            appointed_leader_id=self.appointed_leader_id,
            events=self._member_event_sink(member_id, incarnation),
            log=self._member_log(member_id),
            service_count=len(self.service_names),
            authenticator=self._authenticator_factory() if self._authenticator_factory else None,
            check_invariants=self.check_invariants,  # every subsystem asserts its invariants after each input
            archive_segment_length=self.archive_segment_length,
            rules=rules_for(self.mutants),
            intercepts=TestHooks(),  # armed by stall_election, fail_catchup, fail_request_vote, ...
        )
        driver = MemberDriver(
            setup, peers=ports.peers, services=ports.services, egress=ports.egress, factory=self._factory
        )
        member: Member = driver.module
        self._members[member_id] = member
        self._deliverers[member_id] = driver.deliver
        self._drivers[member_id] = driver
        self._ports[member_id] = ports
        self.network.mark_up(member_id)
        detail: dict[str, Any] = {"incarnation": incarnation}
        if wiped:
            detail["wiped"] = True
        self._harness_event("start" if incarnation == 0 else "restart", member_id, **detail)
        member.on_start(self.clock.now_ns)
        hosts = []
        for service_id, name in enumerate(self.service_names):
            host = SimServiceHost(
                member_id,
                storage,
                addressed_factory(service_factory(name), service_id, len(self.service_names)),
                driver.send_egress,
                self._applied_sink(member_id, incarnation, service_id),
                self._member_log(member_id),
                service_id,
                self._tripwire_factory(member_id, service_id) if self.tripwire and watchable(name) else None,
            )
            ports.service_inboxes.append(host.from_node)
            hosts.append(host)
        self._service_hosts[member_id] = hosts
        self._services[member_id] = hosts[0] if hosts else None
        for hook in self.on_member_start:
            hook(member_id)

    def _tripwire_factory(self, member_id: int, service_id: int) -> Callable[[Any], Tripwire]:
        """Makes the tripwire of a member's service: its findings become ``tripwire`` events."""
        source = service_process_name(member_id, service_id)

        def report(log_position: int, detail: dict[str, Any]) -> None:
            self._emit(
                {
                    "time_ns": self.clock.now_ns,
                    "source": source,
                    "member_id": member_id,
                    "kind": "tripwire",
                    "leadership_term_id": None,
                    "log_position": log_position,
                    "detail": detail,
                }
            )

        return lambda service: Tripwire(member_id, service_id, service.state_digest, report)

    def _take_down(self, member_id: int) -> Member:
        member = self.member(member_id)
        if isinstance(member, ConsensusModule):  # its counters outlive it (Aeron's CnC file)
            self._last_counters[member_id] = member.counters(self.clock.now_ns)
        self._members[member_id] = None
        self._paused.pop(member_id, None)  # a stopped process dies too; what waited for it is lost
        self._stall_ends.pop(member_id, None)
        self._services[member_id] = None  # the service processes die with their node
        self._service_hosts[member_id] = []
        driver = self._drivers[member_id]
        if driver is not None:
            driver.disconnect()  # a stale object someone still holds cannot send
        self._drivers[member_id] = None
        self._ports[member_id] = None
        # A dead process receives nothing: what is in flight to it is lost, and so is what is sent
        # to it until it restarts. What it already sent is on the wire and still arrives.
        self.network.mark_down(member_id, self.clock.now_ns)
        return member

    def kill(self, member_id: int) -> None:
        """Crash: drop the object without closing it. What it wrote stays in its storage (the stores
        write unbuffered, as to the OS); only :meth:`power_loss` loses unsynced data."""
        # No close code runs (a crash does not refresh the catalogue or sync), and a MemoryStorage holds
        # no file descriptors to release: the object is simply dropped.
        self._take_down(member_id)
        self._harness_event("kill", member_id)

    def stop(self, member_id: int) -> None:
        """Clean shutdown: close the member (flushes its files), then its service containers (an
        active service is told ``on_terminate``, Aeron ``TestNode.close``), then take it down."""
        member = self.member(member_id)
        try:
            member.close()  # while its driver still sends: a clean close may still send
        finally:
            try:
                self._close_service_hosts(member_id)
            finally:
                self._take_down(member_id)
        self._harness_event("stop", member_id)

    def restart(self, member_id: int) -> None:
        """Start a new incarnation from the member's directory; a running member is killed first."""
        if self.is_alive(member_id):
            self.kill(member_id)
        self._start_member(member_id)

    def restart_wiped(self, member_id: int) -> None:
        """Restart with an empty storage (a replaced disk, its faults cleared); a running member is
        killed first."""
        if self.is_alive(member_id):
            self.kill(member_id)
        self._storages[member_id].clear()
        self.memory_storage(member_id).wipe()
        self._start_member(member_id, wiped=True)

    def power_loss(self, member_id: int) -> list[str]:
        """Kill the member and drop everything its storage holds that was never synced (a power cut
        rather than a process crash). Returns the storage paths that lost data; restart it after."""
        if self.is_alive(member_id):
            self.kill(member_id)
        lost = self.memory_storage(member_id).power_loss()
        self._harness_event("power_loss", member_id, lost=lost)
        return lost

    def truncate_recording(self, member_id: int, position: int) -> None:
        """Cut the member's log recording back to ``position`` (a lost disk tail). Only while the
        member is down: a running archive would not notice its files changing."""
        if self.is_alive(member_id):
            raise SimError(f"truncate_recording({member_id}): member is running; kill or stop it first")
        faults.truncate_at(self._storages[member_id], position)
        self._harness_event("truncate", member_id, log_position=position)

    def add_client(
        self,
        credentials: bytes = b"",
        keepalive_interval_ns: int | None = 1_000_000_000,
        first_member: int = 0,
        new_leader_timeout_ns: int | None = None,
    ) -> SimClient:
        """A new client process; call ``.client.connect(cluster.now_ns)`` (or use ``connect_client``).
        ``first_member``: the member it asks first (a follower redirects it to the leader). Its ingress
        to a member with no running process counts as not connected; ``new_leader_timeout_ns`` (None:
        the ClusterClient's default) is how long it then waits for a new leader before it closes."""
        client = SimClient(
            len(self.clients),
            self.member_count,
            self._client_send,
            credentials=credentials,
            keepalive_interval_ns=keepalive_interval_ns,
            first_member=first_member,
            new_leader_timeout_ns=new_leader_timeout_ns or NEW_LEADER_TIMEOUT_DEFAULT_NS,
        )
        self.clients.append(client)
        self._client_deadlines.append(_UNKNOWN)
        if self._ingress_duplicated:
            self._duplicate_links(client.network_id, True)
        return client

    def _client_send(self, src: int, dst: int, channel: Channel, payload: bytes) -> bool:
        """A client's message onto the network; False when ``dst`` has no running process (a member
        down: its client sockets are gone, as in the runtime; a paused member still counts as there)."""
        self.network.send(self.clock.now_ns, src, dst, channel, payload)
        return 0 <= dst < self.member_count and self._members[dst] is not None

    def connect_client(self, credentials: bytes = b"", timeout_ns: int = 10 * SECOND) -> SimClient:
        """Add a client and wait until its session is open."""
        client = self.add_client(credentials)
        client.client.connect(self.clock.now_ns)
        self.await_condition(lambda: client.client.is_connected or bool(client.errors), timeout_ns, "client connected")
        if client.errors:
            raise client.errors[0]
        return client

    def service(self, member_id: int, service_id: int = 0) -> Any:
        """The agent (ClusteredServiceAgent) of the member's service ``service_id``."""
        hosts = self._service_hosts[member_id]
        if not hosts:
            raise SimError(f"member {member_id} runs no service (down, or the cluster has none)")
        if not 0 <= service_id < len(hosts):
            raise SimError(f"member {member_id} has no service {service_id} (services 0..{len(hosts) - 1})")
        return hosts[service_id].agent

    def service_hosts(self, member_id: int) -> list[SimServiceHost]:
        """The member's service hosts, by service id (empty while it is down)."""
        return list(self._service_hosts[member_id])

    def _applied_sink(self, member_id: int, incarnation: int, service_id: int = 0) -> Callable[[Any], None]:
        def sink(entry: Any) -> None:
            row = {"member_id": member_id, "incarnation": incarnation, "entry": entry, "time_ns": self.clock.now_ns}
            if service_id:
                row["service_id"] = service_id  # absent for service 0: rows as with one service
            self.applied.append(row)
            for hook in self.on_applied:
                hook(row)

        return sink

    def control(self, target: str) -> bool:
        """Cluster control through the leader's toggle (ClusterTool): ``snapshot``, ``suspend``,
        ``resume``, ``shutdown`` or ``abort``. False if there is no leader or the toggle is busy."""

        leader = self.leader_id()
        if leader is None:
            return False
        ok = self.member(leader).toggle_control(ToggleState[target.upper()])  # type: ignore[attr-defined]
        self._harness_event("control", leader, action=target, accepted=ok)
        return bool(ok)

    # ----------------------------------------------------------------------------- counters and test hooks
    def counters(self, member_id: int) -> ClusterCounters:
        """The member's consensus-module counters (Aeron's CnC counters); a down member's last values,
        as Aeron's CnC file keeps them after the process stops."""
        m = self._members[member_id]
        if m is None:
            last = self._last_counters.get(member_id)
            if last is None:
                raise SimError(f"member {member_id} never ran, so it has no counters")
            return last
        assert isinstance(m, ConsensusModule)
        return m.counters(self.clock.now_ns)

    def _hooks(self, member_id: int) -> TestHooks:
        m = self.member(member_id)
        assert isinstance(m, ConsensusModule)
        assert isinstance(m.intercepts, TestHooks)
        return m.intercepts

    def stall_election(
        self, member_id: int, state: ElectionState | None, duration_ns: int = 0, leadership_term_id: int | None = None
    ) -> None:
        """Test hook: the member stops once its election enters ``state`` (None: carry on), until
        cleared or, with ``duration_ns``, for that long once; only in ``leadership_term_id`` if given."""
        hooks = self._hooks(member_id)
        hooks.clear()
        hooks.stall_election_state = state
        hooks.stall_duration_ns = duration_ns
        hooks.stall_leadership_term_id = leadership_term_id
        self._harness_event(
            "test_hook", member_id, hook="stall_election", state=state.name if state else None, duration_ns=duration_ns
        )

    def fail_catchup(self, member_id: int, count: int = 1) -> None:
        """Test hook: the member's next ``count`` catch-ups fail inside FOLLOWER_CATCHUP."""
        self._hooks(member_id).fail_catchup = count
        self._harness_event("test_hook", member_id, hook="fail_catchup", count=count)

    def fail_request_vote(self, member_id: int, candidate_term_id: int | None) -> None:
        """Test hook: the member's handling of other candidates' RequestVote for ``candidate_term_id``
        fails (a counted error, no vote); None clears it."""
        self._hooks(member_id).fail_request_vote_term = candidate_term_id
        self._harness_event("test_hook", member_id, hook="fail_request_vote", candidate_term_id=candidate_term_id)

    def delay_service_message(self, member_id: int, delay_ns: int) -> None:
        """Test hook: the member's service gets its next message ``delay_ns`` late (the rest behind it)."""
        self._hooks(member_id).delay_service_message_ns = delay_ns
        self._harness_event("test_hook", member_id, hook="delay_service_message", delay_ns=delay_ns)

    def delay_member_messages(self, member_id: int, message: str, delay_ns: int, duplicate: bool = False) -> None:
        """Test hook: every ``message`` (``Vote``, ``AppendPosition``...) the member sends to another member
        is held ``delay_ns`` (later messages overtake it), or with ``duplicate`` sent at once and again
        ``delay_ns`` later; ``delay_ns`` 0 removes the rule (what is held still goes when due)."""
        template_id = member_message_template(message)
        delays = self._hooks(member_id).member_message_delays
        if delay_ns > 0:
            delays[template_id] = (delay_ns, duplicate)
        else:
            delays.pop(template_id, None)
        self._harness_event(
            "test_hook",
            member_id,
            hook="delay_member_messages",
            message=message,
            delay_ns=delay_ns,
            duplicate=duplicate,
        )

    def stop_log_recording(self, member_id: int) -> int:
        """Test fault: the member's archive stops its log recording where it ends (Aeron's test calls
        ``tryStopRecordingByIdentity`` on the leader's archive); its consensus module takes the stop as
        an input at once. Returns the position the recording stopped at."""
        m = self.member(member_id)
        assert isinstance(m, ConsensusModule)
        position = m.archive.stop_position
        m.on_log_recording_stopped(position, self.clock.now_ns)
        self._forget_deadlines()
        self._harness_event("test_hook", member_id, hook="stop_log_recording", log_position=position)
        return position

    def stop_service(self, member_id: int) -> None:
        """Close the member's service container (Aeron ``TestNode.container().close()``): an active
        service is told ``on_terminate``, its consensus module closes with a counted error and the
        member terminates."""
        self._close_service(member_id, "the service container closed")

    def _close_service(self, member_id: int, reason: str) -> None:
        self._close_service_hosts(member_id)  # every service of the member: it closes
        m = self._members[member_id]
        if isinstance(m, ConsensusModule):
            m.on_service_closed(reason, self.clock.now_ns)
        self._harness_event("service_closed", member_id, reason=reason)

    def _close_service_hosts(self, member_id: int) -> None:
        """The member's service processes stop gracefully (each agent's close: an active service is
        told ``on_terminate`` once, errors swallowed) and are gone."""
        hosts = self._service_hosts[member_id]
        self._services[member_id] = None
        self._service_hosts[member_id] = []
        for host in hosts:
            host.close()

    def purge_log_to_last_snapshot(self) -> dict[int, int]:
        """Aeron TestCluster.purgeLogToLastSnapshot: every live member deletes its log segments below its
        latest snapshot. Returns member -> new log start position."""
        starts = {}
        for member_id in self.members_alive():
            m = self.member(member_id)
            assert isinstance(m, ConsensusModule)
            starts[member_id] = m.purge_log_to_last_snapshot()
        self._harness_event("purge_segments", -1, starts=starts)
        return starts

    def clear_hooks(self, member_id: int) -> None:
        """Remove the member's test hooks."""
        self._hooks(member_id).clear()
        self._harness_event("test_hook", member_id, hook="clear")

    def offer(self, payload: bytes) -> int:
        """Append through the current leader: its end log position, or -1 (no leader, back-pressure)."""
        leader = self.leader_id()
        if leader is None:
            return -1
        return self.member(leader).offer(payload, self.clock.now_ns)

    def offer_batch(self, payloads: list[bytes]) -> int:
        """Append several messages through the current leader in one write (as its duty cycle appends
        the ingress it took): the end log position of the last, or -1 (no leader, back-pressure)."""
        leader = self.leader_id()
        if leader is None:
            return -1
        m = self.member(leader)
        if isinstance(m, ConsensusModule):
            return m.offer_batch(payloads, self.clock.now_ns)
        position = -1
        for payload in payloads:  # a member fake: one offer at a time
            position = m.offer(payload, self.clock.now_ns)
        return position

    # ----------------------------------------------------------------------------- network faults

    def partition(self, groups: Iterable[Iterable[int]]) -> None:
        """Members talk only within their group; members in no group are isolated."""
        self.network.partition(groups)
        self._harness_event("partition", -1, groups=self.network.partition_groups)

    def isolate(self, member_id: int) -> None:
        self.network.isolate(member_id)
        self._harness_event("partition", member_id, isolate=member_id)

    def pause(self, member_id: int) -> None:
        """Stop the member and its services (SIGSTOP: a GC pause, a stalled VM): no timers, no work;
        what arrives for it waits, in order, until :meth:`resume`. It keeps its state and its clock
        jumps on resume, as a stopped process's does."""
        if not self.is_alive(member_id):
            raise SimError(f"member {member_id} is not running, so it cannot be paused")
        self._stall_ends.pop(member_id, None)  # a pause asked for now outlasts a BUGGIFY stall
        self._paused.setdefault(member_id, [])
        self._harness_event("pause", member_id)

    def is_paused(self, member_id: int) -> bool:
        """The member is stopped (:meth:`pause`, or a BUGGIFY stall): it answers nothing until resumed."""
        return member_id in self._paused

    def resume(self, member_id: int) -> None:
        """Let a paused member run again: first what arrived for it meanwhile, then its overdue work."""
        held = self._paused.pop(member_id, None)
        self._stall_ends.pop(member_id, None)
        self._harness_event("resume", member_id)
        if held is None or not self.is_alive(member_id):
            return
        now = self.clock.now_ns
        for msg in held:
            self._deliver(msg, now)
        self._forget_deadlines()

    def lose_replies(self, lost: bool) -> list[int]:
        """Drop (``lost``) or stop dropping every egress message from the members to the clients that
        exist now (their requests still arrive); returns those clients' ids."""
        clients = sorted(int(c.client_id) for c in self.clients) if lost else self._replies_lost
        for client_id in clients:
            for member_id in range(self.member_count):
                if lost:
                    self.network.block(member_id, client_network_id(client_id))
                else:
                    self.network.unblock(member_id, client_network_id(client_id))
        self._replies_lost = clients if lost else []
        self._harness_event("replies_lost" if lost else "replies_restored", -1, clients=clients)
        return clients

    def duplicate_ingress(self, duplicated: bool) -> list[int]:
        """Deliver (``duplicated``) or stop delivering every ingress message from the clients to the members
        twice, the copy 1-20 ms after the original (SimNetwork.duplicate_link); clients added meanwhile are
        duplicated too. Returns the ids of the clients that exist now."""
        self._ingress_duplicated = duplicated
        for c in self.clients:
            self._duplicate_links(c.network_id, duplicated)
        clients = sorted(int(c.client_id) for c in self.clients)
        self._harness_event("ingress_duplicated" if duplicated else "ingress_restored", -1, clients=clients)
        return clients

    def _duplicate_links(self, network_id: int, duplicated: bool) -> None:
        for member_id in range(self.member_count):
            if duplicated:
                self.network.duplicate_link(network_id, member_id)
            else:
                self.network.duplicate_link(network_id, member_id, None)

    def block(self, src: int, dst: int) -> None:
        """Drop src -> dst only."""
        self.network.block(src, dst)
        self._harness_event("partition", -1, block=[src, dst])

    def unblock(self, src: int, dst: int) -> None:
        self.network.unblock(src, dst)
        self._harness_event("heal", -1, unblock=[src, dst])

    def set_link(
        self,
        src: int,
        dst: int,
        *,
        loss: float | None = None,
        latency_ns: int | tuple[int, int] | None = None,
    ) -> None:
        self.network.set_link(src, dst, loss=loss, latency_ns=latency_ns)
        self._harness_event("partition", -1, link=[src, dst], loss=loss, latency_ns=latency_ns)

    def heal(self) -> None:
        self.network.heal()
        self._harness_event("heal", -1)

    # ----------------------------------------------------------------------------- events

    def _emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        for hook in self.on_event:
            hook(event)

    def event(self, kind: str, member_id: int, **detail: Any) -> None:
        """Record a harness event (chaos nemeses record themselves here; source ``harness``)."""
        self._harness_event(kind, member_id, **detail)

    def _harness_event(self, kind: str, member_id: int, log_position: int | None = None, **detail: Any) -> None:
        self._emit(
            {
                "time_ns": self.clock.now_ns,
                "source": "harness",
                "member_id": member_id,
                "kind": kind,
                "leadership_term_id": None,
                "log_position": log_position,
                "detail": detail,
            }
        )

    def _member_event_sink(
        self, member_id: int, incarnation: int
    ) -> Callable[[str, int, int | None, int | None, dict[str, Any]], None]:
        source = f"node-{member_id}"
        clock = self.clock

        def sink(kind: str, subject: int, term: int | None, pos: int | None, detail: dict[str, Any]) -> None:
            self._emit(
                {
                    "time_ns": clock.now_ns,
                    "source": source,
                    "incarnation": incarnation,
                    "member_id": subject,
                    "kind": kind,
                    "leadership_term_id": term,
                    "log_position": pos,
                    "detail": detail,
                }
            )

        return sink

    def _member_log(self, member_id: int) -> Callable[[str], None]:
        lines = self.log_lines
        clock = self.clock

        def log(line: str) -> None:
            lines.append((clock.now_ns, member_id, line))

        return log

    # ----------------------------------------------------------------------------- teardown

    def close(self) -> None:
        """Close every running member cleanly. Idempotent. The members' storages stay readable
        (:meth:`storage`) after close, for the recorder and for inspection."""
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        for i, m in enumerate(self._members):
            if m is None:
                continue
            try:
                self.stop(i)
            except Exception as e:  # close the others anyway, then report
                errors.append(e)
        if errors:
            raise errors[0]

    def __enter__(self) -> SimCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
