"""Where a member's durable state lives, all under its own directory (ARCHITECTURE: the core touches the
disk only through the archive store, the recording log and the node-state file)."""

from __future__ import annotations

from pathlib import Path

ARCHIVE_DIR_NAME = "archive"
LOG_DIR_NAME = "log"
SNAPSHOT_DIR_NAME = "snapshots"
CATALOGUE_FILE_NAME = "catalogue.json"
# The same places as storage paths (relative to the member's storage root).
LOG_DIR = f"{ARCHIVE_DIR_NAME}/{LOG_DIR_NAME}"
SNAPSHOT_DIR = f"{ARCHIVE_DIR_NAME}/{SNAPSHOT_DIR_NAME}"
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


def service_archive_dir(service_id: int) -> str:
    """Storage path of service ``service_id``'s own archive (its snapshot store and catalogue):
    ``service-<id>/archive``. Each service allocates recording ids from its own catalogue, since two
    processes must not allocate from one (Aeron's archive process serialises that)."""
    return f"service-{service_id}/{ARCHIVE_DIR_NAME}"


def service_snapshot_store_dirs(service_id: int) -> tuple[str, str]:
    """(catalogue directory, snapshot directory) storage paths of service ``service_id``."""
    base = service_archive_dir(service_id)
    return base, f"{base}/{SNAPSHOT_DIR_NAME}"
