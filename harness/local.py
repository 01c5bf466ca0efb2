"""LocalCluster: a real cluster of OS processes on this host, talking ZeroMQ; the twin of SimCluster.

Typical use::

    with LocalCluster(members=3, service="kv", directory=tmp_path) as cluster:   # waits for a leader
        client = cluster.client()
        client.put("k", "v")
        leader = cluster.leader_id()
        cluster.kill(leader)                                  # SIGKILL, node and service
        new_leader = cluster.await_leader(exclude={leader})
        assert client.get("k")["value"] == "v"

Each member is two processes, ``python -m clusterlab.core.runtime.node`` and
``python -m clusterlab.core.runtime.service``
(started with ``subprocess.Popen``, not ``multiprocess``: a fresh interpreter per process means no
forked ZeroMQ context or pytest state, the PID we signal is the member itself, and the processes
are exactly what a user starts by hand). They run in their own session, so a Ctrl-C in a
terminal reaches only the harness, which then stops them. Their stdout/stderr go to
``<dir>/logs/member-<i>-<node|service>-<incarnation>.log`` (kept across restarts and wipes);
``<dir>/processes.json`` lists every process started, with its PID. With
``member_process="single"`` each member is one process instead, ``python -m
clusterlab.core.runtime.member`` (node and services in one process, linked by in-process queues;
log ``member-<i>-member-<incarnation>.log``), and every per-member operation targets that PID.

Every process LocalCluster starts is stopped by its PID: ``close()`` (also from ``__exit__``, and a
finalizer at interpreter exit) sends SIGTERM (and SIGCONT, in case it is paused), waits, and
SIGKILLs what is still running after ``stop_timeout_s``. Nothing waits by sleeping: waits are
bounded polls of a condition (``wait_until``, tenacity).

A ClusterBackup (``start_backup``: ``python -m clusterlab.core.runtime.backup``, member id -1 in
processes.json, log ``<dir>/logs/backup-<n>.log``) copies the committed log and snapshots into
``<dir>/backup``; ``backup_status``/``await_backup`` read its status file, ``stop_backup`` and
``close()`` stop it by PID, ``restore_from_backup`` gives every stopped member a copy of it and
starts them again.

Recording (clusterlab.harness.recorder, docs/trace-schema.md) is on by default (``record=False`` turns it off): the
run directory is ``trace_dir`` (default ``<dir>/trace``; ``<dir>/trace-<run id>`` when that already
holds a run), with run.json written at start and at ``close()`` (with the committed ``log`` table),
the harness's lifecycle and fault events, and every node's and service's own recording (the
processes get ``--trace-dir``/``--run-id``). Read it with ``clusterlab.harness.trace.open_run``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import tenacity
from clusterlab.core.archive.layout import log_dir
from clusterlab.core.atomic import write_atomically
from clusterlab.core.client.errors import ClientError, ClusterTimeoutError, ConnectError, SessionClosedError
from clusterlab.core.codec.control import (
    NO_ELECTION,
    NOT_STARTED,
    ClockOffset,
    ClusterControlRequest,
    ControlResponse,
    ControlResponseCode,
    Counters,
    CountersRequest,
    GateRule,
    MembersConfig,
    NodeStatus,
    PurgeSegments,
    ServiceStatus,
    StatusRequest,
    StorageFault,
    TestHook,
    TestHookKind,
)
from clusterlab.core.codec.enums import EventCode, ToggleState
from clusterlab.core.consensus.context import (
    NULL_VALUE,
    ConsensusModuleState,
    ElectionState,
    Role,
    Timeouts,
)
from clusterlab.core.consensus.counters import ClusterCounters
from clusterlab.core.consensus.sessions import SESSION_LIMIT
from clusterlab.core.runtime.backup import BackupStatusError, read_backup_status
from clusterlab.core.runtime.client import ClusterConnection
from clusterlab.core.runtime.config import (
    TRIPWIRE_ENV,
    ClusterConfig,
    ConfigError,
    format_members,
    parse_members,
    remove_socket_root,
    service_control_endpoint,
)
from clusterlab.core.runtime.control import ControlClient
from clusterlab.core.runtime.control_replies import counters_of
from clusterlab.core.runtime.counters_file import CountersFileError, read_counters_file
from clusterlab.core.runtime.dirlock import lock_cluster_directory
from clusterlab.core.runtime.node import EXIT_SERVICE_GONE
from clusterlab.core.runtime.security import (
    ADMIN,
    CLIENT,
    DOMAIN_EGRESS,
    ClientCredentials,
    ProcessSecurity,
    create_keys,
    credentials_path,
    member_key_name,
)
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.core.runtime.test_context import TEST_CONTEXT_ENV
from clusterlab.core.runtime.transport import new_context
from clusterlab.harness.cluster_tool import ClusterToolError, restore_member_directory
from clusterlab.harness.recorder import RunRecorder, new_run_id, process_recorder
from clusterlab.harness.services import import_roots, kv
from clusterlab.harness.tripwire import watchable

from clusterlab.testing.disk_faults import truncate_at
from clusterlab.testing.intercepts import member_message_template
from clusterlab.testing.mutants import MUTANTS_ENV, mutant_set
from clusterlab.testing.node import environment as node_environment

T = TypeVar("T")
PPM = 1_000_000
NODE, SERVICE = "node", "service"
MEMBER = "member"  # the kind of a member's one process (member_process="single": node and services)
MEMBER_PROCESS_MODES = ("split", "single")
BACKUP = "backup"  # the kind of the ClusterBackup process (member id -1)


def service_kind(service_id: int) -> str:
    """The harness's name for a member's service process ``service_id``: ``service`` for service 0
    (as with one service), ``service-s<id>`` for the others (log files, processes.json, events)."""
    return SERVICE if service_id == 0 else f"{SERVICE}-s{service_id}"


def service_id_of_kind(kind: str) -> int:
    """The service id of a service process kind (``service`` -> 0, ``service-s1`` -> 1)."""
    return 0 if kind == SERVICE else int(kind.rsplit("-s", 1)[1])


STATUS_TIMEOUT_S = 0.5
PROCESSES_FILE = "processes.json"


class LocalClusterError(RuntimeError):
    """The harness cannot do what was asked (a process died while starting, misuse of a fault)."""


class LocalTimeout(AssertionError):
    """An awaited condition did not hold in time (an AssertionError: a test failure, not an error)."""


def wait_until(
    predicate: Callable[[], T | None],
    timeout_s: float,
    what: str,
    *,
    interval_s: float = 0.02,
    context: Callable[[], str] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout_s`` passes
    (LocalTimeout naming ``what`` and, if given, ``context()``)."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_fixed(interval_s),
        retry=tenacity.retry_if_result(lambda result: not result),
    )
    try:
        return cast(T, retrying(predicate))  # retried until truthy, so never None
    except tenacity.RetryError:
        detail = f"; {context()}" if context is not None else ""
        raise LocalTimeout(f"{what} not reached within {timeout_s:g} s{detail}") from None


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process. A zombie counts as dead once all its threads exited: a
    SIGKILLed process's main thread turns zombie first, and its other threads (ZeroMQ's I/O threads)
    still hold its open files (an inherited directory lock) until they are gone too."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    if stat.rsplit(")", 1)[-1].split()[0] != "Z":
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1  # threads still exiting hold the files
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class MemberStatus:
    """A node's answer to a status request (NodeStatus), with enums decoded."""

    member_id: int
    role: Role | None
    leadership_term_id: int
    election_state: ElectionState | None
    module_state: ConsensusModuleState | None
    commit_position: int
    append_position: int
    leader_member_id: int
    session_count: int
    snapshot_count: int
    ignored_count: int
    gate_dropped_count: int
    send_dropped_count: int
    received_count: int
    pid: int
    endpoints: str
    detail: str
    health: str  # "" when healthy; else e.g. "fenced: disk full (ENOSPC)", "service down"

    @classmethod
    def of(cls, s: NodeStatus) -> MemberStatus:
        return cls(
            member_id=s.member_id,
            role=None if s.role == NOT_STARTED else Role(s.role),
            leadership_term_id=s.leadership_term_id,
            election_state=None if s.election_state == NO_ELECTION else ElectionState(s.election_state),
            module_state=None if s.module_state == NOT_STARTED else ConsensusModuleState(s.module_state),
            commit_position=s.commit_position,
            append_position=s.append_position,
            leader_member_id=s.leader_member_id,
            session_count=s.session_count,
            snapshot_count=s.snapshot_count,
            ignored_count=s.ignored_count,
            gate_dropped_count=s.gate_dropped_count,
            send_dropped_count=s.send_dropped_count,
            received_count=s.received_count,
            pid=s.pid,
            endpoints=s.endpoints,
            detail=s.detail,
            health=s.health,
        )

    @property
    def started(self) -> bool:
        return self.module_state is not None

    def describe(self) -> str:
        role = self.role.name if self.role is not None else "NOT_STARTED"
        election = self.election_state.name if self.election_state is not None else "-"
        return (
            f"{self.member_id}:{role} term={self.leadership_term_id} election={election} "
            f"append={self.append_position} commit={self.commit_position} sessions={self.session_count}"
            + (f" [{self.health}]" if self.health else "")
        )


@dataclass
class _Process:
    member_id: int
    kind: str
    incarnation: int
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None


def _stop_processes(processes: list[_Process], timeout_s: float) -> list[_Process]:
    """SIGTERM (+SIGCONT) every running process, wait up to ``timeout_s``, SIGKILL the rest; reap all.
    Returns the processes it had to SIGKILL (their trace files may end torn: the caller records it)."""
    killed: list[_Process] = []
    # Each once: a member's one process is listed under its node's and services' kinds too.
    running = [p for p in {id(p): p for p in processes}.values() if p.running()]
    for p in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGTERM)
            os.kill(p.pid, signal.SIGCONT)  # a paused process handles SIGTERM only once continued
    deadline = time.monotonic() + timeout_s
    for p in running:
        try:
            p.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
            p.popen.wait()
            killed.append(p)
    return killed


def member_hash_seed(seed: int, member_id: int) -> int:
    """The ``PYTHONHASHSEED`` of every process of member ``member_id`` in a cluster of ``seed``:
    distinct per member (so a state that depends on hash order disagrees across members and the
    agreement check names it), the same on every run of the seed. Recorded in run.json's
    ``hash_seeds``."""
    return 1 + (seed * 7919 + member_id * 104729) % 4_000_000_000


def _kill_all(processes: list[_Process]) -> None:
    """Finalizer / interpreter exit: SIGKILL whatever is still running (no time for courtesy)."""
    for p in processes:
        if p.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                p.popen.wait(5)


class LocalCluster:
    """See the module docstring. Operations mirror SimCluster's where they mean the same.

    ``directory`` None: a fresh temporary directory, removed on a clean close (kept after a
    failure, or with ``keep_directory``). An existing directory with a ``cluster.json`` is
    restarted from disk with its own configuration (``members`` None accepts any size).

    ``secure`` (default: on with ``tcp``, off on ipc) makes a new cluster's keys and credentials
    (clusterlab.core.runtime.security); a restarted directory keeps its own setting. The
    directory is locked (clusterlab.core.runtime.dirlock) until ``close()``: a second
    LocalCluster or ``cluster start`` on it raises at once, naming this process.

    ``services``: several clustered services per member (``["kv", "counter"]``: service ids 0 and
    1, each its own process with its own snapshots; see clusterlab.core.service.addressed).

    ``tripwire``: the service processes watch their services' callbacks (clusterlab.harness.tripwire;
    findings are ``tripwire`` events in the trace).

    ``test_context`` (on by default: the harness's tests and chaos runs) gives every node the test
    context (clusterlab.testing.node: planted ``mutants``, its disk behind a FaultyStorage for
    :meth:`storage_fault`, the intercepts :meth:`stall_election` and the other test hooks arm).
    Off, the nodes run as production nodes do: plain storage, the protocol's rules, storage faults
    and test hooks refused (``clusterlab cluster start``). Planted bugs need it on.

    ``member_process``: ``"split"`` (the default) runs each member as its node process and one
    process per service; ``"single"`` runs each member as one process,
    ``python -m clusterlab.core.runtime.member`` (node and services on one duty cycle, linked by
    in-process queues). Per-member operations (kill, stop, pause, resume, restart, restart_wiped,
    status, service_status) act on that one process (kind ``member`` in processes.json, its log
    ``member-<i>-member-<n>.log``); :meth:`kill_service` is refused (LocalClusterError)."""

    def __init__(
        self,
        members: int | None = 3,
        service: str | None = "kv",
        directory: Path | str | None = None,
        timeouts: Timeouts | None = None,
        tcp: bool = False,
        *,
        services: list[str] | None = None,
        seed: int = 0,
        appointed_leader_id: int = NULL_VALUE,
        startup_timeout_s: float = 20.0,
        stop_timeout_s: float = 5.0,
        keep_directory: bool = False,
        record: bool = True,
        trace_dir: Path | str | None = None,
        run_id: str | None = None,
        scenario: str = "local",
        secure: bool | None = None,
        archive_segment_length: int | None = None,
        mutants: frozenset[str] = frozenset(),
        tripwire: bool = False,
        test_context: bool = True,
        member_process: str = "split",
    ) -> None:
        """Opens the cluster directory (new, or restarted from disk), locks it and plans the members'
        processes; the class docstring describes the parameters."""
        if member_process not in MEMBER_PROCESS_MODES:
            raise LocalClusterError(f"member_process {member_process!r}: use one of {MEMBER_PROCESS_MODES}")
        self.member_process = member_process
        if not test_context and mutants:
            raise LocalClusterError("planted bugs (mutants) need test_context=True")
        self.test_context = test_context
        self._owns_directory = directory is None
        self.mutants = mutant_set(mutants)  # planted bugs (clusterlab.testing.mutants)
        self.tripwire = tripwire
        self.directory = Path(tempfile.mkdtemp(prefix="localcluster-")) if directory is None else Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        # First of all: nothing in the directory is read or written unless we own it.
        self._lock = lock_cluster_directory(self.directory)
        try:
            self._archive_segment_length = archive_segment_length  # None: Aeron's default (128 MiB)
            self._init(members, service, timeouts, tcp, seed, appointed_leader_id, secure, services)
        except BaseException:
            self._lock.release()
            raise
        self.keep_directory = keep_directory
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.directory = self.config.directory
        self.member_count = len(self.config.members)
        self.service_kinds = [service_kind(s) for s in range(self.config.service_count)]
        self._import_roots = import_roots(self.config.service_kinds)  # a user's service, importable in members
        self._plan_processes()
        self.timeouts = self.config.timeouts
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        self.zctx = new_context()
        # The operator's key: the harness speaks to control sockets as "admin"; its ZAP handler
        # admits only members to its clients' response channels.
        self.security = ProcessSecurity(self.directory, self.config.secure, ADMIN, self.zctx, authenticate=True)
        self._init_bookkeeping()
        self._finalizer = weakref.finalize(self, _kill_all, self._all)
        self.run_id = run_id or new_run_id(scenario)
        self.recorder: RunRecorder | None = None
        self.trace_dir: Path | None = None
        if record:
            self._open_recorder(trace_dir, scenario)

    def _init_bookkeeping(self) -> None:
        """Sets up the empty bookkeeping of a cluster not yet started: its processes, controls, link
        rules, clients, backup, events and lifecycle flags."""
        self._all: list[_Process] = []  # every process ever started (the finalizer's list)
        self._current: dict[tuple[int, str], _Process] = {}
        # A restarted directory continues its members' incarnation numbers (log files never clash).
        self._incarnations = [self._last_incarnation(i) for i in range(self.member_count)]
        self._paused: set[int] = set()
        self._controls: dict[tuple[int, str], ControlClient] = {}
        self._gate_rules: dict[tuple[int, int], tuple[int, int]] = {}  # (src, dst) -> (loss_ppm, delay_ns)
        self._gate_dirty: set[int] = set()
        self.clients: list[LocalClient] = []
        self._backup: _Process | None = None  # the ClusterBackup process (start_backup), member id -1
        self.backup_dir: Path | None = None
        self.retired_dirs: list[Path] = []  # member logs copied aside before a restore (_keep_log_before_restore)
        self.events: list[dict[str, Any]] = []  # harness events: start, kill, stop, partition, ...
        self.failed = False
        self._started = False
        self._closed = False

    def _plan_processes(self) -> None:
        """What is launched per member: its node then its services, or its one process (which answers
        for the node and the services: _launch files it under each of their kinds)."""
        self._member_kinds = [NODE, *self.service_kinds]
        self._node_kind = NODE
        self._service_processes = list(self.service_kinds)
        if self.member_process == "single":
            self._member_kinds = [NODE]
            self._node_kind = MEMBER
            self._service_processes = []

    def _open_recorder(self, trace_dir: Path | str | None, scenario: str) -> None:
        """The run's recorder: ``trace_dir``, or ``trace`` in the cluster directory (``trace-<run id>``
        beside an earlier run's)."""
        if trace_dir is None:
            trace_dir = self.directory / "trace"
            if (trace_dir / "run.json").exists():  # a restarted directory: a new run beside the old
                trace_dir = self.directory / f"trace-{self.run_id}"
        self.trace_dir = Path(trace_dir).resolve()  # members run with their own working directory
        self.recorder = RunRecorder(
            self.trace_dir,
            self.run_id,
            scenario=scenario,
            seed=self.config.seed,
            members=[asdict(m) for m in self.config.members],
            config={
                "timeouts": asdict(self.timeouts),
                "endpoints": {str(m.member_id): asdict(m) for m in self.config.members},
                "service": self.config.service,
                **({"services": self.config.services} if self.config.service_count > 1 else {}),
                "transport": self.config.transport,
                "appointed_leader_id": self.config.appointed_leader_id,
                "cluster_dir": str(self.directory),
            },
            extra={
                "harness": "LocalCluster",
                "hash_seeds": {
                    str(m.member_id): member_hash_seed(self.config.seed, m.member_id) for m in self.config.members
                },
            },
        )

    def _init(
        self,
        members: int | None,
        service: str | None,
        timeouts: Timeouts | None,
        tcp: bool,
        seed: int,
        appointed_leader_id: int,
        secure: bool | None,
        services: list[str] | None = None,
    ) -> None:
        """Load the directory's configuration, or create it (and a secured cluster's keys)."""
        if (self.directory / "cluster.json").exists():
            self.config = ClusterConfig.load(self.directory)
            if members is not None and len(self.config.members) != members:
                raise LocalClusterError(
                    f"{self.directory} holds a {len(self.config.members)}-member cluster, not {members}"
                )
            if self.config.ensure_socket_root():
                self.config.save()
        else:
            if members is None:
                raise LocalClusterError(f"{self.directory} has no cluster.json and no member count was given")
            self.config = ClusterConfig.create(
                self.directory,
                members,
                service=service,
                timeouts=timeouts,
                tcp=tcp,
                seed=seed,
                appointed_leader_id=appointed_leader_id,
                secure=tcp if secure is None else secure,
                **(
                    {"archive_segment_length": self._archive_segment_length}
                    if self._archive_segment_length is not None
                    else {}
                ),
                services=services,
            )
            self.config.save()
            os.chmod(self.directory, 0o700)  # its ipc sockets: reachable by this user only
        if self.config.secure:
            create_keys(self.directory, range(len(self.config.members)))  # keeps the keys it has

    def _last_incarnation(self, member_id: int) -> int:
        last = -1
        for path in [
            *self.config.log_dir.glob(f"member-{member_id}-{NODE}-*.log"),
            *self.config.log_dir.glob(f"member-{member_id}-{MEMBER}-*.log"),
        ]:
            with contextlib.suppress(ValueError):
                last = max(last, int(path.stem.rsplit("-", 1)[1]))
        return last

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> LocalCluster:
        try:
            self.start()
            self.await_leader()
            self.await_services()
        except BaseException as e:
            self.failed = True
            self._add_logs_note(e)
            self.close()
            raise
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.failed = True
            self._add_logs_note(exc)
        self.close()

    def start(self) -> None:
        """Start every member (nodes first; services once their node has started its module)."""
        if self._started:
            raise LocalClusterError("start() called twice")
        self._started = True
        for i in range(self.member_count):
            self._launch(i, self._node_kind)
        self._await_nodes_started(range(self.member_count))
        for i in range(self.member_count):
            for kind in self._service_processes:
                self._launch(i, kind)

    def close(self) -> None:
        """Stop every process (nodes first, then services), close clients and sockets. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            for client in self.clients:
                with contextlib.suppress(Exception):
                    client.close()
            killed = _stop_processes([self._backup] if self._backup is not None else [], self.stop_timeout_s)
            killed += _stop_processes(
                [p for p in self._current.values() if p.kind in (NODE, MEMBER)], self.stop_timeout_s
            )
            killed += _stop_processes(list(self._current.values()), self.stop_timeout_s)
            for p in killed:  # explains the torn trace file to readers (docs/trace-schema.md, "Completeness")
                self._event("kill", p.member_id, process=p.kind, at="stop timeout")
            _kill_all(self._all)  # earlier incarnations are reaped already; this is belt and braces
            if self.recorder is not None:
                for i in range(self.member_count):  # what was in flight to a member when it stopped
                    self._event("stop", i, at="close")
                self.recorder.finish(
                    "failed" if self.failed else "ok",
                    member_dirs={i: self.member_dir(i) for i in range(self.member_count)},
                    earlier_dirs=self.retired_dirs,
                )
        finally:
            for control in self._controls.values():
                control.close()
            self.security.close()  # its ZAP thread's sockets first: term() waits for every socket
            self.zctx.term()
            remove_socket_root(self.config)
            self._finalizer.detach()
            self._write_processes()
            self._lock.release()  # last: the directory is free once nothing of ours writes to it
            if self._owns_directory and not self.keep_directory and not self.failed:
                shutil.rmtree(self.directory, ignore_errors=True)

    # ------------------------------------------------------------------ processes
    def _launch(self, member_id: int, kind: str) -> _Process:
        if self._closed:
            raise LocalClusterError("the cluster is closed")
        if kind in (NODE, MEMBER):
            self._incarnations[member_id] += 1
        incarnation = self._incarnations[member_id]
        log_path = self.config.log_dir / f"member-{member_id}-{kind}-{incarnation}.log"
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONHASHSEED"] = str(member_hash_seed(self.config.seed, member_id))  # hash order differs per member
        # A member process is single-threaded; OpenBLAS's threads (numpy, imported by pyarrow) spin at start
        # for ~0.2 s of CPU per process otherwise. A value the user set is kept.
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        for name in (TEST_CONTEXT_ENV, MUTANTS_ENV):
            env.pop(name, None)  # only this cluster's own test context reaches its members
        if self.test_context:
            env.update(node_environment(self.mutants))
        if self._import_roots:
            env["PYTHONPATH"] = os.pathsep.join([*self._import_roots, *filter(None, [env.get("PYTHONPATH")])])
        env.pop(TRIPWIRE_ENV, None)
        if self.tripwire and kind != NODE and self._watchable(kind):
            env[TRIPWIRE_ENV] = "1"
        module = kind if kind in (NODE, MEMBER) else SERVICE
        cmd = [
            sys.executable,
            "-m",
            f"clusterlab.core.runtime.{module}",
            "--dir",
            str(self.directory),
            "--member-id",
            str(member_id),
            "--incarnation",
            str(incarnation),
            "--exit-with-parent",
            str(os.getpid()),
        ]
        if kind not in (NODE, SERVICE, MEMBER):
            cmd += ["--service-id", str(service_id_of_kind(kind))]
        if self.trace_dir is not None:
            cmd += ["--trace-dir", str(self.trace_dir), "--run-id", self.run_id]
        # The directory lock, shared: it stays held while any member process runs.
        popen = self._spawn(cmd, log_path, env, pass_fds=(self._lock.fd,))
        process = _Process(member_id, kind, incarnation, popen, log_path)
        self._all.append(process)
        # A member's one process answers for its node and its services too.
        for each in [kind, NODE, *self.service_kinds] if kind == MEMBER else [kind]:
            self._current[(member_id, each)] = process
            control = self._controls.get((member_id, each))
            if control is not None:
                control.reset()  # nothing queued for the previous incarnation may reach this one
        self._write_processes()
        self._event("start" if incarnation == 0 else "restart", member_id, process=kind, pid=process.pid)
        return process

    def _watchable(self, kind: str) -> bool:
        """The tripwires apply to this process: a service process of a watchable service, or a member's
        one process with one."""
        kinds = self.config.service_kinds
        if kind == MEMBER:
            return any(watchable(k) for k in kinds)
        return watchable(kinds[service_id_of_kind(kind)])

    def _spawn(
        self, cmd: list[str], log_path: Path, env: dict[str, str], pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen[bytes]:
        """Start ``cmd`` in its own session in the cluster directory, its output appended to ``log_path``."""
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env=env,
                start_new_session=True,
                pass_fds=pass_fds,
            )

    def _write_processes(self) -> None:
        rows = [
            {
                "member_id": p.member_id,
                "kind": p.kind,
                "incarnation": p.incarnation,
                "pid": p.pid,
                "running": p.running(),
                "log": str(p.log_path),
            }
            for p in self._all
        ]
        with contextlib.suppress(OSError):
            write_atomically(self.directory / PROCESSES_FILE, json.dumps(rows, indent=1) + "\n")

    def _process(self, member_id: int, kind: str) -> _Process | None:
        p = self._current.get((member_id, kind))
        return p if p is not None and p.running() else None

    def _control(self, member_id: int, kind: str = NODE) -> ControlClient:
        key = (member_id, kind)
        control = self._controls.get(key)
        if control is None:
            m = self.config.member(member_id)
            control = ControlClient(
                self.zctx,
                m.control if kind == NODE else service_control_endpoint(m, service_id_of_kind(kind)),
                self.security.connector(member_key_name(member_id)),
            )
            self._controls[key] = control
        return control

    def _request(self, member_id: int, msg: Any, timeout_s: float = STATUS_TIMEOUT_S, kind: str = NODE) -> Any:
        if self._process(member_id, kind) is None or member_id in self._paused:
            return None
        return self._control(member_id, kind).request(msg, timeout_s)

    def _await_nodes_started(self, member_ids: Iterable[int]) -> None:
        """Wait until these nodes answer; in tcp mode hand out the OS-assigned endpoints first."""
        ids = list(member_ids)

        def answered() -> tuple[dict[int, MemberStatus]] | None:
            out = {}  # returned in a tuple: truthy even when every node closed by itself
            for i in ids:
                p = self._current[(i, NODE)]
                if not p.running() and p.popen.returncode == EXIT_SERVICE_GONE:
                    # Started and closed by itself: its service failed to start (a one-process member may
                    # close before its node ever answered). The caller sees the exit (wait_for_exit).
                    continue
                if not p.running():
                    raise LocalClusterError(
                        f"node {i} exited with {p.popen.returncode} while starting:\n{self.log_tail(i, NODE)}"
                    )
                status = self.status(i)
                if status is None:
                    return None
                out[i] = status
            return (out,)

        (statuses,) = wait_until(answered, self.startup_timeout_s, f"nodes {ids} answering", context=self.status_line)
        changed = False
        members = self.config.cluster_members()
        for i, status in statuses.items():
            [actual] = parse_members(status.endpoints)
            if actual != members[i]:
                members[i] = actual
                changed = True
        if changed:
            self.config.members = [m.with_cluster_member(members[m.member_id]) for m in self.config.members]
            self.config.save()
        if changed or any(not s.started for s in statuses.values()):
            text = format_members(members)
            for i in range(self.member_count):
                if self._process(i, NODE) is not None and i not in self._paused:
                    reply = self._request(i, MembersConfig(0, text), 2.0)
                    if not isinstance(reply, ControlResponse) or reply.code != ControlResponseCode.OK:
                        raise LocalClusterError(f"member {i} did not take the member list: {reply!r}")

        def started() -> bool:
            return all(((s := self.status(i)) is not None and s.started) or self._exited_once_up(i) for i in ids)

        wait_until(started, self.startup_timeout_s, f"nodes {ids} started", context=self.status_line)
        for i in ids:
            self._push_gate(i)

    def _exited_once_up(self, member_id: int) -> bool:
        """A member's one process that exited after it answered: its services start with its module,
        so one that fails to start stops the member here (its exit code says why), not after start."""
        return self._node_kind == MEMBER and self._process(member_id, NODE) is None

    # ------------------------------------------------------------------ observation
    def member_dir(self, member_id: int) -> Path:
        return self.config.member_dir(member_id)

    def storage(self, member_id: int) -> FileStorage:
        """A FileStorage on the member's directory, for disk faults while it is down (the running
        processes open their own)."""
        return FileStorage(self.member_dir(member_id))

    def is_alive(self, member_id: int) -> bool:
        """The member's node process is running (paused counts as alive)."""
        return self._process(member_id, NODE) is not None

    def members_alive(self) -> list[int]:
        return [i for i in range(self.member_count) if self.is_alive(i)]

    def is_paused(self, member_id: int) -> bool:
        return member_id in self._paused

    def incarnation(self, member_id: int) -> int:
        return self._incarnations[member_id]

    def pids(self) -> list[int]:
        """Every process this cluster ever started."""
        return [p.pid for p in self._all]

    def running_pids(self) -> list[int]:
        return [p.pid for p in self._all if p.running()]

    def status(self, member_id: int, timeout_s: float = STATUS_TIMEOUT_S) -> MemberStatus | None:
        """The node's status, or None if it is down, paused or does not answer in time."""
        reply = self._request(member_id, StatusRequest(0), timeout_s)
        return MemberStatus.of(reply) if isinstance(reply, NodeStatus) else None

    def statuses(self) -> dict[int, MemberStatus | None]:
        return {i: self.status(i) for i in range(self.member_count)}

    def service_status(
        self, member_id: int, timeout_s: float = STATUS_TIMEOUT_S, service_id: int = 0
    ) -> ServiceStatus | None:
        """The status of the member's service ``service_id`` (log position, state digest), or None."""
        reply = self._request(member_id, StatusRequest(0), timeout_s, kind=service_kind(service_id))
        return reply if isinstance(reply, ServiceStatus) else None

    def roles(self) -> dict[int, Role | None]:
        return {i: (s.role if s is not None else None) for i, s in self.statuses().items()}

    @staticmethod
    def settled_leader(statuses: dict[int, MemberStatus | None]) -> int | None:
        """SimCluster.leader_id's rule: a LEADER with no election running, in the highest term among
        the members that answered, and the only one there."""
        live = [s for s in statuses.values() if s is not None and s.started]
        if not live:
            return None
        top = max(s.leadership_term_id for s in live)
        leaders = [
            s for s in live if s.role == Role.LEADER and s.election_state is None and s.leadership_term_id == top
        ]
        return leaders[0].member_id if len(leaders) == 1 else None

    def leader_id(self) -> int | None:
        return self.settled_leader(self.statuses())

    def await_leader(self, timeout_s: float = 10.0, exclude: Iterable[int] = ()) -> int:
        """Wait for a settled leader not in ``exclude`` and return its id."""
        excluded = set(exclude)

        def leader() -> int | None:
            self._pump_clients()
            found = self.leader_id()
            return found + 1 if found is not None and found not in excluded else None  # +1: 0 is falsy

        return wait_until(leader, timeout_s, f"a leader (not in {sorted(excluded)})", context=self.status_line) - 1

    def await_services(self, timeout_s: float | None = None) -> None:
        """Wait until every running service process answers its status: its service is built and
        its process past start-up (imports, snapshot load), so a first request is not answered only
        after a slow start. A service process that exited is not waited for (its node reports it)."""

        def answered() -> bool:
            for i in range(self.member_count):
                for service_id, kind in enumerate(self.service_kinds):
                    p = self._process(i, kind)
                    if p is None or i in self._paused:
                        continue
                    if self.service_status(i, service_id=service_id) is None:
                        return False
            return True

        timeout_s = timeout_s or self.startup_timeout_s
        wait_until(answered, timeout_s, "service processes answering", context=self.status_line)

    def caught_up(self, members: list[int] | None = None) -> int | None:
        """The common position if every listed member (default: all) has the same append and commit
        position, is not in an election, and its service has applied exactly that much; else None."""
        ids = list(range(self.member_count)) if members is None else members
        statuses = [self.status(i) for i in ids]
        if any(s is None or s.election_state is not None for s in statuses):
            return None
        positions = {(s.append_position, s.commit_position) for s in statuses if s is not None}
        if len(positions) != 1:
            return None
        [(append, commit)] = positions
        if append != commit:
            return None
        for i in ids:
            for service_id in range(len(self.service_kinds)):
                service = self.service_status(i, service_id=service_id)
                if service is None or service.log_position != commit:
                    return None
        return commit

    def await_condition(self, predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
        """Poll ``predicate`` (bounded); the cluster's clients keep their sessions alive meanwhile."""

        def check() -> Any:
            self._pump_clients()
            return predicate()

        return wait_until(check, timeout_s, what, context=self.status_line)

    def _pump_clients(self) -> None:
        for client in self.clients:
            if not client.conn.closed:
                with contextlib.suppress(ClientError):
                    client.conn.pump(0.0)

    def status_line(self) -> str:
        parts = []
        for i, s in self.statuses().items():
            service_down = self.is_alive(i) and any(
                self._process(i, kind) is None and (i, kind) in self._current for kind in self.service_kinds
            )
            if s is not None:
                parts.append(s.describe() + (" (service process exited)" if service_down else ""))
            elif self.is_paused(i):
                parts.append(f"{i}:paused")
            else:
                parts.append(f"{i}:{'down' if not self.is_alive(i) else 'no answer'}")
        return f"members [{', '.join(parts)}] dir={self.directory}"

    def log_tail(self, member_id: int, kind: str = NODE, lines: int = 25) -> str:
        p = self._current.get((member_id, kind))
        if p is None:
            return "(never started)"
        try:
            text = p.log_path.read_text(errors="replace").splitlines()
        except OSError as e:
            return f"(no log: {e})"
        return "\n".join(f"  {line}" for line in text[-lines:])

    def _add_logs_note(self, e: BaseException) -> None:
        notes = [f"LocalCluster directory (kept): {self.directory}"]
        for (member_id, kind), p in sorted(self._current.items()):
            if kind != p.kind:
                continue  # a member's one process, filed under its node's and services' kinds too
            tail = self.log_tail(member_id, kind)
            notes.append(f"--- member {member_id} {kind} (pid {p.pid}, log {p.log_path}):\n{tail}")
        with contextlib.suppress(Exception):
            e.add_note("\n".join(notes))

    def event(self, kind: str, member_id: int, **detail: Any) -> None:
        """Record a harness event (chaos nemeses record themselves here; source ``harness``)."""
        self._event(kind, member_id, **detail)

    def _event(self, kind: str, member_id: int, **detail: Any) -> None:
        self.events.append(
            {
                "time_ns": time.monotonic_ns(),
                "source": "harness",
                "member_id": member_id,
                "kind": kind,
                "detail": detail,
            }
        )
        if self.recorder is not None:
            self.recorder.event(kind, member_id, **detail)

    # ------------------------------------------------------------------ faults
    def kill(self, member_id: int) -> None:
        """Crash the member: SIGKILL its node and service processes (files stay). All of them are frozen
        (SIGSTOP) before any is killed: a service still running while its node dies (this process may be
        descheduled between two signals) would see the node go and stop on its own, gracefully, telling
        its service ``on_terminate``, which no crash does."""
        victims = [p for kind in self._member_kinds if (p := self._process(member_id, kind)) is not None]
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for p in victims:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, sig)
        for p in victims:
            p.popen.wait()
        self._paused.discard(member_id)
        self._event("kill", member_id)

    def kill_service(self, member_id: int, service_id: int = 0) -> None:
        """Crash only the member's service process ``service_id`` (SIGKILL); its node keeps running.
        Refused (LocalClusterError) when members run as one process (``member_process="single"``)."""
        if self.member_process == "single":
            raise LocalClusterError(
                f"kill_service({member_id}): member {member_id} runs its node and services in one process "
                '(member_process="single"); kill the member with kill() instead'
            )
        p = self._process(member_id, service_kind(service_id))
        if p is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
            p.popen.wait()
        if service_id == 0:
            self._event("kill", member_id, process=SERVICE)
        else:
            self._event("kill", member_id, process=SERVICE, service_id=service_id)

    def stop(self, member_id: int) -> None:
        """Clean shutdown: SIGTERM the node (it closes its module, a leader ends its log stream),
        then the services (each closes its agent: an active service is told ``on_terminate``, once)."""
        for kind in self._member_kinds:
            p = self._process(member_id, kind)
            if p is not None:
                for k in _stop_processes([p], self.stop_timeout_s):
                    self._event("kill", k.member_id, process=k.kind, at="stop timeout")
        self._paused.discard(member_id)
        self._event("stop", member_id)

    def restart(self, member_id: int) -> None:
        """Start a new incarnation from the member's directory; a running member is killed first."""
        if self.is_alive(member_id) or any(self._process(member_id, k) is not None for k in self.service_kinds):
            self.kill(member_id)
        self._launch(member_id, self._node_kind)
        self._await_nodes_started([member_id])
        for kind in self._service_processes:
            self._launch(member_id, kind)

    def restart_wiped(self, member_id: int) -> None:
        """Restart with an empty member directory (a replaced disk); a running member is killed first."""
        if self.is_alive(member_id) or any(self._process(member_id, k) is not None for k in self.service_kinds):
            self.kill(member_id)
        shutil.rmtree(self.member_dir(member_id), ignore_errors=True)
        self._event("wipe", member_id)
        self.restart(member_id)

    def exit_codes(self, member_id: int) -> dict[str, int | None]:
        """The exit code of each of the member's current processes by kind (None: still running)."""
        return {
            kind: p.popen.poll()
            for kind in self._member_kinds
            if (p := self._current.get((member_id, kind))) is not None
        }

    def exited(self) -> list[tuple[int, str, int, int, Path]]:
        """Every process this cluster started that has exited, by itself or killed: (member id, kind,
        pid, exit code (negative: the signal that ended it), log file)."""
        return [
            (p.member_id, p.kind, p.pid, code, p.log_path) for p in self._all if (code := p.popen.poll()) is not None
        ]

    def wait_for_exit(self, member_id: int, timeout_s: float = 10.0) -> dict[str, int]:
        """Wait until the member's processes exit by themselves (SHUTDOWN/ABORT); their exit codes."""
        procs = [p for kind in self._member_kinds if (p := self._current.get((member_id, kind))) is not None]
        wait_until(
            lambda: not any(p.running() for p in procs),
            timeout_s,
            f"member {member_id} exited",
            context=self.status_line,
        )
        return {p.kind: p.popen.returncode for p in procs}

    def pause(self, member_id: int) -> None:
        """SIGSTOP node and services (a GC pause, a stalled VM)."""
        for kind in self._member_kinds:
            p = self._process(member_id, kind)
            if p is not None:
                os.kill(p.pid, signal.SIGSTOP)
        self._paused.add(member_id)
        self._event("pause", member_id)

    def resume(self, member_id: int) -> None:
        for kind in self._member_kinds:
            p = self._process(member_id, kind)
            if p is not None:
                os.kill(p.pid, signal.SIGCONT)
        self._paused.discard(member_id)
        self._event("resume", member_id)
        if member_id in self._gate_dirty:
            self._push_gate(member_id)

    def truncate_recording(self, member_id: int, position: int) -> None:
        """Cut the member's log recording back to ``position`` (a lost disk tail); only while it is down."""
        if self.is_alive(member_id):
            raise LocalClusterError(f"truncate_recording({member_id}): member is running; kill or stop it first")

        truncate_at(self.storage(member_id), position)
        self._event("truncate", member_id, log_position=position)

    # ------------------------------------------------------------------ chaos gate
    def _push_gate(self, member_id: int) -> bool:
        """Send the member its rule for every outgoing link (a clear rule where there is none), one
        link at a time, so a change never opens a link in passing."""
        if not self.is_alive(member_id) or member_id in self._paused:
            self._gate_dirty.add(member_id)
            return False
        requests = []
        for dst in range(self.member_count):
            if dst != member_id:
                loss_ppm, delay_ns = self._gate_rules.get((member_id, dst), (0, 0))
                requests.append(GateRule(0, delay_ns, dst, loss_ppm))
        for request in requests:
            reply = self._request(member_id, request, 2.0)
            if not isinstance(reply, ControlResponse) or reply.code != ControlResponseCode.OK:
                self._gate_dirty.add(member_id)
                return False
        self._gate_dirty.discard(member_id)
        return True

    def _push_gates(self) -> None:
        for i in range(self.member_count):
            self._push_gate(i)

    def partition(self, groups: Iterable[Iterable[int]]) -> None:
        """Members talk only within their group; members in no group are isolated. Replaces every
        rule set before (delays included)."""
        group_of: dict[int, int] = {}
        for g, group in enumerate(groups):
            for m in group:
                group_of[m] = g
        self._gate_rules = {
            (src, dst): (PPM, 0)
            for src in range(self.member_count)
            for dst in range(self.member_count)
            if src != dst and (src not in group_of or group_of.get(src) != group_of.get(dst))
        }
        self._push_gates()
        self._event("partition", -1, groups=[sorted(g) for g in _groups(group_of)])

    def isolate(self, member_id: int) -> None:
        self.partition([[m for m in range(self.member_count) if m != member_id]])

    def block(self, src: int, dst: int) -> None:
        """Drop src -> dst only."""
        self.set_link(src, dst, loss=1.0)

    def unblock(self, src: int, dst: int) -> None:
        self.set_link(src, dst, loss=0.0, delay_s=0.0)

    def set_link(self, src: int, dst: int, *, loss: float | None = None, delay_s: float | None = None) -> None:
        """Loss probability and/or one-way delay of the directed link src -> dst."""
        loss_ppm, delay_ns = self._gate_rules.get((src, dst), (0, 0))
        if loss is not None:
            loss_ppm = round(loss * PPM)
        if delay_s is not None:
            delay_ns = round(delay_s * 1e9)
        if loss_ppm or delay_ns:
            self._gate_rules[(src, dst)] = (loss_ppm, delay_ns)
        else:
            self._gate_rules.pop((src, dst), None)
        self._push_gate(src)
        self._event("link", -1, src=src, dst=dst, loss_ppm=loss_ppm, delay_ns=delay_ns)

    def heal(self) -> None:
        self._gate_rules.clear()
        self._push_gates()
        self._event("heal", -1)

    def gate_rules(self) -> dict[tuple[int, int], tuple[int, int]]:
        return dict(self._gate_rules)

    def set_clock_offset(self, member_id: int, offset_s: float) -> bool:
        """Skew the member's node clock by ``offset_s`` from now on (it never runs backwards)."""
        reply = self._request(member_id, ClockOffset(0, round(offset_s * 1e9)), 2.0)
        ok = isinstance(reply, ControlResponse) and reply.code == ControlResponseCode.OK
        self._event("clock", member_id, offset_ns=round(offset_s * 1e9), accepted=ok)
        return ok

    def storage_fault(
        self, member_id: int, code: int, path_prefix: str = "archive/", *, count: int | None = None, torn: bool = False
    ) -> bool:
        """Make the running member's storage refuse writes under ``path_prefix`` with errno ``code``
        (``errno.ENOSPC``, ``errno.EIO``); ``count`` writes or until :meth:`clear_storage_fault`."""
        msg = StorageFault(0, code, -1 if count is None else count, int(torn), path_prefix)
        reply = self._request(member_id, msg, 2.0)
        ok = isinstance(reply, ControlResponse) and reply.code == ControlResponseCode.OK
        self._event("storage_fault", member_id, code=code, path_prefix=path_prefix, count=count, accepted=ok)
        return ok

    def clear_storage_fault(self, member_id: int) -> bool:
        """Remove the running member's storage faults (space freed); it stays fenced until restarted."""
        reply = self._request(member_id, StorageFault(0, 0, 0, 0, ""), 2.0)
        ok = isinstance(reply, ControlResponse) and reply.code == ControlResponseCode.OK
        self._event("storage_fault", member_id, code=0, accepted=ok)
        return ok

    # ------------------------------------------------------------------ counters and test hooks
    def counters(self, member_id: int, timeout_s: float = STATUS_TIMEOUT_S) -> ClusterCounters | None:
        """The member's consensus-module counters (Aeron's CnC counters): live from a running node's
        control socket, else the last values it persisted (``counters.json``); None if neither."""
        reply = self._request(member_id, CountersRequest(0), timeout_s)
        if isinstance(reply, Counters) and reply.started:
            return counters_of(reply)
        try:
            return read_counters_file(self.member_dir(member_id)).counters
        except CountersFileError:
            return None

    def _hook(self, member_id: int, kind: TestHookKind, value: int = 0, delay_ns: int = 0) -> bool:
        reply = self._request(member_id, TestHook(0, delay_ns, kind, value), 2.0)
        ok = isinstance(reply, ControlResponse) and reply.code == ControlResponseCode.OK
        self._event("test_hook", member_id, hook=kind.name, value=value, delay_ns=delay_ns, accepted=ok)
        return ok

    def stall_election(self, member_id: int, state: ElectionState | None, duration_s: float = 0.0) -> bool:
        """Test hook: the member stops once its election enters ``state`` (None: clear every hook), until
        cleared or, with ``duration_s``, for that long once."""
        if state is None:
            return self._hook(member_id, TestHookKind.CLEAR)
        return self._hook(member_id, TestHookKind.STALL_ELECTION_STATE, int(state), delay_ns=round(duration_s * 1e9))

    def fail_catchup(self, member_id: int, count: int = 1) -> bool:
        """Test hook: the member's next ``count`` catch-ups fail inside FOLLOWER_CATCHUP."""
        return self._hook(member_id, TestHookKind.FAIL_CATCHUP, count)

    def fail_request_vote(self, member_id: int, candidate_term_id: int | None) -> bool:
        """Test hook: other candidates' RequestVote for ``candidate_term_id`` fails there (None: clear)."""
        value = -1 if candidate_term_id is None else candidate_term_id
        return self._hook(member_id, TestHookKind.FAIL_REQUEST_VOTE, value)

    def delay_service_message(self, member_id: int, delay_s: float) -> bool:
        """Test hook: the member's service gets its next message ``delay_s`` late (the rest behind it)."""
        return self._hook(member_id, TestHookKind.DELAY_SERVICE_MESSAGE, delay_ns=round(delay_s * 1e9))

    def delay_member_messages(self, member_id: int, message: str, delay_s: float, duplicate: bool = False) -> bool:
        """Test hook: every ``message`` (``Vote``, ``AppendPosition``...) the member sends to another member
        is held ``delay_s`` (later messages overtake it), or with ``duplicate`` sent at once and again
        ``delay_s`` later; ``delay_s`` 0 removes the rule (what is held still goes when due)."""
        kind = TestHookKind.DUPLICATE_MEMBER_MESSAGE if duplicate else TestHookKind.DELAY_MEMBER_MESSAGE
        return self._hook(member_id, kind, member_message_template(message), delay_ns=round(delay_s * 1e9))

    def clear_hooks(self, member_id: int) -> bool:
        """Remove the member's test hooks."""
        return self._hook(member_id, TestHookKind.CLEAR)

    def purge_log_to_last_snapshot(self) -> dict[int, int]:
        """Aeron TestCluster.purgeLogToLastSnapshot: every running member deletes its log segments below
        its latest snapshot. Returns member -> new log start position (members that answered)."""
        starts: dict[int, int] = {}
        for member_id in self.members_alive():
            reply = self._request(member_id, PurgeSegments(0), 5.0)
            if isinstance(reply, ControlResponse) and reply.code == ControlResponseCode.OK:
                starts[member_id] = int(reply.message.removeprefix("start_position="))
        self._event("purge_segments", -1, starts=starts)
        return starts

    # ------------------------------------------------------------------ ClusterBackup
    def start_backup(
        self,
        backup_dir: Path | str | None = None,
        *,
        replay_start: str = "beginning",
        query_interval_s: float = 1.0,
        progress_timeout_s: float = 10.0,
    ) -> int:
        """Start a ClusterBackup process (clusterlab.core.runtime.backup) into ``backup_dir`` (default
        ``<dir>/backup``); its PID. ``replay_start``: ``beginning`` or ``latest-snapshot``. It is
        stopped by PID in :meth:`stop_backup` and :meth:`close`."""
        if self._closed:
            raise LocalClusterError("the cluster is closed")
        if self._backup is not None and self._backup.running():
            raise LocalClusterError(f"a backup is running already (pid {self._backup.pid})")
        directory = Path(backup_dir) if backup_dir is not None else self.directory / "backup"
        directory.mkdir(parents=True, exist_ok=True)
        incarnation = sum(1 for p in self._all if p.kind == BACKUP)
        log_path = self.config.log_dir / f"backup-{incarnation}.log"
        cmd = [
            sys.executable,
            "-m",
            "clusterlab.core.runtime.backup",
            "--dir",
            str(self.directory),
            "--backup-dir",
            str(directory.resolve()),
            "--replay-start",
            replay_start,
            "--query-interval",
            repr(query_interval_s),
            "--progress-timeout",
            repr(progress_timeout_s),
            "--exit-with-parent",
            str(os.getpid()),
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop(TEST_CONTEXT_ENV, None)
        popen = self._spawn(cmd, log_path, env)
        process = _Process(-1, BACKUP, incarnation, popen, log_path)
        self._all.append(process)
        self._backup = process
        self.backup_dir = directory
        self._write_processes()
        self._event("backup_start", -1, pid=popen.pid, replay_start=replay_start, backup_dir=str(directory))
        return popen.pid

    def backup_status(self) -> dict[str, Any] | None:
        """The backup's status file (clusterlab.core.runtime.backup), or None if there is none (yet)."""
        if self.backup_dir is None:
            return None
        try:
            return read_backup_status(self.backup_dir)
        except BackupStatusError:
            return None

    def await_backup(
        self,
        *,
        state: str = "BACKING_UP",
        live_log_position: int = 0,
        snapshots_retrieved: int = 0,
        timeout_s: float = 20.0,
    ) -> dict[str, Any]:
        """Wait until the backup is in ``state`` with at least this live log position and this many
        snapshot retrievals; its status. Raises at once if the backup process exits."""

        def reached() -> dict[str, Any] | None:
            p = self._backup
            if p is None:
                raise LocalClusterError("no backup started")
            if not p.running():
                raise LocalClusterError(f"the backup exited with {p.popen.returncode} (log {p.log_path})")
            s = self.backup_status()
            if (
                s is not None
                and s["state"] == state
                and s["live_log_position"] >= live_log_position
                and s["snapshots_retrieved_count"] >= snapshots_retrieved
            ):
                return s
            return None

        what = f"backup {state} at >= {live_log_position} with >= {snapshots_retrieved} snapshot retrievals"
        return wait_until(reached, timeout_s, what, context=lambda: str(self.backup_status()))

    def stop_backup(self) -> int | None:
        """SIGTERM the backup process (SIGKILL after ``stop_timeout_s``); its exit code, None if none ran."""
        p = self._backup
        if p is None:
            return None
        for k in _stop_processes([p], self.stop_timeout_s):
            self._event("kill", -1, process=k.kind, at="stop timeout")
        self._write_processes()
        self._event("backup_stop", -1, exit_code=p.popen.returncode)
        return p.popen.returncode

    def restore_from_backup(self, backup_dir: Path | str | None = None) -> None:
        """Aeron's restore: every member (stopped first: LocalClusterError if one runs) gets a copy of the
        backup as its directory, then all start again as new incarnations. A running backup is stopped."""
        source = Path(backup_dir) if backup_dir is not None else self.backup_dir
        if source is None:
            raise LocalClusterError("no backup directory to restore from")
        running = [i for i in range(self.member_count) if self.is_alive(i) or self._any_service_running(i)]
        if running:
            raise LocalClusterError(f"members {running} are running: stop every member before a restore")
        if self._backup is not None and self._backup.running():
            self.stop_backup()
        self._keep_log_before_restore()
        try:
            for i in range(self.member_count):
                restore_member_directory(source, self.member_dir(i))
        except ClusterToolError as e:
            raise LocalClusterError(str(e)) from None
        status = self.backup_status() if backup_dir is None else None
        self._event(
            "restore_from_backup",
            -1,
            backup_dir=str(source),
            live_log_position=status["live_log_position"] if status is not None else None,
        )
        for i in range(self.member_count):
            self._launch(i, self._node_kind)
        self._await_nodes_started(range(self.member_count))
        for i in range(self.member_count):
            for kind in self._service_processes:
                self._launch(i, kind)

    def _keep_log_before_restore(self) -> None:
        """Copy each member's log recording aside (``before-restore-<n>/member-<i>``) before a restore replaces
        it: a backup's log may start at a snapshot, and the recorder reads the committed log's start here."""
        base = self.directory / f"before-restore-{len(self.retired_dirs)}"
        for i in range(self.member_count):
            log = log_dir(self.member_dir(i))
            if log.is_dir():
                kept = base / f"member-{i}"
                shutil.copytree(log, log_dir(kept))
                self.retired_dirs.append(kept)

    def _any_service_running(self, member_id: int) -> bool:
        return any(self._process(member_id, k) is not None for k in self.service_kinds)

    # ------------------------------------------------------------------ cluster control and clients
    def control(self, target: str) -> bool:
        """Cluster control through the leader's toggle (ClusterTool): ``snapshot``, ``suspend``,
        ``resume``, ``shutdown`` or ``abort``. False if there is no leader or the toggle is busy."""
        try:
            toggle = ToggleState[target.upper()]
        except KeyError:
            raise ValueError(f"unknown control action {target!r}") from None
        leader = self.leader_id()
        if leader is None:
            return False
        reply = self._request(leader, ClusterControlRequest(0, toggle), 2.0)
        ok = isinstance(reply, ControlResponse) and reply.code == ControlResponseCode.OK
        self._event("control", leader, action=target, accepted=ok)
        return ok

    def client(
        self,
        *,
        connect: bool = True,
        timeout_s: float = 10.0,
        credentials: ClientCredentials | None = None,
        anonymous: bool = False,
        first_member: int = 0,
    ) -> LocalClient:
        """A new client (its own session); connected unless ``connect`` is False. On a secured
        cluster it presents ``credentials`` (default: the cluster's own, from its keys directory)
        unless ``anonymous``. ``first_member``: the member it asks first (a follower redirects it to
        the leader)."""
        client_id = len(self.clients)
        recorder = (
            process_recorder(
                self.trace_dir, self.run_id, f"client-{client_id}", member_id=-1, incarnation=0, clock=time.monotonic_ns
            )
            if self.trace_dir is not None
            else None
        )
        client = LocalClient(
            self.config,
            zctx=self.zctx,
            recorder=recorder,
            client_id=client_id,
            credentials=credentials,
            anonymous=anonymous,
            first_member=first_member,
        )
        self.clients.append(client)
        if connect:
            client.connect(timeout_s)
        return client


def _groups(group_of: dict[int, int]) -> list[list[int]]:
    out: dict[int, list[int]] = {}
    for m, g in group_of.items():
        out.setdefault(g, []).append(m)
    return list(out.values())


_client_names = itertools.count()


CLIENT_ID_STRIDE = 1_000_000_000  # request ids of client k start at 1 + k * stride


def tag_client(payload: bytes, dedupe_id: int) -> bytes:
    """A JSON request with the ``client`` field (``dedupe_id``) added, by which a deduplicating service
    (the kv service) applies a resent request once; other payloads, and requests already tagged, as they are."""
    try:
        command = json.loads(payload)
    except ValueError:
        return payload  # not a JSON command: sent as it is
    if not isinstance(command, dict) or "client" in command:
        return payload
    command["client"] = dedupe_id
    return json.dumps(command, sort_keys=True, separators=(",", ":")).encode()


class LocalClientTimeout(AssertionError):
    """A request got no reply in time (with every retry)."""


class LocalClient:
    """A blocking client of a local cluster: KV requests with replies matched by request id.

    ``request`` resends an unanswered request (same id) after ``attempt_timeout_s`` and reconnects
    after two unanswered attempts, so it rides through leader changes: it follows NewLeaderEvent
    and REDIRECT through ClusterClient. A request is therefore *at least once*: a reply means the
    request is in the committed log (the service only answers committed entries)."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        zctx: Any = None,
        request_timeout_s: float = 15.0,
        attempt_timeout_s: float | None = None,
        recorder: Any = None,
        client_id: int = 0,
        credentials: ClientCredentials | None = None,
        anonymous: bool = False,
        first_member: int = 0,
    ) -> None:
        """``credentials``: what the client presents to the cluster's authenticator (a secured
        cluster rejects a client without them; default there: the cluster's own, from its keys
        directory, unless ``anonymous``); on a secured cluster the client also uses the cluster's
        client key (CURVE) for ingress and its response channel."""
        if credentials is None and config.secure and not anonymous:
            credentials = ClientCredentials.from_file(credentials_path(config.directory))
        self.config = config
        # Jepsen-style history in the trace's ``ops`` table: invoke, then ok / fail, or info when the
        # outcome is unknown (no reply by close). NullRecorder when the cluster does not record.
        self.recorder = recorder if recorder is not None else process_recorder(None, "", "client")
        self.client_id = client_id
        # The identity the kv service deduplicates on: unique across clients, processes and restarts
        # of the cluster (``client_id`` only numbers this run's clients in the ops table).
        self.dedupe_id = int.from_bytes(os.urandom(6), "little")
        # Whether the service applies a resent request once: then JSON requests carry ``client``
        # (``dedupe_id``) and unanswered ones are resent (here on silence, by the ClusterClient on a
        # new leader); else every request is sent once, as it is (a workload's ``resend``).
        self.resends = True
        self._open_ops: dict[int, tuple[str, str | None, str | None]] = {}  # request id -> (f, key, value)
        name = f"c{os.getpid()}-{next(_client_names)}-{os.urandom(3).hex()}"
        t = config.timeouts
        # A secured cluster: the client key for ingress and the response channel; a client with a
        # context of its own runs the ZAP handler that admits members' egress there.
        self._own_context: Any = None
        self._security: ProcessSecurity | None = None
        if config.secure and zctx is None:
            zctx = self._own_context = new_context()
        security = ProcessSecurity(
            config.directory, config.secure, CLIENT, zctx, authenticate=self._own_context is not None
        )
        if self._own_context is not None:
            self._security = security
        members = config.members[first_member:] + config.members[:first_member]  # asked in this order
        self.conn = ClusterConnection(
            {m.member_id: m.ingress for m in members},
            config.client_endpoint(name),
            zctx=zctx,
            message_timeout_ns=max(5 * 10**9, 2 * t.leader_heartbeat_timeout_ns),
            keepalive_interval_ns=max(t.session_timeout_ns // 4, 10**7),
            credentials=credentials.connect_credentials if credentials is not None else b"",
            on_challenge=credentials.on_challenge if credentials is not None else None,
            ingress_setup=security.connector_for_member if config.secure else None,
            egress_setup=(lambda sock: security.serve(sock, DOMAIN_EGRESS)) if config.secure else None,
        )
        self.request_timeout_s = request_timeout_s
        self.attempt_timeout_s = (
            attempt_timeout_s if attempt_timeout_s is not None else max(1.0, 2 * t.leader_heartbeat_timeout_ns / 1e9)
        )
        # How long a request's (re)connect may block: a chaos workload keeps it short so a step never
        # outlasts its fault (clusterlab.chaos.workload.LocalWorkload sets it).
        self.connect_timeout_s = 10.0
        # Request ids (the ops table's op_id) unique across a run's clients, so the durability check
        # can match an acknowledged op to its log entry by id when several clients run at once.
        self._next_id = 1 + client_id * CLIENT_ID_STRIDE
        self.replies: dict[int, dict[str, Any]] = {}
        self.other_messages: list[bytes] = []
        self.reconnects = 0

    @property
    def client(self) -> Any:
        """The ClusterClient (state, leader, session id)."""
        return self.conn.client

    def connect(self, timeout_s: float = 10.0) -> None:
        """Open a session, retrying while the cluster elects (raises LocalClientTimeout)."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.conn.client.is_connected:
                return
            try:
                self.conn.connect(max(0.05, deadline - time.monotonic()))
                return
            except (ClusterTimeoutError, TimeoutError) as e:
                last = e
            except ConnectError as e:
                last = e
                # Answers a retry within this connect does not change: wrong credentials; a full
                # cluster (until sessions close or expire: the caller decides whether to wait).
                if SESSION_LIMIT in e.detail or e.code == EventCode.AUTHENTICATION_REJECTED:
                    raise
        raise LocalClientTimeout(f"no session within {timeout_s} s: {last}; {self.conn.client.describe()}")

    def _collect(self) -> None:
        for m in self.conn.take_messages():
            try:
                reply = kv.decode_reply(m.payload)
                rid = reply.get("id")
            except (ValueError, UnicodeDecodeError):
                rid = None
            if isinstance(rid, int):
                self.replies[rid] = reply
                self.conn.client.acknowledge(rid)
                self._record_completion(rid, reply)
            else:
                self.other_messages.append(m.payload)

    def pump(self, timeout_s: float = 0.0) -> None:
        """Handle egress and keep the session alive for ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while True:
            self.conn.pump(max(0.0, min(0.05, end - time.monotonic())))
            self._collect()
            if time.monotonic() >= end:
                return

    def submit(self, build: Callable[[int], bytes]) -> int:
        """Send ``build(request_id)`` now (pipelining); returns the request id."""
        rid = self._next_id
        self._next_id += 1
        payload = self._tagged(build(rid))
        self._record_invoke(rid, payload)
        self._offer(payload)
        return rid

    def _tagged(self, payload: bytes) -> bytes:
        """The request with this client's id added, so the kv service applies a resend only once
        (as it is when the client does not resend)."""
        return tag_client(payload, self.dedupe_id) if self.resends else payload

    def _record_invoke(self, rid: int, payload: bytes) -> None:
        try:
            command = json.loads(payload)
        except ValueError:
            command = {}
        f, key, value = str(command.get("op", "?")), command.get("key"), command.get("value")
        self._open_ops[rid] = (f, key, value)
        # The other argument a checker needs: cas's expected value, add's delta (as JSON).
        arg = "expected" if f == "cas" else "delta" if f == "add" else None
        self.recorder.op(
            self.client_id,
            rid,
            "invoke",
            f,
            key,
            None if value is None else str(value),
            cluster_session_id=self.conn.client.cluster_session_id if self.conn.client.is_connected else None,
            arg=json.dumps(command.get(arg)) if arg is not None and arg in command else None,
        )

    def _record_completion(self, rid: int, reply: dict[str, Any]) -> None:
        op = self._open_ops.pop(rid, None)
        if op is None:
            return  # a repeated reply (the service answers again after a leader change)
        f, key, value = op
        # A reply means the command is in the committed log; an "error" reply changed nothing.
        kind = "fail" if "error" in reply else "ok"
        result = reply.get("error") if kind == "fail" else json.dumps(reply.get("value"))
        self.recorder.op(
            self.client_id,
            rid,
            kind,
            f,
            key,
            None if value is None else str(value),
            result,
            cluster_session_id=self.conn.client.cluster_session_id,
        )

    def _offer(self, payload: bytes, timeout_s: float | None = None) -> None:
        connect_s = self.connect_timeout_s if timeout_s is None else min(self.connect_timeout_s, timeout_s)
        if not self.conn.client.is_connected:
            self.connect(connect_s)
        rid = self._dedupe_request_id(payload)
        try:
            self.conn.offer(payload, request_id=rid)
        except (SessionClosedError, ClientError):
            self.connect(connect_s)
            self.conn.offer(payload, request_id=rid)

    def _dedupe_request_id(self, payload: bytes) -> int | None:
        """The request id of a request tagged with this client's dedupe id (the kv service applies it
        once, so the ClusterClient may resend it on a new leader), else None."""
        if not self.resends:
            return None
        try:
            command = json.loads(payload)
        except ValueError:
            return None
        if isinstance(command, dict) and command.get("client") == self.dedupe_id and isinstance(command.get("id"), int):
            return int(command["id"])
        return None

    def wait(self, request_ids: Iterable[int], timeout_s: float) -> dict[int, dict[str, Any]]:
        """Replies to these ids that arrive within ``timeout_s`` (possibly not all)."""
        ids = set(request_ids)
        end = time.monotonic() + timeout_s
        while True:
            self._collect()
            if ids <= self.replies.keys():
                break
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            self.conn.pump(min(remaining, 0.05))
        return {i: self.replies[i] for i in ids if i in self.replies}

    def request(self, build: Callable[[int], bytes], timeout_s: float | None = None) -> dict[str, Any]:
        """Send ``build(request_id)`` and return the service's reply; resend/reconnect on silence."""
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        rid = self._next_id
        self._next_id += 1
        payload = self._tagged(build(rid))
        self._record_invoke(rid, payload)
        attempts = 0
        while True:
            attempts += 1
            try:
                if attempts > 1 and attempts % 2 == 1:
                    # Two attempts unanswered: our session may be gone with the old leader.
                    self.reconnects += 1
                    self.conn.client.close(self.conn.clock.now_ns())
                self._offer(payload, max(0.05, deadline - time.monotonic()))  # a reconnect ends by the deadline too
            except (ClientError, LocalClientTimeout):
                pass
            got = self.wait([rid], min(self.attempt_timeout_s, max(0.0, deadline - time.monotonic())))
            if rid in got:
                return self.replies.pop(rid)
            if time.monotonic() >= deadline:
                raise LocalClientTimeout(
                    f"no reply to request {rid} within {timeout_s} s ({attempts} attempts): "
                    f"{self.conn.client.describe()}"
                )

    def begin(self, build: Callable[[int], bytes]) -> tuple[int, bytes]:
        """Start a request without waiting (``request``'s first attempt): its id and the bytes to
        :meth:`resend`. A concurrent workload drives several clients this way from one thread."""
        rid = self._next_id
        self._next_id += 1
        payload = self._tagged(build(rid))
        self._record_invoke(rid, payload)
        self.resend(payload, reconnect=False)
        return rid, payload

    def resend(self, payload: bytes, *, reconnect: bool) -> None:
        """Send a request again (same id: the kv service applies it once); ``reconnect``: open a new
        session first (the old one may have gone with its leader)."""
        try:
            if reconnect:
                self.reconnects += 1
                self.conn.client.close(self.conn.clock.now_ns())
            self._offer(payload)
        except (ClientError, LocalClientTimeout):
            pass

    def take_reply(self, rid: int) -> dict[str, Any] | None:
        """The reply to ``rid`` if it has arrived (handles egress first, without blocking)."""
        with contextlib.suppress(ClientError):
            self.conn.pump(0.0)
        self._collect()
        return self.replies.pop(rid, None)

    # --- KV helpers (clusterlab.harness.services.kv)
    def put(self, key: str, value: str, timeout_s: float | None = None) -> dict[str, Any]:
        return self.request(lambda rid: kv.put(rid, key, value), timeout_s)

    def get(self, key: str, timeout_s: float | None = None) -> dict[str, Any]:
        return self.request(lambda rid: kv.get(rid, key), timeout_s)

    def cas(self, key: str, expected: str | None, value: str, timeout_s: float | None = None) -> dict[str, Any]:
        return self.request(lambda rid: kv.cas(rid, key, expected, value), timeout_s)

    def delete(self, key: str, timeout_s: float | None = None) -> dict[str, Any]:
        return self.request(lambda rid: kv.delete(rid, key), timeout_s)

    def close(self) -> None:
        for rid, (f, key, value) in sorted(self._open_ops.items()):
            self.recorder.op(self.client_id, rid, "info", f, key, None if value is None else str(value))
        self._open_ops.clear()
        self.recorder.close()
        try:
            self.conn.close()
        finally:
            if self._security is not None:
                self._security.close()
            if self._own_context is not None:
                self._own_context.term()


def load_config(directory: Path | str) -> ClusterConfig:
    """The configuration of a cluster directory (ConfigError with one clear line if there is none)."""
    return ClusterConfig.load(directory)


__all__ = [
    "ConfigError",
    "LocalClient",
    "LocalClientTimeout",
    "LocalCluster",
    "LocalClusterError",
    "LocalTimeout",
    "MemberStatus",
    "load_config",
    "pid_alive",
    "wait_until",
]
