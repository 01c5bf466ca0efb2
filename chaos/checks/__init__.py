"""The trace checks, one engine-neutral definition each (SQL over a run's tables).

Each check is a :class:`~clusterlab.chaos.checks.base.SqlCheck`; the embedded engine (DuckDB,
:mod:`clusterlab.chaos.checks.embedded`) and the Spark job (:mod:`clusterlab.spark.check`) run the
same text — sqlglot transpiles it from Spark SQL to DuckDB's dialect — over the same views
(:mod:`clusterlab.chaos.checks.views`). :data:`SQL_CHECKS` lists them all: the state checks
(:mod:`.state`) and, where present, the protocol checks (:mod:`.protocol`). Linearizability is not SQL:
both engines run the WGL checker (:mod:`clusterlab.chaos.linearizability`) per run and key."""

from __future__ import annotations

import importlib.util

from clusterlab.chaos.checks.base import SqlCheck
from clusterlab.chaos.checks.state import CHECKS as STATE_CHECKS


def _protocol_checks() -> tuple[SqlCheck, ...]:
    # chaos/checks/protocol.py is another change's; include its checks once it exists.
    if importlib.util.find_spec(f"{__name__}.protocol") is None:
        return ()
    from clusterlab.chaos.checks import protocol  # type: ignore[attr-defined,unused-ignore]

    return tuple(getattr(protocol, "CHECKS", ()))


SQL_CHECKS: tuple[SqlCheck, ...] = STATE_CHECKS + _protocol_checks()
LINEARIZABILITY = "linearizability"
# Every check's name, in report order: the SQL checks, then linearizability.
CHECK_NAMES: tuple[str, ...] = (*(c.name for c in SQL_CHECKS), LINEARIZABILITY)

__all__ = ["CHECK_NAMES", "LINEARIZABILITY", "SQL_CHECKS", "STATE_CHECKS", "SqlCheck"]
