"""The SessionMessageHeader's per-entry helpers, compiled with mypyc (setup.py ``COMPILED``).

Every applied entry (the service agent), every appended or replayed entry (the consensus module) and
every service reply goes through one of these. ``core/codec/session.py`` re-exports them (import them
from there); where the build cannot run they run as plain Python with the same results. The message
classes stay in session.py: their ``@codec`` dataclasses are built at import time."""

from __future__ import annotations

import struct
from typing import Final

from clusterlab.core.codec.header import HEADER_LENGTH, SCHEMA_ID

# The 8-byte message header of a SessionMessageHeader (block length 24, template 1, schema, version 12),
# then leadershipTermId, clusterSessionId and timestamp (int64 each), then the payload.
SESSION_HEADER_LENGTH: Final = HEADER_LENGTH + 24
_SMH: Final = struct.Struct("<HHHHqqq")
_IDS: Final = struct.Struct("<qqq")
_SCHEMA_LOW: Final = SCHEMA_ID & 0xFF
_SCHEMA_HIGH: Final = SCHEMA_ID >> 8


def encode_session_message(
    leadership_term_id: int, cluster_session_id: int, timestamp: int, payload: bytes | bytearray | memoryview
) -> bytes:
    """Encode a SessionMessageHeader without building the dataclass (the hot path). ``payload`` is
    typed as wide as the interpreted function took it (compiled, the annotation is checked).

    Raises ValueError if an int is out of int64 range."""
    try:
        block = _SMH.pack(24, 1, SCHEMA_ID, 12, leadership_term_id, cluster_session_id, timestamp)
    except struct.error as e:
        raise ValueError(f"SessionMessageHeader: {e}") from None
    return block + payload


def session_message_fields(buf: bytes | bytearray | memoryview) -> tuple[int, int, int] | None:
    """``(leadership_term_id, cluster_session_id, timestamp)`` if ``buf`` is a SessionMessageHeader of
    the usual shape (exactly the header :func:`encode_session_message` writes, so its payload starts
    at SESSION_HEADER_LENGTH), else None: decode it then."""
    if isinstance(buf, bytes):
        # The header's 8 bytes one by one (compiled: no tuple of 7 boxed fields to compare).
        if (
            len(buf) >= SESSION_HEADER_LENGTH
            and buf[0] == 24
            and buf[1] == 0
            and buf[2] == 1
            and buf[3] == 0
            and buf[4] == _SCHEMA_LOW
            and buf[5] == _SCHEMA_HIGH
            and buf[6] == 12
            and buf[7] == 0
        ):
            ids: tuple[int, int, int] = _IDS.unpack_from(buf, 8)
            return ids
        return None
    if len(buf) >= SESSION_HEADER_LENGTH:
        block_length, template_id, schema_id, version, term, session, timestamp = _SMH.unpack_from(buf)
        if block_length == 24 and template_id == 1 and schema_id == SCHEMA_ID and version == 12:
            return term, session, timestamp
    return None


# True when this module runs as the mypyc-compiled extension (its __file__ is the shared object).
COMPILED: Final = not __file__.endswith(".py")
