"""Atomic file replacement, the one helper every durable or shared file is written through.

The new content goes to ``<name>.tmp`` beside the file, then ``os.replace`` swaps it in: readers, and
a process killed at any point, see the old file or the new one, never half of each. With
``file_sync`` the temp file is fsynced before the rename and the directory after it, so the new
content survives a power cut too (Aeron's file sync level). One writer per path: the temp name is
fixed so that whoever opens the file next can find and drop an unfinished update (``temp_path``).

It sits directly in clusterlab.core, below every layer, and imports nothing of the project.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def temp_path(path: Path | str) -> Path:
    """Where :func:`write_atomically` stages the new content of ``path`` (``<name>.tmp``)."""
    path = Path(path)
    return path.with_name(path.name + ".tmp")


def write_atomically(path: Path | str, data: bytes | str | Iterable[bytes], *, file_sync: bool = False) -> None:
    """Replace ``path`` with ``data`` (bytes, text as UTF-8, or byte parts written in order); on an
    error the temp file is removed and the old file stays as it was."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    parts: Iterable[bytes] = [data] if isinstance(data, bytes) else data
    tmp = temp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for part in parts:
                view = memoryview(part)
                while view:
                    view = view[os.write(fd, view) :]
            if file_sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if file_sync:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
