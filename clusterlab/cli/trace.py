"""``clusterlab trace summary RUN`` and ``clusterlab trace show RUN --member M --from POS``.

``register(subparsers)`` adds the ``trace`` command to the clusterlab parser.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from clusterlab.harness.trace import Summary, TraceError, describe_payload, open_run, select_messages, summarize


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


def cmd_summary(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console(soft_wrap=True)
    try:
        run = open_run(args.run)
    except TraceError as e:
        print(f"clusterlab trace: {e}", file=sys.stderr)
        return 2
    print_summary(summarize(run), run.meta, console)
    return 0


def cmd_show(args: argparse.Namespace, console: Console | None = None) -> int:
    console = console or Console(highlight=False, soft_wrap=True)
    try:
        run = open_run(args.run)
    except TraceError as e:
        print(f"clusterlab trace: {e}", file=sys.stderr)
        return 2
    rows = select_messages(run, args.member, args.from_position, args.to_position, args.channel)
    for r in rows:
        peer = r.get("peer_process") or r["peer"]
        arrow = {"send": "->", "recv": "<-", "drop": "x-"}.get(r["direction"], "?")
        reason = f" ({r['reason']})" if r.get("reason") else ""
        console.print(
            f"{r['wall_ns']:>15} {r['process']}/i{r['incarnation']} #{r['seq']} {r['direction']}{reason} "
            f"{arrow} {peer} [{r['channel']}] term={r['leadership_term_id']} pos={r['log_position']}",
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
    summary.add_argument("run", help="the run directory (holds run.json and messages/, applied/, ...)")
    summary.set_defaults(func=cmd_summary)

    show = sub.add_parser("show", help="one member's messages from a log position, decoded (describe())")
    show.add_argument("run", help="the run directory")
    show.add_argument("--member", type=int, required=True, help="member id whose processes recorded the rows")
    show.add_argument("--from", dest="from_position", type=int, required=True, help="lowest log position")
    show.add_argument("--to", dest="to_position", type=int, default=None, help="highest log position")
    show.add_argument("--channel", default=None, help="only this channel (consensus, log, service, ...)")
    show.add_argument("--no-entries", action="store_true", help="do not list the entries of log blocks")
    show.set_defaults(func=cmd_show)
    return trace
