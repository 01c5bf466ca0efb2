"""The real-cluster commands of ``clusterlab``: ``cluster start``, ``client`` and ``tool``.

``register(subparsers)`` adds them to the ``clusterlab`` parser (harness/cli.py); they also run on
their own: ``python -m clusterlab.harness.cli_cluster cluster start --members 3``.

    clusterlab cluster start [--members 3] [--service kv] [--dir D] [--tcp] [--secure | --no-secure]
        run a local cluster in the foreground with a live status table; Ctrl-C stops it cleanly
        (an existing D with a cluster.json is restarted from disk; a D in use is refused).
        --secure (the default with --tcp): CURVE keys and ZAP on every socket, client credentials
    clusterlab client --dir D [--credentials FILE] put KEY VALUE | get KEY | cas ... | delete KEY
        one KV request through a client session; prints the reply as JSON. A secured cluster
        needs credentials (a ``user:password`` file; default: the cluster's own D/keys/client.credentials)
    clusterlab tool D list-members | snapshot | suspend | resume | shutdown | abort
        ClusterTool: member status, or cluster control through the leader's toggle

Wrong arguments, a missing directory or an unreachable cluster print one line on stderr and exit
non-zero (2 for usage, 1 for everything else).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from clusterlab.core.codec.control import (
    ClusterControlRequest,
    ControlResponse,
    ControlResponseCode,
    NodeStatus,
    StatusRequest,
)
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.runtime.config import ClusterConfig, ConfigError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
CONTROL_ACTIONS = ("snapshot", "suspend", "resume", "shutdown", "abort")


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
    start = _one_line_errors(
        actions.add_parser("start", help="start a local cluster in the foreground (Ctrl-C stops it)")
    )
    start.add_argument("--members", type=int, default=3, help="number of members (default 3)")
    start.add_argument("--service", default="kv", help="service: kv, counter, echo, module:factory, none")
    start.add_argument("--dir", type=Path, default=None, help="cluster directory (default: a new temp dir)")
    start.add_argument("--tcp", action="store_true", help="tcp://127.0.0.1 with OS-assigned ports, not ipc")
    start.add_argument(
        "--secure",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="CURVE keys + ZAP authentication and client credentials (default: on with --tcp, off on ipc)",
    )
    start.add_argument("--seed", type=int, default=0)
    start.add_argument("--refresh", type=float, default=0.5, help="status table refresh interval, seconds")
    start.set_defaults(func=_guarded(cmd_cluster_start, "cluster start"))

    client = _one_line_errors(subparsers.add_parser("client", help="send a KV command to a running cluster"))
    client.add_argument("--dir", type=Path, required=True, help="the cluster directory (holds cluster.json)")
    client.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the reply")
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

    tool = _one_line_errors(subparsers.add_parser("tool", help="ClusterTool: list members, cluster control"))
    tool.add_argument("dir", type=Path, help="the cluster directory (holds cluster.json)")
    tool.add_argument("action", choices=("list-members", *CONTROL_ACTIONS))
    tool.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for each member")
    tool.set_defaults(func=_guarded(cmd_tool, "tool"))


# ---------------------------------------------------------------------------------- helpers
def _load(directory: Path) -> ClusterConfig:
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
        from clusterlab.core.runtime.control import ControlClient
        from clusterlab.core.runtime.security import ADMIN, ProcessSecurity
        from clusterlab.core.runtime.transport import new_context

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
    from clusterlab.harness.local import LocalCluster, MemberStatus

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
    ]


COLUMNS = ("member", "role", "term", "election", "commit", "append", "sessions", "state", "pid")


# ---------------------------------------------------------------------------------- cluster start
def cmd_cluster_start(args: argparse.Namespace) -> int:
    from clusterlab.harness.local import LocalCluster, LocalClusterError, LocalTimeout
    from rich.console import Console
    from rich.live import Live
    from rich.table import Table

    if args.members < 1:
        raise CommandError(f"--members must be >= 1, got {args.members}")
    service = None if args.service == "none" else args.service
    if service is not None and ":" not in service:
        from clusterlab.harness.services import SERVICES

        if service not in SERVICES:
            raise CommandError(f"unknown service {service!r}: use one of {sorted(SERVICES)}, module:factory or none")
    directory = args.dir if args.dir is not None else Path(tempfile.mkdtemp(prefix="clusterlab-"))
    existing = (directory / "cluster.json").exists()

    def on_sigterm(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    console = Console(stderr=False)
    try:
        cluster = LocalCluster(
            members=None if existing else args.members,
            service=service,
            directory=directory,
            tcp=args.tcp,
            secure=args.secure,
            seed=args.seed,
            keep_directory=True,
        )
    except (ConfigError, LocalClusterError) as e:
        raise CommandError(str(e)) from None
    try:
        console.print(
            f"{'restarting' if existing else 'starting'} a {cluster.member_count}-member cluster "
            f"in {cluster.directory} (service {cluster.config.service}, {cluster.config.transport}"
            f"{', secured' if cluster.config.secure else ''}); Ctrl-C stops it"
        )
        try:
            cluster.__enter__()
        except (LocalTimeout, LocalClusterError) as e:
            raise CommandError(str(e).splitlines()[0]) from None

        def table() -> Table:
            t = Table(title=f"clusterlab cluster {cluster.directory}")
            for column in COLUMNS:
                t.add_column(column)
            for i, s in cluster.statuses().items():
                if s is not None:
                    t.add_row(str(i), *_status_cells(s))
                else:
                    state = "paused" if cluster.is_paused(i) else ("no answer" if cluster.is_alive(i) else "down")
                    t.add_row(str(i), state, *[""] * (len(COLUMNS) - 2))
            return t

        try:
            with Live(table(), console=console, refresh_per_second=4, transient=False) as live:
                while cluster.members_alive():
                    time.sleep(args.refresh)  # the display's refresh interval, not synchronisation
                    live.update(table())
            console.print("every member has stopped (shutdown or abort): exiting")
        except KeyboardInterrupt:
            console.print("\nstopping the cluster ...")
    finally:
        cluster.close()
    console.print(f"stopped; the cluster's files are in {cluster.directory}")
    return EXIT_OK


# ---------------------------------------------------------------------------------- client
def cmd_client(args: argparse.Namespace) -> int:
    from clusterlab.harness.local import LocalClient, LocalClientTimeout
    from clusterlab.harness.services import kv

    config = _load(args.dir)
    if args.timeout <= 0:
        raise CommandError(f"--timeout must be > 0, got {args.timeout}")
    if not config.sockets_present:
        raise CommandError(f"the cluster at {config.directory} is not running (no control sockets)")
    builders = {
        "put": lambda rid: kv.put(rid, args.key, args.value),
        "get": lambda rid: kv.get(rid, args.key),
        "cas": lambda rid: kv.cas(rid, args.key, args.expected, args.value),
        "delete": lambda rid: kv.delete(rid, args.key),
    }
    client = LocalClient(config, request_timeout_s=args.timeout, credentials=_credentials(args, config))
    try:
        deadline = time.monotonic() + args.timeout
        try:
            client.connect(args.timeout)
            reply = client.request(builders[args.op], max(0.1, deadline - time.monotonic()))
        except LocalClientTimeout:
            raise CommandError(
                f"no answer from the cluster at {config.directory} within {args.timeout:g} s "
                "(is it running? `clusterlab tool DIR list-members` shows its members)"
            ) from None
        except Exception as e:  # ConnectError and friends: the cluster said no
            raise CommandError(f"{type(e).__name__}: {e}") from None
    finally:
        client.close()
    print(json.dumps(reply, sort_keys=True))
    return EXIT_OK


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
    from clusterlab.harness.local import MemberStatus

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
            print("  ".join(f"{c:>9}" for c in COLUMNS))
            for i, s in statuses.items():
                cells = _status_cells(MemberStatus.of(s)) if s is not None else ["DOWN", *[""] * (len(COLUMNS) - 2)]
                print("  ".join(f"{c:>9}" for c in [str(i), *cells]))
            print(f"leader: {leader if leader is not None else 'none'}")
            return EXIT_OK
        if leader is None:
            raise CommandError(f"no leader in the cluster at {config.directory} (an election may be running)")
        reply = tool.control(leader, ToggleState[args.action.upper()], args.timeout)
        if reply is None:
            raise CommandError(f"leader {leader} did not answer within {args.timeout:g} s")
        if reply.code != ControlResponseCode.OK:
            raise CommandError(f"{args.action} refused by leader {leader}: {reply.message}")
        print(f"{args.action}: accepted by leader {leader}")
        return EXIT_OK
    finally:
        tool.close()


# ---------------------------------------------------------------------------------- standalone
def build_parser() -> argparse.ArgumentParser:
    parser = _one_line_errors(
        argparse.ArgumentParser(prog="clusterlab", description="clusterlab real-cluster commands")
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
