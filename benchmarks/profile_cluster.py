"""Where the time goes: sample every process of a 3-member cluster at saturation with py-spy.

Run: ``python -m benchmarks.profile_cluster [--recording on|off|both] [--member-process split|single|both]
[--payload 64] [--seconds 15]``
(py-spy comes from the ``bench`` extra; on Linux it needs ptrace rights over the member processes,
which a process has over its own children). It starts a LocalCluster (KV service) as the cluster
benchmark does, drives it with the benchmark's pipelined saturation client (``run_saturation``), and
meanwhile runs ``py-spy record --format raw`` on each node, each service process and on this client
process. Each process's samples (on-CPU only: py-spy leaves out idle threads) are sorted into areas
by the code on the stack (:data:`AREAS`) and printed as a percentage of that process's samples, with
the CPU cores each process used and its CPU µs per committed op (cores ÷ ops/s: it moves less with the
machine than ops/s do); the breakdown is written as JSON (``--out``, default
``benchmarks/results/profile.json``) and the raw collapsed stacks are kept next to it (for a flame
graph: ``flamegraph.pl`` or speedscope read them).

Attribution: a stack belongs to the first area, in :data:`AREAS` order, one of whose patterns it
contains, so the recorder (and the digests only a recording service computes) owns everything
called under it, egress owns the ZeroMQ sends of replies, and what remains goes to the leaf-most
area (codec, consensus, archive, service apply, ZeroMQ, duty cycle).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import write_results
from benchmarks.cluster_bench import ClusterlabSubject
from benchmarks.peers.common import payload_of, proc_cpu_seconds, run_saturation

# (area, substrings of a collapsed frame "function (file:line)"). Stack-owning areas first, then leaf areas.
OWNING_AREAS: list[tuple[str, tuple[str, ...]]] = [
    ("recorder/Arrow", ("harness/recorder.py", "pyarrow/")),
    ("entry+state digests (recording only)", ("_entry_digest", "_state_digest", "state_digest (")),
    ("egress (service replies)", ("_send_egress", "_flush_egress", "EgressCache")),
]
LEAF_AREAS: list[tuple[str, tuple[str, ...]]] = [
    ("archive append/fsync", ("core/archive/",)),
    ("codec", ("core/codec/",)),
    ("service apply (KV)", ("harness/services/", "core/service/")),
    ("consensus module", ("core/consensus/",)),
    ("client library", ("core/client/", "core/runtime/client.py")),
    ("zmq send/recv + framing", ("zmq/", "core/runtime/transport.py")),
    ("duty cycle/poll", ("core/runtime/runner.py",)),
    ("runtime glue (node.py/service.py)", ("core/runtime/",)),
    ("bench driver", ("benchmarks/",)),
]
OTHER = "other"


def area_of(stack: list[str]) -> str:
    """The area a stack (root first) belongs to; see the module docstring."""
    for area, patterns in OWNING_AREAS:
        if any(p in frame for frame in stack for p in patterns):
            return area
    for frame in reversed(stack):
        for area, patterns in LEAF_AREAS:
            if any(p in frame for p in patterns):
                return area
    return OTHER


def breakdown(raw: Path) -> tuple[int, dict[str, float], list[tuple[str, int]]]:
    """(samples, percent per area, hottest leaf frames) of a py-spy ``--format raw`` file."""
    per_area: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        n = int(count_text)
        frames = stack_text.split(";")
        if frames and frames[0].startswith(("process ", "thread ")):
            frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        total += n
        per_area[area_of(frames)] += n
        leaves[frames[-1] if frames else "?"] += n
    percent = {a: round(100.0 * c / total, 1) for a, c in per_area.most_common()} if total else {}
    return total, percent, leaves.most_common(12)


def profile(
    recording: bool, payload_size: int, seconds: float, rate: int, out_dir: Path, member_process: str = "split"
) -> dict[str, Any]:
    """Profile one cluster at saturation; returns {process: {cores, cpu_us_per_op, samples, areas, top}}.

    ``member_process``: LocalCluster's ``"split"`` (a node and a service process per member) or ``"single"``
    (one process per member, profiled under its node's name)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        raise SystemExit("py-spy not found: pip install py-spy (it is in the 'bench' extra)")
    subject = ClusterlabSubject(recording, member_process=member_process)
    subject.start("default", None)  # type: ignore[arg-type]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    cpu0: dict[str, float | None] = {}
    names: dict[str, int] = {}
    try:
        cluster = subject.cluster
        leader = cluster.leader_id()
        for i in range(cluster.member_count):
            role = "leader" if i == leader else "follower"
            for kind in ("member", "node", "service"):  # a one-process member answers for all three
                p = cluster._process(i, kind)
                if p is not None and p.pid not in names.values():
                    names[f"{kind}-{i} ({role})"] = p.pid
        names["client (this process)"] = os.getpid()
        client = subject.client()
        payload = payload_of(payload_size)
        run_saturation(client, payload, 20_000, 2.0, 1.0)  # warm up: sessions, caches, steady state
        for name, pid in names.items():
            raw = _raw_path(out_dir, recording, member_process, name)
            cmd = [py_spy, "record", "--pid", str(pid), "--rate", str(rate), "--duration", str(int(seconds))]
            cmd += ["--format", "raw", "--output", str(raw), "--nonblocking"]
            procs[name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            cpu0[name] = proc_cpu_seconds(pid)
        t0 = time.monotonic()
        sat = run_saturation(client, payload, 20_000, 0.5, seconds - 0.5)
        elapsed = time.monotonic() - t0
        cores = {}
        for name, pid in names.items():
            c1, c0 = proc_cpu_seconds(pid), cpu0[name]
            cores[name] = round((c1 - c0) / elapsed, 2) if c1 is not None and c0 is not None else None
        for p in procs.values():
            p.wait(timeout=seconds + 60)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
        subject.stop()
    result: dict[str, Any] = {
        "recording": recording,
        "member_process": member_process,
        "payload_bytes": payload_size,
        "saturation": sat,
    }
    ops_per_s = sat["ops_per_s"]
    per_op = {n: _cpu_us_per_op(c, ops_per_s) for n, c in cores.items()}
    result["cpu_us_per_op"] = {
        "total": round(sum(v for v in per_op.values() if v is not None), 2),
        "cluster (without the client)": round(
            sum(v for n, v in per_op.items() if v is not None and not n.startswith("client")), 2
        ),
    }
    for name in names:
        raw = _raw_path(out_dir, recording, member_process, name)
        if not raw.exists():
            err = procs[name].stderr.read().decode(errors="replace") if procs[name].stderr else ""
            result[name] = {"error": f"py-spy wrote nothing: {err.strip()[-300:]}"}
            continue
        samples, areas, top = breakdown(raw)
        result[name] = {
            "cores": cores.get(name),
            "cpu_us_per_op": per_op.get(name),
            "samples": samples,
            "areas": areas,
            "top": top,
        }
    return result


def _raw_path(out_dir: Path, recording: bool, member_process: str, name: str) -> Path:
    """Where py-spy writes one process's collapsed stacks."""
    return out_dir / f"{'on' if recording else 'off'}-{member_process}-{name.split()[0]}.txt"


def _cpu_us_per_op(cores: float | None, ops_per_s: float) -> float | None:
    """CPU µs a process spent per committed op: its cores divided by the cluster's ops per second."""
    if cores is None or ops_per_s <= 0:
        return None
    return round(cores * 1e6 / ops_per_s, 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recording", choices=("on", "off", "both"), default="both")
    parser.add_argument("--payload", type=int, default=64, help="request payload bytes (default 64)")
    parser.add_argument("--seconds", type=float, default=15.0, help="sampling time per cluster (default 15)")
    parser.add_argument(
        "--member-process",
        choices=("split", "single", "both"),
        default="split",
        help="members as a node and a service process (split, the default), one process (single), or both",
    )
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second (default 250)")
    parser.add_argument("--out", default="benchmarks/results/profile.json", help="JSON output file")
    args = parser.parse_args(argv)
    if args.seconds < 2:
        parser.error(f"--seconds must be at least 2, got {args.seconds}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw_dir = Path(tempfile.mkdtemp(prefix="profile-", dir=out.parent))
    results = []
    modes = ["split", "single"] if args.member_process == "both" else [args.member_process]
    runs = [
        (m, rec) for m in modes for rec in ([True, False] if args.recording == "both" else [args.recording == "on"])
    ]
    for mode, rec in runs:
        r = profile(rec, args.payload, args.seconds, args.rate, raw_dir, mode)
        results.append(r)
        ops = r["saturation"]["ops_per_s"]
        cpu = r["cpu_us_per_op"]
        print(
            f"\n=== {mode}, recording {'on' if rec else 'off'}: {ops:,.0f} ops/s at {args.payload} B; CPU per op "
            f"{cpu['cluster (without the client)']} µs in the cluster, {cpu['total']} µs with the client"
        )
        for name, v in r.items():
            if not isinstance(v, dict) or ("areas" not in v and "error" not in v):
                continue
            if "error" in v:
                print(f"  {name}: {v['error']}")
                continue
            areas = ", ".join(f"{a} {p}%" for a, p in v["areas"].items() if p >= 1.0)
            print(f"  {name}: {v['cores']} cores, {v['cpu_us_per_op']} µs/op, {v['samples']} samples: {areas}")
            for leaf, n in v["top"][:5]:
                print(f"      {100 * n / max(1, v['samples']):5.1f}%  {leaf}")
    write_results(out, {"raw_stacks": str(raw_dir), "runs": results})
    print(f"\nwrote {out} (collapsed stacks in {raw_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
