"""A member stopped gracefully tells each of its services ``on_terminate``, once: ``services_terminate_once``.

Aeron's service container closes on a clean stop (``ClusteredServiceAgent.onClose``): a service that
started and was not told already (a SHUTDOWN or ABORT's termination position, a
ClusterTerminationException) gets ``on_terminate``, exactly once; a crash (SIGKILL) runs nothing. A
service that is never told cannot release what it holds, and one told twice releases it twice; neither
changes the state any other check reads.

The check reads each service incarnation's ``start`` event that declares ``service_terminate_events``
(the agent records it once started; a service that failed to start declares nothing), its
``service_terminate`` events, and the harness's events of its member, in the order the harness wrote
them (``seq``: the simulator's clock gives a restart, the kill before it and a kill right after it the
same time). The incarnation's launch is the member's last harness ``start`` or ``restart`` at or before
its start; the first harness ``stop`` or ``kill`` written after that launch, no later than the next
incarnation's start, ends it. An incarnation ended by a ``stop`` (graceful; a stop timeout writes its
``kill`` first) must hold exactly one ``service_terminate``; no incarnation may hold more than one.
Incarnations ended by a kill, or still running when the trace ends, are judged by the second rule only."""

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
  SELECT run_id, member_id, seq, wall_ns, kind FROM events WHERE source = 'harness' AND kind IN ('stop', 'kill')
),
launched AS (
  SELECT d.run_id, d.source, d.incarnation, d.member_id, d.started, max(l.seq) AS launch_seq
  FROM declared d
  JOIN events l ON l.run_id = d.run_id AND l.source = 'harness' AND l.kind IN ('start', 'restart')
               AND l.member_id = d.member_id AND l.wall_ns <= d.started
  GROUP BY d.run_id, d.source, d.incarnation, d.member_id, d.started
),
bounded AS (
  SELECT b.run_id, b.source, b.incarnation, b.member_id, b.launch_seq, min(n.started) AS next_start
  FROM launched b
  LEFT JOIN declared n ON n.run_id = b.run_id AND n.source = b.source AND n.incarnation > b.incarnation
  GROUP BY b.run_id, b.source, b.incarnation, b.member_id, b.launch_seq
),
first_end AS (
  SELECT b.run_id, b.source, b.incarnation, min(e.seq) AS end_seq
  FROM bounded b
  JOIN ends e ON e.run_id = b.run_id AND e.member_id = b.member_id AND e.seq > b.launch_seq
             AND (b.next_start IS NULL OR e.wall_ns <= b.next_start)
  GROUP BY b.run_id, b.source, b.incarnation
),
graceful AS (
  SELECT f.run_id, f.source, f.incarnation, e.wall_ns AS ended
  FROM first_end f
  JOIN ends e ON e.run_id = f.run_id AND e.seq = f.end_seq
  WHERE e.kind = 'stop'
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
