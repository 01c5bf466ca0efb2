"""The Storage interface: everything in core that keeps durable state goes through one of these.

etcd's raft has a ``Storage`` interface and TigerBeetle a storage with injected faults; ours is the
small set of file operations the archive (segments, catalogue, snapshots), the recording log and the
node-state file need. Paths are ``/``-separated strings relative to the storage's root (one member's
directory); ``""`` is the root. Errors are ``OSError`` with the errno a disk would give (ENOENT,
ENOSPC, EIO), so callers handle a real disk and an injected fault the same way.

Two levels of "written", as on a real OS:

- *written*: :meth:`StorageFile.write` returned. The data is in the OS; a process crash (SIGKILL)
  keeps it. Every store writes unbuffered, so a killed member loses nothing it appended.
- *durable*: :meth:`StorageFile.sync` (or ``replace(..., sync=True)``) returned. Only this survives
  a power loss (:meth:`MemoryStorage.power_loss`), which drops everything written since.

Implementations: :class:`MemoryStorage` here (sans-IO: no directories, no syscalls; the simulator's),
``clusterlab.core.runtime.storage.FileStorage`` (real files and fsync; the real runtime's). The test
apparatus wraps either in ``clusterlab.testing.faulty_storage.FaultyStorage``, which injects torn
writes, ENOSPC/EIO, bit flips and lost unflushed writes. :class:`ObservedStorage` wraps any of them
and reports each change once it is made (how a stepped member's storage changes become effects).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


def join(*parts: str) -> str:
    """Join storage path parts with ``/``, skipping empty ones."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def parent(path: str) -> str:
    """The directory part of a storage path (``""`` for a name at the root)."""
    return path.rsplit("/", 1)[0] if "/" in path else ""


def storage_error(code: int, what: str, path: str) -> OSError:
    """An ``OSError`` with ``code`` naming the operation and the path, as the OS would raise it."""
    return OSError(code, what, path)


@runtime_checkable
class StorageFile(Protocol):
    """An open file: positional reads and writes (``pread``/``pwrite`` semantics)."""

    @property
    def path(self) -> str: ...

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset`` (short at the end of the file)."""
        ...

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write all of ``data`` at ``offset`` (extending the file), or raise OSError."""
        ...

    def truncate(self, length: int) -> None: ...

    def size(self) -> int: ...

    def sync(self) -> None:
        """Make everything written so far durable (fsync)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Storage(Protocol):
    """One member's durable storage; see the module docstring."""

    def open(self, path: str, *, create: bool = True) -> StorageFile:
        """Open ``path`` for reading and writing (creating an empty file if ``create``; else
        FileNotFoundError when it does not exist). The parent directory must exist."""
        ...

    def read_file(self, path: str) -> bytes:
        """The whole content of ``path``; FileNotFoundError if missing."""
        ...

    def replace(self, path: str, data: bytes, *, sync: bool) -> None:
        """Atomically replace ``path`` with ``data`` (temp file + rename): a crash leaves the old
        content or the new, never a mix. With ``sync`` the new content is durable on return."""
        ...

    def exists(self, path: str) -> bool: ...

    def size(self, path: str) -> int:
        """The length of the file ``path``; FileNotFoundError if missing."""
        ...

    def list_dir(self, path: str) -> list[str]:
        """Sorted names of the files directly in directory ``path`` ([] if it does not exist)."""
        ...

    def remove(self, path: str, *, missing_ok: bool = False) -> None: ...

    def make_dirs(self, path: str) -> None:
        """Create directory ``path`` and its parents (no-op if it exists)."""
        ...

    def sync_dir(self, path: str) -> None:
        """Make the directory's entries (created, renamed, removed files) durable."""
        ...

    def describe(self, path: str) -> str:
        """``path`` as a human reads it in an error message (the real file path for files)."""
        ...


# --------------------------------------------------------------------------------------------- memory


@dataclass(slots=True)
class _MemNode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes | None = None  # content a power loss returns to; None = the file would vanish


class _MemFile:
    """An open :class:`MemoryStorage` file; writes land in the shared node (the "page cache")."""

    __slots__ = ("_closed", "_node", "_storage", "path")

    def __init__(self, storage: MemoryStorage, path: str, node: _MemNode) -> None:
        self._storage = storage
        self.path = path
        self._node = node
        self._closed = False

    def _live(self) -> _MemNode:
        if self._closed:
            raise ValueError(f"{self._storage.describe(self.path)} is closed")
        # A removed (or power-lost and re-created) file keeps its node, as an unlinked inode would.
        return self._node

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self._live().data[offset : offset + length])

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        buf = self._live().data
        if offset == len(buf):
            buf += data  # an append (the log's every write): no slice assignment
            return
        end = offset + len(data)
        if offset > len(buf):
            buf.extend(bytes(offset - len(buf)))
        buf[offset:end] = data

    def truncate(self, length: int) -> None:
        buf = self._live().data
        if length < len(buf):
            del buf[length:]
        else:
            buf.extend(bytes(length - len(buf)))

    def size(self) -> int:
        return len(self._live().data)

    def sync(self) -> None:
        node = self._live()
        node.durable = bytes(node.data)

    def close(self) -> None:
        self._closed = True


class MemoryStorage:
    """Files in a dict: no directories on disk, no syscalls (sans-IO). Outlives the member object that
    uses it, so a simulated member restarts from what it wrote; :meth:`power_loss` drops what was
    never synced. Directories exist implicitly (``make_dirs`` only records them)."""

    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self._files: dict[str, _MemNode] = {}
        self._dirs: set[str] = {""}

    def open(self, path: str, *, create: bool = True) -> StorageFile:
        node = self._files.get(path)
        if node is None:
            if not create:
                raise storage_error(errno.ENOENT, "no such file", self.describe(path))
            if parent(path) not in self._dirs:
                raise storage_error(errno.ENOENT, "no such directory", self.describe(parent(path)))
            node = self._files[path] = _MemNode()
        return _MemFile(self, path, node)

    def read_file(self, path: str) -> bytes:
        node = self._files.get(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", self.describe(path))
        return bytes(node.data)

    def replace(self, path: str, data: bytes, *, sync: bool) -> None:
        if parent(path) not in self._dirs:
            raise storage_error(errno.ENOENT, "no such directory", self.describe(parent(path)))
        old = self._files.get(path)
        # Without sync the rename is not durable yet: a power loss brings back the old durable content.
        durable = bytes(data) if sync else (old.durable if old is not None else None)
        self._files[path] = _MemNode(bytearray(data), durable)

    def exists(self, path: str) -> bool:
        return path in self._files or path in self._dirs

    def size(self, path: str) -> int:
        node = self._files.get(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", self.describe(path))
        return len(node.data)

    def list_dir(self, path: str) -> list[str]:
        prefix = f"{path}/" if path else ""
        return sorted(p[len(prefix) :] for p in self._files if p.startswith(prefix) and "/" not in p[len(prefix) :])

    def remove(self, path: str, *, missing_ok: bool = False) -> None:
        if self._files.pop(path, None) is None and not missing_ok:
            raise FileNotFoundError(errno.ENOENT, "no such file", self.describe(path))

    def make_dirs(self, path: str) -> None:
        while path not in self._dirs:
            self._dirs.add(path)
            path = parent(path)

    def sync_dir(self, path: str) -> None:
        """Directory entries are durable at once here (only file contents model the page cache)."""

    def describe(self, path: str) -> str:
        return f"{self.name}:{path}"

    # ------------------------------------------------------------------ for the simulator and faults

    def copy_from(self, other: MemoryStorage) -> None:
        """Replace everything with a copy of ``other``'s files and directories (a restore from a backup);
        the copies are durable."""
        self.wipe()
        self._dirs = set(other._dirs)
        for path, node in other._files.items():
            self._files[path] = _MemNode(bytearray(node.data), bytes(node.data))

    def wipe(self) -> None:
        """Remove everything (a replaced disk)."""
        self._files.clear()
        self._dirs = {""}

    def power_loss(self) -> list[str]:
        """Every file goes back to its last synced content; files never synced vanish. Returns the
        paths that lost data."""
        lost = []
        for path, node in list(self._files.items()):
            if node.durable is None:
                del self._files[path]
                lost.append(path)
            elif node.durable != node.data:
                node.data = bytearray(node.durable)
                lost.append(path)
        return lost

    def unsynced_floor(self, path: str) -> int:
        """The length below which ``path`` holds only synced bytes (its synced prefix)."""
        node = self._files[path]
        if node.durable is None:
            return 0
        n = min(len(node.durable), len(node.data))
        return n if node.data[:n] == node.durable[:n] else 0

    def total_bytes(self) -> int:
        """Bytes held in all files (for reports)."""
        return sum(len(n.data) for n in self._files.values())


# ------------------------------------------------------------------------------------------- observed


@dataclass(frozen=True, slots=True)
class StorageChange:
    """One change a caller made to a storage, as :class:`ObservedStorage` reports it.

    ``op`` is ``create`` (an empty file), ``write`` (``length`` bytes at ``offset``), ``truncate``
    (to ``length``), ``sync``, ``replace`` (the whole file, ``length`` bytes; ``synced``: durable on
    return), ``remove``, ``make_dirs`` or ``sync_dir``. Only the shape of a change is kept, never its bytes."""

    op: str
    path: str
    offset: int = 0
    length: int = 0
    synced: bool = False


_Observer = Callable[[StorageChange], None]


class _ObservedFile:
    __slots__ = ("_inner", "_observe", "path")

    def __init__(self, inner: StorageFile, observe: _Observer) -> None:
        self._inner = inner
        self._observe = observe
        self.path = inner.path

    def read(self, offset: int, length: int) -> bytes:
        return self._inner.read(offset, length)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        self._inner.write(offset, data)
        self._observe(StorageChange("write", self.path, offset, len(data)))

    def truncate(self, length: int) -> None:
        self._inner.truncate(length)
        self._observe(StorageChange("truncate", self.path, length=length))

    def size(self) -> int:
        return self._inner.size()

    def sync(self) -> None:
        self._inner.sync()
        self._observe(StorageChange("sync", self.path, synced=True))

    def close(self) -> None:
        self._inner.close()


class StorageWrapper:
    """A :class:`Storage` that hands every operation to ``inner``: the base of a wrapper that changes
    a few (:class:`ObservedStorage` here, the test apparatus's FaultyStorage)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    def open(self, path: str, *, create: bool = True) -> StorageFile:
        return self.inner.open(path, create=create)

    def read_file(self, path: str) -> bytes:
        return self.inner.read_file(path)

    def replace(self, path: str, data: bytes, *, sync: bool) -> None:
        self.inner.replace(path, data, sync=sync)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def size(self, path: str) -> int:
        return self.inner.size(path)

    def list_dir(self, path: str) -> list[str]:
        return self.inner.list_dir(path)

    def remove(self, path: str, *, missing_ok: bool = False) -> None:
        self.inner.remove(path, missing_ok=missing_ok)

    def make_dirs(self, path: str) -> None:
        self.inner.make_dirs(path)

    def sync_dir(self, path: str) -> None:
        self.inner.sync_dir(path)

    def describe(self, path: str) -> str:
        return self.inner.describe(path)


class ObservedStorage(StorageWrapper):
    """A :class:`Storage` that does every operation on ``inner`` and, once it has succeeded, reports
    each change (write, truncate, sync, replace, remove, directory) to ``observe`` in the order made.

    This is how a step's storage changes become effects a caller can read beside its messages
    (clusterlab.core.consensus.effects): the change is already made when it is reported, so a change
    reported before a send was on the storage before the send left. A failed operation raises as
    ``inner`` raised and is not reported."""

    def __init__(self, inner: Storage, observe: _Observer) -> None:
        super().__init__(inner)
        self._observe = observe

    def open(self, path: str, *, create: bool = True) -> StorageFile:
        created = create and not self.inner.exists(path)
        file = _ObservedFile(self.inner.open(path, create=create), self._observe)
        if created:
            self._observe(StorageChange("create", path))
        return file

    def replace(self, path: str, data: bytes, *, sync: bool) -> None:
        self.inner.replace(path, data, sync=sync)
        self._observe(StorageChange("replace", path, length=len(data), synced=sync))

    def remove(self, path: str, *, missing_ok: bool = False) -> None:
        existed = self.inner.exists(path)
        self.inner.remove(path, missing_ok=missing_ok)
        if existed:
            self._observe(StorageChange("remove", path))

    def make_dirs(self, path: str) -> None:
        existed = self.inner.exists(path)
        self.inner.make_dirs(path)
        if not existed:
            self._observe(StorageChange("make_dirs", path))

    def sync_dir(self, path: str) -> None:
        self.inner.sync_dir(path)
        self._observe(StorageChange("sync_dir", path, synced=True))
