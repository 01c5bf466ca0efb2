"""``clusterlab trace summary RUN`` and ``clusterlab trace show RUN --member M --from POS``.

RUN is a trace directory or the directory holding one (``clusterlab run --dir D`` and ``cluster start
--dir D`` record into ``D/trace``). ``show`` prints each row's time in seconds from the run's start.

``register(subparsers)`` adds the ``trace`` command to the clusterlab parser.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table

from clusterlab.chaos.limits import LOG_POSITION, MEMBER_ID
from clusterlab.cli.paths import bounded, ranged
from clusterlab.harness.recorder import TABLES
from clusterlab.harness.trace import (
    Run,
    Summary,
    TraceError,
    describe_payload,
    open_run,
    select_messages,
    summarize,
)


def _table(title: str, columns: Sequence[str], rows: list[Sequence[Any]]) -> Table:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if i == len(columns) - 1 else "left")
    for r in rows:
        t.add_row(*(str(x) for x in r))
    return t


def print_summary(summary: Summary, meta: dict[str, Any], console: Console) -> None:
    head = ", ".join(f"{k}={meta.get(k)}" for k in ("run_id", "scenario", "seed", "outcome", "git_commit") if k in meta)
    console.print(f"[bold]run[/bold] {head}")
    console.print(
        _table(
            "tables",
            ["table", "files", "rows"],
            [(name, summary.files.get(name, 0), n) for name, n in summary.rows.items()],
        )
    )
    console.print(
        _table("messages per channel", ["channel", "direction", "rows"], [(*k, n) for k, n in summary.by_channel])
    )
    console.print(_table("messages per type", ["msg_type", "direction", "rows"], [(*k, n) for k, n in summary.by_type]))
    console.print(
        _table("processes", ["process", "incarnation", "message rows"], [(*k, n) for k, n in summary.processes])
    )
    if summary.events_by_kind:
        console.print(_table("events", ["source", "kind", "rows"], [(*k, n) for k, n in summary.events_by_kind]))
    if summary.ops_by_kind:
        console.print(_table("ops", ["kind", "rows"], [(*k, n) for k, n in summary.ops_by_kind]))
    console.print(f"members: {summary.members}")
    leaders = ", ".join(f"{term}:{ms or '-'}" for term, ms in summary.terms.items())
    console.print(f"terms (term:leader): {leaders or '-'}")
    console.print(f"applied positions: {summary.applied_range or '-'}")
    console.print(f"message positions: {summary.message_position_range or '-'}")
    console.print(f"committed log end: {summary.committed_log_end if summary.committed_log_end is not None else '-'}")
    m = summary.match
    console.print(f"matching: {m.describe()}")
    if summary.torn:
        console.print(f"[yellow]torn files: {len(summary.torn)}[/yellow]")
        for t in summary.torn:
            console.print(f"  {t.describe()}")
    else:
        console.print("torn files: 0")
    if summary.unclosed:
        console.print(f"files never closed (killed processes): {len(summary.unclosed)}")
        for p in summary.unclosed:
            console.print(f"  {p.parent.name}/{p.name}")


def resolve_run_dir(path: Path | str) -> Path:
    """The trace directory ``path`` means: a run directory itself (run.json or table folders), or a
    directory holding one ``trace*`` run (what ``clusterlab run --dir`` and ``cluster start --dir``
    make). Raises TraceError naming what was found when it is neither, or when several runs are there."""
    directory = Path(path)
    if not directory.exists():
        raise TraceError(f"{directory}: no such run directory")
    if not directory.is_dir():
        raise TraceError(f"{directory}: not a directory (give a run directory, or the trace/ inside it)")
    if (directory / "run.json").is_file() or any((directory / name).is_dir() for name in TABLES):
        return directory
    runs = sorted(p for p in directory.glob("trace*") if p.is_dir() and (p / "run.json").is_file())
    if len(runs) == 1:
        return runs[0]
    if runs:
        names = ", ".join(str(p) for p in runs)
        raise TraceError(f"{directory} holds {len(runs)} runs; give one of: {names}")
    raise TraceError(f"{directory}: not a clusterlab run (no run.json, none of {', '.join(TABLES)}, no trace/ inside)")


def _open(path: str) -> Run | None:
    try:
        return open_run(resolve_run_dir(path))
    except TraceError as e:
        print(f"clusterlab trace: {e}", file=sys.stderr)
    except ValueError as e:  # run.json that is not JSON
        print(f"clusterlab trace: {path}: run.json is not valid JSON ({e})", file=sys.stderr)
    except OSError as e:
        print(f"clusterlab trace: {path}: {e.strerror or e}", file=sys.stderr)
    return None


def cmd_summary(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console(soft_wrap=True)
    run = _open(args.run)
    if run is None:
        return 2
    print_summary(summarize(run), run.meta, console)
    return print_completeness(run, console)


def print_completeness(run: Any, console: Console) -> int:
    """The run's completeness verdict, every finding and acceptable torn tail; the exit code
    (0 complete, 3 INCOMPLETE, 4 CORRUPT)."""
    from clusterlab.harness.completeness import EXIT_CORRUPT, EXIT_INCOMPLETE, Status

    c = run.completeness
    if c is None:
        return 0
    colour = "green" if c.ok else "red"
    console.print(
        f"completeness: [{colour}]{c.status}[/] (trace schema version {c.schema_version or '-'}; "
        f"{len(c.findings)} problem(s), {len(c.notes)} file(s) a SIGKILL ended (acceptable))"
    )
    for line in c.lines():
        console.print(f"  {line}", markup=False, highlight=False)
    return {Status.COMPLETE: 0, Status.INCOMPLETE: EXIT_INCOMPLETE, Status.CORRUPT: EXIT_CORRUPT}[c.status]


def _check_selection(run: Run, member: int, channel: str | None) -> str | None:
    """An error naming what the trace holds, if ``member``/``channel`` are not in it."""
    members = sorted(set(run.messages.column("member_id").to_pylist()))
    if member not in members:
        listed = ", ".join(map(str, members)) or "none (no messages recorded)"
        return f"--member {member}: no messages of member {member} in {run.directory}; members recorded: {listed}"
    if channel is not None:
        channels = sorted(set(run.messages.column("channel").to_pylist()))
        if channel not in channels:
            return f"--channel {channel}: no such channel in {run.directory}; channels recorded: {', '.join(channels)}"
    return None


def run_start_ns(run: Run) -> int:
    """The run's start on its trace's clock: the first event or message recorded (run.json's
    start_wall_ns is the harness's real clock, which a simulator's virtual clock is not)."""
    firsts = [pc.min(t.column("wall_ns")).as_py() for t in (run.events, run.messages) if t.num_rows]
    return int(min(firsts)) if firsts else 0


def cmd_show(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console(highlight=False, soft_wrap=True)
    run = _open(args.run)
    if run is None:
        return 2
    error = _check_selection(run, args.member, args.channel)
    if error is not None:
        print(f"clusterlab trace: {error}", file=sys.stderr)
        return 2
    start_ns = run_start_ns(run)
    rows = select_messages(run, args.member, args.from_position, args.to_position, args.channel)
    for r in rows:
        peer = r.get("peer_process") or r["peer"]
        arrow = {"send": "->", "recv": "<-", "drop": "x-"}.get(r["direction"], "?")
        reason = f" ({r['reason']})" if r.get("reason") else ""
        console.print(
            f"{(r['wall_ns'] - start_ns) / 1e9:+12.6f}s {r['process']}/i{r['incarnation']} #{r['seq']} "
            f"{r['direction']}{reason} {arrow} {peer} [{r['channel']}] term={r['leadership_term_id']} "
            f"pos={r['log_position']}",
            markup=False,
        )
        for line in describe_payload(r["payload"], entries=not args.no_entries):
            console.print(f"    {line}", markup=False)
    if not rows:
        console.print(f"no messages of member {args.member} at positions >= {args.from_position}", markup=False)
    for t in run.torn:
        console.print(f"torn: {t.describe()}", markup=False)
    return 0


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``trace summary`` and ``trace show`` to a clusterlab subparsers object."""
    trace = subparsers.add_parser("trace", help="read a recorded run (Arrow trace directory)")
    sub = trace.add_subparsers(dest="trace_command", metavar="TRACE_COMMAND")
    trace.set_defaults(func=lambda args: (trace.print_help(), 2)[1])

    summary = sub.add_parser("summary", help="counts per table/channel/type, members, terms, positions, torn files")
    summary.add_argument(
        "run", help="the run directory (holds run.json and messages/, applied/, ...), or the directory holding it"
    )
    summary.set_defaults(func=cmd_summary)

    show = sub.add_parser("show", help="one member's messages from a log position, decoded (describe())")
    show.add_argument("run", help="the run directory, or the directory holding it (times are from the run's start)")
    show.add_argument(
        "--member",
        type=bounded(MEMBER_ID),
        required=True,
        help=ranged("member id whose processes recorded the rows", MEMBER_ID),
    )
    show.add_argument(
        "--from",
        dest="from_position",
        type=bounded(LOG_POSITION),
        required=True,
        help=ranged("lowest log position", LOG_POSITION),
    )
    show.add_argument(
        "--to",
        dest="to_position",
        type=bounded(LOG_POSITION),
        default=None,
        help=ranged("highest log position", LOG_POSITION),
    )
    show.add_argument("--channel", default=None, help="only this channel (consensus, log, service, ...)")
    show.add_argument("--no-entries", action="store_true", help="do not list the entries of log blocks")
    show.set_defaults(func=cmd_show)
    return trace
