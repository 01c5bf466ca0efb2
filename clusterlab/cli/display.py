"""How the commands show what they do: results on stdout through :func:`stdout_console` (piped, it never
wraps a line, so a printed command or path can be copied and run as it is), and the progress of long
work (a simulator or real run, a sweep) on stderr through :class:`StatusDisplay`.

On a terminal the progress is a rich progress bar; without one (a pipe, CI, a log file) a plain line
every :data:`PLAIN_INTERVAL_S` seconds (``$CLUSTERLAB_PROGRESS_INTERVAL`` sets another) saying how far
the work is, whether or not anything changed: a silent command is one that may have hung."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from types import TracebackType
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

PLAIN_INTERVAL_S = 5.0
INTERVAL_ENV = "CLUSTERLAB_PROGRESS_INTERVAL"
# The width of piped output: no line is ever wrapped (rich's default without a terminal is 80 columns).
PIPED_WIDTH = 1_000_000


def stdout_console(min_width: int = 0, **options: Any) -> Console:
    """The console for a command's results on stdout: on a terminal rich's own (at least ``min_width``
    columns wide); piped, as wide as any line, with soft wrapping, so nothing it prints is cut in two."""
    console = Console(**options)
    if not console.is_terminal:
        return Console(width=PIPED_WIDTH, soft_wrap=True, **options)
    return Console(width=max(console.width, min_width), **options) if min_width else console


def plain_interval_s() -> float:
    """Seconds between two plain status lines: $CLUSTERLAB_PROGRESS_INTERVAL if a number > 0, else 5."""
    try:
        value = float(os.environ.get(INTERVAL_ENV, PLAIN_INTERVAL_S))
    except ValueError:
        return PLAIN_INTERVAL_S
    return value if math.isfinite(value) and value > 0 else PLAIN_INTERVAL_S


class StatusDisplay:
    """``with StatusDisplay("clusterlab run") as status: status.update(done, total, line)``: a progress
    bar on a terminal, else ``clusterlab run: LINE`` every few seconds; both on ``stream`` (stderr)."""

    def __init__(self, prog: str, stream: TextIO | None = None) -> None:
        self.prog = prog
        self.stream = stream if stream is not None else sys.stderr
        self.line = "starting"
        self.completed: float = 0.0
        self.total: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._started = time.monotonic()
        self.console = Console(file=self.stream, soft_wrap=True, highlight=False)

    def __enter__(self) -> StatusDisplay:
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.line, total=None)
        else:
            self._thread = threading.Thread(target=self._plain, name=f"{self.prog} progress", daemon=True)
            self._thread.start()
        return self

    def update(self, completed: float, total: float | None, line: str) -> None:
        """Where the work is: ``completed`` of ``total`` (None: unknown) and a one-line description."""
        with self._lock:
            self.completed, self.total, self.line = completed, total, line
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=completed, total=total, description=line)

    def note(self, message: str) -> None:
        """A line of its own (a failure found on the way), above the bar or between the status lines."""
        with self._lock:
            self.console.print(message, markup=False)

    def _plain(self) -> None:
        interval = plain_interval_s()
        while not self._stop.wait(interval):  # the display's period, not synchronisation
            self._print_line()

    def _print_line(self) -> None:
        with self._lock:
            elapsed = time.monotonic() - self._started
            print(f"{self.prog} [{elapsed:.0f} s]: {self.line}", file=self.stream, flush=True)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if kind is None:
                self._print_line()  # where it ended
