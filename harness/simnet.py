"""The simulator's clock and network: virtual time and a seeded, lossy, partitionable message fabric.

Every random decision (latency, loss, duplication, reordering) is drawn from the one
``random.Random`` handed to :class:`SimNetwork`, in the order messages are sent, so the same seed
and the same sends give the same deliveries, byte for byte. :attr:`SimNetwork.digest` hashes every
delivery so two runs can be compared with one string.

Ordering model: ZeroMQ (like an Aeron publication) delivers the messages of one connection in
order, so by default each directed (src, dst, channel) link is FIFO: a message never arrives before
one sent earlier on the same link, even when its latency draw is smaller. ``reorder_probability``
lets a message escape that rule and take an extra random delay, so later messages overtake it.

Ids >= 0 are members. Negative ids (clients, the harness) are not subject to partition groups; use
:meth:`SimNetwork.block` or :meth:`SimNetwork.isolate` to cut them off.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import struct
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from clusterlab.core.consensus.context import MS, Channel

NEVER_NS = (1 << 63) - 1  # "no deadline": later than any reachable virtual time

# Drop reasons, the values counted in NetworkStats.dropped and passed to on_drop hooks.
DROP_LOSS = "loss"
DROP_PARTITION = "partition"
DROP_ISOLATED = "isolated"
DROP_BLOCKED = "blocked"
DROP_DOWN = "down"  # the destination is not running (killed/stopped), or was when the message was in flight


class VirtualClock:
    """Simulated time in nanoseconds. Only moves forward."""

    __slots__ = ("_now_ns",)

    def __init__(self, start_ns: int = 0) -> None:
        self._now_ns = start_ns

    @property
    def now_ns(self) -> int:
        return self._now_ns

    def advance_to(self, t_ns: int) -> None:
        """Move to ``t_ns``; moving backwards is a harness bug, so it raises."""
        if t_ns < self._now_ns:
            raise ValueError(f"virtual clock cannot go backwards: {t_ns} < {self._now_ns}")
        self._now_ns = t_ns


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Network behaviour applied to every link without an override (see SimNetwork.set_link).

    Latency is uniform in [min_latency_ns, max_latency_ns]. A reordered message gets an extra
    uniform delay in [0, reorder_delay_ns] and is exempt from per-link FIFO ordering."""

    min_latency_ns: int = 1 * MS
    max_latency_ns: int = 5 * MS
    loss_probability: float = 0.0
    duplicate_probability: float = 0.0
    reorder_probability: float = 0.0
    reorder_delay_ns: int = 20 * MS

    def __post_init__(self) -> None:
        if not 0 <= self.min_latency_ns <= self.max_latency_ns:
            raise ValueError(f"need 0 <= min_latency_ns <= max_latency_ns, got {self!r}")
        for name in ("loss_probability", "duplicate_probability", "reorder_probability"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        if self.reorder_delay_ns < 0:
            raise ValueError(f"reorder_delay_ns must be >= 0, got {self.reorder_delay_ns}")


@dataclass(frozen=True, slots=True)
class LinkOverride:
    """A flaky directed link: replaces the config's loss and/or latency for src -> dst."""

    loss_probability: float | None = None
    min_latency_ns: int | None = None
    max_latency_ns: int | None = None


@dataclass(slots=True)
class Delivery:
    """One message on the wire. ``seq`` is unique per network and orders deliveries due at the same
    time; ``deliver_ns`` is when it arrives (or would have, for a message dropped at send).

    Treat it as immutable. It is not ``frozen`` because a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``: six times slower, and one is made for every message."""

    seq: int
    send_ns: int
    deliver_ns: int
    src: int
    dst: int
    channel: Channel
    payload: bytes
    duplicate: bool = False

    def describe(self) -> str:
        dup = " dup" if self.duplicate else ""
        return (
            f"#{self.seq} {self.src}->{self.dst} {self.channel.value} {len(self.payload)}B "
            f"sent={self.send_ns} at={self.deliver_ns}{dup}"
        )


@dataclass
class NetworkStats:
    """Counts per channel. ``dropped`` is keyed by (channel, reason)."""

    sent: Counter[Channel] = field(default_factory=Counter)
    delivered: Counter[Channel] = field(default_factory=Counter)
    duplicated: Counter[Channel] = field(default_factory=Counter)
    reordered: Counter[Channel] = field(default_factory=Counter)
    dropped: Counter[tuple[Channel, str]] = field(default_factory=Counter)

    def dropped_total(self, reason: str | None = None, channel: Channel | None = None) -> int:
        return sum(
            n
            for (ch, r), n in self.dropped.items()
            if (reason is None or r == reason) and (channel is None or ch == channel)
        )


SendHook = Callable[[Delivery], None]
DeliverHook = Callable[[Delivery], None]
DropHook = Callable[[Delivery, str, int], None]  # (message, reason, now_ns)

_DIGEST_HEADER = struct.Struct("<qhhI")  # deliver_ns, src, dst, payload length
_CHANNEL_BYTES = {ch: ch.value.encode() + b"\0" for ch in Channel}


class SimNetwork:
    """A deterministic message fabric between integer endpoints.

    Cuts (partition, isolate, block, down) are checked when a message is sent and again when it is
    due, so a partition also drops what was in flight across it. Recorder hooks: ``on_send`` once
    per :meth:`send` call (the sender's ``send`` row), ``on_deliver`` per arriving copy (the
    receiver's ``recv`` row), ``on_drop`` per copy dropped with its reason."""

    def __init__(self, rng: random.Random, config: NetworkConfig | None = None) -> None:
        self._rng = rng
        self.config = config or NetworkConfig()
        self.stats = NetworkStats()
        self.on_send: list[SendHook] = []
        self.on_deliver: list[DeliverHook] = []
        self.on_drop: list[DropHook] = []
        self._heap: list[tuple[int, int, Delivery]] = []
        self._seq = 0
        self._delivered_count = 0
        self._fifo_tail_ns: dict[tuple[int, int, Channel], int] = {}
        self._digest = hashlib.sha256()
        # Faults. _faulty short-circuits the cut checks on the common, fault-free path.
        self._group_of: dict[int, int] | None = None
        self._groups: list[list[int]] = []
        self._isolated: set[int] = set()
        self._blocked: set[tuple[int, int]] = set()
        self._down: set[int] = set()
        self._links: dict[tuple[int, int], LinkOverride] = {}
        self._duplicated: dict[tuple[int, int], tuple[int, int]] = {}  # see duplicate_link
        self._faulty = False

    # ----------------------------------------------------------------------------- sending

    def send(self, now_ns: int, src: int, dst: int, channel: Channel, payload: bytes) -> None:
        """Schedule ``payload`` for delivery at ``now_ns`` + latency, or drop it."""
        reason = self._cut_reason(src, dst) if self._faulty else None
        if reason is None:
            loss = self.config.loss_probability
            if self._links:
                link = self._links.get((src, dst))
                if link is not None and link.loss_probability is not None:
                    loss = link.loss_probability
            if loss > 0.0 and self._rng.random() < loss:
                reason = DROP_LOSS
        # A dropped message still gets a seq and an arrival time (for the trace) but must not hold
        # back later messages on its link, so it does not touch the FIFO tail.
        msg = self._schedule(now_ns, src, dst, channel, payload, duplicate=False, fifo=reason is None)
        self.stats.sent[channel] += 1
        for hook in self.on_send:
            hook(msg)
        if reason is not None:
            self._drop(msg, reason, now_ns)
            return
        self._enqueue(msg)
        dup = self.config.duplicate_probability
        if dup > 0.0 and self._rng.random() < dup:
            copy = self._schedule(now_ns, src, dst, channel, payload, duplicate=True, fifo=True)
            self.stats.duplicated[channel] += 1
            self._enqueue(copy)
        elif self._duplicated and (lag := self._duplicated.get((src, dst))) is not None:
            self._send_copy(msg, lag)

    def _send_copy(self, msg: Delivery, lag: tuple[int, int]) -> None:
        """A second copy of ``msg`` (sequence number: the original's + 1), arriving ``lag`` (a range) after
        it and outside the link's FIFO order: messages sent later may arrive before the copy."""
        lo, hi = lag
        deliver_ns = msg.deliver_ns + lo + (int(self._rng.random() * (hi - lo + 1)) if hi > lo else 0)
        seq = self._seq
        self._seq = seq + 1
        copy = Delivery(seq, msg.send_ns, deliver_ns, msg.src, msg.dst, msg.channel, msg.payload, True)
        self.stats.duplicated[msg.channel] += 1
        self._enqueue(copy)

    def _schedule(
        self, now_ns: int, src: int, dst: int, channel: Channel, payload: bytes, duplicate: bool, fifo: bool
    ) -> Delivery:
        """Draw this copy's arrival time and give it a sequence number."""
        cfg = self.config
        lo, hi = cfg.min_latency_ns, cfg.max_latency_ns
        if self._links:
            link = self._links.get((src, dst))
            if link is not None:
                lo = link.min_latency_ns if link.min_latency_ns is not None else lo
                hi = link.max_latency_ns if link.max_latency_ns is not None else hi
        rng = self._rng
        # random() * span is several times faster than randint and just as deterministic.
        deliver_ns = now_ns + lo + (int(rng.random() * (hi - lo + 1)) if hi > lo else 0)
        if fifo:
            if cfg.reorder_probability > 0.0 and rng.random() < cfg.reorder_probability:
                deliver_ns += int(rng.random() * (cfg.reorder_delay_ns + 1))
                self.stats.reordered[channel] += 1
            else:
                key = (src, dst, channel)
                tail = self._fifo_tail_ns.get(key, 0)
                if deliver_ns < tail:
                    deliver_ns = tail  # FIFO per link; equal times are ordered by seq
                self._fifo_tail_ns[key] = deliver_ns
        seq = self._seq
        self._seq = seq + 1
        return Delivery(seq, now_ns, deliver_ns, src, dst, channel, payload, duplicate)

    def _enqueue(self, msg: Delivery) -> None:
        heapq.heappush(self._heap, (msg.deliver_ns, msg.seq, msg))

    # ----------------------------------------------------------------------------- delivering

    def next_delivery_ns(self) -> int:
        """When the earliest queued message is due, or NEVER_NS."""
        return self._heap[0][0] if self._heap else NEVER_NS

    def pop_due(self, now_ns: int) -> list[Delivery]:
        """Every message due at or before ``now_ns``, in (deliver_ns, seq) order, minus those a cut
        now drops. Each returned message is counted, hashed into the digest and passed to hooks."""
        heap = self._heap
        if not heap or heap[0][0] > now_ns:
            return []
        out: list[Delivery] = []
        faulty = self._faulty
        digest_update = self._digest.update
        delivered = self.stats.delivered
        hooks = self.on_deliver
        while heap and heap[0][0] <= now_ns:
            msg = heapq.heappop(heap)[2]
            if faulty:
                reason = self._cut_reason(msg.src, msg.dst)
                if reason is not None:
                    self._drop(msg, reason, now_ns)
                    continue
            digest_update(_DIGEST_HEADER.pack(msg.deliver_ns, msg.src, msg.dst, len(msg.payload)))
            digest_update(_CHANNEL_BYTES[msg.channel])
            digest_update(msg.payload)
            delivered[msg.channel] += 1
            self._delivered_count += 1
            for hook in hooks:
                hook(msg)
            out.append(msg)
        return out

    def in_flight(self) -> list[Delivery]:
        """Queued messages in delivery order (for debugging and tests)."""
        return [entry[2] for entry in sorted(self._heap)]

    @property
    def delivered_count(self) -> int:
        return self._delivered_count

    @property
    def digest(self) -> str:
        """SHA-256 (hex) over every delivery so far: time, src, dst, channel, payload."""
        return self._digest.hexdigest()

    # ----------------------------------------------------------------------------- faults

    def partition(self, groups: Iterable[Iterable[int]]) -> None:
        """Two-way partition: members talk only within their group. Members (ids >= 0) listed in no
        group are isolated from everyone. Replaces any earlier partition; blocks stay."""
        group_of: dict[int, int] = {}
        normalized: list[list[int]] = []
        for index, group in enumerate(groups):
            members = sorted(set(group))
            for m in members:
                if m in group_of:
                    raise ValueError(f"member {m} is in two partition groups")
                group_of[m] = index
            normalized.append(members)
        self._group_of = group_of
        self._groups = normalized
        self._refresh_faulty()

    @property
    def partition_groups(self) -> list[list[int]] | None:
        return [list(g) for g in self._groups] if self._group_of is not None else None

    def isolate(self, member: int) -> None:
        """Cut ``member`` off from every other endpoint, both ways (composes with partitions)."""
        self._isolated.add(member)
        self._refresh_faulty()

    def block(self, src: int, dst: int) -> None:
        """One-way cut: drop everything src sends to dst; dst -> src still flows."""
        self._blocked.add((src, dst))
        self._refresh_faulty()

    def unblock(self, src: int, dst: int) -> None:
        self._blocked.discard((src, dst))
        self._refresh_faulty()

    def set_link(
        self,
        src: int,
        dst: int,
        *,
        loss: float | None = None,
        latency_ns: int | tuple[int, int] | None = None,
    ) -> None:
        """Make the directed link src -> dst flaky: its own loss probability and/or latency (a fixed
        value or a (min, max) range). ``None`` keeps the network default for that property."""
        lo = hi = None
        if isinstance(latency_ns, tuple):
            lo, hi = latency_ns
        elif latency_ns is not None:
            lo = hi = latency_ns
        if lo is not None and hi is not None and not 0 <= lo <= hi:
            raise ValueError(f"bad latency range {latency_ns!r}")
        if loss is not None and not 0.0 <= loss <= 1.0:
            raise ValueError(f"loss must be in [0, 1], got {loss}")
        self._links[(src, dst)] = LinkOverride(loss, lo, hi)

    def clear_link(self, src: int, dst: int) -> None:
        self._links.pop((src, dst), None)

    def duplicate_link(self, src: int, dst: int, lag_ns: tuple[int, int] | None = (1 * MS, 20 * MS)) -> None:
        """Deliver every message src sends to dst twice: the copy ``lag_ns`` (a (min, max) range) after the
        original, outside the link's FIFO order. ``None`` stops it. Not undone by :meth:`heal`; the rng is
        drawn only for the copies, so a network without duplicated links draws as before."""
        if lag_ns is None:
            self._duplicated.pop((src, dst), None)
        elif not 0 <= lag_ns[0] <= lag_ns[1]:
            raise ValueError(f"bad lag range {lag_ns!r}")
        else:
            self._duplicated[(src, dst)] = lag_ns

    def heal(self) -> None:
        """Back to a healthy network: no partition, isolation, blocks or flaky links. Down members
        stay down (that is process state, not network state)."""
        self._group_of = None
        self._groups = []
        self._isolated.clear()
        self._blocked.clear()
        self._links.clear()
        self._refresh_faulty()

    def mark_down(self, member: int, now_ns: int) -> int:
        """The process at ``member`` died or stopped: drop what is in flight to it and everything
        sent to it until :meth:`mark_up`. Returns how many in-flight messages were dropped."""
        self._down.add(member)
        self._refresh_faulty()
        return self.drop_all_to(member, now_ns, DROP_DOWN)

    def mark_up(self, member: int) -> None:
        self._down.discard(member)
        self._refresh_faulty()

    def is_down(self, member: int) -> bool:
        return member in self._down

    def drop_all_to(self, member: int, now_ns: int, reason: str = DROP_DOWN) -> int:
        """Drop every in-flight message addressed to ``member``; returns the count."""
        return self._drop_where(lambda m: m.dst == member, reason, now_ns)

    def drop_all_from(self, member: int, now_ns: int, reason: str = DROP_DOWN) -> int:
        """Drop every in-flight message sent by ``member``; returns the count."""
        return self._drop_where(lambda m: m.src == member, reason, now_ns)

    def _drop_where(self, pred: Callable[[Delivery], bool], reason: str, now_ns: int) -> int:
        keep: list[tuple[int, int, Delivery]] = []
        dropped: list[Delivery] = []
        for entry in self._heap:
            if pred(entry[2]):
                dropped.append(entry[2])
            else:
                keep.append(entry)
        if not dropped:
            return 0
        heapq.heapify(keep)
        self._heap = keep
        # Report in delivery order so hooks (and traces) are deterministic.
        for msg in sorted(dropped, key=lambda m: (m.deliver_ns, m.seq)):
            self._drop(msg, reason, now_ns)
        return len(dropped)

    def _drop(self, msg: Delivery, reason: str, now_ns: int) -> None:
        self.stats.dropped[(msg.channel, reason)] += 1
        for hook in self.on_drop:
            hook(msg, reason, now_ns)

    def _cut_reason(self, src: int, dst: int) -> str | None:
        if dst in self._down:
            return DROP_DOWN
        if src == dst:
            return None  # loopback is never cut
        if (src, dst) in self._blocked:
            return DROP_BLOCKED
        if src in self._isolated or dst in self._isolated:
            return DROP_ISOLATED
        group_of = self._group_of
        if group_of is not None and src >= 0 and dst >= 0:
            g = group_of.get(src)
            if g is None or g != group_of.get(dst):
                return DROP_PARTITION
        return None

    def _refresh_faulty(self) -> None:
        self._faulty = bool(self._group_of is not None or self._isolated or self._blocked or self._down)
