"""What both engines do with a check's SQL: transpile it (Spark SQL is the source dialect), find the
columns it reads (so views carry only those), and explain an agreement violation (who applied what,
and the messages around it) with two more queries over the same views."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
from clusterlab.chaos.checks.base import VIEWS, SqlCheck
from clusterlab.chaos.checks.check_report import CheckResult
from clusterlab.chaos.checks.views import view_schema

AROUND_BYTES = 512  # messages within this many log bytes of a divergence are shown with it
AROUND_MESSAGES = 12
EXPLAINED = 5  # divergences that get their messages

# Who applied what at the flagged positions (a view ``flagged``: run_id, log_position).
AGREEMENT_MEMBERS_SQL = """
SELECT a.run_id, a.log_position, a.member_id AS member, a.incarnation, a.entry_type,
       CASE WHEN a.entry_digest_hi IS NOT NULL
            THEN concat(lpad(lower(hex(a.entry_digest_hi)), 16, '0'), lpad(lower(hex(a.entry_digest_lo)), 16, '0'))
       END AS entry_digest,
       concat(lpad(lower(hex(a.state_digest_hi)), 16, '0'), lpad(lower(hex(a.state_digest_lo)), 16, '0'))
         AS state_digest
FROM applied AS a
JOIN flagged AS f ON a.run_id = f.run_id AND a.log_position = f.log_position
ORDER BY a.run_id, a.log_position, member, a.incarnation
"""
AGREEMENT_MESSAGES_SQL = f"""
SELECT m.run_id, f.log_position AS at, m.process, m.direction, m.channel, m.msg_type, m.leadership_term_id,
       m.log_position, m.wall_ns
FROM messages AS m
JOIN flagged AS f
  ON m.run_id = f.run_id AND m.log_position BETWEEN f.log_position - {AROUND_BYTES} AND f.log_position + {AROUND_BYTES}
WHERE m.channel <> 'control'
ORDER BY m.run_id, at, m.wall_ns
"""
_HINT = re.compile(r"/\*\+.*?\*/", re.DOTALL)
FLAGGED_SCHEMA = pa.schema([pa.field("run_id", pa.string()), pa.field("log_position", pa.int64())])


def _cache_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "clusterlab" / "sql"


@cache
def _compiled(sql: str) -> dict[str, Any]:
    """``sql``'s DuckDB text and the column names it mentions. Parsing with sqlglot (and importing
    its dialects) costs about a second, so each text's result is kept in a small on-disk cache keyed
    by the text and sqlglot's version; a verdict in a fresh process then needs no sqlglot at all."""
    from importlib.metadata import version

    key = hashlib.blake2b(f"{version('sqlglot')}\0{sql}".encode(), digest_size=16).hexdigest()
    path = _cache_dir() / f"{key}.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        pass
    import sqlglot
    from sqlglot import exp

    got = {
        # Join hints (/*+ BROADCAST(x) */) are Spark's planning advice; DuckDB has none (sqlglot would drop
        # them with a warning on stderr).
        "duckdb": ";\n".join(sqlglot.transpile(_HINT.sub("", sql), read="spark", write="duckdb")),
        "columns": sorted({c.name for c in sqlglot.parse_one(sql, read="spark").find_all(exp.Column)}),
    }
    with contextlib.suppress(OSError):  # a read-only home: no cache, same result
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(got))
        tmp.replace(path)  # atomic: parallel processes never read half a file
    return got


def to_duckdb(sql: str) -> str:
    """``sql`` (Spark SQL) in DuckDB's dialect."""
    return str(_compiled(sql)["duckdb"])


def _columns_of(sql: str) -> frozenset[str]:
    return frozenset(_compiled(sql)["columns"])


def columns_used(table: str, sqls: Iterable[str]) -> tuple[str, ...]:
    """The columns of ``table``'s view that any of ``sqls`` may read (every column name the queries
    mention that the view has), in the view's order; ``run_id`` always."""
    names: set[str] = {"run_id"}
    for sql in sqls:
        names |= _columns_of(sql)
    return tuple(f.name for f in view_schema(table) if f.name in names)


def view_columns(checks: Sequence[SqlCheck], *, explain: bool = True) -> dict[str, tuple[str, ...]]:
    """Per trace table, the columns its view carries for ``checks`` (and the agreement explanation)."""
    sqls = [c.sql for c in checks] + ([AGREEMENT_MEMBERS_SQL, AGREEMENT_MESSAGES_SQL] if explain else [])
    return {t: columns_used(t, sqls) for t in VIEWS}


def explain_agreement(
    result: CheckResult,
    query: Callable[[str], list[dict[str, Any]]],
    register: Callable[[str, pa.Table], None],
) -> None:
    """Add to each shown agreement violation the members with their digests (``members``) and, for the
    first few, the messages around the position (``messages``): two queries over the views, with the
    flagged positions registered as the view ``flagged``."""
    if not result.violations:
        return
    flagged = sorted({(v["run_id"], v["log_position"]) for v in result.violations})
    register("flagged", pa.Table.from_pylist([{"run_id": r, "log_position": p} for r, p in flagged], FLAGGED_SCHEMA))
    members: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in query(AGREEMENT_MEMBERS_SQL):
        who = {k: row[k] for k in ("member", "incarnation", "entry_type", "entry_digest", "state_digest")}
        got = members.setdefault((row["run_id"], row["log_position"]), [])
        if who not in got:
            got.append(who)
    for v in result.violations:
        v["members"] = members.get((v["run_id"], v["log_position"]), [])
    first = flagged[:EXPLAINED]
    register("flagged", pa.Table.from_pylist([{"run_id": r, "log_position": p} for r, p in first], FLAGGED_SCHEMA))
    around: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in query(AGREEMENT_MESSAGES_SQL):
        got = around.setdefault((row.pop("run_id"), row.pop("at")), [])
        if len(got) < AROUND_MESSAGES:
            got.append(row)
    for v in result.violations:
        if (v["run_id"], v["log_position"]) in around:
            v["messages"] = around[(v["run_id"], v["log_position"])]
