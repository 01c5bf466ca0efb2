"""A client closes by itself exactly when the cluster has been gone for its new-leader timeout:
``clients_close_when_cluster_gone``.

Aeron's client (``AeronCluster.pollStateChanges``) that loses its leader waits ``newLeaderTimeoutNs`` for a
NewLeaderEvent and then closes. A client that never closes keeps offering into a cluster that is not
there; one that closes early drops a session a new leader would have taken over.

The check reads the harness's member events (``start``/``restart`` bring a member up, ``kill``/``stop``
take it down; ordered by the harness's ``seq``) for the periods in which no member runs, the workload's
``client_closed`` events (client id, reason "cluster unavailable: ...", its ``new_leader_timeout_ns``),
and the ``cluster-down``
nemesis (``chaos_apply``/``chaos_heal``, with the clients' timeout). Two rules:

* a client that closed by itself at ``t`` had started waiting (``t`` minus its timeout) while no member
  ran, or up to 2 s before such a period (it may have lost its leader to a kill just before);
* in a ``cluster-down`` that lasts 3 s past the timeout, every client that invoked an op in the 2 s before
  it closed by itself before the cluster came back (plus 1 s).
"""

from __future__ import annotations

from clusterlab.chaos.checks.base import SqlCheck

CLIENTS_CLOSE_WHEN_CLUSTER_GONE = SqlCheck(
    name="clients_close_when_cluster_gone",
    description="a client closes by itself only once the cluster has been gone for its new-leader timeout, and "
    "every active client does so when the whole cluster stays down longer than that (cluster-down)",
    tables=("events", "ops"),
    sql="""
WITH transitions AS (
  SELECT run_id, seq, wall_ns, CASE WHEN kind IN ('start', 'restart') THEN 1 ELSE -1 END AS delta
  FROM events
  WHERE source = 'harness' AND member_id >= 0 AND kind IN ('start', 'restart', 'kill', 'stop')
),
counted AS (
  SELECT run_id, seq, wall_ns,
         sum(delta) OVER (PARTITION BY run_id ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS alive
  FROM transitions
),
bounded AS (
  SELECT run_id, wall_ns AS down_from, alive, lead(wall_ns) OVER (PARTITION BY run_id ORDER BY seq) AS down_to
  FROM counted
),
periods AS (
  SELECT run_id, down_from, coalesce(down_to, CAST(9000000000000000000 AS BIGINT)) AS down_to
  FROM bounded WHERE alive = 0
),
closes AS (
  SELECT run_id, wall_ns AS closed_at, CAST(get_json_object(detail, '$.client_id') AS BIGINT) AS client_id,
         CAST(get_json_object(detail, '$.new_leader_timeout_ns') AS BIGINT) AS timeout_ns,
         get_json_object(detail, '$.reason') AS reason
  FROM events
  WHERE source = 'harness' AND kind = 'client_closed'
        AND get_json_object(detail, '$.reason') LIKE 'cluster unavailable%'
),
early AS (
  SELECT c.run_id,
         concat('client ', CAST(c.client_id AS STRING), ' closed by itself at ', CAST(c.closed_at AS STRING),
                ' (', c.reason, ') though no member was down ', CAST(c.timeout_ns AS STRING),
                ' ns before') AS detail
  FROM closes c
  WHERE NOT EXISTS (
    SELECT 1 FROM periods p
    WHERE p.run_id = c.run_id AND p.down_from - 2000000000 <= c.closed_at - c.timeout_ns
      AND c.closed_at - c.timeout_ns <= p.down_to
  )
),
applied AS (
  SELECT run_id, seq, wall_ns, CAST(get_json_object(detail, '$.new_leader_timeout_ns') AS BIGINT) AS timeout_ns
  FROM events
  WHERE source = 'harness' AND kind = 'chaos_apply' AND get_json_object(detail, '$.nemesis') = 'cluster-down'
),
downs AS (
  SELECT a.run_id, a.wall_ns AS down_from, a.timeout_ns, min(h.wall_ns) AS down_to
  FROM applied a
  JOIN events h ON h.run_id = a.run_id AND h.source = 'harness' AND h.kind = 'chaos_heal' AND h.seq > a.seq
                AND get_json_object(h.detail, '$.nemesis') = 'cluster-down'
  GROUP BY a.run_id, a.wall_ns, a.timeout_ns
),
active AS (
  SELECT DISTINCT d.run_id, d.down_from, d.down_to, o.client_id
  FROM downs d
  JOIN ops o ON o.run_id = d.run_id AND o.kind = 'invoke'
            AND o.wall_ns >= d.down_from - 2000000000 AND o.wall_ns < d.down_from
  WHERE d.down_to - d.down_from >= d.timeout_ns + 3000000000
),
missed AS (
  SELECT a.run_id,
         concat('client ', CAST(a.client_id AS STRING), ' never closed although every member was down from ',
                CAST(a.down_from AS STRING), ' to ', CAST(a.down_to AS STRING),
                ', longer than its new-leader timeout') AS detail
  FROM active a
  WHERE NOT EXISTS (
    SELECT 1 FROM closes c
    WHERE c.run_id = a.run_id AND c.client_id = a.client_id AND c.closed_at >= a.down_from
      AND c.closed_at <= a.down_to + 1000000000
  )
)
SELECT run_id, detail FROM early
UNION ALL
SELECT run_id, detail FROM missed
""",
)

CHECKS: tuple[SqlCheck, ...] = (CLIENTS_CLOSE_WHEN_CLUSTER_GONE,)
