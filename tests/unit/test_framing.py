"""Log framing (core/codec/framing.py): alignment, positions, walking, torn and corrupt frames."""

from __future__ import annotations

import random
import struct

import pytest
from clusterlab.core.codec import (
    FRAME_ALIGNMENT,
    FRAME_HEADER_LENGTH,
    HDR_TYPE_DATA,
    HDR_TYPE_PAD,
    MAX_FRAME_LENGTH,
    DecodeError,
    align,
    encode_session_message,
    frame,
    framed_length,
    iter_frames,
    unframe,
    walk_frames,
)


def entries(count: int, base_position: int = 0, term: int = 3) -> tuple[bytes, list[int], list[bytes]]:
    """``count`` framed session messages of varied sizes; returns the buffer, start positions, payloads."""
    buf, positions, payloads = b"", [], []
    position = base_position
    for i in range(count):
        payload = encode_session_message(term, i + 1, 1000 + i, bytes([i % 256]) * (i * 7 % 90))
        framed = frame(payload, position, term)
        positions.append(position)
        payloads.append(payload)
        buf += framed
        position += len(framed)
    return buf, positions, payloads


@pytest.mark.parametrize(
    ("payload_length", "expected"),
    [(0, 32), (1, 64), (31, 64), (32, 64), (33, 96), (64, 96), (96, 128), (1000, 1056)],
)
def test_framed_length_is_header_plus_payload_aligned(payload_length: int, expected: int) -> None:
    assert framed_length(payload_length) == expected
    assert framed_length(payload_length) % FRAME_ALIGNMENT == 0
    assert len(frame(bytes(payload_length), 0, 0)) == expected


@pytest.mark.parametrize(("length", "expected"), [(0, 0), (1, 32), (32, 32), (33, 64), (63, 64), (64, 64)])
def test_align(length: int, expected: int) -> None:
    assert align(length) == expected


def test_session_message_with_64_byte_payload_takes_128_bytes() -> None:
    # 32 frame header + 32 SBE header/block + 64 payload: the benchmark's entry size.
    assert framed_length(len(encode_session_message(0, 1, 2, bytes(64)))) == 128


def test_frame_unframe_roundtrip_and_end_position() -> None:
    payload = b"x" * 45
    buf = frame(payload, 4096, 7)
    f = unframe(buf, expected_position=4096)
    assert (f.position, f.leadership_term_id, f.frame_type, f.payload) == (4096, 7, HDR_TYPE_DATA, payload)
    assert f.length == framed_length(45) == 96
    assert f.end_position == 4096 + 96
    assert buf[FRAME_HEADER_LENGTH + 45 :] == bytes(96 - FRAME_HEADER_LENGTH - 45)  # zero padding


def test_padding_frame() -> None:
    f = unframe(frame(b"", 64, 1, HDR_TYPE_PAD))
    assert f.frame_type == HDR_TYPE_PAD and f.payload == b"" and f.end_position == 96


def test_frame_rejects_misuse() -> None:
    with pytest.raises(ValueError, match="not 32-byte aligned"):
        frame(b"x", 33, 0)
    with pytest.raises(ValueError, match="exceeds MAX_FRAME_LENGTH"):
        frame(bytes(MAX_FRAME_LENGTH), 0, 0)


def test_walk_whole_buffer() -> None:
    buf, positions, payloads = entries(20, base_position=1024)
    result = walk_frames(buf, 1024)
    assert result.error is None
    assert [f.position for f in result.frames] == positions
    assert [f.payload for f in result.frames] == payloads
    assert result.end_position == 1024 + len(buf)
    for f, nxt in zip(result.frames, [*positions[1:], result.end_position], strict=True):
        assert f.end_position == nxt  # each entry ends where the next starts
    assert list(iter_frames(buf, 1024)) == result.frames


def test_walk_empty_buffer() -> None:
    result = walk_frames(b"", 512)
    assert result.frames == [] and result.end_position == 512 and result.error is None


@pytest.mark.parametrize("cut", [1, 5, 31, 32, 33, 60])
def test_torn_last_frame(cut: int) -> None:
    buf, positions, _payloads = entries(6)
    last_length = len(buf) - positions[-1]
    torn = buf[: positions[-1] + min(cut, last_length - 1)]
    result = walk_frames(torn)
    assert len(result.frames) == 5
    assert result.end_position == positions[-1]
    assert isinstance(result.error, DecodeError) and result.error.what == "Frame"
    assert "torn" in result.error.reason
    with pytest.raises(DecodeError, match="torn"):
        list(iter_frames(torn))


def test_every_truncation_keeps_the_whole_frames() -> None:
    buf, positions, _payloads = entries(5)
    ends = [*positions[1:], len(buf)]
    for length in range(len(buf) + 1):
        result = walk_frames(buf[:length])
        whole = [end for end in ends if end <= length]
        assert len(result.frames) == len(whole)
        assert result.end_position == (whole[-1] if whole else 0)
        assert (result.error is None) == (length in (0, *ends))


def test_bit_flip_is_caught() -> None:
    """Every bit of the header fields the checksum covers (0..27) and of the payload is protected."""
    buf, positions, _payloads = entries(3)
    second = positions[1]
    payload_end = second + struct.unpack_from("<i", buf, second)[0]
    rng = random.Random(7)
    offsets = list(range(second, second + 28)) + list(range(second + FRAME_HEADER_LENGTH, payload_end))
    for offset in offsets:
        corrupt = bytearray(buf)
        corrupt[offset] ^= 1 << rng.randrange(8)
        result = walk_frames(bytes(corrupt))
        assert len(result.frames) == 1, offset
        assert result.end_position == second
        assert isinstance(result.error, DecodeError)  # and the intact third frame is not trusted


def test_checksum_mismatch_is_named() -> None:
    buf = bytearray(frame(b"payload", 0, 1))
    buf[FRAME_HEADER_LENGTH] ^= 0x01
    with pytest.raises(DecodeError, match="checksum mismatch at offset 0"):
        unframe(bytes(buf))


def test_wrong_expected_position() -> None:
    buf = frame(b"abc", 128, 2)
    with pytest.raises(DecodeError, match="frame says position 128, expected 160"):
        unframe(buf, expected_position=160)
    result = walk_frames(buf, base_position=0)  # caller thinks the buffer starts at 0
    assert result.frames == [] and result.end_position == 0
    assert result.error is not None and "expected 0" in result.error.reason


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        (lambda b: b[:4] + bytes([9]) + b[5:], "bad version 9"),
        (lambda b: struct.pack("<i", 8) + b[4:], "bad frame_length 8"),
        (lambda b: struct.pack("<i", MAX_FRAME_LENGTH + 1) + b[4:], "bad frame_length"),
        (lambda b: b[:6] + struct.pack("<H", 5) + b[8:], "bad type 5"),
    ],
)
def test_bad_header_fields(patch, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason):
        unframe(patch(frame(b"abc", 0, 0)))


def test_unframe_at_offset_and_from_memoryview() -> None:
    buf, positions, payloads = entries(4)
    view = memoryview(buf)
    f = unframe(view, positions[2], expected_position=positions[2])
    assert f.payload == payloads[2] and type(f.payload) is bytes
