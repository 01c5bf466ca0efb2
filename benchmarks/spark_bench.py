"""Spark trace jobs at scale: the check job and the golden diff job over a generated trace set, and the
same checks in DuckDB on one core (reading the files with pyarrow) as the single-machine reference.

Two data sets are generated on disk as real Arrow IPC stream files per docs/trace-schema.md:

- **big**: one run of ``members`` members, each applying ``rows`` log entries (``applied`` rows), with
  the committed log, commit/leader events, a client op per ten entries, and a few messages; one
  state divergence is planted at a known position, so every engine must report exactly it;
- **many**: ``runs`` runs of 3 members x ``run_rows`` entries each (the many-runs case).

Jobs timed (wall clock, one run each, same process): ``check_runs`` on **big** and on **many**;
``diff_positions`` of **big** against a golden of it (one planted golden divergence); and the same
checks run by the embedded engine (the same SQL, :mod:`clusterlab.chaos.checks.embedded`) and the
diff as DuckDB SQL, with ``threads=1``. Rows/s counts every row read of every table.

    python -m benchmarks.spark_bench                  # --scale small: 5 x 1 M applied rows, 100 runs
    python -m benchmarks.spark_bench --scale full     # 5 x 10 M applied rows, 100 runs (~8 GB on disk)
    python -m benchmarks.spark_bench --scale medium   # 5 x 200 k applied rows, 20 runs: a quick comparison
    python -m benchmarks.spark_bench --scale smoke    # seconds; what the test suite runs

Writes JSON to benchmarks/results/spark.json (``--out``); the generated data is deleted afterwards
(``--keep`` keeps it). Figures depend on the machine: the table says how many cores Spark had.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from clusterlab.core.codec.digests import ENTRY_DIGEST_NAME, entry_digest
from clusterlab.harness.completeness import manifest, sealed_json
from clusterlab.harness.recorder import SCHEMAS

from benchmarks import write_results

SCALES: dict[str, dict[str, int]] = {
    "smoke": {"members": 3, "rows": 5_000, "runs": 3, "run_rows": 1_000},
    "medium": {"members": 5, "rows": 200_000, "runs": 20, "run_rows": 10_000},
    "small": {"members": 5, "rows": 1_000_000, "runs": 100, "run_rows": 10_000},
    "full": {"members": 5, "rows": 10_000_000, "runs": 100, "run_rows": 10_000},
}
ENTRY = 128  # framed length of every generated entry: 32 frame + 8 header + 24 session block + 64 body
BATCH = 65_536
OPS_EVERY = 10
COMMIT_EVERY = 1_000


# ----------------------------------------------------------------------------------------------- data


def _write(path: Path, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, schema) as w:
        for b in batches:
            w.write_batch(b)
            rows += b.num_rows
    return rows


def _const(value: Any, n: int, type_: pa.DataType) -> pa.Array:
    return pa.array(np.full(n, value)) if type_ != pa.string() else pa.array([value] * n, type_)


def _entries(start: int, n: int) -> tuple[pa.Array, list[bytes]]:
    """``n`` framed SessionMessage entries (positions ``start``..) and their XXH3-128 entry digests."""
    buf = np.zeros((n, ENTRY), dtype=np.uint8)
    index = np.arange(start, start + n, dtype=np.int64)
    buf[:, 0:4] = np.frombuffer(np.int32(ENTRY).tobytes(), np.uint8)
    buf[:, 16:24] = (index * ENTRY).astype("<i8").view(np.uint8).reshape(n, 8)
    buf[:, 32:34] = np.frombuffer(np.uint16(24).tobytes(), np.uint8)  # block length
    buf[:, 34:36] = np.frombuffer(np.uint16(1).tobytes(), np.uint8)  # SessionMessageHeader
    buf[:, 48:56] = np.frombuffer(np.int64(1).tobytes(), np.uint8)  # cluster_session_id 1
    bodies = b"".join(
        b'{"id":%10d,"op":"put","key":"k%07d","value":"v%06d"} ' % (i, i % 10_000_000, i % 1_000_000)
        for i in index.tolist()
    )
    buf[:, 64:128] = np.frombuffer(bodies, np.uint8).reshape(n, 64)
    data = buf.tobytes()
    offsets = np.arange(0, (n + 1) * ENTRY, ENTRY, dtype=np.int32)
    array = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)])
    digests = [entry_digest(data[i * ENTRY : (i + 1) * ENTRY]) for i in range(n)]
    return array, digests


@dataclass
class Chunk:
    start: int
    n: int
    entries: pa.Array
    entry_digests: pa.Array
    state_digests: np.ndarray


def _chunks(rows: int, seed: int) -> Iterator[Chunk]:
    rng = np.random.default_rng(seed)
    for start in range(0, rows, BATCH):
        n = min(BATCH, rows - start)
        entries, digests = _entries(start, n)
        yield Chunk(
            start, n, entries, pa.array(digests, pa.binary(16)), rng.integers(0, 256, size=(n, 16), dtype=np.uint8)
        )


def write_run(
    run_dir: Path, run_id: str, members: int, rows: int, *, seed: int = 1, diverge: tuple[int, int] | None = None
) -> dict[str, int]:
    """One synthetic run: ``members`` services applying ``rows`` entries. ``diverge`` (member, entry
    index): that member reports a different state digest there. Returns rows written per table."""
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "scenario": "synthetic",
                "seed": seed,
                "members": [{"member_id": m} for m in range(members)],
                "trace_format": {"entry_digest": ENTRY_DIGEST_NAME},
            }
        )
    )
    counts = {t: 0 for t in SCHEMAS}
    schema = SCHEMAS["applied"]
    writers = {}
    sinks = {}
    for m in range(members):
        path = run_dir / "applied" / f"service-{m}-i0.arrow"
        path.parent.mkdir(parents=True, exist_ok=True)
        sinks[m] = pa.OSFile(str(path), "wb")
        writers[m] = ipc.new_stream(sinks[m], schema)
    log_path = run_dir / "log" / "committed.arrow"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_sink = pa.OSFile(str(log_path), "wb")
    log_writer = ipc.new_stream(log_sink, SCHEMAS["log"])
    ops_rows: list[pa.RecordBatch] = []
    try:
        for c in _chunks(rows, seed):
            index = np.arange(c.start, c.start + c.n, dtype=np.int64)
            positions = pa.array((index + 1) * ENTRY)
            term = pa.array(np.zeros(c.n, dtype=np.int64))
            etype = _const("SessionMessage", c.n, pa.string())
            if c.start == 0:  # the term begins with its NewLeadershipTerm entry (term_starts_with_new_leadership_term)
                etype = pa.array(["NewLeadershipTerm"] + ["SessionMessage"] * (c.n - 1), pa.string())
            log_batch = pa.RecordBatch.from_arrays([positions, term, etype, c.entries], schema=SCHEMAS["log"])
            log_writer.write_batch(log_batch)
            counts["log"] += c.n
            for m in range(members):
                states = c.state_digests
                if diverge is not None and diverge[0] == m and c.start <= diverge[1] < c.start + c.n:
                    states = states.copy()
                    states[diverge[1] - c.start] ^= 0xFF
                batch = pa.RecordBatch.from_arrays(
                    [
                        _const(run_id, c.n, pa.string()),
                        pa.array(np.full(c.n, m, np.int16)),
                        pa.array(np.zeros(c.n, np.int16)),
                        pa.array(np.zeros(c.n, np.int32)),
                        positions,
                        pa.array(np.full(c.n, ENTRY, np.int32)),
                        term,
                        etype,
                        pa.array(index * 1_000),
                        c.entry_digests,
                        pa.FixedSizeBinaryArray.from_buffers(
                            pa.binary(16), c.n, [None, pa.py_buffer(states.tobytes())]
                        ),
                        pa.array(np.zeros(c.n, bool)),
                        pa.array(index * 1_000),
                        pa.array(index),
                    ],
                    schema=schema,
                )
                writers[m].write_batch(batch)
                counts["applied"] += c.n
            acked = index[::OPS_EVERY]
            k = len(acked)
            kinds = pa.array(["invoke", "ok"] * k)
            ops_rows.append(
                pa.RecordBatch.from_arrays(
                    [
                        _const(run_id, 2 * k, pa.string()),
                        pa.array(np.zeros(2 * k, np.int32)),
                        pa.array(np.repeat(acked, 2)),
                        kinds,
                        pa.array(np.repeat(acked, 2) * 1_000),
                        _const("put", 2 * k, pa.string()),
                        pa.array([f"k{i % 10_000_000:07d}" for i in acked for _ in (0, 1)]),
                        pa.array([f"v{i % 1_000_000:06d}" for i in acked for _ in (0, 1)]),
                        pa.array([None, "null"] * k, pa.string()),
                        pa.array(np.ones(2 * k, np.int64)),
                        pa.nulls(2 * k, pa.int64()),
                        pa.nulls(2 * k, pa.int64()),
                        pa.array(np.arange(counts["ops"], counts["ops"] + 2 * k, dtype=np.int64)),
                        pa.nulls(2 * k, pa.string()),
                    ],
                    schema=SCHEMAS["ops"],
                )
            )
            counts["ops"] += 2 * k
    finally:
        for m in range(members):
            writers[m].close()
            sinks[m].close()
        log_writer.close()
        log_sink.close()
    counts["ops"] = _write(run_dir / "ops" / "client-0-i0.arrow", SCHEMAS["ops"], iter(ops_rows))
    ends = np.arange(COMMIT_EVERY, rows + 1, COMMIT_EVERY, dtype=np.int64) * ENTRY
    for m in range(members):
        # Member 0 leads term 0, elected by every other member's YES vote (leader_has_quorum_of_votes).
        n = len(ends) + 1
        kinds = ["leader" if m == 0 else "vote"] + ["commit"] * len(ends)
        terms = [0] * (len(ends) + 1)
        positions = [0, *ends.tolist()]
        vote = {
            "candidate": 0,
            "vote": True,
            "log_leadership_term_id": 0,
            "candidate_log_leadership_term_id": 0,
            "candidate_log_position": 0,
        }
        details = [json.dumps(vote) if m else "{}"] + ["{}"] * len(ends)
        counts["events"] += _write(
            run_dir / "events" / f"node-{m}-i0.arrow",
            SCHEMAS["events"],
            iter(
                [
                    pa.RecordBatch.from_arrays(
                        [
                            _const(run_id, n, pa.string()),
                            pa.array(np.arange(n, dtype=np.int64)),
                            _const(f"node-{m}", n, pa.string()),
                            pa.array(np.full(n, m, np.int16)),
                            pa.array(kinds),
                            pa.array(terms, pa.int64()),
                            pa.array(positions, pa.int64()),
                            pa.array(details, pa.string()),
                            pa.array(np.zeros(n, np.int32)),
                            pa.array(np.arange(n, dtype=np.int64)),
                        ],
                        schema=SCHEMAS["events"],
                    )
                ]
            ),
        )
    counts["messages"] = _write(
        run_dir / "messages" / "node-0-i0.arrow",
        SCHEMAS["messages"],
        iter(
            [
                pa.Table.from_pylist(
                    [
                        {
                            "run_id": run_id,
                            "member_id": 0,
                            "process": "node-0",
                            "incarnation": 0,
                            "seq": i,
                            "wall_ns": i,
                            "mono_ns": i,
                            "direction": "send",
                            "channel": "log",
                            "peer": 1,
                            "msg_type": "LogBlock",
                            "leadership_term_id": 0,
                            "log_position": i * ENTRY,
                            "payload": b"x",
                        }
                        for i in range(1000)
                    ],
                    schema=SCHEMAS["messages"],
                ).to_batches()[0]
            ]
        ),
    )
    _seal(run_dir)
    return counts


def _seal(run_dir: Path) -> None:
    """Finish run.json as the recorder does at a run's end (outcome, manifest, seal), so the
    completeness judge takes the synthetic run as COMPLETE and every check judges it."""
    meta = json.loads((run_dir / "run.json").read_text())
    meta.update(outcome="ok", **manifest(run_dir, tuple(SCHEMAS)))
    (run_dir / "run.json").write_bytes(sealed_json(meta))


def write_golden(golden_dir: Path, run_dir: Path, diverge_at: int) -> int:
    """A golden of run ``run_dir`` (member 0's states, one row per position) differing at entry
    ``diverge_at``. Returns its rows."""
    src = run_dir / "applied" / "service-0-i0.arrow"
    rows = 0

    def batches() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        with pa.memory_map(str(src)) as f:
            for b in ipc.open_stream(f):
                if rows <= diverge_at < rows + b.num_rows:
                    states = bytearray(b.column("state_digest").buffers()[1].to_pybytes()[: 16 * b.num_rows])
                    i = diverge_at - rows
                    states[16 * i : 16 * i + 16] = bytes(16)
                    arrays = b.columns
                    arrays[b.schema.get_field_index("state_digest")] = pa.FixedSizeBinaryArray.from_buffers(
                        pa.binary(16), b.num_rows, [None, pa.py_buffer(bytes(states))]
                    )
                    arrays[b.schema.get_field_index("member_id")] = pa.array(np.full(b.num_rows, -1, np.int16))
                    b = pa.RecordBatch.from_arrays(arrays, schema=b.schema)
                rows += b.num_rows
                yield b

    golden_dir.mkdir(parents=True)
    (golden_dir / "run.json").write_text(json.dumps({"run_id": "golden-bench"}))
    _write(golden_dir / "applied" / "golden.arrow", SCHEMAS["applied"], batches())
    return rows


# ----------------------------------------------------------------------------------------------- duckdb


def _read_table(dirs: list[Path], table: str) -> pa.Table:
    """Every file of ``table`` read exactly as the Spark source reads it (same code), sequentially."""
    from clusterlab.spark.source import conform, output_schema, read_batches, read_schema, trace_files

    files = trace_files([str(d) for d in dirs], table)
    schema = output_schema(table, next((s for s in (read_schema(f.path) for f in files) if s is not None), None))
    batches = [conform(b, f, schema) for f in files for b in read_batches(f.path).batches if b.num_rows]
    return pa.Table.from_batches(batches, schema=schema)


DUCKDB_DIFF = """
    WITH actual AS (
      SELECT log_position, min(entry_digest) AS entry_min, max(entry_digest) AS entry_max,
             min(state_digest) AS state_min, max(state_digest) AS state_max
      FROM applied WHERE entry_type <> 'Snapshot' GROUP BY log_position)
    SELECT coalesce(g.log_position, a.log_position) AS log_position FROM golden g
      FULL OUTER JOIN actual a ON g.log_position = a.log_position
    WHERE g.log_position IS NULL OR a.log_position IS NULL
       OR a.entry_min IS DISTINCT FROM a.entry_max OR a.entry_min IS DISTINCT FROM g.entry_digest
       OR a.state_min IS DISTINCT FROM a.state_max OR a.state_min IS DISTINCT FROM g.state_digest
    ORDER BY 1"""

# A bound on DuckDB's own memory (it spills past it): the Arrow tables it scans are already in memory.
DUCKDB_MEMORY_LIMIT = "4GB"


def _duckdb() -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 1")
    con.execute(f"SET memory_limit = '{DUCKDB_MEMORY_LIMIT}'")
    con.execute("SET preserve_insertion_order = false")
    return con


def duckdb_diff(golden: Path, actual: Path) -> tuple[list[int], int]:
    con = _duckdb()
    g, a = _read_table([golden], "applied"), _read_table([actual], "applied")
    con.register("golden", g)
    con.register("applied", a)
    return [r[0] for r in con.execute(DUCKDB_DIFF).fetchall()], g.num_rows + a.num_rows


# ----------------------------------------------------------------------------------------------- main


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t


def _started(master: str | None) -> Any:
    """A session whose Python workers are up: one trivial task per slot runs first, so no timed job pays
    for starting them (as no DuckDB timing pays for importing DuckDB)."""
    from clusterlab.spark.session import spark_session

    spark = spark_session(master, app_name="clusterlab-bench")
    slots = spark.sparkContext.defaultParallelism
    spark.range(slots, numPartitions=slots).mapInArrow(lambda batches: batches, "id long").collect()
    return spark


def run(
    scale: str, workdir: Path, master: str | None = None, spark: Any = None, plans: tuple[str, ...] = ("auto",)
) -> dict[str, Any]:
    """Generate the data sets in ``workdir``, time every job, return the results (also printed).
    ``spark``: a session to use (kept open); by default one is started and stopped."""
    from clusterlab.chaos.checks.embedded import check_runs as embedded_check
    from clusterlab.golden.spark_diff import Comparison, diff_positions
    from clusterlab.spark.check import check_runs

    p = SCALES[scale]
    big, golden, many = workdir / "big", workdir / "golden", workdir / "many"
    plant_entry, golden_entry = p["rows"] // 3, (2 * p["rows"]) // 3
    print(
        f"generating: big = {p['members']} members x {p['rows']:,} entries; many = {p['runs']} runs x 3 x "
        f"{p['run_rows']:,}",
        flush=True,
    )
    (big_rows, gen_big) = _timed(
        lambda: write_run(big, "big", p["members"], p["rows"], diverge=(p["members"] - 1, plant_entry))
    )
    golden_rows = write_golden(golden, big, golden_entry)
    many_rows: dict[str, int] = {}
    for i in range(p["runs"]):
        for t, n in write_run(many / f"run-{i:03d}", f"run-{i:03d}", 3, p["run_rows"], seed=i + 2).items():
            many_rows[t] = many_rows.get(t, 0) + n
    disk = sum(f.stat().st_size for f in workdir.rglob("*") if f.is_file())
    print(f"generated {disk / 1e9:.2f} GB in {gen_big:.0f} s (big)", flush=True)

    load_at_start = [round(x, 2) for x in os.getloadavg()]  # the machine may be shared
    own_spark = spark is None
    if own_spark:
        spark, start_s = _timed(lambda: _started(master))
    else:
        start_s = 0.0
    cores = spark.sparkContext.defaultParallelism
    results: list[dict[str, Any]] = []

    def record(job: str, engine: str, rows: int, seconds: float, verdict: str) -> None:
        results.append(
            {
                "job": job,
                "engine": engine,
                "rows": rows,
                "seconds": round(seconds, 2),
                "rows_per_s": round(rows / seconds),
                "verdict": verdict,
            }
        )
        print(
            f"  {job:24} {engine:22} {rows:>12,} rows {seconds:8.1f} s {rows / seconds:>12,.0f} rows/s  {verdict}",
            flush=True,
        )

    plant_position = (plant_entry + 1) * ENTRY
    golden_position = (golden_entry + 1) * ENTRY
    read_rows = sum(big_rows[t] for t in ("applied", "events", "ops", "log"))
    many_read = sum(many_rows[t] for t in ("applied", "events", "ops", "log"))
    diff_rows = golden_rows + big_rows["applied"]
    comparison = Comparison("bench", "replay", str(golden.resolve()), str(big.resolve()))
    for plan in plans:
        engine = f"Spark {master or 'local[*]'}" + ("" if plan == "auto" else f", {plan} plan")
        report, s = _timed(lambda plan=plan: check_runs([big], spark=spark, write_json=False, plan=plan))
        found = [v["log_position"] for v in report.checks["agreement"].violations]
        assert (
            found == [plant_position]
            and report.checks["agreement"].count == 1
            and [c for c, r in report.checks.items() if not r.ok] == ["agreement"]
        ), report.to_json()
        record("check big", engine, read_rows, s, f"agreement at {found}")
        report, s = _timed(lambda plan=plan: check_runs([many], spark=spark, write_json=False, plan=plan))
        assert report.ok and len(report.run_ids) == p["runs"], report.to_json()
        record(f"check {p['runs']} runs", engine, many_read, s, "pass")
        diff_plan = {"auto": "tasks"}.get(plan, plan)
        diffs, s = _timed(lambda plan=diff_plan: diff_positions(spark, [comparison], plan=plan))
        d = diffs[("bench", "replay")]
        assert d.first is not None and d.first["log_position"] == min(plant_position, golden_position), d
        assert d.divergent == 2, d
        record("golden diff big", engine, diff_rows, s, f"{d.divergent} divergent, first {d.first['log_position']}")
    # The embedded engine: the same SQL checks (and linearizability), DuckDB on one thread.
    duck, s = _timed(lambda: embedded_check([big], write_json=False, threads=1))
    found = [v["log_position"] for v in duck.checks["agreement"].violations]
    assert found == [plant_position] and [c for c, r in duck.checks.items() if not r.ok] == ["agreement"], found
    record("check big", "DuckDB 1 thread", read_rows, s, f"agreement at {found}")
    duck, s = _timed(lambda: embedded_check(sorted(many.iterdir()), write_json=False, threads=1))
    assert duck.ok and len(duck.run_ids) == p["runs"], duck.to_json()
    record(f"check {p['runs']} runs", "DuckDB 1 thread", many_read, s, "pass")
    (positions, rows), s = _timed(lambda: duckdb_diff(golden, big))
    assert positions == sorted([plant_position, golden_position]), positions
    record("golden diff big", "DuckDB 1 thread", rows, s, f"{len(positions)} divergent, first {positions[0]}")
    if own_spark:
        spark.stop()
    return {
        "scale": scale,
        "params": p,
        "spark_cores": cores,
        "spark_master": master or "local[*]",
        "spark_start_s": round(start_s, 1),
        "generated_bytes": disk,
        "generate_big_s": round(gen_big, 1),
        "rows": {"big": big_rows, "many": many_rows, "golden": golden_rows},
        "results": results,
        "machine_cpus": os.cpu_count(),
        "loadavg_at_start": load_at_start,
        "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--dir", default=None, help="where to generate the data (default a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    parser.add_argument("--out", default="benchmarks/results/spark.json")
    parser.add_argument(
        "--plans",
        default="auto",
        help="comma-separated Spark plans to time: auto (the default plan), tasks, sql (each check a SQL job)",
    )
    args = parser.parse_args(argv)
    plans = tuple(args.plans.split(","))
    if not set(plans) <= {"auto", "tasks", "sql"}:
        parser.error(f"--plans: each of auto, tasks, sql, not {args.plans!r}")
    os.environ.setdefault("CLUSTERLAB_SPARK_DRIVER_MEMORY", "6g")
    workdir = Path(tempfile.mkdtemp(prefix="clusterlab-spark-bench-", dir=args.dir))
    try:
        doc = run(args.scale, workdir, args.master, plans=plans)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"wrote {write_results(args.out, doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
