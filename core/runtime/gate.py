"""The chaos gate: every member-to-member message a node sends passes through it.

Rules are per directed link (this member -> ``dst``): drop a fraction of the messages (``loss_ppm``,
1_000_000 = a partition) and hold the rest back ``delay_ns``. The harness sets them over the
control socket (``GateRule``); a partition of the cluster is a set of rules on every member. Held
messages leave in due order (``pop_due``) and the duty cycle wakes up for the next one
(``next_due_ns``). Dropped messages are counted per link; ``admit`` tells a drop (``last_dropped``)
from a hold, so that the node records a ``drop`` row (reason ``gate``) for the first and a ``send``
when the second leaves. Randomness comes from a seeded ``random.Random``.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from clusterlab.core.consensus.context import Channel

PPM = 1_000_000
NEVER_NS = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LinkRule:
    loss_ppm: int = 0
    delay_ns: int = 0

    @property
    def is_clear(self) -> bool:
        return self.loss_ppm == 0 and self.delay_ns == 0

    def describe(self) -> str:
        return f"LinkRule(loss={self.loss_ppm / PPM:.6g} delay={self.delay_ns / 1e6:g}ms)"


class ChaosGate:
    """See the module docstring. ``admit`` decides one message: True = send now."""

    def __init__(self, member_id: int, rng: random.Random) -> None:
        self.member_id = member_id
        self._rng = rng
        self.rules: dict[int, LinkRule] = {}
        self.dropped: dict[int, int] = {}
        self.delayed_count = 0
        self._held: list[tuple[int, int, int, Channel, bytes]] = []  # (due, seq, dst, channel, payload)
        self._seq = 0
        self.last_dropped = False  # whether the last admit() that returned False dropped (else held)

    @property
    def dropped_count(self) -> int:
        return sum(self.dropped.values())

    def set_rule(self, dst: int, rule: LinkRule, peers: list[int]) -> None:
        """``dst`` -1 sets the rule for every peer (and clears everything when the rule is clear)."""
        targets = peers if dst == -1 else [dst]
        for d in targets:
            if rule.is_clear:
                self.rules.pop(d, None)
            else:
                self.rules[d] = rule

    def admit(self, dst: int, channel: Channel, payload: bytes, now_ns: int) -> bool:
        """True: send now. False: dropped, or held until its due time."""
        rule = self.rules.get(dst)
        if rule is None:
            return True
        if rule.loss_ppm and (rule.loss_ppm >= PPM or self._rng.randrange(PPM) < rule.loss_ppm):
            self.dropped[dst] = self.dropped.get(dst, 0) + 1
            self.last_dropped = True
            return False
        if rule.delay_ns:
            self._seq += 1
            heapq.heappush(self._held, (now_ns + rule.delay_ns, self._seq, dst, channel, payload))
            self.delayed_count += 1
            self.last_dropped = False
            return False
        return True

    def next_due_ns(self) -> int:
        return self._held[0][0] if self._held else NEVER_NS

    def pop_due(self, now_ns: int) -> list[tuple[int, Channel, bytes]]:
        out = []
        held = self._held
        while held and held[0][0] <= now_ns:
            _due, _seq, dst, channel, payload = heapq.heappop(held)
            out.append((dst, channel, payload))
        return out

    def describe(self) -> str:
        rules = ", ".join(f"->{d}: {r.describe()}" for d, r in sorted(self.rules.items())) or "none"
        return f"ChaosGate(member={self.member_id} rules=[{rules}] dropped={self.dropped_count} held={len(self._held)})"
