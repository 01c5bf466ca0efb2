"""Complete or not judged: before any check, a reader establishes that a run's trace holds everything the
run itself declares (docs/trace-schema.md, "Completeness").

The writer side: at the end of a run, :class:`clusterlab.harness.recorder.RunRecorder` puts a manifest into
run.json (:func:`manifest`): ``schema_version`` and, per stream file, its table, process, incarnation,
rows, size, whether it was closed or torn, and the CRC-32 of every stream message (schema, batches,
end-of-stream marker); then it seals run.json (:func:`sealed_json`: the SHA-256 of every other field, in
the one byte form run.json is written in). A process's recorder that gives up on a disk error leaves a
sidecar ``incomplete/<process>.json`` = ``{"process", "reason", "at_ns", "table"}``.

The reader side: :func:`read_meta` checks the seal, :func:`judge` checks what run.json declares and
compares what is on disk (:class:`FileFacts`, one per file, from the shared torn-stream reader) with the
manifest, and returns a :class:`Completeness`:

- ``INCOMPLETE`` — run.json missing or unreadable, without its seal, manifest, run id or a finished
  outcome, a recorder sidecar, a table or file missing, rows lost to truncation, or a torn tail that no
  SIGKILL of its process (a ``kill`` event) explains;
- ``CORRUPT`` — run.json changed after the run sealed it, a malformed manifest entry or run.json value,
  a file the manifest does not list, a file whose bytes differ (CRC) from what the run recorded or that
  grew past them (named with the offset of the first changed stream message), or rows that are not the
  run's own (:func:`value_findings`: these hold even when the manifest and seal were rewritten);
- ``COMPLETE`` — otherwise; torn tails a kill explains are kept in ``notes`` and shown.

Whatever its schema version, a run.json without a manifest is never judged. A newer schema version
than :data:`SCHEMA_VERSION` is a :class:`SchemaVersionError`, never a guess.

This module imports only the standard library, pyarrow, orjson, :mod:`clusterlab.harness.arrow_stream` and the
digest names of :mod:`clusterlab.core.codec.digests`, so the local
verdict, the Spark check (which computes the same :class:`FileFacts` on its executors), golden
bless/verify, the report and ``trace summary`` share one judgement.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from clusterlab.core.codec.digests import ENTRY_DIGESTS
from clusterlab.harness.arrow_stream import StreamRead, read_stream

SCHEMA_VERSION = 4  # 1: no version key; 2: + the manifest; 3: + the seal; 4: + payload references
# (docs/trace-schema.md, "Versions")
SEALED_SINCE = 3  # from this version on run.json must carry its seal
SEAL = "seal"  # run.json's key: SHA-256 of the rest of run.json in its canonical form
OUTCOMES = ("ok", "failed")  # a finished run's ``outcome``
INCOMPLETE_DIR = "incomplete"  # recorder sidecars: incomplete/<process>.json

# Exit codes of `clusterlab check` and `clusterlab run` (docs/trace-schema.md, "Verdicts").
EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3
EXIT_CORRUPT = 4

_FILE_NAME = re.compile(r"^(?P<process>.+)-i(?P<incarnation>\d+)\.arrow$")
_MEMBER_PROCESS = re.compile(
    r"^(?P<kind>node|service)(?:-s\d+)?-(?P<member>\d+)$"
)  # service-s<id>-<m>: a service id > 0


class Status(StrEnum):
    """A run's completeness verdict."""

    COMPLETE = "COMPLETE"
    INCOMPLETE = "INCOMPLETE"
    CORRUPT = "CORRUPT"


class SchemaVersionError(ValueError):
    """run.json declares a trace schema version this clusterlab cannot read."""


@dataclass(frozen=True)
class FileFacts:
    """What a reader found in one stream file (``path`` relative to the run: ``applied/service-0-i1.arrow``)."""

    path: str
    table: str
    size: int
    rows: int
    bytes_read: int
    closed: bool
    error: str | None
    chunks: tuple[tuple[int, int], ...]  # (end offset, crc32) of each complete stream message
    parsed: bool = True  # a readable schema
    schema: str | None = None  # its columns (schema_fingerprint); None: unknown
    values: str | None = None  # what its rows say of whose they are (row_values); None: unknown

    @classmethod
    def of(cls, path: str, table: str, got: StreamRead, *, values: bool = True) -> FileFacts:
        """The facts of one read file; ``values=False`` leaves its :func:`row_values` out (the manifest,
        which does not record them, need not read every row)."""
        return cls(
            path,
            table,
            got.size,
            got.rows,
            got.bytes_read,
            got.closed,
            got.error,
            tuple(got.chunks),
            got.schema is not None,
            schema_fingerprint(got.schema),
            row_values(table, got.batches) if values else None,
        )

    @property
    def process(self) -> str:
        m = _FILE_NAME.match(Path(self.path).name)
        return m["process"] if m else Path(self.path).stem

    @property
    def incarnation(self) -> int | None:
        m = _FILE_NAME.match(Path(self.path).name)
        return int(m["incarnation"]) if m else None

    @property
    def torn(self) -> bool:
        return self.error is not None

    def manifest_entry(self) -> dict[str, Any]:
        """This file's entry in run.json's ``files``."""
        return {
            "table": self.table,
            "process": self.process,
            "incarnation": self.incarnation,
            "rows": self.rows,
            "bytes": self.bytes_read,
            "size": self.size,
            "closed": self.closed,
            "torn": self.torn,
            "chunks": [list(c) for c in self.chunks],
        }


TABLES = ("messages", "applied", "events", "ops", "log")  # a run's table folders (docs/trace-schema.md)


def trace_file_paths(folder: Path) -> list[Path]:
    """The regular ``*.arrow`` files of one table folder, sorted: what every reader reads. Anything
    else there is a stray (:func:`strays`)."""
    return sorted(p for p in folder.glob("*.arrow") if p.is_file())


def strays(run_dir: Path | str) -> list[Finding]:
    """Every entry of a run's table folders that is not a regular ``*.arrow`` file (another name, a
    directory, a link to nowhere): CORRUPT, the run writes nothing else there."""
    out = []
    for table in TABLES:
        folder = Path(run_dir) / table
        for path in sorted(folder.iterdir()) if folder.is_dir() else ():
            if path.name.endswith(".arrow") and path.is_file():
                continue
            what = (
                "a directory" if path.is_dir() else "not a regular file" if not path.is_file() else "not a trace file"
            )
            out.append(
                Finding(Status.CORRUPT, f"{table}/{path.name}", f"{what} in a table folder: the run did not write it")
            )
    return out


def schema_fingerprint(schema: pa.Schema | None) -> str | None:
    """A stream's columns, one ``name<TAB>type`` line each (None without a readable schema): what the
    files of one table must share. Tab and newline, because a type may hold commas and colons."""
    if schema is None:
        return None
    try:
        return "\n".join(f"{f.name}\t{f.type}" for f in schema)
    except (UnicodeDecodeError, pa.ArrowException):  # garbled names: the file's CRC names the damage
        return None


def schema_findings(facts: Iterable[FileFacts]) -> list[Finding]:
    """CORRUPT for each file whose columns differ from those most files of its table have: a table has
    one schema (docs/trace-schema.md), and a reader would read a missing column as nulls."""
    by_table: dict[str, list[FileFacts]] = {}
    for f in facts:
        if f.schema is not None:
            by_table.setdefault(f.table, []).append(f)
    out = []
    for table, files in sorted(by_table.items()):
        counts = Counter(f.schema for f in files)
        usual = max(counts, key=lambda s: (counts[s], s or ""))
        want = _columns(usual)
        for f in files:
            if f.schema != usual:
                got = _columns(f.schema)
                missing = [n for n in want if n not in got]
                extra = [n for n in got if n not in want]
                retyped = [n for n in want if n in got and got[n] != want[n]]
                what = "; ".join(
                    f"{label} {', '.join(names)}"
                    for label, names in (("missing", missing), ("extra", extra), ("other type", retyped))
                    if names
                )
                out.append(
                    Finding(
                        Status.CORRUPT, f.path, f"its columns differ from the other {table} files' ({what or 'order'})"
                    )
                )
    return out


ROW_VALUE_COLUMNS = ("run_id", "member_id", "detail")  # the columns row_values reads


def row_values(table: str, batches: Iterable[pa.RecordBatch]) -> str | None:
    """What one file's rows say of whose they are, as JSON: the distinct ``run_id`` and ``member_id``
    values and, in ``events``, how many ``detail`` values are not a JSON object (with the first). The
    checks take these on trust (a row's run, its member, a detail they parse), so :func:`value_findings`
    holds them against run.json and the file's name. None when the batches are not valid Arrow (their
    CRC names that damage)."""
    run_ids: set[Any] = set()
    members: set[Any] = set()
    bad_details, first_bad = 0, None
    try:
        for batch in batches:
            columns = [c for c in ROW_VALUE_COLUMNS if c in batch.schema.names]
            if not columns or not batch.num_rows:
                continue
            part = batch.select(columns)
            part.validate(full=True)
            if "run_id" in columns:
                run_ids.update(pc.unique(part.column("run_id")).to_pylist())
            if "member_id" in columns:
                members.update(pc.unique(part.column("member_id")).to_pylist())
            if table == "events" and "detail" in columns:
                for detail in part.column("detail").to_pylist():
                    if detail is not None and not _json_object(detail):
                        bad_details += 1
                        first_bad = detail[:80] if first_bad is None else first_bad
    except (pa.ArrowException, UnicodeDecodeError):
        return None
    doc = {"run_ids": sorted(run_ids, key=repr), "member_ids": sorted(members, key=repr), "bad_details": bad_details}
    return json.dumps({**doc, "first_bad_detail": first_bad}, sort_keys=True)


def _json_object(text: str) -> bool:
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


def value_findings(meta: Mapping[str, Any], facts: Iterable[FileFacts]) -> list[Finding]:
    """CORRUPT for each file whose rows are not the run's own: a ``run_id`` other than run.json's (a file
    of another run), a ``member_id`` other than its member's in a member process's file, a member the run
    does not have, or an event ``detail`` that is not a JSON object. Each holds for every file the
    recorder writes, so only a changed (or resealed) trace breaks one; the checks would judge it as it
    claims to be."""
    facts = list(facts)
    run_id = meta.get("run_id")
    members = _run_members(meta, facts)
    out = []
    for f in facts:
        v = _values(f)
        if v is None:
            continue
        others = [r for r in v["run_ids"] if r != run_id]
        if isinstance(run_id, str) and others:
            out.append(Finding(Status.CORRUPT, f.path, f"rows of run {others[0]!r}, not of run.json's {run_id!r}"))
        own = _MEMBER_PROCESS.match(f.process)
        strangers = [m for m in v["member_ids"] if m != -1 and m not in members]
        if own is not None and set(v["member_ids"]) - {int(own["member"])}:
            wrong = sorted(set(v["member_ids"]) - {int(own["member"])}, key=repr)
            out.append(Finding(Status.CORRUPT, f.path, f"rows of member_id {wrong[0]!r} in {f.process}'s file"))
        elif members and strangers:
            known = ", ".join(str(m) for m in sorted(members))
            out.append(Finding(Status.CORRUPT, f.path, f"member_id {strangers[0]!r} is no member of the run ({known})"))
        if v["bad_details"]:
            out.append(
                Finding(
                    Status.CORRUPT,
                    f.path,
                    f"{v['bad_details']} rows' detail is not a JSON object (first: {v['first_bad_detail']!r})",
                )
            )
    return out


def _values(f: FileFacts) -> dict[str, Any] | None:
    """A file's :func:`row_values`, or None when unknown or not what row_values writes."""
    try:
        v = json.loads(f.values) if f.values else None
    except ValueError:
        return None
    keys = {"run_ids", "member_ids", "bad_details", "first_bad_detail"}
    return v if isinstance(v, dict) and keys <= v.keys() else None


def _run_members(meta: Mapping[str, Any], facts: Iterable[FileFacts]) -> set[int]:
    """The run's member ids: run.json's ``members`` and every member process that recorded a file."""
    out = {m["member_id"] for m in meta.get("members") or [] if isinstance(m, dict) and _is_int(m.get("member_id"))}
    for f in facts:
        own = _MEMBER_PROCESS.match(f.process)
        if own is not None:
            out.add(int(own["member"]))
    return out


def _columns(fingerprint: str | None) -> dict[str, str]:
    """A :func:`schema_fingerprint`'s columns, name -> type."""
    return dict(line.partition("\t")[::2] for line in (fingerprint or "").split("\n") if line)


def scan(run_dir: Path | str, tables: Iterable[str], *, values: bool = True) -> list[FileFacts]:
    """The facts of every ``<table>/*.arrow`` file of a run, read with the shared torn-stream reader
    (memory-mapped: only the facts are kept, never the batches); ``values`` as in :meth:`FileFacts.of`."""
    directory = Path(run_dir)
    out = []
    for table in tables:
        for path in trace_file_paths(directory / table):
            got = read_stream(str(path), memory_map=True)
            out.append(FileFacts.of(f"{table}/{path.name}", table, got, values=values))
    return out


def manifest(run_dir: Path | str, tables: Iterable[str]) -> dict[str, Any]:
    """run.json's manifest of a finished run: ``schema_version``, ``files`` and ``processes`` (each
    process incarnation with the tables it wrote)."""
    facts = scan(run_dir, tables, values=False)
    processes: dict[tuple[str, int | None], set[str]] = {}
    for f in facts:
        processes.setdefault((f.process, f.incarnation), set()).add(f.table)
    return {
        "schema_version": SCHEMA_VERSION,
        "files": {f.path: f.manifest_entry() for f in facts},
        "processes": [
            {"process": p, "incarnation": i, "tables": sorted(t)}
            for (p, i), t in sorted(processes.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0))
        ],
    }


def schema_version_of(meta: Mapping[str, Any]) -> int:
    """run.json's ``schema_version``: 1 when absent (the format before versions); a clear error when it
    is newer than this clusterlab reads or not a version at all."""
    version = meta.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SchemaVersionError(f"run.json: schema_version {version!r} is not a trace schema version (1, 2, ...)")
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"run.json: trace schema version {version} is newer than this clusterlab reads "
            f"(up to {SCHEMA_VERSION}); upgrade clusterlab to read this run"
        )
    return version


@dataclass(frozen=True)
class Finding:
    """One reason a run is not complete (or one acceptable irregularity, in ``notes``)."""

    status: Status
    file: str
    problem: str
    rows_lost: int | None = None
    offset: int | None = None

    def describe(self) -> str:
        where = self.file if self.offset is None else f"{self.file} at byte {self.offset}"
        lost = "" if self.rows_lost is None else f" ({self.rows_lost} rows lost)"
        return f"{where}: {self.problem}{lost}"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": str(self.status),
            "file": self.file,
            "problem": self.problem,
            "rows_lost": self.rows_lost,
            "offset": self.offset,
        }


@dataclass
class Completeness:
    """The completeness verdict on one run."""

    run_dir: Path
    schema_version: int | None
    findings: list[Finding] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)  # acceptable: torn tails a kill explains
    outcome: str | None = None  # run.json's ``outcome``: a finished run ``ok`` or ``failed``

    @property
    def status(self) -> Status:
        if any(f.status is Status.CORRUPT for f in self.findings):
            return Status.CORRUPT
        return Status.INCOMPLETE if self.findings else Status.COMPLETE

    @property
    def ok(self) -> bool:
        return not self.findings

    def lines(self) -> list[str]:
        """One line per finding, then one per note."""
        return [f"{f.status}: {f.describe()}" for f in self.findings] + [f"ok: {n.describe()}" for n in self.notes]

    def to_json(self) -> dict[str, Any]:
        return {
            "status": str(self.status),
            "outcome": self.outcome,
            "schema_version": self.schema_version,
            "findings": [f.to_json() for f in self.findings],
            "notes": [n.to_json() for n in self.notes],
        }


def canonical_json(doc: Mapping[str, Any]) -> bytes:
    """run.json's bytes for ``doc``: indented JSON with sorted keys and a final newline (what the recorder
    writes; a sealed run.json is exactly this, byte for byte)."""
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def seal_of(doc: Mapping[str, Any]) -> str:
    """The seal of run.json ``doc``: SHA-256 (hex) of the canonical form of every key but the seal."""
    return hashlib.sha256(canonical_json({k: v for k, v in doc.items() if k != SEAL})).hexdigest()


def sealed_json(doc: Mapping[str, Any]) -> bytes:
    """run.json's bytes for ``doc`` (JSON values only), sealed: any later edit of any field is CORRUPT."""
    return canonical_json({**doc, SEAL: seal_of(doc)})


def read_meta(run_dir: Path | str) -> tuple[dict[str, Any] | None, Finding | None]:
    """run.json, or None and the finding that says why not; a run.json whose seal does not match its
    content or bytes comes with a CORRUPT finding (and is still returned, so its manifest is judged too)."""
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        return None, Finding(Status.INCOMPLETE, "run.json", "missing: the run does not declare what it recorded")
    try:
        raw = path.read_bytes()
        meta = json.loads(raw)
    except (OSError, ValueError) as e:
        return None, Finding(Status.INCOMPLETE, "run.json", f"does not parse: {e}")
    if not isinstance(meta, dict):
        return None, Finding(Status.INCOMPLETE, "run.json", "does not parse: not a JSON object")
    if SEAL not in meta:
        return meta, None  # judge() says whether its schema version owes a seal
    if meta[SEAL] != seal_of(meta):
        return meta, Finding(Status.CORRUPT, "run.json", "its content differs from what the run wrote (seal mismatch)")
    if raw != canonical_json(meta):
        return meta, Finding(Status.CORRUPT, "run.json", "its bytes differ from what the run wrote (same content)")
    return meta, None


def read_sidecars(run_dir: Path | str) -> list[Finding]:
    """A finding per recorder sidecar ``incomplete/<process>.json`` (the recorder gave up)."""
    out = []
    for path in sorted((Path(run_dir) / INCOMPLETE_DIR).glob("*.json")):
        rel = f"{INCOMPLETE_DIR}/{path.name}"
        try:
            doc = json.loads(path.read_text())
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            out.append(Finding(Status.INCOMPLETE, rel, f"recorder sidecar (does not parse: {e})"))
            continue
        process = doc.get("process", path.stem)
        table = doc.get("table")
        out.append(
            Finding(
                Status.INCOMPLETE,
                rel,
                f"the recorder of {process} gave up"
                + (f" on {table}" if table else "")
                + (f" at {doc['at_ns']} ns" if doc.get("at_ns") is not None else "")
                + f": {doc.get('reason', 'no reason given')}",
            )
        )
    return out


KILL_COLUMNS = ("source", "kind", "member_id", "detail")  # what an events row says about a SIGKILL


def kill_rows(events: pa.Table) -> list[dict[str, Any]]:
    """The rows of an ``events`` table that may explain a torn file (:data:`KILL_COLUMNS`), read only when
    the table's buffers are valid Arrow: the values are read before the run is judged, and damaged bytes
    (which make the run CORRUPT anyway) could crash the reader; then there are none."""
    try:  # a flipped byte in the schema can leave a column name that is not UTF-8
        if events.num_rows == 0 or not set(KILL_COLUMNS) <= set(events.column_names):
            return []
        table = events.select(list(KILL_COLUMNS))
        table.validate(full=True)
        return table.to_pylist()
    except (pa.ArrowException, UnicodeDecodeError):
        return []


def kills_from_events(rows: Iterable[Mapping[str, Any]]) -> set[tuple[int, str]]:
    """(member, ``node``|``service``) pairs SIGKILLed according to the run's events: a harness or chaos
    ``kill`` event kills a member's node and service, or only the one its detail's ``process`` names."""
    out: set[tuple[int, str]] = set()
    for r in rows:
        if r.get("kind") != "kill" or r.get("source") not in ("harness", "chaos"):
            continue
        member = r.get("member_id")
        if member is None or member < 0:
            continue
        try:
            detail = json.loads(r.get("detail") or "{}")
        except ValueError:
            detail = {}
        which = detail.get("process") if isinstance(detail, dict) else None
        out.update((member, k) for k in ((which,) if which in ("node", "service") else ("node", "service")))
    return out


def _killed(process: str, kills: set[tuple[int, str]]) -> bool:
    m = _MEMBER_PROCESS.match(process)
    return m is not None and (int(m["member"]), m["kind"]) in kills


def _tail(f: str, process: str, closed: bool, torn: bool, ignored: int, kills: set[tuple[int, str]]) -> Finding | None:
    """A finding (or a note, status COMPLETE) for a file that ended without its end-of-stream marker."""
    if closed and not torn:
        return None
    what = f"torn tail ({ignored} B ignored)" if torn else "no end-of-stream marker"
    if _killed(process, kills):
        return Finding(Status.COMPLETE, f, f"{what} after the SIGKILL of {process} the run's events record")
    return Finding(
        Status.INCOMPLETE,
        f,
        f"{what} before {process}'s recorded end: no kill event explains it, rows it buffered are lost",
    )


def _compare(want: Mapping[str, Any], got: FileFacts) -> Finding | None:
    """A finding when ``got`` is not the file the manifest recorded: shorter (rows lost), changed or longer."""
    start = 0
    for i, (end, crc) in enumerate(tuple(c) for c in want["chunks"]):
        if i < len(got.chunks) and got.chunks[i] == (end, crc):
            start = end
            continue
        if got.size < end:
            return Finding(
                Status.INCOMPLETE,
                got.path,
                f"truncated to {got.size} B (the run left {want['size']} B, {want['rows']} rows)",
                rows_lost=max(0, want["rows"] - got.rows),
            )
        return Finding(
            Status.CORRUPT,
            got.path,
            f"bytes {start}..{end} differ from what the run recorded (CRC-32 of stream message {i})",
            offset=start,
        )
    if got.size < want["size"]:  # cut inside a torn tail the run left: nothing it recorded is lost
        return Finding(Status.INCOMPLETE, got.path, f"truncated to {got.size} B (the run left {want['size']} B)")
    if got.size > want["size"]:
        return Finding(
            Status.CORRUPT,
            got.path,
            f"{got.size - want['size']} B after the {want['size']} B the run left",
            offset=want["size"],
        )
    differ = sorted(k for k, v in got.manifest_entry().items() if want.get(k) != v)
    if differ:  # intact bytes, yet the manifest says otherwise: the manifest was changed
        return Finding(Status.CORRUPT, got.path, f"its manifest entry's {', '.join(differ)} is not the file's")
    return None  # every message the run left is intact (a torn tail past them is judged by _tail)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_ENTRY_KEYS: dict[str, Callable[[Any], bool]] = {
    "table": lambda v: isinstance(v, str),
    "process": lambda v: isinstance(v, str),
    "incarnation": lambda v: v is None or (_is_int(v) and v >= 0),
    "rows": lambda v: _is_int(v) and v >= 0,
    "bytes": lambda v: _is_int(v) and v >= 0,
    "size": lambda v: _is_int(v) and v >= 0,
    "closed": lambda v: isinstance(v, bool),
    "torn": lambda v: isinstance(v, bool),
    "chunks": lambda v: (
        isinstance(v, list)
        and all(isinstance(c, list) and len(c) == 2 and all(_is_int(x) and x >= 0 for x in c) for c in v)
    ),
}


def _entry_problem(path: Any, want: Any) -> str | None:
    """Why a manifest entry (``files[path]``) cannot be what the recorder wrote, or None."""
    if not isinstance(want, dict):
        return "not an object"
    for key, valid in _ENTRY_KEYS.items():
        if key not in want:
            return f"no {key!r}"
        if not valid(want[key]):
            return f"{key!r} is {want[key]!r}"
    table, _, name = str(path).partition("/")
    m = _FILE_NAME.match(name)
    process, incarnation = (m["process"], int(m["incarnation"])) if m else (Path(name).stem, None)
    if (want["table"], want["process"], want["incarnation"]) != (table, process, incarnation) or "/" in name:
        return "its table, process or incarnation is not its file's"
    ends = [end for end, _crc in want["chunks"]]
    if ends != sorted(set(ends)) or (ends[-1] if ends else 0) != want["bytes"] or want["bytes"] > want["size"]:
        return "its chunks do not end where its bytes do"
    if want["closed"] and want["torn"]:
        return "closed and torn at once"
    return None


def _manifest(meta: Mapping[str, Any], c: Completeness) -> dict[str, dict[str, Any]] | None:
    """run.json's manifest (``files``), checked against itself and ``processes``; None (and a finding
    in ``c``) when it is missing or malformed: then nothing can be compared and the run is not judged."""
    files = meta.get("files")
    if files is None:
        c.findings.append(Finding(Status.INCOMPLETE, "run.json", "no manifest of the run's files ('files')"))
        return None
    if not isinstance(files, dict):
        c.findings.append(Finding(Status.CORRUPT, "run.json", "'files' is not an object"))
        return None
    bad = [(p, why) for p, w in sorted(files.items()) if (why := _entry_problem(p, w)) is not None]
    for path, why in bad:
        c.findings.append(Finding(Status.CORRUPT, "run.json", f"manifest entry {path!r}: {why}"))
    if bad:
        return None
    processes = meta.get("processes")
    if processes is None:
        c.findings.append(Finding(Status.INCOMPLETE, "run.json", "no list of the processes that recorded"))
    elif _process_triples(processes) != {(w["process"], w["incarnation"], w["table"]) for w in files.values()}:
        c.findings.append(Finding(Status.CORRUPT, "run.json", "'processes' does not match the manifest's files"))
    return files


def _process_triples(processes: Any) -> set[tuple[Any, Any, Any]] | None:
    """(process, incarnation, table) of run.json's ``processes``; None when it is malformed."""
    out: set[tuple[Any, Any, Any]] = set()
    seen: set[tuple[Any, Any]] = set()
    for p in processes if isinstance(processes, list) else [None]:
        if not isinstance(p, dict) or not {"process", "incarnation", "tables"} <= p.keys():
            return None
        # The manifest's own types: a ``false`` incarnation is not incarnation 0, nor ``"0"`` a table 0.
        if not (_ENTRY_KEYS["process"](p["process"]) and _ENTRY_KEYS["incarnation"](p["incarnation"])):
            return None
        tables = p["tables"]
        if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
            return None
        if len(set(tables)) != len(tables) or (p["process"], p["incarnation"]) in seen:
            return None  # a process incarnation or a table listed twice
        seen.add((p["process"], p["incarnation"]))
        out.update((p["process"], p["incarnation"], t) for t in p["tables"])
    return out


# run.json's keys the readers take a value of, and the JSON type each value has (when present and not
# null); a value of another type is CORRUPT, never read as absent or guessed at.
_META_TYPES: dict[str, type] = {
    "scenario": str,
    "seed": int,
    "members": list,
    "config": dict,
    "workload": dict,
    "trace_format": dict,
    "committed_log": dict,
    "payload_refs": dict,
    "recording_stopped": list,
    "golden": dict,
    "source": dict,
    "sim": dict,
    "hash_seeds": dict,
}
_NESTED_STRINGS = (("trace_format", "entry_digest"), ("workload", "workload"), ("workload", "service"))


def meta_type_findings(meta: Mapping[str, Any]) -> list[Finding]:
    """CORRUPT for each run.json value the readers use whose JSON type is not the one the run writes
    (:data:`_META_TYPES`; ``trace_format.entry_digest``, ``workload.workload`` and ``workload.service``
    are strings, the digest one this clusterlab knows)."""
    out = []
    for key, kind in _META_TYPES.items():
        value = meta.get(key)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            out.append(Finding(Status.CORRUPT, "run.json", f"{key!r} is {_json_kind(value)}, not {_json_kind(kind())}"))
    for outer, inner in _NESTED_STRINGS:
        container = meta.get(outer)
        value = container.get(inner) if isinstance(container, dict) else None
        if value is not None and not isinstance(value, str):
            out.append(Finding(Status.CORRUPT, "run.json", f"'{outer}.{inner}' is {_json_kind(value)}, not a string"))
    digest = meta["trace_format"].get("entry_digest") if isinstance(meta.get("trace_format"), dict) else None
    if isinstance(digest, str) and digest not in ENTRY_DIGESTS:
        known = ", ".join(ENTRY_DIGESTS)
        out.append(Finding(Status.CORRUPT, "run.json", f"'trace_format.entry_digest' {digest!r} is none of {known}"))
    return out


def _json_kind(value: Any) -> str:
    """``value``'s JSON type, with its article (``an object``, ``a string``, ...)."""
    for kind, name in ((bool, "a boolean"), (int, "a number"), (float, "a number"), (str, "a string")):
        if isinstance(value, kind):
            return name
    return "an object" if isinstance(value, dict) else "a list" if isinstance(value, list) else "null"


def _meta_findings(meta: Mapping[str, Any], version: int, sidecars: list[Finding]) -> list[Finding]:
    """What run.json itself says against its run: no seal where one is due, not finished, no run id, a
    recorder that stopped (its sidecar gone) or a committed log that could not be written."""
    out = meta_type_findings(meta)
    if version >= SEALED_SINCE and SEAL not in meta:
        out.append(Finding(Status.INCOMPLETE, "run.json", f"no seal ('{SEAL}'): what it declares cannot be trusted"))
    outcome = meta.get("outcome")
    if outcome == "running":
        out.append(
            Finding(Status.INCOMPLETE, "run.json", "outcome 'running': the run never finished (its harness died?)")
        )
    elif outcome not in OUTCOMES:
        out.append(Finding(Status.INCOMPLETE, "run.json", f"outcome {outcome!r}: not a finished run's (ok, failed)"))
    if not isinstance(meta.get("run_id"), str) or not meta["run_id"]:
        out.append(Finding(Status.INCOMPLETE, "run.json", "no run_id"))
    stopped = meta.get("recording_stopped") or []
    told = {f.file for f in sidecars}
    for s in stopped if isinstance(stopped, list) else [{}]:
        process = s.get("process") if isinstance(s, dict) else None
        if f"{INCOMPLETE_DIR}/{process}.json" not in told:
            out.append(Finding(Status.INCOMPLETE, "run.json", f"the recorder of {process} gave up (recording_stopped)"))
    log = meta.get("committed_log")
    if isinstance(log, dict) and log.get("error"):
        out.append(Finding(Status.INCOMPLETE, "log/", f"the committed log was not written: {log['error']}"))
    return out


def _golden_counts(c: Completeness, meta: Mapping[str, Any], facts: list[FileFacts]) -> None:
    """A golden declares its tables' row counts too (docs/trace-schema.md, "Goldens")."""
    golden = meta.get("golden")
    if not isinstance(golden, dict):
        return
    counts: dict[str, Any] = {"log": golden.get("log_entries"), "applied": golden.get("positions")}
    if golden.get("driver") == "sim":
        counts["messages"] = golden.get("messages")
    for table, want in counts.items():
        rows = sum(f.rows for f in facts if f.table == table)
        if _is_int(want) and rows < want:
            c.findings.append(
                Finding(Status.INCOMPLETE, f"{table}/", f"{rows} rows, the golden declares {want}", want - rows)
            )


def _compare_files(
    c: Completeness, files: Mapping[str, dict[str, Any]], actual: Mapping[str, FileFacts], kills: set[tuple[int, str]]
) -> None:
    """Each file on disk against its manifest entry: missing (a whole table or one file), not declared,
    short, changed, longer, or ended without its end-of-stream marker where no SIGKILL explains it."""
    missing_tables: dict[str, list[str]] = {}
    for path, want in sorted(files.items()):
        if path not in actual:
            missing_tables.setdefault(want["table"], []).append(path)
    for table, paths in sorted(missing_tables.items()):
        declared = [p for p, w in files.items() if w["table"] == table]
        if len(paths) == len(declared) and len(declared) > 1:
            rows = sum(files[p]["rows"] for p in paths)
            c.findings.append(
                Finding(Status.INCOMPLETE, f"{table}/", f"table missing ({len(paths)} files)", rows_lost=rows)
            )
            continue
        for p in paths:
            c.findings.append(Finding(Status.INCOMPLETE, p, "file missing", rows_lost=files[p]["rows"]))
    for path, got in sorted(actual.items()):
        if path not in files:
            c.findings.append(Finding(Status.CORRUPT, path, "not in the run's manifest: the run did not write it"))
            continue
        want = files[path]
        problem = _compare(want, got)
        if problem is not None:
            c.findings.append(problem)
            continue
        ignored = want["size"] - want["bytes"]
        tail = _tail(path, got.process, want["closed"], want["torn"], ignored, kills)
        if tail is not None:
            (c.notes if tail.status is Status.COMPLETE else c.findings).append(tail)


def judge(
    run_dir: Path | str,
    meta: Mapping[str, Any] | None,
    facts: Iterable[FileFacts],
    kills: set[tuple[int, str]],
    *,
    meta_finding: Finding | None = None,
    sidecars: Iterable[Finding] = (),
) -> Completeness:
    """The completeness of one run from its run.json (``meta``, as :func:`read_meta` read it, with its
    finding), the facts of its files, the SIGKILLs its events record and its recorder sidecars. A run
    whose run.json, seal or manifest is missing or malformed is never COMPLETE: nothing it holds can be
    checked against what it declares. Raises :class:`SchemaVersionError` for a newer schema."""
    c = Completeness(Path(run_dir), None)
    facts = list(facts)
    sidecars = list(sidecars)
    if meta_finding is not None:
        c.findings.append(meta_finding)
    c.findings.extend(sidecars)
    c.findings.extend(strays(run_dir))
    c.findings.extend(schema_findings(facts))
    if meta is None:
        return c
    c.schema_version = schema_version_of(meta)
    c.outcome = meta.get("outcome") if isinstance(meta.get("outcome"), str) else None
    c.findings.extend(_meta_findings(meta, c.schema_version, sidecars))
    files = _manifest(meta, c)
    if files is not None:
        _compare_files(c, files, {f.path: f for f in facts}, kills)
        _golden_counts(c, meta, facts)
        c.findings.extend(_members_recorded(meta, files))
        c.findings.extend(value_findings(meta, facts))
    return c


def _members_recorded(meta: Mapping[str, Any], files: Mapping[str, Mapping[str, Any]]) -> list[Finding]:
    """A run (not a golden, which keeps only its committed log) that declares members none of whose
    nodes recorded a file: every protocol check would pass on nothing."""
    members = meta.get("members")
    if "golden" in meta or not isinstance(members, list) or not members:
        return []
    if any(str(w.get("process", "")).startswith("node-") for w in files.values()):
        return []
    return [Finding(Status.INCOMPLETE, "run.json", f"{len(members)} members declared, none of their nodes recorded")]


def assess(run_dir: Path | str, tables: Iterable[str]) -> Completeness:
    """Read a run directory's run.json, sidecars and files and judge its completeness (stand-alone;
    :func:`clusterlab.harness.trace.open_run` gives the same verdict as ``run.completeness``)."""
    meta, meta_finding = read_meta(run_dir)
    facts = scan(run_dir, tables)
    events: list[dict[str, Any]] = []
    for path in trace_file_paths(Path(run_dir) / "events") if "events" in tables else []:
        events.extend(kill_rows(read_stream(str(path)).table()))
    return judge(
        run_dir, meta, facts, kills_from_events(events), meta_finding=meta_finding, sidecars=read_sidecars(run_dir)
    )


def exit_code(statuses: Iterable[str]) -> int:
    """The exit code of several verdicts (``PASS``, ``FAIL``, ``INCOMPLETE``, ``CORRUPT``): a violation
    found in a complete run wins (1), then corruption (4), then incompleteness (3), else 0."""
    seen = set(statuses)
    if "FAIL" in seen:
        return EXIT_FAIL
    if Status.CORRUPT in seen:
        return EXIT_CORRUPT
    if Status.INCOMPLETE in seen:
        return EXIT_INCOMPLETE
    return EXIT_PASS


def relative(run_dir: Path | str, path: Path | str) -> str:
    """``path`` relative to ``run_dir``, with ``/`` (the manifest's keys)."""
    return os.path.relpath(path, run_dir).replace(os.sep, "/")
