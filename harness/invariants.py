"""The safety properties, one definition each, and the online checker of a running SimCluster.

Each property is a small fold over what a run produces, fed one observation at a time; ``observe``
returns the violation that observation reveals (None: none), ``violations()`` every violation seen.
The online checkers (:class:`SafetyChecker` here, clusterlab.chaos.checker) raise on the first one;
the verdict on a recorded trace (clusterlab.chaos.verify) feeds a whole run and lists them all; the
Spark check (clusterlab.golden.spark.check) is the same judgement in SQL, held equal to this one by
tests/golden/test_check.py.

* :class:`ElectionSafety`  at most one leader per term;
* :class:`MonotonicCommit`  a process's commit position never moves back;
* :class:`Agreement`       every member that applied log position P applied the same entry there and
                           reached the same service state;
* :class:`Contiguity`      each incarnation applies entries back to back from 0 (or from a snapshot).

Log matching (committed prefixes agree byte for byte) and durability (a committed entry is never
lost) need the members' logs, so only :class:`SafetyChecker` checks them, on a live SimCluster; a
trace's durability (every acknowledged op is in the committed log) is clusterlab.chaos.verify's.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from clusterlab.core.codec.framing import FRAME_ALIGNMENT

SNAPSHOT = "Snapshot"  # the applied row of a loaded snapshot: it sets where an incarnation resumes

Who = tuple[int, int]  # (member_id, incarnation)


class SafetyViolation(AssertionError):
    """A broken consensus invariant, with the evidence."""


def _who(who: Who) -> str:
    return f"{who[0]}/{who[1]}"


class ElectionSafety:
    """At most one leader per term (``leader`` events: the member that won the term)."""

    def __init__(self) -> None:
        self.leaders: dict[int, list[int]] = {}  # term -> its leaders, in the order seen

    def observe(self, term: int, member_id: int) -> str | None:
        leaders = self.leaders.setdefault(term, [])
        if member_id in leaders:
            return None
        leaders.append(member_id)
        if len(leaders) == 1:
            return None
        return f"election safety: term {term} has leaders {leaders[0]} and {member_id}"

    def violations(self) -> list[str]:
        terms = sorted(self.leaders.items())
        return [f"election safety: term {t} has leaders {sorted(m)}" for t, m in terms if len(m) > 1]

    def leaders_by_term(self) -> dict[int, int]:
        """Term -> the first member seen leading it."""
        return {term: leaders[0] for term, leaders in self.leaders.items()}


class MonotonicCommit:
    """A process's commit position never moves back within one incarnation (``commit`` events)."""

    def __init__(self) -> None:
        self.last: dict[tuple[Hashable, int], int] = {}
        self._violations: list[str] = []

    def observe(self, who: Hashable, incarnation: int, log_position: int) -> str | None:
        previous = self.last.get((who, incarnation), -1)
        self.last[(who, incarnation)] = log_position
        if log_position >= previous:
            return None
        problem = f"commit position of {who} incarnation {incarnation} moved back from {previous} to {log_position}"
        self._violations.append(problem)
        return problem

    def violations(self) -> list[str]:
        return list(self._violations)


class Agreement:
    """Every member (and incarnation) that applied log position P applied the same entry there and
    has the same service state after it. A snapshot row carries a state but no entry of its own."""

    def __init__(self) -> None:
        self.entries: dict[int, dict[bytes, list[Who]]] = {}  # position -> entry digest -> who applied it
        self.states: dict[int, dict[bytes, list[Who]]] = {}  # position -> state digest -> who had it

    def observe(
        self, log_position: int, who: Who, entry_type: str, entry_digest: bytes | None, state_digest: bytes
    ) -> str | None:
        """One applied row; ``entry_digest`` None when only the state is known (a status poll)."""
        problem = None
        if entry_type != SNAPSHOT and entry_digest is not None:
            entries = self.entries.setdefault(log_position, {})
            if entries and entry_digest not in entries:
                digest, first = next(iter(entries.items()))
                problem = (
                    f"agreement: at log position {log_position} member {_who(who)} applied entry "
                    f"{entry_digest.hex()} but member {_who(first[0])} applied {digest.hex()}"
                )
            _add(entries.setdefault(entry_digest, []), who)
        states = self.states.setdefault(log_position, {})
        if states and state_digest not in states and problem is None:
            digest, first = next(iter(states.items()))
            problem = (
                f"agreement: at log position {log_position} member {_who(who)} has state {state_digest.hex()} "
                f"but member {_who(first[0])} had {digest.hex()}"
            )
        _add(states.setdefault(state_digest, []), who)
        return problem

    def violations(self) -> list[str]:
        """One line per position where members disagree, with every state and who had it."""
        out = []
        for position in sorted(self.states.keys() | self.entries.keys()):
            states = self.states.get(position, {})
            if len(self.entries.get(position, {})) > 1 or len(states) > 1:
                parts = "; ".join(f"{d.hex()[:12]}: {','.join(_who(w) for w in ws)}" for d, ws in states.items())
                out.append(f"agreement: position {position}: states {parts}")
        return out


def _add(members: list[Who], who: Who) -> None:
    if who not in members:  # a status poll may report the same position again
        members.append(who)


class Contiguity:
    """Each incarnation applies entries back to back: an entry starts (``log_position - length``)
    where the previous one ended, the first at 0 unless a snapshot row set where it resumes."""

    def __init__(self) -> None:
        self.end: dict[Who, int] = {}
        self._violations: list[str] = []

    def observe(self, who: Who, entry_type: str, log_position: int, length: int) -> str | None:
        previous = self.end.get(who, 0)
        self.end[who] = log_position
        start = log_position - length
        if entry_type == SNAPSHOT or start == previous:
            return None
        problem = (
            f"member {who[0]} incarnation {who[1]}: entry ending at {log_position} starts at {start}, "
            f"previous ended at {previous}"
        )
        self._violations.append(problem)
        return problem

    def violations(self) -> list[str]:
        return list(self._violations)


def _raise(problem: str | None, prefix: str = "") -> None:
    if problem is not None:
        raise SafetyViolation(prefix + problem)


@dataclass
class SafetyChecker:
    """The online checker of a SimCluster: feeds events and applied rows to the properties above,
    checks log matching and durability on the live members; raises SafetyViolation at once."""

    election: ElectionSafety = field(default_factory=ElectionSafety)
    commit: MonotonicCommit = field(default_factory=MonotonicCommit)
    agreement: Agreement = field(default_factory=Agreement)
    contiguity: Contiguity = field(default_factory=Contiguity)
    committed: bytes = b""  # the longest committed log seen so far (from position 0)
    # Services with an id > 0 (several services per member): agreement and contiguity per service id,
    # since different services of one member reach different states at the same position.
    services: dict[int, tuple[Agreement, Contiguity]] = field(default_factory=dict)
    applied_rows_checked: int = 0
    applied_seen: int = 0  # rows of cluster.applied already fed
    events_seen: int = 0  # entries of cluster.events already fed (by check)

    @property
    def leaders_by_term(self) -> dict[int, int]:
        return self.election.leaders_by_term()

    def on_event(self, event: dict[str, Any]) -> None:
        """Feed every cluster event: ``leader`` events carry the term a member became leader of."""
        if event["kind"] == "leader":
            _raise(self.election.observe(event["leadership_term_id"], event["member_id"]))
        elif event["kind"] == "commit":
            member = f"member {event['member_id']}"
            _raise(self.commit.observe(member, event.get("incarnation", 0), event["log_position"]))

    def on_applied(self, member_id: int, incarnation: int, entry: Any, service_id: int = 0) -> None:
        """Feed every ``applied`` row: agreement and contiguity, among the rows of one service id."""
        self.applied_rows_checked += 1
        who = (member_id, incarnation)
        kind = str(getattr(entry.entry_type, "value", entry.entry_type))
        if service_id == 0:
            agreement, contiguity, prefix = self.agreement, self.contiguity, ""
        else:
            agreement, contiguity = self.services.setdefault(service_id, (Agreement(), Contiguity()))
            prefix = f"service {service_id}: "
        _raise(contiguity.observe(who, kind, entry.log_position, entry.length), prefix + "contiguity: ")
        _raise(agreement.observe(entry.log_position, who, kind, entry.entry_digest, entry.state_digest), prefix)

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

    def check(self, cluster: Any) -> None:
        """Feed the SimCluster's events since the last call, then :meth:`check_cluster`."""
        for event in cluster.events[self.events_seen :]:
            self.on_event(event)
        self.events_seen = len(cluster.events)
        self.check_cluster(cluster)

    def check_cluster(self, cluster: Any) -> None:
        """Check every live member of a SimCluster (and every applied row since the last check)."""
        start = self.applied_seen
        rows = getattr(cluster, "applied", [])
        for row in rows[start:]:
            self.on_applied(row["member_id"], row["incarnation"], row["entry"], row.get("service_id", 0))
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
