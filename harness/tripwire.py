"""Tripwires: what a user's service must not do inside a callback, reported with the line that did it.

A service is a deterministic state machine: inside ``on_session_message``, ``on_timer_event``,
``on_take_snapshot``, ``on_start``, ``on_role_change`` and the other callbacks it may depend only on
what the callback gives it. :class:`Tripwire` is the agent's callback scope
(``clusterlab.core.service.api.CallbackScope``): while a callback runs, in that thread only, a
profile function (``sys.setprofile``, per thread) watches what the service calls and reports

* a wall-clock read: ``time.time``/``time_ns``/``monotonic``/``perf_counter`` (and their ``_ns``),
  ``datetime.now``/``utcnow``/``today``, ``date.today``; a CPU clock read: ``time.process_time``,
  ``time.thread_time`` (and their ``_ns``);
* the module-level ``random`` (the global ``Random``'s functions; a seeded ``random.Random(x)`` is fine);
* ``os.urandom``, ``uuid.uuid1``/``uuid4``, anything of ``secrets``;
* a thread started (``threading.Thread.start``);
* ``Cluster.role`` read (or ``on_role_change`` entered) and the state digest changed after it, before
  the callback returned.

Each finding names the first frame of the stack outside clusterlab and the standard library: the
user's file, line and function. A finding is reported once per (callback, kind, line) for one
service instance, through ``report(log_position, detail)``; the harness makes it a ``tripwire`` event
and the ``tripwire`` check fails the run on it (clusterlab.chaos.checks.state).

Outside a callback nothing is watched (the harness's own clock, recorder, digests and snapshot
writer run unobserved), and without a scope the agent calls nothing: production pays nothing.
"""

from __future__ import annotations

import datetime
import os
import random
import secrets
import sys
import sysconfig
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import clusterlab

# Finding kinds, as the message says them.
WALL_CLOCK = "read the wall clock"
GLOBAL_RANDOM = "used the module-level random"
OS_RANDOMNESS = "read OS randomness"
THREAD = "started a thread"
CPU_CLOCK = "read a CPU clock"
ROLE_STATE = "read cluster.role and then changed its state"

_C_FUNCTIONS: dict[int, tuple[str, str]] = {
    id(f): (kind, name)
    for f, kind, name in (
        (time.time, WALL_CLOCK, "time.time"),
        (time.time_ns, WALL_CLOCK, "time.time_ns"),
        (time.monotonic, WALL_CLOCK, "time.monotonic"),
        (time.monotonic_ns, WALL_CLOCK, "time.monotonic_ns"),
        (time.perf_counter, WALL_CLOCK, "time.perf_counter"),
        (time.perf_counter_ns, WALL_CLOCK, "time.perf_counter_ns"),
        (time.process_time, CPU_CLOCK, "time.process_time"),
        (time.process_time_ns, CPU_CLOCK, "time.process_time_ns"),
        (time.thread_time, CPU_CLOCK, "time.thread_time"),
        (time.thread_time_ns, CPU_CLOCK, "time.thread_time_ns"),
        (os.urandom, OS_RANDOMNESS, "os.urandom"),
    )
}
_DATETIME_NOW = frozenset({"now", "utcnow", "today"})
_PY_FUNCTIONS: dict[object, tuple[str, str]] = {
    uuid.uuid1.__code__: (OS_RANDOMNESS, "uuid.uuid1"),
    uuid.uuid4.__code__: (OS_RANDOMNESS, "uuid.uuid4"),
    threading.Thread.start.__code__: (THREAD, "threading.Thread.start"),
}
_RANDOM_CODES = frozenset(
    f.__code__ for f in vars(random.Random).values() if callable(f) and hasattr(f, "__code__")
) | frozenset(f.__code__ for f in vars(random.SystemRandom).values() if callable(f) and hasattr(f, "__code__"))
_GLOBAL_RANDOM: Any = getattr(random, "_inst", None)
_SECRETS_FILE = secrets.__file__


def _internal_prefixes() -> tuple[str, ...]:
    """Directories whose frames are not the user's: clusterlab's packages and the standard library."""
    dirs = {str(Path(p).resolve()) for p in clusterlab.__path__}
    for sub in clusterlab.LAYERS:
        module = sys.modules.get(f"clusterlab.{sub}")
        if module is not None:
            dirs.update(str(Path(p).resolve()) for p in module.__path__)
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib"):
        dirs.add(str(Path(paths[key]).resolve()))
    dirs.add(str(Path(os.__file__).resolve().parent))
    return tuple(d + os.sep for d in sorted(dirs))


def user_frame(frame: FrameType | None, internal: tuple[str, ...]) -> FrameType | None:
    """The first frame from ``frame`` outwards whose file is not in ``internal`` (nor frozen)."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(internal) and not filename.startswith("<"):
            return frame
        frame = frame.f_back
    return None


def short_path(filename: str) -> str:
    """``filename`` relative to the import root it was loaded from (``ledger/planted.py``)."""
    best = filename
    for entry in sys.path:
        root = str(Path(entry or ".").resolve()) + os.sep
        if filename.startswith(root) and len(filename) - len(root) < len(best):
            best = filename[len(root) :]
    return best


def user_site(error: BaseException) -> str | None:
    """``FILE:LINE in FUNCTION`` of the innermost frame of the user's code (outside clusterlab and the
    standard library) in ``error``'s traceback: where a user's service, workload or model raised it;
    None when no frame of it is the user's."""
    internal = _internal_prefixes()
    site = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        filename = frame.f_code.co_filename
        if not filename.startswith(internal) and not filename.startswith("<"):
            site = f"{short_path(filename)}:{line} in {frame.f_code.co_qualname}"
    return site


class Tripwire:
    """The callback scope of one service instance (one agent): see the module docstring."""

    def __init__(
        self,
        member_id: int,
        service_id: int,
        state_digest: Callable[[], bytes],
        report: Callable[[int, dict[str, Any]], None],
    ) -> None:
        self.member_id = member_id
        self.service_id = service_id
        self._state_digest = state_digest
        self._report = report
        self._internal = _internal_prefixes()
        self._thread: int | None = None  # the thread a callback runs in, while it runs
        self._callback = ""
        self._log_position = 0
        self._previous_profile: Any = None
        self._busy = False  # set while the tripwire itself calls the service (its state digest)
        self._role_site: tuple[str, int, str] | None = None
        self._role_digest: bytes | None = None
        self._role_pending = False
        self.reported: set[tuple[str, str, str, int]] = set()
        self.findings: list[dict[str, Any]] = []

    # --- the agent's CallbackScope ------------------------------------------------------------------

    def enter(self, callback: str, log_position: int) -> None:
        self._callback = callback
        self._log_position = log_position
        self._role_site = None
        self._role_digest = None
        self._role_pending = False
        if callback == "on_role_change":  # the callback's argument is the role
            self._role_digest = self._digest()
            self._role_pending = self._role_digest is not None  # the site: the user's first frame (_profile)
        self._thread = threading.get_ident()
        self._previous_profile = sys.getprofile()
        sys.setprofile(self._profile)

    def exit(self) -> None:
        sys.setprofile(self._previous_profile)
        self._previous_profile = None
        self._thread = None
        if self._role_digest is not None and self._role_site is not None:
            after = self._digest()
            if after != self._role_digest:
                self._found(ROLE_STATE, "cluster.role", self._role_site)
        self._role_site = None
        self._role_digest = None

    def role_read(self) -> None:
        if self._thread != threading.get_ident() or self._busy or self._role_digest is not None:
            return
        frame = user_frame(sys._getframe(1), self._internal)
        if frame is None:
            return
        self._role_site = (short_path(frame.f_code.co_filename), frame.f_lineno, frame.f_code.co_qualname)
        self._role_digest = self._digest()

    # --- watching -----------------------------------------------------------------------------------

    def _digest(self) -> bytes | None:
        """The service's state digest, unobserved; None if it cannot give one yet (before on_start)."""
        self._busy = True
        try:
            return bytes(self._state_digest())
        except Exception:
            return None
        finally:
            self._busy = False

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if self._busy:
            return
        if event == "c_call":
            found = self._c_call(arg)
            if found is not None:
                self._at_user_frame(frame, found)
        elif event == "call":
            if self._role_pending and user_frame(frame, self._internal) is frame:
                self._role_pending = False
                code = frame.f_code
                self._role_site = (short_path(code.co_filename), code.co_firstlineno, code.co_qualname)
            found = self._py_call(frame)
            if found is not None:
                self._at_user_frame(frame.f_back, found)

    def _c_call(self, function: Any) -> tuple[str, str] | None:
        found = _C_FUNCTIONS.get(id(function))
        if found is not None:
            return found
        owner = getattr(function, "__self__", None)
        if owner is None:
            return None
        name = getattr(function, "__name__", "")
        if owner is _GLOBAL_RANDOM:
            return GLOBAL_RANDOM, f"random.{name}"
        if isinstance(owner, random.SystemRandom):
            return OS_RANDOMNESS, f"random.SystemRandom.{name}"
        if isinstance(owner, type) and issubclass(owner, datetime.date) and name in _DATETIME_NOW:
            return WALL_CLOCK, f"{owner.__name__}.{name}"
        return None

    def _py_call(self, frame: FrameType) -> tuple[str, str] | None:
        code = frame.f_code
        found = _PY_FUNCTIONS.get(code)
        if found is not None:
            return found
        if code.co_filename == _SECRETS_FILE:
            return OS_RANDOMNESS, f"secrets.{code.co_name}"
        if code in _RANDOM_CODES:
            owner = frame.f_locals.get("self")
            if owner is _GLOBAL_RANDOM:
                return GLOBAL_RANDOM, f"random.{code.co_name}"
            if isinstance(owner, random.SystemRandom):
                return OS_RANDOMNESS, f"random.SystemRandom.{code.co_name}"
        return None

    def _at_user_frame(self, frame: FrameType | None, found: tuple[str, str]) -> None:
        user = user_frame(frame, self._internal)
        if user is None:  # clusterlab's own code (a sample service, the agent): not the user's
            return
        site = (short_path(user.f_code.co_filename), user.f_lineno, user.f_code.co_qualname)
        self._found(found[0], found[1], site)

    def _found(self, kind: str, call: str, site: tuple[str, int, str]) -> None:
        path, line, function = site
        key = (self._callback, kind, path, line)  # the outermost call first: the inner ones of it not again
        if key in self.reported:
            return
        self.reported.add(key)
        message = (
            f"member {self.member_id} service {self.service_id} {self._callback} {kind} at {path}:{line} "
            f"in {function} ({call}) at log position {self._log_position}"
        )
        detail = {
            "message": message,
            "callback": self._callback,
            "finding": kind,
            "call": call,
            "file": path,
            "line": line,
            "function": function,
            "service_id": self.service_id,
        }
        self.findings.append(detail)
        self._busy = True
        try:
            self._report(self._log_position, detail)
        finally:
            self._busy = False


def watchable(service: str) -> bool:
    """Whether a tripwire on ``service`` (a name or ``package.module:factory``) could find anything: a
    finding names a frame outside clusterlab, so a service whose code is all clusterlab's own (the
    sample services, ``clusterlab.…:factory``) is not watched and pays nothing for it."""
    return ":" in service and service.partition(":")[0].split(".")[0] != "clusterlab"


def process_tripwire(member_id: int, service_id: int, service: Any, rec: Any) -> Tripwire:
    """The tripwire of a member's service process (clusterlab.core.runtime.service, with
    ``CLUSTERLAB_TRIPWIRE=1``): findings become ``tripwire`` events of the process's recorder."""

    def report(log_position: int, detail: dict[str, Any]) -> None:
        rec.event("tripwire", member_id, None, log_position, detail)

    return Tripwire(member_id, service_id, service.state_digest, report)
