"""Template id -> message class for every family, and decoding of a message of unknown type."""

from __future__ import annotations

from clusterlab.core.codec import consensus, control, log_events, service, session, snapshot, transport
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.header import HEADER, HEADER_LENGTH, SCHEMA_ID, peek_template_id
from clusterlab.core.codec.message import Message

__all__ = ["REGISTRY", "decode", "message_name", "peek_template_id"]


def _build() -> dict[int, type[Message]]:
    registry: dict[int, type[Message]] = {}
    for family in (session, log_events, service, consensus, snapshot, transport, control):
        for cls in family.MESSAGES:
            if cls.TEMPLATE_ID in registry:
                other = registry[cls.TEMPLATE_ID].__name__
                raise RuntimeError(f"template id {cls.TEMPLATE_ID} used by {other} and {cls.__name__}")
            # 210-229 belong to the runtime's control messages (clusterlab.core.codec.control) and only to them.
            if (cls.TEMPLATE_ID in transport.RESERVED_TEMPLATE_IDS) != (family is control):
                raise RuntimeError(f"{cls.__name__}: template id {cls.TEMPLATE_ID} is outside its family's range")
            registry[cls.TEMPLATE_ID] = cls
    return registry


REGISTRY: dict[int, type[Message]] = _build()


def decode(buf: bytes | bytearray | memoryview) -> Message:
    """Decode any schema-111 message; raises DecodeError on anything malformed or unknown."""
    n = len(buf)
    if n < HEADER_LENGTH:
        raise DecodeError("MessageHeader", f"truncated header: {n} of {HEADER_LENGTH} bytes")
    cls = REGISTRY.get(buf[2] | buf[3] << 8)
    if cls is None:
        _block_length, template_id, schema_id, _version = HEADER.unpack_from(buf)
        if schema_id != SCHEMA_ID:
            raise DecodeError("MessageHeader", f"schema id {schema_id}, expected {SCHEMA_ID}")
        raise DecodeError("MessageHeader", f"unknown template id {template_id}")
    return cls.decode(buf)  # checks the schema id and names the class if it is wrong


def message_name(buf: bytes | bytearray | memoryview) -> str:
    """The class name of the message in ``buf`` from its header alone, for logs and traces.

    Never raises: undecodable headers give ``"Truncated(length=N)"``,
    ``"Unknown(template_id=N)"`` or ``"ForeignSchema(schema_id=S template_id=N)"``."""
    if len(buf) < HEADER_LENGTH:
        return f"Truncated(length={len(buf)})"
    _block_length, template_id, schema_id, _version = HEADER.unpack_from(buf)
    if schema_id != SCHEMA_ID:
        return f"ForeignSchema(schema_id={schema_id} template_id={template_id})"
    cls = REGISTRY.get(template_id)
    return cls.__name__ if cls is not None else f"Unknown(template_id={template_id})"
