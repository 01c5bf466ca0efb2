"""The ClusterBackup process (Aeron's ``ClusterBackup``): follows a running cluster's committed log and
its snapshots into a directory laid out as a member's, so a cluster can be restored from it.

    python -m clusterlab.core.runtime.backup --dir CLUSTER_DIR --backup-dir BACKUP_DIR
        [--replay-start beginning|latest-snapshot] [--query-interval S] [--progress-timeout S]

reads ``CLUSTER_DIR/cluster.json`` (clusterlab.core.runtime.config) the way a node does and asks the
members on their control sockets (a secured cluster: with the operator's ``admin`` CURVE key, as
``clusterlab tool`` does), one request at a time, as :class:`ClusterBackupAgent` says
(clusterlab.core.consensus.cluster_backup; the members answer with clusterlab.core.consensus.backup_source).
The agent writes into a FileStorage on BACKUP_DIR. Beside what it writes:

* ``backup.lock``: one backup process per directory (held until exit);
* ``backup.log``: the process's log lines;
* ``backup-status.json``: the backup's state, rewritten atomically (temp file + rename) whenever it
  changes; ``clusterlab tool BACKUP_DIR backup-query`` prints it (Aeron's ``ClusterTool backup-query``).

The loop waits on the agent's next deadline in a bounded poll (never a busy spin). SIGTERM and SIGINT
stop it: the agent closes (its files flushed, state CLOSED in the status file) and the process exits 0.
Exit 2: bad arguments, configuration or a backup directory held by another backup process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clusterlab.core.atomic import write_atomically
from clusterlab.core.codec.message import Message
from clusterlab.core.consensus.cluster_backup import (
    SECOND_NS,
    BackupContext,
    BackupState,
    ClusterBackupAgent,
    ReplayStart,
    no_answer,
)
from clusterlab.core.runtime.clock import Clock
from clusterlab.core.runtime.config import ClusterConfig, ConfigError
from clusterlab.core.runtime.control import ControlClient
from clusterlab.core.runtime.dirlock import DirectoryLock
from clusterlab.core.runtime.runner import DutyCycle, ProcessLog, started_by_a_gone_parent
from clusterlab.core.runtime.security import ADMIN, ClientCredentials, ProcessSecurity, credentials_path
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.core.runtime.transport import new_context

EXIT_OK = 0
EXIT_CONFIG = 2
STATUS_FILE_NAME = "backup-status.json"
LOG_FILE_NAME = "backup.log"
LOCK_FILE_NAME = "backup.lock"
# Files of the backup process itself, not of the member directory it builds (a restore leaves them out).
PROCESS_FILES = frozenset({STATUS_FILE_NAME, LOG_FILE_NAME, LOCK_FILE_NAME})
STATUS_FIELDS = (
    "state",
    "live_log_position",
    "snapshots_retrieved_count",
    "leader_member_id",
    "source_member_id",
    "cluster_commit_position",
    "errors",
    "time_of_next_backup_query_ns",
    "pid",
)
DEFAULT_QUERY_INTERVAL_S = 1.0
DEFAULT_PROGRESS_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 0.5  # one answer from a member's control socket (within the agent's request timeout)


class BackupStatusError(Exception):
    """A backup directory's status file is missing or unreadable; the message says which and why."""


def read_backup_status(backup_dir: Path) -> dict[str, Any]:
    """The parsed ``backup-status.json`` of ``backup_dir``; BackupStatusError if missing or corrupt."""
    path = Path(backup_dir) / STATUS_FILE_NAME
    try:
        status = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackupStatusError(f"no backup status in {backup_dir} ({STATUS_FILE_NAME} does not exist)") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BackupStatusError(f"{path} is unreadable: {e}") from None
    if not isinstance(status, dict) or any(name not in status for name in STATUS_FIELDS):
        raise BackupStatusError(f"{path} is not a backup status (expected the fields {', '.join(STATUS_FIELDS)})")
    if status["state"] not in BackupState.__members__:
        raise BackupStatusError(f"{path}: unknown state {status['state']!r}")
    return status


class BackupProcess:
    """The agent over real sockets and files; see the module docstring."""

    def __init__(
        self,
        config: ClusterConfig,
        backup_dir: Path,
        *,
        replay_start: ReplayStart = ReplayStart.BEGINNING,
        query_interval_s: float = DEFAULT_QUERY_INTERVAL_S,
        progress_timeout_s: float = DEFAULT_PROGRESS_TIMEOUT_S,
        log: ProcessLog | None = None,
        credentials: ClientCredentials | None = None,
    ) -> None:
        """``credentials`` answer the members' authenticator (default: a secured cluster's client
        credentials file; an open cluster asks none)."""
        self.config = config
        self.backup_dir = backup_dir
        self.log = log if log is not None else ProcessLog("backup")
        self.clock = Clock()
        self.cycle = DutyCycle(self.clock, self.log)
        self.zctx = new_context()
        try:
            self.security = ProcessSecurity(config.directory, config.secure, ADMIN, self.zctx, authenticate=False)
        except ConfigError:
            self.zctx.term()
            raise
        self.controls = {
            m.member_id: ControlClient(self.zctx, m.control, self.security.connector_for_member(m.member_id))
            for m in config.members
        }
        if credentials is None and config.secure:
            credentials = ClientCredentials.from_file(credentials_path(config.directory))
        self.agent = ClusterBackupAgent(
            BackupContext(
                storage=FileStorage(backup_dir),
                credentials=credentials.connect_credentials if credentials is not None else b"",
                on_challenge=credentials.on_challenge if credentials is not None else no_answer,
                source_member_ids=tuple(m.member_id for m in config.members),
                service_count=config.service_count,
                replay_start=replay_start,
                backup_query_interval_ns=int(query_interval_s * SECOND_NS),
                backup_progress_timeout_ns=int(progress_timeout_s * SECOND_NS),
                file_sync=True,
                log=self.log,
                events=self._on_event,
            )
        )
        self._written: dict[str, Any] | None = None
        self.log(
            f"started pid={os.getpid()} cluster={config.directory} backup={backup_dir} "
            f"replay_start={replay_start.value} query_interval={query_interval_s:g}s "
            f"progress_timeout={progress_timeout_s:g}s"
        )
        self.write_status()

    def _on_event(self, kind: str, detail: dict[str, Any]) -> None:
        self.log(f"event {kind} {detail}")

    def status(self) -> dict[str, Any]:
        a = self.agent
        return {
            "state": a.state.name,
            "live_log_position": a.live_log_position,
            "snapshots_retrieved_count": a.snapshots_retrieved_count,
            "leader_member_id": a.leader_member_id,
            "source_member_id": a.source_member_id,
            "cluster_commit_position": a.cluster_commit_position,
            "errors": a.errors,
            "time_of_next_backup_query_ns": a.time_of_next_backup_query_ns,
            "pid": os.getpid(),
            "cluster_dir": str(self.config.directory),
            "replay_start": a.ctx.replay_start.value,
        }

    def write_status(self) -> None:
        """Rewrite the status file (temp + rename) if anything in it changed."""
        status = self.status()
        if status == self._written:
            return
        try:
            write_atomically(self.backup_dir / STATUS_FILE_NAME, json.dumps(status, indent=1) + "\n")
        except OSError as e:  # a full disk: the next change tries again
            self.log(f"status not written: {e}")
            return
        self._written = status

    def do_work(self, now_ns: int) -> int:
        """Send the agent's next request, if any is due, and hand it the answer (or its absence)."""
        request = self.agent.poll(now_ns)
        if request is not None:
            member_id, msg = request
            reply = self._ask(member_id, msg)
            if reply is None:
                self.controls[member_id].reset()  # a late answer must not reach the next request
                self.agent.on_no_reply(self.clock.now_ns(), f"no answer from member {member_id}'s control socket")
            else:
                self.agent.on_reply(member_id, reply, self.clock.now_ns())
        self.write_status()
        return 0 if request is None else 1

    def _ask(self, member_id: int, msg: Message) -> Message | None:
        """The member's answer to ``msg``, with the agent's correlation id (the control client numbers
        its own requests), or None."""
        reply = self.controls[member_id].request(msg, REQUEST_TIMEOUT_S)
        if reply is None:
            return None
        correlation_id = getattr(msg, "correlation_id", None)
        if correlation_id is None or not hasattr(reply, "correlation_id"):
            return reply
        return dataclasses.replace(reply, correlation_id=correlation_id)  # type: ignore[type-var]

    def next_deadline_ns(self) -> int:
        return self.agent.next_deadline_ns()

    def run(self) -> int:
        self.cycle.install_signal_handlers()
        try:
            code = self.cycle.run(self.do_work, self.next_deadline_ns)
            self.log(
                f"stopping: {self.cycle.stop_reason} (exit {code}); live_log_position={self.agent.live_log_position}"
            )
        finally:
            self.close()
        return code

    def close(self) -> None:
        try:
            self.agent.close()
            self.write_status()
        finally:
            for control in self.controls.values():
                control.close()
            self.security.close()
            self.zctx.term()
            self.cycle.close()


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m clusterlab.core.runtime.backup", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--dir", type=Path, required=True, help="the cluster directory (holds cluster.json)")
    parser.add_argument("--backup-dir", type=Path, required=True, help="the backup's directory (created if missing)")
    parser.add_argument(
        "--replay-start",
        choices=[r.value for r in ReplayStart],
        default=ReplayStart.BEGINNING.value,
        help="where an empty backup's log starts: the cluster's log start or its latest snapshot (default beginning)",
    )
    parser.add_argument(
        "--query-interval",
        type=float,
        default=DEFAULT_QUERY_INTERVAL_S,
        metavar="S",
        help=f"seconds between backup queries (default {DEFAULT_QUERY_INTERVAL_S:g})",
    )
    parser.add_argument(
        "--progress-timeout",
        type=float,
        default=DEFAULT_PROGRESS_TIMEOUT_S,
        metavar="S",
        help=f"seconds without progress before asking the next member (default {DEFAULT_PROGRESS_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--credentials",
        type=Path,
        default=None,
        metavar="FILE",
        help="a 'user:password' file answering the members' authenticator (default: a secured cluster's "
        "client credentials; an open cluster asks none)",
    )
    parser.add_argument(
        "--exit-with-parent",
        type=int,
        default=None,
        metavar="PID",
        help="stop (as on SIGTERM) when process PID, the one starting us, dies (LocalCluster passes this)",
    )
    return parser


def options_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the timing options, or None."""
    if not 0.01 <= args.query_interval <= 3600:
        return f"--query-interval {args.query_interval:g}: use 0.01 to 3600 seconds"
    if not 0.1 <= args.progress_timeout <= 3600:
        return f"--progress-timeout {args.progress_timeout:g}: use 0.1 to 3600 seconds"
    return None


def _print_error(message: str) -> None:
    print(f"backup: {message}", file=sys.stderr)


def run_backup(args: argparse.Namespace, report: Callable[[str], None] = _print_error) -> int:
    """Lock the backup directory, back up until a signal stops it; the exit code. What prevents the
    start (configuration, keys, a directory another backup holds) goes to ``report`` (exit 2)."""
    try:
        config = ClusterConfig.load(args.dir)
        args.backup_dir.mkdir(parents=True, exist_ok=True)
        lock = DirectoryLock.acquire(args.backup_dir / LOCK_FILE_NAME, "a cluster backup")
    except (ConfigError, OSError) as e:
        report(str(e))
        return EXIT_CONFIG
    try:
        with open(args.backup_dir / LOG_FILE_NAME, "a", encoding="utf-8") as stream:
            try:
                process = BackupProcess(
                    config,
                    args.backup_dir,
                    replay_start=ReplayStart(args.replay_start),
                    query_interval_s=args.query_interval,
                    progress_timeout_s=args.progress_timeout,
                    log=ProcessLog("backup", stream),
                    credentials=ClientCredentials.from_file(args.credentials) if args.credentials else None,
                )
            except ConfigError as e:  # a secured cluster's admin key or a credentials file missing or unreadable
                report(str(e))
                return EXIT_CONFIG
            return process.run()
    finally:
        lock.release()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser()
    args = parser.parse_args(argv)
    if (error := options_error(args)) is not None:
        parser.error(error)
    if started_by_a_gone_parent(parser.prog, args.exit_with_parent):
        return EXIT_OK
    return run_backup(args)


__all__ = [
    "LOCK_FILE_NAME",
    "LOG_FILE_NAME",
    "PROCESS_FILES",
    "STATUS_FIELDS",
    "STATUS_FILE_NAME",
    "BackupProcess",
    "BackupStatusError",
    "main",
    "read_backup_status",
]

if __name__ == "__main__":
    sys.exit(main())
