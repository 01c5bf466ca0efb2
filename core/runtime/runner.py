"""The duty cycle of a clusterlab process, and its log.

One loop per process (Aeron's AgentRunner with an idle strategy that is a poll)::

    poll every socket with timeout = next deadline - now   (never a busy spin)
    for each readable socket: read everything queued, up to a batch limit
    do_work(now)                                           (timers, resends, log consumption)

so a batch of messages is handled before ``do_work`` runs once, and an idle process sleeps in
``poll`` until a message or its next deadline (an idle cluster costs ~0% CPU). When ``do_work``
did nothing although its deadline has passed, the next poll waits 1 ms instead of spinning.

A member in one process (clusterlab.core.runtime.member) also has in-process queues
(:class:`InProcessLink`, registered with ``register_queue``): after the sockets' handlers, the
handler of every non-empty queue runs, and while a queue holds messages the poll does not wait
(timeout 0), so nothing queued in the process waits for a socket or a deadline.

SIGTERM and SIGINT request a stop; the signal also writes to a wake-up pipe the poller watches,
so the loop ends at once, and the process closes cleanly (module closed, files flushed; in a service
process the agent closed, which tells the service ``on_terminate``) and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import os
import platform
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

import zmq
from clusterlab.core.runtime.clock import Clock

MAX_IDLE_MS = 1000  # longest single poll; nothing relies on it, it only bounds a lost wake-up
BATCH_LIMIT = 1024  # messages read from one socket before others get a turn
NO_PROGRESS_WAIT_MS = 1

Handler = Callable[[int], int]  # (now_ns) -> messages handled


class ProcessLog:
    """Timestamped lines to a stream (stdout, which the harness sends to the member's log file).

    Rate-limited (a flood of garbage must not fill the disk): at most ``burst`` lines at once and
    ``rate_per_s`` lines per second afterwards; what is suppressed is counted and reported."""

    def __init__(self, name: str, stream: TextIO | None = None, rate_per_s: float = 200.0, burst: int = 1000) -> None:
        self.name = name
        self._stream = stream if stream is not None else sys.stdout
        self._rate = rate_per_s
        self._burst = float(burst)
        self._tokens = float(burst)
        self._last = time.monotonic()
        self.suppressed = 0

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens < 1:
            self.suppressed += 1
            return
        self._tokens -= 1
        stamp = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
        if self.suppressed:
            self._write(f"{stamp} {self.name} ({self.suppressed} log lines suppressed)")
            self.suppressed = 0
        self._write(f"{stamp} {self.name} {line}")

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text + "\n")
            self._stream.flush()
        except (OSError, ValueError):
            pass  # a closed or full log must not stop the member


# A member allocates a few tracked objects per log entry (frames, tuples, replies) and keeps many
# (the log's tail cache): collect the young generation every 100 000 allocations instead of 700,
# and never rescan what exists once the process is set up (gc.freeze).
GC_THRESHOLDS = (100_000, 50, 100)


def tune_gc() -> None:
    """The member processes' garbage-collector and allocator settings (GC_THRESHOLDS, MALLOPT)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    tune_malloc()


# glibc's malloc gives freed memory back to the OS as soon as 128 KiB are free at the top of the heap
# (and maps and unmaps blocks of 128 KiB or more): a member that receives, copies and frees 64 KiB
# blocks all the time then touches fresh pages again and again, and each first touch is a page fault
# (~1-3 µs on a VM; half a fault per 1 KiB op in a service process). A member keeps up to
# M_TRIM_THRESHOLD of freed heap for reuse instead, and maps only blocks of M_MMAP_THRESHOLD or more.
# (mallopt's parameter numbers from glibc's malloc.h.)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MALLOPT = ((M_TRIM_THRESHOLD, 64 * 1024 * 1024), (M_TOP_PAD, 16 * 1024 * 1024), (M_MMAP_THRESHOLD, 32 * 1024 * 1024))


def tune_malloc() -> bool:
    """Apply MALLOPT where the C library is glibc; returns whether it was applied (elsewhere: no-op)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return all(mallopt(param, value) == 1 for param, value in MALLOPT)


class DutyCycle:
    """Owns the poller and the stop flag of one process; see the module docstring."""

    def __init__(self, clock: Clock, log: ProcessLog) -> None:
        self.clock = clock
        self.log = log
        self.poller = zmq.Poller()
        self._handlers: dict[Any, Handler] = {}
        self.stop_requested = False
        self.stop_reason = ""
        self.exit_code = 0
        self.cycles = 0
        self._queues: list[tuple[deque[bytes], Handler]] = []  # in-process queues, in handling order
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.poller.register(self._wake_r, zmq.POLLIN)

    def register(self, sock: Any, handler: Handler) -> None:
        self._handlers[sock] = handler
        self.poller.register(sock, zmq.POLLIN)

    def unregister(self, sock: Any) -> None:
        if self._handlers.pop(sock, None) is not None:
            self.poller.unregister(sock)

    def register_queue(self, queue: deque[bytes], handler: Handler, *, first: bool = False) -> None:
        """An in-process queue: ``handler`` runs in every cycle in which ``queue`` is not empty, and
        the poll does not wait while it holds messages. ``first``: before the queues registered
        earlier (a consumer whose output feeds another queue goes first, so that output is handled
        in the same cycle)."""
        entry = (queue, handler)
        if first:
            self._queues.insert(0, entry)
        else:
            self._queues.append(entry)

    def unregister_queue(self, queue: deque[bytes]) -> None:
        self._queues[:] = [(q, h) for q, h in self._queues if q is not queue]

    def pending(self) -> bool:
        """An in-process queue holds messages: the next poll must not wait."""
        return any(queue for queue, _handler in self._queues)

    def request_stop(self, reason: str, exit_code: int = 0) -> None:
        if not self.stop_requested:
            self.stop_requested = True
            self.stop_reason = reason
            self.exit_code = exit_code
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def install_signal_handlers(self) -> None:
        def on_signal(signum: int, _frame: object) -> None:
            self.request_stop(f"signal {signal.Signals(signum).name}")

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        # Wakes the poll even if the signal lands between our flag check and the poll call.
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

    def run(self, do_work: Callable[[int], int], next_deadline_ns: Callable[[], int]) -> int:
        """Loop until a stop is requested; returns the exit code."""
        tune_gc()
        clock = self.clock
        poll = self.poller.poll
        handlers = self._handlers
        wake_r = self._wake_r
        queues = self._queues  # empty unless a member runs in one process: no cost per cycle then
        idle_wait = False
        while not self.stop_requested:
            now = clock.now_ns()
            wait_ns = next_deadline_ns() - now
            if wait_ns <= 0:
                timeout_ms = NO_PROGRESS_WAIT_MS if idle_wait else 0
            else:
                timeout_ms = min(MAX_IDLE_MS, (wait_ns + 999_999) // 1_000_000)
            if queues and timeout_ms and self.pending():
                timeout_ms = 0
            ready = poll(timeout_ms)
            now = clock.now_ns()
            handled = 0
            for sock, _event in ready:
                if sock == wake_r:
                    try:
                        while os.read(wake_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                handler = handlers.get(sock)
                if handler is not None:
                    handled += handler(now)
            if queues:
                handled += self._run_queues(now)
            if self.stop_requested:
                break
            work = do_work(now)
            self.cycles += 1
            idle_wait = work == 0 and handled == 0
        return self.exit_code

    def _run_queues(self, now: int) -> int:
        handled = 0
        for queue, handler in tuple(self._queues):  # a handler may unregister a queue
            if queue:
                handled += handler(now)
        return handled

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


class InProcessLink:
    """One direction of a node <-> service link inside one process (clusterlab.core.runtime.member):
    a queue of payloads with the ``send`` surface of transport.Link (``head`` is dropped: both ends
    know the channel and the source). Unbounded and lossless, like the sockets it replaces."""

    __slots__ = ("dropped", "endpoint", "queue", "sent")

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint  # a name for logs: "in-process:node-0->service-0"
        self.queue: deque[bytes] = deque()
        self.sent = 0
        self.dropped = 0  # never: the queue is unbounded

    def send(self, head: bytes, payload: bytes) -> bool:
        self.queue.append(payload)
        self.sent += 1
        return True

    def close(self, linger_ms: int = 0) -> None:
        pass


class InProcessChannel:
    """The node <-> service links of a member in one process: per service id a link each way, and
    the one DutyCycle both ends run on (the node's, attached by the node)."""

    def __init__(self, member_id: int, service_count: int) -> None:
        self.to_service = [InProcessLink(f"in-process:node-{member_id}->service {s}") for s in range(service_count)]
        self.from_service = [InProcessLink(f"in-process:service {s}->node-{member_id}") for s in range(service_count)]
        self._cycle: DutyCycle | None = None

    def attach(self, cycle: DutyCycle) -> None:
        self._cycle = cycle

    @property
    def cycle(self) -> DutyCycle:
        if self._cycle is None:
            raise RuntimeError("the in-process channel has no duty cycle yet: the node attaches it")
        return self._cycle


PROFILE_ENV = "CLUSTERLAB_PROFILE_DIR"


def run_profiled(run: Callable[[], int], name: str) -> int:
    """``run()``; under cProfile when ``$CLUSTERLAB_PROFILE_DIR`` is set (stats written there as
    ``<name>.pstats`` when the process stops cleanly; read them with ``python -m pstats``). The
    profile counts this thread's CPU time, not wall time: on a busy host wall time charges
    whatever call was running when the scheduler preempted the process."""
    directory = os.environ.get(PROFILE_ENV)
    if not directory:
        return run()
    import cProfile

    profiler = cProfile.Profile(time.thread_time)
    try:
        return profiler.runcall(run)
    finally:
        os.makedirs(directory, exist_ok=True)
        profiler.dump_stats(os.path.join(directory, f"{name}.pstats"))


def exit_with_parent(parent_pid: int) -> bool:
    """Have the kernel send us SIGTERM when the process that started us dies (Linux prctl
    PR_SET_PDEATHSIG), so a harness killed outright leaves no member behind. False if that
    parent is already gone (the caller should exit)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    return os.getppid() == parent_pid


def started_by_a_gone_parent(prog: str, parent_pid: int | None) -> bool:
    """Whether ``--exit-with-parent PID`` names a process already gone (said on stderr): the caller then
    exits 0 at once. Otherwise the kernel stops this process when that parent dies (exit_with_parent)."""
    if parent_pid is None or exit_with_parent(parent_pid):
        return False
    print(f"{prog}: the process that started us ({parent_pid}) is gone", file=sys.stderr)
    return True


def process_argument_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The command line every member process (node, service) takes from LocalCluster or a user."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--dir", required=True, help="cluster directory (holds cluster.json)")
    parser.add_argument("--member-id", type=int, required=True)
    parser.add_argument("--incarnation", type=int, default=0, help="how many times this member started before")
    parser.add_argument(
        "--exit-with-parent",
        type=int,
        default=None,
        metavar="PID",
        help="stop (as on SIGTERM) when process PID, the one starting us, dies (LocalCluster passes this)",
    )
    parser.add_argument("--trace-dir", default=None, help="record this process's trace into this run directory")
    parser.add_argument("--run-id", default="", help="the run id of the trace (with --trace-dir)")
    return parser
