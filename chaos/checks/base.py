"""What a trace check is: a named SQL query over a run's tables that returns one row per violation.

The query is written in Spark SQL, in the subset both engines run once sqlglot has transpiled it to
DuckDB (``sqlglot.transpile(sql, read="spark", write="duckdb")``). It reads the views named in
:data:`VIEWS` — one per trace table (docs/trace-schema.md), holding the rows of every run being judged,
each row with its ``run_id`` — and returns at least ``run_id`` and ``detail`` (a string saying what
broke, naming members, terms and positions). No rows: the property holds."""

from __future__ import annotations

from dataclasses import dataclass

# The trace tables a check may read, as views of the same names (``log`` is the committed log, with a
# ``run_id`` column added by the engine).
VIEWS = ("messages", "applied", "events", "ops", "log")


@dataclass(frozen=True)
class SqlCheck:
    """One property of a recorded run, judged by ``sql`` (Spark SQL; see the module docstring)."""

    name: str
    description: str
    sql: str
    tables: tuple[str, ...]
