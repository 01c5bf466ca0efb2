"""Service <-> consensus module control messages (docs/protocol.md c.4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.codec.message import ENUM32, AsciiVar, Group, GroupEntry, Int32, Int64, Message, TimeT, codec


@codec
@dataclass(frozen=True, slots=True)
class CloseSession(Message):
    """Service asks the CM to close a client session."""

    TEMPLATE_ID: ClassVar[int] = 30
    BLOCK_LENGTH: ClassVar[int] = 8

    cluster_session_id: Int64


@codec
@dataclass(frozen=True, slots=True)
class ScheduleTimer(Message):
    """Service schedules (or reschedules) a timer."""

    TEMPLATE_ID: ClassVar[int] = 31
    BLOCK_LENGTH: ClassVar[int] = 16

    correlation_id: Int64
    deadline: TimeT


@codec
@dataclass(frozen=True, slots=True)
class CancelTimer(Message):
    """Service cancels a timer."""

    TEMPLATE_ID: ClassVar[int] = 32
    BLOCK_LENGTH: ClassVar[int] = 8

    correlation_id: Int64


@codec
@dataclass(frozen=True, slots=True)
class ServiceAck(Message):
    """Service acknowledges reaching ``log_position`` (join, snapshot, termination)."""

    TEMPLATE_ID: ClassVar[int] = 33
    BLOCK_LENGTH: ClassVar[int] = 36

    log_position: Int64
    timestamp: TimeT
    ack_id: Int64
    relevant_id: Int64
    service_id: Int32


@codec
@dataclass(frozen=True, slots=True)
class ClusterMembersQuery(Message):
    """Service asks for the current members."""

    TEMPLATE_ID: ClassVar[int] = 34
    BLOCK_LENGTH: ClassVar[int] = 12

    correlation_id: Int64
    extended: Annotated[BooleanType, ENUM32]


@codec
@dataclass(frozen=True, slots=True)
class JoinLog(Message):
    """CM tells a service to consume the log from ``log_position``."""

    TEMPLATE_ID: ClassVar[int] = 40
    BLOCK_LENGTH: ClassVar[int] = 36

    log_position: Int64
    max_log_position: Int64
    member_id: Int32
    log_session_id: Int32
    log_stream_id: Int32
    is_startup: Annotated[BooleanType, ENUM32]
    role: Int32  # Cluster.Role (clusterlab.core.consensus.context.Role); a plain int32 in the schema
    log_channel: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class ClusterMembersResponse(Message):
    """Answer to ClusterMembersQuery (non-extended)."""

    TEMPLATE_ID: ClassVar[int] = 41
    BLOCK_LENGTH: ClassVar[int] = 12

    correlation_id: Int64
    leader_member_id: Int32
    active_members: AsciiVar
    passive_followers: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class ServiceTerminationPosition(Message):
    """CM tells a service to terminate on reaching ``log_position``."""

    TEMPLATE_ID: ClassVar[int] = 42
    BLOCK_LENGTH: ClassVar[int] = 8

    log_position: Int64


@codec
@dataclass(frozen=True, slots=True)
class MemberDetails(GroupEntry):
    """One entry of ClusterMembersExtendedResponse's ``activeMembers`` / ``passiveMembers`` groups."""

    BLOCK_LENGTH: ClassVar[int] = 28

    leadership_term_id: Int64
    log_position: Int64
    time_of_last_append_ns: TimeT
    member_id: Int32
    ingress_endpoint: AsciiVar
    consensus_endpoint: AsciiVar
    log_endpoint: AsciiVar
    catchup_endpoint: AsciiVar
    archive_endpoint: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class ClusterMembersExtendedResponse(Message):
    """Answer to ClusterMembersQuery(extended=TRUE), with per-member progress."""

    TEMPLATE_ID: ClassVar[int] = 43
    BLOCK_LENGTH: ClassVar[int] = 24

    correlation_id: Int64
    current_time_ns: TimeT
    leader_member_id: Int32
    member_id: Int32
    active_members: Annotated[tuple[MemberDetails, ...], Group(MemberDetails)]
    passive_members: Annotated[tuple[MemberDetails, ...], Group(MemberDetails)]


@codec
@dataclass(frozen=True, slots=True)
class RequestServiceAck(Message):
    """CM asks services to ack ``log_position`` (``requestServiceAck`` in the schema)."""

    TEMPLATE_ID: ClassVar[int] = 108
    BLOCK_LENGTH: ClassVar[int] = 8

    log_position: Int64


MESSAGES: tuple[type[Message], ...] = (
    CloseSession,
    ScheduleTimer,
    CancelTimer,
    ServiceAck,
    ClusterMembersQuery,
    JoinLog,
    ClusterMembersResponse,
    ServiceTerminationPosition,
    ClusterMembersExtendedResponse,
    RequestServiceAck,
)
