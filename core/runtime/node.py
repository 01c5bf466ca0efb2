"""The node process of one member: its ConsensusModule (with its archive) on ZeroMQ sockets.

    python -m clusterlab.core.runtime.node --dir CLUSTER_DIR --member-id I [--incarnation N]

reads ``CLUSTER_DIR/cluster.json`` (clusterlab.core.runtime.config) and serves until SIGTERM (clean close,
exit 0), until the cluster terminates it (SHUTDOWN/ABORT, exit 0), or until its service process
goes away or fails to start (exit 3: a member is its node and its service together, fail-stop as in
Aeron, where the consensus module terminates when its service stops heart-beating, and closes with
"failed to start clustered service(s)" when a service's recovery ack carries no client id; the error
is counted in either case).

Sockets (see clusterlab.core.runtime.transport for framing):

    bound    ingress (PULL)       clients -> leader: connect, messages, keep-alives, admin
             consensus, log, catchup, archive (ROUTER)   peers -> this member, one socket per channel
             from-service (ROUTER)  this member's service -> its consensus module (lossless)
             control (ROUTER)     harness/tools: status, gate rules, clock offset, cluster control,
                                  a ClusterBackup's queries and reads (clusterlab.core.runtime.backup)
    connect  per peer and channel (DEALER ``node-<i>``, immediate: a down peer drops, like UDP)
             to-service (DEALER ``node-<i>``, unbounded: the service must see the committed log)
             egress (PUSH per client response channel, lazily, LRU-cached)

A member in one process (clusterlab.core.runtime.member) builds its Node with an InProcessChannel:
the to-service and from-service sockets and their monitors are then replaced by in-process queues
drained by the one duty cycle (clusterlab.core.runtime.runner), and the services count as connected.

Every member-to-member send passes the chaos gate (clusterlab.core.runtime.gate). A message on a
ROUTER is taken only from the connection of the member its header claims (its routing id, and on a
secured cluster its CURVE key's ZAP User-Id): clusterlab.core.runtime.security; the consensus module
then takes a message whose body names its sender only if that is the header's source
(clusterlab.core.consensus.senders). Drops are logged and counted (``source_rejected=``,
``auth_refused=`` and ``body_member_mismatch=`` in the status detail).

Recording (clusterlab.harness.recorder; on with ``--trace-dir DIR --run-id ID``): every message this process
sends (``send`` when it is handed to its socket, after the gate; ``send`` and ``drop`` with reason
``gate`` where the gate drops it, ``unreachable`` where the socket refuses it) and receives
(``recv``), on every channel, and the module's events. Member-to-member messages then carry a
message id in their header (transport.ID_HEADER), recorded as ``msg_id`` at both ends.
"""

from __future__ import annotations

import errno
import os
import random
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import zmq
from clusterlab.core.codec.control import (
    NO_ELECTION,
    NOT_STARTED,
    BackupQuery,
    ClockOffset,
    ClusterControlRequest,
    ControlResponse,
    ControlResponseCode,
    CountersRequest,
    GateRule,
    MembersConfig,
    NodeStatus,
    PurgeSegments,
    SnapshotReplayRequest,
    StatusRequest,
    StorageFault,
    TestHook,
)
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import decode, message_name
from clusterlab.core.codec.session import ChallengeResponse
from clusterlab.core.codec.transport import ArchiveError, ReplayRequest
from clusterlab.core.consensus.backup_source import (
    ARCHIVE_ERROR_GENERIC,
    BackupSessions,
    log_replay,
    snapshot_replay,
)
from clusterlab.core.consensus.context import Channel, ClusterMember
from clusterlab.core.consensus.intercepts import NO_INTERCEPTS
from clusterlab.core.consensus.member_driver import MemberDriver, MemberSetup
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.rules import PROTOCOL_RULES
from clusterlab.core.consensus.senders import BODY_MEMBER_MISMATCH
from clusterlab.core.runtime.clock import Clock
from clusterlab.core.runtime.config import (
    CHECK_INVARIANTS_ENV,
    ClusterConfig,
    ConfigError,
    format_members,
    parse_members,
    service_process_name,
    to_service_endpoint,
)
from clusterlab.core.runtime.control_replies import ascii_text as _ascii
from clusterlab.core.runtime.control_replies import counters_reply, purge_segments
from clusterlab.core.runtime.counters_file import CountersFile
from clusterlab.core.runtime.dirlock import DirectoryLockError, hold_member_lock
from clusterlab.core.runtime.gate import PPM, ChaosGate, LinkRule
from clusterlab.core.runtime.recording import DROP, RECV, SEND, NullRecorder, open_recorder
from clusterlab.core.runtime.runner import (
    BATCH_LIMIT,
    DutyCycle,
    InProcessChannel,
    InProcessLink,
    ProcessLog,
    process_argument_parser,
    run_profiled,
    started_by_a_gone_parent,
)
from clusterlab.core.runtime.security import (
    CLIENT,
    DOMAIN_CONTROL,
    DOMAIN_INGRESS,
    DOMAIN_MEMBER,
    ProcessSecurity,
    cluster_authenticator,
    member_key_name,
    node_routing_id,
    service_routing_id,
    source_rejection,
)
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.core.runtime.test_context import DiskFaults, load_test_context
from clusterlab.core.runtime.transport import (
    CHANNEL_CODES,
    ID_HEADER,
    MEMBER_CHANNELS,
    NO_MEMBER,
    EgressCache,
    Link,
    bind,
    drain,
    drain_routed,
    header,
    msg_id_of,
    parse,
    parse_batch,
    remove_ipc_files,
)
from zmq.utils.monitor import recv_monitor_message

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_SERVICE_GONE = 3
EXIT_SERVICE_LINK = 4
CLOSE_LINGER_MS = 200  # a clean close lets queued messages (TerminationAck, end of stream) leave
TOGGLES_ACCEPTED = frozenset(
    {
        ToggleState.SUSPEND,
        ToggleState.RESUME,
        ToggleState.SNAPSHOT,
        ToggleState.SHUTDOWN,
        ToggleState.ABORT,
        ToggleState.STANDBY_SNAPSHOT,
    }
)
_HOUR_NS = 3600 * 1_000_000_000
# A member is its node and its service: when the service process is gone (crashed, killed) the
# node stops too, unless the cluster terminated it in the meantime (its last ack was in flight).
SERVICE_GONE_GRACE_NS = 500 * 1_000_000
# Client messages (each up to transport.MAX_BATCH session messages) taken per duty cycle: the cycle
# then replicates, commits and consumes before taking more (Aeron's ingress fragment limit).
INGRESS_BATCH_LIMIT = 4


SOURCE_REJECTED = "source_rejected"  # status detail: messages whose claimed source was not their connection's
AUTH_REFUSED = "auth_refused"  # status detail: connections the ZAP authenticator refused


def _any_source(_src: int) -> bool:
    return True


_DISK_FULL_CODES = ("ENOSPC", "EDQUOT")


def storage_problem(reason: str) -> str:
    """A storage failure's reason (``ENOSPC: No space left on device (path)``) as an operator names
    it: ``disk full (ENOSPC)``, ``disk error (EIO)``."""
    code = reason.split(":", 1)[0].strip() or "unknown"
    return f"{'disk full' if code in _DISK_FULL_CODES else 'disk error'} ({code})"


class Node:
    """One member's node process; see the module docstring. Its sockets are the ports of the member's
    :class:`MemberDriver`: peers (through the chaos gate and the recorder), services and egress."""

    def __init__(
        self,
        config: ClusterConfig,
        member_id: int,
        incarnation: int = 0,
        rec: Any = None,
        in_process: InProcessChannel | None = None,
    ) -> None:
        """``in_process``: the member's services run in this process (clusterlab.core.runtime.member) and
        talk to the node over this channel instead of the to-service/from-service sockets: nothing is
        bound or connected for them, no monitor watches them, they count as connected."""
        self.config = config
        self.rec = rec if rec is not None else NullRecorder()
        # Recording on: member-to-member messages carry a run-unique id (member, incarnation, sequence).
        self._with_ids = not isinstance(self.rec, NullRecorder)
        self._msg_base = ((member_id + 1) << 52) | (incarnation << 36)
        self._msg_seq = 0
        refer_committed = getattr(self.rec, "refer_committed", None)  # a recorder of the user's may not
        if refer_committed is not None:
            refer_committed(self._holds_committed)
        self.member_id = member_id
        self.incarnation = incarnation
        self.own = config.member(member_id)
        self.member_dir = config.member_dir(member_id)
        self.member_dir.mkdir(parents=True, exist_ok=True)
        # A test (LocalCluster) names its context: planted rules, a storage that takes injected faults.
        self.test_context = load_test_context()
        files = FileStorage(self.member_dir)
        self.storage = self.test_context.storage(files, member_id, incarnation) if self.test_context else files
        self.log = ProcessLog(f"node-{member_id}")
        self.counters_file = CountersFile(self.member_dir, self.storage)  # Aeron's CnC counters + mark-file error log
        self.clock = Clock()
        self.cycle = DutyCycle(self.clock, self.log)
        self.in_process = in_process
        if in_process is not None:
            in_process.attach(self.cycle)  # the member's one duty cycle, on the node's (skewable) clock
        self.zctx = zmq.Context(io_threads=1)
        # Before any socket binds: the ZAP handler must be there when the first peer connects.
        self.security = ProcessSecurity(
            config.directory, config.secure, member_key_name(member_id), self.zctx, authenticate=True
        )
        self.rejected: dict[str, int] = {}  # messages whose claimed source is not their connection's
        self.gate = ChaosGate(member_id, random.Random(f"{config.seed}:gate:{member_id}:{incarnation}"))
        # Egress goes to clients' response channels: CURVE servers with the client key when secured.
        self.egress = EgressCache(self.zctx, self.log, setup=self.security.connector(CLIENT))
        self.driver: MemberDriver | None = None  # made once every member's endpoints are known
        self.module: ConsensusModule | None = None  # the driver's module
        self._backup_sessions = BackupSessions()  # ClusterBackup queries this member's authenticator judged
        self.ignored: dict[str, int] = {}
        self.received = 0
        self.undeliverable = 0
        self._now_ns = 0
        self._heads = {ch: header(ch, member_id) for ch in Channel}
        self.peers: dict[int, dict[Channel, Link]] = {}
        self.service_connected = False  # every service process has connected
        self._services_connected: set[int] = set()
        self.service_gone_ns: int | None = None
        self._recording_stop_counted = False
        self._sockets: list[zmq.Socket] = []

        self.own_member = self._bind_member_sockets()
        self.members: list[ClusterMember] = [
            self.own_member if m.member_id == member_id else m.cluster_member() for m in config.members
        ]
        self.peer_ids = frozenset(m.member_id for m in self.members if m.member_id != member_id)

        self._bind_control_socket()
        self._open_service_links(in_process)
        self._launch()

    def _bind_control_socket(self) -> None:
        """Bind the control socket the harness, tools and a ClusterBackup talk to this member on."""
        self.control, _ = bind(
            self.zctx, zmq.ROUTER, self.own.control, setup=lambda s: self.security.serve(s, DOMAIN_CONTROL)
        )
        self._sockets.append(self.control)
        self.cycle.register(self.control, self._on_control_readable)

    def _launch(self) -> None:
        """Aeron's ``ConsensusModule.launch``: log the bound endpoints and start the module once every
        member's endpoints are known, else wait for them (MembersConfig on the control socket)."""
        self.log(
            f"started pid={os.getpid()} incarnation={self.incarnation} dir={self.member_dir} "
            f"endpoints={self.own_member.describe()}"
        )
        if all(self._resolved(m) for m in self.members):
            self._start_module()
        else:
            self.log("waiting for the members' endpoints (MembersConfig on the control socket)")

    def _open_service_links(self, in_process: InProcessChannel | None) -> None:
        """One link per service id (Aeron: each service subscribes to the module's service stream), all
        fed the same messages; the services' offers and acks share the one from-service socket."""
        self.to_services: list[Link | InProcessLink] = []
        self._service_monitors: list[zmq.Socket] = []
        self.service_kinds = self.config.service_kinds
        if self.service_kinds and in_process is not None:
            self._attach_in_process(in_process)
        elif self.service_kinds:
            self._connect_services()
        self.to_service: Link | InProcessLink | None = self.to_services[0] if self.to_services else None  # service 0's
        self._service_peers = [service_process_name(self.member_id, s) for s in range(len(self.to_services))]

    def _bind_member_sockets(self) -> ClusterMember:
        """Bind the member-facing sockets the configuration names (tcp :0 -> an OS-assigned port; a port
        from an earlier run is tried first and replaced if taken); this member as bound."""
        bound: dict[str, str] = {}
        for channel, endpoint in (
            (Channel.INGRESS, self.own.ingress),
            (Channel.CONSENSUS, self.own.consensus),
            (Channel.LOG, self.own.log),
            (Channel.CATCHUP, self.own.catchup),
            (Channel.ARCHIVE, self.own.archive),
        ):
            ingress = channel is Channel.INGRESS
            sock, actual = self._bind_member_socket(
                endpoint, zmq.PULL if ingress else zmq.ROUTER, DOMAIN_INGRESS if ingress else DOMAIN_MEMBER
            )
            bound[channel.value] = actual
            if ingress:
                self.cycle.register(sock, self._ingress_handler(sock))
            else:
                self.cycle.register(sock, self._member_handler(sock, channel, self._is_peer, node_routing_id))
        return ClusterMember(
            self.member_id,
            ingress_endpoint=bound["ingress"],
            consensus_endpoint=bound["consensus"],
            log_endpoint=bound["log"],
            catchup_endpoint=bound["catchup"],
            archive_endpoint=bound["archive"],
        )

    def _connect_services(self) -> None:
        """The service processes' sockets: the one from-service ROUTER all of them send on, and a
        to-service link per service id, each with a monitor that sees its service connect and go."""
        member_id = self.member_id
        from_service, _ = bind(
            self.zctx,
            zmq.ROUTER,
            self.own.from_service,
            rcvhwm=0,
            setup=lambda s: self.security.serve(s, DOMAIN_MEMBER),
        )
        self._sockets.append(from_service)
        self.cycle.register(
            from_service,
            self._member_handler(
                from_service,
                Channel.SERVICE,
                lambda src: src == member_id,
                lambda _src: service_routing_id(member_id),
                service_routing_ids={
                    service_routing_id(member_id, s): service_process_name(member_id, s)
                    for s in range(len(self.service_kinds))
                },
            ),
        )
        for service_id in range(len(self.service_kinds)):
            link = Link(
                self.zctx,
                to_service_endpoint(self.own, service_id),
                sndhwm=0,
                immediate=False,
                routing_id=node_routing_id(member_id),
                setup=self.security.connector(member_key_name(member_id)),
            )
            monitor = link.sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
            self.cycle.register(monitor, self._service_monitor_handler(service_id, monitor))
            self.to_services.append(link)
            self._service_monitors.append(monitor)

    def _attach_in_process(self, in_process: InProcessChannel) -> None:
        """The services' links are ``in_process``'s queues: the node sends on its to-service links and
        drains the from-service queues in the duty cycle (after the services drained theirs)."""
        self.to_services.extend(in_process.to_service)
        for service_id, link in enumerate(in_process.from_service):
            name = service_process_name(self.member_id, service_id)
            self.cycle.register_queue(link.queue, self._in_process_service_handler(link.queue, name))
        self._services_connected.update(range(len(self.to_services)))
        self.service_connected = True

    def _in_process_service_handler(self, queue: deque[bytes], name: str) -> Callable[[int], int]:
        """Messages from the in-process service ``name``: as from the from-service socket, without
        framing or source checks (nothing else can write to the queue)."""
        record = self.rec.message
        recording = self._with_ids
        member_id = self.member_id
        pop = queue.popleft

        def handle(now_ns: int) -> int:
            self._now_ns = now_ns
            module = self.module
            count = 0
            while queue and count < BATCH_LIMIT:
                payload = pop()
                count += 1
                if recording:
                    record(RECV, Channel.SERVICE, member_id, payload, peer_process=name, msg_id=None)
                if module is None:
                    self._ignore(f"{Channel.SERVICE} queue", "module not started (waiting for the members' endpoints)")
                    continue
                module.on_message(member_id, Channel.SERVICE, payload, now_ns)
            self.received += count
            return count

        return handle

    # ------------------------------------------------------------------ sockets
    def _bind_member_socket(self, endpoint: str, kind: int, domain: str) -> tuple[zmq.Socket, str]:
        def setup(sock: zmq.Socket) -> None:
            self.security.serve(sock, domain)

        try:
            sock, actual = bind(self.zctx, kind, endpoint, setup=setup)
        except zmq.ZMQError as e:
            if not endpoint.startswith("tcp://") or e.errno != zmq.EADDRINUSE:
                raise
            fallback = endpoint.rsplit(":", 1)[0] + ":0"
            self.log(f"{endpoint} is taken ({e}); binding {fallback} instead")
            sock, actual = bind(self.zctx, kind, fallback, setup=setup)
        self._sockets.append(sock)
        return sock, actual

    @staticmethod
    def _resolved(m: ClusterMember) -> bool:
        return not any(
            e.endswith(":0")
            for e in (m.ingress_endpoint, m.consensus_endpoint, m.log_endpoint, m.catchup_endpoint, m.archive_endpoint)
        )

    def _is_peer(self, src: int) -> bool:
        return src in self.peer_ids

    def _connect_peers(self) -> None:
        """(Re)connect the links to every peer whose endpoints changed."""
        for m in self.members:
            if m.member_id == self.member_id or not self._resolved(m):
                continue
            endpoints = {
                Channel.CONSENSUS: m.consensus_endpoint,
                Channel.LOG: m.log_endpoint,
                Channel.CATCHUP: m.catchup_endpoint,
                Channel.ARCHIVE: m.archive_endpoint,
            }
            links = self.peers.get(m.member_id, {})
            for channel in MEMBER_CHANNELS:
                link = links.get(channel)
                if link is not None and link.endpoint == endpoints[channel]:
                    continue
                if link is not None:
                    link.close()
                links[channel] = Link(
                    self.zctx,
                    endpoints[channel],
                    routing_id=node_routing_id(self.member_id),
                    setup=self.security.connector(member_key_name(m.member_id)),
                )
            self.peers[m.member_id] = links

    # ------------------------------------------------------------------ module
    def _start_module(self) -> None:
        config = self.config
        self._connect_peers()
        setup = MemberSetup(
            member_id=self.member_id,
            members=self.members,  # the same list: MembersConfig updates reach ingress_endpoints()
            cluster_dir=self.member_dir,
            storage=self.storage,
            seed=config.seed,
            incarnation=self.incarnation,
            timeouts=config.timeouts,
            appointed_leader_id=config.appointed_leader_id,
            service_count=len(self.to_services),
            events=self._on_event,
            log=self.log,
            check_invariants=os.environ.get(CHECK_INVARIANTS_ENV) == "1",
            archive_segment_length=config.archive_segment_length,
            rules=self.test_context.rules if self.test_context is not None else PROTOCOL_RULES,
            intercepts=self.test_context.intercepts if self.test_context is not None else NO_INTERCEPTS,
            # A secured cluster's clients prove who they are (challenge/response); else accept all.
            authenticator=cluster_authenticator(config.directory) if config.secure else None,
        )
        if setup.rules.describe():
            self.log(f"RULES CHANGED: {setup.rules.describe()}")
        driver = MemberDriver(setup, peers=self._send_to_peer, services=self._send_to_service, egress=self._send_egress)
        module: ConsensusModule = driver.module
        now = self.clock.now_ns()
        self._now_ns = now
        driver.on_start(now)
        self.driver = driver
        self.module = module
        self.log(f"module started: {module.describe()}")

    def _on_event(self, kind: str, member_id: int, term: int | None, pos: int | None, detail: dict[str, Any]) -> None:
        self.rec.event(kind, member_id, term, pos, detail)
        if kind == "vote":
            # Written out before the Vote is sent: a SIGKILL right after voting (the kill-voter nemesis)
            # must not lose the evidence the trace's vote checks count (leader_has_quorum_of_votes).
            self.rec.flush()
        if kind == "commit":  # one per commit advance: too many for a log line each
            return
        self.log(f"event {kind} member={member_id} term={term} pos={pos} {detail}")

    # ------------------------------------------------------------------ the driver's ports
    def _send_to_peer(self, member_id: int, channel: Channel, payload: bytes) -> None:
        """Through the chaos gate (rules a test sets on the control socket) and the recorder to the peer."""
        if self.gate.rules and not self.gate.admit(member_id, channel, payload, self._now_ns):
            if self.gate.last_dropped:  # held messages are recorded when they leave
                self._record_dropped(member_id, channel, payload, "gate")
            return
        self._send_peer(member_id, channel, payload)

    def _send_egress(self, response_channel: str, payload: bytes) -> None:
        self.rec.message(SEND, Channel.EGRESS, NO_MEMBER, payload)
        self.egress.send(response_channel, payload)

    def _holds_committed(self, position: int, entries: memoryview) -> bool:
        """Whether this member's log holds exactly ``entries`` at ``position``, committed: the recorder
        then keeps a LogBlock's entries as a reference into the committed log (harness/payload_refs.py)."""
        module = self.module
        return (
            module is not None
            and position + len(entries) <= module.commit_position
            and module.archive.holds(position, entries)
        )

    def _next_msg_id(self) -> int | None:
        if not self._with_ids:
            return None
        self._msg_seq += 1
        return self._msg_base | self._msg_seq

    def _record_dropped(self, member_id: int, channel: Channel, payload: bytes, reason: str) -> None:
        """A message that never left this process: its ``send`` row and its ``drop`` row."""
        if self._with_ids:
            msg_id = self._next_msg_id()
            peer_process = f"node-{member_id}"
            self.rec.message(SEND, channel, member_id, payload, peer_process=peer_process, msg_id=msg_id)
            self.rec.message(DROP, channel, member_id, payload, peer_process=peer_process, msg_id=msg_id, reason=reason)

    def _send_peer(self, member_id: int, channel: Channel, payload: bytes) -> None:
        links = self.peers.get(member_id)
        if links is None:
            self.undeliverable += 1
            self._record_dropped(member_id, channel, payload, "unreachable")
            return
        if not self._with_ids:
            links[channel].send(self._heads[channel], payload)
            return
        msg_id = self._next_msg_id()
        peer_process = f"node-{member_id}"
        self.rec.message(SEND, channel, member_id, payload, peer_process=peer_process, msg_id=msg_id)
        if not links[channel].send(ID_HEADER.pack(CHANNEL_CODES[channel], self.member_id, msg_id), payload):
            # A peer that is down (or a full queue): lost here, like a datagram to a dead host.
            self.rec.message(
                DROP, channel, member_id, payload, peer_process=peer_process, msg_id=msg_id, reason="unreachable"
            )

    def _send_to_service(self, payload: bytes) -> None:
        head = self._heads[Channel.SERVICE]
        for link, peer in zip(self.to_services, self._service_peers, strict=True):
            self.rec.message(SEND, Channel.SERVICE, self.member_id, payload, peer_process=peer)
            if not link.send(head, payload):
                # Cannot happen with an unbounded queue; if it does, the service would see a gap.
                self.cycle.request_stop(f"the link to {peer} refused a message", EXIT_SERVICE_LINK)

    # ------------------------------------------------------------------ inbound
    def _ignore(self, where: str, reason: str) -> None:
        key = f"{where}: {reason}"
        self.ignored[key] = self.ignored.get(key, 0) + 1
        self.log(f"ignored {key}")

    def _reject(self, where: str, reason: str) -> None:
        """A message from a connection that may not speak for the member it names: dropped, counted."""
        key = f"{where}: {reason}"
        self.rejected[key] = self.rejected.get(key, 0) + 1
        self.log(f"rejected {key}")

    def _member_handler(
        self,
        sock: zmq.Socket,
        channel: Channel,
        allowed_src: Callable[[int], bool],
        routing_id_of: Callable[[int], bytes],
        service_routing_ids: dict[bytes, str] | None = None,
    ) -> Callable[[int], int]:
        """Messages on a ROUTER from peers (or this member's services): well framed, and from the
        connection of the member they claim (runtime.security.source_rejection). ``service_routing_ids``:
        the routing id of each of this member's services -> its process name (any of them may send)."""
        record = self.rec.message
        recording = self._with_ids  # off: no record call and no msg-id unpack per message
        user_ids = self.security.enabled
        peer_names: dict[int, str] = {}

        def handle(now_ns: int) -> int:
            self._now_ns = now_ns
            batch = drain_routed(sock, BATCH_LIMIT, user_ids=user_ids)
            module = self.module
            for routing_id, user_id, frames in batch:
                parsed = parse(frames, channel, allowed_src)
                if isinstance(parsed, str):
                    self._ignore(f"{channel} socket", parsed)
                    continue
                src, payload = parsed
                if service_routing_ids is not None and routing_id in service_routing_ids:
                    peer = service_routing_ids[routing_id]
                    rejection = source_rejection(routing_id, user_id, src, _same_routing_id(routing_id))
                else:
                    peer = peer_names.get(src) or peer_names.setdefault(src, f"node-{src}")
                    rejection = source_rejection(routing_id, user_id, src, routing_id_of)
                if rejection is not None:
                    self._reject(f"{channel} socket", rejection)
                    continue
                if recording:
                    record(RECV, channel, src, payload, peer_process=peer, msg_id=msg_id_of(frames[0]))
                if module is None:
                    self._ignore(f"{channel} socket", "module not started (waiting for the members' endpoints)")
                    continue
                module.on_message(src, channel, payload, now_ns)
            self.received += len(batch)
            return len(batch)

        return handle

    def _ingress_handler(self, sock: zmq.Socket) -> Callable[[int], int]:
        """Client ingress: batched messages (a header, then one or more payloads each)."""
        record = self.rec.messages

        def handle(now_ns: int) -> int:
            self._now_ns = now_ns
            batch = drain(sock, INGRESS_BATCH_LIMIT)
            module = self.module
            count = 0
            for frames in batch:
                parsed = parse_batch(frames, Channel.INGRESS, _any_source)
                if isinstance(parsed, str):
                    self._ignore(f"{Channel.INGRESS} socket", parsed)
                    continue
                payloads = parsed[1]
                count += len(payloads)
                record(RECV, Channel.INGRESS, NO_MEMBER, payloads)  # one row each, one clock reading
                if module is None:
                    self._ignore(f"{Channel.INGRESS} socket", "module not started (waiting for the members' endpoints)")
                    continue
                module.on_ingress_batch(payloads, now_ns)
            self.received += count
            return count

        return handle

    def _service_monitor_handler(self, service_id: int, monitor: zmq.Socket) -> Callable[[int], int]:
        """Connect/disconnect of service ``service_id``: a member is its node and all its services."""
        name = service_process_name(self.member_id, service_id)

        def handle(now_ns: int) -> int:
            n = 0
            while True:
                try:
                    event = recv_monitor_message(monitor, zmq.NOBLOCK)
                except zmq.Again:
                    return n
                n += 1
                if event["event"] == zmq.EVENT_CONNECTED:
                    self._services_connected.add(service_id)
                    self.service_connected = len(self._services_connected) == len(self.to_services)
                    self.log(f"service process connected ({name})")
                elif event["event"] == zmq.EVENT_DISCONNECTED and service_id in self._services_connected:
                    # Decided in do_work after a grace period: a terminating service's last ack may
                    # still be queued on the other socket when its disconnect is reported.
                    if self.service_gone_ns is None:
                        self.service_gone_ns = now_ns
                    self.log(f"service process disconnected ({name})")

        return handle

    # ------------------------------------------------------------------ control
    def _on_control_readable(self, now_ns: int) -> int:
        self._now_ns = now_ns
        batch = drain(self.control, BATCH_LIMIT)
        for frames in batch:
            identity, rest = frames[0], frames[1:]
            parsed = parse(rest, Channel.CONTROL, lambda _src: True)
            if isinstance(parsed, str):
                self._ignore("control socket", parsed)
                continue
            payload = parsed[1]
            self.rec.message(RECV, Channel.CONTROL, NO_MEMBER, payload)
            try:
                msg = decode(payload)
            except DecodeError as e:
                self._ignore("control socket", f"malformed: {e}")
                continue
            reply = self._on_control(msg, now_ns)
            if reply is None:
                self._ignore("control socket", f"unexpected {message_name(payload)}")
                continue
            encoded = reply.encode()
            self.rec.message(SEND, Channel.CONTROL, NO_MEMBER, encoded)
            try:
                self.control.send_multipart((identity, self._heads[Channel.CONTROL], encoded), zmq.NOBLOCK)
            except zmq.ZMQError as e:
                self._ignore("control socket", f"reply not sent: {e}")
        self.received += len(batch)
        return len(batch)

    def _on_control(self, msg: Message, now_ns: int) -> Message | None:
        if isinstance(msg, StatusRequest):
            return self.status(msg.correlation_id)
        if isinstance(msg, GateRule):
            return self._on_gate_rule(msg)
        if isinstance(msg, ClockOffset):
            self.clock.offset_ns = msg.offset_ns
            self.log(f"clock offset set to {msg.offset_ns} ns")
            return ControlResponse(msg.correlation_id, ControlResponseCode.OK, "")
        if isinstance(msg, ClusterControlRequest):
            return self._on_cluster_control(msg)
        if isinstance(msg, MembersConfig):
            return self._on_members_config(msg)
        if isinstance(msg, StorageFault):
            return self._on_storage_fault(msg)
        if isinstance(msg, CountersRequest):
            return counters_reply(self.module, self.member_id, msg.correlation_id, now_ns)
        if isinstance(msg, PurgeSegments):
            reply = purge_segments(self.module, msg)
            self.log(f"purge segments: {reply.message}")
            return reply
        if isinstance(msg, TestHook):
            reply = self._on_test_hook(msg)
            self.log(f"test hook {msg.kind.name}: {reply.message}")
            return reply
        if isinstance(msg, BackupQuery | ChallengeResponse | ReplayRequest | SnapshotReplayRequest):
            return self._on_backup_request(msg, now_ns)
        return None

    def _on_backup_request(
        self, msg: BackupQuery | ChallengeResponse | ReplayRequest | SnapshotReplayRequest, now_ns: int
    ) -> Message:
        """A ClusterBackup's query, its answer to a challenge, or a read (clusterlab.core.consensus.
        backup_source); REFUSED until the module has started (Aeron's consensus module answers a backup
        query only once it runs)."""
        if self.module is None:
            if isinstance(msg, BackupQuery | ChallengeResponse):
                return ControlResponse(msg.correlation_id, ControlResponseCode.REFUSED, "not started")
            return ArchiveError(msg.correlation_id, ARCHIVE_ERROR_GENERIC, "not started")
        if isinstance(msg, BackupQuery):
            return self._backup_sessions.on_backup_query(self.module, msg, now_ns)
        if isinstance(msg, ChallengeResponse):
            return self._backup_sessions.on_challenge_response(self.module, msg, now_ns)
        if isinstance(msg, ReplayRequest):
            return log_replay(self.module, msg)
        return snapshot_replay(self.storage, msg)

    def _on_test_hook(self, msg: TestHook) -> ControlResponse:
        if self.test_context is None:
            return ControlResponse(
                msg.correlation_id, ControlResponseCode.REFUSED, "no test hooks without a test context"
            )
        if self.module is None:
            return ControlResponse(msg.correlation_id, ControlResponseCode.REFUSED, "not started")
        return self.test_context.test_hook(msg)

    def _on_storage_fault(self, msg: StorageFault) -> ControlResponse:
        if not isinstance(self.storage, DiskFaults):
            return ControlResponse(
                msg.correlation_id, ControlResponseCode.REFUSED, "no disk faults without a test context"
            )
        if msg.code == 0:
            self.storage.clear()
            self.log("storage faults cleared")
            return ControlResponse(msg.correlation_id, ControlResponseCode.OK, "")
        if msg.code not in errno.errorcode or msg.count == 0 or msg.count < -1:
            return ControlResponse(msg.correlation_id, ControlResponseCode.ERROR, "bad errno code or count")
        count = None if msg.count == -1 else msg.count
        self.storage.fail_writes(msg.code, msg.path_prefix, torn=bool(msg.torn), count=count)
        self.log(
            f"storage fault: writes under {msg.path_prefix!r} fail with {errno.errorcode[msg.code]} "
            f"(count={count}, torn={bool(msg.torn)})"
        )
        return ControlResponse(msg.correlation_id, ControlResponseCode.OK, "")

    def _on_gate_rule(self, msg: GateRule) -> ControlResponse:
        if msg.dst_member_id != -1 and msg.dst_member_id not in self.peer_ids:
            return ControlResponse(msg.correlation_id, ControlResponseCode.ERROR, f"no peer {msg.dst_member_id}")
        if not 0 <= msg.loss_ppm <= PPM or msg.delay_ns < 0:
            return ControlResponse(msg.correlation_id, ControlResponseCode.ERROR, "loss_ppm or delay_ns out of range")
        self.gate.set_rule(msg.dst_member_id, LinkRule(msg.loss_ppm, msg.delay_ns), sorted(self.peer_ids))
        self.log(f"gate: {self.gate.describe()}")
        return ControlResponse(msg.correlation_id, ControlResponseCode.OK, "")

    def _on_cluster_control(self, msg: ClusterControlRequest) -> ControlResponse:
        if msg.toggle not in TOGGLES_ACCEPTED:
            return ControlResponse(msg.correlation_id, ControlResponseCode.ERROR, f"toggle {msg.toggle.name}")
        module = self.module
        if module is None:
            return ControlResponse(msg.correlation_id, ControlResponseCode.REFUSED, "not started")
        if module.toggle_control(msg.toggle):
            self.log(f"cluster control {msg.toggle.name} accepted")
            return ControlResponse(msg.correlation_id, ControlResponseCode.OK, "")
        return ControlResponse(
            msg.correlation_id,
            ControlResponseCode.REFUSED,
            _ascii(f"toggle {module.toggle.name}: {module.describe()}"),
        )

    def _on_members_config(self, msg: MembersConfig) -> ControlResponse:
        try:
            members = parse_members(msg.members)
        except ValueError as e:
            return ControlResponse(msg.correlation_id, ControlResponseCode.ERROR, _ascii(str(e)))
        if sorted(m.member_id for m in members) != sorted(m.member_id for m in self.members):
            return ControlResponse(msg.correlation_id, ControlResponseCode.ERROR, "member ids differ from cluster.json")
        by_id = {m.member_id: m for m in members}
        # In place: the module's context holds this list.
        for i, m in enumerate(self.members):
            if m.member_id != self.member_id:
                self.members[i] = by_id[m.member_id]
        self.log(f"members: {format_members(self.members)}")
        if self.module is None:
            if all(self._resolved(m) for m in self.members):
                self._start_module()
        else:
            self._connect_peers()
        return ControlResponse(msg.correlation_id, ControlResponseCode.OK, "")

    @property
    def rejected_count(self) -> int:
        """Messages dropped because their claimed source was not their connection's."""
        return sum(self.rejected.values())

    def _with_security_detail(self, detail: str) -> str:
        # The status detail carries the source-check counters (NodeStatus has no field of its own): the
        # runtime's (header source vs connection, refused keys) and the module's (body sender vs source).
        mismatched = 0 if self.module is None else self.module.s.body_member_mismatch_count
        return (
            f"{detail} {SOURCE_REJECTED}={self.rejected_count} {AUTH_REFUSED}={self.security.refused} "
            f"{BODY_MEMBER_MISMATCH}={mismatched}"
        )

    def stats(self) -> str:
        """Traffic counters: how much each duty cycle batched (messages in, messages out per channel)."""
        sent: dict[str, int] = {}
        for links in self.peers.values():
            for channel, link in links.items():
                sent[channel.value] = sent.get(channel.value, 0) + link.sent
        if self.to_services:
            sent["service"] = sum(link.sent for link in self.to_services)
        sent["egress"] = self.egress.sent
        cycles = max(1, self.cycle.cycles)
        return (
            f"stats: cycles={self.cycle.cycles} received={self.received} "
            f"received/cycle={self.received / cycles:.2f} sent={sent} gate_dropped={self.gate.dropped_count}"
        )

    def status(self, correlation_id: int) -> NodeStatus:
        m = self.module
        peer_dropped = sum(link.dropped for links in self.peers.values() for link in links.values())
        send_dropped = self.egress.dropped + peer_dropped
        ignored = sum(self.ignored.values()) + self.egress.bad_channels + self.rejected_count
        if m is None:
            return NodeStatus(
                correlation_id=correlation_id,
                leadership_term_id=-1,
                commit_position=0,
                append_position=0,
                ignored_count=ignored,
                gate_dropped_count=self.gate.dropped_count,
                send_dropped_count=send_dropped,
                received_count=self.received,
                member_id=self.member_id,
                role=NOT_STARTED,
                election_state=NO_ELECTION,
                module_state=NOT_STARTED,
                leader_member_id=-1,
                session_count=0,
                snapshot_count=0,
                pid=os.getpid(),
                endpoints=_ascii(self.own_member.describe()),
                detail=self._with_security_detail("not started"),
                health=_ascii(self.health()),
            )
        es = m.election_state
        return NodeStatus(
            correlation_id=correlation_id,
            leadership_term_id=m.leadership_term_id,
            commit_position=m.commit_position,
            append_position=m.append_position,
            ignored_count=ignored + sum(m.ignored.values()),
            gate_dropped_count=self.gate.dropped_count,
            send_dropped_count=send_dropped,
            received_count=self.received,
            member_id=self.member_id,
            role=int(m.role),
            election_state=NO_ELECTION if es is None else int(es),
            module_state=int(m.state),
            leader_member_id=m.leader_member_id,
            session_count=len(m.sessions),
            snapshot_count=m.snapshot_count,
            pid=os.getpid(),
            endpoints=_ascii(self.own_member.describe()),
            detail=self._with_security_detail(
                _ascii(m.describe() + (f" storage failure: {m.storage_failure}" if m.storage_failure else ""))
            ),
            health=_ascii(self.health()),
        )

    def health(self) -> str:
        """What an operator must see beside the role, ``; ``-separated ("" when healthy): the disk
        failure that fenced the member, its trace recording stopped, its service process gone."""
        problems = []
        m = self.module
        if m is not None and m.storage_failure is not None:
            problems.append(f"fenced: {storage_problem(m.storage_failure)}")
        stopped = self.rec.stopped
        if stopped is not None:
            problems.append(f"recording stopped: {storage_problem(str(stopped.get('reason', '')))}")
        if self.service_gone_ns is not None:
            problems.append("service down")
        return "; ".join(problems)

    # ------------------------------------------------------------------ duty cycle
    def do_work(self, now_ns: int) -> int:
        self._now_ns = now_ns
        work = 0
        if self.gate.next_due_ns() <= now_ns:
            for dst, channel, payload in self.gate.pop_due(now_ns):
                self._send_peer(dst, channel, payload)
                work += 1
        m = self.module
        if m is not None:
            work += m.do_work(now_ns)
            if self.rec.stopped is not None and not self._recording_stop_counted:
                self._recording_stop_counted = True  # an error Aeron's error handler would see: counted once
                m.s.error("recording", f"trace recording stopped: {self.rec.stopped.get('reason')}")
            if self.counters_file.is_due(now_ns, m.s.error_count):
                try:
                    self.counters_file.write(m.counters(now_ns), m.s.distinct_errors, now_ns, running=True)
                except OSError as e:  # a full disk must not stop the node; the live counters still answer
                    self.log(f"counters file not written: {e}")
            if m.terminated:
                # Closed because a service closed or failed to start: the member's service is gone (exit 3).
                code = EXIT_SERVICE_GONE if m.termination.unexpected else EXIT_OK
                self.cycle.request_stop(f"terminated: {m.terminated_reason}", code)
                return work + self.rec.poll()
        if self.service_gone_ns is not None and now_ns >= self.service_gone_ns + SERVICE_GONE_GRACE_NS:
            if m is not None:  # Aeron: "Aeron client in service closed unexpectedly", counted; the module closes
                m.on_service_closed("the service process went away", now_ns)
            self.cycle.request_stop("the service process went away", EXIT_SERVICE_GONE)
        # Trace batches that are due (100 ms) are flushed last: what this cycle sends is not held up
        # behind a batch's conversion and write.
        return work + self.rec.poll()

    def next_deadline_ns(self) -> int:
        m = self.module
        deadline = m.next_deadline_ns() if m is not None else self._now_ns + _HOUR_NS
        if self.service_gone_ns is not None:
            deadline = min(deadline, self.service_gone_ns + SERVICE_GONE_GRACE_NS)
        flush = self.rec.next_deadline_ns()  # on time.monotonic_ns, not the (skewable) process clock
        if flush is not None:
            deadline = min(deadline, self.clock.now_ns() + flush - time.monotonic_ns())
        return min(deadline, self.gate.next_due_ns())

    def run(self) -> int:
        self.cycle.install_signal_handlers()
        code = EXIT_OK
        try:
            code = self.cycle.run(self.do_work, self.next_deadline_ns)
            self.log(f"stopping: {self.cycle.stop_reason} (exit {code}); {self.stats()}")
        finally:
            try:
                self.close(clean=True)
            finally:
                self.rec.close()
        return code

    def close(self, *, clean: bool) -> None:
        linger = CLOSE_LINGER_MS if clean else 0
        if self.module is not None:
            try:  # the last values stay readable after the process (Aeron's CnC file does too)
                module = self.module
                self.counters_file.write(
                    module.counters(self._now_ns),
                    module.s.distinct_errors,
                    self._now_ns,
                    running=False,
                    stop_reason=_ascii(self.cycle.stop_reason or ""),
                )
            except OSError as e:
                self.log(f"counters file not written: {e}")
            try:
                self.module.close()  # a leader tells followers its log ended; files flushed
            except Exception as e:  # still close the sockets
                self.log(f"module close failed: {type(e).__name__}: {e}")
        if self.in_process is None:
            for link, monitor in zip(self.to_services, self._service_monitors, strict=True):
                assert isinstance(link, Link)
                link.sock.disable_monitor()
                monitor.close(0)
        for links in self.peers.values():
            for link in links.values():
                link.close(linger)
        for link in self.to_services:
            link.close(linger)
        self.egress.close(linger)
        for sock in self._sockets:
            sock.close(0)
        self.security.close()
        self.zctx.term()
        self.cycle.close()
        m = self.own_member
        remove_ipc_files(
            m.ingress_endpoint,
            m.consensus_endpoint,
            m.log_endpoint,
            m.catchup_endpoint,
            m.archive_endpoint,
            self.own.control,
            self.own.from_service if self.to_services and self.in_process is None else "",
        )


def _same_routing_id(routing_id: bytes) -> Callable[[int], bytes]:
    """The expected routing id is the one received: any of the member's own services may send."""
    return lambda _src: routing_id


def main(argv: Sequence[str] | None = None) -> int:
    parser = process_argument_parser("python -m clusterlab.core.runtime.node", __doc__.split("\n\n")[0])
    args = parser.parse_args(argv)
    if started_by_a_gone_parent(parser.prog, args.exit_with_parent):
        return EXIT_OK
    try:
        config = ClusterConfig.load(args.dir)
        config.member(args.member_id)
    except ConfigError as e:
        print(f"node: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        # Held until exit (the kernel releases it, SIGKILL included): one node per member.
        member_lock = hold_member_lock(config.member_dir(args.member_id), "node", args.member_id)
    except DirectoryLockError as e:
        print(f"node: {e}", file=sys.stderr)
        return EXIT_CONFIG
    rec = open_recorder(
        args.trace_dir,
        args.run_id,
        f"node-{args.member_id}",
        member_id=args.member_id,
        incarnation=args.incarnation,
        flush_in_poll=True,  # Node.do_work polls it last in every cycle
    )
    try:
        node = Node(config, args.member_id, args.incarnation, rec)
    except ConfigError as e:  # a secured cluster's keys missing or unreadable
        print(f"node: {e}", file=sys.stderr)
        rec.close()
        member_lock.release()
        return EXIT_CONFIG
    try:
        return run_profiled(node.run, f"node-{args.member_id}-{args.incarnation}")
    finally:
        member_lock.release()


if __name__ == "__main__":
    sys.exit(main())
