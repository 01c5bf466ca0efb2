"""``clustertrace``: a PySpark Python data source reading clusterlab traces (docs/trace-schema.md) directly.

    spark.dataSource.register(ClusterTraceDataSource)
    df = spark.read.format("clustertrace").option("table", "applied").load("runs/a,runs/b")

The path is one run directory, several separated by commas, or a directory whose sub-directories
are runs (any directory holding a ``run.json``). Files are read on the executors with pyarrow and
handed to Spark as Arrow record batches: nothing is collected on the driver and nothing is converted
first. Partitions follow the files: a file is a partition; small files are packed together up to
``maxPartitionBytes`` (option, default 64 MiB, like ``spark.sql.files.maxPartitionBytes``; 0: one
partition per file) and a larger file is split into stripes of its record batches. A torn tail (a
process killed mid-batch) is tolerated: the complete batches are read, and ``table=files`` yields one
row per file with its ``torn`` flag and ignored bytes, so a job can count them.

Columns: the table's own columns (from the files' schema; the contract's columns never change
meaning) plus ``run_id`` where the table lacks it, and ``file``. With ``runKey`` (option) ``directory``,
``run_id`` is each run's directory as given in the path instead, in every table: the checks key runs by
directory, so two runs sharing a run id (a copy of a run) stay apart. The ``log`` table also gets the
columns a check needs without decoding frames in a UDF: ``entry_digest`` (XXH3-128 of the framed
entry, as ``applied.entry_digest``), ``cluster_session_id`` and ``body`` (the application message of a
``SessionMessage`` entry, else null).

``columns`` (option, comma-separated) narrows the DataFrame to those columns, in that order: the
Python source gets no column pruning from Spark, so without it every column of every row crosses
from the Python worker to the JVM and is converted there, whatever the query then selects. Columns
not asked for are never built (no digest of log entries a query does not read).

Besides pyarrow and pyspark this module imports only :mod:`clusterlab.harness.arrow_stream` (the one
torn-stream reader) and the check views' column builders (:mod:`clusterlab.chaos.checks.views`), all
pyarrow-only; they ship to a Spark cluster in the clusterlab wheel (``spark-submit --py-files``) or
with clusterlab installed on the executors. The views' derived columns (``entry_digest_hi``/``_lo``,
``state_digest_hi``/``_lo``, the log's ``req_id``, ``req_op``, ``req_key``, ``req_value`` and
``event_session_id``) are built only when ``columns`` names them.

``table=files`` also carries each file's stream-message boundaries and their CRC-32s
(``chunk_ends``, ``chunk_crcs``): the completeness judgement (:mod:`clusterlab.harness.completeness`)
compares them with the manifest the run wrote at its end.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from clusterlab.chaos.checks.views import derived_columns, derived_fields
from clusterlab.core.codec.digests import ENTRY_DIGEST_NAME, entry_digest_name_of_run, entry_digest_named
from clusterlab.harness.arrow_stream import StreamRead, read_stream
from clusterlab.harness.completeness import TABLES, row_values, schema_fingerprint
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

FILES = "files"
DEFAULT_PARTITION_BYTES = 64 << 20  # as spark.sql.files.maxPartitionBytes
# A log entry: 32-byte frame header (int32 frame length first), the 8-byte message header
# (block length, template id, schema id, version) and, for SessionMessageHeader (template 1),
# leadership_term_id, cluster_session_id and timestamp before the application's bytes.
_FRAME_HEADER = 32
_MESSAGE_HEADER = 8
_SESSION_MESSAGE_TEMPLATE_ID = 1

FILES_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("table", pa.string()),
        ("file", pa.string()),
        ("rows", pa.int64()),
        ("batches", pa.int32()),
        ("bytes", pa.int64()),
        ("bytes_ignored", pa.int64()),
        ("torn", pa.bool_()),
        ("closed", pa.bool_()),
        ("error", pa.string()),
        ("chunk_ends", pa.list_(pa.int64())),
        ("chunk_crcs", pa.list_(pa.int64())),
        ("schema", pa.string()),
        ("values", pa.string()),
    ]
)


class TraceSourceError(ValueError):
    """A path or option the source cannot use; the message names it."""


@dataclass(frozen=True)
class TraceFile:
    """One Arrow stream file of one run."""

    path: str
    run_id: str
    table: str
    size: int = 0
    entry_digest: str = ENTRY_DIGEST_NAME  # the run's (run.json trace_format.entry_digest)
    run_id_is_directory: bool = False  # ``run_id`` is the run's directory, whatever its rows say (runKey)


@dataclass(frozen=True)
class TracePartition(InputPartition):
    """The unit of parallelism: one file, or small files packed together up to ``maxPartitionBytes``
    (as Spark's own file sources pack them), or one stripe of a large file's record batches (batches
    ``stripe``, ``stripe + stripes``, ...), so a big trace spreads over many tasks."""

    files: tuple[TraceFile, ...]
    stripe: int = 0
    stripes: int = 1


def plan_partitions(files: list[TraceFile], max_bytes: int, *, stripe: bool = True) -> list[TracePartition]:
    """``files`` as partitions: ``max_bytes`` <= 0 means exactly one partition per file; ``stripe``
    False keeps a large file in one partition."""
    if max_bytes <= 0:
        return [TracePartition((f,)) for f in files]
    out: list[TracePartition] = []
    pack: list[TraceFile] = []
    packed = 0
    for f in sorted(files, key=lambda f: f.path):
        if f.size > max_bytes and stripe:
            stripes = -(-f.size // max_bytes)
            out.extend(TracePartition((f,), i, stripes) for i in range(stripes))
            continue
        if pack and packed + f.size > max_bytes:
            out.append(TracePartition(tuple(pack)))
            pack, packed = [], 0
        pack.append(f)
        packed += f.size
    if pack:
        out.append(TracePartition(tuple(pack)))
    return out


RUN_SEARCH_DEPTH = 3  # a sweep directory's runs are runs/<run>/trace: three levels below it


def find_runs(path_option: str) -> list[str]:
    """The run directories named by ``path_option`` (comma-separated): a run itself, or every run
    under a directory that holds runs, up to :data:`RUN_SEARCH_DEPTH` levels down (a ``clusterlab run
    --dir`` directory, a directory of those, a sweep directory with its kept runs), in path order."""
    runs: list[str] = []
    for raw in (p.strip() for p in path_option.split(",")):
        if not raw:
            continue
        if not os.path.isdir(raw):
            raise TraceSourceError(f"clustertrace: {raw}: no such directory")
        found = _runs_under(raw, RUN_SEARCH_DEPTH)
        if not found:
            raise TraceSourceError(
                f"clustertrace: {raw}: not a run directory (no run.json or table folders) and holds no runs"
                f" (searched {RUN_SEARCH_DEPTH} levels down)"
            )
        runs.extend(found)
    if not runs:
        raise TraceSourceError("clustertrace: no path given (load(path) or option('path', ...))")
    return runs


def _runs_under(directory: str, depth: int) -> list[str]:
    """``directory`` if it is a run, else the runs below it up to ``depth`` levels (not inside a run)."""
    if _is_run(directory):
        return [directory]
    if depth == 0:
        return []
    try:
        children = sorted(os.path.join(directory, c) for c in os.listdir(directory))
    except OSError:
        return []
    return [run for c in children if os.path.isdir(c) for run in _runs_under(c, depth - 1)]


def _is_run(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, "run.json")) or any(
        os.path.isdir(os.path.join(directory, t)) for t in TABLES
    )


def _run_info(run_dir: str) -> tuple[str, str]:
    """(run_id, entry digest name) from run.json; the directory name and the current digest without one."""
    try:
        with open(os.path.join(run_dir, "run.json")) as f:
            meta = json.load(f)
        return str(meta.get("run_id") or os.path.basename(os.path.normpath(run_dir))), entry_digest_name_of_run(meta)
    except (OSError, ValueError, AttributeError):
        return os.path.basename(os.path.normpath(run_dir)), ENTRY_DIGEST_NAME


def trace_files(run_dirs: list[str], table: str, *, by_directory: bool = False) -> list[TraceFile]:
    """Every ``<table>/*.arrow`` file of the runs (for ``files``: of every table); ``by_directory``: each
    file's ``run_id`` is its run's directory (as given)."""
    tables = TABLES if table == FILES else (table,)
    out = []
    for run_dir in run_dirs:
        run_id, digest = _run_info(run_dir)
        if by_directory:
            run_id = run_dir
        for t in tables:
            folder = os.path.join(run_dir, t)
            if os.path.isdir(folder):
                for n in sorted(os.listdir(folder)):
                    path = os.path.join(folder, n)
                    if n.endswith(".arrow") and os.path.isfile(path):  # anything else: a stray (judged CORRUPT)
                        out.append(TraceFile(path, run_id, t, os.path.getsize(path), digest, by_directory))
    return out


StreamBatches = StreamRead  # the shared reader's result (complete batches, how the file ended)


def read_batches(path: str) -> StreamRead:
    """Every complete batch of an Arrow IPC stream; a torn tail stops the read, it never raises
    (:func:`clusterlab.harness.arrow_stream.read_stream`, the one torn-stream reader). The file is
    memory-mapped, not read: the batches point into the map, so counting a large file's rows copies
    nothing."""
    return read_stream(path, memory_map=True)


def read_schema(path: str) -> pa.Schema | None:
    """The schema at the head of a stream file (only its first message is read); None if unreadable."""
    try:
        with pa.OSFile(path, "rb") as f:
            return ipc.open_stream(f).schema
    except (pa.ArrowException, OSError):
        return None


def read_stripe(path: str, stripe: int, stripes: int) -> Iterator[pa.RecordBatch]:
    """Record batches ``stripe``, ``stripe + stripes``, ... of a stream file. Messages are walked on a
    memory map, so skipping another stripe's batch costs no copy; a torn tail ends the walk."""
    with pa.memory_map(path) as source:
        try:
            messages = ipc.MessageReader.open_stream(source)
            schema = ipc.read_schema(messages.read_next_message())
        except (pa.ArrowException, OSError, StopIteration):
            return
        index = 0
        while True:
            try:
                message = messages.read_next_message()
            except (StopIteration, pa.ArrowInvalid, OSError):
                return
            if message.type != "record batch":
                continue
            if index % stripes == stripe:
                yield ipc.read_record_batch(message, schema)
            index += 1


def _spark_arrow_type(t: pa.DataType) -> pa.DataType:
    # Spark has no fixed-size binary; digests become plain binary.
    return pa.binary() if pa.types.is_fixed_size_binary(t) else t


def output_schema(table: str, file_schema: pa.Schema | None) -> pa.Schema:
    """The Arrow schema the source yields for ``table`` given one of its files' schema."""
    if table == FILES:
        return FILES_SCHEMA
    if file_schema is None:
        raise TraceSourceError(f"clustertrace: no readable {table} file in the given runs")
    fields = [pa.field(f.name, _spark_arrow_type(f.type), True) for f in file_schema]
    names = {f.name for f in fields}
    if "run_id" not in names:
        fields.insert(0, pa.field("run_id", pa.string(), True))
    if table == "log":
        fields += [
            pa.field("entry_digest", pa.binary(), True),
            pa.field("cluster_session_id", pa.int64(), True),
            pa.field("body", pa.binary(), True),
        ]
    # The check views' columns (digests as int64 halves, the log's requests): built only when asked for.
    fields += [f for f in derived_fields(table) if f.name not in {g.name for g in fields}]
    fields.append(pa.field("file", pa.string(), True))
    return pa.schema(fields)


_LOG_EXTRAS = ("entry_digest", "cluster_session_id", "body")


def _log_extras(entries: pa.Array, wanted: set[str], digest_name: str = ENTRY_DIGEST_NAME) -> dict[str, pa.Array]:
    """The ``wanted`` ones of the log's derived columns, from the framed entries."""
    values = entries.to_pylist()
    out: dict[str, pa.Array] = {}
    if "entry_digest" in wanted:
        digest = entry_digest_named(digest_name)
        out["entry_digest"] = pa.array([digest(v) for v in values], pa.binary())
    if wanted & {"cluster_session_id", "body"}:
        sessions, bodies = [], []
        for value in values:
            session, body = None, None
            if len(value) >= _FRAME_HEADER + _MESSAGE_HEADER + 24:
                (frame_length,) = struct.unpack_from("<i", value, 0)
                block_length, template_id = struct.unpack_from("<HH", value, _FRAME_HEADER)
                if template_id == _SESSION_MESSAGE_TEMPLATE_ID:
                    (session,) = struct.unpack_from("<q", value, _FRAME_HEADER + _MESSAGE_HEADER + 8)
                    body = value[_FRAME_HEADER + _MESSAGE_HEADER + block_length : frame_length]
            sessions.append(session)
            bodies.append(body)
        out["cluster_session_id"] = pa.array(sessions, pa.int64())
        out["body"] = pa.array(bodies, pa.binary())
    return out


def conform(batch: pa.RecordBatch, part: TraceFile, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` of ``part`` shaped as ``schema``: run_id/file added, digests cast, missing columns null.
    Only the columns of ``schema`` are built."""
    n = batch.num_rows
    names = set(schema.names)
    columns = {name: batch.column(name) for name in batch.schema.names if name in names}
    if "run_id" in names and ("run_id" not in columns or part.run_id_is_directory):
        columns["run_id"] = pa.repeat(pa.scalar(part.run_id, pa.string()), n)
    wanted = names & set(_LOG_EXTRAS)
    if part.table == "log" and wanted and "entry" in batch.schema.names:
        columns.update(_log_extras(batch.column("entry"), wanted, part.entry_digest))
    derived = names & {f.name for f in derived_fields(part.table)}
    if derived:
        raw = {name: batch.column(name) for name in batch.schema.names}
        columns.update(derived_columns(part.table, raw, derived, entry_digest=part.entry_digest))
    if "file" in names:
        columns["file"] = pa.repeat(pa.scalar(part.path, pa.string()), n)
    arrays = []
    for f in schema:
        col = columns.get(f.name)
        arrays.append(pa.nulls(n, f.type) if col is None else col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def select_columns(schema: pa.Schema, columns: str | None) -> pa.Schema:
    """``schema`` narrowed to ``columns`` (comma-separated names, in that order); None or "" keeps all."""
    if not columns:
        return schema
    names = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in names if c not in schema.names]
    if unknown:
        raise TraceSourceError(
            f"clustertrace: no column {', '.join(map(repr, unknown))}; columns are {', '.join(schema.names)}"
        )
    if len(set(names)) != len(names):
        raise TraceSourceError(f"clustertrace: a column is named twice in {columns!r}")
    return pa.schema([schema.field(c) for c in names])


def file_row(part: TraceFile, got: StreamRead) -> dict[str, Any]:
    """The ``files`` table's row for one file."""
    return {
        "run_id": part.run_id,
        "table": part.table,
        "file": part.path,
        "rows": sum(b.num_rows for b in got.batches),
        "batches": len(got.batches),
        "bytes": got.size,
        "bytes_ignored": got.size - got.bytes_read,
        "torn": got.error is not None,
        "closed": got.closed,
        "error": got.error,
        "chunk_ends": [end for end, _crc in got.chunks],
        "chunk_crcs": [crc for _end, crc in got.chunks],
        "schema": schema_fingerprint(got.schema),
        "values": row_values(part.table, got.batches),
    }


class ClusterTraceReader(DataSourceReader):
    """One partition per trace file; yields Arrow record batches."""

    def __init__(self, table: str, files: list[TraceFile], schema: pa.Schema, max_bytes: int) -> None:
        self.table = table
        self.files = files
        self.arrow_schema = schema
        self.max_bytes = max_bytes

    def partitions(self) -> list[InputPartition]:
        # The files table reads each file whole (to count rows and find a torn tail): never striped.
        return list(plan_partitions(self.files, self.max_bytes, stripe=self.table != FILES))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TracePartition)
        for part in partition.files:
            if self.table == FILES:
                yield pa.RecordBatch.from_pylist([file_row(part, read_batches(part.path))], schema=FILES_SCHEMA)
                continue
            batches = (
                read_batches(part.path).batches
                if partition.stripes == 1
                else read_stripe(part.path, partition.stripe, partition.stripes)
            )
            for batch in batches:
                if batch.num_rows:
                    yield conform(batch, part, self.arrow_schema)


class ClusterTraceDataSource(DataSource):
    """``spark.read.format("clustertrace").option("table", T).load(PATHS)`` — see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "clustertrace"

    def _table(self) -> str:
        table = self.options.get("table", "applied")
        if table not in (*TABLES, FILES):
            raise TraceSourceError(f"clustertrace: unknown table {table!r}; one of {', '.join((*TABLES, FILES))}")
        return table

    def _files(self) -> list[TraceFile]:
        path = self.options.get("path") or self.options.get("paths") or ""
        key = self.options.get("runKey", "run_id")
        if key not in ("run_id", "directory"):
            raise TraceSourceError(f"clustertrace: runKey must be run_id or directory, not {key!r}")
        return trace_files(find_runs(path), self._table(), by_directory=key == "directory")

    def _arrow_schema(self) -> pa.Schema:
        table = self._table()
        file_schema = None
        if table != FILES:
            for part in self._files():
                file_schema = read_schema(part.path)
                if file_schema is not None:
                    break
        return select_columns(output_schema(table, file_schema), self.options.get("columns"))

    def schema(self) -> StructType:
        return from_arrow_schema(self._arrow_schema())

    def reader(self, schema: StructType) -> DataSourceReader:
        raw = self.options.get("maxPartitionBytes", str(DEFAULT_PARTITION_BYTES))
        try:
            max_bytes = int(raw)
        except ValueError:
            raise TraceSourceError(f"clustertrace: maxPartitionBytes must be an integer, not {raw!r}") from None
        return ClusterTraceReader(self._table(), self._files(), self._arrow_schema(), max_bytes)
