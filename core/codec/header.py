"""The 8-byte SBE message header that precedes every message of schema 111.

| offset | size | field |
|---|---|---|
| 0 | 2 | block_length: uint16, length of the fixed block that follows |
| 2 | 2 | template_id: uint16, which message |
| 4 | 2 | schema_id: uint16 (= SCHEMA_ID, 111) |
| 6 | 2 | version: uint16 (= SCHEMA_VERSION, 12) |

All little-endian. The receiver uses the *sender's* block_length to find the variable fields, so a
newer sender may append fixed fields that an older receiver skips.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from clusterlab.core.codec.errors import DecodeError

SCHEMA_ID = 111
SCHEMA_VERSION = 12
HEADER_LENGTH = 8

HEADER = struct.Struct("<HHHH")

_U16_MAX = 0xFFFF


@dataclass(frozen=True, slots=True)
class MessageHeader:
    """SBE ``messageHeader`` composite."""

    block_length: int
    template_id: int
    schema_id: int = SCHEMA_ID
    version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name in ("block_length", "template_id", "schema_id", "version"):
            value = getattr(self, name)
            if not isinstance(value, int):
                raise TypeError(f"MessageHeader.{name}: expected int, got {type(value).__name__}")
            if not 0 <= value <= _U16_MAX:
                raise ValueError(f"MessageHeader.{name}={value} out of range for uint16")

    def encode(self) -> bytes:
        """The 8 header bytes."""
        return HEADER.pack(self.block_length, self.template_id, self.schema_id, self.version)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview) -> MessageHeader:
        """Read the header at the start of ``buf`` (which may continue with the message)."""
        if len(buf) < HEADER_LENGTH:
            raise DecodeError("MessageHeader", f"truncated header: {len(buf)} of {HEADER_LENGTH} bytes")
        return cls(*HEADER.unpack_from(buf, 0))

    def describe(self) -> str:
        """One canonical line."""
        return (
            f"MessageHeader(block_length={self.block_length} template_id={self.template_id} "
            f"schema_id={self.schema_id} version={self.version})"
        )


def peek_template_id(buf: bytes | bytearray | memoryview) -> int:
    """The template id of the message in ``buf`` without decoding it (schema id is not checked)."""
    if len(buf) < HEADER_LENGTH:
        raise DecodeError("MessageHeader", f"truncated header: {len(buf)} of {HEADER_LENGTH} bytes")
    return HEADER.unpack_from(buf, 0)[1]
