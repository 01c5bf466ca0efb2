"""A Storage wrapper that injects the faults of a failing disk on a running member: writes that fail
with ENOSPC or EIO (optionally torn: a random prefix lands first), reads that fail with EIO; rules by
path prefix, counted or until cleared. Test apparatus: the simulator wraps every member's
MemoryStorage in one, and a real member's FileStorage is wrapped only under a test context
(:mod:`clusterlab.testing.node`), which LocalCluster gives its members."""

from __future__ import annotations

import errno
from dataclasses import dataclass
from random import Random

from clusterlab.core.archive.storage import Storage, StorageFile, StorageWrapper, storage_error


@dataclass(frozen=True, slots=True)
class WriteFault:
    """A rule of :class:`FaultyStorage`: writes to paths starting with ``path_prefix`` fail with
    ``code`` (ENOSPC, EIO). ``torn``: the failing write first lands a random prefix of its data, as a
    crash or a failing disk mid-write would. ``count``: how many writes fail (None = until cleared)."""

    code: int
    path_prefix: str = ""
    torn: bool = False
    count: int | None = None


class _FaultyFile:
    __slots__ = ("_inner", "_owner", "path")

    def __init__(self, owner: FaultyStorage, inner: StorageFile) -> None:
        self._owner = owner
        self._inner = inner
        self.path = inner.path

    def read(self, offset: int, length: int) -> bytes:
        self._owner._check(self.path, "read", reads=True)
        return self._inner.read(offset, length)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        if not self._owner.rules:
            self._inner.write(offset, data)  # no fault armed (nearly always): nothing to check
            return
        fault = self._owner._check(self.path, "write")
        if fault is not None and fault.torn and len(data) > 1:
            self._inner.write(offset, memoryview(data)[: self._owner.rng.randrange(1, len(data))])
        if fault is not None:
            raise storage_error(fault.code, f"write of {len(data)} bytes at {offset}", self._owner.describe(self.path))
        self._inner.write(offset, data)

    def truncate(self, length: int) -> None:
        # Shrinking frees space, so ENOSPC does not stop it; EIO does.
        fault = self._owner._check(self.path, "truncate", enospc_applies=length > self._inner.size())
        if fault is not None:
            raise storage_error(fault.code, f"truncate to {length}", self._owner.describe(self.path))
        self._inner.truncate(length)

    def size(self) -> int:
        return self._inner.size()

    def sync(self) -> None:
        fault = self._owner._check(self.path, "sync", enospc_applies=False)
        if fault is not None:
            raise storage_error(fault.code, "fsync", self._owner.describe(self.path))
        self._inner.sync()

    def close(self) -> None:
        self._inner.close()


class FaultyStorage(StorageWrapper):
    """A :class:`Storage` over another that fails or damages operations on command (TigerBeetle's
    storage fault injection). Faults are rules added with :meth:`fail_writes` and removed with
    :meth:`clear`; damage to data at rest (bit flips, a lost unflushed tail) is applied with the
    helpers in :mod:`clusterlab.testing.disk_faults`. Randomness comes only from ``rng``."""

    def __init__(self, inner: Storage, rng: Random | None = None) -> None:
        super().__init__(inner)
        self.rng = rng if rng is not None else Random(0)
        self.rules: list[WriteFault] = []
        self.read_error: WriteFault | None = None
        self.injected = 0  # operations failed so far

    # ------------------------------------------------------------------ configuration

    def fail_writes(self, code: int, path_prefix: str = "", *, torn: bool = False, count: int | None = None) -> None:
        """From now on writes (write, replace, growing truncate, create) under ``path_prefix`` fail with
        ``code`` (``errno.ENOSPC``: a full disk; ``errno.EIO``: a failing one, which also fails fsync)."""
        self.rules.append(WriteFault(code, path_prefix, torn, count))

    def fail_reads(self, path_prefix: str = "") -> None:
        """Reads under ``path_prefix`` fail with EIO (a latent sector error)."""
        self.read_error = WriteFault(errno.EIO, path_prefix)

    def clear(self) -> None:
        """Remove every fault rule (space freed, disk replaced)."""
        self.rules.clear()
        self.read_error = None

    def _check(self, path: str, op: str, *, reads: bool = False, enospc_applies: bool = True) -> WriteFault | None:
        if reads:
            rule = self.read_error
            if rule is not None and path.startswith(rule.path_prefix):
                self.injected += 1
                raise storage_error(rule.code, op, self.describe(path))
            return None
        for i, rule in enumerate(self.rules):
            if not path.startswith(rule.path_prefix):
                continue
            if rule.code == errno.ENOSPC and not enospc_applies:
                continue
            if rule.count is not None:
                if rule.count <= 1:
                    del self.rules[i]
                else:
                    self.rules[i] = WriteFault(rule.code, rule.path_prefix, rule.torn, rule.count - 1)
            self.injected += 1
            return rule
        return None

    # ------------------------------------------------------------------ Storage

    def open(self, path: str, *, create: bool = True) -> StorageFile:
        if create and not self.inner.exists(path):
            fault = self._check(path, "create")
            if fault is not None:
                raise storage_error(fault.code, "create", self.describe(path))
        return _FaultyFile(self, self.inner.open(path, create=create))

    def read_file(self, path: str) -> bytes:
        self._check(path, "read", reads=True)
        return self.inner.read_file(path)

    def replace(self, path: str, data: bytes, *, sync: bool) -> None:
        fault = self._check(path, "replace")
        if fault is not None:
            # The temp file was not (wholly) written: the rename never happens, the old file stays.
            raise storage_error(fault.code, f"replace with {len(data)} bytes", self.describe(path))
        self.inner.replace(path, data, sync=sync)

    def sync_dir(self, path: str) -> None:
        fault = self._check(path, "sync", enospc_applies=False)
        if fault is not None:
            raise storage_error(fault.code, "fsync directory", self.describe(path))
        self.inner.sync_dir(path)


def unwrap(storage: Storage) -> Storage:
    """The storage under any :class:`FaultyStorage` wrappers."""
    while isinstance(storage, FaultyStorage):
        storage = storage.inner
    return storage
