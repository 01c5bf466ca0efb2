"""CPU per applied entry of a service process's hot path, without sockets: the figure the cluster
benchmark cannot give on a shared machine (its ops/s move with the other engineers' load).

Run: ``python -m benchmarks.apply_bench [--entries N] [--block B] [--repeat R] [--payload BYTES]
[--out FILE]``. For a follower and a leader service, recording off and on, it does per LogBlock what
``core/runtime/service.py`` does per inbound message (record the ``recv`` row, its entries by reference
as a real service's recorder keeps them, decode the block, walk it, ``ClusteredServiceAgent.on_log_frames``
with the block's bytes, the replies recorded as egress rows, the applied rows recorded in bulk; the
ZeroMQ sends are left out) with the KV service and puts of ``--payload`` bytes (64 by default) of a
pipelined client (one session, 1 000 keys). Figures are this thread's CPU time (``time.thread_time``),
best of ``--repeat``: much steadier than ops/s on a loaded machine, though a busy machine still slows
every instruction, so compare runs taken back to back. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from clusterlab.core.codec import LogBlock, SessionOpenEvent, decode, encode_session_message
from clusterlab.core.codec.service import JoinLog
from clusterlab.core.codec.transport import log_blocks
from clusterlab.core.consensus.context import Channel, Role
from clusterlab.core.runtime.recording import RECV, SEND, NullRecorder
from clusterlab.core.service.agent import MAX_LOG_POSITION, AppliedEntry, AppliedRun, ClusteredServiceAgent
from clusterlab.harness.recorder import ProcessRecorder
from clusterlab.harness.services.kv import KeyValueService, put

from benchmarks import write_results

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "apply.json"
TERM = 2
SESSION_ID = 5


def build_blocks(entries: int, per_block: int, payload: int = 64) -> list[bytes]:
    """Encoded LogBlocks: a SessionOpenEvent, then ``entries`` puts of ``payload``-byte values."""
    opened = SessionOpenEvent(
        leadership_term_id=TERM,
        correlation_id=1,
        cluster_session_id=SESSION_ID,
        timestamp=1,
        response_stream_id=102,
        response_channel="egress-bench",
        encoded_principal=b"",
    ).encode()
    value = "v" * payload
    puts = [encode_session_message(TERM, SESSION_ID, 1000 + i, put(i, f"k{i % 1000}", value)) for i in range(entries)]
    return log_blocks([opened, *puts], TERM, per_block, log_session_id=9)


def run_once(blocks: list[bytes], role: Role, recording: bool, directory: str) -> tuple[float, int]:
    """(CPU seconds, entries applied) of applying every block as the service process does."""
    rec: Any = (
        ProcessRecorder(directory, "bench", f"service-{int(role)}-{recording}", 0, 0, committed_refs=True)
        if recording
        else None
    )
    rec = rec or NullRecorder()
    pending: list[AppliedEntry] = []
    egress: dict[str, list[bytes]] = {}

    def send_egress(channel: str, _session: int, message: bytes) -> None:
        egress.setdefault(channel, []).append(message)

    def record_run(run: AppliedRun) -> None:  # as core/runtime/service.py: rows stay in log order
        if pending:
            rec.applied_many(pending)
            pending.clear()
        rec.applied_run(run)

    agent = ClusteredServiceAgent(
        0,
        0,
        KeyValueService(),
        lambda _m: None,
        send_egress,
        None,
        None if isinstance(rec, NullRecorder) else pending.append,
        on_applied_run=record_run,
    )
    agent.start(None)
    agent.on_join_log(
        JoinLog(
            log_position=0,
            max_log_position=MAX_LOG_POSITION,
            member_id=0,
            is_startup=1,
            role=int(role),
            log_session_id=9,
            log_stream_id=100,
            log_channel="",
        )
    )
    start = time.thread_time()
    for payload in blocks:
        rec.message(RECV, Channel.SERVICE, 0, payload, peer_process="node-0")
        msg = decode(payload)
        assert isinstance(msg, LogBlock)
        walked = msg.walk()
        agent.on_log_frames(walked.frames, msg.commit_position, block=msg.entries, block_position=msg.start_position)
        if egress:
            for payloads in egress.values():
                rec.messages(SEND, Channel.EGRESS, -1, payloads)
            egress.clear()
        if pending:
            rec.applied_many(pending)
            pending.clear()
    rec.close()
    return time.thread_time() - start, agent.applied_count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--block", type=int, default=64, help="entries per LogBlock (default 64)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--payload", type=int, default=64, help="bytes of each put's value (default 64)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.payload < 1:
        parser.error(f"--payload must be at least 1 byte, got {args.payload}")
    blocks = build_blocks(args.entries, args.block, args.payload)
    results: dict[str, Any] = {
        "entries": args.entries,
        "entries_per_block": args.block,
        "payload_bytes": args.payload,
        "us_per_entry": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for role in (Role.FOLLOWER, Role.LEADER):
            for recording in (False, True):
                best = min(
                    run_once(blocks, role, recording, f"{tmp}/{role.name}-{recording}-{r}")[0]
                    for r in range(args.repeat)
                )
                key = f"{role.name.lower()} rec. {'on' if recording else 'off'}"
                results["us_per_entry"][key] = round(best / (args.entries + 1) * 1e6, 3)
                print(f"{key:<22} {results['us_per_entry'][key]:7.3f} us/entry (CPU)")
    per = results["us_per_entry"]
    for role in ("follower", "leader"):
        results[f"{role} on/off cost ratio"] = round(per[f"{role} rec. on"] / per[f"{role} rec. off"], 3)
    print(json.dumps({k: v for k, v in results.items() if "ratio" in k}))
    write_results(args.out, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
