"""The consensus module's state against the committed log: ``module_state_follows_committed_log``.

A leader enters SUSPENDED (or ACTIVE, or SNAPSHOT) when it appends the cluster action, before the action
is committed; every other member changes state when it applies the committed action. A leader cut off
with such an action uncommitted must, when it steps down, return to the state of its committed log
(Aeron ``ConsensusModuleAgent.restoreUncommittedEntries``); one that keeps the uncommitted state rejoins
SUSPENDED while the cluster is ACTIVE (or the other way round), and no state check sees it: its service
state still agrees.

The check reads each member's ``election_complete`` events, whose detail carries the module's state and
how far its log adapter has applied the committed log (``module_state``, ``consumed_position``), and the
SUSPEND and RESUME actions in the committed ``log`` (each named by the ``cluster_action`` event of the
leader that appended it, matched on term and position). Where an election completes, the module is
SUSPENDED exactly when the last of those actions at or below its consumed position is a SUSPEND.
Judged where the trace's committed log starts at position 0, up to the first committed action no
``cluster_action`` event names."""

from __future__ import annotations

from clusterlab.chaos.checks.base import SqlCheck

MODULE_STATE_FOLLOWS_COMMITTED_LOG = SqlCheck(
    name="module_state_follows_committed_log",
    description="where a member's election completes, its consensus module is SUSPENDED exactly when the last "
    "SUSPEND or RESUME action of the committed log it has applied is a SUSPEND (an uncommitted action of a "
    "deposed leader is rolled back)",
    tables=("events", "log"),
    sql="""
WITH bounds AS (
  SELECT run_id, min(log_position - octet_length(entry)) AS first_start, max(log_position) AS end_position
  FROM log GROUP BY run_id
),
appended AS (
  SELECT DISTINCT run_id, leadership_term_id, log_position, get_json_object(detail, '$.action') AS action
  FROM events WHERE kind = 'cluster_action' AND source LIKE 'node-%'
),
actions AS (
  SELECT l.run_id, l.log_position, a.action
  FROM log l
  LEFT JOIN appended a
    ON a.run_id = l.run_id AND a.leadership_term_id = l.leadership_term_id AND a.log_position = l.log_position
  WHERE l.entry_type = 'ClusterAction'
),
unnamed AS (
  SELECT run_id, min(log_position) AS first_unnamed FROM actions WHERE action IS NULL GROUP BY run_id
),
completes AS (
  SELECT run_id, member_id, incarnation, leadership_term_id,
         get_json_object(detail, '$.module_state') AS module_state,
         CAST(get_json_object(detail, '$.consumed_position') AS BIGINT) AS consumed
  FROM events
  WHERE kind = 'election_complete' AND source LIKE 'node-%'
        AND get_json_object(detail, '$.module_state') IS NOT NULL
),
implied AS (
  SELECT c.run_id, c.member_id, c.incarnation, c.leadership_term_id, c.module_state, c.consumed,
         max_by(a.action, a.log_position) AS last_action, max(a.log_position) AS last_action_at
  FROM completes c
  LEFT JOIN actions a
    ON a.run_id = c.run_id AND a.log_position <= c.consumed AND a.action IN ('SUSPEND', 'RESUME')
  GROUP BY c.run_id, c.member_id, c.incarnation, c.leadership_term_id, c.module_state, c.consumed
)
SELECT i.run_id,
       concat('member ', CAST(i.member_id AS STRING), '/', CAST(i.incarnation AS STRING),
              ' completed the election of term ', CAST(i.leadership_term_id AS STRING), ' ', i.module_state,
              ' having applied the committed log to ', CAST(i.consumed AS STRING), ', where ',
              CASE WHEN i.last_action IS NULL THEN 'it has no SUSPEND or RESUME action'
                   ELSE concat('its last SUSPEND or RESUME action is a ', i.last_action, ' (ending at ',
                               CAST(i.last_action_at AS STRING), ')') END,
              ': the module kept a state the committed log does not have') AS detail
FROM implied i
JOIN bounds b ON b.run_id = i.run_id
LEFT JOIN unnamed u ON u.run_id = i.run_id
WHERE b.first_start = 0 AND i.consumed <= b.end_position
  AND (u.first_unnamed IS NULL OR i.consumed < u.first_unnamed)
  AND (i.module_state = 'SUSPENDED') <> coalesce(i.last_action = 'SUSPEND', false)
""",
)

CHECKS: tuple[SqlCheck, ...] = (MODULE_STATE_FOLLOWS_COMMITTED_LOG,)
