"""Malformed input: decode either succeeds or raises DecodeError, never anything else; and a table of
specific malformed messages whose DecodeError must name the type and the problem."""

from __future__ import annotations

import random
import struct
from typing import Any

import clusterlab.core.codec as codec
import pytest
from clusterlab.core.codec import REGISTRY, DecodeError, SessionMessageHeader, decode, message_name
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_codec_roundtrip import CLASSES, random_message

SEED = 20240611  # fixed: the loops below are deterministic; change it locally to explore


def decode_or_error(buf: bytes) -> Any | None:
    """Decode; a DecodeError is fine, any other exception fails the test. A success must re-encode."""
    try:
        msg = decode(buf)
    except DecodeError as e:
        assert e.what and e.reason
        return None
    msg.encode()  # whatever decode accepted must be a valid message
    return msg


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_truncation_at_every_length(cls: type) -> None:
    rng = random.Random(f"{SEED}-{cls.__name__}-truncate")
    for _ in range(5):
        encoded = random_message(cls, rng).encode()
        for length in range(len(encoded)):
            if cls is SessionMessageHeader and length >= 32:
                # The payload is "everything after the block", so a shorter one is still a message.
                assert decode(encoded[:length]).payload == encoded[32:length]
                continue
            with pytest.raises(DecodeError) as info:
                decode(encoded[:length])
            assert info.value.what in (cls.__name__, "MessageHeader")


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_garbage_appended(cls: type) -> None:
    rng = random.Random(f"{SEED}-{cls.__name__}-append")
    for _ in range(20):
        msg = random_message(cls, rng)
        garbage = rng.randbytes(rng.randrange(1, 40))
        if cls is SessionMessageHeader:
            assert decode(msg.encode() + garbage).payload == msg.payload + garbage
            continue
        with pytest.raises(DecodeError, match="trailing") as info:
            decode(msg.encode() + garbage)
        assert info.value.what == cls.__name__


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_bit_flips(cls: type) -> None:
    rng = random.Random(f"{SEED}-{cls.__name__}-flip")
    for _ in range(100):
        encoded = bytearray(random_message(cls, rng).encode())
        for _ in range(rng.choice([1, 1, 2, 8])):
            encoded[rng.randrange(len(encoded))] ^= 1 << rng.randrange(8)
        decode_or_error(bytes(encoded))


def test_random_bytes_with_a_valid_header() -> None:
    """Random bodies behind a plausible header, so the block and var decoders are exercised."""
    rng = random.Random(f"{SEED}-bodies")
    for _ in range(3000):
        cls = rng.choice(CLASSES)
        block_length = max(0, cls.BLOCK_LENGTH + rng.choice([0, 0, 0, -1, 1, rng.randrange(-8, 16)]))
        body = rng.randbytes(rng.randrange(0, 96))
        if rng.random() < 0.5:  # plausible small var lengths, so var fields are reached more often
            body = rng.randbytes(block_length) + struct.pack("<I", rng.randrange(0, 12)) + body
        decode_or_error(struct.pack("<HHHH", block_length, cls.TEMPLATE_ID, 111, 12) + body)


@settings(max_examples=1000, deadline=None)
@given(buf=st.binary(max_size=128))
def test_random_bytes(buf: bytes) -> None:
    decode_or_error(buf)
    name = message_name(buf)  # never raises
    assert isinstance(name, str) and name


@settings(max_examples=500, deadline=None)
@given(template_id=st.sampled_from(sorted(REGISTRY)), body=st.binary(max_size=160))
def test_random_body_for_each_template(template_id: int, body: bytes) -> None:
    cls = REGISTRY[template_id]
    decode_or_error(struct.pack("<HHHH", cls.BLOCK_LENGTH, template_id, 111, 12) + body)
    try:
        cls.decode(struct.pack("<HHHH", cls.BLOCK_LENGTH, template_id, 111, 12) + body)
    except DecodeError as e:
        assert e.what == cls.__name__


# --- specific malformed inputs ---------------------------------------------------------------------


def hdr(block_length: int, template_id: int, schema_id: int = 111, version: int = 12) -> bytes:
    return struct.pack("<HHHH", block_length, template_id, schema_id, version)


def var(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data


VOTE = codec.Vote(3, 2, 1024, 1, 2, codec.BooleanType.TRUE).encode()
REQUEST_VOTE = codec.RequestVote(2, 1024, 3, 1, 65536).encode()
SESSION_EVENT_BLOCK = struct.pack("<qqqiii", 1, 2, 3, 0, 0, 768)
EXTENDED_BLOCK = struct.pack("<qqii", 1, 2, 0, 1)
MEMBER = struct.pack("<qqqi", 1, 2, 3, 0)
GOOD_MEMBER = MEMBER + b"".join(var(b"x") for _ in range(5))

MALFORMED: list[tuple[str, bytes, str, str]] = [
    ("empty", b"", "MessageHeader", "truncated header: 0 of 8"),
    ("short header", b"\x20\x00\x33\x00\x6f\x00\x0c", "MessageHeader", "truncated header: 7 of 8"),
    ("unknown template", hdr(8, 999) + bytes(8), "MessageHeader", "unknown template id 999"),
    ("reserved, unused template", hdr(8, 229) + bytes(8), "MessageHeader", "unknown template id 229"),
    ("foreign schema, known template", hdr(32, 51, schema_id=7) + bytes(32), "RequestVote", "schema id 7"),
    ("foreign schema, unknown template", hdr(8, 999, schema_id=7), "MessageHeader", "schema id 7"),
    ("truncated block", REQUEST_VOTE[:20], "RequestVote", "truncated block: 12 of 32"),
    ("smaller block_length", hdr(16, 51) + bytes(16), "RequestVote", "block_length 16 < 32"),
    ("trailing garbage", REQUEST_VOTE + b"\x00", "RequestVote", "1 trailing bytes after the block"),
    ("bad enum", VOTE[:40] + struct.pack("<i", 7), "Vote", "vote=7 is not a BooleanType"),
    ("null of a strict enum", VOTE[:40] + struct.pack("<i", -(2**31)), "Vote", "is not a BooleanType"),
    ("bad CloseReason", hdr(28, 22) + struct.pack("<qqqi", 1, 2, 3, 3), "SessionCloseEvent",
     "close_reason=3 is not a CloseReason"),
    ("var length missing", hdr(36, 2) + SESSION_EVENT_BLOCK + b"\x05\x00", "SessionEvent",
     "truncated detail length at offset 44"),
    ("var past the end", hdr(36, 2) + SESSION_EVENT_BLOCK + struct.pack("<I", 1000) + b"abc", "SessionEvent",
     "detail length 1000 runs past the end (3 bytes left)"),
    ("var not ascii", hdr(36, 2) + SESSION_EVENT_BLOCK + var(b"caf\xc3\xa9"), "SessionEvent",
     "detail is not ASCII"),
    ("trailing after vars", hdr(36, 2) + SESSION_EVENT_BLOCK + var(b"ok") + b"!!", "SessionEvent",
     "2 trailing bytes after the last field"),
    ("second var missing", hdr(16, 3) + struct.pack("<qii", 1, 2, 768) + var(b"chan"),
     "SessionConnectRequest", "truncated encoded_credentials length"),
    ("group header missing", hdr(24, 43) + EXTENDED_BLOCK + b"\x1c\x00", "ClusterMembersExtendedResponse",
     "truncated active_members group header"),
    ("group block_length too small", hdr(24, 43) + EXTENDED_BLOCK + struct.pack("<HH", 10, 0),
     "ClusterMembersExtendedResponse", "active_members group block_length 10 < 28"),
    ("group count past the end", hdr(24, 43) + EXTENDED_BLOCK + struct.pack("<HH", 28, 2) + GOOD_MEMBER,
     "ClusterMembersExtendedResponse", "truncated active_members[1]"),
    ("group entry var not ascii", hdr(24, 43) + EXTENDED_BLOCK + struct.pack("<HH", 28, 1) + MEMBER
     + var(b"\xff"), "ClusterMembersExtendedResponse", "active_members[0].ingress_endpoint is not ASCII"),
    ("second group missing", hdr(24, 43) + EXTENDED_BLOCK + struct.pack("<HH", 28, 1) + GOOD_MEMBER,
     "ClusterMembersExtendedResponse", "truncated passive_members group header"),
    ("session message short block", hdr(24, 1) + bytes(23), "SessionMessageHeader",
     "truncated block: 23 of 24"),
    ("log block entries past the end", hdr(32, 200) + bytes(32) + struct.pack("<I", 64) + bytes(32),
     "LogBlock", "entries length 64 runs past the end (32 bytes left)"),
    ("archive error message not ascii", hdr(12, 204) + bytes(12) + var(b"\x80"), "ArchiveError",
     "error_message is not ASCII"),
    ("bad replay purpose", hdr(44, 202) + struct.pack("<qqqqiii", 1, 2, 0, -1, 0, 9, 65536), "ReplayRequest",
     "purpose=9 is not a ReplayPurpose"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "buf", "what", "reason"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed(case: str, buf: bytes, what: str, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode(buf)
    assert type(info.value) is DecodeError
    assert info.value.what == what, str(info.value)
    assert reason in info.value.reason, str(info.value)
    assert str(info.value).startswith(f"{what}: ")
    if what != "MessageHeader":  # the class's own decode reports the same problem
        with pytest.raises(DecodeError, match=f"^{what}: "):
            REGISTRY[struct.unpack_from("<H", buf, 2)[0]].decode(buf)


def test_decode_with_the_wrong_class() -> None:
    with pytest.raises(DecodeError, match=r"^Vote: template id 51, expected 52$"):
        codec.Vote.decode(REQUEST_VOTE)


def test_documented_null_decodes_to_null_member() -> None:
    buf = hdr(28, 22) + struct.pack("<qqqi", 1, 2, 3, -(2**31))
    assert decode(buf).close_reason is codec.CloseReason.NULL_VAL
    buf = hdr(48, 24) + struct.pack("<qqqqiiii", 1, 2, 3, 4, 0, 7, -(2**31), 1)
    assert decode(buf).time_unit is codec.ClusterTimeUnit.NULL_VAL


def test_message_name_never_raises() -> None:
    assert message_name(REQUEST_VOTE) == "RequestVote"
    assert message_name(REQUEST_VOTE[:8]) == "RequestVote"  # header only: named, not decoded
    assert message_name(b"\x01") == "Truncated(length=1)"
    assert message_name(hdr(8, 999)) == "Unknown(template_id=999)"
    assert message_name(hdr(8, 51, schema_id=7)) == "ForeignSchema(schema_id=7 template_id=51)"
