"""ClusterTool's member-directory commands (Aeron's ``ClusterTool`` / ``ClusterToolOperator``), below
the CLI so tests and ``clusterlab tool DIR <command>`` share them.

* :func:`describe_recording_log` - the recording log's entries (``recording-log``);
* :func:`sort_recording_log` - rewrite the file in Aeron's sort order if it is not (``sort-recording-log``);
* :func:`seed_recording_log_from_snapshot` - keep only the latest valid snapshot set, at position 0, so
  it seeds a new cluster; the old file is kept as ``recording.log.bak`` (``seed-recording-log-from-snapshot``);
* :func:`describe_latest_snapshot` - the latest consensus-module snapshot's contents and its services'
  snapshots (``describe-latest-snapshot``);
* :func:`describe_errors` - the member's distinct error log (``errors``), live or as last written;
* :func:`stopped_member_health` - why a stopped member's node stopped, as it wrote on its way out;
* :func:`read_member_counters` - its counters, live from a running node or as last persisted (``counters``);
* :func:`describe_backup_query` - a ClusterBackup's state from its directory's status file (``backup-query``);
* :func:`restore_member_directory` - replace a stopped member's durable state with a copy of a backup.

A member directory is ``<cluster dir>/member-<i>``. Reading commands work on a running member (they
copy what they read and never write); the rewriting ones refuse while the member's node runs, since
Aeron's do too in practice (the node rewrites its recording log itself).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import replace
from pathlib import Path

from clusterlab.core.archive import layout
from clusterlab.core.archive.snapshots import SNAPSHOT_SUFFIX
from clusterlab.core.archive.storage import MemoryStorage
from clusterlab.core.codec import DecodeError, decode
from clusterlab.core.codec.framing import walk_frames
from clusterlab.core.consensus.context import SERVICE_ID_CONSENSUS_MODULE
from clusterlab.core.consensus.counters import ClusterCounters
from clusterlab.core.consensus.recording_log import (
    RECORDING_LOG_FILE_NAME,
    Entry,
    RecordingLog,
    RecordingLogError,
    encode_entries,
    is_valid_snapshot,
)
from clusterlab.core.runtime.backup import LOCK_FILE_NAME as BACKUP_LOCK_FILE_NAME
from clusterlab.core.runtime.backup import PROCESS_FILES, BackupStatusError, read_backup_status
from clusterlab.core.runtime.config import CONFIG_FILE_NAME, ClusterConfig, ConfigError
from clusterlab.core.runtime.counters_file import CountersFileError, read_counters_file

BACKUP_SUFFIX = ".bak"
NODE_LOCK_FILE_NAME = "node.lock"


class ClusterToolError(Exception):
    """A command that cannot run on this directory; the message names the directory and what was wrong."""


# ---------------------------------------------------------------------------------- directories
def member_directory(directory: Path, member_id: int | None) -> Path:
    """The member directory ``directory`` names: itself, or ``member-<member_id>`` of a cluster directory."""
    if not directory.exists():
        raise ClusterToolError(f"no directory {directory}")
    if not directory.is_dir():
        raise ClusterToolError(f"{directory}: is a file, not a directory")
    if (directory / CONFIG_FILE_NAME).is_file():
        if member_id is None:
            raise ClusterToolError(f"{directory} is a cluster directory: say which member with --member N")
        try:
            config = ClusterConfig.load(directory)
            member = config.member(member_id)
        except ConfigError as e:
            raise ClusterToolError(str(e)) from None
        path = config.member_dir(member.member_id)
        if not path.is_dir():
            raise ClusterToolError(f"member {member_id} has no directory yet ({path})")
        return path
    if member_id is not None:
        raise ClusterToolError(f"--member needs a cluster directory (with {CONFIG_FILE_NAME}); {directory} has none")
    return directory


def is_node_running(member_dir: Path) -> bool:
    """Whether a node process holds the member's lock (``node.lock``)."""
    return is_lock_held(member_dir / NODE_LOCK_FILE_NAME)


def is_lock_held(path: Path) -> bool:
    """Whether a live process holds the flock on ``path`` (a node's, service's or backup's lock file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _refuse_if_running(member_dir: Path, what: str) -> None:
    if is_node_running(member_dir):
        raise ClusterToolError(f"{what}: the node of {member_dir} is running; stop it first")


# ---------------------------------------------------------------------------------- recording log
def load_recording_log_entries(member_dir: Path) -> list[Entry]:
    """The entries of ``<member_dir>/recording.log`` in Aeron's sort order, read from a copy (never
    writing the member's file, which a running node may be appending to)."""
    path = member_dir / RECORDING_LOG_FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ClusterToolError(f"no recording log in {member_dir} ({RECORDING_LOG_FILE_NAME} does not exist)") from None
    except OSError as e:
        raise ClusterToolError(f"cannot read {path}: {e}") from None
    storage = MemoryStorage(str(member_dir))
    storage.replace(RECORDING_LOG_FILE_NAME, data, sync=False)
    try:
        with RecordingLog(storage, create_new=False) as log:
            return log.entries()
    except RecordingLogError as e:
        raise ClusterToolError(str(e)) from None


def describe_recording_log(member_dir: Path) -> str:
    """Aeron ``ClusterTool recording-log``: one line per entry, in sort order."""
    entries = load_recording_log_entries(member_dir)
    lines = [f"RecordingLog {member_dir / RECORDING_LOG_FILE_NAME}: {len(entries)} entries"]
    for e in entries:
        lines.append(
            f"  entry_index={e.entry_index} type={e.type.name} recording_id={e.recording_id} "
            f"leadership_term_id={e.leadership_term_id} term_base_log_position={e.term_base_log_position} "
            f"log_position={e.log_position} timestamp={e.timestamp} service_id={e.service_id} "
            f"valid={str(e.is_valid).lower()}"
        )
    return "\n".join(lines)


def _rewrite_recording_log(member_dir: Path, entries: list[Entry]) -> None:
    """Aeron ``updateRecordingLog``: the entries, numbered in order, via ``recording.log.tmp``; none
    left: the file is deleted."""
    path = member_dir / RECORDING_LOG_FILE_NAME
    if not entries:
        path.unlink()
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    tmp.write_bytes(encode_entries([replace(e, entry_index=i) for i, e in enumerate(entries)]))
    os.replace(tmp, path)


def sort_recording_log(member_dir: Path) -> bool:
    """Aeron ``ClusterTool.sortRecordingLog``: True if the file was rewritten in sort order; False (a
    no-op) if it does not exist, is empty or already sorted."""
    if not (member_dir / RECORDING_LOG_FILE_NAME).exists():
        return False
    _refuse_if_running(member_dir, "sort-recording-log")
    entries = load_recording_log_entries(member_dir)
    if all(e.entry_index == i for i, e in enumerate(entries)):
        return False
    _rewrite_recording_log(member_dir, entries)
    return True


def seed_recording_log_from_snapshot(member_dir: Path) -> list[Entry]:
    """Aeron ``ClusterTool.seedRecordingLogFromSnapshot``: back the file up as ``recording.log.bak``
    (times kept), then keep only the latest valid snapshot set (the consensus module's and the
    services' before it), at term base and log position 0; no valid snapshot: the file is deleted.
    Returns the entries written."""
    path = member_dir / RECORDING_LOG_FILE_NAME
    if not path.exists():
        raise ClusterToolError(f"no recording log in {member_dir} ({RECORDING_LOG_FILE_NAME} does not exist)")
    _refuse_if_running(member_dir, "seed-recording-log-from-snapshot")
    entries = load_recording_log_entries(member_dir)
    snapshot_index = next(
        (
            i
            for i in range(len(entries) - 1, -1, -1)
            if is_valid_snapshot(entries[i]) and entries[i].service_id == SERVICE_ID_CONSENSUS_MODULE
        ),
        None,
    )
    shutil.copy2(path, path.with_name(path.name + BACKUP_SUFFIX))
    seeded: list[Entry] = []
    if snapshot_index is not None:
        service_id = SERVICE_ID_CONSENSUS_MODULE
        for i in range(snapshot_index, -1, -1):
            e = entries[i]
            if not (is_valid_snapshot(e) and e.service_id == service_id):
                break
            seeded.append(replace(e, term_base_log_position=0, log_position=0))
            service_id += 1
        seeded.reverse()
    _rewrite_recording_log(member_dir, seeded)
    return [replace(e, entry_index=i) for i, e in enumerate(seeded)]


# ---------------------------------------------------------------------------------- snapshots
def _snapshot_records(member_dir: Path, snapshot_dir: str, recording_id: int) -> list[bytes]:
    path = member_dir / snapshot_dir / f"{recording_id:016d}{SNAPSHOT_SUFFIX}"
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ClusterToolError(f"snapshot recording {recording_id}: cannot read {path}: {e}") from None
    result = walk_frames(data, 0)  # snapshot recordings start at position 0
    if result.error is not None:
        raise ClusterToolError(f"corrupt snapshot recording {recording_id} ({path}): {result.error}")
    return [f.payload for f in result.frames]


def _describe_records(records: list[bytes]) -> list[str]:
    lines = []
    for payload in records:
        try:
            lines.append(f"    {decode(payload).describe()}")
        except DecodeError:
            lines.append(f"    ({len(payload)} bytes of service state)")
    return lines


def describe_latest_snapshot(member_dir: Path) -> str:
    """Aeron ``ClusterTool describe-latest-cm-snapshot``: the latest valid consensus-module snapshot
    (marker, next session id, sessions, timers, pending service messages) and its services' snapshots."""
    entries = load_recording_log_entries(member_dir)
    cm_index = next(
        (
            i
            for i in range(len(entries) - 1, -1, -1)
            if is_valid_snapshot(entries[i]) and entries[i].service_id == SERVICE_ID_CONSENSUS_MODULE
        ),
        None,
    )
    if cm_index is None:
        raise ClusterToolError(f"no valid consensus module snapshot in {member_dir / RECORDING_LOG_FILE_NAME}")
    cm = entries[cm_index]
    lines = [
        f"Snapshot: recording_id={cm.recording_id} leadership_term_id={cm.leadership_term_id} "
        f"log_position={cm.log_position} timestamp={cm.timestamp} (consensus module)",
        *_describe_records(_snapshot_records(member_dir, layout.SNAPSHOT_DIR, cm.recording_id)),
    ]
    for e in reversed(entries[:cm_index]):
        if not is_valid_snapshot(e) or e.log_position != cm.log_position or e.service_id < 0:
            break
        records = _snapshot_records(member_dir, layout.service_snapshot_store_dirs(e.service_id)[1], e.recording_id)
        lines.append(
            f"Service snapshot: service_id={e.service_id} recording_id={e.recording_id} "
            f"log_position={e.log_position} records={len(records)}"
        )
        lines.extend(_describe_records(records))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- counters, errors
def read_member_counters(member_dir: Path) -> tuple[ClusterCounters, dict[str, int], bool]:
    """(counters, distinct errors, running) as the member last persisted them (``counters.json``)."""
    try:
        snap = read_counters_file(member_dir)
    except CountersFileError as e:
        raise ClusterToolError(str(e)) from None
    return snap.counters, snap.errors, snap.running and is_node_running(member_dir)


def stopped_member_health(member_dir: Path) -> str:
    """Why a member's node stopped, as it wrote on its way out (``counters.json``); "" while it runs,
    if it never wrote the file, or if it was killed before it could."""
    try:
        snap = read_counters_file(member_dir)
    except CountersFileError:
        return ""
    if snap.running or is_node_running(member_dir):
        return ""
    return snap.stop_reason


def describe_errors(member_dir: Path, live: tuple[ClusterCounters, dict[str, int]] | None = None) -> str:
    """Aeron ``ClusterTool errors``: the member's distinct error log, each error with its count;
    ``live``: a running node's counters and error log from its control socket (its file may be stale:
    a full disk cannot take it), else as the node last wrote them."""
    if live is not None:
        (counters, errors), state = live, "running, live"
    else:
        counters, errors, running = read_member_counters(member_dir)
        state = "running" if running else "stopped"
        if not running and (why := stopped_member_health(member_dir)):
            state = f"stopped: {why}"
    lines = [f"member {counters.member_id} ({state}): {counters.errors} errors, {len(errors)} distinct"]
    for message, count in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {count} observations: {message}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- ClusterBackup
def backup_status(backup_dir: Path) -> dict[str, object]:
    """The backup's status file (clusterlab.core.runtime.backup); ClusterToolError if there is none."""
    if not backup_dir.is_dir():
        raise ClusterToolError(f"no backup directory {backup_dir}")
    try:
        return read_backup_status(backup_dir)
    except BackupStatusError as e:
        raise ClusterToolError(str(e)) from None


def describe_backup_query(backup_dir: Path) -> str:
    """Aeron ``ClusterTool backup-query``: the backup's state, positions and next query time, and
    whether its process still runs."""
    status = backup_status(backup_dir)
    running = is_lock_held(backup_dir / BACKUP_LOCK_FILE_NAME)
    rows = [
        ("state", status["state"]),
        ("live log position", status["live_log_position"]),
        ("snapshots retrieved", status["snapshots_retrieved_count"]),
        ("leader member id", status["leader_member_id"]),
        ("source member id", status["source_member_id"]),
        ("cluster commit position", status["cluster_commit_position"]),
        ("errors", status["errors"]),
        ("next backup query (ns)", status["time_of_next_backup_query_ns"]),
        ("pid", f"{status['pid']} ({'running' if running else 'stopped'})"),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join([f"backup {backup_dir}:", *(f"  {label:<{width}}  {value}" for label, value in rows)])


def restore_member_directory(backup_dir: Path, member_dir: Path) -> None:
    """Replace the durable state of a stopped member (its archive, snapshots and recording log) with a
    copy of ``backup_dir``, a ClusterBackup's directory (Aeron: a member started on the backup's
    directory). Lock files stay; the backup process's own files (status, log, lock) are not copied.
    Refuses while a process of the member or the backup runs, or if ``backup_dir`` holds no backup."""
    backup_status(backup_dir)
    if is_lock_held(backup_dir / BACKUP_LOCK_FILE_NAME):
        raise ClusterToolError(f"the backup in {backup_dir} is still running; stop it before restoring from it")
    if not (backup_dir / RECORDING_LOG_FILE_NAME).is_file():
        raise ClusterToolError(f"{backup_dir} holds no recording log yet: nothing to restore")
    if member_dir.is_dir():
        held = [p.name for p in member_dir.glob("*.lock") if is_lock_held(p)]
        if held:
            raise ClusterToolError(f"{member_dir} is in use ({', '.join(held)} held): stop the member first")
        for entry in member_dir.iterdir():
            if entry.suffix == ".lock":
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    member_dir.mkdir(parents=True, exist_ok=True)
    for entry in backup_dir.iterdir():
        if entry.name in PROCESS_FILES or entry.name.endswith(".tmp"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, member_dir / entry.name)
        else:
            shutil.copy2(entry, member_dir / entry.name)
