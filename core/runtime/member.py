"""A member in one process: its node and its service(s) on one thread and one duty cycle.

    python -m clusterlab.core.runtime.member --dir CLUSTER_DIR --member-id I [--incarnation N]

takes the node's arguments (``process_argument_parser``) and runs the member's Node
(clusterlab.core.runtime.node) and each of its ServiceProcess(es) (clusterlab.core.runtime.service)
in this process, as Aeron's common deployment runs the consensus module and the service container in
one JVM. The node <-> service links are in-process queues (runner.InProcessChannel) instead of the
to-service/from-service sockets and their monitors; everything else is as in the separate processes:
the node's sockets (ingress, member channels, control), each service's control socket and egress,
the recordings (``node-<i>`` and ``service-<i>``: two process names, two streams, the same rows).

One duty cycle (the node's): the sockets' handlers, then the in-process queues (each service's
inbound queue first, so its acks reach the node in the same cycle), then the node's work, the
services' start (once the node's module has started: a service reads the recording log the node
has reconciled) and the recorders' flushes. A queue holding messages makes the next poll not wait.

A service that stops (it terminated, failed, or failed to start) is closed (``on_terminate`` as
its process would) and its node sees it gone, as when a service process exits: the node closes
after its grace period (exit 3) unless the cluster terminated it (exit 0). SIGTERM closes the
services (``on_terminate``) and then the node (files flushed), exit 0. The exit codes are the
node's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from clusterlab.core.runtime.config import ClusterConfig, ConfigError, service_process_name
from clusterlab.core.runtime.dirlock import DirectoryLock, DirectoryLockError, hold_member_lock, service_lock_kind
from clusterlab.core.runtime.node import EXIT_CONFIG, EXIT_OK, Node
from clusterlab.core.runtime.recording import open_recorder
from clusterlab.core.runtime.runner import (
    InProcessChannel,
    process_argument_parser,
    run_profiled,
    started_by_a_gone_parent,
)
from clusterlab.core.runtime.service import ServiceProcess


class Member:
    """One member's node and services in this process; see the module docstring."""

    def __init__(
        self, config: ClusterConfig, member_id: int, incarnation: int, node_rec: Any, service_recs: list[Any]
    ) -> None:
        self.config = config
        self.member_id = member_id
        self.incarnation = incarnation
        self.channel = InProcessChannel(member_id, len(service_recs))
        self.node = Node(config, member_id, incarnation, node_rec, in_process=self.channel)
        self.cycle = self.node.cycle
        self._service_recs = service_recs
        self.services: list[ServiceProcess] = []  # started, in service id order
        self.closed: set[int] = set()  # service ids closed (stopped)
        if self.node.module is not None:
            self._start_services()

    def _start_services(self) -> None:
        """Build every service (its recovery: snapshot load, recovery ack to the node)."""
        for service_id, rec in enumerate(self._service_recs):
            try:
                service = ServiceProcess(
                    self.config, self.member_id, self.incarnation, rec, service_id, in_process=self.channel
                )
            except ConfigError as e:
                self.node.log(f"service {service_id}: {e}")
                self.cycle.request_stop(f"service {service_id} not started: {e}", EXIT_CONFIG)
                return
            self.services.append(service)
            service.stop_if_not_started()

    @property
    def started(self) -> bool:
        return len(self.services) == len(self._service_recs)

    def do_work(self, now_ns: int) -> int:
        work = self.node.do_work(now_ns)
        if not self.started and self.node.module is not None and not self.cycle.stop_requested:
            self._start_services()
            work += 1
        for service in self.services:
            if service.service_id in self.closed:
                continue
            if service.stop_request is not None:
                self._close_service(service, now_ns)
                work += 1
            else:
                work += service.rec.poll()
        return work

    def _close_service(self, service: ServiceProcess, now_ns: int) -> None:
        """A stopped service: closed as its process would close, and gone for its node."""
        assert service.stop_request is not None
        reason, code = service.stop_request
        service.log(f"stopping: {reason} (exit {code}); {service.stats()}")
        self.closed.add(service.service_id)
        service.shutdown()
        node = self.node
        # What the node's monitor reports when a service process goes: decided after its grace period.
        node.log(f"service process disconnected ({service_process_name(self.member_id, service.service_id)})")
        if node.service_gone_ns is None:
            node.service_gone_ns = now_ns

    def next_deadline_ns(self) -> int:
        deadline = self.node.next_deadline_ns()
        for service in self.services:
            if service.service_id not in self.closed:
                deadline = min(deadline, service.next_deadline_ns())
        return deadline

    def run(self) -> int:
        self.cycle.install_signal_handlers()
        code = EXIT_OK
        try:
            code = self.cycle.run(self.do_work, self.next_deadline_ns)
            self.node.log(f"stopping: {self.cycle.stop_reason} (exit {code}); {self.node.stats()}")
        finally:
            try:
                self._close_services()
            finally:
                try:
                    self.node.close(clean=True)
                finally:
                    self.node.rec.close()
        return code

    def _close_services(self) -> None:
        """Every running service closed (``on_terminate``); the recorders of those never started closed."""
        for service in self.services:
            if service.service_id in self.closed:
                continue
            self.closed.add(service.service_id)
            try:
                service.log(f"stopping: {self.cycle.stop_reason} (exit {self.cycle.exit_code}); {service.stats()}")
                service.shutdown()
            except Exception as e:  # the others and the node still close
                self.node.log(f"service {service.service_id} close failed: {type(e).__name__}: {e}")
        for rec in self._service_recs[len(self.services) :]:
            rec.close()


def _hold_locks(config: ClusterConfig, member_id: int) -> list[DirectoryLock]:
    """The node's and every service's lock: no separate node or service of this member runs beside us."""
    member_dir = config.member_dir(member_id)
    kinds = ["node"] + [service_lock_kind(s) for s in range(config.service_count)]
    locks: list[DirectoryLock] = []
    try:
        for kind in kinds:
            locks.append(hold_member_lock(member_dir, kind, member_id))
    except DirectoryLockError:
        for lock in locks:
            lock.release()
        raise
    return locks


def main(argv: Sequence[str] | None = None) -> int:
    parser = process_argument_parser("python -m clusterlab.core.runtime.member", __doc__.split("\n\n")[0])
    args = parser.parse_args(argv)
    if started_by_a_gone_parent(parser.prog, args.exit_with_parent):
        return EXIT_OK
    try:
        config = ClusterConfig.load(args.dir)
        config.member(args.member_id)
        locks = _hold_locks(config, args.member_id)  # held until exit (the kernel releases them on SIGKILL)
    except (ConfigError, DirectoryLockError) as e:
        print(f"member: {e}", file=sys.stderr)
        return EXIT_CONFIG
    node_rec = open_recorder(
        args.trace_dir,
        args.run_id,
        f"node-{args.member_id}",
        member_id=args.member_id,
        incarnation=args.incarnation,
        flush_in_poll=True,  # Node.do_work polls it
    )
    service_recs = [
        open_recorder(
            args.trace_dir,
            args.run_id,
            service_process_name(args.member_id, service_id),
            member_id=args.member_id,
            incarnation=args.incarnation,
            service_id=service_id,
            flush_in_poll=True,  # Member.do_work polls it
        )
        for service_id in range(config.service_count)
    ]
    try:
        try:
            member = Member(config, args.member_id, args.incarnation, node_rec, service_recs)
        except ConfigError as e:  # a secured cluster's keys missing or unreadable, an unknown service
            print(f"member: {e}", file=sys.stderr)
            for rec in [node_rec, *service_recs]:
                rec.close()
            return EXIT_CONFIG
        return run_profiled(member.run, f"member-{args.member_id}-{args.incarnation}")
    finally:
        for lock in locks:
            lock.release()


if __name__ == "__main__":
    sys.exit(main())
