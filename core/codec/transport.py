"""Messages our ZeroMQ transport adds (template ids 200+, schema 111). Ids 210-229 are reserved for
the runtime's control messages.

They stand in for Aeron transport features that ZeroMQ does not have: ``LogBlock`` for the leader's
UDP log publication, ``LogEndOfStream`` for the end-of-stream flag on a closed image, and the
``Replay*``/``ArchiveError`` trio for Archive replay and replication between members.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, ClassVar

from clusterlab.core.codec.enums import ReplayBlockFlags, ReplayPurpose
from clusterlab.core.codec.framing import WalkResult, frame, walk_frames
from clusterlab.core.codec.message import ENUM32, AsciiVar, DataVar, Int32, Int64, Message, codec


@codec
@dataclass(frozen=True, slots=True)
class LogBlock(Message):
    """Consecutive framed log entries (clusterlab.core.codec.framing) starting at ``start_position``.

    A follower appends a block only if ``start_position`` equals its own append position."""

    TEMPLATE_ID: ClassVar[int] = 200
    BLOCK_LENGTH: ClassVar[int] = 32

    leadership_term_id: Int64
    start_position: Int64
    commit_position: Int64
    leader_member_id: Int32
    log_session_id: Int32
    entries: DataVar

    @property
    def end_position(self) -> int:
        """Log position after the last entry (frames are already aligned)."""
        return self.start_position + len(self.entries)

    def walk(self) -> WalkResult:
        """The framed entries, checked against their expected positions."""
        return walk_frames(self.entries, self.start_position)


def log_blocks(
    payloads: Sequence[bytes], leadership_term_id: int, per_block: int, *, log_session_id: int = 0
) -> list[bytes]:
    """``payloads`` framed from log position 0 in ``leadership_term_id`` and packed ``per_block`` to an
    encoded LogBlock, each committed to its end: a committed log as a service receives it (tests and
    benchmarks drive the service agent with it)."""
    position, framed = 0, []
    for payload in payloads:
        framed.append(frame(payload, position, leadership_term_id))
        position += len(framed[-1])
    blocks, start = [], 0
    for i in range(0, len(framed), per_block):
        chunk = b"".join(framed[i : i + per_block])
        block = LogBlock(
            leadership_term_id=leadership_term_id,
            start_position=start,
            commit_position=start + len(chunk),
            leader_member_id=0,
            log_session_id=log_session_id,
            entries=chunk,
        )
        blocks.append(block.encode())
        start += len(chunk)
    return blocks


@codec
@dataclass(frozen=True, slots=True)
class LogEndOfStream(Message):
    """The leader closed its log stream gracefully at ``log_position`` (Aeron's image end-of-stream)."""

    TEMPLATE_ID: ClassVar[int] = 201
    BLOCK_LENGTH: ClassVar[int] = 20

    leadership_term_id: Int64
    log_position: Int64
    leader_member_id: Int32


@codec
@dataclass(frozen=True, slots=True)
class ReplayRequest(Message):
    """Ask another member's archive for ``[from_position, to_position)`` of a recording
    (``to_position`` -1 = up to the recording's stop), at most ``max_bytes`` per ReplayBlock."""

    TEMPLATE_ID: ClassVar[int] = 202
    BLOCK_LENGTH: ClassVar[int] = 44

    correlation_id: Int64
    recording_id: Int64
    from_position: Int64
    to_position: Int64
    requester_member_id: Int32
    purpose: Annotated[ReplayPurpose, ENUM32]
    max_bytes: Int32


@codec
@dataclass(frozen=True, slots=True)
class ReplayBlock(Message):
    """One chunk of a replay: framed entries from ``start_position``; ``flags`` has LAST on the final one."""

    TEMPLATE_ID: ClassVar[int] = 203
    BLOCK_LENGTH: ClassVar[int] = 48

    correlation_id: Int64
    recording_id: Int64
    start_position: Int64
    recording_stop_position: Int64  # the source's stop position when it sent this block
    leadership_term_id: Int64  # the source's term, -1 if not applicable
    purpose: Annotated[ReplayPurpose, ENUM32]
    flags: Int32  # ReplayBlockFlags bits; kept as int so unknown bits survive
    entries: DataVar

    @property
    def is_last(self) -> bool:
        """True on the final block of the replay."""
        return bool(self.flags & ReplayBlockFlags.LAST)

    @property
    def end_position(self) -> int:
        """Recording position after the last entry."""
        return self.start_position + len(self.entries)

    def walk(self) -> WalkResult:
        """The framed entries, checked against their expected positions."""
        return walk_frames(self.entries, self.start_position)


@codec
@dataclass(frozen=True, slots=True)
class ArchiveError(Message):
    """A replay request failed; ``code`` is the archive's error code."""

    TEMPLATE_ID: ClassVar[int] = 204
    BLOCK_LENGTH: ClassVar[int] = 12

    correlation_id: Int64
    code: Int32
    error_message: AsciiVar


MESSAGES: tuple[type[Message], ...] = (LogBlock, LogEndOfStream, ReplayRequest, ReplayBlock, ArchiveError)

# Template ids 210..229 are left free for the runtime's control messages.
RESERVED_TEMPLATE_IDS = range(210, 230)
