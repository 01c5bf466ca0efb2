"""The golden diff of one comparison, embedded: DuckDB on one thread over the comparison's trace files.

:func:`position_diff` and :func:`message_diff` compute for one :class:`Comparison` exactly what the
Spark SQL plan (:mod:`clusterlab.golden.spark_diff`, ``plan="sql"``) computes for it: the files are
read with the ``clustertrace`` source's own code (:func:`_read`), and the SQL below states the same
definition of a divergence. The Spark ``tasks`` plan runs these functions inside Spark tasks, one
comparison per call, so a Spark cluster diffs many goldens at once, each on one core.

Position kinds: ``entry`` (the entry bytes differ), ``state`` (same entry, different state digest),
``missing`` (the golden has the position, the actual run never applied it), ``extra`` (the other way).
A message row differs when either side lacks its key (process, incarnation, seq) or any compared
column (every column but run_id, file and the key) is distinct.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

KINDS = ("entry", "state", "missing", "extra")
MESSAGE_KEY = ("process", "incarnation", "seq")
# Every message column but these is compared (run_id names the run; file is where the row came from).
MESSAGE_IGNORED = ("run_id", "file")
APPLIED_COLUMNS = ("log_position", "entry_type", "entry_digest", "state_digest")
MEMBER_COLUMNS = ("member_id", "incarnation")
# The columns the first divergent message reports, for each side.
MESSAGE_REPORTED = ("msg_type", "direction", "channel", "peer_process", "log_position")


@dataclass(frozen=True)
class Comparison:
    """Golden ``name`` against the run in ``actual_dir`` (``mode``: replay or rerun)."""

    name: str
    mode: str
    golden_dir: str
    actual_dir: str
    messages: bool = False  # also diff the message tables (simulator re-runs)


@dataclass
class PositionDiff:
    """How one actual run's states compare with its golden's, position by position."""

    name: str
    mode: str
    golden_positions: int = 0
    actual_positions: int = 0
    divergent: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    first: dict[str, Any] | None = None  # the first divergent position's row
    from_first: int = 0  # positions at or after the first divergent one
    divergent_from_first: int = 0  # of those, divergent
    next_agreeing: int | None = None  # first position after the first divergence where they agree again

    @property
    def ok(self) -> bool:
        return self.divergent == 0


@dataclass
class MessageDiff:
    """How one re-run's messages compare with its golden's, row by row (process, incarnation, seq)."""

    name: str
    golden_rows: int = 0
    actual_rows: int = 0
    divergent: int = 0
    first: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.divergent == 0


def trace_bytes(directory: str, table: str) -> int:
    """Bytes of ``table``'s files in the run(s) at ``directory`` (what a comparison's task reads)."""
    from clusterlab.spark.source import find_runs, trace_files

    return sum(f.size for f in trace_files(find_runs(directory.rstrip("/")), table))


def _read(directory: str, table: str, columns: tuple[str, ...] | None) -> pa.Table | None:
    """``table`` of the run(s) at ``directory`` as the ``clustertrace`` source reads it (runs keyed by
    directory; ``columns``: only those built, None: all but the derived ones); None without files."""
    from clusterlab.chaos.checks.views import derived_fields
    from clusterlab.spark.source import (
        conform,
        find_runs,
        output_schema,
        read_batches,
        read_schema,
        select_columns,
        trace_files,
    )

    files = trace_files(find_runs(directory.rstrip("/")), table, by_directory=True)
    if not files:
        return None
    schema = output_schema(table, next((s for s in (read_schema(f.path) for f in files) if s is not None), None))
    derived = {f.name for f in derived_fields(table)}
    names = columns if columns is not None else tuple(n for n in schema.names if n not in derived)
    schema = select_columns(schema, ",".join(names))
    batches = [conform(b, f, schema) for f in files for b in read_batches(f.path).batches if b.num_rows]
    return pa.Table.from_batches(batches, schema=schema)


def _duckdb() -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 1")
    con.execute("SET preserve_insertion_order = false")
    return con


def _register(con: Any, view: str, table: pa.Table | None, empty: pa.Schema) -> None:
    con.register(view, table if table is not None else empty.empty_table())


_APPLIED_EMPTY = pa.schema(
    [
        ("log_position", pa.int64()),
        ("entry_type", pa.string()),
        ("entry_digest", pa.binary()),
        ("state_digest", pa.binary()),
        ("member_id", pa.int16()),
        ("incarnation", pa.int32()),
    ]
)

# One row per golden position, per actual position, or both: its kind (null when they agree).
_POSITIONS = """
    CREATE TEMP TABLE diffs AS
    WITH g AS (
      SELECT log_position, entry_type AS golden_entry_type, entry_digest AS golden_entry,
             state_digest AS golden_state
      FROM golden WHERE entry_type <> 'Snapshot'),
    a AS (
      SELECT log_position, count(*) AS actual_rows,
             min(CASE WHEN entry_type <> 'Snapshot' THEN entry_digest END) AS entry_min,
             max(CASE WHEN entry_type <> 'Snapshot' THEN entry_digest END) AS entry_max,
             min(state_digest) AS state_min, max(state_digest) AS state_max
      FROM actual GROUP BY log_position)
    SELECT coalesce(g.log_position, a.log_position) AS log_position, golden_entry_type, golden_entry,
           golden_state, actual_rows,
           CASE WHEN golden_state IS NULL THEN 'extra'
                WHEN actual_rows IS NULL THEN 'missing'
                WHEN coalesce(entry_min <> entry_max, false) OR coalesce(entry_min <> golden_entry, false)
                  THEN 'entry'
                WHEN state_min IS NULL OR state_min <> state_max OR coalesce(state_min <> golden_state, false)
                  THEN 'state'
           END AS kind
    FROM g FULL OUTER JOIN a ON g.log_position = a.log_position"""

_SUMMARY = """
    SELECT count(golden_state), count(actual_rows), count(kind),
           min(log_position) FILTER (WHERE kind IS NOT NULL),
           {kinds}
    FROM diffs"""

_TAIL = """
    SELECT count(*), count(kind), min(log_position) FILTER (WHERE kind IS NULL)
    FROM diffs WHERE log_position >= ?"""

_AT = """
    SELECT kind, golden_entry_type, golden_entry, golden_state FROM diffs WHERE log_position = ? LIMIT 1"""

# Every actual member's row at one position: (member, incarnation, entry type, entry, state).
_MEMBERS = """
    SELECT DISTINCT member_id, incarnation, entry_type, entry_digest, state_digest
    FROM actual WHERE log_position = ?"""


def position_diff(comparison: Comparison) -> PositionDiff:
    """The position diff of one comparison (what ``diff_positions`` computes for it)."""
    c = comparison
    con = _duckdb()
    try:
        _register(con, "golden", _read(c.golden_dir, "applied", APPLIED_COLUMNS), _APPLIED_EMPTY)
        _register(con, "actual", _read(c.actual_dir, "applied", APPLIED_COLUMNS + MEMBER_COLUMNS), _APPLIED_EMPTY)
        con.execute(_POSITIONS)
        kinds_sql = ", ".join(f"count(*) FILTER (WHERE kind = '{k}')" for k in KINDS)
        golden, actual, divergent, first, *counts = con.execute(_SUMMARY.format(kinds=kinds_sql)).fetchone()
        out = PositionDiff(
            c.name, c.mode, golden, actual, divergent, {k: n for k, n in zip(KINDS, counts, strict=True) if n}
        )
        if first is None:
            return out
        out.from_first, out.divergent_from_first, out.next_agreeing = con.execute(_TAIL, [first]).fetchone()
        kind, golden_entry_type, golden_entry, golden_state = con.execute(_AT, [first]).fetchone()
        members = con.execute(_MEMBERS, [first]).fetchall()
        out.first = {
            "log_position": first,
            "kind": kind,
            "entry_type": golden_entry_type or _actual_entry_type(members),
            "golden_entry_digest": _hex(golden_entry),
            "golden_state_digest": _hex(golden_state),
            "actual_entry_digests": [
                _hex(x) for x in sorted({m[3] for m in members if m[3] is not None and m[2] not in (None, "Snapshot")})
            ],
            "actual_state_digests": [_hex(x) for x in sorted({m[4] for m in members if m[4] is not None})],
            "members": _member_list(members),
        }
        return out
    finally:
        con.close()


def _actual_entry_type(members: list[tuple[Any, ...]]) -> str | None:
    """The actual members' entry type at a position (a Snapshot only where nothing else was applied)."""
    types = sorted({m[2] for m in members if m[2] is not None and m[2] != "Snapshot"})
    return types[0] if types else None


def _member_list(members: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """Each distinct (member, incarnation, entry type, state) as a dict, in the order Spark's
    ``array_sort`` gives a set of such structs: field by field, a null field first."""
    rows = {(m[0], m[1], m[2], _hex(m[4])) for m in members}
    ordered = sorted(rows, key=lambda r: tuple((v is not None, v if v is not None else 0) for v in r))
    return [{"member": r[0], "incarnation": r[1], "entry_type": r[2], "state_digest": r[3]} for r in ordered]


def _hex(b: Any) -> str | None:
    return None if b is None else bytes(b).hex()


def message_diff(comparison: Comparison) -> MessageDiff:
    """The message diff of one comparison (what ``diff_messages`` computes for it)."""
    c = comparison
    golden, actual = _read(c.golden_dir, "messages", None), _read(c.actual_dir, "messages", None)
    if golden is None and actual is None:
        return MessageDiff(c.name)
    shape = (golden if golden is not None else actual).schema  # type: ignore[union-attr]
    compared = [n for n in shape.names if n not in MESSAGE_IGNORED and n not in MESSAGE_KEY]
    con = _duckdb()
    try:
        _register(con, "golden", golden, shape)
        _register(con, "actual", actual, shape)
        con.execute(_messages_sql(compared, shape.names))
        golden_rows, actual_rows, divergent = con.execute(
            "SELECT count(g_present), count(a_present), count(*) FILTER (WHERE differs) FROM joined"
        ).fetchone()
        out = MessageDiff(c.name, golden_rows, actual_rows, divergent)
        if divergent:
            out.first = _first_message(con)
        return out
    finally:
        con.close()


def _messages_sql(compared: list[str], names: list[str]) -> str:
    """The full outer join of the two sides on the key, each row marked ``differs``."""

    def q(n: str) -> str:
        return '"' + n.replace('"', '""') + '"'

    reported = [*MESSAGE_REPORTED, "wall_ns", "payload"]
    side = ", ".join(
        [*(q(k) for k in MESSAGE_KEY), *(f"{q(n)} AS {q('c_' + n)}" for n in compared)]
        + [f"{q(n) if n in names else 'CAST(NULL AS VARCHAR)'} AS {q('r_' + n)}" for n in reported]
        + ["true AS present"]
    )
    distinct = " OR ".join(f"g.{q('c_' + n)} IS DISTINCT FROM a.{q('c_' + n)}" for n in compared) or "false"
    picked = ", ".join(
        f"{p}.{q('r_' + n)} AS {q(w + '_' + n)}" for p, w in (("g", "golden"), ("a", "actual")) for n in reported
    )
    keys = ", ".join(f"coalesce(g.{q(k)}, a.{q(k)}) AS {q(k)}" for k in MESSAGE_KEY)
    on = " AND ".join(f"g.{q(k)} = a.{q(k)}" for k in MESSAGE_KEY)
    return f"""
        CREATE TEMP TABLE joined AS
        SELECT {keys}, {picked}, g.present AS g_present, a.present AS a_present,
               g.present IS NULL OR a.present IS NULL OR ({distinct}) AS differs
        FROM (SELECT {side} FROM golden) g FULL OUTER JOIN (SELECT {side} FROM actual) a ON {on}"""


def _first_message(con: Any) -> dict[str, Any]:
    """The differing row with the smallest (wall_ns, process, incarnation, seq), a null field first."""
    cur = con.execute(
        """SELECT *, coalesce(golden_wall_ns, actual_wall_ns) AS wall FROM joined WHERE differs
           ORDER BY wall NULLS FIRST, process NULLS FIRST, incarnation NULLS FIRST, seq NULLS FIRST LIMIT 1"""
    )
    row = dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))
    return {
        "process": row["process"],
        "incarnation": row["incarnation"],
        "seq": row["seq"],
        "wall_ns": row["wall"],
        **{f"{p}_{k}": row[f"{p}_{k}"] for p in ("golden", "actual") for k in MESSAGE_REPORTED},
        "golden_payload": _hex(row["golden_payload"]),
        "actual_payload": _hex(row["actual_payload"]),
    }
