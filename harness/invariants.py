"""Safety invariants checked against a running SimCluster (and later against traces).

Election safety (at most one leader per term), log matching (committed prefixes agree byte for
byte), monotonic commit, and durability (a committed entry is never lost). The checker samples
members after every fault and at the end; it keeps the longest committed log it has seen and
checks every member's committed prefix against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.codec.framing import FRAME_ALIGNMENT


class SafetyViolation(AssertionError):
    """A broken consensus invariant, with the evidence."""


@dataclass
class SafetyChecker:
    """Collects leader events and committed log bytes; raises SafetyViolation on a broken invariant."""

    leaders_by_term: dict[int, int] = field(default_factory=dict)
    committed: bytes = b""  # the longest committed log seen so far (from position 0)
    last_commit: dict[tuple[int, int], int] = field(default_factory=dict)  # (member, incarnation) -> commit

    def on_event(self, event: dict[str, Any]) -> None:
        """Feed every cluster event: ``leader`` events carry the term a member became leader of."""
        if event["kind"] == "leader":
            term = event["leadership_term_id"]
            member = event["member_id"]
            other = self.leaders_by_term.setdefault(term, member)
            if other != member:
                raise SafetyViolation(f"election safety: term {term} has leaders {other} and {member}")
        elif event["kind"] == "commit":
            key = (event["member_id"], event.get("incarnation", 0))
            pos = event["log_position"]
            prev = self.last_commit.get(key, -1)
            if pos < prev:
                raise SafetyViolation(f"commit position of member {key[0]} went back from {prev} to {pos}")
            self.last_commit[key] = pos

    def check_member(self, member_id: int, commit_position: int, read: Any) -> None:
        """Check one live member's committed prefix [0, commit_position) against what we know."""
        if commit_position <= 0:
            return
        common = min(commit_position, len(self.committed))
        mine = read(0, commit_position)
        if len(mine) != commit_position:
            raise SafetyViolation(
                f"durability: member {member_id} commit {commit_position} but only {len(mine)} bytes recorded"
            )
        if mine[:common] != self.committed[:common]:
            first = next(i for i in range(common) if mine[i] != self.committed[i])
            raise SafetyViolation(
                f"log matching: member {member_id} differs from the committed log at byte {first} "
                f"(frame at {first - first % FRAME_ALIGNMENT}) within its commit position {commit_position}"
            )
        if commit_position > len(self.committed):
            self.committed = mine

    def check_cluster(self, cluster: Any) -> None:
        """Check every live member of a SimCluster."""
        for member_id in cluster.members_alive():
            m = cluster.member(member_id)
            self.check_member(member_id, m.commit_position, m.archive.read)

    def check_durable(self, cluster: Any) -> None:
        """At the end, with every member up and converged: the committed log is a prefix of each log."""
        for member_id in cluster.members_alive():
            m = cluster.member(member_id)
            have = m.archive.stop_position
            if have < len(self.committed):
                raise SafetyViolation(
                    f"durability: member {member_id} holds {have} bytes, committed log is {len(self.committed)}"
                )
            self.check_member(member_id, len(self.committed), m.archive.read)
