"""Recording a SimCluster run through the same recorder the runtime uses (clusterlab.harness.recorder).

``record_sim(cluster, run_dir, run_id, scenario, seed)`` attaches to the simulator's hooks and writes
the trace tables of docs/trace-schema.md, with the virtual time as both ``wall_ns`` and ``mono_ns``:

- every network message: a ``send`` row at the sender (``node-<i>``, or ``service-<i>`` for the
  service's egress replies, or ``client-<k>``) and a ``recv`` row at the receiver; ``msg_id`` is the
  network's sequence number (a duplicated copy carries its original's), so send and recv link exactly.
- chaos drops (loss, partition, isolated, blocked) as ``drop`` rows, with the ``reason``, written
  where the runtime's chaos gate writes them: at the sender, in the same file as the message's
  ``send`` row (the incarnation that sent it, even when the network cuts it in flight after that
  incarnation died). A message whose receiver is down (killed/stopped, or killed while the message
  was in flight) gets no row, as in a real run where the sender never learns and the dead process
  records nothing: it stays an unmatched send, and :attr:`SimRecording.down_drops` counts them.
- node <-> service traffic (same-host IPC, which bypasses the network) on channel ``service``: the
  node's sends are recorded when queued; the service's sends (acks, timers) when the node takes them,
  which is the same virtual instant.
- ``applied`` rows of every service, events (source ``harness`` for lifecycle and faults, ``node-<i>``
  for what members emit, ``service-<i>`` for a service agent's ``start`` and ``service_terminate``, held
  by its host until the host is wrapped), and the ``ops`` rows a workload writes through
  :meth:`SimRecording.recorder` (clusterlab.chaos.workload.SimWorkload's ``recording``).
- run.json, and at :meth:`SimRecording.close` the committed ``log`` table read from the members' archives.

Each member incarnation is a new process incarnation: files ``node-1-i0``, ``node-1-i1``, ... A kill
or stop flushes the incarnation's files; they are closed with the recording (a simulated kill loses
nothing, and a message the dead incarnation sent may still be cut in flight). Attach right after
constructing the cluster (what it did while constructing is recorded retroactively).

SimCluster's hooks (``on_event``, ``on_applied``, ``on_member_start``, the network's) carry most of it;
the node <-> service queues, which have none, are wrapped on each service host.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusterlab.core.consensus.context import Channel
from clusterlab.core.runtime.config import service_process_name
from clusterlab.harness.recorder import DROP, RECV, SEND, ProcessRecorder, RunRecorder
from clusterlab.harness.sim_parts import CLIENT_ID_BASE
from clusterlab.harness.simnet import DROP_DOWN, Delivery

# Trace batches of a simulated run: rows per record batch, and no flush on virtual time (see SimRecording).
SIM_MAX_ROWS = 1 << 16
SIM_FLUSH_INTERVAL_NS = 1 << 62
_SESSION_TEMPLATE = 1  # SessionMessageHeader's template id: egress sent by the service, not the node


def process_of(network_id: int, channel: Channel | str, payload: bytes) -> tuple[str, int]:
    """(process name, member id or -1) of the endpoint ``network_id`` for a message it sends or gets.
    A member's egress SessionMessageHeader is its service's reply (Aeron's service publishes egress)."""
    if network_id >= 0:
        if channel == Channel.EGRESS and len(payload) >= 4 and (payload[2] | payload[3] << 8) == _SESSION_TEMPLATE:
            return _named(_SERVICE_NAMES, network_id, "service-")
        return _named(_NODE_NAMES, network_id, "node-")
    if network_id <= CLIENT_ID_BASE:
        return _named(_CLIENT_NAMES, network_id, "client-"), -1
    return "harness", -1


# Endpoint names by network id, made once (every recorded message names two endpoints).
_NODE_NAMES: dict[int, tuple[str, int]] = {}
_SERVICE_NAMES: dict[int, tuple[str, int]] = {}
_CLIENT_NAMES: dict[int, str] = {}


def _named(names: dict[int, Any], network_id: int, prefix: str) -> Any:
    name = names.get(network_id)
    if name is None:
        if prefix == "client-":
            name = names[network_id] = f"client-{CLIENT_ID_BASE - network_id}"
        else:
            name = names[network_id] = (f"{prefix}{network_id}", network_id)
    return name


class _NodeToService(deque):
    """The queue from a node to its service: append = the node's send, popleft = the service's recv."""

    def __init__(self, items: Any, on_append: Callable[[bytes], None], on_pop: Callable[[bytes], None]) -> None:
        super().__init__()
        self._on_append = on_append
        self._on_pop = on_pop
        for item in items:
            self.append(item)

    def append(self, item: bytes) -> None:
        super().append(item)
        self._on_append(item)

    def popleft(self) -> bytes:
        item = super().popleft()
        self._on_pop(item)
        return item


class _ServiceToNode:
    """Stands in for a service host's ``to_node`` queue: the agent appends to the real deque (it holds
    its bound ``append``); the simulator's pump takes from here, which records send and recv."""

    def __init__(self, real: deque, on_pop: Callable[[bytes], None]) -> None:
        self._real = real
        self._on_pop = on_pop

    def __bool__(self) -> bool:
        return bool(self._real)

    def __len__(self) -> int:
        return len(self._real)

    def append(self, item: bytes) -> None:
        self._real.append(item)

    def popleft(self) -> bytes:
        item = self._real.popleft()
        self._on_pop(item)
        return item


def sim_config(cluster: Any) -> dict[str, Any]:
    """run.json's ``config`` for a SimCluster: every timeout, the network, the endpoints."""
    return {
        "runtime": "sim",
        "timeouts": dataclasses.asdict(cluster.timeouts),
        "network": dataclasses.asdict(cluster.network_config),
        "appointed_leader_id": cluster.appointed_leader_id,
        "service": cluster.service_name,
        **({"services": cluster.service_names} if len(cluster.service_names) > 1 else {}),
        "endpoints": {str(m.member_id): dataclasses.asdict(m) for m in cluster.cluster_members},
    }


class SimRecording:
    """A SimCluster being recorded; see the module docstring. Close it after the run (after the
    cluster's own close, so the final stops and the messages they strand are in the trace)."""

    def __init__(
        self, cluster: Any, run_dir: Path | str, run_id: str | None, scenario: str, seed: int | None, **kwargs: Any
    ) -> None:
        self.cluster = cluster
        # One process holds the whole cluster, so the runtime's "flush every 100 ms, lose at most that
        # to a SIGKILL" does not apply: a simulated kill flushes its incarnation (_end_incarnation) and
        # close flushes the rest. Large batches make the trace several times cheaper to write.
        kwargs.setdefault("max_rows", SIM_MAX_ROWS)
        kwargs.setdefault("flush_interval_ns", SIM_FLUSH_INTERVAL_NS)
        clock = cluster.clock
        now: Callable[[], int] = lambda: clock.now_ns  # noqa: E731
        self._now = now
        self.run = RunRecorder(
            run_dir,
            run_id,
            scenario=scenario,
            seed=cluster.seed if seed is None else seed,
            members=[dataclasses.asdict(m) for m in cluster.cluster_members],
            config=sim_config(cluster),
            clock=now,
            wall_clock=now,
            **kwargs,
        )
        self.run_dir = self.run.run_dir
        self.run_id = self.run.run_id
        self._by_incarnation: dict[tuple[str, int], ProcessRecorder] = {}
        self._senders: dict[int, ProcessRecorder] = {}  # network seq of a message in flight -> its sender
        self._routes: dict[tuple[int, int, bool], tuple[str, int, str]] = {}  # see _send_route
        self.down_drops = 0  # messages lost to a dead receiver: unmatched sends, no drop row
        self.down_drops_between_members = 0
        self.rows = Counter[str]()
        self.highest_commit = 0
        self.closed = False
        self._attach()

    # ------------------------------------------------------------------------------- recorders

    def recorder(self, process: str, member_id: int, incarnation: int, service_id: int = 0) -> ProcessRecorder:
        key = (process, incarnation)
        rec = self._by_incarnation.get(key)
        if rec is None:
            rec = self.run.process(process, member_id, incarnation, service_id=service_id)
            self._by_incarnation[key] = rec
        return rec

    def _incarnation(self, process: str, member_id: int) -> int:
        return self.cluster.incarnation(member_id) if member_id >= 0 else 0

    def _endpoint(self, network_id: int, channel: Channel, payload: bytes) -> tuple[ProcessRecorder, str]:
        process, member_id = process_of(network_id, channel, payload)
        incarnation = self.cluster.incarnation(member_id) if member_id >= 0 else 0
        rec = self._by_incarnation.get((process, incarnation))  # known (nearly always): no call
        if rec is None:
            rec = self.recorder(process, member_id, incarnation)
        return rec, process

    def _end_incarnation(self, member_id: int) -> None:
        """The member's node and service processes died or stopped: flush their files."""
        incarnation = self.cluster.incarnation(member_id)
        services = [service_process_name(member_id, s) for s in range(max(1, len(self.cluster.service_names)))]
        for process in (f"node-{member_id}", *services):
            rec = self._by_incarnation.get((process, incarnation))
            if rec is not None:
                rec.flush()

    # ------------------------------------------------------------------------------- hooks

    def _attach(self) -> None:
        c = self.cluster
        net = c.network
        # What the cluster did while constructing: its events, messages still in flight (their
        # send rows), and the service hosts' queues.
        for event in c.events:
            self._on_event(event)
        for msg in net.in_flight():
            if not msg.duplicate:
                self._on_send(msg)
        net.on_send.append(self._on_send)
        net.on_deliver.append(self._on_deliver)
        net.on_drop.append(self._on_drop)
        c.on_event.append(self._on_event)
        for row in c.applied:
            self._on_applied(row)
        c.on_applied.append(self._on_applied)
        for member_id in c.members_alive():
            self._wrap_service_queues(member_id)
        c.on_member_start.append(self._wrap_service_queues)

    def _detach(self) -> None:
        c = self.cluster
        net = c.network
        for hooks, hook in (
            (net.on_send, self._on_send),
            (net.on_deliver, self._on_deliver),
            (net.on_drop, self._on_drop),
            (c.on_event, self._on_event),
            (c.on_applied, self._on_applied),
            (c.on_member_start, self._wrap_service_queues),
        ):
            if hook in hooks:
                hooks.remove(hook)

    def _wrap_service_queues(self, member_id: int) -> None:
        ports = self.cluster._ports[member_id]
        if ports is None:
            return
        for index, host in enumerate(self.cluster.service_hosts(member_id)):
            if not isinstance(host.from_node, _NodeToService):
                queue = self._wrap_service_host(member_id, host)
                ports.service_inboxes[index] = queue

    def _wrap_service_host(self, member_id: int, host: Any) -> _NodeToService:
        incarnation = self.cluster.incarnation(member_id)
        node_name, service_name = f"node-{member_id}", service_process_name(member_id, host.service_id)
        node = self.recorder(node_name, member_id, incarnation)
        service = self.recorder(service_name, member_id, incarnation, host.service_id)
        now = self._now
        channel = Channel.SERVICE.value

        def node_sends(payload: bytes) -> None:
            t = now()
            node.message(SEND, channel, member_id, payload, t, t, peer_process=service_name)
            self.rows["service_ipc"] += 1

        def service_receives(payload: bytes) -> None:
            t = now()
            service.message(RECV, channel, member_id, payload, t, t, peer_process=node_name)

        def service_to_node(payload: bytes) -> None:
            t = now()
            service.message(SEND, channel, member_id, payload, t, t, peer_process=node_name)
            node.message(RECV, channel, member_id, payload, t, t, peer_process=service_name)
            self.rows["service_ipc"] += 1

        def service_event(kind: str, subject: int, term: int | None, pos: int | None, detail: dict[str, Any]) -> None:
            if service.closed:  # the recording finished (detached) before the service stopped
                return
            service.event(kind, subject, term, pos, detail, wall_ns=now())
            self.rows["events"] += 1

        queue = _NodeToService(host.from_node, node_sends, service_receives)
        host.from_node = queue
        host.to_node = _ServiceToNode(host.to_node, service_to_node)
        host.attach_events(service_event)  # the agent's start and service_terminate events
        return queue

    def _send_route(self, src: int, dst: int, channel: Channel, payload: bytes) -> tuple[str, int, str]:
        """(sender process, its member id or -1, receiver process) of a message: a pure function of
        the endpoints and whether it is a service's egress, so each route is worked out once."""
        service_egress = (
            channel == Channel.EGRESS and len(payload) >= 4 and (payload[2] | payload[3] << 8) == _SESSION_TEMPLATE
        )
        key = (src, dst, service_egress)
        route = self._routes.get(key)
        if route is None:
            process, member_id = process_of(src, channel, payload)
            peer_process, _ = process_of(dst, channel, payload)
            if peer_process.startswith("service-"):
                peer_process = f"node-{dst}"  # only egress is sent by a service; nothing is sent to one
            route = self._routes[key] = (process, member_id, peer_process)
        return route

    def _on_send(self, msg: Delivery) -> None:
        payload = msg.payload
        channel = msg.channel
        process, member_id, peer_process = self._send_route(msg.src, msg.dst, channel, payload)
        incarnation = self.cluster.incarnation(member_id) if member_id >= 0 else 0
        rec = self._by_incarnation.get((process, incarnation))
        if rec is None:
            rec = self.recorder(process, member_id, incarnation)
        rec.message(
            SEND,
            channel.value,
            msg.dst if msg.dst >= 0 else -1,
            payload,
            msg.send_ns,
            msg.send_ns,
            peer_process=peer_process,
            msg_id=msg.seq,
        )
        self._senders[msg.seq] = rec
        self.rows[SEND] += 1

    def _on_deliver(self, msg: Delivery) -> None:
        dst = msg.dst
        # What reaches a member reaches its node; the route names the client (or harness) otherwise.
        sender, _, receiver = self._send_route(msg.src, dst, msg.channel, msg.payload)
        incarnation = self.cluster.incarnation(dst) if dst >= 0 else 0
        rec = self._by_incarnation.get((receiver, incarnation))
        if rec is None:
            rec = self.recorder(receiver, dst if dst >= 0 else -1, incarnation)
        # SimNetwork.send schedules a duplicate right after its original, so its seq is the original's + 1.
        msg_id = msg.seq - 1 if msg.duplicate else msg.seq
        self._senders.pop(msg_id, None)
        t = self._now()
        rec.message(
            RECV, msg.channel.value, msg.src if msg.src >= 0 else -1, msg.payload, t, t,
            peer_process=sender, msg_id=msg_id,
        )  # fmt: skip
        self.rows[RECV] += 1

    def _on_drop(self, msg: Delivery, reason: str, now_ns: int) -> None:
        msg_id = msg.seq - 1 if msg.duplicate else msg.seq
        sender = self._senders.pop(msg_id, None)
        if reason == DROP_DOWN:
            self.down_drops += 1
            if msg.src >= 0 and msg.dst >= 0:
                self.down_drops_between_members += 1
            return
        if sender is None:  # a duplicate whose original already arrived: its sender's live incarnation
            sender, _ = self._endpoint(msg.src, msg.channel, msg.payload)
        receiver, _ = process_of(msg.dst, msg.channel, msg.payload)
        if receiver.startswith("service-"):
            receiver = f"node-{msg.dst}"
        sender.message(
            DROP, msg.channel.value, msg.dst if msg.dst >= 0 else -1, msg.payload, now_ns, now_ns,
            peer_process=receiver, msg_id=msg_id, reason=reason,
        )  # fmt: skip
        self.rows[DROP] += 1

    def _on_applied(self, row: dict[str, Any]) -> None:
        member_id = row["member_id"]
        service_id = row.get("service_id", 0)
        rec = self.recorder(service_process_name(member_id, service_id), member_id, row["incarnation"], service_id)
        rec.applied(row["entry"], row.get("time_ns", self._now()))
        self.rows["applied"] += 1

    def _on_event(self, event: dict[str, Any]) -> None:
        source = event["source"]
        t = event["time_ns"]
        if source.startswith("node-"):
            member_id = int(source[5:])
            rec = self.recorder(source, member_id, event.get("incarnation", self.cluster.incarnation(member_id)))
        else:
            rec = self.run.harness
        kind = event["kind"]
        rec.event(
            kind,
            event["member_id"],
            event.get("leadership_term_id"),
            event.get("log_position"),
            event.get("detail"),
            wall_ns=t,
            source=source,
        )
        self.rows["events"] += 1
        if kind == "commit" and (event.get("log_position") or 0) > self.highest_commit:
            self.highest_commit = event["log_position"]
        if source == "harness" and kind in ("kill", "stop"):
            self._end_incarnation(event["member_id"])

    # ------------------------------------------------------------------------------- close

    def close(self, outcome: str = "ok", extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Detach, close every file, write the committed log and run.json."""
        if self.closed:
            return self.run.meta
        self.closed = True
        self._detach()
        c = self.cluster
        highest = self.highest_commit
        for i in c.members_alive():
            highest = max(highest, c.member(i).commit_position)
        stats = c.network.stats
        sim_meta = {
            "sim": {
                "end_time_ns": c.now_ns,
                "message_digest": c.message_digest(),
                "network": {
                    "sent": {ch.value: n for ch, n in stats.sent.items()},
                    "delivered": {ch.value: n for ch, n in stats.delivered.items()},
                    "dropped": {f"{ch.value}/{reason}": n for (ch, reason), n in stats.dropped.items()},
                    "in_flight_at_close": len(c.network.in_flight()),
                },
                "recorded": dict(self.rows),
                "down_drops": self.down_drops,
                "down_drops_between_members": self.down_drops_between_members,
            }
        }
        sim_meta.update(extra or {})
        storages = {i: c.storage(i) for i in range(c.member_count)}
        # Copies of the members' disks taken before a restore from a backup hold the log's start.
        return self.run.finish(
            outcome,
            member_dirs=storages,
            commit_position=highest,
            extra=sim_meta,
            earlier_dirs=list(c.retired_storages),
            payload_refs=False,  # goldens compare the simulator's message table byte for byte
        )


def record_sim(
    cluster: Any, run_dir: Path | str, run_id: str | None = None, scenario: str = "", seed: int | None = None,
    **kwargs: Any,
) -> SimRecording:  # fmt: skip
    """Attach a recorder to ``cluster`` (see the module docstring); close the result after the run."""
    return SimRecording(cluster, run_dir, run_id, scenario, seed, **kwargs)
