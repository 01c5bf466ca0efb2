"""A ClusterClient on ZeroMQ sockets, driven by blocking calls (for LocalCluster, tests, the CLI).

The client binds its response channel (a PULL socket: ``ipc://`` in the cluster directory, or
``tcp://127.0.0.1:*``) and names it in SessionConnectRequest; the cluster's node and service
processes connect to it for egress. Ingress goes out through one PUSH per member ingress endpoint,
"immediate" (a message for a member that is down is dropped, as a datagram would be, instead of
reaching it as a stale burst when it restarts); a message refused only because a fresh connection
is still being set up is retried for a moment.

``pump(timeout_s)`` is the client's duty cycle: send what was offered since the last pump, wait for
egress up to the timeout or the client's next deadline, hand egress to the ClusterClient, run its
timed work. Ingress is batched: messages offered between two pumps leave as one ZeroMQ message per
member (at most ``MAX_BATCH`` each; :meth:`ClusterConnection.flush` sends them earlier).

The ingress socket is this runtime's view of the leader's liveness (Aeron's publication connection):
ingress to the leader that cannot go because no connection to it exists (its process is gone) is
reported to the ClusterClient (``track_ingress_result``), which then waits ``new_leader_timeout_ns``
for a NewLeaderEvent and closes the client if none comes (``client.is_closed``).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import zmq
from clusterlab.core.client.client import (
    FRAGMENT_LIMIT,
    NEW_LEADER_TIMEOUT_DEFAULT_NS,
    BufferClaim,
    ClientState,
    ClusterClient,
    ControlledPollAction,
    EgressMessage,
    controlled_poll,
)
from clusterlab.core.consensus.context import SECOND, Channel
from clusterlab.core.runtime.clock import Clock
from clusterlab.core.runtime.config import ipc_path
from clusterlab.core.runtime.runner import BATCH_LIMIT
from clusterlab.core.runtime.transport import (
    MAX_BATCH,
    NO_MEMBER,
    Link,
    SocketSetup,
    batch_header,
    bind,
    drain,
    header,
    parse_batch,
)

FRESH_LINK_GRACE_NS = 300 * 1_000_000  # how long a refused send on a new link is retried
RETRY_POLL_MS = 2
_client_ids = itertools.count(os.getpid() % 1000 * 1000)


def _any_source(_src: int) -> bool:
    return True


class ClusterConnection:
    """See the module docstring. Raises what ClusterClient raises (ConnectError, ClusterTimeoutError)."""

    def __init__(
        self,
        ingress_endpoints: Mapping[int, str],
        response_endpoint: str,
        *,
        client_id: int | None = None,
        zctx: zmq.Context | None = None,
        message_timeout_ns: int = 5 * SECOND,
        keepalive_interval_ns: int | None = SECOND,
        connect_retry_interval_ns: int = 500_000_000,
        credentials: bytes = b"",
        on_challenge: Callable[[bytes], bytes] | None = None,
        ingress_setup: Callable[[int], SocketSetup | None] | None = None,
        egress_setup: SocketSetup | None = None,
        new_leader_timeout_ns: int = NEW_LEADER_TIMEOUT_DEFAULT_NS,
    ) -> None:
        """``credentials``, ``on_challenge`` and ``new_leader_timeout_ns`` (how long a session that lost
        its leader waits for a new one before the client closes; give 2 x the cluster's leader heartbeat
        timeout, as Aeron's client derives it) go to the ClusterClient (the cluster's authenticator
        checks the credentials); ``ingress_setup(member_id)`` sets the options of the ingress socket to that
        member before it connects (a secured cluster's CURVE keys, clusterlab.core.runtime.security);
        ``egress_setup`` those of the response channel before it binds (a CURVE server whose ZAP
        handler, on ``zctx``, admits the members only)."""
        self._owns_context = zctx is None
        self.zctx = zctx if zctx is not None else zmq.Context(io_threads=1)
        path = ipc_path(response_endpoint)
        if path is not None:
            path.parent.mkdir(exist_ok=True)  # the cluster's socket directory must exist already
        self.egress, self.response_channel = bind(self.zctx, zmq.PULL, response_endpoint, rcvhwm=0, setup=egress_setup)
        self._response_path: Path | None = path
        self.clock = Clock()
        self.client = ClusterClient(
            next(_client_ids) if client_id is None else client_id,
            self.response_channel,
            dict(ingress_endpoints),
            self._send,
            credentials=credentials,
            on_challenge=on_challenge,
            message_timeout_ns=message_timeout_ns,
            keepalive_interval_ns=keepalive_interval_ns,
            connect_retry_interval_ns=connect_retry_interval_ns,
            new_leader_timeout_ns=new_leader_timeout_ns,
        )
        self._ingress_setup = ingress_setup
        self._members_of: dict[str, int] = {endpoint: i for i, endpoint in ingress_endpoints.items()}
        self._links: dict[str, tuple[Link, int]] = {}  # endpoint -> (link, created_ns)
        # refused on a fresh link: (link, give_up_ns, payloads)
        self._pending: list[tuple[Link, int, list[bytes]]] = []
        self._outgoing: dict[str, list[bytes]] = {}  # endpoint -> offered since the last flush, in order
        self._head = header(Channel.INGRESS, NO_MEMBER)
        self._batch_head = batch_header(Channel.INGRESS, NO_MEMBER)
        self.messages: list[EgressMessage] = []
        self.ignored = 0
        self.dropped = 0
        self.egress_messages = 0  # ZeroMQ messages received on the response channel (each 1..MAX_BATCH)
        self.closed = False
        for endpoint in ingress_endpoints.values():
            self._link(endpoint)

    # ------------------------------------------------------------------ ingress
    def _link(self, endpoint: str) -> tuple[Link, int]:
        entry = self._links.get(endpoint)
        if entry is None:
            member_id = self._members_of.get(endpoint)
            setup = None if self._ingress_setup is None or member_id is None else self._ingress_setup(member_id)
            link = Link(self.zctx, endpoint, sndhwm=10_000, immediate=True, setup=setup)
            entry = (link, self.clock.now_ns())
            self._links[endpoint] = entry
        return entry

    def _send(self, member_id: int, payload: bytes) -> None:
        endpoint = self.client.ingress_endpoint(member_id)
        if endpoint is None:
            self.dropped += 1
            return
        if self._members_of.get(endpoint) != member_id:
            self._members_of[endpoint] = member_id
        queue = self._outgoing.get(endpoint)
        if queue is None:
            queue = self._outgoing[endpoint] = []
        queue.append(payload)
        if len(queue) >= MAX_BATCH:
            self.flush()

    def flush(self) -> None:
        """Send what was offered since the last flush (``pump`` does this first)."""
        outgoing, self._outgoing = self._outgoing, {}
        for endpoint, payloads in outgoing.items():
            link, created_ns = self._link(endpoint)
            if self._pending or not self._send_now(link, payloads):
                now = self.clock.now_ns()
                if now - created_ns < FRESH_LINK_GRACE_NS or self._pending:
                    self._pending.append((link, max(now, created_ns) + FRESH_LINK_GRACE_NS, payloads))
                else:
                    self._not_connected(link, len(payloads), now)

    def _send_now(self, link: Link, payloads: list[bytes]) -> bool:
        if len(payloads) == 1:
            return link.send(self._head, payloads[0])
        return link.send_batch(self._batch_head, payloads)

    def _retry_pending(self, now_ns: int) -> None:
        pending, self._pending = self._pending, []
        for i, (link, give_up_ns, payloads) in enumerate(pending):
            if self._send_now(link, payloads):
                continue
            if now_ns < give_up_ns:
                self._pending = pending[i:]  # keep order: stop at the first that still cannot go
                return
            self._not_connected(link, len(payloads), now_ns)

    def _not_connected(self, link: Link, count: int, now_ns: int) -> None:
        """``count`` messages to ``link`` dropped: it has no connection (its member's process is gone).
        For the leader's link that is Aeron's ``Publication.NOT_CONNECTED``: the client awaits a new leader."""
        self.dropped += count
        if self._members_of.get(link.endpoint) == self.client.leader_member_id:
            self.client.track_ingress_result(False, now_ns)

    # ------------------------------------------------------------------ duty cycle
    def pump(self, timeout_s: float = 0.0) -> int:
        """Wait up to ``timeout_s`` (less if the client has timed work or sends to retry) for egress,
        handle it and run the client's timed work. Returns the number of egress messages handled."""
        if self._outgoing:
            self.flush()
        now = self.clock.now_ns()
        wait_ns = int(timeout_s * 1e9)
        deadline = self.client.next_deadline_ns()
        if deadline is not None:
            wait_ns = min(wait_ns, deadline - now)
        wait_ms = max(0, (wait_ns + 999_999) // 1_000_000)
        if self._pending:
            wait_ms = min(wait_ms, RETRY_POLL_MS)
        n = 0
        if self.egress.poll(wait_ms):
            now = self.clock.now_ns()
            on_egress_batch = self.client.on_egress_batch
            for frames in drain(self.egress, BATCH_LIMIT):
                parsed = parse_batch(frames, Channel.EGRESS, _any_source)
                if isinstance(parsed, str):
                    self.ignored += 1
                    continue
                on_egress_batch(parsed[1], now)
                n += len(parsed[1])
                self.egress_messages += 1
            self.messages.extend(self.client.poll())
        now = self.clock.now_ns()
        if self._pending:
            self._retry_pending(now)
        self.client.do_work(now)
        return n

    def run_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Pump until ``predicate()`` holds or ``timeout_s`` passes; returns whether it held."""
        end = time.monotonic() + timeout_s
        while not predicate():
            remaining = end - time.monotonic()
            if remaining <= 0:
                return predicate()
            self.pump(min(remaining, 0.05))
        return True

    def connect(self, timeout_s: float) -> None:
        """Open a session (raises ConnectError, ClusterTimeoutError, or TimeoutError). A connect that
        timed out here before is still in progress: wait for it rather than start another (which the
        client refuses), so a caller can retry with short timeouts while the cluster elects."""
        if self.client.state is not ClientState.CONNECTING:
            self.client.connect(self.clock.now_ns())
        if not self.run_until(lambda: self.client.is_connected, timeout_s):
            raise TimeoutError(f"no session within {timeout_s} s: {self.client.describe()}")

    def offer(self, payload: bytes, *, request_id: int | None = None) -> int:
        """Offer ``payload`` to the leader (sent on the next pump); ``request_id``: keep it outstanding
        until acknowledged, resent on a NewLeaderEvent (:meth:`ClusterClient.offer`)."""
        return self.client.offer(payload, self.clock.now_ns(), request_id=request_id)

    def try_claim(self, length: int, *, request_id: int | None = None) -> BufferClaim:
        """Reserve an ingress message of ``length`` bytes to fill and commit (sent on the next pump) or
        abort (:meth:`ClusterClient.try_claim`; Aeron's ``AeronCluster.tryClaim``)."""
        return self.client.try_claim(length, self.clock.now_ns(), request_id=request_id)

    def take_messages(self) -> list[EgressMessage]:
        messages, self.messages = self.messages, []
        return messages

    def controlled_poll(
        self, handler: Callable[[EgressMessage], ControlledPollAction], fragment_limit: int = FRAGMENT_LIMIT
    ) -> int:
        """Hand received messages (those :meth:`take_messages` would return), oldest first, to ``handler``
        and keep what it did not consume: ABORT leaves the message for the next call, BREAK stops after
        it (:func:`clusterlab.core.client.controlled_poll`; Aeron's ``controlledPollEgress``). Call
        :meth:`pump` to receive; returns how many were consumed."""
        return controlled_poll(self.messages, handler, fragment_limit)

    def close(self) -> None:
        """Close the session (if open) and the sockets. Idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.client.is_connected:
                self.client.close(self.clock.now_ns())
            self.flush()
            self._retry_pending(self.clock.now_ns())
        finally:
            for link, _created in self._links.values():
                link.close(100)  # let the SessionCloseRequest leave
            self.egress.close(0)
            if self._owns_context:
                self.zctx.term()
            if self._response_path is not None:
                self._response_path.unlink(missing_ok=True)
