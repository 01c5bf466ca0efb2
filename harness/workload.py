"""Client workloads for the simulator: drive a sample service and keep a Jepsen-style history.

``KvWorkload`` puts unique keys (``k<n> = v<n>``), so durability is a simple question: every put
that got an ``ok`` reply must be in every member's final state. A put without a reply has an
unknown outcome (``info``) and may or may not be applied; a put is never applied twice because
each key is written once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusterlab.harness.services.kv import decode_reply, put


@dataclass
class KvWorkload:
    """Puts through one client at a time, reconnecting when the session is lost."""

    cluster: Any
    next_id: int = 0
    acked: dict[int, str] = field(default_factory=dict)  # request id -> value acknowledged
    invoked: int = 0
    reconnects: int = 0
    _client: Any = None
    _seen_replies: int = 0

    def _ensure_client(self) -> Any:
        c = self._client
        if c is None or c.client.is_closed or c.errors:
            if c is not None:
                self._drain(c)
                self.reconnects += 1
            c = self.cluster.add_client()
            c.client.connect(self.cluster.now_ns)
            self._client = c
            self._seen_replies = 0
        return c

    def _drain(self, c: Any) -> None:
        for msg in c.received[self._seen_replies :]:
            try:
                reply = decode_reply(msg.payload)
            except ValueError:
                continue
            if reply.get("ok") and isinstance(reply.get("id"), int):
                self.acked[reply["id"]] = f"v{reply['id']}"
        self._seen_replies = len(c.received)

    def step(self, count: int) -> None:
        """Offer up to ``count`` puts (only while connected) and collect replies."""
        c = self._ensure_client()
        self._drain(c)
        if not c.client.is_connected:
            return
        for _ in range(count):
            self.next_id += 1
            c.client.offer(put(self.next_id, f"k{self.next_id}", f"v{self.next_id}"), self.cluster.now_ns)
            self.invoked += 1

    def collect(self) -> None:
        if self._client is not None:
            self._drain(self._client)

    def check_durable(self, entries_of_member: dict[int, dict[str, Any]]) -> None:
        """Every acknowledged put is in every member's state (``entries`` maps key -> (value, rev))."""
        self.collect()
        for member_id, entries in entries_of_member.items():
            for request_id, value in self.acked.items():
                got = entries.get(f"k{request_id}")
                got_value = got[0] if isinstance(got, (tuple, list)) else got
                if got_value != value:
                    raise AssertionError(
                        f"durability: acknowledged put k{request_id}={value} is {got_value!r} on member {member_id}"
                    )
