"""The state checks: agreement, contiguity, election safety, durability, the committed prefix and the
tripwires, each one SQL query over the views (chaos/checks/views.py) returning one row per violation."""

from __future__ import annotations

from clusterlab.chaos.checks.base import SqlCheck

AGREEMENT = SqlCheck(
    name="agreement",
    description="at every log position, every member and incarnation of a service applied the same entry "
    "(entry_digest) and reached the same state (state_digest; a Snapshot row at P is the state at P)",
    tables=("applied",),
    sql="""
SELECT run_id, service_id, log_position,
       CASE WHEN entry_differs THEN 'entry' ELSE 'state' END AS kind,
       concat('at log position ', log_position, ' members applied different ',
              CASE WHEN entry_differs THEN 'entries' ELSE 'states' END,
              ' (', rows, ' rows)') AS detail
FROM (
  SELECT run_id, service_id, log_position, count(*) AS rows,
         coalesce(min(e_hi) <> max(e_hi) OR min(e_lo) <> max(e_lo), false) AS entry_differs,
         coalesce(min(state_digest_hi) <> max(state_digest_hi) OR min(state_digest_lo) <> max(state_digest_lo),
                  false) AS state_differs
  FROM (
    SELECT run_id, service_id, log_position, state_digest_hi, state_digest_lo,
           CASE WHEN entry_type <> 'Snapshot' THEN entry_digest_hi END AS e_hi,
           CASE WHEN entry_type <> 'Snapshot' THEN entry_digest_lo END AS e_lo
    FROM applied
  ) AS a
  GROUP BY run_id, service_id, log_position
) AS p
WHERE entry_differs OR state_differs
ORDER BY run_id, log_position, service_id
""",
)

CONTIGUITY = SqlCheck(
    name="contiguity",
    description="each service incarnation applied entries back to back (an entry starts where the previous "
    "ended, a Snapshot row sets the start) and its seq counts from 0 without holes (one row per hole)",
    tables=("applied",),
    sql="""
SELECT run_id, member_id, service_id, incarnation, seq, log_position, length, entry_type,
       CASE WHEN seq <> coalesce(previous_seq + 1, 0)
            THEN concat('member ', member_id, '/', incarnation, ': seq ', seq, ' follows ',
                        coalesce(previous_seq, -1), ' (rows lost)')
            ELSE concat('member ', member_id, '/', incarnation, ': entry at ', log_position, ' starts at ',
                        log_position - length, ' but the previous ended at ', coalesce(previous_end, 0))
       END AS detail
FROM (
  SELECT run_id, member_id, service_id, incarnation, seq, log_position, length, entry_type,
         lag(log_position) OVER (PARTITION BY run_id, member_id, service_id, incarnation ORDER BY seq) AS previous_end,
         lag(seq) OVER (PARTITION BY run_id, member_id, service_id, incarnation ORDER BY seq) AS previous_seq
  FROM applied
) AS a
WHERE seq <> coalesce(previous_seq + 1, 0)
   OR (entry_type <> 'Snapshot' AND log_position - length <> coalesce(previous_end, 0))
ORDER BY run_id, member_id, service_id, incarnation, seq
""",
)

ELECTION_SAFETY = SqlCheck(
    name="election_safety",
    description="at most one member became leader in each leadership term",
    tables=("events",),
    sql="""
SELECT run_id, leadership_term_id, members,
       concat('term ', leadership_term_id, ' has leaders ', array_join(CAST(members AS ARRAY<STRING>), ', ')) AS detail
FROM (
  SELECT run_id, leadership_term_id, array_sort(collect_set(member_id)) AS members
  FROM events
  WHERE kind = 'leader' AND leadership_term_id IS NOT NULL
  GROUP BY run_id, leadership_term_id
) AS t
WHERE size(members) > 1
ORDER BY run_id, leadership_term_id
""",
)

DURABILITY = SqlCheck(
    name="durability",
    description="every acknowledged client op is in the committed log, and a resent copy of it changed no "
    "member's state (the service applied it once)",
    tables=("ops", "log", "applied"),
    sql="""
WITH acked AS (
  SELECT run_id, client_id, op_id, f, key, value FROM ops WHERE kind = 'ok'
), requests AS (
  SELECT run_id, req_id, req_op, req_key, req_value, log_position FROM log WHERE req_op IS NOT NULL
), repeated AS (
  SELECT run_id, req_id, req_op, req_key, req_value, min(log_position) AS first_position
  FROM requests
  GROUP BY run_id, req_id, req_op, req_key, req_value
  HAVING count(*) > 1
), copies AS (
  -- every copy of a request after its first (one entry per log position): a hash aggregate and a
  -- broadcast of the few repeated requests, where a row_number() window sorted every entry
  SELECT /*+ BROADCAST(d) */ r.run_id, r.req_id, r.req_op, r.req_key, r.req_value, r.log_position
  FROM requests AS r
  JOIN repeated AS d
    ON r.run_id = d.run_id AND r.req_id <=> d.req_id AND r.req_op = d.req_op AND r.req_key <=> d.req_key
   AND r.req_value <=> d.req_value
  WHERE r.log_position > d.first_position
), at_copy AS (
  -- copies are few: Spark broadcasts them rather than shuffling and sorting every applied row (twice)
  SELECT /*+ BROADCAST(c) */ a.run_id, a.member_id, a.service_id, a.incarnation, a.seq, a.log_position,
         a.state_digest_hi, a.state_digest_lo
  FROM applied AS a
  JOIN (SELECT DISTINCT run_id, log_position FROM copies) AS c
    ON a.run_id = c.run_id AND a.log_position = c.log_position
  WHERE a.entry_type = 'SessionMessage'
), changed AS (
  SELECT /*+ BROADCAST(x) */ DISTINCT x.run_id, x.log_position
  FROM at_copy AS x
  JOIN applied AS b
    ON b.run_id = x.run_id AND b.member_id = x.member_id AND b.service_id <=> x.service_id
   AND b.incarnation = x.incarnation AND b.seq = x.seq - 1
  WHERE b.state_digest_hi <> x.state_digest_hi OR b.state_digest_lo <> x.state_digest_lo
)
SELECT a.run_id, a.client_id, a.op_id, a.f, a.key, a.value, CAST(NULL AS BIGINT) AS log_position,
       'acknowledged op not in the log' AS problem,
       concat('client ', a.client_id, ' op ', a.op_id, ' ', a.f, ' ', coalesce(a.key, ''), '=', coalesce(a.value, ''),
              ': acknowledged but not in the log') AS detail
FROM acked AS a
WHERE NOT EXISTS (
  SELECT 1 FROM requests AS r
  WHERE r.run_id = a.run_id AND r.req_id <=> a.op_id AND r.req_op <=> a.f AND r.req_key <=> a.key
    AND r.req_value <=> a.value
)
UNION ALL
SELECT a.run_id, a.client_id, a.op_id, a.f, a.key, a.value, c.log_position,
       'applied more than once' AS problem,
       concat('client ', a.client_id, ' op ', a.op_id, ': applied again at ', c.log_position) AS detail
FROM acked AS a
JOIN copies AS c
  ON c.run_id = a.run_id AND c.req_id <=> a.op_id AND c.req_op <=> a.f AND c.req_key <=> a.key
 AND c.req_value <=> a.value
JOIN changed AS s ON s.run_id = c.run_id AND s.log_position = c.log_position
ORDER BY run_id, client_id, op_id, log_position
""",
)

COMMITTED_PREFIX = SqlCheck(
    name="committed_prefix",
    description="every entry a service applied (hence committed) is in the final committed log with the same "
    "bytes, and each member's commit position never moved back within an incarnation",
    tables=("applied", "log", "events"),
    sql="""
WITH positions AS (
  -- the applied digests at each position, aggregated (a hash aggregate) before the join with the log, so
  -- only one row per position meets the log, not one per member and incarnation
  SELECT /*+ BROADCAST(r) */ a.run_id, a.log_position,
         min(a.entry_digest_hi) AS min_hi, max(a.entry_digest_hi) AS max_hi,
         min(a.entry_digest_lo) AS min_lo, max(a.entry_digest_lo) AS max_lo
  FROM applied AS a
  JOIN (SELECT DISTINCT run_id FROM log) AS r ON r.run_id = a.run_id  -- runs with a committed log
  WHERE a.entry_type <> 'Snapshot'
  GROUP BY a.run_id, a.log_position
), flagged AS (
  -- positions where some member's entry is missing from the log or differs from it
  SELECT p.run_id, p.log_position, l.log_position AS log_has, l.entry_digest_hi AS log_hi, l.entry_digest_lo AS log_lo
  FROM positions AS p
  LEFT JOIN log AS l ON l.run_id = p.run_id AND l.log_position = p.log_position
  WHERE l.log_position IS NULL
     OR l.entry_digest_hi <> p.min_hi OR l.entry_digest_hi <> p.max_hi
     OR l.entry_digest_lo <> p.min_lo OR l.entry_digest_lo <> p.max_lo
)
SELECT /*+ BROADCAST(f) */ a.run_id, a.member_id, a.incarnation, a.log_position, CAST(NULL AS BIGINT) AS previous,
       'applied entry not in the final committed log' AS problem,
       concat('member ', a.member_id, '/', a.incarnation, ' applied an entry at ', a.log_position,
              CASE WHEN f.log_has IS NULL THEN '; the committed log has nothing there'
                   ELSE '; the committed log has another entry there' END) AS detail
FROM applied AS a
JOIN flagged AS f ON f.run_id = a.run_id AND f.log_position = a.log_position
WHERE a.entry_type <> 'Snapshot'
  AND (f.log_has IS NULL OR f.log_hi <> a.entry_digest_hi OR f.log_lo <> a.entry_digest_lo)
UNION ALL
SELECT run_id, member_id, incarnation, log_position, previous,
       concat('commit position moved back from ', previous) AS problem,
       concat('commit position of ', source, ' incarnation ', incarnation, ' moved back from ', previous, ' to ',
              log_position) AS detail
FROM (
  SELECT run_id, source, member_id, incarnation, log_position,
         lag(log_position) OVER (PARTITION BY run_id, source, incarnation ORDER BY wall_ns, seq) AS previous
  FROM events
  WHERE kind = 'commit' AND log_position IS NOT NULL
) AS c
WHERE log_position < previous
ORDER BY run_id, log_position, member_id
""",
)

TRIPWIRE = SqlCheck(
    name="tripwire",
    description="no service callback read the wall clock, used the module-level random, OS randomness "
    "(os.urandom, uuid4, secrets) or a thread, or read cluster.role and then changed its state "
    "(clusterlab.harness.tripwire; one row per finding, naming the user's file:line)",
    tables=("events",),
    sql="""
SELECT run_id, member_id, log_position, get_json_object(detail, '$.message') AS detail
FROM events
WHERE kind = 'tripwire'
ORDER BY run_id, log_position, member_id
""",
)

CHECKS: tuple[SqlCheck, ...] = (AGREEMENT, CONTIGUITY, ELECTION_SAFETY, DURABILITY, COMMITTED_PREFIX, TRIPWIRE)
