"""The runtime's control messages (template ids 210-229, schema 111): harness -> process.

Aeron's operators reach a running node through its CnC file and counters (ClusterTool, the cluster
control toggle). Our processes have no shared memory, so a node and a service process each bind a
control socket (ZeroMQ ROUTER, see ``core/runtime``) and answer these messages instead:

* ``StatusRequest`` -> ``NodeStatus`` (from a node) or ``ServiceStatus`` (from a service process);
* ``GateRule``, ``ClockOffset``, ``ClusterControlRequest``, ``MembersConfig``, ``StorageFault``,
  ``TestHook``, ``PurgeSegments`` -> ``ControlResponse``;
* ``CountersRequest`` -> ``Counters`` (Aeron's CnC counters and the distinct error log, read by ClusterTool);
* ``BackupQuery`` -> ``BackupResponse`` (Aeron's backup query, asked by ClusterBackup; a ``Challenge`` /
  ``ChallengeResponse`` round first when the member's authenticator asks for one), and the backup's
  reads: ``ReplayRequest`` (the committed log) and ``SnapshotReplayRequest`` (one snapshot recording)
  -> ``ReplayBlock`` or ``ArchiveError`` (clusterlab.core.codec.transport).

They travel only on the control channel; a consensus module never sees them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, ClassVar

from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.codec.message import ENUM32, AsciiVar, DataVar, Group, GroupEntry, Int32, Int64, Message, codec

NOT_STARTED = -1  # NodeStatus.module_state / role before the module started (tcp: awaiting members)
NO_ELECTION = -1  # NodeStatus.election_state when no election runs


class ControlResponseCode(IntEnum):
    """``ControlResponse.code``."""

    OK = 0
    REFUSED = 1  # understood, but not now (not the leader, toggle busy, not started)
    ERROR = 2  # the request itself was bad (unknown member, bad value)


@codec
@dataclass(frozen=True, slots=True)
class StatusRequest(Message):
    """Ask a process for its status; answered with ``NodeStatus`` or ``ServiceStatus``."""

    TEMPLATE_ID: ClassVar[int] = 210
    BLOCK_LENGTH: ClassVar[int] = 8

    correlation_id: Int64


@codec
@dataclass(frozen=True, slots=True)
class NodeStatus(Message):
    """A node's consensus module as the status table shows it. ``role``, ``election_state`` and
    ``module_state`` are the ordinals of Role, ElectionState and ConsensusModuleState, or -1
    (not started / no election). ``endpoints`` is the member's own configuration entry
    (``id,ingress,consensus,log,catchup,archive``) with the addresses it actually bound."""

    TEMPLATE_ID: ClassVar[int] = 211
    BLOCK_LENGTH: ClassVar[int] = 96

    correlation_id: Int64
    leadership_term_id: Int64
    commit_position: Int64
    append_position: Int64
    ignored_count: Int64  # peer input dropped with a reason: module + runtime (bad frames)
    gate_dropped_count: Int64  # member-to-member messages the chaos gate dropped
    send_dropped_count: Int64  # sends ZeroMQ refused without blocking (peer down, queue full)
    received_count: Int64  # messages read from all sockets
    member_id: Int32
    role: Int32
    election_state: Int32
    module_state: Int32
    leader_member_id: Int32
    session_count: Int32
    snapshot_count: Int32
    pid: Int32
    endpoints: AsciiVar
    detail: AsciiVar  # ConsensusModule.describe()
    health: AsciiVar  # what an operator must see beside the role ("; "-separated), "" when healthy


@codec
@dataclass(frozen=True, slots=True)
class ServiceStatus(Message):
    """A service process: where its service is in the log and its state digest there."""

    TEMPLATE_ID: ClassVar[int] = 212
    BLOCK_LENGTH: ClassVar[int] = 56

    correlation_id: Int64
    log_position: Int64  # end of the last applied entry
    leadership_term_id: Int64
    applied_count: Int64  # entries applied by this incarnation (replay included)
    ignored_count: Int64
    member_id: Int32
    role: Int32
    terminated: Int32  # 1 once the service terminated (SHUTDOWN / ABORT)
    pid: Int32
    state_digest: DataVar


@codec
@dataclass(frozen=True, slots=True)
class GateRule(Message):
    """The chaos gate rule for the directed link receiver-of-this -> ``dst_member_id`` (-1: every
    peer). ``loss_ppm`` of the messages are dropped (1_000_000 = all, a partition); the rest are
    held back ``delay_ns``. loss 0 and delay 0 clears the rule."""

    TEMPLATE_ID: ClassVar[int] = 213
    BLOCK_LENGTH: ClassVar[int] = 24

    correlation_id: Int64
    delay_ns: Int64
    dst_member_id: Int32
    loss_ppm: Int32


@codec
@dataclass(frozen=True, slots=True)
class ClockOffset(Message):
    """Add ``offset_ns`` to the process clock from now on (clock-skew chaos). The clock never runs
    backwards: a smaller offset holds time still until the monotonic clock catches up."""

    TEMPLATE_ID: ClassVar[int] = 214
    BLOCK_LENGTH: ClassVar[int] = 16

    correlation_id: Int64
    offset_ns: Int64


@codec
@dataclass(frozen=True, slots=True)
class ClusterControlRequest(Message):
    """Set the cluster control toggle (ClusterTool: snapshot, suspend, resume, shutdown, abort).
    Only the leader accepts; see ``ConsensusModule.toggle_control``."""

    TEMPLATE_ID: ClassVar[int] = 215
    BLOCK_LENGTH: ClassVar[int] = 12

    correlation_id: Int64
    toggle: Annotated[ToggleState, ENUM32]


@codec
@dataclass(frozen=True, slots=True)
class ControlResponse(Message):
    """The answer to a control request; ``code`` is a ControlResponseCode."""

    TEMPLATE_ID: ClassVar[int] = 216
    BLOCK_LENGTH: ClassVar[int] = 12

    correlation_id: Int64
    code: Annotated[ControlResponseCode, ENUM32]
    message: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class MembersConfig(Message):
    """The cluster's member endpoints, ``id,ingress,consensus,log,catchup,archive|...`` (Aeron's
    cluster members string). A tcp node whose peers' OS-assigned ports are not known yet waits
    for this before it starts; a running node reconnects to the endpoints that changed."""

    TEMPLATE_ID: ClassVar[int] = 217
    BLOCK_LENGTH: ClassVar[int] = 8

    correlation_id: Int64
    members: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class StorageFault(Message):
    """Disk-fault chaos on a running node: from now on its storage refuses writes under ``path_prefix``
    with errno ``code`` (28 ENOSPC, 5 EIO; ``count`` writes, -1 = until cleared; ``torn`` 1 = the
    failing write first lands a random part). ``code`` 0 clears every storage fault."""

    TEMPLATE_ID: ClassVar[int] = 218
    BLOCK_LENGTH: ClassVar[int] = 20

    correlation_id: Int64
    code: Int32
    count: Int32
    torn: Int32
    path_prefix: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class CountersRequest(Message):
    """Ask a node for its consensus-module counters; answered with ``Counters``."""

    TEMPLATE_ID: ClassVar[int] = 225
    BLOCK_LENGTH: ClassVar[int] = 8

    correlation_id: Int64


@codec
@dataclass(frozen=True, slots=True)
class DistinctError(GroupEntry):
    """One entry of ``Counters.error_log``: an error and how often the node observed it (Aeron's
    DistinctErrorLog, which ClusterTool ``errors`` reads)."""

    BLOCK_LENGTH: ClassVar[int] = 8

    observation_count: Int64
    message: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class Counters(Message):
    """A node's consensus-module counters (clusterlab.core.consensus.counters.ClusterCounters, field
    for field) and its distinct error log; ``started`` is 0 before the module started (every counter
    is then 0 or -1, the log empty)."""

    TEMPLATE_ID: ClassVar[int] = 226
    BLOCK_LENGTH: ClassVar[int] = 104

    correlation_id: Int64
    commit_position: Int64
    election_count: Int64
    leadership_term_id: Int64
    snapshot_count: Int64
    last_snapshot_duration_ns: Int64
    max_snapshot_duration_ns: Int64
    errors: Int64
    timed_out_client_count: Int64
    cluster_time_ms: Int64
    member_id: Int32
    module_state: Int32
    role: Int32
    control_toggle: Int32
    election_state: Int32
    started: Int32
    error_log: Annotated[tuple[DistinctError, ...], Group(DistinctError)]


class TestHookKind(IntEnum):
    """``TestHook.kind``: Aeron's test hooks (TestCluster / ConsensusModule.Context hooks)."""

    __test__ = False  # not a pytest test class

    CLEAR = 0  # remove every hook
    STALL_ELECTION_STATE = (
        1  # the election stops once it enters ``value`` (an ElectionState); ``delay_ns``>0: once, that long
    )
    FAIL_CATCHUP = 2  # the next ``value`` catch-up attempts fail (the member falls back to a new election)
    DELAY_SERVICE_MESSAGE = 3  # the service holds its next session message ``delay_ns`` before applying it
    FAIL_REQUEST_VOTE = 4  # other candidates' RequestVote for candidate term ``value`` fails (-1: clear)
    DELAY_MEMBER_MESSAGE = 5  # every member message of template ``value`` is sent ``delay_ns`` late (0: clear)
    DUPLICATE_MEMBER_MESSAGE = 6  # every member message of template ``value`` is sent now and again ``delay_ns`` later
    STOP_LOG_RECORDING = 7  # the member's archive stops its log recording where it ends (tryStopRecordingByIdentity)


@codec
@dataclass(frozen=True, slots=True)
class TestHook(Message):
    """Arm (or clear) a test hook on a running node (off unless armed; answered with ``ControlResponse``);
    ``STOP_LOG_RECORDING`` is a fault the test injects once (the archive inside the node stops the log
    recording, as Aeron's test stops it through the archive's control channel)."""

    __test__: ClassVar[bool] = False  # not a pytest test class
    TEMPLATE_ID: ClassVar[int] = 227
    BLOCK_LENGTH: ClassVar[int] = 24

    correlation_id: Int64
    delay_ns: Int64
    kind: Annotated[TestHookKind, ENUM32]
    value: Int32


@codec
@dataclass(frozen=True, slots=True)
class PurgeSegments(Message):
    """Purge the log recording's segments below the latest snapshot (Aeron's archive ``purgeSegments``
    as TestCluster.purgeLogToLastSnapshot uses it); ``ControlResponse.message`` says the new start."""

    TEMPLATE_ID: ClassVar[int] = 228
    BLOCK_LENGTH: ClassVar[int] = 8

    correlation_id: Int64


@codec
@dataclass(frozen=True, slots=True)
class BackupQuery(Message):
    """ClusterBackup asks a member what to back up (Aeron's ``BackupQuery``), with its credentials for the
    member's authenticator; answered with ``BackupResponse``, a ``Challenge`` (the backup answers with a
    ``ChallengeResponse``, answered in turn like the query), or ``ControlResponse`` REFUSED while the member
    is in an election or not running, or with the message AUTHENTICATION_REJECTED."""

    TEMPLATE_ID: ClassVar[int] = 219
    BLOCK_LENGTH: ClassVar[int] = 8

    correlation_id: Int64
    encoded_credentials: DataVar


@codec
@dataclass(frozen=True, slots=True)
class BackupTerm(GroupEntry):
    """One TERM entry of the member's recording log (``log_position`` -1 while the term is open)."""

    BLOCK_LENGTH: ClassVar[int] = 32

    leadership_term_id: Int64
    term_base_log_position: Int64
    log_position: Int64
    timestamp: Int64


@codec
@dataclass(frozen=True, slots=True)
class BackupSnapshot(GroupEntry):
    """One snapshot of the member's latest valid snapshot set (service -1 is the consensus module's)."""

    BLOCK_LENGTH: ClassVar[int] = 44

    recording_id: Int64
    leadership_term_id: Int64
    term_base_log_position: Int64
    log_position: Int64
    timestamp: Int64
    service_id: Int32


@codec
@dataclass(frozen=True, slots=True)
class BackupResponse(Message):
    """What a member holds (Aeron's ``BackupResponse``): its log recording's extent, the position it has
    committed (a backup copies the log only up to here), the leader it follows, its recording log's terms
    and its latest snapshot set (consensus module first, then services 0..n-1)."""

    TEMPLATE_ID: ClassVar[int] = 220
    BLOCK_LENGTH: ClassVar[int] = 56

    correlation_id: Int64
    log_recording_id: Int64
    log_start_position: Int64
    log_stop_position: Int64
    commit_position: Int64
    leadership_term_id: Int64
    leader_member_id: Int32
    member_id: Int32
    terms: Annotated[tuple[BackupTerm, ...], Group(BackupTerm)]
    snapshots: Annotated[tuple[BackupSnapshot, ...], Group(BackupSnapshot)]
    cluster_members: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class SnapshotReplayRequest(Message):
    """Read ``[from_position, ...)`` of snapshot recording ``recording_id`` of service ``service_id``
    (-1: the consensus module), at most ``max_bytes``: Aeron's archive replay of a snapshot recording as
    ClusterBackup's snapshot retrieval uses it. Answered with a ``ReplayBlock`` (purpose SNAPSHOT,
    ``recording_stop_position`` = the recording's length) or an ``ArchiveError``."""

    TEMPLATE_ID: ClassVar[int] = 221
    BLOCK_LENGTH: ClassVar[int] = 32

    correlation_id: Int64
    recording_id: Int64
    from_position: Int64
    service_id: Int32
    max_bytes: Int32


MESSAGES: tuple[type[Message], ...] = (
    StatusRequest,
    NodeStatus,
    ServiceStatus,
    GateRule,
    ClockOffset,
    ClusterControlRequest,
    ControlResponse,
    MembersConfig,
    StorageFault,
    CountersRequest,
    Counters,
    TestHook,
    PurgeSegments,
    BackupQuery,
    BackupResponse,
    SnapshotReplayRequest,
)

__all__ = [
    "MESSAGES",
    "NOT_STARTED",
    "NO_ELECTION",
    "BackupQuery",
    "BackupResponse",
    "BackupSnapshot",
    "BackupTerm",
    "ClockOffset",
    "ClusterControlRequest",
    "ControlResponse",
    "ControlResponseCode",
    "Counters",
    "CountersRequest",
    "GateRule",
    "MembersConfig",
    "NodeStatus",
    "PurgeSegments",
    "ServiceStatus",
    "SnapshotReplayRequest",
    "StatusRequest",
    "StorageFault",
    "TestHook",
    "TestHookKind",
]
