"""The one torn-stream reader of Arrow IPC trace files, shared by :mod:`clusterlab.harness.trace` (pyarrow
readers) and the Spark source (:mod:`clusterlab.spark.source`).

A process killed with SIGKILL may leave a stream file that ends inside a record batch, or without the
end-of-stream marker: :func:`read_stream` returns every complete batch and says how the file ended
instead of raising. It also returns where each stream message ends (``chunk_ends``: after the schema,
then after each batch) and a CRC-32 of each chunk's bytes, so a reader can compare a file with what
the run's manifest recorded at the end of the run (docs/trace-schema.md, "Completeness") and tell a
truncated file (rows lost) from a changed one (corrupt, at an offset).

This module imports only the standard library and pyarrow: it ships to Spark executors as it is.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.ipc as ipc

EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # Arrow IPC end-of-stream marker (continuation + length 0)


@dataclass
class StreamRead:
    """What :func:`read_stream` got from one file."""

    schema: pa.Schema | None  # None: the file does not even hold a readable schema
    batches: list[pa.RecordBatch]
    bytes_read: int  # up to the end of the last complete message
    size: int
    closed: bool  # ends with the end-of-stream marker
    error: str | None  # why reading stopped early (a torn or unreadable tail); None: read to the end
    chunks: list[tuple[int, int]] = field(default_factory=list)  # (end offset, crc32 of the chunk) per message

    @property
    def rows(self) -> int:
        return sum(b.num_rows for b in self.batches)

    @property
    def bytes_ignored(self) -> int:
        return self.size - self.bytes_read

    @property
    def torn(self) -> bool:
        return self.error is not None

    def table(self, schema: pa.Schema | None = None) -> pa.Table:
        """The complete batches as one table (empty, of ``schema`` if given, when there are none)."""
        if self.schema is None:
            return (schema or pa.schema([])).empty_table()
        return pa.Table.from_batches(self.batches, schema=self.schema)


def read_stream(path: str, *, memory_map: bool = False) -> StreamRead:
    """Every complete record batch of an Arrow IPC stream file; never raises on a torn or garbled tail.

    The file is read once: into memory by default, or memory-mapped (``memory_map``: no copy at all,
    what the Spark executors use; the batches then point into the map, so the file must not shrink
    while they live). The CRC of each message is taken over the same bytes the batches come from."""
    if memory_map:
        data: pa.Buffer | bytes = pa.memory_map(path).read_buffer()
    else:
        with open(path, "rb") as f:
            data = f.read()
    size = len(data)
    view = memoryview(data)
    closed = size >= len(EOS) and bytes(view[size - len(EOS) :]) == EOS
    source = pa.BufferReader(data)
    chunks: list[tuple[int, int]] = []
    try:
        reader = ipc.open_stream(source)
    except (pa.ArrowException, OSError) as e:  # any garbled schema (ArrowInvalid, ArrowNotImplementedError, ...)
        return StreamRead(None, [], 0, size, False, f"no readable schema: {e}", [])
    consumed = source.tell()
    chunks.append((consumed, zlib.crc32(view[:consumed])))
    batches: list[pa.RecordBatch] = []
    error: str | None = None
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            end = source.tell()
            if end > consumed:  # the end-of-stream marker
                chunks.append((end, zlib.crc32(view[consumed:end])))
            consumed = end
            break
        except (pa.ArrowException, OSError) as e:
            error = str(e)
            break
        end = source.tell()
        chunks.append((end, zlib.crc32(view[consumed:end])))
        consumed = end
        batches.append(batch)
    return StreamRead(reader.schema, batches, consumed, size, closed, error, chunks)
