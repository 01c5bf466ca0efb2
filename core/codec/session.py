"""Client session protocol (docs/protocol.md c.2): ingress, egress, and the session message that also
travels in the log and from services to the consensus module."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Annotated, ClassVar

from clusterlab.core.codec.enums import AdminRequestType, AdminResponseCode, EventCode
from clusterlab.core.codec.header import HEADER_LENGTH, SCHEMA_ID
from clusterlab.core.codec.message import (
    ENUM32,
    AsciiVar,
    DataVar,
    Int32,
    Int64,
    Message,
    Payload,
    TimeT,
    VersionT,
    codec,
)

# The per-entry helpers (compiled with mypyc), re-exported: import them from here.
from clusterlab.core.codec.session_header import SESSION_HEADER_LENGTH as SESSION_HEADER_LENGTH
from clusterlab.core.codec.session_header import encode_session_message as encode_session_message
from clusterlab.core.codec.session_header import session_message_fields as session_message_fields


@codec
@dataclass(frozen=True, slots=True)
class SessionMessageHeader(Message):
    """An application message; ``payload`` is every byte after the 32-byte header + block (in
    Aeron the payload follows directly, it is not a length-prefixed var field)."""

    TEMPLATE_ID: ClassVar[int] = 1
    BLOCK_LENGTH: ClassVar[int] = 24

    leadership_term_id: Int64
    cluster_session_id: Int64
    timestamp: TimeT
    payload: Payload


assert SESSION_HEADER_LENGTH == HEADER_LENGTH + SessionMessageHeader.BLOCK_LENGTH
# Where the timestamp sits in an encoded SessionMessageHeader (the leader stamps client messages).
SESSION_TIMESTAMP_OFFSET = SESSION_HEADER_LENGTH - 8
SESSION_TIMESTAMP = struct.Struct("<q")
assert SessionMessageHeader._HEAD == (24, 1, SCHEMA_ID, 12)  # the literals in session_header.py


def session_message_ids(buf: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """``(leadership_term_id, cluster_session_id, timestamp)`` of a SessionMessageHeader, without
    copying its payload; raises DecodeError like :meth:`SessionMessageHeader.decode`."""
    fields = session_message_fields(buf)
    if fields is not None:
        return fields
    m = SessionMessageHeader.decode(buf)  # another block length or version, or the right DecodeError
    return m.leadership_term_id, m.cluster_session_id, m.timestamp


def unpack_session_message(buf: bytes | bytearray | memoryview) -> tuple[int, int, int, bytes]:
    """``(leadership_term_id, cluster_session_id, timestamp, payload)`` without building the
    dataclass; raises DecodeError like :meth:`SessionMessageHeader.decode`."""
    fields = session_message_fields(buf)
    if fields is not None:
        return fields[0], fields[1], fields[2], bytes(buf[SESSION_HEADER_LENGTH:])
    m = SessionMessageHeader.decode(buf)  # another block length or version, or the right DecodeError
    return m.leadership_term_id, m.cluster_session_id, m.timestamp, m.payload


@codec
@dataclass(frozen=True, slots=True)
class SessionEvent(Message):
    """Reply to a connect request, or asynchronous notice that a session closed."""

    TEMPLATE_ID: ClassVar[int] = 2
    BLOCK_LENGTH: ClassVar[int] = 36

    cluster_session_id: Int64
    correlation_id: Int64
    leadership_term_id: Int64
    leader_member_id: Int32
    code: Annotated[EventCode, ENUM32]
    version: VersionT
    detail: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class SessionConnectRequest(Message):
    """A client asks to open a session."""

    TEMPLATE_ID: ClassVar[int] = 3
    BLOCK_LENGTH: ClassVar[int] = 16

    correlation_id: Int64
    response_stream_id: Int32
    version: VersionT
    response_channel: AsciiVar
    encoded_credentials: DataVar


@codec
@dataclass(frozen=True, slots=True)
class SessionCloseRequest(Message):
    """A client closes its session."""

    TEMPLATE_ID: ClassVar[int] = 4
    BLOCK_LENGTH: ClassVar[int] = 16

    leadership_term_id: Int64
    cluster_session_id: Int64


@codec
@dataclass(frozen=True, slots=True)
class SessionKeepAlive(Message):
    """A client keeps an idle session from timing out."""

    TEMPLATE_ID: ClassVar[int] = 5
    BLOCK_LENGTH: ClassVar[int] = 16

    leadership_term_id: Int64
    cluster_session_id: Int64


@codec
@dataclass(frozen=True, slots=True)
class NewLeaderEvent(Message):
    """A new leader tells a surviving session where to send ingress now."""

    TEMPLATE_ID: ClassVar[int] = 6
    BLOCK_LENGTH: ClassVar[int] = 20

    leadership_term_id: Int64
    cluster_session_id: Int64
    leader_member_id: Int32
    ingress_endpoints: AsciiVar


@codec
@dataclass(frozen=True, slots=True)
class Challenge(Message):
    """Authenticator challenge to a connecting client."""

    TEMPLATE_ID: ClassVar[int] = 7
    BLOCK_LENGTH: ClassVar[int] = 16

    correlation_id: Int64
    cluster_session_id: Int64
    encoded_challenge: DataVar


@codec
@dataclass(frozen=True, slots=True)
class ChallengeResponse(Message):
    """A client's answer to a Challenge."""

    TEMPLATE_ID: ClassVar[int] = 8
    BLOCK_LENGTH: ClassVar[int] = 16

    correlation_id: Int64
    cluster_session_id: Int64
    encoded_credentials: DataVar


@codec
@dataclass(frozen=True, slots=True)
class AdminRequest(Message):
    """An administrative request (e.g. take a snapshot) from a client session."""

    TEMPLATE_ID: ClassVar[int] = 26
    BLOCK_LENGTH: ClassVar[int] = 28

    leadership_term_id: Int64
    cluster_session_id: Int64
    correlation_id: Int64
    request_type: Annotated[AdminRequestType, ENUM32]
    payload: DataVar


@codec
@dataclass(frozen=True, slots=True)
class AdminResponse(Message):
    """The cluster's answer to an AdminRequest."""

    TEMPLATE_ID: ClassVar[int] = 27
    BLOCK_LENGTH: ClassVar[int] = 24

    cluster_session_id: Int64
    correlation_id: Int64
    request_type: Annotated[AdminRequestType, ENUM32]
    response_code: Annotated[AdminResponseCode, ENUM32]
    message: AsciiVar
    payload: DataVar


MESSAGES: tuple[type[Message], ...] = (
    SessionMessageHeader,
    SessionEvent,
    SessionConnectRequest,
    SessionCloseRequest,
    SessionKeepAlive,
    NewLeaderEvent,
    Challenge,
    ChallengeResponse,
    AdminRequest,
    AdminResponse,
)
