"""The service process of one member: a ServiceContainer (clusterlab.core.service.container) hosting the
user's service on ZeroMQ sockets.

    python -m clusterlab.core.runtime.service --dir CLUSTER_DIR --member-id I [--service-id S] [--incarnation N]

Start it after its node answers a status request with a started module: like Aeron's service
container, it reads its recovery plan (the latest service snapshot) from the recording log the
node has just reconciled. The service is ``cluster.json``'s ``service`` (or ``services[S]`` when a
member runs several, Aeron's service ids 0..N-1, each its own process with its own snapshots): a name
of ``clusterlab.harness.services.SERVICES`` (kv, counter, echo) or ``package.module:factory``.
Several services share the log as in Aeron: each applies every entry; which session messages a
service acts on is the address convention of ``clusterlab.core.service.addressed``.

Sockets: ``to-service`` (ROUTER, bound; from its node's ``node-<i>`` connection only: JoinLog,
committed log blocks, termination; lossless), ``from-service`` (DEALER ``service-<i>`` to the node:
acks, timers, offers, lossless), ``service-control`` (ROUTER: status with the service's log position
and state digest), egress (PUSH per client). Secured: clusterlab.core.runtime.security.

Recording (``--trace-dir DIR --run-id ID``): one ``applied`` row per applied log entry (and the
snapshot it started from), and every message on the node link (``service``), egress and control.

A member in one process (clusterlab.core.runtime.member) builds its ServiceProcess with the node's
InProcessChannel: no to-service socket and no link to the node (in-process queues on the node's duty
cycle instead); the control socket and egress stay.

Exits 0 when the service terminated (SHUTDOWN/ABORT, or it raised ClusterTerminationException), on
SIGTERM, or when its node went away (the member is down; also a node gone before the service
connected: its socket refuses the connection); 5 when the service failed (the agent stops after a
ServiceError, as Aeron's container does; the node then stops too and the member recovers on
restart) or failed to start (its snapshot did not load, ``on_start`` raised: the recovery ack it
sends its node carries a NULL client id, and the node closes with a counted error, as Aeron's
consensus module does on "failed to start clustered service(s)"; with the snapshot invalidated the
member recovers from the one before). A stop that is not a crash (SIGTERM, the node gone, a
failure) closes the agent, which tells a service that started and was not already terminated
``on_terminate``, once (Aeron ``ClusteredServiceAgent.onClose``).
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import zmq
from clusterlab.core.codec.control import ServiceStatus, StatusRequest
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.registry import decode, message_name
from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.clock import Clock
from clusterlab.core.runtime.config import (
    TRIPWIRE_ENV,
    ClusterConfig,
    ConfigError,
    service_control_endpoint,
    service_process_name,
    to_service_endpoint,
)
from clusterlab.core.runtime.dirlock import hold_member_lock, service_lock_kind
from clusterlab.core.runtime.plugin import import_object
from clusterlab.core.runtime.recording import RECV, SEND, NullRecorder, open_recorder
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
    DOMAIN_MEMBER,
    ProcessSecurity,
    member_key_name,
    node_routing_id,
    service_routing_id,
    source_rejection,
)
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.core.runtime.transport import (
    NO_MEMBER,
    EgressCache,
    Link,
    bind,
    drain,
    drain_routed,
    header,
    parse,
    remove_ipc_files,
)
from clusterlab.core.service.addressed import addressed_factory
from clusterlab.core.service.agent import (
    AgentError,
    AppliedEntry,
    AppliedRun,
    ServiceError,
)
from clusterlab.core.service.api import CallbackScope, ClusteredService
from clusterlab.core.service.container import ServiceContainer
from zmq.utils.monitor import recv_monitor_message

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_SERVICE_FAILED = 5
CLOSE_LINGER_MS = 1000  # the termination ack must reach the node
_HOUR_NS = 3600 * 1_000_000_000
# The sample services (name -> factory) live in the harness, a layer up: named, not imported.
SAMPLE_SERVICES = "clusterlab.harness.services:SERVICES"
# The test harness's callback scope (with TRIPWIRE_ENV set): named, not imported, for the same reason.
PROCESS_TRIPWIRE = "clusterlab.harness.tripwire:process_tripwire"


def load_service_factory(name: str) -> Callable[[], ClusteredService]:
    """``kv`` / ``counter`` / ``echo`` (the table ``SAMPLE_SERVICES`` names) or ``package.module:factory``."""
    try:
        if ":" in name:
            return import_object(name)
        services = import_object(SAMPLE_SERVICES)
    except ValueError as e:
        raise ConfigError(f"service {name!r}: {e}") from None
    try:
        return services[name]
    except KeyError:
        raise ConfigError(f"unknown service {name!r}: use one of {sorted(services)} or module:factory") from None


class ServiceProcess:
    """See the module docstring."""

    def __init__(
        self,
        config: ClusterConfig,
        member_id: int,
        incarnation: int = 0,
        rec: Any = None,
        service_id: int = 0,
        in_process: InProcessChannel | None = None,
    ) -> None:
        """``in_process``: the service runs in its node's process (clusterlab.core.runtime.member), on the
        node's duty cycle, and talks to the node over this channel: no to-service socket, no link or
        monitor to the node (it counts as connected); a stop stops only this service (``stop_request``)."""
        kinds = config.service_kinds
        if not kinds:
            raise ConfigError("the cluster runs no service (cluster.json: service is null)")
        if not 0 <= service_id < len(kinds):
            raise ConfigError(f"service id {service_id} is not in the cluster's services 0..{len(kinds) - 1} ({kinds})")
        self.rec = rec if rec is not None else NullRecorder()
        factory = addressed_factory(load_service_factory(kinds[service_id]), service_id, len(kinds))
        self.member_id = member_id
        self.service_id = service_id
        self.incarnation = incarnation
        own = self.own = config.member(member_id)
        self.to_service_endpoint = to_service_endpoint(own, service_id)
        self.service_control_endpoint = service_control_endpoint(own, service_id)
        self.member_dir = config.member_dir(member_id)
        self.log = ProcessLog(service_process_name(member_id, service_id))
        # In a member's one process: the node's clock, which its duty cycle's deadlines are on.
        self.clock = Clock() if in_process is None else in_process.cycle.clock
        self.in_process = in_process
        self.stop_request: tuple[str, int] | None = None  # in a member's one process: why it stopped, its code
        self.cycle = DutyCycle(self.clock, self.log) if in_process is None else in_process.cycle
        self.zctx = zmq.Context(io_threads=1)
        # Before any socket binds: the ZAP handler must be there when the node connects.
        self.security = ProcessSecurity(
            config.directory, config.secure, member_key_name(member_id), self.zctx, authenticate=True
        )
        self.rejected = 0  # messages not from this member's node (claimed source vs connection)
        self.egress = EgressCache(self.zctx, self.log, setup=self.security.connector(CLIENT))
        self.ignored: dict[str, int] = {}
        self.received = 0
        self._egress_pending: dict[str, list[bytes]] = {}
        self._applied_pending: list[AppliedEntry] = []
        self._head = header(Channel.SERVICE, member_id)
        self._node_name = f"node-{member_id}"
        self._control_head = header(Channel.CONTROL, member_id)

        self._open_sockets(in_process)
        self.storage = FileStorage(self.member_dir)
        self._open_container(factory(), kinds[service_id])

    def _open_sockets(self, in_process: InProcessChannel | None) -> None:
        """The to-service socket (or the in-process queue), the control socket, and the link to the node."""
        security = self.security
        member_id, service_id = self.member_id, self.service_id
        self.to_node: Link | InProcessLink
        if in_process is None:
            self.inbound, _ = bind(
                self.zctx,
                zmq.ROUTER,
                self.to_service_endpoint,
                rcvhwm=0,
                setup=lambda s: security.serve(s, DOMAIN_MEMBER),
            )
            self.cycle.register(self.inbound, self._on_inbound)
        else:
            self.inbound_queue = in_process.to_service[service_id].queue
            # First: the acks it sends reach the node's queue handler in the same cycle.
            self.cycle.register_queue(self.inbound_queue, self._in_process_handler(self.inbound_queue), first=True)
        self.control, _ = bind(
            self.zctx, zmq.ROUTER, self.service_control_endpoint, setup=lambda s: security.serve(s, DOMAIN_CONTROL)
        )
        self.cycle.register(self.control, self._on_control)
        if in_process is None:
            self.to_node = Link(
                self.zctx,
                self.own.from_service,
                sndhwm=0,
                immediate=False,
                routing_id=service_routing_id(member_id, service_id),
                setup=security.connector(member_key_name(member_id)),
            )
            self._node_connected = False
            self._monitor = self.to_node.sock.get_monitor_socket(
                zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
            )
            self.cycle.register(self._monitor, self._on_monitor)
        else:
            self.to_node = in_process.from_service[service_id]
            self._node_connected = True

    def _open_container(self, service: ClusteredService, kind: str) -> None:
        """The service's container on this process's storage and ports, started from its recovery plan."""
        self.container = ServiceContainer(
            self.service_id,
            self.member_id,
            service,
            self.storage,
            to_consensus_module=self._to_node,
            egress=self._send_egress,
            # Only a recording process needs each entry's row (and so the two digests per entry).
            # Held for one inbound batch, then recorded together (_flush_applied).
            on_applied=None if isinstance(self.rec, NullRecorder) else self._applied_pending.append,
            on_applied_run=self._record_run,
            log=self.log,
            callback_scope=self._callback_scope(service),
            events=self.rec.event,  # ``start`` and ``service_terminate`` (the events table)
        )
        self.agent = self.container.agent
        self.snapshots = self.container.snapshots
        recording_id = self.container.recovery_snapshot()
        self.log(
            f"started pid={os.getpid()} incarnation={self.incarnation} service={kind} "
            f"service_id={self.service_id} snapshot={recording_id}"
        )
        self.start_failure: str | None = self.container.start(recording_id)  # the node closes (Aeron)
        self._flush_applied()  # a loaded snapshot's row

    def _callback_scope(self, service: ClusteredService) -> CallbackScope | None:
        """The tripwires when the harness asked for them (TRIPWIRE_ENV); None (nothing watched) otherwise."""
        if os.environ.get(TRIPWIRE_ENV, "") in ("", "0"):
            return None
        scope: CallbackScope = import_object(PROCESS_TRIPWIRE)(self.member_id, self.service_id, service, self.rec)
        self.log(f"tripwires on: {PROCESS_TRIPWIRE}")
        return scope

    # ------------------------------------------------------------------ agent outputs
    def _send_egress(self, channel: str, _session: Any, payload: bytes) -> None:
        # Held until the end of the inbound batch, then one ZeroMQ message per client (egress batching);
        # recorded there, when handed to the socket, as one bulk of rows.
        pending = self._egress_pending.get(channel)
        if pending is None:
            self._egress_pending[channel] = [payload]
        else:
            pending.append(payload)

    def _flush_egress(self) -> None:
        pending, self._egress_pending = self._egress_pending, {}
        record = self.rec.messages
        for channel, payloads in pending.items():
            record(SEND, Channel.EGRESS, NO_MEMBER, payloads)
            self.egress.send_batch(channel, payloads)

    def _flush_applied(self) -> None:
        """Record the applied entries held since the last call (one bulk of rows per inbound batch)."""
        if self._applied_pending:
            self.rec.applied_many(self._applied_pending)
            self._applied_pending.clear()  # in place: the agent holds its append method

    def _record_run(self, run: AppliedRun) -> None:
        """A block's run of session messages: its rows go to the recorder as columns, after the
        entries held before it (rows stay in log order)."""
        self._flush_applied()
        self.rec.applied_run(run)

    def _to_node(self, payload: bytes) -> None:
        self.rec.message(SEND, Channel.SERVICE, self.member_id, payload, peer_process=self._node_name)
        if not self.to_node.send(self._head, payload):
            self._request_stop("the link to the node refused a message", EXIT_SERVICE_FAILED)

    @property
    def applied_count(self) -> int:
        return self.agent.applied_count

    # ------------------------------------------------------------------ inputs
    def _ignore(self, where: str, reason: str) -> None:
        key = f"{where}: {reason}"
        self.ignored[key] = self.ignored.get(key, 0) + 1
        self.log(f"ignored {key}")

    def _on_inbound(self, now_ns: int) -> int:
        try:
            return self._on_inbound_batch()
        finally:
            self._flush_applied()

    def _on_inbound_batch(self) -> int:
        batch = drain_routed(self.inbound, BATCH_LIMIT, user_ids=self.security.enabled)
        member_id = self.member_id
        agent = self.agent
        for routing_id, user_id, frames in batch:
            parsed = parse(frames, Channel.SERVICE, lambda src: src == member_id)
            if isinstance(parsed, str):
                self._ignore("to-service socket", parsed)
                continue
            rejection = source_rejection(routing_id, user_id, parsed[0], node_routing_id)
            if rejection is not None:
                self.rejected += 1
                self._ignore("to-service socket", f"rejected: {rejection}")
                continue
            payload = parsed[1]
            self.rec.message(RECV, Channel.SERVICE, member_id, payload, peer_process=f"node-{member_id}")
            if not self._apply_inbound(payload):
                return len(batch)
        self._flush_egress()
        self.received += len(batch)
        if agent.is_terminated:
            self._request_stop("service terminated")
        return len(batch)

    def _apply_inbound(self, payload: bytes) -> bool:
        """One message from the node (a LogBlock, JoinLog, termination ...) to the container; False when
        the service stopped on it (terminated, failed): the rest of the batch is not applied."""
        try:
            stopped = self.container.on_message(payload)
        except (ServiceError, AgentError) as e:
            self._flush_egress()
            self.log(f"service failed: {type(e).__name__}: {e}")
            self._request_stop(f"service failed: {e}", EXIT_SERVICE_FAILED)
            return False
        if self._egress_pending:
            self._flush_egress()  # a block's replies leave before the next block is applied
        if stopped is not None:  # ClusterTerminationException: the container closes (Aeron)
            self._request_stop(stopped)
            return False
        return True

    def _in_process_handler(self, queue: deque[bytes]) -> Callable[[int], int]:
        """The node's messages on the in-process queue (clusterlab.core.runtime.member): as from the
        to-service socket, without framing or source checks (only the node writes to the queue)."""
        pop = queue.popleft
        record = self.rec.message
        member_id = self.member_id
        node_name = self._node_name

        def handle(now_ns: int) -> int:
            count = 0
            try:
                while queue and count < BATCH_LIMIT:
                    payload = pop()
                    count += 1
                    record(RECV, Channel.SERVICE, member_id, payload, peer_process=node_name)
                    if not self._apply_inbound(payload):
                        return count
                self._flush_egress()
                self.received += count
                if self.agent.is_terminated:
                    self._request_stop("service terminated")
                return count
            finally:
                self._flush_applied()

        return handle

    def _request_stop(self, reason: str, exit_code: int = EXIT_OK) -> None:
        """The service stops: its process (the duty cycle) or, in a member's one process, only the
        service (``stop_request``; the member closes it and its node sees it gone)."""
        if self.in_process is None:
            self.cycle.request_stop(reason, exit_code)
            return
        if self.stop_request is None:
            self.stop_request = (reason, exit_code)
            self.cycle.unregister_queue(self.inbound_queue)  # nothing more is applied

    def _on_control(self, now_ns: int) -> int:
        batch = drain(self.control, BATCH_LIMIT)
        for frames in batch:
            identity, rest = frames[0], frames[1:]
            parsed = parse(rest, Channel.CONTROL, lambda _src: True)
            if isinstance(parsed, str):
                self._ignore("service-control socket", parsed)
                continue
            self.rec.message(RECV, Channel.CONTROL, NO_MEMBER, parsed[1])
            try:
                msg = decode(parsed[1])
            except DecodeError as e:
                self._ignore("service-control socket", f"malformed: {e}")
                continue
            if not isinstance(msg, StatusRequest):
                self._ignore("service-control socket", f"unexpected {message_name(parsed[1])}")
                continue
            reply = self.status(msg.correlation_id).encode()
            self.rec.message(SEND, Channel.CONTROL, NO_MEMBER, reply)
            try:
                self.control.send_multipart((identity, self._control_head, reply), zmq.NOBLOCK)
            except zmq.ZMQError as e:
                self._ignore("service-control socket", f"reply not sent: {e}")
        return len(batch)

    def _on_monitor(self, now_ns: int) -> int:
        n = 0
        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return n
            n += 1
            if event["event"] == zmq.EVENT_CONNECTED:
                self._node_connected = True
            elif event["event"] == zmq.EVENT_DISCONNECTED and self._node_connected:
                self._request_stop("node process went away")
            elif event["event"] == zmq.EVENT_CONNECT_RETRIED and not self._node_connected:
                # A refused connection before any was seen: the node has gone (it closed while this
                # service started, e.g. another service failed to start; or the monitor missed the
                # connection and sees only the node's socket refusing it now).
                self._request_stop("node process went away (its socket refuses connections)")

    def status(self, correlation_id: int) -> ServiceStatus:
        agent = self.agent
        try:
            digest = agent.service.state_digest()
        except Exception as e:  # a broken service still answers status
            self.log(f"state_digest failed: {type(e).__name__}: {e}")
            digest = b""
        return ServiceStatus(
            correlation_id=correlation_id,
            log_position=agent.log_position,
            leadership_term_id=agent.leadership_term_id,
            applied_count=self.applied_count,
            ignored_count=sum(self.ignored.values()) + sum(agent.ignored.values()) + self.egress.bad_channels,
            member_id=self.member_id,
            role=int(agent.role),
            terminated=1 if agent.is_terminated else 0,
            pid=os.getpid(),
            state_digest=digest,
        )

    # ------------------------------------------------------------------ run
    def run(self) -> int:
        self.cycle.install_signal_handlers()
        code = EXIT_OK
        try:
            self.stop_if_not_started()
            code = self.cycle.run(lambda _now: self.rec.poll(), self.next_deadline_ns)
            self.log(f"stopping: {self.cycle.stop_reason} (exit {code}); {self.stats()}")
        finally:
            self.shutdown()
        return code

    def stop_if_not_started(self) -> None:
        """A service that failed to start (exit 5) or terminated while starting stops at once."""
        if self.start_failure is not None:
            self._request_stop(self.start_failure, EXIT_SERVICE_FAILED)
        elif self.agent.is_terminated:
            self._request_stop("service terminated")

    def stats(self) -> str:
        return (
            f"stats: cycles={self.cycle.cycles} received={self.received} applied={self.applied_count} "
            f"to_node={self.to_node.sent} egress={self.egress.sent}"
        )

    def shutdown(self) -> None:
        """Close the agent (Aeron onClose: an active service is told on_terminate, errors swallowed),
        the sockets, and the recording."""
        try:
            self.agent.close()
            self.close()
        finally:
            self._flush_applied()
            self.rec.close()

    def next_deadline_ns(self) -> int:
        now = self.clock.now_ns()
        flush = self.rec.next_deadline_ns()  # on time.monotonic_ns, not the (skewable) process clock
        return now + _HOUR_NS if flush is None else now + flush - time.monotonic_ns()

    def close(self) -> None:
        if self.in_process is not None:
            self._close_in_process()
            return
        assert isinstance(self.to_node, Link)
        self.to_node.sock.disable_monitor()
        self._monitor.close(0)
        # Only a terminated service, or one that failed to start, has something that must still reach
        # its node (the last ack; the recovery ack with a NULL client id).
        linger = CLOSE_LINGER_MS if self.agent.is_terminated or self.start_failure is not None else 0
        self.to_node.close(linger)
        self.egress.close(min(linger, 100))
        self.inbound.close(0)
        self.control.close(0)
        self.security.close()
        self.zctx.term()
        self.cycle.close()
        remove_ipc_files(self.to_service_endpoint, self.service_control_endpoint)

    def _close_in_process(self) -> None:
        """In a member's one process: the node's duty cycle runs on (or closes itself) without this
        service's queue and control socket; what the service sent its node is in the node's queue."""
        self.cycle.unregister_queue(self.inbound_queue)
        self.cycle.unregister(self.control)
        self.egress.close(100 if self.agent.is_terminated or self.start_failure is not None else 0)
        self.control.close(0)
        self.security.close()
        self.zctx.term()
        remove_ipc_files(self.service_control_endpoint)


def main(argv: Sequence[str] | None = None) -> int:
    parser = process_argument_parser("python -m clusterlab.core.runtime.service", __doc__.split("\n\n")[0])
    parser.add_argument("--service-id", type=int, default=0, help="which of the member's services (default 0)")
    args = parser.parse_args(argv)
    if started_by_a_gone_parent(parser.prog, args.exit_with_parent):
        return EXIT_OK
    try:
        config = ClusterConfig.load(args.dir)
        config.member(args.member_id)
        # Held until exit (the kernel releases it, SIGKILL included): one service per member.
        name = service_process_name(args.member_id, args.service_id)
        member_lock = hold_member_lock(
            config.member_dir(args.member_id), service_lock_kind(args.service_id), args.member_id
        )
        rec = open_recorder(
            args.trace_dir,
            args.run_id,
            name,
            member_id=args.member_id,
            incarnation=args.incarnation,
            service_id=args.service_id,
            flush_in_poll=True,  # the duty cycle's work is rec.poll(), after every handler
        )
        process = ServiceProcess(config, args.member_id, args.incarnation, rec, args.service_id)
    except ConfigError as e:
        print(f"service: {e}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return run_profiled(process.run, f"{name}-{args.incarnation}")
    finally:
        member_lock.release()


if __name__ == "__main__":
    sys.exit(main())
