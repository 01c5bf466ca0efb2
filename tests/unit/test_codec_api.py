"""The codec's API beyond round trips: describe(), misuse errors, the SessionMessageHeader helpers,
the header/registry helpers, transport block helpers, and the @codec decorator's own checks."""

from __future__ import annotations

import dataclasses
import struct
from typing import ClassVar

import clusterlab.core.codec as codec
import pytest
from clusterlab.core.codec import (
    REGISTRY,
    BooleanType,
    CloseReason,
    DecodeError,
    MemberDetails,
    MessageHeader,
    SessionMessageHeader,
    encode_session_message,
    frame,
    framed_length,
    peek_template_id,
    unpack_session_message,
)
from clusterlab.core.codec.message import Int32, Int64, Message
from clusterlab.core.codec.message import codec as codec_decorator


def member(member_id: int) -> MemberDetails:
    return MemberDetails(0, 64, 5, member_id, f"in{member_id}", "cons", "log", "catch", "arch")


# --- describe ---------------------------------------------------------------------------------------


def test_describe_request_vote() -> None:
    msg = codec.RequestVote(2, 1024, 3, 1, (1 << 16))
    assert msg.describe() == (
        "RequestVote(log_leadership_term_id=2 log_position=1024 candidate_term_id=3 candidate_member_id=1 "
        "protocol_version=1.0.0)"
    )


@pytest.mark.parametrize(
    ("msg", "line"),
    [
        (SessionMessageHeader(1, 2, 3, bytes(range(64))),
         "SessionMessageHeader(leadership_term_id=1 cluster_session_id=2 timestamp=3 "
         "payload=64B:0001020304050607...)"),
        (SessionMessageHeader(1, 2, 3, b""),
         "SessionMessageHeader(leadership_term_id=1 cluster_session_id=2 timestamp=3 payload=0B)"),
        (codec.Vote(3, 2, 1024, 1, 0, BooleanType.FALSE),
         "Vote(candidate_term_id=3 log_leadership_term_id=2 log_position=1024 candidate_member_id=1 "
         "follower_member_id=0 vote=FALSE)"),
        (codec.SessionCloseEvent(4, 7, 99, CloseReason.NULL_VAL),
         "SessionCloseEvent(leadership_term_id=4 cluster_session_id=7 timestamp=99 close_reason=NULL_VAL)"),
        (codec.SessionEvent(7, 1, 4, 0, codec.EventCode.REDIRECT, 768, "0=a:1 1=b:2"),
         "SessionEvent(cluster_session_id=7 correlation_id=1 leadership_term_id=4 leader_member_id=0 "
         "code=REDIRECT version=0.3.0 detail='0=a:1 1=b:2')"),
        (codec.ArchiveError(5, 2, "no such recording"),
         "ArchiveError(correlation_id=5 code=2 error_message='no such recording')"),
        (codec.ClusterMembersExtendedResponse(1, 2, 0, 0, (member(0),), ()),
         "ClusterMembersExtendedResponse(correlation_id=1 current_time_ns=2 leader_member_id=0 member_id=0 "
         "active_members=[MemberDetails(leadership_term_id=0 log_position=64 time_of_last_append_ns=5 "
         "member_id=0 ingress_endpoint='in0' consensus_endpoint='cons' log_endpoint='log' "
         "catchup_endpoint='catch' archive_endpoint='arch')] passive_members=[])"),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else "",
)  # fmt: skip
def test_describe_lines(msg: Message, line: str) -> None:
    assert msg.describe() == line


# --- misuse -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "error", "text"),
    [
        (lambda: codec.CommitPosition(2**63, 0, 0), ValueError,
         "CommitPosition.leadership_term_id=9223372036854775808 out of range for int64"),
        (lambda: codec.CommitPosition(0, 0, 2**31), ValueError,
         "leader_member_id=2147483648 out of range for int32"),
        (lambda: codec.AppendPosition(0, 0, 0, 256), ValueError, "flags=256 out of range for uint8"),
        (lambda: codec.AppendPosition(0, 0, 0, -1), ValueError, "flags=-1 out of range for uint8"),
        (lambda: codec.CommitPosition(0, 1.5, 0), TypeError, "log_position: expected int, got float"),
        (lambda: codec.Vote(0, 0, 0, 0, 0, 2), ValueError, "Vote.vote=2 is not a BooleanType"),
        (lambda: codec.Vote(0, 0, 0, 0, 0, "TRUE"), ValueError, "is not a BooleanType"),
        (lambda: codec.ArchiveError(0, 0, "caf\u00e9"), ValueError,
         "ArchiveError.error_message='café' is not ASCII"),
        (lambda: codec.ArchiveError(0, 0, b"raw"), TypeError, "error_message: expected str, got bytes"),
        (lambda: codec.LogBlock(0, 0, 0, 0, 0, "entries"), TypeError,
         "LogBlock.entries: expected bytes, got str"),
        (lambda: SessionMessageHeader(0, 0, 0, None), TypeError, "payload: expected bytes, got NoneType"),
        (lambda: codec.ClusterMembersExtendedResponse(0, 0, 0, 0, (1,), ()), TypeError,
         "expected MemberDetails"),
        (lambda: codec.ClusterMembersExtendedResponse(0, 0, 0, 0, None, ()), TypeError, "expected a tuple"),
    ],
)  # fmt: skip
def test_misuse_raises(build, error: type[Exception], text: str) -> None:
    with pytest.raises(error) as info:
        build()
    assert not isinstance(info.value, DecodeError)  # misuse is not a peer's garbage
    assert text in str(info.value)


def test_construction_normalises() -> None:
    vote = codec.Vote(0, 0, 0, 0, 0, 1)
    assert vote.vote is BooleanType.TRUE
    block = codec.LogBlock(0, 0, 0, 0, 0, bytearray(b"ab"))
    assert type(block.entries) is bytes
    response = codec.ClusterMembersExtendedResponse(0, 0, 0, 0, [member(1)], [])
    assert response.active_members == (member(1),) and response.passive_members == ()
    assert codec.decode(response.encode()) == response


def test_messages_are_frozen_slotted_and_hashable() -> None:
    msg = codec.CommitPosition(1, 2, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.log_position = 5  # type: ignore[misc]
    assert not hasattr(msg, "__dict__")
    assert len({msg, codec.CommitPosition(1, 2, 3)}) == 1
    for cls in REGISTRY.values():
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        assert params.frozen and "__slots__" in cls.__dict__, cls
        assert cls.__name__[0].isupper() and "_" not in cls.__name__


# --- SessionMessageHeader hot path ------------------------------------------------------------------


def test_session_message_helpers_match_the_class() -> None:
    msg = SessionMessageHeader(5, 42, 1_700_000_000_000, b"hello")
    wire = encode_session_message(5, 42, 1_700_000_000_000, b"hello")
    assert wire == msg.encode()
    assert len(wire) == codec.SESSION_HEADER_LENGTH + 5
    assert unpack_session_message(wire) == (5, 42, 1_700_000_000_000, b"hello")
    assert unpack_session_message(memoryview(wire)) == (5, 42, 1_700_000_000_000, b"hello")
    assert SessionMessageHeader.decode(wire) == msg


def test_session_message_helpers_slow_paths() -> None:
    # A newer sender's larger block: unpack falls back to the checked decoder and skips the extra.
    newer = struct.pack("<HHHHqqq", 28, 1, 111, 12, 5, 42, 7) + b"XXXX" + b"payload"
    assert unpack_session_message(newer) == (5, 42, 7, b"payload")
    with pytest.raises(DecodeError, match=r"^SessionMessageHeader: truncated block"):
        unpack_session_message(encode_session_message(1, 2, 3, b"")[:31])
    with pytest.raises(DecodeError, match=r"^SessionMessageHeader: template id 2, expected 1"):
        unpack_session_message(struct.pack("<HHHHqqq", 24, 2, 111, 12, 0, 0, 0))
    with pytest.raises(ValueError, match="SessionMessageHeader"):
        encode_session_message(2**63, 0, 0, b"")


# --- header / registry ------------------------------------------------------------------------------


def test_message_header() -> None:
    wire = codec.RequestVote(2, 1024, 3, 1, 65536).encode()
    header = MessageHeader.decode(wire)
    assert header == MessageHeader(32, 51, 111, 12)
    assert header.encode() == wire[:8]
    assert peek_template_id(wire) == 51
    assert header.describe() == "MessageHeader(block_length=32 template_id=51 schema_id=111 version=12)"
    with pytest.raises(DecodeError, match=r"^MessageHeader: truncated header: 3 of 8 bytes$"):
        MessageHeader.decode(wire[:3])
    with pytest.raises(DecodeError):
        peek_template_id(b"")
    with pytest.raises(ValueError, match="template_id=70000"):
        MessageHeader(8, 70000)


def test_registry_is_keyed_by_template_id() -> None:
    assert all(tid == cls.TEMPLATE_ID for tid, cls in REGISTRY.items())
    assert len(set(REGISTRY.values())) == len(REGISTRY)


def test_every_registered_message_is_exported() -> None:
    for cls in REGISTRY.values():
        assert getattr(codec, cls.__name__) is cls
        assert cls.__name__ in codec.__all__


# --- transport blocks -------------------------------------------------------------------------------


def test_log_block_walks_its_entries() -> None:
    start = 4096
    entries, position = b"", start
    for i in range(3):
        framed = frame(encode_session_message(7, i + 1, 100 + i, bytes(64)), position, 7)
        entries += framed
        position += len(framed)
    block = codec.LogBlock(7, start, start, 0, 3, entries)
    assert block.end_position == position == start + 3 * framed_length(32 + 64)
    decoded = codec.decode(block.encode())
    result = decoded.walk()
    assert result.error is None and result.end_position == position
    assert [unpack_session_message(f.payload)[1] for f in result.frames] == [1, 2, 3]


def test_replay_block_flags() -> None:
    last = codec.ReplayBlock(1, 2, 0, 64, 3, codec.ReplayPurpose.CATCHUP, codec.ReplayBlockFlags.LAST, b"")
    assert last.is_last and last.end_position == 0
    assert not dataclasses.replace(last, flags=0).is_last


# --- the @codec decorator ---------------------------------------------------------------------------


def test_codec_rejects_a_wrong_block_length() -> None:
    with pytest.raises(TypeError, match="BLOCK_LENGTH 16 but fields take 12 bytes"):

        @codec_decorator
        @dataclasses.dataclass(frozen=True, slots=True)
        class Broken(Message):
            TEMPLATE_ID: ClassVar[int] = 250
            BLOCK_LENGTH: ClassVar[int] = 16

            a: Int64
            b: Int32


def test_codec_rejects_an_unannotated_field() -> None:
    with pytest.raises(TypeError, match="annotate with a wire type"):

        @codec_decorator
        @dataclasses.dataclass(frozen=True, slots=True)
        class Plain(Message):
            TEMPLATE_ID: ClassVar[int] = 251
            BLOCK_LENGTH: ClassVar[int] = 8

            a: int
