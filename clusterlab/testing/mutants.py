"""The catalogue of planted bugs ("mutants"): each makes the consensus module or the service wrong in
one small, realistic way, so the black-box harness can be shown to catch it (``clusterlab mutants``,
docs/mutants.md).

A consensus-module bug is a change of one of the protocol's rules (:class:`PlantedRules`, a
subclass of ``clusterlab.core.consensus.rules.ConsensusRules``) carried in the member's context
(``ConsensusModuleContext.rules``): the simulator builds it from the names it is given, a real
member process from its test context (:mod:`clusterlab.testing.node`, the names in
``CLUSTERLAB_MUTANTS``), which LocalCluster gives the members it starts. A service bug is a
variant of the kv service (harness/services/kv.py). Names are stable strings: they appear in
run.json, re-run commands and CI."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from clusterlab.core.codec.control import BackupSnapshot
from clusterlab.core.codec.transport import LogBlock
from clusterlab.core.consensus.cluster_backup import SnapshotFilter, retrieve_all
from clusterlab.core.consensus.context import NULL_POSITION
from clusterlab.core.consensus.members import MemberStatus
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.node_state import NodeState
from clusterlab.core.consensus.recording_log import SERVICE_ID_CONSENSUS_MODULE
from clusterlab.core.consensus.rules import PROTOCOL_RULES, ConsensusRules
from clusterlab.core.consensus.sessions import ClusterSession
from clusterlab.core.consensus.term_replication import TermReplication
from clusterlab.core.consensus.timers import TimerService

# Election
VOTE_WITHOUT_LOG_RECENCY = "vote-without-log-recency"
VOTE_NOT_PERSISTED = "vote-not-persisted"
QUORUM_OFF_BY_ONE = "quorum-off-by-one"
LATE_VOTE_COUNTED = "late-vote-counted"
VOTE_PROMISE_BROKEN = "vote-promise-broken"
# Step-down
LEADER_NEVER_STEPS_DOWN = "leader-never-steps-down"
# Commit rule
COMMIT_ON_OWN_APPEND = "commit-on-own-append"
OLDER_TERM_LOG_COUNTED = "older-term-log-counted"
# Replication / catch-up
ACK_BEFORE_APPEND = "ack-before-append"
SKIP_DIVERGENT_TRUNCATION = "skip-divergent-truncation"
# Truncation / recovery
TORN_TAIL_NOT_REPAIRED = "torn-tail-not-repaired"
# Timers and sessions
FOLLOWER_FIRES_TIMERS = "follower-fires-timers"
SESSION_TIMEOUT_LOCAL_CLOCK = "session-timeout-local-clock"
CLOSED_SESSION_KEPT = "closed-session-kept"
FIRED_TIMER_KEPT = "fired-timer-kept"
CANCEL_TIMER_IGNORED = "cancel-timer-ignored"
# Snapshots
SNAPSHOT_AT_LOCAL_POSITION = "snapshot-at-local-position"
TIMERS_LEFT_OUT_OF_SNAPSHOT = "timers-left-out-of-snapshot"
# Service determinism (in the service: harness/services/kv.py)
SERVICE_WALL_CLOCK = "service-wall-clock"
STALE_READ = "stale-read"
RESEND_APPLIED_TWICE = "resend-applied-twice"
ALARM_COUNTED_TWICE = "alarm-counted-twice"
# ClusterBackup (in the backup: core/consensus/cluster_backup.py BackupContext.snapshot_filter)
BACKUP_SKIPS_SNAPSHOT = "backup-skips-snapshot"


@dataclass(frozen=True, slots=True)
class Mutant:
    """One planted bug: its stable name, where it lives, and what it does wrong."""

    name: str
    area: str
    where: str
    bug: str
    in_service: bool = False  # planted in the clustered service, not the consensus module
    in_backup: bool = False  # planted in the ClusterBackup, not in any member
    services: tuple[str, ...] = ("kv",)  # the sample services whose runs a planted service bug replaces

    def plants_in(self, service: str) -> bool:
        """Whether a run of sample service ``service`` can carry this bug (a service bug is a variant
        of some sample services; a consensus-module bug fits any service)."""
        return not self.in_service or service in self.services


def misplanted(names: Iterable[str], service: str) -> str | None:
    """Why the planted bugs ``names`` cannot run with sample service ``service`` (the first service bug
    that varies other services), or None when they all fit."""
    bad = sorted(n for n in names if not MUTANTS[n].plants_in(service))
    if not bad:
        return None
    return f"mutant {bad[0]} plants a bug in the {'/'.join(MUTANTS[bad[0]].services)} service, not {service!r}"


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            VOTE_WITHOUT_LOG_RECENCY,
            "election",
            "rules refuses_vote_for_log, is_quorum_candidate (core/consensus/election.py)",
            "the election never compares logs: a member stands, and YES votes are granted, whatever the logs",
        ),
        Mutant(
            VOTE_NOT_PERSISTED,
            "election",
            "rules record_vote (core/consensus/election.py Election.on_request_vote)",
            "the candidate term of a YES vote is kept in memory only: a restarted member can vote again in that term",
        ),
        Mutant(
            QUORUM_OFF_BY_ONE,
            "election",
            "rules quorum_member_count (core/consensus/election.py)",
            "at the election timeout a candidate needs members // 2 YES votes (one short of a quorum)",
        ),
        Mutant(
            LATE_VOTE_COUNTED,
            "election",
            "rules counts_vote (core/consensus/election.py Election.on_vote)",
            "a candidate counts a Vote cast in an earlier ballot of its own as a vote in its current ballot",
        ),
        Mutant(
            VOTE_PROMISE_BROKEN,
            "election",
            "rules keeps_vote_promise (core/consensus/election.py Election.on_new_leadership_term)",
            "a member back in CANVASS after a YES vote for another member's term follows a live leader of an "
            "older term (its vote promised to follow none)",
        ),
        Mutant(
            LEADER_NEVER_STEPS_DOWN,
            "step-down",
            "rules steps_down_without_quorum (core/consensus/module.py ConsensusModule._leader_work)",
            "a leader that lost its follower quorum keeps leading (no election on an inactive quorum)",
        ),
        Mutant(
            COMMIT_ON_OWN_APPEND,
            "commit rule",
            "rules commit_position (core/consensus/term_replication.py TermReplication.update_leader_position)",
            "the leader commits up to its own append position, without waiting for a quorum",
        ),
        Mutant(
            OLDER_TERM_LOG_COUNTED,
            "commit rule",
            "rules counts_reported_log (core/consensus/election.py Election._leader_log_replication)",
            "a new leader counts toward its commit position the canvassed logs of members whose log ends in an "
            "older term than its own, as if they held its bytes at those positions",
        ),
        Mutant(
            ACK_BEFORE_APPEND,
            "replication",
            "rules on_log_block (core/consensus/term_replication.py TermReplication.on_log_block)",
            "a follower acknowledges a log block on arrival and appends it only when the next one arrives",
        ),
        Mutant(
            SKIP_DIVERGENT_TRUNCATION,
            "catch-up",
            "rules truncates_divergent_tail (core/consensus/election.py Election.on_new_leadership_term)",
            "a follower with an uncommitted tail the new leader lacks does not truncate it before following",
        ),
        Mutant(
            TORN_TAIL_NOT_REPAIRED,
            "truncation",
            "rules repairs_torn_tail (core/consensus/module.py Archive repair_tail, core/consensus/recovery.py)",
            "at start a torn log tail is left in place and the recording log is not cut back to the archive",
        ),
        Mutant(
            FOLLOWER_FIRES_TIMERS,
            "timers",
            "rules follower_duties (core/consensus/module.py ConsensusModule._follower_work)",
            "a follower fires expired timers on its own clock into its own log, as only the leader may",
        ),
        Mutant(
            SESSION_TIMEOUT_LOCAL_CLOCK,
            "sessions",
            "rules follower_duties (core/consensus/module.py ConsensusModule._follower_work)",
            "a follower times out client sessions on its own clock and logs their close itself",
        ),
        Mutant(
            CLOSED_SESSION_KEPT,
            "sessions",
            "rules on_log_session_close (core/consensus/client_sessions.py ClientSessions.on_log_session_close)",
            "a member applying a SessionClose from the log keeps the session open (only the leader that "
            "appended it forgets it)",
        ),
        Mutant(
            FIRED_TIMER_KEPT,
            "timers",
            "rules on_log_timer_event (core/consensus/service_link.py ServiceLink.on_log_timer_event)",
            "a follower reading a TimerEvent from the log leaves that timer scheduled, so its next leader "
            "fires it again",
        ),
        Mutant(
            CANCEL_TIMER_IGNORED,
            "timers",
            "rules on_cancel_timer (core/consensus/service_link.py ServiceLink.on_cancel_timer)",
            "a service's CancelTimer leaves the timer scheduled in its consensus module, so a leader fires it "
            "after the cancel",
        ),
        Mutant(
            SNAPSHOT_AT_LOCAL_POSITION,
            "snapshots",
            "rules snapshot_position (core/consensus/snapshots.py Snapshots.take_snapshot)",
            "a member records its snapshot at its local append position instead of the ClusterAction's",
        ),
        Mutant(
            TIMERS_LEFT_OUT_OF_SNAPSHOT,
            "snapshots",
            "rules snapshot_timers (core/consensus/snapshots.py Snapshots.take_snapshot)",
            "the consensus module's snapshot records no timers: a member restored from it never fires the "
            "timers that were pending, though its service still waits for them",
        ),
        Mutant(
            SERVICE_WALL_CLOCK,
            "service determinism",
            "harness/services/planted.py WallClockStamp (wall_clock_service)",
            "the kv service stamps values with the member's wall clock instead of the log's cluster time",
            in_service=True,
        ),
        Mutant(
            STALE_READ,
            "service determinism",
            "harness/services/planted.py StaleRead (stale_read_service)",
            "gets are answered from a per-session cache blind to other sessions' writes",
            in_service=True,
        ),
        Mutant(
            RESEND_APPLIED_TWICE,
            "exactly once",
            "harness/services/planted.py ForgetfulDedupe (forgetful_dedupe_service)",
            "the kv store loses its deduplication: a request a client resends after a timeout or a leader "
            "change is applied again",
            in_service=True,
        ),
        Mutant(
            ALARM_COUNTED_TWICE,
            "service timers",
            "harness/services/planted.py DoubleFire (double_fire_service)",
            "the counter counts each alarm that fires twice in 'fired' (every member alike, so their states agree)",
            in_service=True,
            services=("counter", "timers"),
        ),
        Mutant(
            BACKUP_SKIPS_SNAPSHOT,
            "backup",
            "clusterlab/testing/mutants.py backup_snapshot_filter (core/consensus/cluster_backup.py "
            "BackupContext.snapshot_filter)",
            "a ClusterBackup retrieves only the consensus module's snapshot of a set and skips the services' "
            "snapshots: a cluster restored from it cannot load the set it records",
            in_backup=True,
        ),
    )
}

NO_MUTANTS: frozenset[str] = frozenset()


class UnknownMutant(ValueError):
    """A mutant name that is not in the catalogue."""


def mutant_set(names: Iterable[str]) -> frozenset[str]:
    """The names as a frozen set, each checked against the catalogue (UnknownMutant names the bad
    ones and lists the valid names)."""
    chosen = frozenset(n.strip() for n in names if n.strip())
    unknown = sorted(chosen - MUTANTS.keys())
    if unknown:
        raise UnknownMutant(f"unknown mutant {', '.join(map(repr, unknown))}; valid mutants: {', '.join(MUTANTS)}")
    return chosen


def parse_mutants(text: str | None) -> frozenset[str]:
    """A comma-separated list (the runtime's ``CLUSTERLAB_MUTANTS``) as a checked set; empty: none."""
    return mutant_set(text.split(",")) if text else NO_MUTANTS


def format_mutants(mutants: Iterable[str]) -> str:
    """The inverse of :func:`parse_mutants` (sorted, so the same set is always the same text)."""
    return ",".join(sorted(mutants))


# The planted bugs of a member process, comma-separated (read by its test context, clusterlab.testing.node).
MUTANTS_ENV = "CLUSTERLAB_MUTANTS"


class PlantedRules(ConsensusRules):
    """The protocol's rules with the consensus-module bugs of ``names`` planted (any combination)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = mutant_set(names)
        self._unappended: dict[int, LogBlock] = {}  # ack-before-append: each follower's held block

    def describe(self) -> str:
        return f"planted bugs (test-only): {format_mutants(self.names)}"

    def quorum_member_count(self, member_count: int) -> int:
        if QUORUM_OFF_BY_ONE in self.names and member_count >= 3:
            return member_count - 2  # a quorum of n // 2: one member short of a majority
        return member_count

    def is_quorum_candidate(self, statuses: Sequence[MemberStatus], candidate: MemberStatus, member_count: int) -> bool:
        if VOTE_WITHOUT_LOG_RECENCY in self.names:  # a quorum of canvass replies, whatever their logs
            return sum(s.log_position != NULL_POSITION for s in statuses) >= member_count // 2 + 1
        return super().is_quorum_candidate(statuses, candidate, member_count)

    def refuses_vote_for_log(
        self, own_term: int, own_position: int, candidate_term: int, candidate_position: int
    ) -> bool:
        if VOTE_WITHOUT_LOG_RECENCY in self.names:
            return False  # no log-recency check
        return super().refuses_vote_for_log(own_term, own_position, candidate_term, candidate_position)

    def record_vote(self, node_state: NodeState, candidate_term_id: int, log_position: int, timestamp: int) -> int:
        if VOTE_NOT_PERSISTED in self.names:
            return candidate_term_id  # in memory only
        return super().record_vote(node_state, candidate_term_id, log_position, timestamp)

    def counts_vote(self, candidate_term_id: int, vote_candidate_term_id: int) -> bool:
        if LATE_VOTE_COUNTED in self.names:
            return vote_candidate_term_id <= candidate_term_id  # any ballot of this candidate's, however late
        return super().counts_vote(candidate_term_id, vote_candidate_term_id)

    def keeps_vote_promise(self, leadership_term_id: int, vote_promise_term_id: int) -> bool:
        return VOTE_PROMISE_BROKEN in self.names or super().keeps_vote_promise(leadership_term_id, vote_promise_term_id)

    def counts_reported_log(self, reported_log_term: int, log_leadership_term_id: int, leadership_term_id: int) -> bool:
        if OLDER_TERM_LOG_COUNTED in self.names:
            return reported_log_term <= leadership_term_id  # any log, whatever term it ends in
        return super().counts_reported_log(reported_log_term, log_leadership_term_id, leadership_term_id)

    def truncates_divergent_tail(self) -> bool:
        return SKIP_DIVERGENT_TRUNCATION not in self.names

    def steps_down_without_quorum(self) -> bool:
        return LEADER_NEVER_STEPS_DOWN not in self.names

    def commit_position(self, quorum_position: int, append_position: int) -> int:
        if COMMIT_ON_OWN_APPEND in self.names:
            return append_position  # committed on its own append, no quorum
        return super().commit_position(quorum_position, append_position)

    def on_log_block(self, replication: TermReplication, msg: LogBlock, now_ns: int) -> None:
        if ACK_BEFORE_APPEND not in self.names:
            super().on_log_block(replication, msg, now_ns)
            return
        # Report the block's end as appended at once; append it only when the next block arrives.
        held = self._unappended.pop(id(replication), None)
        self._unappended[id(replication)] = msg
        if held is not None:
            replication.append_log_block(held, now_ns)
        replication.report_appended(msg.start_position + len(msg.entries), now_ns)

    def on_log_session_close(self, sessions: dict[int, ClusterSession], cluster_session_id: int) -> None:
        if CLOSED_SESSION_KEPT not in self.names:
            super().on_log_session_close(sessions, cluster_session_id)

    def on_log_timer_event(self, timer_service: TimerService, correlation_id: int) -> None:
        if FIRED_TIMER_KEPT not in self.names:
            super().on_log_timer_event(timer_service, correlation_id)

    def on_cancel_timer(self, timer_service: TimerService, correlation_id: int) -> None:
        if CANCEL_TIMER_IGNORED not in self.names:
            super().on_cancel_timer(timer_service, correlation_id)

    def follower_duties(self, module: ConsensusModule, now_ns: int) -> int:
        work = 0
        if FOLLOWER_FIRES_TIMERS in self.names:  # the leader's timer check, into the follower's own log
            work += module.services.append_expired_timers(module.cluster_time_ms(now_ns))
        if SESSION_TIMEOUT_LOCAL_CLOCK in self.names:  # on its own clock, logging the close itself
            work += module.client_sessions.check_sessions(now_ns)
        return work

    def repairs_torn_tail(self) -> bool:
        return TORN_TAIL_NOT_REPAIRED not in self.names

    def snapshot_position(self, action_position: int, append_position: int) -> int:
        return append_position if SNAPSHOT_AT_LOCAL_POSITION in self.names else action_position

    def snapshot_timers(self, timers: list[tuple[int, int]]) -> list[tuple[int, int]]:
        return [] if TIMERS_LEFT_OUT_OF_SNAPSHOT in self.names else timers


def rules_for(names: Iterable[str]) -> ConsensusRules:
    """The rules of a member with the consensus-module bugs of ``names`` (service bugs live in the
    service); the protocol's own when none is."""
    planted = mutant_set(names) - {n for n, m in MUTANTS.items() if m.in_service or m.in_backup}
    return PlantedRules(planted) if planted else PROTOCOL_RULES


def _skip_service_snapshots(snapshots: Sequence[BackupSnapshot]) -> list[BackupSnapshot]:
    """backup-skips-snapshot: only the consensus module's snapshot of each set is retrieved."""
    return [sn for sn in snapshots if sn.service_id == SERVICE_ID_CONSENSUS_MODULE]


def backup_snapshot_filter(names: Iterable[str]) -> SnapshotFilter:
    """The snapshot choice of a ClusterBackup with the planted bugs ``names``: every snapshot it lacks,
    unless backup-skips-snapshot is planted."""
    return _skip_service_snapshots if BACKUP_SKIPS_SNAPSHOT in mutant_set(names) else retrieve_all
