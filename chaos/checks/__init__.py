"""The trace checks, one engine-neutral definition each (SQL over a run's tables).

Each check is a :class:`~clusterlab.chaos.checks.base.SqlCheck`; the embedded engine (DuckDB) and the
Spark job run the same text — sqlglot transpiles it from Spark SQL to DuckDB's dialect."""
