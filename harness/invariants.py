"""Safety invariants checked against a running SimCluster (and later against traces).

Election safety (at most one leader per term), log matching (committed prefixes agree byte for
byte), monotonic commit, and durability (a committed entry is never lost). The checker samples
members after every fault and at the end; it keeps the longest committed log it has seen and
checks every member's committed prefix against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusterlab.core.codec.framing import FRAME_ALIGNMENT


class SafetyViolation(AssertionError):
    """A broken consensus invariant, with the evidence."""


@dataclass
class SafetyChecker:
    """Collects leader events and committed log bytes; raises SafetyViolation on a broken invariant."""

    leaders_by_term: dict[int, int] = field(default_factory=dict)
    committed: bytes = b""  # the longest committed log seen so far (from position 0)
    last_commit: dict[tuple[int, int], int] = field(default_factory=dict)  # (member, incarnation) -> commit
    # log position -> (entry digest, state digest, who first applied it): agreement of services
    digests_at: dict[int, tuple[bytes, bytes, tuple[int, int]]] = field(default_factory=dict)
    applied_end: dict[tuple[int, int], int] = field(default_factory=dict)  # (member, incarnation) -> last end
    applied_rows_checked: int = 0
    applied_seen: int = 0  # rows of cluster.applied already fed

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

    def on_applied(self, member_id: int, incarnation: int, entry: Any) -> None:
        """Feed every ``applied`` row: agreement (same entry and state digest at a position on every
        member and incarnation) and contiguity (each incarnation applies positions in order, no gaps)."""
        self.applied_rows_checked += 1
        key = (member_id, incarnation)
        kind = str(getattr(entry.entry_type, "value", entry.entry_type))
        if kind == "Snapshot":
            self.applied_end[key] = entry.log_position
        else:
            start = entry.log_position - entry.length
            prev = self.applied_end.get(key)
            if prev is not None and start != prev:
                raise SafetyViolation(
                    f"contiguity: member {member_id} incarnation {incarnation} applied an entry at {start} "
                    f"after reaching {prev}"
                )
            self.applied_end[key] = entry.log_position
        seen = self.digests_at.get(entry.log_position)
        if seen is None:
            self.digests_at[entry.log_position] = (entry.entry_digest, entry.state_digest, key)
            return
        if kind != "Snapshot" and seen[0] != entry.entry_digest:
            raise SafetyViolation(
                f"agreement: at log position {entry.log_position} member {member_id}/{incarnation} applied "
                f"entry {entry.entry_digest.hex()} but member {seen[2][0]}/{seen[2][1]} applied {seen[0].hex()}"
            )
        if seen[1] != entry.state_digest:
            raise SafetyViolation(
                f"agreement: at log position {entry.log_position} member {member_id}/{incarnation} has state "
                f"{entry.state_digest.hex()} but member {seen[2][0]}/{seen[2][1]} had {seen[1].hex()}"
            )

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
        """Check every live member of a SimCluster (and every applied row since the last check)."""
        start = self.applied_seen
        rows = getattr(cluster, "applied", [])
        for row in rows[start:]:
            self.on_applied(row["member_id"], row["incarnation"], row["entry"])
        self.applied_seen = len(rows)
        for member_id in cluster.members_alive():
            m = cluster.member(member_id)
            # A member restored from a snapshot may hold less log than its commit position when a
            # fault truncated its recording below the snapshot; compare what it does hold.
            self.check_member(member_id, min(m.commit_position, m.archive.stop_position), m.archive.read)

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
