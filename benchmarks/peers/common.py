"""What every benchmarked system shares: ports, processes, control requests and the load driver.

Load driver
    The same three functions measure every system, against an :class:`AckClient` (``offer`` a request
    id with a payload, ``poll`` for the ids acknowledged or failed):

    * :func:`run_saturation` — a pipelined client keeps ``window`` requests outstanding; committed ops/s
      is the number of acknowledgements that arrive inside the measured interval (after a warm-up)
      divided by its length;
    * :func:`run_paced` — an open-loop client offers at a fixed rate; each round trip is measured from
      the request's *intended* send time to the moment the client sees its acknowledgement (no
      coordinated omission: a client that falls behind is charged for it); after the interval the
      client drains the outstanding requests (bounded) and counts those never acknowledged as lost;
    * :func:`run_probe` — a probe offers one request every ``interval_s`` and returns the time of the
      first acknowledgement (the failover measurement: started right after the leader's SIGKILL, so
      every acknowledged request was committed by a new leader).

Processes
    :class:`NodeProcess` starts ``python -m …`` in the repository root, waits for the child's single
    ``READY {json}`` line on stdout (bounded), and stops it by PID: SIGTERM, then SIGKILL after a
    timeout; :class:`ProcessGroup` stops everything it started, also when the caller fails. Children
    stop by themselves when their parent goes away or their ``--max-seconds`` run out.

Only loopback: every endpoint is ``127.0.0.1`` with a port the OS picked.

The driver's own garbage collector
    Each measurement runs under :func:`driver_gc_quiet`: the measuring process collects once, freezes
    what exists and raises its collection thresholds, so a full collection of the driver's own heap
    (20-50 ms with a cluster handle, pyarrow and pyspark imported) does not land inside a latency
    sample of whichever system is measured. The same for every system; the systems' own processes
    are not touched.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import zmq

REPO_ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
READY_PREFIX = "READY "
DEFAULT_MAX_SECONDS = 1800.0  # a child never outlives this, whatever happens to its parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------------------- ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the OS says is free right now (bind port 0, read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (all held open while they are picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def bind_loopback(sock: zmq.Socket) -> str:
    """Bind ``sock`` to an OS-picked port on 127.0.0.1; the endpoint it got."""
    sock.bind(f"tcp://{LOOPBACK}:*")
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT)
    return endpoint.decode() if isinstance(endpoint, bytes) else str(endpoint)


# ----------------------------------------------------------------------------------------- processes


class NodeProcess:
    """One child process, started with ``python -m module args…``, stopped by PID."""

    def __init__(self, name: str, module: str, args: Sequence[str], log_dir: Path) -> None:
        self.name = name
        self.module = module
        self.args = list(args)
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] = {}

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, ready_timeout_s: float = 20.0) -> dict[str, Any]:
        """Start the child and wait (bounded) for its ``READY {json}`` line; the parsed json."""
        if self.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        argv = [sys.executable, "-m", self.module, *self.args, "--parent-pid", str(os.getpid())]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log
            )
        _register(self)
        try:
            self.ready = self._await_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.ready

    def _await_ready(self, timeout_s: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.name}: no READY line in {timeout_s:.0f} s; {self.log_tail()}")
                if not sel.select(left):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    raise RuntimeError(f"{self.name} exited ({self.proc.poll()}) before READY; {self.log_tail()}")
                buf += chunk
        line = buf.split(b"\n", 1)[0].decode()
        if not line.startswith(READY_PREFIX):
            raise RuntimeError(f"{self.name}: unexpected first line {line!r}; {self.log_tail()}")
        return json.loads(line[len(READY_PREFIX) :])

    def kill(self) -> None:
        """SIGKILL by PID and reap (the failover measurement's kill)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._close_pipe()

    def stop(self, timeout_s: float = 3.0) -> None:
        """SIGTERM by PID, SIGKILL if it has not exited after ``timeout_s``; always reaps."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._close_pipe()
        _unregister(self)

    def _close_pipe(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return "no log"
        return f"log {self.log_path}:\n" + "\n".join(text)

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds of the child so far (Linux /proc), None if gone."""
        return proc_cpu_seconds(self.pid) if self.alive() else None


_LIVE: dict[int, NodeProcess] = {}
_LIVE_LOCK = threading.Lock()


def _register(p: NodeProcess) -> None:
    with _LIVE_LOCK:
        _LIVE[id(p)] = p


def _unregister(p: NodeProcess) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(id(p), None)


def stop_all_started() -> None:
    """Stop every child this process started and has not stopped yet (the last line of defence)."""
    with _LIVE_LOCK:
        procs = list(_LIVE.values())
    for p in procs:
        with contextlib.suppress(Exception):
            p.stop(timeout_s=2.0)


class ProcessGroup:
    """The processes of one system; ``with ProcessGroup() as g`` stops them all on the way out."""

    def __init__(self) -> None:
        self.procs: list[NodeProcess] = []

    def add(self, p: NodeProcess) -> NodeProcess:
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.stop()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.alive() and p.pid is not None]

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


def proc_cpu_seconds(pid: int | None) -> float | None:
    """utime + stime of ``pid`` in seconds, from /proc (None if unreadable)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


# -------------------------------------------------------------------------------- child-side helpers


class ChildLife:
    """A child's reasons to stop: SIGTERM, its parent gone, or its time up. Bounded by construction."""

    def __init__(self, parent_pid: int, max_seconds: float) -> None:
        self.parent_pid = parent_pid
        self.deadline = time.monotonic() + max_seconds
        self.stopping = threading.Event()
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)

    def _on_term(self, _signum: int, _frame: object) -> None:
        self.stopping.set()

    def should_stop(self) -> bool:
        if self.stopping.is_set():
            return True
        if time.monotonic() > self.deadline or os.getppid() != self.parent_pid:
            self.stopping.set()
        return self.stopping.is_set()


def announce_ready(info: dict[str, Any]) -> None:
    """The child's one line on stdout; the parent's :meth:`NodeProcess.start` waits for it."""
    sys.stdout.write(READY_PREFIX + json.dumps(info) + "\n")
    sys.stdout.flush()


def add_child_args(parser: Any) -> None:
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, default=DEFAULT_MAX_SECONDS)


def serve_control(
    life: ChildLife, handle: Callable[[dict[str, Any]], dict[str, Any]], on_bound: Callable[[str], None]
) -> None:
    """Answer JSON control requests on a REP socket bound to 127.0.0.1:* until ``life`` says stop."""
    ctx = zmq.Context.instance()
    rep = ctx.socket(zmq.REP)
    rep.setsockopt(zmq.LINGER, 0)
    try:
        on_bound(bind_loopback(rep))
        while not life.should_stop():
            if not rep.poll(100):
                continue
            request = rep.recv_json()
            try:
                reply = handle(request)
            except Exception as e:
                reply = {"error": f"{type(e).__name__}: {e}"}
            rep.send_json(reply)
            if request.get("cmd") == "exit":
                life.stopping.set()
    finally:
        rep.close(0)


def control(endpoint: str, request: dict[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    """One JSON request to a child's control socket (fresh REQ socket, bounded wait)."""
    ctx = zmq.Context.instance()
    req = ctx.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    try:
        req.connect(endpoint)
        req.send_json(request)
        if not req.poll(int(timeout_s * 1000)):
            raise TimeoutError(f"no reply to {request.get('cmd')!r} from {endpoint} in {timeout_s:.1f} s")
        reply = req.recv_json()
    finally:
        req.close(0)
    if isinstance(reply, dict) and "error" in reply:
        raise RuntimeError(f"{request.get('cmd')!r} failed at {endpoint}: {reply['error']}")
    return reply


def control_many(requests: Sequence[tuple[str, dict[str, Any]]], timeout_s: float) -> list[dict[str, Any] | None]:
    """The same as :func:`control` for several endpoints at once; None for one that failed."""
    ctx = zmq.Context.instance()
    socks = []
    try:
        for endpoint, request in requests:
            req = ctx.socket(zmq.REQ)
            req.setsockopt(zmq.LINGER, 0)
            req.connect(endpoint)
            req.send_json(request)
            socks.append(req)
        deadline = time.monotonic() + timeout_s
        replies: list[dict[str, Any] | None] = []
        for req in socks:
            left = max(0.0, deadline - time.monotonic())
            reply = req.recv_json() if req.poll(int(left * 1000)) else None
            replies.append(reply if isinstance(reply, dict) and "error" not in reply else None)
        return replies
    finally:
        for s in socks:
            s.close(0)


# -------------------------------------------------------------------------------------- load driver


class AckClient(Protocol):
    """What the load driver needs from a system's client."""

    def offer(self, rid: int, payload: bytes) -> bool:
        """Send request ``rid``; False if it could not be sent now (back-pressure, no leader)."""
        ...

    def poll(self, timeout_s: float) -> tuple[list[int], list[int]]:
        """Wait up to ``timeout_s`` for replies; the request ids acknowledged and those that failed."""
        ...


def percentiles_ms(samples_s: list[float]) -> dict[str, float | int | None]:
    """p50/p90/p99/p99.9/max in milliseconds (nearest-rank) and the sample count."""
    if not samples_s:
        return {"n": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None}
    xs = sorted(samples_s)
    n = len(xs)

    def rank(q: float) -> float:
        return round(xs[min(n - 1, max(0, int(q * n + 0.999999) - 1))] * 1000, 3)

    return {
        "n": n,
        "p50_ms": rank(0.50),
        "p90_ms": rank(0.90),
        "p99_ms": rank(0.99),
        "p999_ms": rank(0.999),
        "max_ms": round(xs[-1] * 1000, 3),
    }


# The driver's collection thresholds while measuring (CPython's default is (700, 10, 10)).
DRIVER_GC_THRESHOLDS = (100_000, 50, 100)


@contextlib.contextmanager
def driver_gc_quiet() -> Iterator[None]:
    """Collect once, freeze the surviving objects and raise the thresholds for the block; restore
    the thresholds and unfreeze afterwards (see the module docstring). Also a decorator."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*DRIVER_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@driver_gc_quiet()
def run_saturation(
    client: AckClient,
    payload: bytes,
    window: int,
    warmup_s: float,
    duration_s: float,
    rid_base: int = 0,
    drain_s: float = 3.0,
) -> dict[str, Any]:
    """Committed ops/s with ``window`` requests kept outstanding (see the module docstring)."""
    outstanding = 0
    rid = rid_base
    acked_measured = failed = offered = 0
    start = time.monotonic()
    t_measure = start + warmup_s
    t_end = t_measure + duration_s
    measured_from: float | None = None
    now = start
    while now < t_end:
        while outstanding < window:
            rid += 1
            if not client.offer(rid, payload):
                break
            outstanding += 1
            offered += 1
        acked, bad = client.poll(min(0.05, t_end - now))
        now = time.monotonic()
        outstanding -= len(acked) + len(bad)
        failed += len(bad)
        if now >= t_measure:
            if measured_from is None:
                measured_from = now
            else:
                acked_measured += len(acked)
    elapsed = now - (measured_from if measured_from is not None else t_measure)
    drain_end = now + drain_s  # leave no request of this run outstanding for the next one
    while outstanding > 0 and now < drain_end:
        acked, bad = client.poll(min(0.05, drain_end - now))
        outstanding -= len(acked) + len(bad)
        now = time.monotonic()
    return {
        "ops_per_s": round(acked_measured / elapsed, 1) if elapsed > 0 else 0.0,
        "acked": acked_measured,
        "failed": failed,
        "offered": offered,
        "window": window,
        "payload_bytes": len(payload),
        "measured_s": round(elapsed, 3),
        "left_outstanding": outstanding,
    }


@driver_gc_quiet()
def run_paced(
    client: AckClient,
    payload: bytes,
    rate: float,
    warmup_s: float,
    duration_s: float,
    max_outstanding: int = 100_000,
    drain_s: float = 3.0,
    rid_base: int = 0,
) -> dict[str, Any]:
    """Round-trip latency at ``rate`` offered ops/s, open loop (see the module docstring)."""
    interval = 1.0 / rate
    sent: dict[int, float] = {}
    latencies: list[float] = []
    failed = 0
    n = 0
    start = time.monotonic()
    t_measure = start + warmup_s
    t_end = t_measure + duration_s
    measured_sent = 0

    def take(acked: list[int], bad: list[int], t: float) -> int:
        nonlocal failed
        for r in acked:
            intended = sent.pop(r, None)
            if intended is not None and intended >= t_measure:
                latencies.append(t - intended)
        for r in bad:
            if sent.pop(r, None) is not None:
                failed += 1
        return len(acked) + len(bad)

    now = start
    while now < t_end:
        due = min(int((now - start) * rate) + 1, int(warmup_s * rate + duration_s * rate))
        while n < due and len(sent) < max_outstanding:
            intended = start + n * interval
            n += 1
            if not client.offer(rid_base + n, payload):
                break
            sent[rid_base + n] = intended
            if intended >= t_measure:
                measured_sent += 1
        next_due = start + n * interval
        acked, bad = client.poll(max(0.0, min(next_due - time.monotonic(), 0.01)))
        now = time.monotonic()
        take(acked, bad, now)
    drain_end = now + drain_s
    while sent and now < drain_end:
        acked, bad = client.poll(min(0.05, drain_end - now))
        now = time.monotonic()
        take(acked, bad, now)
    lost = sum(1 for t in sent.values() if t >= t_measure)
    result: dict[str, Any] = {
        "offered_rate": round(rate, 1),
        "offered_total": n,  # warm-up included: what the system's CPU over the whole call served
        "measured_sent": measured_sent,
        "lost_or_late": lost,
        "failed": failed,
        "payload_bytes": len(payload),
    }
    result.update(percentiles_ms(latencies))
    return result


@driver_gc_quiet()
def run_probe(
    client: AckClient, payload: bytes, interval_s: float, timeout_s: float, rid_base: int = 1 << 40
) -> dict[str, Any]:
    """Offer one request every ``interval_s`` until one is acknowledged (bounded by ``timeout_s``).

    Returns the monotonic time of the first acknowledgement (``first_ack``, None on timeout). Only
    requests offered by this probe count; a client that raises is retried after ``interval_s``.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    mine: set[int] = set()
    rid = rid_base
    next_send = start
    now = start
    offered = 0
    while now < deadline:
        if now >= next_send:
            rid += 1
            try:
                if client.offer(rid, payload):
                    mine.add(rid)
                    offered += 1
            except Exception:
                pass
            next_send = max(next_send + interval_s, now)
        try:
            acked, _bad = client.poll(max(0.0, min(next_send - time.monotonic(), interval_s)))
        except Exception:
            acked = []
            time.sleep(interval_s)
        now = time.monotonic()
        if any(r in mine for r in acked):
            return {"first_ack": now, "started": start, "offered": offered}
    return {"first_ack": None, "started": start, "offered": offered}


def payload_of(size: int) -> bytes:
    """A deterministic payload of ``size`` bytes."""
    return bytes((i * 31 + 7) & 0xFF for i in range(size))
