"""What the consensus module is given from outside: identity, members, timeouts, a seeded random,
the member directory, an outbox and an event sink. Nothing here performs IO itself; the runtime
(ZeroMQ) or the simulator provides the outbox and calls the module with ``now_ns``."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any, Protocol

from clusterlab.core.archive.storage import Storage
from clusterlab.core.consensus.intercepts import NO_INTERCEPTS, Intercepts
from clusterlab.core.consensus.rules import PROTOCOL_RULES, ConsensusRules

NULL_VALUE = -1
NULL_POSITION = -1
NULL_SESSION_ID = -1
SERVICE_ID_CONSENSUS_MODULE = -1
PROTOCOL_VERSION = (1 << 16) | (0 << 8) | 0  # CM<->CM protocol 1.0.0
CLIENT_PROTOCOL_VERSION = (0 << 16) | (3 << 8) | 0  # client protocol 0.3.0
APP_VERSION = 1  # 0.0.1
MS = 1_000_000
SECOND = 1_000_000_000


class Channel(StrEnum):
    """The channels of docs/architecture.md; values are the trace's ``channel`` column."""

    CONSENSUS = "consensus"
    LOG = "log"
    CATCHUP = "catchup"
    ARCHIVE = "archive"
    SERVICE = "service"
    INGRESS = "ingress"
    EGRESS = "egress"
    CONTROL = "control"


class Role(IntEnum):
    """Aeron's ``Cluster.Role``."""

    FOLLOWER = 0
    CANDIDATE = 1
    LEADER = 2


class ElectionState(IntEnum):
    """Aeron's ``ElectionState``: code == ordinal, names verbatim."""

    INIT = 0
    CANVASS = 1
    NOMINATE = 2
    CANDIDATE_BALLOT = 3
    FOLLOWER_BALLOT = 4
    LEADER_LOG_REPLICATION = 5
    LEADER_REPLAY = 6
    LEADER_INIT = 7
    LEADER_READY = 8
    FOLLOWER_LOG_REPLICATION = 9
    FOLLOWER_REPLAY = 10
    FOLLOWER_CATCHUP_INIT = 11
    FOLLOWER_CATCHUP_AWAIT = 12
    FOLLOWER_CATCHUP = 13
    FOLLOWER_LOG_INIT = 14
    FOLLOWER_LOG_AWAIT = 15
    FOLLOWER_READY = 16
    CLOSED = 17


class ConsensusModuleState(IntEnum):
    """Aeron's ``ConsensusModule.State``."""

    INIT = 0
    ACTIVE = 1
    SUSPENDED = 2
    SNAPSHOT = 3
    QUITTING = 4
    TERMINATING = 5
    CLOSED = 6


@dataclass(frozen=True, slots=True)
class ClusterMember:
    """One entry of the member configuration string (``id,ingress,consensus,log,catchup,archive``).

    Endpoints are opaque strings to the core: the runtime turns them into ZeroMQ addresses, the
    simulator ignores them."""

    member_id: int
    ingress_endpoint: str = ""
    consensus_endpoint: str = ""
    log_endpoint: str = ""
    catchup_endpoint: str = ""
    archive_endpoint: str = ""

    def describe(self) -> str:
        return (
            f"{self.member_id},{self.ingress_endpoint},{self.consensus_endpoint},"
            f"{self.log_endpoint},{self.catchup_endpoint},{self.archive_endpoint}"
        )


def quorum_threshold(member_count: int) -> int:
    """Aeron's ``quorumThreshold``: floor(n/2) + 1."""
    return member_count // 2 + 1


@dataclass(frozen=True, slots=True)
class Timeouts:
    """docs/protocol.md d, in nanoseconds. Defaults are Aeron's; harnesses pass test-friendly values."""

    election_timeout_ns: int = 1 * SECOND
    election_status_interval_ns: int = 100 * MS
    startup_canvass_timeout_ns: int = 60 * SECOND
    leader_heartbeat_timeout_ns: int = 10 * SECOND
    leader_heartbeat_interval_ns: int = 200 * MS
    session_timeout_ns: int = 10 * SECOND
    termination_timeout_ns: int = 10 * SECOND

    @classmethod
    def fast(cls) -> Timeouts:
        """Test-friendly values (docs/architecture.md: heartbeat timeout 1 s, interval 50 ms)."""
        return cls(
            election_timeout_ns=300 * MS,
            election_status_interval_ns=20 * MS,
            startup_canvass_timeout_ns=2 * SECOND,
            leader_heartbeat_timeout_ns=1 * SECOND,
            leader_heartbeat_interval_ns=50 * MS,
            session_timeout_ns=5 * SECOND,
            termination_timeout_ns=2 * SECOND,
        )

    def validate(self) -> None:
        """Aeron checks startup canvass >= 2 x heartbeat timeout at start."""
        if self.startup_canvass_timeout_ns < 2 * self.leader_heartbeat_timeout_ns:
            raise ValueError(
                "startup_canvass_timeout_ns must be >= 2 x leader_heartbeat_timeout_ns "
                f"({self.startup_canvass_timeout_ns} < 2 x {self.leader_heartbeat_timeout_ns})"
            )


class Outbox(Protocol):
    """Where the core's publishers put bytes. The runtime maps (member, channel) to a ZeroMQ socket;
    the simulator to its network. ``member_id`` -1 is not a member (clients use their own outbox)."""

    def send(self, member_id: int, channel: Channel, payload: bytes) -> None: ...

    def send_egress(self, response_channel: str, payload: bytes) -> None:
        """To a client's egress (its response channel): SessionEvent, NewLeaderEvent, replies."""
        ...


# kind, member_id, leadership_term_id, log_position, detail — the trace's `events` columns, minus
# run_id/wall_ns/source which the recorder adds.
EventSink = Callable[[str, int, int | None, int | None, dict[str, Any]], None]


def null_event_sink(kind: str, member_id: int, term: int | None, pos: int | None, detail: dict[str, Any]) -> None:
    """An event sink that drops everything."""


@dataclass
class ConsensusModuleContext:
    """Everything a ConsensusModule needs; built by the runtime or the simulator."""

    member_id: int
    members: list[ClusterMember]
    cluster_dir: Path
    outbox: Outbox
    rng: random.Random
    timeouts: Timeouts = field(default_factory=Timeouts)
    appointed_leader_id: int = NULL_VALUE
    service_count: int = 1
    events: EventSink = null_event_sink
    authenticator: Any = None  # clusterlab.core.consensus.authenticator.Authenticator; None = accept all
    max_concurrent_sessions: int = 10
    # Aeron's AuthorisationService for admin requests; Aeron's default denies, ours allows so the
    # harness and tools can request snapshots (pass a stricter one in production-like tests).
    authorise_admin: Callable[[bytes, int], bool] = lambda principal, request_type: True
    log: Callable[[str], None] = lambda line: None  # human-readable log lines (reasons for ignores etc.)
    # The protocol's rules (clusterlab.core.consensus.rules): Aeron's unless a test plants a bug.
    rules: ConsensusRules = PROTOCOL_RULES
    # Where a test intercepts the member (clusterlab.core.consensus.intercepts): nowhere unless a test asks.
    intercepts: Intercepts = NO_INTERCEPTS
    # Where the archive, recording log and node state live (clusterlab.core.archive.storage): FileStorage
    # on cluster_dir in real processes, MemoryStorage in the simulator. Required by ConsensusModule.
    storage: Storage | None = None
    # Assert every subsystem's invariants after each input (ConsensusModule.check_invariants): on in
    # the simulator and in tests, off by default in real member processes (CLUSTERLAB_CHECK_INVARIANTS=1).
    check_invariants: bool = False
    # Aeron's archive segment file length for the log recording (bytes; the runtime's cluster.json
    # says 128 MiB unless told otherwise, Aeron's default). Whole segments below a snapshot can be purged.
    archive_segment_length: int = 16 * 1024 * 1024  # = core.archive.recording.DEFAULT_SEGMENT_LENGTH

    def member(self, member_id: int) -> ClusterMember | None:
        for m in self.members:
            if m.member_id == member_id:
                return m
        return None
