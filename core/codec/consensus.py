"""Consensus messages between members (docs/protocol.md c.5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.codec.message import ENUM32, AsciiVar, Int32, Int64, Message, TimeT, UInt8, VersionT, codec


@codec
@dataclass(frozen=True, slots=True)
class CanvassPosition(Message):
    """A member's last log term and append position, sent while canvassing."""

    TEMPLATE_ID: ClassVar[int] = 50
    BLOCK_LENGTH: ClassVar[int] = 32

    log_leadership_term_id: Int64
    log_position: Int64
    leadership_term_id: Int64
    follower_member_id: Int32
    protocol_version: VersionT


@codec
@dataclass(frozen=True, slots=True)
class RequestVote(Message):
    """A candidate asks for votes in ``candidate_term_id``."""

    TEMPLATE_ID: ClassVar[int] = 51
    BLOCK_LENGTH: ClassVar[int] = 32

    log_leadership_term_id: Int64
    log_position: Int64
    candidate_term_id: Int64
    candidate_member_id: Int32
    protocol_version: VersionT


@codec
@dataclass(frozen=True, slots=True)
class Vote(Message):
    """A member's answer to RequestVote."""

    TEMPLATE_ID: ClassVar[int] = 52
    BLOCK_LENGTH: ClassVar[int] = 36

    candidate_term_id: Int64
    log_leadership_term_id: Int64
    log_position: Int64
    candidate_member_id: Int32
    follower_member_id: Int32
    vote: Annotated[BooleanType, ENUM32]


@codec
@dataclass(frozen=True, slots=True)
class NewLeadershipTerm(Message):
    """The leader announces its term and guides a follower's log forward (docs/protocol.md b.4)."""

    TEMPLATE_ID: ClassVar[int] = 53
    BLOCK_LENGTH: ClassVar[int] = 88

    log_leadership_term_id: Int64
    next_leadership_term_id: Int64
    next_term_base_log_position: Int64
    next_log_position: Int64
    leadership_term_id: Int64
    term_base_log_position: Int64
    log_position: Int64
    leader_recording_id: Int64
    timestamp: TimeT
    leader_member_id: Int32
    log_session_id: Int32
    app_version: VersionT
    is_startup: Annotated[BooleanType, ENUM32]


@codec
@dataclass(frozen=True, slots=True)
class AppendPosition(Message):
    """A follower's durably appended position; ``flags`` is AppendPositionFlags (CATCHUP=1)."""

    TEMPLATE_ID: ClassVar[int] = 54
    BLOCK_LENGTH: ClassVar[int] = 21

    leadership_term_id: Int64
    log_position: Int64
    follower_member_id: Int32
    flags: UInt8


@codec
@dataclass(frozen=True, slots=True)
class CommitPosition(Message):
    """The leader's commit position; also its heartbeat."""

    TEMPLATE_ID: ClassVar[int] = 55
    BLOCK_LENGTH: ClassVar[int] = 20

    leadership_term_id: Int64
    log_position: Int64
    leader_member_id: Int32


@codec
@dataclass(frozen=True, slots=True)
class CatchupPosition(Message):
    """A lagging follower asks the leader to replay from ``log_position`` to its catch-up endpoint."""

    TEMPLATE_ID: ClassVar[int] = 56
    BLOCK_LENGTH: ClassVar[int] = 20

    leadership_term_id: Int64
    log_position: Int64
    follower_member_id: Int32
    catchup_endpoint: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class StopCatchup(Message):
    """The leader ends a follower's catch-up replay: it has reached the live log."""

    TEMPLATE_ID: ClassVar[int] = 57
    BLOCK_LENGTH: ClassVar[int] = 12

    leadership_term_id: Int64
    follower_member_id: Int32


@codec
@dataclass(frozen=True, slots=True)
class TerminationPosition(Message):
    """The leader tells followers where the cluster stops (shutdown / abort)."""

    TEMPLATE_ID: ClassVar[int] = 75
    BLOCK_LENGTH: ClassVar[int] = 16

    leadership_term_id: Int64
    log_position: Int64


@codec
@dataclass(frozen=True, slots=True)
class TerminationAck(Message):
    """A follower has reached the termination position."""

    TEMPLATE_ID: ClassVar[int] = 76
    BLOCK_LENGTH: ClassVar[int] = 20

    leadership_term_id: Int64
    log_position: Int64
    member_id: Int32


MESSAGES: tuple[type[Message], ...] = (
    CanvassPosition,
    RequestVote,
    Vote,
    NewLeadershipTerm,
    AppendPosition,
    CommitPosition,
    CatchupPosition,
    StopCatchup,
    TerminationPosition,
    TerminationAck,
)
