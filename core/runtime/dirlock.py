"""One owner per cluster directory: an ``fcntl.flock`` on ``<dir>/cluster.lock``.

The owner (``cluster start``, LocalCluster) takes the lock before it reads or writes anything in
the directory and hands the locked file to every member process it starts (an inherited file
descriptor shares the lock), so the directory stays locked while any of its processes runs, even
if the owner itself was killed. A second start fails at once, naming the owner's PID and how to
stop it. Each member process also locks its own ``member-<i>/<node|service>.lock`` (two nodes of
one member never run together). The kernel releases a flock when the last holder exits, SIGKILL
included, so a directory left behind by a killed cluster starts again normally.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from clusterlab.core.runtime.config import ConfigError

LOCK_FILE_NAME = "cluster.lock"


class DirectoryLockError(ConfigError):
    """The directory (or member) is locked by another live process."""


def _owner_of(fd: int) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        os.lseek(fd, 0, os.SEEK_SET)
        raw = json.loads(os.read(fd, 65536).decode() or "{}")
        if isinstance(raw, dict):
            return raw
    return {}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DirectoryLock:
    """A held flock on a lock file; :meth:`release` (or process exit) gives it up."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def acquire(cls, path: Path, what: str, *, stop_hint: str | None = None) -> DirectoryLock:
        """Lock ``path`` (created 0600) without waiting, recording this process as its owner; raise
        DirectoryLockError naming the current owner if another process holds it."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _owner_of(fd)
            os.close(fd)
            raise DirectoryLockError(_refusal(path, what, owner)) from None
        except OSError:
            os.close(fd)
            raise
        pid = os.getpid()
        owner = {
            "pid": pid,
            "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python",
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "stop": stop_hint or f"kill {pid}",
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(owner) + "\n").encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        """Give the lock up (idempotent). Processes that inherited the descriptor keep it locked."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        # An owner dropped without release() (a constructor that raised): free the directory.
        self.release()


def _refusal(path: Path, what: str, owner: dict[str, Any]) -> str:
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return f"{what} is in use: {path} is locked by another process"
    command = owner.get("command", "?")
    if _pid_alive(pid):
        stop = owner.get("stop") or f"kill {pid}"
        return f"{what} is in use by PID {pid} ({command}); stop it first with: {stop}"
    # The owner is gone but a process it started still holds the inherited lock.
    return (
        f"{what} is in use: its owner PID {pid} ({command}) has exited but processes it started still "
        f"run (see processes.json beside {path.name}); stop them by PID first"
    )


def lock_cluster_directory(directory: Path) -> DirectoryLock:
    """The owner's lock on a cluster directory (created if missing, 0700)."""
    directory.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    return DirectoryLock.acquire(
        directory / LOCK_FILE_NAME,
        f"cluster directory {directory}",
        stop_hint=f"kill {pid}  (SIGTERM: a clean stop, as Ctrl-C in its terminal)",
    )


def service_lock_kind(service_id: int) -> str:
    """The lock kind of a member's service ``service_id`` (``service``, ``service-1``, ...)."""
    return "service" if service_id == 0 else f"service-{service_id}"


def hold_member_lock(member_dir: Path, kind: str, member_id: int) -> DirectoryLock:
    """A member process's own lock (``member-<i>/<kind>.lock``): one node and one service per member."""
    member_dir.mkdir(parents=True, exist_ok=True)
    return DirectoryLock.acquire(member_dir / f"{kind}.lock", f"member {member_id}'s {kind} ({member_dir})")
