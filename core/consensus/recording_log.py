"""The recording log: the member's history of leadership terms and snapshots (docs/protocol.md c.9, c.10, e.4).

``<member_dir>/recording.log`` is Aeron's ``RecordingLog`` file, byte for byte in layout: fixed records
aligned to 64 bytes, little-endian:

| offset | size | field |
|---|---|---|
| 0 | 8 | recording_id (the log recording for TERM entries, the snapshot recording for SNAPSHOT entries) |
| 8 | 8 | leadership_term_id |
| 16 | 8 | term_base_log_position |
| 24 | 8 | log_position (TERM: end of the term, -1 while open; SNAPSHOT: position the snapshot represents) |
| 32 | 8 | timestamp (cluster time units) |
| 40 | 4 | service_id (-1 for the consensus module's snapshot and for TERM entries) |
| 44 | 4 | entry_type (TERM 0, SNAPSHOT 1, STANDBY_SNAPSHOT 2; bit 31 = invalidated; all ones = removed) |
| 48 | 4+n | archive endpoint, STANDBY_SNAPSHOT only (read, never written: standby is out of scope) |

Records are appended whole (one ``pwrite``); later changes are in-place field writes: the 8-byte end
position of a term (commit), the 4-byte type (invalidate, remove), or a whole record (re-validating a
snapshot). Everything goes to the OS at once, so a killed process loses nothing; ``force`` fsyncs when the
``file_sync`` flag is set (Aeron's file sync level). A record torn by a crash at the end of the file is cut
off on open and reported through the ``log`` callable.

The in-memory view (:meth:`RecordingLog.entries`) is sorted the way Aeron sorts it, which is what the
recovery plan and "latest snapshot" lookups rely on: by (leadership_term_id, term_base_log_position,
TERM before STANDBY_SNAPSHOT before SNAPSHOT, TERMs in file order, snapshots by log_position then
service_id descending), so one snapshot set reads services N-1..0 then the consensus module.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Protocol

from clusterlab.core.archive.storage import Storage, StorageFile, join

NULL_VALUE = -1  # clusterlab.core.consensus.context.NULL_VALUE
NULL_POSITION = -1  # clusterlab.core.consensus.context.NULL_POSITION
SERVICE_ID_CONSENSUS_MODULE = -1  # clusterlab.core.consensus.context.SERVICE_ID_CONSENSUS_MODULE

RECORDING_LOG_FILE_NAME = "recording.log"
RECORD_ALIGNMENT = 64
ENTRY_TYPE_INVALID_FLAG = 1 << 31
ENTRY_TYPE_REMOVED = 0xFFFF_FFFF  # the whole int32 type field set to -1

RECORDING_ID_OFFSET = 0
LEADERSHIP_TERM_ID_OFFSET = 8
TERM_BASE_LOG_POSITION_OFFSET = 16
LOG_POSITION_OFFSET = 24
TIMESTAMP_OFFSET = 32
SERVICE_ID_OFFSET = 40
ENTRY_TYPE_OFFSET = 44
ENDPOINT_OFFSET = 48

_RECORD = struct.Struct("<qqqqqiI")  # 48 bytes: the fields above, entry type read unsigned
_INT64 = struct.Struct("<q")
_UINT32 = struct.Struct("<I")


class EntryType(IntEnum):
    """Aeron's ``RecordingLog.ENTRY_TYPE_*``."""

    TERM = 0
    SNAPSHOT = 1
    STANDBY_SNAPSHOT = 2


class RecordingLogError(Exception):
    """Misuse of the recording log (duplicate term, unknown term, mixed recording ids...) or a file it
    cannot read. Names the file and what was wrong."""


def _noop_log(line: str) -> None:
    """Default log sink: drop the line."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of the recording log, as loaded. ``entry_index`` is its ordinal in the file (removed
    records count too), ``file_offset`` where it lives."""

    recording_id: int
    leadership_term_id: int
    term_base_log_position: int
    log_position: int
    timestamp: int
    service_id: int
    type: EntryType
    entry_index: int
    is_valid: bool = True
    file_offset: int = NULL_VALUE
    archive_endpoint: str = ""

    @property
    def length(self) -> int:
        """Bytes the record occupies in the file, alignment included."""
        if self.type is EntryType.STANDBY_SNAPSHOT:
            return _align(ENDPOINT_OFFSET + 4 + len(self.archive_endpoint.encode("ascii")), RECORD_ALIGNMENT)
        return _align(ENDPOINT_OFFSET, RECORD_ALIGNMENT)

    def describe(self) -> str:
        valid = "" if self.is_valid else " INVALID"
        service = f" service={self.service_id}" if self.type is not EntryType.TERM else ""
        return (
            f"{self.type.name}{valid} #{self.entry_index} recording={self.recording_id} "
            f"term={self.leadership_term_id} base={self.term_base_log_position} "
            f"log_position={self.log_position} timestamp={self.timestamp}{service}"
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot step of a recovery plan (Aeron's ``RecordingLog.Snapshot``)."""

    recording_id: int
    leadership_term_id: int
    term_base_log_position: int
    log_position: int
    timestamp: int
    service_id: int


@dataclass(frozen=True, slots=True)
class Log:
    """The log step of a recovery plan (Aeron's ``RecordingLog.Log`` minus the transport fields:
    initial term id, term buffer length, MTU and session id describe Aeron term buffers, which we lack)."""

    recording_id: int
    leadership_term_id: int
    term_base_log_position: int
    log_position: int  # end of the term, NULL_POSITION while it is open
    start_position: int  # snapshot position if there is a snapshot, else the recording's start
    stop_position: int  # how much of the recording is on disk


@dataclass(frozen=True, slots=True)
class RecoveryPlan:
    """What a restarting member loads and replays (docs/protocol.md c.10)."""

    snapshots: tuple[Snapshot, ...]  # [consensus module, service 0, service 1, ...] or empty
    log: Log | None
    last_leadership_term_id: int
    last_term_base_log_position: int
    appended_log_position: int
    committed_log_position: int

    def describe(self) -> str:
        snap = f"snapshot@{self.snapshots[0].log_position}" if self.snapshots else "no snapshot"
        return (
            f"recovery plan: {snap}, last term {self.last_leadership_term_id} "
            f"(base {self.last_term_base_log_position}), appended {self.appended_log_position}, "
            f"committed {self.committed_log_position}"
        )


class RecordingExtentSource(Protocol):
    """Anything that knows a recording's start and stop (a RecordingStore for the log)."""

    @property
    def start_position(self) -> int: ...

    @property
    def stop_position(self) -> int: ...


# recording id -> (start position, stop position), as the archive knows them
RecordingExtentFn = Callable[[int], tuple[int, int]]


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) & ~(alignment - 1)


def _sort_key(e: Entry) -> tuple[int, int, int, int, int]:
    # Aeron's ENTRY_COMPARATOR: SNAPSHOT sorts after every other type; TERMs keep file order; snapshots of
    # one position go services-descending so the consensus module (-1) comes last.
    if e.type is EntryType.TERM:
        return (e.leadership_term_id, e.term_base_log_position, 0, e.entry_index, 0)
    rank = 2 if e.type is EntryType.SNAPSHOT else 1
    return (e.leadership_term_id, e.term_base_log_position, rank, e.log_position, -e.service_id)


def _is_valid_term(e: Entry) -> bool:
    return e.is_valid and e.type is EntryType.TERM


def _is_valid_snapshot(e: Entry) -> bool:
    return e.is_valid and e.type is EntryType.SNAPSHOT


def _is_valid_any_snapshot(e: Entry) -> bool:
    return e.is_valid and e.type in (EntryType.SNAPSHOT, EntryType.STANDBY_SNAPSHOT)


def is_valid_snapshot(e: Entry) -> bool:
    """Aeron ``RecordingLog.isValidSnapshot``: a SNAPSHOT entry not invalidated."""
    return _is_valid_snapshot(e)


def is_invalid_snapshot(e: Entry) -> bool:
    """Aeron ``RecordingLog.isInvalidSnapshot``: a SNAPSHOT entry that was invalidated."""
    return not e.is_valid and e.type is EntryType.SNAPSHOT


class RecordingLog:
    """``<directory>/recording.log``: TERM and SNAPSHOT entries with Aeron's rules (docs/protocol.md c.9)."""

    def __init__(
        self,
        storage: Storage,
        directory: str = "",
        *,
        create_new: bool = True,
        file_sync: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.storage = storage
        self.file_path = join(directory, RECORDING_LOG_FILE_NAME)
        self.path = storage.describe(self.file_path)  # for messages
        self.file_sync = file_sync
        self._log = log or _noop_log
        if not create_new and not storage.exists(self.file_path):
            raise RecordingLogError(f"recording log {self.path} does not exist")
        storage.make_dirs(directory)
        self._fd: StorageFile | None = storage.open(self.file_path)
        self._entries: list[Entry] = []
        self._term_index: dict[int, int] = {}  # leadership term id -> index in _entries (valid TERMs)
        self._term_recording_id = NULL_VALUE
        self._next_entry_index = 0
        self._file_length = 0
        self.reload()

    @classmethod
    def open(
        cls,
        storage: Storage,
        directory: str = "",
        *,
        file_sync: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> RecordingLog:
        """Open (creating if needed) the recording log in ``storage``'s ``directory``."""
        return cls(storage, directory, file_sync=file_sync, log=log)

    def close(self) -> None:
        if self._fd is not None:
            self._fd.close()
            self._fd = None

    def __enter__(self) -> RecordingLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def force(self) -> None:
        """fsync the file if ``file_sync`` (writes are already in the OS)."""
        if self.file_sync and self._fd is not None:
            self._fd.sync()

    # ------------------------------------------------------------------ loading

    def reload(self) -> None:
        """Re-read the file (cutting off a torn last record) and rebuild the sorted view."""
        fd = self._require_fd()
        size = fd.size()
        data = fd.read(0, size) if size else b""
        entries: list[Entry] = []
        self._term_recording_id = NULL_VALUE
        offset = 0
        index = 0
        while offset < len(data):
            if len(data) - offset < RECORD_ALIGNMENT:
                self._cut_torn_record(offset, len(data), "partial record")
                break
            rec_id, term, base, pos, ts, service, raw_type = _RECORD.unpack_from(data, offset)
            length = RECORD_ALIGNMENT
            endpoint = ""
            if raw_type == ENTRY_TYPE_REMOVED:
                entry_type, valid = None, False
            else:
                code = raw_type & ~ENTRY_TYPE_INVALID_FLAG
                valid = not raw_type & ENTRY_TYPE_INVALID_FLAG
                try:
                    entry_type = EntryType(code)
                except ValueError:
                    raise RecordingLogError(
                        f"corrupt recording log {self.path}: record {index} at offset {offset} has unknown "
                        f"entry type {raw_type:#010x}"
                    ) from None
                if entry_type is EntryType.STANDBY_SNAPSHOT:
                    if len(data) - offset < ENDPOINT_OFFSET + 4:
                        self._cut_torn_record(offset, len(data), "partial standby snapshot record")
                        break
                    (n,) = _UINT32.unpack_from(data, offset + ENDPOINT_OFFSET)
                    length = _align(ENDPOINT_OFFSET + 4 + n, RECORD_ALIGNMENT)
                    if len(data) - offset < length:
                        self._cut_torn_record(offset, len(data), "partial standby snapshot record")
                        break
                    start = offset + ENDPOINT_OFFSET + 4
                    endpoint = data[start : start + n].decode("ascii", errors="replace")
            if entry_type is not None:
                entry = Entry(rec_id, term, base, pos, ts, service, entry_type, index, valid, offset, endpoint)
                if entry_type is EntryType.TERM:
                    self._check_term_recording_id(rec_id, f"record {index} at offset {offset}")
                    self._term_recording_id = rec_id
                entries.append(entry)
            offset += length
            index += 1
        self._file_length = offset
        self._next_entry_index = index
        self._set_entries(entries)

    def _cut_torn_record(self, offset: int, size: int, reason: str) -> None:
        self._log(
            f"recording log {self.path}: {reason} at offset {offset} ({size - offset} bytes) left by a "
            f"crash; truncating the file to {offset} bytes"
        )
        self._require_fd().truncate(offset)
        self.force()

    def _set_entries(self, entries: list[Entry]) -> None:
        entries.sort(key=_sort_key)
        self._entries = entries
        self._term_index = {e.leadership_term_id: i for i, e in enumerate(entries) if _is_valid_term(e)}

    # ------------------------------------------------------------------ queries

    def entries(self) -> list[Entry]:
        """All loaded entries (invalid ones included, removed ones not), in Aeron's sort order."""
        return list(self._entries)

    @property
    def next_entry_index(self) -> int:
        """The entry index the next appended record will get."""
        return self._next_entry_index

    def find_last_term(self) -> Entry | None:
        """The last valid TERM entry in sort order, or None."""
        for e in reversed(self._entries):
            if _is_valid_term(e):
                return e
        return None

    def find_last_term_recording_id(self) -> int:
        """The recording id of the last TERM, or NULL_VALUE."""
        last = self.find_last_term()
        return last.recording_id if last is not None else NULL_VALUE

    def find_term_entry(self, leadership_term_id: int) -> Entry | None:
        """The valid TERM entry for a term, or None."""
        i = self._term_index.get(leadership_term_id)
        return self._entries[i] if i is not None else None

    def get_term_entry(self, leadership_term_id: int) -> Entry:
        """The valid TERM entry for a term; RecordingLogError if unknown."""
        e = self.find_term_entry(leadership_term_id)
        if e is None:
            raise RecordingLogError(f"{self.path}: unknown leadership_term_id={leadership_term_id}")
        return e

    def is_unknown(self, leadership_term_id: int) -> bool:
        """True if no valid TERM entry exists for the term."""
        return leadership_term_id not in self._term_index

    def get_term_timestamp(self, leadership_term_id: int) -> int:
        """The timestamp of a term's entry, or NULL_VALUE if unknown."""
        e = self.find_term_entry(leadership_term_id)
        return e.timestamp if e is not None else NULL_VALUE

    def latest_snapshot(self, service_id: int) -> Entry | None:
        """The snapshot entry of ``service_id`` in the latest valid snapshot set (Aeron's getLatestSnapshot:
        find a valid consensus-module snapshot from the end, the service's entry sits ``service_id + 1``
        places before it)."""
        for i in range(len(self._entries) - 1, -1, -1):
            e = self._entries[i]
            if _is_valid_snapshot(e) and e.service_id == SERVICE_ID_CONSENSUS_MODULE:
                if service_id == SERVICE_ID_CONSENSUS_MODULE:
                    return e
                j = i - (service_id + 1)
                if j >= 0:
                    s = self._entries[j]
                    if _is_valid_snapshot(s) and s.service_id == service_id:
                        return s
        return None

    # ------------------------------------------------------------------ TERM entries

    def append_term(
        self, recording_id: int, leadership_term_id: int, term_base_log_position: int, timestamp: int
    ) -> Entry:
        """Append the TERM entry of a new term. The previous term (if recorded) ends at this term's base;
        if the next term is already recorded, this term ends at that term's base."""
        self._check_term_recording_id(recording_id, "append_term")
        log_position = NULL_POSITION
        if self._entries:
            if leadership_term_id in self._term_index:
                raise RecordingLogError(
                    f"{self.path}: duplicate TERM entry for leadership_term_id={leadership_term_id}"
                )
            if leadership_term_id - 1 in self._term_index:
                self.commit_log_position(leadership_term_id - 1, term_base_log_position)
            next_term = self.find_term_entry(leadership_term_id + 1)
            if next_term is not None:
                log_position = next_term.term_base_log_position
        self._term_recording_id = recording_id
        return self._append(
            EntryType.TERM,
            recording_id,
            leadership_term_id,
            term_base_log_position,
            log_position,
            timestamp,
            NULL_VALUE,
        )

    def commit_log_position(self, leadership_term_id: int, log_position: int) -> None:
        """Set the end position of a term (in place, one 8-byte write)."""
        i = self._term_index.get(leadership_term_id)
        if i is None:
            raise RecordingLogError(f"{self.path}: unknown leadership_term_id={leadership_term_id}")
        e = self._entries[i]
        if e.log_position != log_position:
            self._pwrite(_INT64.pack(log_position), e.file_offset + LOG_POSITION_OFFSET)
            # log_position is not part of a TERM's sort key, so the entry keeps its place.
            self._entries[i] = replace(e, log_position=log_position)

    def ensure_coherent(
        self,
        recording_id: int,
        initial_log_leadership_term_id: int,
        initial_term_base_log_position: int,
        leadership_term_id: int,
        term_base_log_position: int,
        log_position: int,
        timestamp: int,
    ) -> None:
        """Make sure a TERM entry exists for ``leadership_term_id`` (called when a member creates or joins a
        term), back-filling empty entries for skipped term ids so every term id has one; then, if
        ``log_position`` is not NULL, commit it as that term's end. Aeron's ``ensureCoherent``."""
        last = self.find_last_term()
        if last is None:
            for term in range(max(0, initial_log_leadership_term_id), leadership_term_id):
                self.append_term(recording_id, term, initial_term_base_log_position, timestamp)
            self.append_term(recording_id, leadership_term_id, term_base_log_position, timestamp)
        elif last.leadership_term_id < leadership_term_id:
            if last.log_position == NULL_POSITION:
                if term_base_log_position == NULL_POSITION:
                    raise RecordingLogError(
                        f"{self.path}: prior term was not committed: {last.describe()} and "
                        f"term_base_log_position was not given for leadership_term_id={leadership_term_id}"
                    )
                self.commit_log_position(last.leadership_term_id, term_base_log_position)
                last = self.get_term_entry(last.leadership_term_id)
            # Skipped ids (failed ballots) get empty terms: base = end = where the last term ended.
            for term in range(last.leadership_term_id + 1, leadership_term_id):
                self.append_term(recording_id, term, last.log_position, timestamp)
            self.append_term(recording_id, leadership_term_id, last.log_position, timestamp)
        if log_position != NULL_POSITION:
            self.commit_log_position(leadership_term_id, log_position)
        self.force()

    def truncate_terms_after(self, log_position: int) -> list[Entry]:
        """Bring the TERM entries in line with a log truncated to ``log_position``; returns removed entries.

        What Aeron does (``ConsensusModuleAgent.truncateLogEntry`` called from the election's
        ``onTruncateLogEntry``, PROTOCOL b.4/e.6): truncate the archive recording, then
        ``commitLogPosition(logLeadershipTermId, position)`` -- the term the local log ends in (always the
        last TERM entry) gets its end set to the truncation position. It is *closed* at that position, not
        reopened (-1): the bytes past it are gone, and the new leader's term starts there. Aeron removes no
        entry because the truncated term is always the last one.

        We do exactly that for the last remaining term, and additionally remove valid TERM entries whose
        base lies beyond ``log_position`` (never the case on Aeron's path; it happens when a tool or chaos
        nemesis truncates the log below a later term's start). Snapshot entries are left alone: they
        record committed state, and truncation below a committed position is not a protocol action."""
        removed: list[Entry] = []
        for e in list(reversed(self._entries)):
            if _is_valid_term(e) and e.term_base_log_position > log_position:
                self.remove_entry(e.leadership_term_id, e.entry_index)
                removed.append(e)
        last = self.find_last_term()
        if last is not None and last.log_position != log_position:
            self.commit_log_position(last.leadership_term_id, log_position)
            self._log(
                f"recording log {self.path}: log truncated to {log_position}: term {last.leadership_term_id} "
                f"now ends there (was {last.log_position})"
            )
        if removed:
            self._log(
                f"recording log {self.path}: log truncated to {log_position}: removed TERM entries of terms "
                f"{[e.leadership_term_id for e in removed]} that started beyond it"
            )
        self.force()
        return removed

    # ------------------------------------------------------------------ SNAPSHOT entries

    def append_snapshot(
        self,
        recording_id: int,
        leadership_term_id: int,
        term_base_log_position: int,
        log_position: int,
        timestamp: int,
        service_id: int,
    ) -> Entry:
        """Record one snapshot of a set (call services first, highest id first, the consensus module last).
        A matching invalidated entry (same term, base, position, service) is re-validated in place."""
        if recording_id == NULL_VALUE:
            raise RecordingLogError(f"{self.path}: invalid recording_id={recording_id}")
        for i in range(len(self._entries) - 1, -1, -1):
            e = self._entries[i]
            if (
                e.type is EntryType.SNAPSHOT
                and not e.is_valid
                and e.leadership_term_id == leadership_term_id
                and e.term_base_log_position == term_base_log_position
                and e.log_position == log_position
                and e.service_id == service_id
            ):
                restored = Entry(
                    recording_id,
                    leadership_term_id,
                    term_base_log_position,
                    log_position,
                    timestamp,
                    service_id,
                    EntryType.SNAPSHOT,
                    e.entry_index,
                    True,
                    e.file_offset,
                )
                self._pwrite(_encode(restored), e.file_offset)
                self._entries[i] = restored  # same sort key: it keeps its place
                return restored
        return self._append(
            EntryType.SNAPSHOT,
            recording_id,
            leadership_term_id,
            term_base_log_position,
            log_position,
            timestamp,
            service_id,
        )

    def invalidate_latest_snapshot(self) -> bool:
        """Mark the latest snapshot set (the consensus module's entry at the highest log position and its
        service entries) invalid, so recovery falls back to the previous set. Returns False if there is
        none. RecordingLogError if the snapshot's term has no TERM entry."""
        indices: list[int] = []
        high = NULL_POSITION
        for i in range(len(self._entries) - 1, -1, -1):
            e = self._entries[i]
            if _is_valid_any_snapshot(e) and e.service_id == SERVICE_ID_CONSENSUS_MODULE:
                if e.log_position < high:
                    break  # an earlier snapshot: the latest set is found
                if e.leadership_term_id not in self._term_index:
                    raise RecordingLogError(
                        f"{self.path}: no matching term for snapshot: leadership_term_id={e.leadership_term_id}"
                    )
                if e.log_position > high:
                    indices.clear()
                    high = e.log_position
                indices.append(i)
        for start in indices:
            service_id = SERVICE_ID_CONSENSUS_MODULE
            for i in range(start, -1, -1):
                e = self._entries[i]
                if not (_is_valid_any_snapshot(e) and e.service_id == service_id):
                    break
                self._invalidate_at(i)
                service_id += 1
        return bool(indices)

    # ------------------------------------------------------------------ any entry

    def invalidate_entry(self, leadership_term_id: int, entry_index: int) -> Entry:
        """Set the invalid bit of one entry (an invalid TERM no longer counts as the term's entry)."""
        i = self._index_of(leadership_term_id, entry_index)
        return self._invalidate_at(i)

    def remove_entry(self, leadership_term_id: int, entry_index: int) -> None:
        """Mark one entry removed on disk (type -1) and reload."""
        i = self._index_of(leadership_term_id, entry_index)
        self._pwrite(_UINT32.pack(ENTRY_TYPE_REMOVED), self._entries[i].file_offset + ENTRY_TYPE_OFFSET)
        self.reload()

    def _index_of(self, leadership_term_id: int, entry_index: int) -> int:
        for i in range(len(self._entries) - 1, -1, -1):
            e = self._entries[i]
            if e.leadership_term_id == leadership_term_id and e.entry_index == entry_index:
                return i
        raise RecordingLogError(
            f"{self.path}: unknown entry index {entry_index} for leadership_term_id={leadership_term_id}"
        )

    def _invalidate_at(self, i: int) -> Entry:
        e = replace(self._entries[i], is_valid=False)
        self._pwrite(_UINT32.pack(ENTRY_TYPE_INVALID_FLAG | e.type), e.file_offset + ENTRY_TYPE_OFFSET)
        self._entries[i] = e
        if e.type is EntryType.TERM and self._term_index.get(e.leadership_term_id) == i:
            del self._term_index[e.leadership_term_id]
        return e

    # ------------------------------------------------------------------ recovery

    def create_recovery_plan(
        self, service_count: int, recordings: RecordingExtentFn | RecordingExtentSource
    ) -> RecoveryPlan:
        """The plan to recover this member (docs/protocol.md c.10): the latest valid snapshot set and the log.

        ``recordings`` gives a recording's (start, stop): a function of the recording id (e.g.
        ``Archive.recording_extent``) or the log's RecordingStore itself."""
        extent = _extent_fn(recordings)
        snapshots: list[Snapshot] = []
        log: Log | None = None
        snapshot_index = log_index = -1
        for i in range(len(self._entries) - 1, -1, -1):
            e = self._entries[i]
            if snapshot_index == -1 and _is_valid_snapshot(e) and e.service_id == SERVICE_ID_CONSENSUS_MODULE:
                snapshot_index = i
            elif log_index == -1 and _is_valid_term(e) and e.recording_id != NULL_VALUE:
                log_index = i
            if snapshot_index != -1 and log_index != -1:
                break
        if snapshot_index != -1:
            snapshots = self._snapshot_set(snapshot_index, service_count)
        if log_index != -1:
            e = self._entries[log_index]
            start, stop = extent(e.recording_id)
            log = Log(
                e.recording_id,
                e.leadership_term_id,
                e.term_base_log_position,
                e.log_position,
                snapshots[0].log_position if snapshots else start,
                stop,
            )
        last_term, last_base, appended, committed = NULL_VALUE, 0, 0, 0
        if snapshots:
            cm = snapshots[0]
            last_term, last_base = cm.leadership_term_id, cm.term_base_log_position
            appended = committed = cm.log_position
        if log is not None:
            last_term, last_base = log.leadership_term_id, log.term_base_log_position
            appended = log.stop_position
            if log.log_position != NULL_POSITION:
                committed = log.log_position
        return RecoveryPlan(tuple(snapshots), log, last_term, last_base, appended, committed)

    def _snapshot_set(self, cm_index: int, service_count: int) -> list[Snapshot]:
        cm = self._entries[cm_index]
        result = [_snapshot(cm)]
        for service_id in range(service_count):
            j = cm_index - (service_id + 1)
            e = self._entries[j] if j >= 0 else None
            if (
                e is None
                or not _is_valid_snapshot(e)
                or e.service_id != service_id
                or e.leadership_term_id != cm.leadership_term_id
                or e.log_position != cm.log_position
            ):
                raise RecordingLogError(
                    f"{self.path}: snapshot missing for service {service_id} in the set at log_position "
                    f"{cm.log_position} (term {cm.leadership_term_id})"
                )
            result.append(_snapshot(e))
        return result

    # ------------------------------------------------------------------ writing

    def _check_term_recording_id(self, recording_id: int, where: str) -> None:
        # The whole multi-term log is one recording: every TERM entry must name the same one.
        if recording_id == NULL_VALUE:
            raise RecordingLogError(f"{self.path}: invalid recording_id={recording_id} ({where})")
        if self._term_recording_id not in (NULL_VALUE, recording_id):
            raise RecordingLogError(
                f"{self.path}: invalid TERM recording_id={recording_id}, expected {self._term_recording_id} ({where})"
            )

    def _append(
        self,
        entry_type: EntryType,
        recording_id: int,
        leadership_term_id: int,
        term_base_log_position: int,
        log_position: int,
        timestamp: int,
        service_id: int,
    ) -> Entry:
        offset = _align(self._file_length, RECORD_ALIGNMENT)
        e = Entry(
            recording_id,
            leadership_term_id,
            term_base_log_position,
            log_position,
            timestamp,
            service_id,
            entry_type,
            self._next_entry_index,
            True,
            offset,
        )
        self._pwrite(_encode(e), offset)
        self._file_length = offset + e.length
        self._next_entry_index += 1
        # Small list, rare appends: a stable re-sort equals Aeron's insertion after all entries <= it.
        self._set_entries([*self._entries, e])
        return e

    def _pwrite(self, data: bytes, offset: int) -> None:
        self._require_fd().write(offset, data)

    def _require_fd(self) -> StorageFile:
        if self._fd is None:
            raise RecordingLogError(f"recording log {self.path} is closed")
        return self._fd


def encode_entries(entries: list[Entry]) -> bytes:
    """The file image of ``entries`` in this order (ClusterTool's rewrites: sort, seed from snapshot)."""
    return b"".join(_encode(e) for e in entries)


def _encode(e: Entry) -> bytes:
    raw_type = int(e.type) | (0 if e.is_valid else ENTRY_TYPE_INVALID_FLAG)
    head = _RECORD.pack(
        e.recording_id,
        e.leadership_term_id,
        e.term_base_log_position,
        e.log_position,
        e.timestamp,
        e.service_id,
        raw_type,
    )
    return head + b"\x00" * (e.length - len(head))


def _snapshot(e: Entry) -> Snapshot:
    return Snapshot(
        e.recording_id,
        e.leadership_term_id,
        e.term_base_log_position,
        e.log_position,
        e.timestamp,
        e.service_id,
    )


def _extent_fn(recordings: RecordingExtentFn | RecordingExtentSource) -> RecordingExtentFn:
    if callable(recordings):
        return recordings
    source = recordings

    def extent(recording_id: int) -> tuple[int, int]:
        return source.start_position, source.stop_position

    return extent
