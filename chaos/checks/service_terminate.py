"""A member stopped gracefully tells each of its services ``on_terminate``, once: ``services_terminate_once``.

Aeron's service container closes on a clean stop (``ClusteredServiceAgent.onClose``): a service that
started and was not told already (a SHUTDOWN or ABORT's termination position, a
ClusterTerminationException) gets ``on_terminate``, exactly once; a crash (SIGKILL) runs nothing. A
service that is never told cannot release what it holds, and one told twice releases it twice; neither
changes the state any other check reads.

The check reads each service incarnation's ``start`` event that declares ``service_terminate_events``
(the agent records it once started; a service that failed to start declares nothing), its
``service_terminate`` events, and the harness's ``stop`` and ``kill`` events of its member. An
incarnation whose first harness ``stop`` or ``kill`` after its start is a ``stop`` (graceful; no ``kill``
at that instant, such as one for a stop timeout) must hold exactly one ``service_terminate``; no
incarnation may hold more than one. Incarnations ended by a kill, or still running when the trace
ends, are judged by the second rule only."""

from __future__ import annotations

from clusterlab.chaos.checks.base import SqlCheck

SERVICES_TERMINATE_ONCE = SqlCheck(
    name="services_terminate_once",
    description="every service of a member stopped gracefully is told on_terminate (a service_terminate "
    "event) exactly once in that incarnation, and no service incarnation is told twice",
    tables=("events",),
    sql="""
WITH declared AS (
  SELECT run_id, source, member_id, incarnation, min(wall_ns) AS started,
         min(CAST(get_json_object(detail, '$.service_id') AS BIGINT)) AS service_id
  FROM events
  WHERE kind = 'start' AND source LIKE 'service-%'
        AND get_json_object(detail, '$.service_terminate_events') = 'true'
  GROUP BY run_id, source, member_id, incarnation
),
told AS (
  SELECT run_id, source, incarnation, count(*) AS n,
         array_join(sort_array(collect_list(get_json_object(detail, '$.reason'))), ',') AS reasons
  FROM events
  WHERE kind = 'service_terminate' AND source LIKE 'service-%'
  GROUP BY run_id, source, incarnation
),
ends AS (
  SELECT run_id, member_id, wall_ns, kind FROM events WHERE source = 'harness' AND kind IN ('stop', 'kill')
),
first_end AS (
  SELECT d.run_id, d.source, d.incarnation, d.member_id, min(e.wall_ns) AS ended
  FROM declared d
  JOIN ends e ON e.run_id = d.run_id AND e.member_id = d.member_id AND e.wall_ns > d.started
  GROUP BY d.run_id, d.source, d.incarnation, d.member_id
),
kills AS (
  SELECT DISTINCT run_id, member_id, wall_ns FROM ends WHERE kind = 'kill'
),
graceful AS (
  SELECT f.run_id, f.source, f.incarnation, f.ended
  FROM first_end f
  LEFT JOIN kills k ON k.run_id = f.run_id AND k.member_id = f.member_id AND k.wall_ns = f.ended
  WHERE k.run_id IS NULL
)
SELECT d.run_id,
       concat('member ', CAST(d.member_id AS STRING), ' service ', CAST(d.service_id AS STRING), ' (',
              d.source, ', incarnation ', CAST(d.incarnation AS STRING), ') ',
              CASE WHEN coalesce(t.n, 0) > 1
                   THEN concat('was told on_terminate ', CAST(t.n AS STRING), ' times (', t.reasons, ')')
                   ELSE concat('was never told on_terminate although its member was stopped gracefully at ',
                               CAST(g.ended AS STRING)) END) AS detail
FROM declared d
LEFT JOIN told t ON t.run_id = d.run_id AND t.source = d.source AND t.incarnation = d.incarnation
LEFT JOIN graceful g ON g.run_id = d.run_id AND g.source = d.source AND g.incarnation = d.incarnation
WHERE coalesce(t.n, 0) > 1 OR (g.ended IS NOT NULL AND coalesce(t.n, 0) = 0)
""",
)

CHECKS: tuple[SqlCheck, ...] = (SERVICES_TERMINATE_ONCE,)
