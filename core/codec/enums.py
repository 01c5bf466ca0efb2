"""Enums of docs/protocol.md c.1 (schema 111) plus the ones our ZeroMQ transport adds.

All are encoded as int32 unless noted. Names and values are Aeron's.

Nulls: SBE gives every enum a null value (INT32_MIN for int32 enums); Aeron's Java codecs expose it as
a ``NULL_VAL`` constant. Where docs/protocol.md documents the null as meaningful we do the same:
``CloseReason.NULL_VAL`` ("not closing"), ``ClusterTimeUnit.NULL_VAL`` (receivers treat it as
MILLIS) and ``AdminRequestType.NULL_VAL`` (answered "Unknown request type", as Aeron). Every other
enum is strict: decoding an undefined value, including INT32_MIN, is a
DecodeError.

``Cluster.Role`` (JoinLog.role, an int32 on the wire) and ``ConsensusModule.State`` live in
:mod:`clusterlab.core.consensus.context` as ``Role`` and ``ConsensusModuleState``; the codec does not import the
consensus package, so they are not repeated here.
"""

from __future__ import annotations

from enum import IntEnum

INT32_MIN = -(2**31)


class BooleanType(IntEnum):
    """SBE ``BooleanType``."""

    FALSE = 0
    TRUE = 1


class EventCode(IntEnum):
    """``SessionEvent.code``."""

    OK = 0
    ERROR = 1
    REDIRECT = 2
    AUTHENTICATION_REJECTED = 3
    CLOSED = 4


class CloseReason(IntEnum):
    """Why a session closed; ``NULL_VAL`` means "not closing" (e.g. ClusterSession of an open session)."""

    NULL_VAL = INT32_MIN
    CLIENT_ACTION = 0
    SERVICE_ACTION = 1
    TIMEOUT = 2


class ClusterAction(IntEnum):
    """``ClusterActionRequest.action``."""

    SUSPEND = 0
    RESUME = 1
    SNAPSHOT = 2


class ClusterActionRequestFlags(IntEnum):
    """Values of ``ClusterActionRequest.flags`` (an int32 on the wire, kept as int in the message)."""

    DEFAULT = 0
    STANDBY_SNAPSHOT = 1  # services on the primary cluster skip this snapshot


class SnapshotMark(IntEnum):
    """``SnapshotMarker.mark``."""

    BEGIN = 0
    SECTION = 1
    END = 2


class ChangeType(IntEnum):
    """``MembershipChangeEvent.changeType`` (dynamic membership is deprecated)."""

    JOIN = 0
    QUIT = 1


class ClusterTimeUnit(IntEnum):
    """Unit of ``time_t`` fields; ``NULL_VAL`` is treated as MILLIS by receivers."""

    NULL_VAL = INT32_MIN
    MILLIS = 0
    MICROS = 1
    NANOS = 2


class AdminRequestType(IntEnum):
    """``AdminRequest.requestType``; ``NULL_VAL`` (Aeron's SBE null) is answered "Unknown request type"."""

    NULL_VAL = INT32_MIN
    SNAPSHOT = 0


class AdminResponseCode(IntEnum):
    """``AdminResponse.responseCode``."""

    OK = 0
    ERROR = 1
    UNAUTHORISED_ACCESS = 2


class AppendPositionFlags(IntEnum):
    """Values of ``AppendPosition.flags`` (a uint8 on the wire, kept as int; null is treated as 0)."""

    NONE = 0
    CATCHUP = 1


class ToggleState(IntEnum):
    """``ClusterControl.ToggleState``: the operator control toggle's value."""

    INACTIVE = 0
    NEUTRAL = 1
    SUSPEND = 2
    RESUME = 3
    SNAPSHOT = 4
    SHUTDOWN = 5
    ABORT = 6
    STANDBY_SNAPSHOT = 7


class RecordingLogEntryType(IntEnum):
    """Entry type of a recording-log record (c.9); bit 31 set marks an invalidated entry."""

    TERM = 0
    SNAPSHOT = 1
    STANDBY_SNAPSHOT = 2


RECORDING_LOG_ENTRY_INVALID_FLAG = 1 << 31


class SnapshotTypeId(IntEnum):
    """``SnapshotMarker.type_id`` (an int64 on the wire, kept as int in the message)."""

    CONSENSUS_MODULE = 1
    SERVICE = 2


class ReplayPurpose(IntEnum):
    """Why a ReplayRequest was sent (our transport, c.f. Aeron's replication / catch-up replays)."""

    REPLICATION = 0
    CATCHUP = 1
    SNAPSHOT = 2


class ReplayBlockFlags(IntEnum):
    """Bits of ``ReplayBlock.flags`` (kept as int in the message)."""

    NONE = 0
    LAST = 1
