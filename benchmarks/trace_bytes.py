"""Trace bytes per committed op: what a recorded cluster writes to its trace, per table, for each op.

Run: ``python -m benchmarks.trace_bytes [--payload 64,1024] [--member-process split|single|both]
[--seconds 3] [--out benchmarks/trace_bytes.json]``

For each payload size and member-process mode it starts a recorded 3-member LocalCluster (KV service, as
``cluster_bench`` does), drives it with the benchmark's pipelined saturation client for ``--seconds``,
stops it (every recorder flushes and closes), and sums the bytes of every trace file by table
(``messages``, ``applied``, ``events``, ``ops``, ``log``, the rest as ``other``). Committed ops are the
session messages the leader's service applied (its ``applied`` rows, replays left out), so an op counts
once however many members apply it. Reported per committed op: bytes per table, the total, and
``payload copies``: the ``messages`` bytes per op divided by the payload size, how many times each
payload byte is in the messages table across the members (a member's archive, which also holds it, is
not part of the trace). The payload bytes of the ``messages`` rows are also summed by direction, channel
and message type, as the files hold them. The trace is measured as the run leaves it: the cluster's
close keeps committed LogBlock entries once, as references into the committed log
(harness/payload_refs.py); ``stop_s`` is the close's wall time, that rewrite included, and
``payload_refs`` is run.json's account of it.

Arrow IPC files carry no compression here, so the bytes on disk are the bytes the recorders wrote.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from clusterlab.harness.arrow_stream import read_stream

from benchmarks import write_results
from benchmarks.cluster_bench import ClusterlabSubject
from benchmarks.peers.common import payload_of, run_saturation

TABLES = ("messages", "applied", "events", "ops", "log")


def table_of(path: Path, trace_dir: Path) -> str:
    """The trace table a file belongs to: the first directory under the run directory that names one."""
    parts = path.relative_to(trace_dir).parts
    return next((p for p in parts[:-1] if p in TABLES), "other")


def bytes_by_table(trace_dir: Path) -> dict[str, int]:
    """Bytes of every file under ``trace_dir``, summed by table."""
    sizes: collections.Counter[str] = collections.Counter()
    for path in trace_dir.rglob("*"):
        if path.is_file():
            sizes[table_of(path, trace_dir)] += path.stat().st_size
    return dict(sizes)


def committed_ops(trace_dir: Path, leader: int) -> int:
    """Session messages the leader's first service applied (not replayed): each committed op once."""
    total = 0
    for path in sorted((trace_dir / "applied").glob("*.arrow")):
        table = read_stream(str(path)).table()
        if table.num_rows == 0:
            continue
        mask = pc.and_(
            pc.and_(pc.equal(table["member_id"], leader), pc.equal(table["service_id"], 0)),
            pc.and_(pc.equal(table["entry_type"], "SessionMessage"), pc.invert(table["replay"])),
        )
        total += int(pc.sum(mask.cast("int64")).as_py() or 0)
    return total


def payload_bytes_by_kind(trace_dir: Path) -> dict[str, int]:
    """Payload bytes of the ``messages`` rows, summed by "direction channel msg_type" (what a payload
    reference in place of the bytes would save, kind by kind)."""
    sums: collections.Counter[str] = collections.Counter()
    for path in sorted((trace_dir / "messages").glob("*.arrow")):
        table = read_stream(str(path)).table()
        if table.num_rows == 0:
            continue
        table = table.append_column("payload_len", pc.binary_length(table["payload"]))
        grouped = table.group_by(["direction", "channel", "msg_type"]).aggregate([("payload_len", "sum")])
        for row in grouped.to_pylist():
            sums[f"{row['direction']} {row['channel']} {row['msg_type']}"] += row["payload_len_sum"] or 0
    return dict(sums.most_common())


def measure(payload_size: int, member_process: str, seconds: float) -> dict[str, Any]:
    """One recorded cluster at saturation; its trace's bytes per committed op."""
    subject = ClusterlabSubject(recording=True, member_process=member_process)
    subject.start("default", None)  # type: ignore[arg-type]
    cluster = subject.cluster
    directory, trace_dir, leader = Path(cluster.directory), Path(cluster.trace_dir), cluster.leader_id()
    cluster.keep_directory = True  # the trace is read after every process has stopped and flushed
    try:
        try:
            sat = run_saturation(subject.client(), payload_of(payload_size), 20_000, 0.5, seconds)
        finally:
            stopping = time.monotonic()
            subject.stop()
            stop_s = time.monotonic() - stopping
        refs = json.loads((trace_dir / "run.json").read_text()).get("payload_refs")
        ops = committed_ops(trace_dir, leader)
        if ops == 0:
            raise SystemExit(f"no committed op found in {trace_dir}'s applied rows of member {leader}")
        sizes = bytes_by_table(trace_dir)
        by_kind = payload_bytes_by_kind(trace_dir)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    per_op = {table: round(n / ops, 1) for table, n in sorted(sizes.items())}
    result = {
        "payload_bytes": payload_size,
        "member_process": member_process,
        "committed_ops": ops,
        "ops_per_s": sat["ops_per_s"],
        "trace_bytes": sum(sizes.values()),
        "bytes_per_op": per_op,
        "total_bytes_per_op": round(sum(sizes.values()) / ops, 1),
        "payload_copies": round(sizes.get("messages", 0) / ops / payload_size, 2),
        "message_payload_bytes_per_op": {kind: round(n / ops, 1) for kind, n in by_kind.items() if n >= ops},
        "stop_s": round(stop_s, 2),
        "payload_refs": refs,
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--payload", default="64,1024", help="payload sizes in bytes, comma-separated")
    parser.add_argument("--member-process", choices=("split", "single", "both"), default="both")
    parser.add_argument("--seconds", type=float, default=3.0, help="saturation time per cluster (default 3)")
    parser.add_argument("--out", default="benchmarks/trace_bytes.json", help="JSON output file")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.payload.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--payload must be comma-separated integers, got {args.payload!r}")
    if not sizes or min(sizes) < 16:
        parser.error(f"--payload sizes must be at least 16 bytes, got {args.payload!r}")
    if args.seconds <= 0:
        parser.error(f"--seconds must be positive, got {args.seconds}")
    modes = ["split", "single"] if args.member_process == "both" else [args.member_process]
    runs = []
    for size in sizes:
        for mode in modes:
            r = measure(size, mode, args.seconds)
            runs.append(r)
            tables = ", ".join(f"{t} {b:,.0f}" for t, b in r["bytes_per_op"].items())
            kinds = ", ".join(f"{k} {b:,.0f}" for k, b in list(r["message_payload_bytes_per_op"].items())[:6])
            print(
                f"{size} B, {mode}: {r['total_bytes_per_op']:,.0f} trace bytes per committed op "
                f"({r['payload_copies']}x the payload in messages; {tables}) over {r['committed_ops']:,} ops"
            )
            print(f"    message payload bytes per op, largest kinds: {kinds}")
    write_results(args.out, {"runs": runs})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
