"""The node-state file: the member's durable candidate term (docs/protocol.md c.11, e.5).

Aeron keeps ``node-state.dat`` (a 1 MiB memory-mapped file with its own small SBE schema) holding the
highest candidate term this member has nominated itself in or voted in. It is the Raft "currentTerm /
votedFor" guard: it is raised *before* a vote or a RequestVote is sent, so a restarted member never votes
twice in one term. We keep the meaning and use our own small binary format, little-endian:

| offset | size | field |
|---|---|---|
| 0 | 4 | magic ``b"CLNS"`` |
| 4 | 4 | version: int32 semantic version ``(major << 16) | (minor << 8) | patch``; the major must match |
| 8 | 8 | candidate_term_id: int64 (-1 initially) |
| 16 | 8 | timestamp: int64, cluster time when it was written (an argument: the core reads no clock) |
| 24 | 8 | log_position: int64, the member's log position when it was written |
| 32 | 4 | crc32 of bytes 0..31 |
| 36 | 4 | footer magic ``b"SNLC"`` |

Every update writes a whole new file and renames it over the old one, so a crash leaves the old record or
the new one, never half of each; fsync (file and directory) only with ``file_sync`` (Aeron's file sync
level 0 by default: survives a process kill, not a power loss). A file that fails its checks is refused
with a :class:`NodeStateError` rather than silently reset, because resetting drops the vote guard.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

from clusterlab.core.archive.storage import Storage, join

NULL_VALUE = -1  # clusterlab.core.consensus.context.NULL_VALUE
NODE_STATE_FILE_NAME = "node-state.dat"
MAGIC = b"CLNS"
FOOTER = b"SNLC"
NODE_STATE_VERSION = (1 << 16) | (0 << 8) | 0  # 1.0.0
_BODY = struct.Struct("<4siqqq")  # magic, version, candidate_term_id, timestamp, log_position
_TRAILER = struct.Struct("<I4s")  # crc32, footer
FILE_LENGTH = _BODY.size + _TRAILER.size  # 40 bytes


class NodeStateError(Exception):
    """The node-state file cannot be used; the message names the file and how to recover."""


def _noop_log(line: str) -> None:
    """Default log sink: drop the line."""


class NodeState:
    """``<directory>/node-state.dat`` in the member's storage. Use :meth:`open`."""

    def __init__(
        self,
        storage: Storage,
        file_path: str,
        candidate_term_id: int,
        timestamp: int,
        log_position: int,
        *,
        file_sync: bool,
        log: Callable[[str], None],
    ) -> None:
        self.storage = storage
        self.file_path = file_path
        self.path = storage.describe(file_path)  # for messages
        self.file_sync = file_sync
        self._log = log
        self._candidate_term_id = candidate_term_id
        self._timestamp = timestamp
        self._log_position = log_position

    @classmethod
    def open(
        cls,
        storage: Storage,
        directory: str = "",
        *,
        file_sync: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> NodeState:
        """Load the node state in ``storage``'s ``directory``, creating it (candidate term -1) if absent."""
        log = log or _noop_log
        storage.make_dirs(directory)
        path = join(directory, NODE_STATE_FILE_NAME)
        tmp = path + ".tmp"
        if storage.exists(tmp):
            # A crash between writing the new record and renaming it: the old file is still the truth.
            log(f"node state: removing unfinished update {storage.describe(tmp)}")
            storage.remove(tmp)
        if not storage.exists(path):
            state = cls(storage, path, NULL_VALUE, NULL_VALUE, NULL_VALUE, file_sync=file_sync, log=log)
            state._write()
            log(f"node state: created {storage.describe(path)} with candidate_term_id={NULL_VALUE}")
            return state
        term, timestamp, position = _decode(storage.describe(path), storage.read_file(path))
        return cls(storage, path, term, timestamp, position, file_sync=file_sync, log=log)

    @property
    def candidate_term_id(self) -> int:
        """Highest candidate term this member has proposed or voted in (-1 if none)."""
        return self._candidate_term_id

    @property
    def timestamp(self) -> int:
        """Timestamp passed with the last update."""
        return self._timestamp

    @property
    def log_position(self) -> int:
        """Log position passed with the last update."""
        return self._log_position

    def propose_max_candidate_term_id(self, candidate_term_id: int, log_position: int, timestamp: int) -> int:
        """Raise the stored candidate term to ``candidate_term_id`` if it is larger (writing it durably
        before returning); returns the stored value either way. Call before sending a vote or RequestVote."""
        if candidate_term_id > self._candidate_term_id:
            self._set(candidate_term_id, log_position, timestamp)
        return self._candidate_term_id

    def update_candidate_term_id(self, candidate_term_id: int, log_position: int, timestamp: int) -> None:
        """Store ``candidate_term_id`` unconditionally (Aeron uses it for the single-member shortcut)."""
        self._set(candidate_term_id, log_position, timestamp)

    def close(self) -> None:
        """Nothing is held open; present for symmetry with the other durable stores."""

    def describe(self) -> str:
        return (
            f"node state {self.path}: candidate_term_id={self._candidate_term_id} "
            f"log_position={self._log_position} timestamp={self._timestamp}"
        )

    def _set(self, candidate_term_id: int, log_position: int, timestamp: int) -> None:
        previous = (self._candidate_term_id, self._timestamp, self._log_position)
        self._candidate_term_id, self._timestamp, self._log_position = (
            candidate_term_id,
            timestamp,
            log_position,
        )
        try:
            self._write()
        except OSError:
            # Not written means not promised: keep memory equal to disk.
            self._candidate_term_id, self._timestamp, self._log_position = previous
            raise

    def _write(self) -> None:
        data = _encode(self._candidate_term_id, self._timestamp, self._log_position)
        self.storage.replace(self.file_path, data, sync=self.file_sync)


def _encode(candidate_term_id: int, timestamp: int, log_position: int) -> bytes:
    body = _BODY.pack(MAGIC, NODE_STATE_VERSION, candidate_term_id, timestamp, log_position)
    return body + _TRAILER.pack(zlib.crc32(body) & 0xFFFFFFFF, FOOTER)


def _decode(path: str, data: bytes) -> tuple[int, int, int]:
    def corrupt(reason: str, what: str = "corrupt") -> NodeStateError:
        return NodeStateError(
            f"{what} node-state file {path}: {reason}. It holds the highest candidate term this member has "
            f"voted or nominated in, which stops it voting twice in one term. To recover, delete the file "
            f"(the member restarts with candidate term -1 and loses that guard: only do this when the member "
            f"has been stopped for longer than an election, or its whole directory is being reset) or "
            f"restore it from a backup"
        )

    if len(data) != FILE_LENGTH:
        raise corrupt(f"{len(data)} bytes, expected {FILE_LENGTH}")
    magic, version, term, timestamp, position = _BODY.unpack_from(data, 0)
    crc, footer = _TRAILER.unpack_from(data, _BODY.size)
    if magic != MAGIC or footer != FOOTER:
        raise corrupt("bad magic (not a node-state file)")
    if zlib.crc32(data[: _BODY.size]) & 0xFFFFFFFF != crc:
        raise corrupt("checksum mismatch")
    if version >> 16 != NODE_STATE_VERSION >> 16:
        raise corrupt(
            f"version {version >> 16}.{(version >> 8) & 0xFF}.{version & 0xFF} is incompatible with "
            f"{NODE_STATE_VERSION >> 16}.x",
            "incompatible",
        )
    return term, timestamp, position
