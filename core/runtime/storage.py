"""FileStorage: the :class:`~clusterlab.core.archive.storage.Storage` of real processes, on a directory.

Writes are unbuffered (``os.pwrite``), so what a store wrote survives a SIGKILL; ``sync`` is fsync.
This is the only place the durable stores touch the file system: the core gets a storage injected
(the node and service processes, LocalCluster's fault helpers and offline tools build this one; the
simulator uses MemoryStorage).
"""

from __future__ import annotations

import os
from pathlib import Path

from clusterlab.core.archive.storage import StorageFile
from clusterlab.core.atomic import write_atomically


class _File:
    __slots__ = ("_fd", "path", "real_path")

    def __init__(self, path: str, real_path: Path, create: bool) -> None:
        self.path = path
        self.real_path = real_path
        self._fd: int | None = os.open(real_path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)

    def _require(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.real_path} is closed")
        return self._fd

    def read(self, offset: int, length: int) -> bytes:
        fd = self._require()
        parts: list[bytes] = []
        got = 0
        while got < length:
            chunk = os.pread(fd, length - got, offset + got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        fd = self._require()
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], offset + written)

    def truncate(self, length: int) -> None:
        os.ftruncate(self._require(), length)

    def size(self) -> int:
        return os.fstat(self._require()).st_size

    def sync(self) -> None:
        os.fsync(self._require())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class FileStorage:
    """A storage rooted at ``root`` (a member's directory); storage paths are relative to it."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"FileStorage({str(self.root)!r})"

    def _real(self, path: str) -> Path:
        return self.root / path if path else self.root

    def open(self, path: str, *, create: bool = True) -> StorageFile:
        return _File(path, self._real(path), create)

    def read_file(self, path: str) -> bytes:
        return self._real(path).read_bytes()

    def replace(self, path: str, data: bytes, *, sync: bool) -> None:
        # The one atomic-write helper: a failed write (ENOSPC) leaves the old file and no temp.
        write_atomically(self._real(path), data, file_sync=sync)

    def exists(self, path: str) -> bool:
        return self._real(path).exists()

    def size(self, path: str) -> int:
        return self._real(path).stat().st_size

    def list_dir(self, path: str) -> list[str]:
        real = self._real(path)
        if not real.is_dir():
            return []
        return sorted(e.name for e in real.iterdir() if e.is_file())

    def remove(self, path: str, *, missing_ok: bool = False) -> None:
        self._real(path).unlink(missing_ok=missing_ok)

    def make_dirs(self, path: str) -> None:
        self._real(path).mkdir(parents=True, exist_ok=True)

    def sync_dir(self, path: str) -> None:
        self._fsync_dir(self._real(path))

    def describe(self, path: str) -> str:
        return str(self._real(path))

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
