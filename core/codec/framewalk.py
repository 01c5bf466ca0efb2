"""The per-frame loop of a log block: :class:`Frame` and :func:`scan_frames`, compiled with mypyc.

Every follower node validates every LogBlock and every service walks it to apply it, so this loop
runs once per log entry on every member. ``setup.py`` compiles this module with mypyc (the
``clusterlab.core.codec.framewalk`` extension next to this file, built by ``pip install -e .``);
compiled, the header fields are read as native integers straight from the bytes, and the two
``zlib.crc32`` calls are what is left per frame.

Where the build cannot run (no C compiler, no mypyc: the extension is optional in setup.py), this
file is imported as plain Python and :mod:`clusterlab.core.codec.framing` uses its own struct-based
loop instead (byte-by-byte reads are slow interpreted); ``COMPILED`` says which. Both must give the
same frames, end position and failing offset: ``tests/unit/test_framewalk.py`` runs them side by side.

The checks mirror :func:`clusterlab.core.codec.framing.unframe`'s; this module only finds where a walk
stops, the caller asks ``unframe`` for the precise error.
"""

from __future__ import annotations

import zlib
from typing import Final

FRAME_HEADER_LENGTH: Final = 32
FRAME_ALIGNMENT: Final = 32
FRAME_VERSION: Final = 1
HDR_TYPE_PAD: Final = 0
HDR_TYPE_DATA: Final = 1
MAX_FRAME_LENGTH: Final = 16 * 1024 * 1024


class Frame:
    """One framed log entry as found in a buffer (a value: treat it as immutable).

    A plain class rather than a frozen dataclass: a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``, and every log entry makes one of these on every member."""

    __slots__ = ("end_position", "frame_type", "leadership_term_id", "payload", "position")

    def __init__(
        self, position: int, leadership_term_id: int, frame_type: int, payload: bytes | bytearray | memoryview
    ) -> None:
        self.position: int = position  # log position at which the frame starts
        self.leadership_term_id: int = leadership_term_id
        self.frame_type: int = frame_type
        # Always bytes (compiled, the attribute is typed): a caller's bytearray or memoryview is copied.
        self.payload: bytes = payload if isinstance(payload, bytes) else bytes(payload)
        # The log position *after* this entry: what Aeron reports as the message's position.
        framed = (len(payload) + FRAME_HEADER_LENGTH + FRAME_ALIGNMENT - 1) & -FRAME_ALIGNMENT
        self.end_position: int = position + framed

    @property
    def length(self) -> int:
        """Framed (aligned) length: how far the log position advances past this entry."""
        return self.end_position - self.position

    def _key(self) -> tuple[int, int, int, bytes]:
        return (self.position, self.leadership_term_id, self.frame_type, self.payload)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Frame(position={self.position}, leadership_term_id={self.leadership_term_id}, "
            f"frame_type={self.frame_type}, payload={self.payload!r})"
        )


def _u32(b: bytes, o: int) -> int:
    return b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)


def _i64(b: bytes, o: int) -> int:
    v = _u32(b, o) | (_u32(b, o + 4) << 32)
    return v - (1 << 64) if v >= (1 << 63) else v


def scan_frames(buffer: bytes, base_position: int) -> tuple[list[Frame], int, int]:
    """Walk consecutive frames from ``base_position``: (whole valid frames, position after the last,
    offset of the first torn or corrupt frame or -1 when the buffer ended on a frame boundary)."""
    frames: list[Frame] = []
    n = len(buffer)
    offset = 0
    position = base_position
    crc32 = zlib.crc32
    while offset < n:
        if n - offset >= FRAME_HEADER_LENGTH:
            frame_length = _u32(buffer, offset)  # int32 on the wire: a negative one fails the range check
            frame_type = buffer[offset + 6] | (buffer[offset + 7] << 8)
            end = offset + ((frame_length + FRAME_ALIGNMENT - 1) & -FRAME_ALIGNMENT)
            if (
                buffer[offset + 4] == FRAME_VERSION
                and FRAME_HEADER_LENGTH <= frame_length <= MAX_FRAME_LENGTH
                and frame_type <= HDR_TYPE_DATA  # HDR_TYPE_PAD (0) or HDR_TYPE_DATA (1): uint16, never negative
                and end <= n
                and _i64(buffer, offset + 16) == position
            ):
                payload = buffer[offset + FRAME_HEADER_LENGTH : offset + frame_length]
                if crc32(payload, crc32(buffer[offset : offset + 24])) == _u32(buffer, offset + 24):
                    frames.append(Frame(position, _i64(buffer, offset + 8), frame_type, payload))
                    position += end - offset
                    offset = end
                    continue
        return frames, position, offset
    return frames, position, -1


# True when this module runs as the mypyc-compiled extension (its __file__ is the shared object).
COMPILED: Final = not __file__.endswith(".py")
