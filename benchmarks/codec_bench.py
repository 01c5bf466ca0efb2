"""Codec micro-benchmarks: microseconds per encode/decode of the hot messages.

Run: ``python -m benchmarks.codec_bench [--out FILE] [--repeat N]``. Prints a table and writes JSON
(default ``benchmarks/results/codec.json``). Each figure is the best of ``--repeat`` timeit runs, each
run sized to take about 0.2 s. No figure is asserted anywhere: they are for comparison over time.
"""

from __future__ import annotations

import argparse
import platform
import sys
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from clusterlab.core.codec import (
    AppendPosition,
    CommitPosition,
    LogBlock,
    SessionMessageHeader,
    decode,
    encode_session_message,
    frame,
    unpack_session_message,
    walk_frames,
)

from benchmarks import write_results

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "codec.json"
PAYLOAD = bytes(range(64))
ENTRIES_PER_BLOCK = 100
TERM = 4
START_POSITION = 1 << 20


@dataclass(frozen=True)
class Result:
    """One benchmark line."""

    message: str
    operation: str
    us_per_op: float
    wire_bytes: int
    note: str = ""


def best_us(fn: Callable[[], Any], repeat: int) -> float:
    """Best-of-``repeat`` microseconds per call."""
    timer = timeit.Timer(fn)
    number, _elapsed = timer.autorange()  # ≥ 0.2 s per run
    number = max(1, number)
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


def build_log_block_entries() -> bytes:
    """The leader's side: stamp and frame 100 session messages into one block's entries."""
    parts = []
    position = START_POSITION
    for i in range(ENTRIES_PER_BLOCK):
        framed = frame(encode_session_message(TERM, i + 1, 1_700_000_000_000 + i, PAYLOAD), position, TERM)
        parts.append(framed)
        position += len(framed)
    return b"".join(parts)


def encode_log_block() -> bytes:
    entries = build_log_block_entries()
    return LogBlock(TERM, START_POSITION, START_POSITION, 0, 77, entries).encode()


def decode_log_block(wire: bytes) -> int:
    """The follower's side: decode the block, walk and check its frames, decode each session message."""
    block = decode(wire)
    result = walk_frames(block.entries, block.start_position)
    if result.error is not None:
        raise result.error
    for f in result.frames:
        unpack_session_message(f.payload)
    return len(result.frames)


def run(repeat: int) -> list[Result]:
    smh = SessionMessageHeader(TERM, 42, 1_700_000_000_000, PAYLOAD)
    smh_wire = smh.encode()
    append = AppendPosition(TERM, 1 << 30, 2, 0)
    append_wire = append.encode()
    commit = CommitPosition(TERM, 1 << 30, 0)
    commit_wire = commit.encode()
    block_wire = encode_log_block()
    assert decode_log_block(block_wire) == ENTRIES_PER_BLOCK

    smh_n, ap_n, cp_n, lb_n = len(smh_wire), len(append_wire), len(commit_wire), len(block_wire)
    per_block = f"per block of {ENTRIES_PER_BLOCK} entries"

    term, session, timestamp = TERM, 42, 1_700_000_000_000
    # Every case is a lambda so each figure carries the same call overhead.
    cases: list[tuple[str, str, Callable[[], Any], int, str]] = [
        ("SessionMessageHeader", "encode", lambda: smh.encode(), smh_n, "64 B payload"),
        ("SessionMessageHeader", "encode_session_message()",
         lambda: encode_session_message(term, session, timestamp, PAYLOAD), smh_n, "no dataclass"),
        ("SessionMessageHeader", "decode", lambda: SessionMessageHeader.decode(smh_wire), smh_n,
         "class decode"),
        ("SessionMessageHeader", "unpack_session_message()", lambda: unpack_session_message(smh_wire), smh_n,
         "tuple, no dataclass"),
        ("SessionMessageHeader", "registry decode()", lambda: decode(smh_wire), smh_n, ""),
        ("AppendPosition", "construct", lambda: AppendPosition(term, 1 << 30, 2, 0), ap_n,
         "validated __init__"),
        ("AppendPosition", "encode", lambda: append.encode(), ap_n, ""),
        ("AppendPosition", "decode", lambda: AppendPosition.decode(append_wire), ap_n, ""),
        ("AppendPosition", "registry decode()", lambda: decode(append_wire), ap_n, ""),
        ("CommitPosition", "encode", lambda: commit.encode(), cp_n, ""),
        ("CommitPosition", "decode", lambda: CommitPosition.decode(commit_wire), cp_n, ""),
        ("CommitPosition", "registry decode()", lambda: decode(commit_wire), cp_n, ""),
        ("LogBlock", "encode (stamp + frame + block)", lambda: encode_log_block(), lb_n, per_block),
        ("LogBlock", "decode (block + walk + unpack)", lambda: decode_log_block(block_wire), lb_n, per_block),
    ]  # fmt: skip
    results = [Result(m, op, best_us(fn, repeat), n, note) for m, op, fn, n, note in cases]
    for r in [r for r in results if r.message == "LogBlock"]:
        per_entry_us = r.us_per_op / ENTRIES_PER_BLOCK
        results.append(Result(r.message, r.operation + " / entry", per_entry_us, lb_n // ENTRIES_PER_BLOCK))
    return results


def print_table(results: list[Result]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # rich is a dependency, but the benchmark should not need it
        print(f"{'message':22} {'operation':38} {'µs/op':>9} {'bytes':>7}  note")
        for r in results:
            print(f"{r.message:22} {r.operation:38} {r.us_per_op:9.3f} {r.wire_bytes:7d}  {r.note}")
        return
    table = Table(title="codec: best-of-N µs per operation")
    for column, justify in [("message", "left"), ("operation", "left"), ("µs/op", "right"),
                            ("bytes", "right"), ("note", "left")]:  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r in results:
        table.add_row(r.message, r.operation, f"{r.us_per_op:.3f}", str(r.wire_bytes), r.note)
    console = Console()
    console.width = max(console.width, 110)  # not a terminal: rich assumes 80 columns
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument("--repeat", type=int, default=5, help="timeit repeats; the best is reported")
    args = parser.parse_args(argv)
    results = run(args.repeat)
    print_table(results)
    report = {
        "benchmark": "codec",
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "repeat": args.repeat,
        "results": [asdict(r) for r in results],
    }
    print(f"wrote {write_results(args.out, report)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
