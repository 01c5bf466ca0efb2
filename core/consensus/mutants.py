"""The catalogue of planted bugs ("mutants"): test-only switches that make the consensus module or
the service wrong in one small, realistic way, so the black-box harness can be shown to catch each
(``clusterlab mutants``, docs/mutants.md).

A member runs with a frozen set of mutant names carried in its context
(``ConsensusModuleContext.mutants``); production entry points never set one: the simulator takes it
as an argument and real processes only through the explicit runtime switch (``--mutant`` on
``clusterlab run``, ``CLUSTERLAB_MUTANTS`` read by core/runtime). Every bug sits behind a few lines
of ``if MUTANT_NAME in ...mutants:``. Names are stable strings: they appear in run.json, re-run
commands and CI."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Election
VOTE_WITHOUT_LOG_RECENCY = "vote-without-log-recency"
VOTE_NOT_PERSISTED = "vote-not-persisted"
QUORUM_OFF_BY_ONE = "quorum-off-by-one"
# Step-down
LEADER_NEVER_STEPS_DOWN = "leader-never-steps-down"
# Commit rule
COMMIT_ON_OWN_APPEND = "commit-on-own-append"
# Replication / catch-up
ACK_BEFORE_APPEND = "ack-before-append"
SKIP_DIVERGENT_TRUNCATION = "skip-divergent-truncation"
# Truncation / recovery
TORN_TAIL_NOT_REPAIRED = "torn-tail-not-repaired"
# Timers and sessions
FOLLOWER_FIRES_TIMERS = "follower-fires-timers"
SESSION_TIMEOUT_LOCAL_CLOCK = "session-timeout-local-clock"
# Snapshots
SNAPSHOT_AT_LOCAL_POSITION = "snapshot-at-local-position"
# Service determinism (in the service: harness/services/kv.py)
SERVICE_WALL_CLOCK = "service-wall-clock"
STALE_READ = "stale-read"


@dataclass(frozen=True, slots=True)
class Mutant:
    """One planted bug: its stable name, where it lives, and what it does wrong."""

    name: str
    area: str
    where: str
    bug: str
    in_service: bool = False  # planted in the clustered service, not the consensus module


MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            VOTE_WITHOUT_LOG_RECENCY,
            "election",
            "core/consensus/election.py Election.on_request_vote",
            "the election never compares logs: a member stands, and YES votes are granted, whatever the logs",
        ),
        Mutant(
            VOTE_NOT_PERSISTED,
            "election",
            "core/consensus/election.py Election.on_request_vote",
            "the candidate term of a YES vote is kept in memory only: a restarted member can vote again in that term",
        ),
        Mutant(
            QUORUM_OFF_BY_ONE,
            "election",
            "core/consensus/election.py Election._candidate_ballot",
            "at the election timeout a candidate needs members // 2 YES votes (one short of a quorum)",
        ),
        Mutant(
            LEADER_NEVER_STEPS_DOWN,
            "step-down",
            "core/consensus/module.py ConsensusModule._leader_work",
            "a leader that lost its follower quorum keeps leading (no election on an inactive quorum)",
        ),
        Mutant(
            COMMIT_ON_OWN_APPEND,
            "commit rule",
            "core/consensus/log_replication.py LogReplication.update_leader_position",
            "the leader commits up to its own append position, without waiting for a quorum",
        ),
        Mutant(
            ACK_BEFORE_APPEND,
            "replication",
            "core/consensus/log_replication.py LogReplication.on_log_block",
            "a follower acknowledges a log block on arrival and appends it only when the next one arrives",
        ),
        Mutant(
            SKIP_DIVERGENT_TRUNCATION,
            "catch-up",
            "core/consensus/election.py Election.on_new_leadership_term",
            "a follower with an uncommitted tail the new leader lacks does not truncate it before following",
        ),
        Mutant(
            TORN_TAIL_NOT_REPAIRED,
            "truncation",
            "core/consensus/module.py ConsensusModule (Archive repair_tail) and core/consensus/recovery.py recover",
            "at start a torn log tail is left in place and the recording log is not cut back to the archive",
        ),
        Mutant(
            FOLLOWER_FIRES_TIMERS,
            "timers",
            "core/consensus/module.py ConsensusModule._follower_work",
            "a follower fires expired timers on its own clock into its own log, as only the leader may",
        ),
        Mutant(
            SESSION_TIMEOUT_LOCAL_CLOCK,
            "sessions",
            "core/consensus/module.py ConsensusModule._follower_work",
            "a follower times out client sessions on its own clock and logs their close itself",
        ),
        Mutant(
            SNAPSHOT_AT_LOCAL_POSITION,
            "snapshots",
            "core/consensus/snapshots.py Snapshots.take_snapshot",
            "a member records its snapshot at its local append position instead of the ClusterAction's",
        ),
        Mutant(
            SERVICE_WALL_CLOCK,
            "service determinism",
            "harness/services/kv.py KeyValueService (wall_clock_service)",
            "the kv service stamps values with the member's wall clock instead of the log's cluster time",
            in_service=True,
        ),
        Mutant(
            STALE_READ,
            "service determinism",
            "harness/services/kv.py KeyValueService (stale_read_service)",
            "gets are answered from a per-session cache blind to other sessions' writes",
            in_service=True,
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
