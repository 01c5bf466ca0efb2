"""The safety properties, one definition each, and the online checker of a running SimCluster.

Each property is a small fold over what a run produces, fed one observation at a time; ``observe``
returns the violation that observation reveals (None: none), ``violations()`` every violation seen.
The online checkers (:class:`SafetyChecker` here, clusterlab.chaos.checker) raise on the first one;
the trace checks (clusterlab.chaos.checks) judge a recorded run in SQL, on DuckDB or Spark. Where a
property has both forms, :func:`fold_recorded_run` feeds a recorded run to these folds, and
tests/golden/test_folds.py and tests/chaos/test_protocol_checks.py hold the two to the same verdicts and
first positions on clean and planted traces.

* :class:`ElectionSafety`  at most one leader per term;
* :class:`MonotonicCommit`  a process's commit position never moves back;
* :class:`Agreement`       every member that applied log position P applied the same entry there and
                           reached the same service state;
* :class:`Contiguity`      each incarnation applies entries back to back from 0 (or from a snapshot);
* :class:`VoteSafety`      no YES vote to a less recent log, one YES vote per voter and term (across restarts);
* :class:`LeaderViews`     one leader per term in every member's view;
* :class:`TimersAndCloses` Timer/SessionClose entries at the same positions and bytes on every member.

The last three are the online forms of the protocol checks (clusterlab.chaos.checks.protocol), which judge a
recorded trace in SQL.

Log matching (committed prefixes agree byte for byte) and durability (a committed entry is never
lost) need the members' logs, so only :class:`SafetyChecker` checks them, on a live SimCluster; a
trace's durability (every acknowledged op is in the committed log) is clusterlab.chaos.verdict's.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from clusterlab.core.codec.framing import FRAME_ALIGNMENT
from clusterlab.core.consensus.context import ElectionState

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


class VoteSafety:
    """The ``vote`` events (a voter's ballot and both logs as it compared them): no YES vote to a candidate whose
    log (term, position) is less recent than the voter's (``vote_log_recency``), and at most one YES vote per
    voter per candidate term, across the voter's restarts (``one_vote_per_term``), a candidate's RequestVote
    being its YES vote for itself (:meth:`observe_candidacy`). The online form of
    clusterlab.chaos.checks.protocol's SQL checks of the same names."""

    def __init__(self) -> None:
        self.yes: dict[tuple[int, int], tuple[int, int]] = {}  # (voter, term) -> (candidate, incarnation)
        self._violations: list[str] = []

    def observe(
        self, voter: int, incarnation: int, candidate_term_id: int, log_position: int, detail: Mapping[str, Any]
    ) -> str | None:
        """The first violation this vote reveals (None: none); :meth:`observe_all` gives each."""
        problems = self.observe_all(voter, incarnation, candidate_term_id, log_position, detail)
        return problems[0] if problems else None

    def observe_all(
        self, voter: int, incarnation: int, candidate_term_id: int, log_position: int, detail: Mapping[str, Any]
    ) -> list[str]:
        """Every violation this vote reveals: a second YES vote in a term may also go to a less recent log."""
        if not detail.get("vote"):
            return []
        candidate = int(detail["candidate"])
        mine = (int(detail["log_leadership_term_id"]), log_position)
        theirs = (int(detail["candidate_log_leadership_term_id"]), int(detail["candidate_log_position"]))
        problems = []
        if mine > theirs:
            problems.append(
                f"vote_log_recency: member {voter} (incarnation {incarnation}) voted YES for member {candidate} in "
                f"term {candidate_term_id} with a more recent log {mine} than the candidate's {theirs}"
            )
        first = self.yes.setdefault((voter, candidate_term_id), (candidate, incarnation))
        if first[0] != candidate:
            problems.append(
                f"one_vote_per_term: member {voter} voted YES in term {candidate_term_id} for member {first[0]} "
                f"(incarnation {first[1]}) and for member {candidate} (incarnation {incarnation})"
            )
        self._violations.extend(problems)
        return problems

    def observe_candidacy(self, candidate: int, incarnation: int, candidate_term_id: int) -> str | None:
        """A candidate asked for votes in ``candidate_term_id`` (its RequestVote): its YES vote for itself. The
        violation it reveals, if the member already voted YES for another member in that term."""
        first = self.yes.setdefault((candidate, candidate_term_id), (candidate, incarnation))
        if first[0] == candidate:
            return None
        problem = (
            f"one_vote_per_term: member {candidate} voted YES in term {candidate_term_id} for member {first[0]} "
            f"(incarnation {first[1]}) and for itself as a candidate (incarnation {incarnation})"
        )
        self._violations.append(problem)
        return problem

    def violations(self) -> list[str]:
        return list(self._violations)


class LeaderViews:
    """At most one leader per term in every member's view (``leader`` and ``election_complete`` events;
    ``one_leader_per_term``)."""

    def __init__(self) -> None:
        self.leader: dict[int, tuple[int, int]] = {}  # term -> (leader, the member that saw it first)
        self._violations: list[str] = []

    def observe(self, term: int, leader: int, viewer: int) -> str | None:
        first = self.leader.setdefault(term, (leader, viewer))
        if first[0] == leader:
            return None
        problem = (
            f"one_leader_per_term: term {term} has leader {first[0]} (seen by member {first[1]}) and leader "
            f"{leader} (seen by member {viewer})"
        )
        self._violations.append(problem)
        return problem

    def violations(self) -> list[str]:
        return list(self._violations)


_TIMER_OR_CLOSE = ("Timer", "SessionClose")


class TimersAndCloses:
    """Timer and SessionClose entries are applied at the same positions, with the same bytes, on every member
    (``timers_and_closes_agree``): a timer fired or a session closed locally shows as another entry there."""

    def __init__(self) -> None:
        self.first: dict[int, tuple[str, bytes, Who]] = {}  # position -> first (entry type, digest, who)
        self._violations: list[str] = []

    def observe(self, log_position: int, who: Who, entry_type: str, entry_digest: bytes | None) -> str | None:
        if entry_type == SNAPSHOT or entry_digest is None:
            return None
        first = self.first.setdefault(log_position, (entry_type, entry_digest, who))
        if (first[0], first[1]) == (entry_type, entry_digest) or not {first[0], entry_type} & set(_TIMER_OR_CLOSE):
            return None
        problem = (
            f"timers_and_closes_agree: at log position {log_position} member {_who(who)} applied {entry_type} "
            f"{entry_digest.hex()[:12]} but member {_who(first[2])} applied {first[0]} {first[1].hex()[:12]}"
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
    checks log matching and that each committed prefix is recorded on the live members; raises
    SafetyViolation at once."""

    election: ElectionSafety = field(default_factory=ElectionSafety)
    commit: MonotonicCommit = field(default_factory=MonotonicCommit)
    agreement: Agreement = field(default_factory=Agreement)
    contiguity: Contiguity = field(default_factory=Contiguity)
    votes: VoteSafety = field(default_factory=VoteSafety)
    views: LeaderViews = field(default_factory=LeaderViews)
    timers: TimersAndCloses = field(default_factory=TimersAndCloses)
    committed: bytes = b""  # the longest committed log seen so far (from position 0)
    # Services with an id > 0 (several services per member): agreement and contiguity per service id,
    # since different services of one member reach different states at the same position.
    services: dict[int, tuple[Agreement, Contiguity]] = field(default_factory=dict)
    applied_rows_checked: int = 0
    applied_seen: int = 0  # rows of cluster.applied already fed
    events_seen: int = 0  # entries of cluster.events already fed (by check)
    # (member, incarnation) -> the prefix of its log already matched against ``committed``: a poll
    # reads only what lies beyond it (a whole re-read each poll made the checker quadratic in the log).
    # Committed bytes never change within an incarnation; ``full=True`` re-reads everything anyway.
    matched: dict[Who, int] = field(default_factory=dict)
    # False: keep feeding after a violation, collecting each in ``found`` (a recorded run's verdict).
    raise_at_once: bool = True
    found: list[str] = field(default_factory=list)

    def _report(self, problem: str | None, prefix: str = "") -> None:
        if problem is None:
            return
        if self.raise_at_once:
            raise SafetyViolation(prefix + problem)
        self.found.append(prefix + problem)

    @property
    def leaders_by_term(self) -> dict[int, int]:
        return self.election.leaders_by_term()

    def on_event(self, event: dict[str, Any]) -> None:
        """Feed every cluster event: ``leader`` events carry the term a member became leader of."""
        kind = event["kind"]
        if kind == "leader":
            self._report(self.election.observe(event["leadership_term_id"], event["member_id"]))
            self._report(self.views.observe(event["leadership_term_id"], event["member_id"], event["member_id"]))
        elif kind == "election_complete" and event.get("leadership_term_id") is not None:
            leader = event["detail"].get("leader")
            if leader is not None:
                self._report(self.views.observe(event["leadership_term_id"], int(leader), event["member_id"]))
        elif kind == "vote":
            who, incarnation = event["member_id"], event.get("incarnation", 0)
            pos = event["log_position"]
            for problem in self.votes.observe_all(who, incarnation, event["leadership_term_id"], pos, event["detail"]):
                self._report(problem)
        elif kind == "commit":
            member = f"member {event['member_id']}"
            self._report(self.commit.observe(member, event.get("incarnation", 0), event["log_position"]))

    def on_candidacy(self, member_id: int, incarnation: int, candidate_term_id: int) -> None:
        """Feed every RequestVote a member sends: its YES vote for itself in the candidate term."""
        self._report(self.votes.observe_candidacy(member_id, incarnation, candidate_term_id))

    def on_applied(self, member_id: int, incarnation: int, entry: Any, service_id: int = 0) -> None:
        """Feed every ``applied`` row: agreement and contiguity among the rows of one service id; Timer and
        SessionClose entries (the log's, the same for every service) among the rows of every service."""
        self.applied_rows_checked += 1
        who = (member_id, incarnation)
        kind = str(getattr(entry.entry_type, "value", entry.entry_type))
        self._report(self.timers.observe(entry.log_position, who, kind, entry.entry_digest))
        if service_id == 0:
            agreement, contiguity, prefix = self.agreement, self.contiguity, ""
        else:
            agreement, contiguity = self.services.setdefault(service_id, (Agreement(), Contiguity()))
            prefix = f"service {service_id}: "
        self._report(contiguity.observe(who, kind, entry.log_position, entry.length), prefix + "contiguity: ")
        self._report(agreement.observe(entry.log_position, who, kind, entry.entry_digest, entry.state_digest), prefix)

    def check_member(
        self, member_id: int, commit_position: int, read: Any, incarnation: int | None = None, log_start: int = 0
    ) -> None:
        """Check one live member's committed prefix [log_start, commit_position) against what we know
        (``log_start``: where its recording begins, above 0 when it starts at a snapshot). With
        ``incarnation`` only the bytes past what this incarnation already matched are read."""
        if commit_position <= log_start:
            return
        key = (member_id, incarnation) if incarnation is not None else None
        start = self.matched.get(key, log_start) if key is not None else log_start
        if start > commit_position:
            start = log_start  # the member's log fell back below what it held: judge it whole
        elif start == commit_position:
            return
        common = min(commit_position, len(self.committed))
        mine = read(start, commit_position)
        if len(mine) != commit_position - start:
            raise SafetyViolation(
                f"durability: member {member_id} commit {commit_position} but only {start + len(mine)} bytes recorded"
            )
        if start < common and mine[: common - start] != self.committed[start:common]:
            first = start + next(i for i in range(common - start) if mine[i] != self.committed[start + i])
            raise SafetyViolation(
                f"log matching: member {member_id} differs from the committed log at byte {first} "
                f"(frame at {first - first % FRAME_ALIGNMENT}) within its commit position {commit_position}"
            )
        if commit_position > len(self.committed):
            # ``mine`` matched ``committed`` up to ``common``: the longer log is ours from there on.
            self.committed = self.committed[:start] + mine if start <= len(self.committed) else self.committed
        if key is not None:
            self.matched[key] = commit_position

    def check(self, cluster: Any, full: bool = False) -> None:
        """Feed the SimCluster's events since the last call, then :meth:`check_cluster`."""
        for event in cluster.events[self.events_seen :]:
            self.on_event(event)
        self.events_seen = len(cluster.events)
        self.check_cluster(cluster, full)

    def check_cluster(self, cluster: Any, full: bool = False) -> None:
        """Check every live member of a SimCluster (and every applied row since the last check); ``full``
        re-reads each member's whole committed prefix instead of only what it appended since."""
        start = self.applied_seen
        rows = getattr(cluster, "applied", [])
        for row in rows[start:]:
            self.on_applied(row["member_id"], row["incarnation"], row["entry"], row.get("service_id", 0))
        self.applied_seen = len(rows)
        incarnation_of = None if full else getattr(cluster, "incarnation", None)
        for member_id in cluster.members_alive():
            m = cluster.member(member_id)
            self._observe_candidacy(member_id, m, getattr(cluster, "incarnation", None))
            # A member restored from a snapshot may hold less log than its commit position when a
            # fault truncated its recording below the snapshot; compare what it does hold.
            incarnation = incarnation_of(member_id) if incarnation_of is not None else None
            commit = min(m.commit_position, m.archive.stop_position)
            self.check_member(member_id, commit, m.archive.read, incarnation, m.archive.start_position)

    def _observe_candidacy(self, member_id: int, module: Any, incarnation_of: Any) -> None:
        """A member found standing as a candidate (CANDIDATE_BALLOT) voted YES for itself in its candidate term:
        the sampled form of the RequestVotes :func:`fold_recorded_run` reads from a trace."""
        election = module.election
        if election is not None and election.state == ElectionState.CANDIDATE_BALLOT:
            incarnation = incarnation_of(member_id) if incarnation_of is not None else 0
            self.on_candidacy(member_id, incarnation, election.candidate_term_id)

    def check_committed_prefix_at_end(self, cluster: Any) -> None:
        """At the end, with every member up and converged: the longest committed log seen is a prefix of
        each live member's recorded log (it holds at least as many bytes, and the same ones)."""
        for member_id in cluster.members_alive():
            m = cluster.member(member_id)
            have = m.archive.stop_position
            if have < len(self.committed):
                raise SafetyViolation(
                    f"committed prefix: member {member_id} holds {have} bytes, committed log is {len(self.committed)}"
                )
            self.check_member(member_id, len(self.committed), m.archive.read, log_start=m.archive.start_position)


@dataclass(frozen=True)
class FoldViolation:
    """The first violation a fold finds in a recorded run: the trace check of the same property, where
    (the term of the event that showed it, for the properties judged per term; else the log position of
    the row that showed it) and the fold's words."""

    check: str
    at: int | None
    problem: str


# The trace check (clusterlab.chaos.checks) that judges each fold's property in SQL; VoteSafety judges two.
FOLD_CHECKS = {
    "election safety": "election_safety",
    "commit position": "committed_prefix",
    "agreement": "agreement",
    "contiguity": "contiguity",
    "vote_log_recency": "vote_log_recency",
    "one_vote_per_term": "one_vote_per_term",
    "one_leader_per_term": "one_leader_per_term",
    "timers_and_closes_agree": "timers_and_closes_agree",
}


_CANDIDACY = "candidacy"  # fold_recorded_run's kind for a RequestVote a member sent

# The trace checks that judge a term (who led it, who voted in it): a fold's violation is placed at the term.
_BY_TERM = frozenset({"election_safety", "one_leader_per_term", "one_vote_per_term"})


def _check_of(problem: str) -> str:
    if problem.startswith("service "):  # "service 1: contiguity: ...": another service's agreement or contiguity
        problem = problem.split(": ", 1)[1]
    return next(check for prefix, check in FOLD_CHECKS.items() if problem.startswith(prefix))


def fold_recorded_run(
    events: Iterable[Mapping[str, Any]],
    applied: Iterable[Mapping[str, Any]],
    messages: Iterable[Mapping[str, Any]] = (),
) -> list[FoldViolation]:
    """Feed a recorded run's node events, the RequestVotes its members sent (``messages`` rows; a candidate's
    vote for itself) and its applied rows (the trace tables' rows, each table in record order) to the online
    checker's folds, as a SimCluster feeds them live; the first violation of each property. The SQL checks
    judge the same traces: a test holds the two to the same verdicts and the same first positions."""
    checker = SafetyChecker(raise_at_once=False)
    first: dict[str, FoldViolation] = {}

    def feed(observe: Any, row: Mapping[str, Any]) -> None:
        observe()
        for problem in checker.found:
            check = _check_of(problem)
            at = row["leadership_term_id"] if check in _BY_TERM else row["log_position"]
            first.setdefault(check, FoldViolation(check, at, problem))
        checker.found.clear()

    node_events = [
        dict(e, detail=json.loads(e["detail"] or "{}"))
        for e in events
        if str(e.get("source") or "").startswith("node-")
    ]
    candidacies = [
        dict(m, kind=_CANDIDACY)
        for m in messages
        if m["msg_type"] == "RequestVote"
        and m["direction"] == "send"
        and (m["member_id"] if m["member_id"] is not None else -1) >= 0
        and m["leadership_term_id"] is not None
    ]
    for e in sorted([*node_events, *candidacies], key=lambda r: (r["wall_ns"], r["kind"] != _CANDIDACY, r["seq"])):
        if e["kind"] == _CANDIDACY:
            feed(lambda e=e: checker.on_candidacy(e["member_id"], e["incarnation"], e["leadership_term_id"]), e)
        else:
            feed(lambda event=e: checker.on_event(event), e)
    for r in sorted(applied, key=lambda r: (r["member_id"], r["incarnation"], r["seq"])):
        entry = SimpleNamespace(**r)
        service_id = r["service_id"]
        feed(
            lambda r=r, entry=entry, sid=service_id: checker.on_applied(r["member_id"], r["incarnation"], entry, sid), r
        )
    return sorted(first.values(), key=lambda v: v.check)
