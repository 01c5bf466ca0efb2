"""Records of consensus-module and service snapshots (docs/protocol.md c.7, contents per c.12)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from clusterlab.core.codec.enums import CloseReason, ClusterTimeUnit, SnapshotMark
from clusterlab.core.codec.message import ENUM32, AsciiVar, DataVar, Int32, Int64, Message, TimeT, VersionT, codec


@codec
@dataclass(frozen=True, slots=True)
class SnapshotMarker(Message):
    """BEGIN / END bracket of a snapshot; ``type_id`` is SnapshotTypeId (1 = CM, 2 = service)."""

    TEMPLATE_ID: ClassVar[int] = 100
    BLOCK_LENGTH: ClassVar[int] = 40

    type_id: Int64
    log_position: Int64
    leadership_term_id: Int64
    index: Int32
    mark: Annotated[SnapshotMark, ENUM32]
    time_unit: Annotated[ClusterTimeUnit, ENUM32]
    app_version: VersionT


@codec
@dataclass(frozen=True, slots=True)
class ClientSession(Message):
    """An open client session in a *service* snapshot."""

    TEMPLATE_ID: ClassVar[int] = 102
    BLOCK_LENGTH: ClassVar[int] = 12

    cluster_session_id: Int64
    response_stream_id: Int32
    response_channel: AsciiVar
    encoded_principal: DataVar


@codec
@dataclass(frozen=True, slots=True)
class ClusterSession(Message):
    """An open or closing session in the *CM* snapshot; ``close_reason`` NULL_VAL while open."""

    TEMPLATE_ID: ClassVar[int] = 103
    BLOCK_LENGTH: ClassVar[int] = 40

    cluster_session_id: Int64
    correlation_id: Int64
    opened_log_position: Int64
    time_of_last_activity: TimeT
    close_reason: Annotated[CloseReason, ENUM32]
    response_stream_id: Int32
    response_channel: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class Timer(Message):
    """A scheduled timer in the CM snapshot."""

    TEMPLATE_ID: ClassVar[int] = 104
    BLOCK_LENGTH: ClassVar[int] = 16

    correlation_id: Int64
    deadline: TimeT


@codec
@dataclass(frozen=True, slots=True)
class ConsensusModuleSnapshot(Message):
    """Aeron's ``ConsensusModule`` snapshot record (template 105); renamed so it does not clash with
    the consensus module itself."""

    TEMPLATE_ID: ClassVar[int] = 105
    BLOCK_LENGTH: ClassVar[int] = 28

    next_session_id: Int64
    next_service_session_id: Int64
    log_service_session_id: Int64
    pending_message_capacity: Int32


@codec
@dataclass(frozen=True, slots=True)
class ClusterMembers(Message):
    """Member configuration in a snapshot (dynamic membership, deprecated)."""

    TEMPLATE_ID: ClassVar[int] = 106
    BLOCK_LENGTH: ClassVar[int] = 8

    member_id: Int32
    high_member_id: Int32
    cluster_members: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class PendingMessageTracker(Message):
    """Per-service tracker of not-yet-committed service messages in the CM snapshot."""

    TEMPLATE_ID: ClassVar[int] = 107
    BLOCK_LENGTH: ClassVar[int] = 24

    next_service_session_id: Int64
    log_service_session_id: Int64
    pending_message_capacity: Int32
    service_id: Int32


MESSAGES: tuple[type[Message], ...] = (
    SnapshotMarker,
    ClientSession,
    ClusterSession,
    Timer,
    ConsensusModuleSnapshot,
    ClusterMembers,
    PendingMessageTracker,
)
