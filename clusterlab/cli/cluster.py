"""The real-cluster commands of ``clusterlab``: ``cluster start|backup|restore``, ``client`` and ``tool``.

``register(subparsers)`` adds them to the ``clusterlab`` parser (clusterlab/cli/__init__.py).

    clusterlab cluster start [--members 3] [--service kv | --services kv,counter] [--dir D] [--tcp]
                             [--secure | --no-secure] [--segment-length 128m]
        run a local cluster in the foreground with a live status table; Ctrl-C stops it cleanly
        (an existing D with a cluster.json is restarted from disk; a D in use is refused).
        --secure (the default with --tcp): CURVE keys and ZAP on every socket, client credentials
    clusterlab cluster backup --dir D --backup-dir B [--replay-start beginning|latest-snapshot]
                              [--query-interval S] [--progress-timeout S] [--credentials FILE]
        ClusterBackup of the running cluster D into B in the foreground, until Ctrl-C or SIGTERM
        (a backup process: clusterlab.core.runtime.backup; B/backup-status.json, B/backup.log)
    clusterlab cluster restore --dir D --from B
        every member of the stopped cluster D gets a copy of backup B as its state (refused while a
        member or the backup runs); then ``cluster start --dir D`` starts it from there
    clusterlab client --dir D [--credentials FILE] put KEY VALUE | get KEY | cas ... | delete KEY
        one KV request through a client session; prints the reply as JSON. A secured cluster
        needs credentials (a ``user:password`` file; default: the cluster's own D/keys/client.credentials)
    clusterlab tool D list-members | snapshot | suspend | resume | shutdown | abort
        ClusterTool: member status, or cluster control through the leader's toggle (the parser and
        the member-directory actions are in clusterlab/cli/tool.py)
    clusterlab tool B backup-query
        ClusterTool backup-query: the state of the backup in B (its status file)

Wrong arguments, a missing directory or an unreachable cluster print one line on stderr and exit
non-zero (2 for usage, 1 for everything else).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.live import Live
from rich.table import Table

from clusterlab.chaos.limits import MEMBERS, REFRESH_S, SEED, TIMEOUT_S, Limit
from clusterlab.cli.paths import bounded, ranged
from clusterlab.core.codec.control import (
    ClusterControlRequest,
    ControlResponse,
    ControlResponseCode,
    NodeStatus,
    StatusRequest,
)
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.runtime.config import ClusterConfig, ConfigError, parse_services
from clusterlab.core.runtime.control import ControlClient
from clusterlab.core.runtime.security import ADMIN, ProcessSecurity
from clusterlab.core.runtime.transport import new_context
from clusterlab.harness.cluster_tool import stopped_member_health
from clusterlab.harness.local import (
    LocalClient,
    LocalClientTimeout,
    LocalCluster,
    LocalClusterError,
    LocalTimeout,
    MemberStatus,
)
from clusterlab.harness.services import kv

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
CONTROL_ACTIONS = ("snapshot", "suspend", "resume", "shutdown", "abort")
BACKUP_QUERY_INTERVAL_S = Limit(0.01, 3600.0, "seconds")  # as clusterlab.core.runtime.backup checks them
BACKUP_PROGRESS_TIMEOUT_S = Limit(0.1, 3600.0, "seconds")


class CommandError(Exception):
    """Fails the command with one line on stderr and exit code 1."""


def _one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """argparse prints usage and an error; we print the error alone, on one line."""

    def error(message: str) -> NoReturn:
        print(f"{parser.prog}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)

    parser.error = error  # type: ignore[method-assign]
    return parser


def register(subparsers: Any) -> None:
    """Add ``cluster``, ``client`` and ``tool`` to a ``clusterlab`` subparsers object."""
    cluster = _one_line_errors(subparsers.add_parser("cluster", help="run a local multi-process cluster"))
    actions = cluster.add_subparsers(dest="cluster_action", metavar="ACTION")
    actions.required = True
    _register_start(actions)
    _register_backup(actions)
    _register_restore(actions)
    _register_client(subparsers)
    # ``tool`` is registered by clusterlab/cli/tool.py (it runs cmd_tool for the cluster-wide actions).


def _register_start(actions: Any) -> None:
    """``cluster start``: a local cluster in the foreground."""
    start = _one_line_errors(
        actions.add_parser("start", help="start a local cluster in the foreground (Ctrl-C stops it)")
    )
    start.add_argument(
        "--members", type=bounded(MEMBERS), default=3, help=ranged("number of members (default 3)", MEMBERS)
    )
    start.add_argument("--service", default="kv", help="service: kv, counter, echo, module:factory, none")
    start.add_argument(
        "--services",
        default=None,
        metavar="KINDS",
        help="several clustered services per member, e.g. kv,counter (service ids 0, 1, ...; replaces --service)",
    )
    start.add_argument("--dir", type=Path, default=None, help="cluster directory (default: a new temp dir)")
    start.add_argument("--tcp", action="store_true", help="tcp://127.0.0.1 with OS-assigned ports, not ipc")
    start.add_argument(
        "--secure",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="CURVE keys + ZAP authentication and client credentials (default: on with --tcp, off on ipc)",
    )
    start.add_argument("--seed", type=bounded(SEED), default=0, help=ranged("the members' seed (default 0)", SEED))
    start.add_argument(
        "--refresh",
        type=bounded(REFRESH_S),
        default=0.5,
        help=ranged("status table refresh interval, seconds (default 0.5)", REFRESH_S),
    )
    start.add_argument("--no-record", action="store_true", help="no trace recording (nothing written under DIR/trace)")
    start.add_argument(
        "--segment-length",
        default=None,
        metavar="BYTES",
        help="archive segment file length (Aeron's aeron.archive.segment.file.length): a power of two "
        "from 64k to 1g, suffix k/m/g allowed (default 128m; a restarted DIR keeps its own)",
    )
    start.set_defaults(func=_guarded(cmd_cluster_start, "cluster start"))


def _register_backup(actions: Any) -> None:
    """``cluster backup``: a ClusterBackup of a running local cluster."""
    backup = _one_line_errors(
        actions.add_parser(
            "backup",
            help="back a running local cluster up into a directory (ClusterBackup) until Ctrl-C or SIGTERM",
        )
    )
    backup.add_argument("--dir", type=Path, required=True, help="the running cluster's directory (holds cluster.json)")
    backup.add_argument(
        "--backup-dir", type=Path, required=True, help="where the backup goes (created if missing; resumed if a backup)"
    )
    backup.add_argument(
        "--replay-start",
        choices=("beginning", "latest-snapshot"),
        default="beginning",
        help="where an empty backup's log starts: the cluster's log start or its latest snapshot (default beginning)",
    )
    backup.add_argument(
        "--query-interval",
        type=bounded(BACKUP_QUERY_INTERVAL_S),
        default=1.0,
        metavar="S",
        help=ranged("seconds between backup queries (default 1)", BACKUP_QUERY_INTERVAL_S),
    )
    backup.add_argument(
        "--progress-timeout",
        type=bounded(BACKUP_PROGRESS_TIMEOUT_S),
        default=10.0,
        metavar="S",
        help=ranged("seconds without progress before asking the next member (default 10)", BACKUP_PROGRESS_TIMEOUT_S),
    )
    backup.add_argument(
        "--credentials",
        type=Path,
        default=None,
        metavar="FILE",
        help="a 'user:password' file answering the members' authenticator (default: a secured cluster's client "
        "credentials; an open cluster asks none)",
    )
    backup.set_defaults(func=_guarded(cmd_cluster_backup, "cluster backup"))


def _register_restore(actions: Any) -> None:
    """``cluster restore``: every stopped member's state from a backup."""
    restore = _one_line_errors(
        actions.add_parser("restore", help="replace every stopped member's state with a copy of a backup")
    )
    restore.add_argument("--dir", type=Path, required=True, help="the cluster's directory (holds cluster.json)")
    restore.add_argument(
        "--from", dest="source", type=Path, required=True, metavar="BACKUP_DIR", help="a `cluster backup` directory"
    )
    restore.set_defaults(func=_guarded(cmd_cluster_restore, "cluster restore"))


def _register_client(subparsers: Any) -> None:
    """``client``: one KV command to a running cluster."""
    client = _one_line_errors(subparsers.add_parser("client", help="send a KV command to a running cluster"))
    client.add_argument("--dir", type=Path, required=True, help="the cluster directory (holds cluster.json)")
    client.add_argument(
        "--timeout",
        type=bounded(TIMEOUT_S),
        default=10.0,
        help=ranged("seconds to wait for the reply (default 10)", TIMEOUT_S),
    )
    client.add_argument(
        "--credentials",
        type=Path,
        default=None,
        help="a 'user:password' file for a secured cluster (default: DIR/keys/client.credentials)",
    )
    ops = client.add_subparsers(dest="op", metavar="OP")
    ops.required = True
    put = _one_line_errors(ops.add_parser("put", help="put KEY VALUE"))
    put.add_argument("key")
    put.add_argument("value")
    get = _one_line_errors(ops.add_parser("get", help="get KEY"))
    get.add_argument("key")
    cas = _one_line_errors(ops.add_parser("cas", help="cas KEY VALUE [--expected OLD] (no --expected: if absent)"))
    cas.add_argument("key")
    cas.add_argument("value")
    cas.add_argument("--expected", default=None)
    delete = _one_line_errors(ops.add_parser("delete", help="delete KEY"))
    delete.add_argument("key")
    client.set_defaults(func=_guarded(cmd_client, "client"))


# ---------------------------------------------------------------------------------- helpers
def _load(directory: Path) -> ClusterConfig:
    from clusterlab.cli.paths import directory_error

    if directory.is_file():
        raise CommandError(directory_error("the cluster directory", directory))
    try:
        return ClusterConfig.load(directory)
    except ConfigError as e:
        raise CommandError(str(e)) from None


def _guarded(func: Any, name: str) -> Any:
    """The command, with CommandError turned into one line on stderr and exit code 1."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args) or 0)
        except CommandError as e:
            print(f"clusterlab {name}: {e}", file=sys.stderr)
            return EXIT_FAILED

    run.__doc__ = func.__doc__
    return run


class ClusterTool:
    """Status and cluster control of a running cluster through its members' control sockets."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self._zctx = new_context()
        try:  # a secured cluster's control sockets take the operator's (admin) key only
            security = ProcessSecurity(config.directory, config.secure, ADMIN, self._zctx, authenticate=False)
        except ConfigError as e:
            self._zctx.term()
            raise CommandError(str(e)) from None
        self._controls = {
            m.member_id: ControlClient(self._zctx, m.control, security.connector_for_member(m.member_id))
            for m in config.members
        }

    def statuses(self, timeout_s: float) -> dict[int, NodeStatus | None]:
        out: dict[int, NodeStatus | None] = {}
        for member_id, control in self._controls.items():
            reply = control.request(StatusRequest(0), timeout_s)
            out[member_id] = reply if isinstance(reply, NodeStatus) else None
        return out

    def control(self, member_id: int, toggle: ToggleState, timeout_s: float) -> ControlResponse | None:
        reply = self._controls[member_id].request(ClusterControlRequest(0, toggle), timeout_s)
        return reply if isinstance(reply, ControlResponse) else None

    def close(self) -> None:
        for control in self._controls.values():
            control.close()
        self._zctx.term()


def _leader(statuses: dict[int, Any]) -> int | None:

    decoded = {i: (MemberStatus.of(s) if s is not None else None) for i, s in statuses.items()}
    return LocalCluster.settled_leader(decoded)


def _status_cells(m: Any) -> list[str]:
    """The table cells of one member (a clusterlab.harness.local.MemberStatus)."""
    return [
        m.role.name if m.role is not None else "STARTING",
        str(m.leadership_term_id),
        m.election_state.name if m.election_state is not None else "-",
        str(m.commit_position),
        str(m.append_position),
        str(m.session_count),
        m.module_state.name if m.module_state is not None else "-",
        str(m.pid),
        m.health or "ok",
    ]


COLUMNS = ("member", "role", "term", "election", "commit", "append", "sessions", "state", "pid", "health")


# ---------------------------------------------------------------------------------- cluster start
def cmd_cluster_start(args: argparse.Namespace) -> int:
    check_member_limits(args.members)
    check_start_arguments(args)
    service = None if args.service == "none" else args.service
    services = parse_services(args.services) if args.services is not None else None
    directory = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="clusterlab-"))
    existing = (directory / "cluster.json").exists()

    def on_sigterm(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    # Without a terminal (background, CI) rich would wrap at 80 columns and draw boxes: plain lines.
    console = Console(stderr=False) if sys.stdout.isatty() else Console(stderr=False, width=10_000, no_color=True)
    try:
        cluster = LocalCluster(
            members=None if existing else args.members,
            service=service,
            services=services,
            directory=directory,
            tcp=args.tcp,
            secure=args.secure,
            seed=args.seed,
            keep_directory=True,
            record=not args.no_record,
            archive_segment_length=args.segment_length_bytes,
            test_context=False,  # a cluster to try things on runs as production does: plain disks, no test hooks
        )
    except (ConfigError, LocalClusterError) as e:
        raise CommandError(str(e)) from None
    try:
        console.print(
            f"{'restarting' if existing else 'starting'} a {cluster.member_count}-member cluster "
            f"in {cluster.directory} (service {','.join(cluster.config.service_kinds) or None}, "
            f"{cluster.config.transport}"
            f"{'' if cluster.trace_dir is not None else ', not recorded'}"
            f"{', secured' if cluster.config.secure else ''}); Ctrl-C or SIGTERM stops it"
        )
        try:
            try:
                cluster.__enter__()
            except (LocalTimeout, LocalClusterError) as e:
                raise CommandError(str(e).splitlines()[0]) from None
            if console.is_terminal:
                _watch_live(cluster, console, args.refresh)
            else:
                _watch_plain(cluster, args.refresh)
            console.print("every member has stopped (shutdown or abort): exiting")
        except KeyboardInterrupt:
            console.print(("\n" if console.is_terminal else "") + "stopping the cluster ...")  # after ^C
    finally:
        cluster.close()
    console.print(f"stopped; the cluster's files are in {cluster.directory}")
    return EXIT_OK


def check_start_arguments(args: argparse.Namespace) -> None:
    """``cluster start``'s --refresh, --dir and --service, before anything starts."""
    import importlib.util

    from clusterlab.cli.paths import services_error, writable_directory_error

    args.segment_length_bytes = None if args.segment_length is None else parse_segment_length(args.segment_length)
    if args.dir is not None and (error := writable_directory_error("--dir", args.dir)) is not None:
        raise CommandError(error)
    if args.services is not None:
        if (error := services_error(args.services)) is not None:
            raise CommandError(error)
        return
    if args.service == "none":
        return
    if ":" not in args.service:
        from clusterlab.harness.services import SERVICES

        if args.service not in SERVICES:
            raise CommandError(
                f"unknown service {args.service!r}: use one of {sorted(SERVICES)}, module:factory or none"
            )
        return
    from clusterlab.chaos.workload_api import WorkloadSpecError, check_service_factory, import_from_cwd

    import_from_cwd()  # found in the current directory first (members get its package's parent on PYTHONPATH)
    module, _, factory = args.service.partition(":")
    try:
        found = importlib.util.find_spec(module) if module else None
    except (ImportError, ValueError):
        found = None
    if found is None or not factory.isidentifier():
        raise CommandError(f"--service {args.service}: no module {module!r} to import, or no factory name after ':'")
    try:
        check_service_factory(args.service)  # it makes a ClusteredService
    except WorkloadSpecError as e:
        raise CommandError(f"--service {e}") from None


_SIZE_SUFFIXES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_segment_length(text: str) -> int:
    """``--segment-length``: bytes, optionally with a k/m/g suffix; CommandError names what is wrong."""
    from clusterlab.core.runtime.config import segment_length_error

    raw = text.strip().lower()
    scale = _SIZE_SUFFIXES.get(raw[-1:], 1)
    digits = raw[:-1] if scale != 1 else raw
    if not digits.isdigit():
        raise CommandError(f"--segment-length {text!r} is not a number of bytes (e.g. 524288, 512k, 128m)")
    value = int(digits) * scale
    if (error := segment_length_error("--segment-length", value)) is not None:
        raise CommandError(error)
    return value


# Open files a member process needs for an N-member cluster (measured: 59 at 3 members, 85 at 5;
# ZeroMQ links to every peer on four channels), with headroom.
def files_per_member(members: int) -> int:
    """Open files one member process of an ``members``-member cluster needs (an estimate with headroom)."""
    return 16 * members + 32


def check_member_limits(members: int) -> None:
    """Refuse, before starting anything, a cluster the open-file or process limits cannot hold."""
    import os
    import resource

    files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = files_per_member(members)
    if files != resource.RLIM_INFINITY and need > files:
        raise CommandError(
            f"--members {members} needs about {need} open files per member process, but the limit is {files} "
            f"(ulimit -n); at most {max(1, (files - 32) // 16)} members fit"
        )
    procs, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if procs != resource.RLIM_INFINITY:
        uid = os.getuid()
        running = 0
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    running += entry.stat().st_uid == uid
                except OSError:
                    continue
        if running + 2 * members > procs:
            raise CommandError(
                f"--members {members} starts {2 * members} processes, but only {max(0, procs - running)} more "
                f"are allowed (ulimit -u {procs}, {running} running)"
            )


def _watch_live(cluster: Any, console: Any, refresh_s: float) -> None:
    """On a terminal: a live status table until every member has stopped."""
    from rich.table import Table

    def table() -> Table:
        t = Table(title=f"clusterlab cluster {cluster.directory}")
        for column in COLUMNS:
            t.add_column(column)
        for i, s in cluster.statuses().items():
            if s is not None:
                t.add_row(str(i), *_status_cells(s), style="bold red" if s.health else None)
            else:
                t.add_row(str(i), _member_state(cluster, i), *[""] * (len(COLUMNS) - 3), _why_down(cluster, i))
        return t

    with Live(table(), console=console, refresh_per_second=4, transient=False) as live:
        while cluster.members_alive():
            time.sleep(refresh_s)  # the display's refresh interval, not synchronisation
            live.update(table())


def _watch_plain(cluster: Any, refresh_s: float) -> None:
    """Without a terminal: one plain line each time the members' status changes, until they stop."""
    last = ""
    while cluster.members_alive():
        line = plain_status(cluster)
        if line != last:
            print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)
            last = line
        time.sleep(refresh_s)  # the status poll interval, not synchronisation


def plain_status(cluster: Any) -> str:
    """The members' status on one line: ``0:LEADER term=1 ... | 1:FOLLOWER ...``."""
    parts = []
    for i, s in cluster.statuses().items():
        if s is not None:
            parts.append(s.describe())
        else:
            why = _why_down(cluster, i)
            parts.append(f"{i}:{_member_state(cluster, i)}" + (f" [{why}]" if why else ""))
    return " | ".join(parts)


def _member_state(cluster: Any, member_id: int) -> str:
    if cluster.is_paused(member_id):
        return "paused"
    return "no answer" if cluster.is_alive(member_id) else "down"


def _why_down(cluster: Any, member_id: int) -> str:
    """Why a member that does not answer stopped, as its node wrote on its way out; "" if unknown."""
    if cluster.is_alive(member_id):
        return ""
    return stopped_member_health(cluster.member_dir(member_id))


# ---------------------------------------------------------------------------------- backup, restore
def cmd_cluster_backup(args: argparse.Namespace) -> int:
    """Run a ClusterBackup (clusterlab.core.runtime.backup) in the foreground until Ctrl-C or SIGTERM."""
    from clusterlab.cli.paths import writable_directory_error
    from clusterlab.core.runtime import backup

    config = _load(args.dir)
    if not config.sockets_present:
        raise CommandError(f"the cluster at {config.directory} is not running (no control sockets)")
    if (error := writable_directory_error("--backup-dir", args.backup_dir)) is not None:
        raise CommandError(error)
    if args.backup_dir.resolve() == config.directory.resolve() or args.backup_dir.resolve() in [
        config.member_dir(m.member_id).resolve() for m in config.members
    ]:
        raise CommandError(f"--backup-dir {args.backup_dir} is the cluster's (or a member's) own directory")
    print(
        f"backing up the cluster at {config.directory} into {args.backup_dir} (replay start {args.replay_start}; "
        f"log {args.backup_dir / backup.LOG_FILE_NAME}); Ctrl-C or SIGTERM stops it",
        flush=True,
    )

    def refuse(message: str) -> None:
        raise CommandError(f"the backup did not start: {message}")

    with contextlib.suppress(KeyboardInterrupt):  # a Ctrl-C before the backup's own signal handlers
        backup.run_backup(args, refuse)
    status = read_status_line(args.backup_dir)
    print(f"stopped; the backup is in {args.backup_dir} ({status})")
    return EXIT_OK


def read_status_line(backup_dir: Path) -> str:
    """``state=... live_log_position=...`` from the backup's status file, or why it is unreadable."""
    from clusterlab.core.runtime.backup import BackupStatusError, read_backup_status

    try:
        s = read_backup_status(backup_dir)
    except BackupStatusError as e:
        return str(e)
    return f"state={s['state']} live_log_position={s['live_log_position']} snapshots={s['snapshots_retrieved_count']}"


def cmd_cluster_restore(args: argparse.Namespace) -> int:
    """Replace every member's durable state with a copy of ``--from`` (the cluster must be stopped)."""
    from clusterlab.core.runtime.dirlock import DirectoryLockError, lock_cluster_directory
    from clusterlab.harness.cluster_tool import ClusterToolError, is_node_running, restore_member_directory

    config = _load(args.dir)
    if not args.source.is_dir():
        raise CommandError(f"--from {args.source}: no such backup directory")
    running = [m.member_id for m in config.members if is_node_running(config.member_dir(m.member_id))]
    if running:
        raise CommandError(
            f"members {running} of the cluster at {config.directory} are running: stop the cluster first"
        )
    try:
        lock = lock_cluster_directory(config.directory)
    except DirectoryLockError as e:
        raise CommandError(str(e)) from None
    try:
        for m in config.members:
            restore_member_directory(args.source, config.member_dir(m.member_id))
    except (ClusterToolError, OSError) as e:
        raise CommandError(str(e)) from None
    finally:
        lock.release()
    print(
        f"restored {len(config.members)} members of {config.directory} from {args.source} "
        f"({read_status_line(args.source)}); start it with: clusterlab cluster start --dir {config.directory}"
    )
    return EXIT_OK


# ---------------------------------------------------------------------------------- client
EXIT_UNKNOWN = 3  # no reply: the request may or may not be applied
STATUS_BUDGET_S = 1.0  # at most this much of --timeout goes to asking the members why there was no reply


def cmd_client(args: argparse.Namespace) -> int:
    """One KV request; ``--timeout`` bounds the whole command. Exit 0: a reply with ``ok`` (or no ``ok``
    field); 1: ``ok: false``, an error, or no session (the request was not sent); 3: sent but no reply,
    outcome unknown."""
    started = time.monotonic()
    config = _load(args.dir)
    if not config.sockets_present:
        raise CommandError(f"the cluster at {config.directory} is not running (no control sockets)")
    builders = {
        "put": lambda rid: kv.put(rid, args.key, args.value),
        "get": lambda rid: kv.get(rid, args.key),
        "cas": lambda rid: kv.cas(rid, args.key, args.expected, args.value),
        "delete": lambda rid: kv.delete(rid, args.key),
    }
    deadline = started + args.timeout
    # Keep part of the bound for asking the members why, if no reply comes.
    request_deadline = deadline - min(STATUS_BUDGET_S, 0.2 * args.timeout)
    client = LocalClient(config, request_timeout_s=args.timeout, credentials=_credentials(args, config))
    client.connect_timeout_s = args.timeout
    try:
        try:
            client.connect(max(0.05, request_deadline - time.monotonic()))
        except LocalClientTimeout:
            why = _why_no_answer(config, deadline)
            raise CommandError(
                f"no session with the cluster at {config.directory} within {args.timeout:g} s, "
                f"the request was not sent{why}"
            ) from None
        except Exception as e:  # ConnectError and friends: the cluster said no
            raise CommandError(f"{type(e).__name__}: {e}") from None
        try:
            reply = client.request(builders[args.op], max(0.05, request_deadline - time.monotonic()))
        except LocalClientTimeout:
            why = _why_no_answer(config, deadline)
            print(
                f"clusterlab client: outcome unknown (the request may still be applied): no reply from the cluster "
                f"at {config.directory} within {args.timeout:g} s{why}",
                file=sys.stderr,
            )
            return EXIT_UNKNOWN
        except Exception as e:  # the session failed after the request went out (ConnectError, ...)
            print(
                f"clusterlab client: outcome unknown (the request may still be applied): {type(e).__name__}: {e}",
                file=sys.stderr,
            )
            return EXIT_UNKNOWN
    finally:
        client.close()
    print(json.dumps(reply, sort_keys=True))
    return EXIT_FAILED if reply.get("ok") is False or "error" in reply else EXIT_OK


def _why_no_answer(config: ClusterConfig, deadline: float) -> str:
    """What the members' control sockets say, within what is left of the command's bound: a
    suspended cluster, no leader, or nothing (no member answered)."""
    from clusterlab.core.consensus.context import ConsensusModuleState
    from clusterlab.harness.local import MemberStatus

    remaining = deadline - time.monotonic()
    if remaining <= 0.01:
        return ""
    tool = ClusterTool(config)
    try:
        statuses = tool.statuses(remaining / max(1, len(config.members)))
    finally:
        tool.close()
    answered = {i: MemberStatus.of(s) for i, s in statuses.items() if s is not None}
    if not answered:
        return "; no member answered its control socket either"
    if any(m.module_state == ConsensusModuleState.SUSPENDED for m in answered.values()):
        return f"; the cluster is suspended (`clusterlab tool {config.directory} resume` resumes it)"
    if _leader(statuses) is None:
        return f"; the cluster has no leader now ({_no_leader_reason(config, statuses)})"
    return ""


def _no_leader_reason(config: ClusterConfig, statuses: dict[int, NodeStatus | None]) -> str:
    """Why there is no leader, as the members say: those fenced (a failed disk), whose service or
    recording stopped, or that are down with the reason their node wrote on its way out; only when
    none is, "an election may be running"."""
    problems = []
    for i, s in statuses.items():
        if s is not None and s.health:
            problems.append(f"member {i}: {s.health}")
        elif s is None and (why := stopped_member_health(config.member_dir(i))):
            problems.append(f"member {i} down: {why}")
    if not problems:
        return "an election may be running, or a majority is unreachable"
    return "; ".join(problems)


def _credentials(args: argparse.Namespace, config: ClusterConfig) -> Any:
    """``--credentials FILE``, else a secured cluster's own credentials file, else None."""
    from clusterlab.core.runtime.security import ClientCredentials, credentials_path

    path = args.credentials
    if path is None and config.secure:
        path = credentials_path(config.directory)
    if path is None:
        return None
    try:
        return ClientCredentials.from_file(path)
    except ConfigError as e:
        raise CommandError(str(e)) from None


# ---------------------------------------------------------------------------------- tool
def cmd_tool(args: argparse.Namespace) -> int:
    config = _load(args.dir)
    if not config.sockets_present:
        raise CommandError(f"the cluster at {config.directory} is not running (no control sockets)")
    tool = ClusterTool(config)
    try:
        statuses = tool.statuses(args.timeout)
        if all(s is None for s in statuses.values()):
            raise CommandError(f"no member of the cluster at {config.directory} answered within {args.timeout:g} s")
        leader = _leader(statuses)
        if args.action == "list-members":
            print("  ".join([*(f"{c:>9}" for c in COLUMNS[:-1]), COLUMNS[-1]]))
            for i, s in statuses.items():
                if s is not None:
                    cells = _status_cells(MemberStatus.of(s))
                else:
                    cells = ["DOWN", *[""] * (len(COLUMNS) - 3), stopped_member_health(config.member_dir(i))]
                print("  ".join([*(f"{c:>9}" for c in [str(i), *cells[:-1]]), cells[-1]]).rstrip())
            print(f"leader: {leader if leader is not None else 'none'}")
            return EXIT_OK
        if leader is None:
            raise CommandError(
                f"no leader in the cluster at {config.directory} ({_no_leader_reason(config, statuses)})"
            )
        reply = tool.control(leader, ToggleState[args.action.upper()], args.timeout)
        if reply is None:
            raise CommandError(f"leader {leader} did not answer within {args.timeout:g} s")
        if reply.code != ControlResponseCode.OK:
            raise CommandError(f"{args.action} refused by leader {leader}: {reply.message}")
        print(f"{args.action}: accepted by leader {leader}")
        return EXIT_OK
    finally:
        tool.close()
