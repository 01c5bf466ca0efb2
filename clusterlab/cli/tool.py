"""``clusterlab tool DIR ACTION``: Aeron's ClusterTool.

Cluster-wide (DIR = the cluster directory, through the members' control sockets):

    list-members | snapshot | suspend | resume | shutdown | abort

One member (DIR = its directory ``<cluster>/member-<i>``, or the cluster directory with ``--member N``):

    recording-log                      the recording log's entries (type, recording id, term, base, position ...)
    sort-recording-log                 rewrite it in Aeron's sort order (a no-op if sorted; node stopped)
    seed-recording-log-from-snapshot   keep only the latest valid snapshot set, so it seeds a new cluster
                                       (old file kept as recording.log.bak; node stopped)
    describe-latest-snapshot           the latest consensus-module snapshot and its services' snapshots
    errors                             the member's distinct error log: live from a running node, else as last written
    counters                           its counters: live from a running node, else as it last wrote them

A ClusterBackup (DIR = the backup's directory, from ``clusterlab cluster backup``):

    backup-query                       the backup's state, live log position, snapshots retrieved, leader,
                                       errors and next query time (its status file), and whether it runs

Wrong directories and arguments print one line on stderr and exit 1 (2 for usage).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from clusterlab.chaos.limits import MEMBER_ID, TIMEOUT_S
from clusterlab.cli import cluster
from clusterlab.cli.paths import bounded, ranged
from clusterlab.core.codec.control import Counters, CountersRequest
from clusterlab.core.consensus.context import ConsensusModuleState, ElectionState, Role
from clusterlab.core.consensus.counters import NO_ELECTION, ClusterCounters
from clusterlab.core.runtime.config import CONFIG_FILE_NAME, ClusterConfig, ConfigError
from clusterlab.core.runtime.control import ControlClient
from clusterlab.core.runtime.control_replies import counters_of, error_log_of
from clusterlab.core.runtime.security import ADMIN, ProcessSecurity
from clusterlab.core.runtime.transport import new_context
from clusterlab.harness.cluster_tool import (
    ClusterToolError,
    describe_backup_query,
    describe_errors,
    describe_latest_snapshot,
    describe_recording_log,
    is_node_running,
    member_directory,
    read_member_counters,
    seed_recording_log_from_snapshot,
    sort_recording_log,
)

MEMBER_ACTIONS = (
    "recording-log",
    "sort-recording-log",
    "seed-recording-log-from-snapshot",
    "describe-latest-snapshot",
    "errors",
    "counters",
)
BACKUP_QUERY = "backup-query"


def register(subparsers: Any) -> None:
    """Add ``tool`` to a ``clusterlab`` subparsers object."""
    tool = subparsers.add_parser(
        "tool", help="ClusterTool: members, cluster control, recording log, counters, backup-query"
    )
    tool.add_argument(
        "dir", type=Path, help="a cluster directory (holds cluster.json), a member directory or a backup directory"
    )
    tool.add_argument("action", choices=("list-members", *cluster.CONTROL_ACTIONS, *MEMBER_ACTIONS, BACKUP_QUERY))
    tool.add_argument(
        "--member",
        type=bounded(MEMBER_ID),
        default=None,
        help=ranged("the member, when DIR is the cluster directory", MEMBER_ID),
    )
    tool.add_argument(
        "--timeout",
        type=bounded(TIMEOUT_S),
        default=2.0,
        help=ranged("seconds to wait for each member (default 2)", TIMEOUT_S),
    )
    tool.set_defaults(func=cmd_tool)


def cmd_tool(args: argparse.Namespace) -> int:
    """Run one ClusterTool action (see the module docstring)."""
    if args.action == BACKUP_QUERY:
        if args.member is not None:
            return _fail(f"--member is for the member actions ({', '.join(MEMBER_ACTIONS)}), not {args.action}")
        try:
            print(describe_backup_query(args.dir))
        except ClusterToolError as e:
            return _fail(str(e))
        return cluster.EXIT_OK
    if args.action not in MEMBER_ACTIONS:
        if args.member is not None:
            return _fail(f"--member is for the member actions ({', '.join(MEMBER_ACTIONS)}), not {args.action}")
        return int(cluster._guarded(cluster.cmd_tool, "tool")(args))
    try:
        member_dir = member_directory(args.dir, args.member)
        print(_run_member_action(args.action, member_dir, args.timeout))
    except ClusterToolError as e:
        return _fail(str(e))
    return cluster.EXIT_OK


def _fail(message: str) -> int:
    print(f"clusterlab tool: {message}", file=sys.stderr)
    return cluster.EXIT_FAILED


def _run_member_action(action: str, member_dir: Path, timeout_s: float) -> str:
    if action == "recording-log":
        return describe_recording_log(member_dir)
    if action == "sort-recording-log":
        changed = sort_recording_log(member_dir)
        return "recording log sorted" if changed else "recording log already sorted (or empty, or absent): unchanged"
    if action == "seed-recording-log-from-snapshot":
        entries = seed_recording_log_from_snapshot(member_dir)
        if not entries:
            return "no valid snapshot: recording log removed (backup in recording.log.bak)"
        return f"recording log seeded from the latest snapshot ({len(entries)} entries; backup in recording.log.bak)"
    if action == "describe-latest-snapshot":
        return describe_latest_snapshot(member_dir)
    live = _live_counters(member_dir, timeout_s)
    if action == "errors":
        return describe_errors(member_dir, live)
    if live is not None:
        return describe_counters(live[0], "live")
    counters, _, running = read_member_counters(member_dir)
    return describe_counters(counters, "last written by the running node" if running else "last values (stopped)")


def _live_counters(member_dir: Path, timeout_s: float) -> tuple[ClusterCounters, dict[str, int]] | None:
    """A running node's counters and distinct error log through its control socket (the cluster.json
    one level up)."""
    if not is_node_running(member_dir) or not (member_dir.parent / CONFIG_FILE_NAME).is_file():
        return None
    try:
        config = ClusterConfig.load(member_dir.parent)
    except ConfigError:
        return None
    member = next((m for m in config.members if config.member_dir(m.member_id) == member_dir), None)
    if member is None:
        return None
    zctx = new_context()
    try:
        security = ProcessSecurity(config.directory, config.secure, ADMIN, zctx, authenticate=False)
        control = ControlClient(zctx, member.control, security.connector_for_member(member.member_id))
        try:
            reply = control.request(CountersRequest(0), timeout_s)
        finally:
            control.close()
    except ConfigError:
        return None
    finally:
        zctx.term()
    return (counters_of(reply), error_log_of(reply)) if isinstance(reply, Counters) and reply.started else None


def describe_counters(c: ClusterCounters, source: str) -> str:
    """Aeron's counter labels, one per line, with the names of state ordinals."""

    def name(enum: Any, value: int) -> str:
        return enum(value).name if value in enum._value2member_map_ else str(value)

    election = "-" if c.election_state == NO_ELECTION else name(ElectionState, c.election_state)
    rows = [
        ("Consensus Module state", name(ConsensusModuleState, c.module_state)),
        ("Cluster node role", name(Role, c.role)),
        ("Cluster control toggle", str(c.control_toggle)),
        ("Cluster commit-pos", str(c.commit_position)),
        ("Election state", election),
        ("Election count", str(c.election_count)),
        ("Leadership term id", str(c.leadership_term_id)),
        ("Snapshot count", str(c.snapshot_count)),
        ("Last snapshot duration ns", str(c.last_snapshot_duration_ns)),
        ("Max snapshot duration ns", str(c.max_snapshot_duration_ns)),
        ("Cluster errors", str(c.errors)),
        ("Timed out client count", str(c.timed_out_client_count)),
        ("Cluster time ms", str(c.cluster_time_ms)),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join([f"member {c.member_id} counters ({source}):", *(f"  {lbl:<{width}}  {v}" for lbl, v in rows)])
