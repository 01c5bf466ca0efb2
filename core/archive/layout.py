"""Where a member's durable state lives, all under its own directory (ARCHITECTURE: the core touches the
disk only through the archive store, the recording log and the node-state file)."""

from __future__ import annotations

from pathlib import Path

ARCHIVE_DIR_NAME = "archive"
LOG_DIR_NAME = "log"
SNAPSHOT_DIR_NAME = "snapshots"
CATALOGUE_FILE_NAME = "catalogue.json"
# The log recording is recording 0 by convention; snapshots get fresh ids from the catalogue.
LOG_RECORDING_ID = 0


def archive_dir(member_dir: Path | str) -> Path:
    """``<member_dir>/archive``."""
    return Path(member_dir) / ARCHIVE_DIR_NAME


def log_dir(member_dir: Path | str) -> Path:
    """``<member_dir>/archive/log``: the log recording's segment files."""
    return archive_dir(member_dir) / LOG_DIR_NAME


def snapshot_dir(member_dir: Path | str) -> Path:
    """``<member_dir>/archive/snapshots``: one file per snapshot recording."""
    return archive_dir(member_dir) / SNAPSHOT_DIR_NAME


def catalogue_path(member_dir: Path | str) -> Path:
    """``<member_dir>/archive/catalogue.json``."""
    return archive_dir(member_dir) / CATALOGUE_FILE_NAME


def service_snapshot_dir(member_dir: Path | str, service_id: int) -> Path:
    """``<member_dir>/service-<id>``: where a member's service ``service_id`` keeps its snapshot recordings."""
    return Path(member_dir) / f"service-{service_id}"
