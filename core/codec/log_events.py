"""Messages the consensus module writes into the replicated log (docs/protocol.md c.3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from clusterlab.core.codec.enums import ChangeType, CloseReason, ClusterAction, ClusterTimeUnit
from clusterlab.core.codec.message import ENUM32, AsciiVar, DataVar, Int32, Int64, Message, TimeT, VersionT, codec


@codec
@dataclass(frozen=True, slots=True)
class TimerEvent(Message):
    """A scheduled timer expired (appended by the leader)."""

    TEMPLATE_ID: ClassVar[int] = 20
    BLOCK_LENGTH: ClassVar[int] = 24

    leadership_term_id: Int64
    correlation_id: Int64
    timestamp: TimeT


@codec
@dataclass(frozen=True, slots=True)
class SessionOpenEvent(Message):
    """A client session was authenticated; carries what every member needs to rebuild it."""

    TEMPLATE_ID: ClassVar[int] = 21
    BLOCK_LENGTH: ClassVar[int] = 36

    leadership_term_id: Int64
    correlation_id: Int64
    cluster_session_id: Int64
    timestamp: TimeT
    response_stream_id: Int32
    response_channel: AsciiVar
    encoded_principal: DataVar


@codec
@dataclass(frozen=True, slots=True)
class SessionCloseEvent(Message):
    """A client session closed (client action, service action or timeout)."""

    TEMPLATE_ID: ClassVar[int] = 22
    BLOCK_LENGTH: ClassVar[int] = 28

    leadership_term_id: Int64
    cluster_session_id: Int64
    timestamp: TimeT
    close_reason: Annotated[CloseReason, ENUM32]


@codec
@dataclass(frozen=True, slots=True)
class ClusterActionRequest(Message):
    """SUSPEND / RESUME / SNAPSHOT; ``log_position`` is the position just after this entry."""

    TEMPLATE_ID: ClassVar[int] = 23
    BLOCK_LENGTH: ClassVar[int] = 32

    leadership_term_id: Int64
    log_position: Int64
    timestamp: TimeT
    action: Annotated[ClusterAction, ENUM32]
    flags: Int32  # ClusterActionRequestFlags; kept as int so unknown bits survive


@codec
@dataclass(frozen=True, slots=True)
class NewLeadershipTermEvent(Message):
    """First entry of every term."""

    TEMPLATE_ID: ClassVar[int] = 24
    BLOCK_LENGTH: ClassVar[int] = 48

    leadership_term_id: Int64
    log_position: Int64
    timestamp: TimeT
    term_base_log_position: Int64
    leader_member_id: Int32
    log_session_id: Int32
    time_unit: Annotated[ClusterTimeUnit, ENUM32]
    app_version: VersionT


@codec
@dataclass(frozen=True, slots=True)
class MembershipChangeEvent(Message):
    """Dynamic membership change (deprecated in Aeron; kept for the schema)."""

    TEMPLATE_ID: ClassVar[int] = 25
    BLOCK_LENGTH: ClassVar[int] = 40

    leadership_term_id: Int64
    log_position: Int64
    timestamp: TimeT
    leader_member_id: Int32
    cluster_size: Int32
    change_type: Annotated[ChangeType, ENUM32]
    member_id: Int32
    cluster_members: AsciiVar


MESSAGES: tuple[type[Message], ...] = (
    TimerEvent,
    SessionOpenEvent,
    SessionCloseEvent,
    ClusterActionRequest,
    NewLeadershipTermEvent,
    MembershipChangeEvent,
)
