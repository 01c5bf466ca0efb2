"""``<member dir>/counters.json``: a node's counters and distinct error log, readable from outside.

Aeron keeps a member's counters in the media driver's CnC file and its distinct error log in the
cluster mark file (``cluster-mark.dat``); both outlive the process, so ClusterTool reads the last
values of a stopped member and the live ones of a running member. Our node has no shared memory: it
serves live values on its control socket (``CountersRequest``) and rewrites this file (atomically) at
most every ``WRITE_INTERVAL_NS``, whenever the error count changes, and when it stops, so a stopped
member's last counters and errors stay readable (``clusterlab tool DIR counters|errors``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterlab.core.archive.storage import Storage
from clusterlab.core.atomic import write_atomically
from clusterlab.core.consensus.counters import ClusterCounters

COUNTERS_FILE_NAME = "counters.json"
WRITE_INTERVAL_NS = 1_000_000_000


class CountersFileError(Exception):
    """The counters file is missing or unreadable; names the file and what was wrong."""


@dataclass(frozen=True, slots=True)
class CountersSnapshot:
    """What the file holds: the counters, the distinct errors (message -> count), the writer."""

    counters: ClusterCounters
    errors: dict[str, int]
    pid: int
    running: bool  # False once the node wrote it on its way out
    stop_reason: str = ""  # why the node stopped (written on its way out): "terminated: ...", a signal


class CountersFile:
    """The writer side, owned by a node process."""

    def __init__(self, member_dir: Path, storage: Storage | None = None) -> None:
        self.path = Path(member_dir) / COUNTERS_FILE_NAME
        # The node's storage of the member directory: the disk faults injected into it (a full disk)
        # fail this file's writes as they fail the archive's.
        self._storage = storage
        self._next_write_ns = 0
        self._written_errors = -1

    def is_due(self, now_ns: int, error_count: int) -> bool:
        """The interval passed or the error count changed (cheap: checked every duty cycle)."""
        return now_ns >= self._next_write_ns or error_count != self._written_errors

    def write(
        self, counters: ClusterCounters, errors: dict[str, int], now_ns: int, *, running: bool, stop_reason: str = ""
    ) -> None:
        """Replace the file with these values (``stop_reason``: why the node stops, on its way out). An
        OSError (a full disk) is raised after the next attempt was scheduled, so a failing disk costs
        one attempt per interval."""
        self._next_write_ns = now_ns + WRITE_INTERVAL_NS
        self._written_errors = counters.errors
        doc: dict[str, Any] = {"counters": counters.to_json(), "errors": errors, "pid": os.getpid(), "running": running}
        if stop_reason:
            doc["stop_reason"] = stop_reason
        text = json.dumps(doc, indent=1, sort_keys=True)
        if self._storage is not None:
            self._storage.replace(COUNTERS_FILE_NAME, text.encode(), sync=False)
        else:
            write_atomically(self.path, text)


def read_counters_file(member_dir: Path) -> CountersSnapshot:
    """Read ``<member_dir>/counters.json``; raises CountersFileError naming what was wrong."""
    path = Path(member_dir) / COUNTERS_FILE_NAME
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CountersFileError(f"{path} does not exist (the member never started a consensus module)") from None
    except (OSError, ValueError) as e:
        raise CountersFileError(f"cannot read {path}: {e}") from None
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("counters"), dict)
        or not isinstance(doc.get("errors"), dict)
    ):
        raise CountersFileError(f"{path} is not a counters file (no 'counters' and 'errors' objects)")
    try:
        counters = ClusterCounters.from_json(doc["counters"])
    except ValueError as e:
        raise CountersFileError(f"{path}: {e}") from None
    errors = {str(k): int(v) for k, v in doc["errors"].items()}
    return CountersSnapshot(
        counters, errors, int(doc.get("pid", -1)), bool(doc.get("running", False)), str(doc.get("stop_reason", ""))
    )
