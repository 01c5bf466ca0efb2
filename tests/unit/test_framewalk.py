"""The compiled per-frame loop (core/codec/framewalk.py, mypyc) against its pure-Python fallbacks.

Three implementations must agree on every buffer: ``walk_frames`` (compiled scan when built),
``walk_frames_py`` (framing's struct loop, used when the extension is absent) and framewalk.py's
source run interpreted (what a stale or missing build would run)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from clusterlab.core.codec import framewalk
from clusterlab.core.codec.framing import (
    HDR_TYPE_PAD,
    WalkResult,
    frame,
    framed_length,
    walk_frames,
    walk_frames_py,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def _interpreted() -> ModuleType:
    source = Path(framewalk.__file__).with_name("framewalk.py")
    spec = importlib.util.spec_from_file_location("framewalk_interpreted", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INTERPRETED = _interpreted()


def _summary(result: WalkResult) -> tuple[list[tuple[int, int, int, bytes, int]], int, str | None]:
    frames = [(f.position, f.leadership_term_id, f.frame_type, f.payload, f.end_position) for f in result.frames]
    return frames, result.end_position, None if result.error is None else str(result.error)


def _block(payloads: list[bytes], base: int, term: int) -> bytes:
    chunks = []
    position = base
    for i, p in enumerate(payloads):
        chunks.append(frame(p, position, term, HDR_TYPE_PAD if i % 7 == 6 else 1))
        position += framed_length(len(p))
    return b"".join(chunks)


def _assert_agree(buffer: bytes, base: int) -> WalkResult:
    fast = walk_frames(buffer, base)
    slow = walk_frames_py(buffer, base)
    assert _summary(fast) == _summary(slow)
    frames, end, bad = INTERPRETED.scan_frames(buffer, base)
    assert [(f.position, f.leadership_term_id, f.frame_type, f.payload, f.end_position) for f in frames] == (
        _summary(fast)[0]
    )
    assert end == fast.end_position
    assert (bad < 0) == (fast.error is None)
    return fast


def test_the_build_compiled_framewalk_when_an_extension_is_present() -> None:
    built = any(
        p.name.startswith("framewalk.") and p.suffix != ".py" for p in Path(framewalk.__file__).parent.iterdir()
    )
    assert built == framewalk.COMPILED
    assert INTERPRETED.COMPILED is False


def test_a_whole_block_walks_to_its_end_on_every_path() -> None:
    payloads = [bytes([i]) * (i * 13 % 300) for i in range(50)]
    buffer = _block(payloads, 4096, 7)
    result = _assert_agree(buffer, 4096)
    assert result.error is None
    assert [f.payload for f in result.frames] == payloads
    assert result.end_position == 4096 + len(buffer)


def test_large_positions_and_terms_read_as_signed_64_bit() -> None:
    base = (1 << 62) - (1 << 20)
    buffer = _block([b"a" * 40, b"b"], base, (1 << 40) + 3)
    result = _assert_agree(buffer, base)
    assert [f.leadership_term_id for f in result.frames] == [(1 << 40) + 3] * 2


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=200), min_size=1, max_size=12),
    flip=st.integers(min_value=0, max_value=10_000),
    bit=st.integers(min_value=0, max_value=7),
    cut=st.integers(min_value=0, max_value=10_000),
    base_shift=st.sampled_from([0, 32, -32]),
)
def test_corrupt_and_torn_blocks_stop_at_the_same_frame_with_the_same_error(
    payloads: list[bytes], flip: int, bit: int, cut: int, base_shift: int
) -> None:
    buffer = bytearray(_block(payloads, 1024, 2))
    buffer[flip % len(buffer)] ^= 1 << bit
    torn = bytes(buffer[: len(buffer) - cut % 64])
    result = _assert_agree(torn, 1024 + base_shift)
    if base_shift and torn:  # the first frame is not where the walk expects it
        assert result.frames == [] and result.error is not None


def test_a_frame_holds_its_payload_as_bytes_whatever_bytes_like_it_was_given() -> None:
    for payload in (b"ab", bytearray(b"ab"), memoryview(b"xaby")[1:3]):
        f = framewalk.Frame(64, 1, 1, payload)
        assert type(f.payload) is bytes and f.payload == b"ab"
        assert (f.end_position, f.length) == (128, 64)
