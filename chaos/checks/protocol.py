"""Protocol-level checks: properties of the recorded messages and events, not of the service state.

State checks (agreement, durability, prefix) miss bugs that only bend the protocol: a vote granted to a
less recent log, a vote cast twice in one term after a restart, a leader that keeps leading without a
quorum, a timer fired locally, a snapshot at another position. Each check here is one
:class:`~clusterlab.chaos.checks.base.SqlCheck` over the trace tables (docs/trace-schema.md), from the
outside: the ``vote`` events (the ballot and both logs as the voter compared them), ``leader`` /
``election_complete`` events and NewLeadershipTerm messages (who leads which term, in every member's
view), the harness's ``partition``/``heal`` events with the node's ``start`` event (its leader
heartbeat timeout), the ``applied`` rows and the committed ``log``.

:func:`evaluate_duckdb` runs a check on one run with DuckDB (the local verdict, until the embedded engine
runs every SqlCheck)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from clusterlab.chaos.checks.base import SqlCheck
from clusterlab.chaos.checks.client_close import CLIENTS_CLOSE_WHEN_CLUSTER_GONE
from clusterlab.chaos.checks.module_state import MODULE_STATE_FOLLOWS_COMMITTED_LOG
from clusterlab.chaos.checks.service_terminate import SERVICES_TERMINATE_ONCE
from clusterlab.chaos.checks.sql import to_duckdb
from clusterlab.chaos.checks.views import derived_columns, derived_fields

# Rows of the ``vote`` events, with their JSON detail as columns.
_VOTES = """
SELECT run_id, member_id, incarnation, wall_ns,
       leadership_term_id AS candidate_term_id,
       log_position,
       CAST(get_json_object(detail, '$.candidate') AS BIGINT) AS candidate,
       get_json_object(detail, '$.vote') = 'true' AS yes,
       CAST(get_json_object(detail, '$.log_leadership_term_id') AS BIGINT) AS log_term,
       CAST(get_json_object(detail, '$.candidate_log_leadership_term_id') AS BIGINT) AS candidate_log_term,
       CAST(get_json_object(detail, '$.candidate_log_position') AS BIGINT) AS candidate_log_position
FROM events
WHERE kind = 'vote' AND source LIKE 'node-%'
"""

VOTE_LOG_RECENCY = SqlCheck(
    name="vote_log_recency",
    description="no YES vote to a candidate whose log (term, position) is less recent than the voter's",
    tables=("events",),
    sql=f"""
WITH votes AS ({_VOTES})
SELECT run_id,
       concat('member ', CAST(member_id AS STRING), ' (incarnation ', CAST(incarnation AS STRING),
              ') voted YES for member ', CAST(candidate AS STRING), ' in term ', CAST(candidate_term_id AS STRING),
              ' with a more recent log (term ', CAST(log_term AS STRING), ', position ',
              CAST(log_position AS STRING), ') than the candidate (term ', CAST(candidate_log_term AS STRING),
              ', position ', CAST(candidate_log_position AS STRING), ')') AS detail
FROM votes
WHERE yes AND (log_term > candidate_log_term
               OR (log_term = candidate_log_term AND log_position > candidate_log_position))
""",
)

ONE_VOTE_PER_TERM = SqlCheck(
    name="one_vote_per_term",
    description="at most one YES vote per voter per candidate term, across the voter's restarts (a candidate's "
    "RequestVote is its vote for itself)",
    tables=("events", "messages"),
    sql=f"""
WITH votes AS (
  SELECT run_id, member_id, incarnation, candidate_term_id, candidate, yes FROM ({_VOTES}) v
  UNION ALL
  SELECT DISTINCT run_id, member_id, incarnation, leadership_term_id, CAST(member_id AS BIGINT), true
  FROM messages
  WHERE msg_type = 'RequestVote' AND direction = 'send' AND member_id >= 0 AND leadership_term_id IS NOT NULL
)
SELECT run_id,
       concat('member ', CAST(member_id AS STRING), ' voted YES in term ', CAST(candidate_term_id AS STRING),
              ' for members ', candidates, ' (incarnations ', incarnations, ')') AS detail
FROM (
  SELECT run_id, member_id, candidate_term_id,
         COUNT(DISTINCT candidate) AS n,
         array_join(sort_array(collect_set(CAST(candidate AS STRING))), ',') AS candidates,
         array_join(sort_array(collect_set(CAST(incarnation AS STRING))), ',') AS incarnations
  FROM votes WHERE yes
  GROUP BY run_id, member_id, candidate_term_id
) t
WHERE n > 1
""",
)

# A YES vote for another member's candidacy in term T promises to follow no leader of an earlier term
# (Raft's rule; Aeron's Election keeps it in CANVASS). Following shows as the member's own election
# entering a follower state past its ballot, with the followed leader's term. The promise outlives a
# restart (the candidate term is on disk), so every later incarnation is held to it.
VOTE_PROMISE_KEPT = SqlCheck(
    name="vote_promise_kept",
    description="a member that voted YES for another member in term T never follows a leader of an earlier "
    "term afterwards (its election never enters a follower state with a lower term)",
    tables=("events",),
    sql=f"""
WITH promises AS (
  SELECT run_id, member_id, wall_ns, candidate, candidate_term_id FROM ({_VOTES}) v
  WHERE yes AND candidate <> member_id
),
follows AS (
  SELECT run_id, member_id, incarnation, wall_ns, leadership_term_id AS term,
         get_json_object(detail, '$.from') AS from_state, get_json_object(detail, '$.to') AS to_state
  FROM events
  WHERE kind = 'election_state' AND source LIKE 'node-%' AND leadership_term_id IS NOT NULL
    AND get_json_object(detail, '$.to') LIKE 'FOLLOWER_%'
    AND get_json_object(detail, '$.to') <> 'FOLLOWER_BALLOT'
),
broken AS (
  SELECT f.run_id, f.member_id, f.incarnation, f.term, f.from_state, f.to_state,
         max(p.candidate_term_id) AS promised_term, max_by(p.candidate, p.candidate_term_id) AS candidate
  FROM follows f
  JOIN promises p ON p.run_id = f.run_id AND p.member_id = f.member_id AND p.wall_ns < f.wall_ns
                     AND p.candidate_term_id > f.term
  GROUP BY f.run_id, f.member_id, f.incarnation, f.wall_ns, f.term, f.from_state, f.to_state
)
SELECT run_id,
       concat('member ', CAST(member_id AS STRING), ' (incarnation ', CAST(incarnation AS STRING),
              ') voted YES for member ', CAST(candidate AS STRING), ' in term ', CAST(promised_term AS STRING),
              ', then followed the leader of term ', CAST(term AS STRING), ' (', from_state, ' -> ', to_state,
              '): its vote promised to follow no leader of an earlier term') AS detail
FROM broken
""",
)

ONE_LEADER_PER_TERM = SqlCheck(
    name="one_leader_per_term",
    description="at most one leader per term in every member's view (leader/election_complete events, "
    "NewLeadershipTerm messages)",
    tables=("events", "messages"),
    sql="""
WITH views AS (
  SELECT run_id, leadership_term_id AS term, member_id AS leader, member_id AS viewer, 'won' AS how
  FROM events WHERE kind = 'leader' AND source LIKE 'node-%' AND leadership_term_id IS NOT NULL
  UNION ALL
  SELECT run_id, leadership_term_id, CAST(get_json_object(detail, '$.leader') AS BIGINT), member_id,
         'election_complete'
  FROM events WHERE kind = 'election_complete' AND source LIKE 'node-%' AND leadership_term_id IS NOT NULL
  UNION ALL
  SELECT run_id, leadership_term_id, CASE WHEN direction = 'send' THEN member_id ELSE peer END, member_id,
         concat('NewLeadershipTerm ', direction)
  FROM messages
  WHERE msg_type = 'NewLeadershipTerm' AND direction IN ('send', 'recv') AND leadership_term_id IS NOT NULL
        AND member_id >= 0
)
SELECT run_id,
       concat('term ', CAST(term AS STRING), ' has leaders ', leaders, ' (', seen, ')') AS detail
FROM (
  SELECT run_id, term,
         COUNT(DISTINCT leader) AS n,
         array_join(sort_array(collect_set(CAST(leader AS STRING))), ',') AS leaders,
         array_join(sort_array(collect_set(concat('member ', CAST(viewer AS STRING), ' saw ',
                                                  CAST(leader AS STRING), ' by ', how))), '; ') AS seen
  FROM views
  GROUP BY run_id, term
) t
WHERE n > 1
""",
)

TERM_STARTS_WITH_NEW_LEADERSHIP_TERM = SqlCheck(
    name="term_starts_with_new_leadership_term",
    description="the first entry of every term, in each member's applied rows and in the committed log, "
    "is its NewLeadershipTerm entry",
    tables=("applied", "log"),
    sql="""
WITH first_ends AS (
  SELECT run_id, member_id, service_id, incarnation, leadership_term_id, min(log_position) AS first_end
  FROM applied WHERE entry_type <> 'Snapshot'
  GROUP BY run_id, member_id, service_id, incarnation, leadership_term_id
),
firsts AS (
  -- the row at each first position: an int64 min (a hash aggregate) and a broadcast of the few groups,
  -- where min_by(entry_type, ...) over a string planned as a sort of every applied row
  SELECT /*+ BROADCAST(m) */ a.run_id, a.member_id, a.service_id, a.incarnation, a.leadership_term_id,
         a.entry_type AS first_type, m.first_end, a.length AS first_length
  FROM applied a
  JOIN first_ends m
    ON a.run_id = m.run_id AND a.member_id <=> m.member_id AND a.service_id <=> m.service_id
       AND a.incarnation <=> m.incarnation AND a.leadership_term_id <=> m.leadership_term_id
       AND a.log_position = m.first_end
  WHERE a.entry_type <> 'Snapshot'
),
snaps AS (
  SELECT run_id, member_id, service_id, incarnation, log_position FROM applied WHERE entry_type = 'Snapshot'
),
log_first_ends AS (
  SELECT run_id, leadership_term_id, min(log_position) AS first_end FROM log GROUP BY run_id, leadership_term_id
),
log_firsts AS (
  SELECT /*+ BROADCAST(m) */ l.run_id, l.leadership_term_id, l.entry_type AS first_type, m.first_end,
         octet_length(l.entry) AS first_length
  FROM log l
  JOIN log_first_ends m
    ON l.run_id = m.run_id AND l.leadership_term_id <=> m.leadership_term_id AND l.log_position = m.first_end
)
SELECT run_id,
       concat('member ', CAST(member_id AS STRING), ' (incarnation ', CAST(incarnation AS STRING),
              ') began term ', CAST(leadership_term_id AS STRING), ' with a ', first_type, ' entry at ',
              CAST(first_end - first_length AS STRING), ', not its NewLeadershipTerm entry') AS detail
FROM firsts f
WHERE first_type <> 'NewLeadershipTerm'
  -- an incarnation restored from a snapshot resumes mid-term, right after the snapshot's position
  AND NOT EXISTS (SELECT 1 FROM snaps s
                  WHERE s.run_id = f.run_id AND s.member_id = f.member_id AND s.service_id = f.service_id
                        AND s.incarnation = f.incarnation AND s.log_position = f.first_end - f.first_length)
UNION ALL
SELECT run_id,
       concat('committed log: term ', CAST(leadership_term_id AS STRING), ' begins with a ', first_type,
              ' entry at ', CAST(first_end - first_length AS STRING), ', not its NewLeadershipTerm entry') AS detail
FROM log_firsts g
WHERE first_type <> 'NewLeadershipTerm'
  -- a log that does not start at 0 (compacted below a snapshot) may start mid-term
  AND NOT (first_end - first_length > 0
           AND first_end = (SELECT min(log_position) FROM log l WHERE l.run_id = g.run_id))
""",
)

# A leader's window: from its ``leader`` event until it steps down (election_start, or a non-LEADER role) or
# its process is killed, paused, stopped or restarted. A ``partition`` that leaves it in a group smaller than a
# quorum must end the window within leader_heartbeat_timeout (its start event) + half of it. The slack: the
# leader counts a follower inactive once ``timeout`` has passed since its last AppendPosition, which came at
# most one heartbeat interval before the cut, and checks once per duty cycle; half a timeout covers both
# and a loaded machine's scheduling. Not judged when the cut is healed or changed, or the run ends, first.
LEADER_STEPS_DOWN_WITHOUT_QUORUM = SqlCheck(
    name="leader_steps_down_without_quorum",
    description="a leader cut off from a quorum by a partition steps down within its leader heartbeat timeout (+50%)",
    tables=("events",),
    sql="""
WITH sizes AS (
  SELECT run_id, COUNT(DISTINCT member_id) AS n FROM events
  WHERE source LIKE 'node-%' AND kind = 'start' GROUP BY run_id
),
timeouts AS (
  SELECT run_id, member_id, max(CAST(get_json_object(detail, '$.leader_heartbeat_timeout_ns') AS BIGINT)) AS t
  FROM events WHERE source LIKE 'node-%' AND kind = 'start' GROUP BY run_id, member_id
),
leads AS (
  SELECT run_id, member_id, leadership_term_id, wall_ns AS since FROM events
  WHERE kind = 'leader' AND source LIKE 'node-%'
),
ends AS (
  SELECT run_id, member_id, wall_ns FROM events
  WHERE source LIKE 'node-%'
        AND (kind = 'election_start' OR (kind = 'role' AND get_json_object(detail, '$.role') <> 'LEADER'))
  UNION ALL
  SELECT run_id, member_id, wall_ns FROM events
  WHERE source IN ('harness', 'chaos') AND kind IN ('kill', 'stop', 'restart', 'pause')
),
cuts AS (
  SELECT run_id, wall_ns AS at, detail FROM events WHERE kind = 'partition' AND source = 'harness'
),
changes AS (
  SELECT run_id, wall_ns FROM events WHERE kind IN ('partition', 'heal') AND source = 'harness'
),
run_end AS (SELECT run_id, max(wall_ns) AS end_ns FROM events GROUP BY run_id),
cut_leaders AS (
  SELECT c.run_id, c.at, l.member_id, l.leadership_term_id, c.detail, z.n, tt.t,
         c.at + tt.t + tt.t / 2 AS deadline,
         CASE
           WHEN get_json_object(c.detail, '$.isolate') IS NOT NULL THEN
             CASE WHEN CAST(get_json_object(c.detail, '$.isolate') AS BIGINT) = l.member_id THEN 1 ELSE z.n - 1 END
           WHEN get_json_object(c.detail, '$.groups') IS NOT NULL THEN
             -- the member's group in {"groups":[[1],[0,2]]}, brackets made <> (no regex escapes: the
             -- two engines' string literals and regex dialects differ on them)
             length(regexp_extract(translate(c.detail, '[]', '<>'),
                                   concat('<((?:[0-9]+,)*', CAST(l.member_id AS STRING), '(?:,[0-9]+)*)>'), 1))
             - length(replace(regexp_extract(translate(c.detail, '[]', '<>'),
                                             concat('<((?:[0-9]+,)*', CAST(l.member_id AS STRING),
                                                    '(?:,[0-9]+)*)>'), 1), ',', '')) + 1
         END AS group_size
  FROM cuts c
  JOIN leads l ON l.run_id = c.run_id AND l.since <= c.at
  JOIN sizes z ON z.run_id = c.run_id
  JOIN timeouts tt ON tt.run_id = c.run_id AND tt.member_id = l.member_id
  WHERE tt.t IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM ends e WHERE e.run_id = l.run_id AND e.member_id = l.member_id
                                              AND e.wall_ns >= l.since AND e.wall_ns <= c.at)
)
SELECT x.run_id,
       concat('member ', CAST(x.member_id AS STRING), ' led term ', CAST(x.leadership_term_id AS STRING),
              ' in a group of ', CAST(x.group_size AS STRING), ' of ', CAST(x.n AS STRING),
              ' members after the partition at ', CAST(x.at AS STRING), ' ns ', x.detail,
              ' and did not step down within ', CAST(CAST((x.deadline - x.at) / 1000000 AS BIGINT) AS STRING),
              ' ms (leader heartbeat timeout ', CAST(CAST(x.t / 1000000 AS BIGINT) AS STRING), ' ms + 50%)') AS detail
FROM cut_leaders x
JOIN run_end r ON r.run_id = x.run_id
WHERE x.group_size < floor(x.n / 2) + 1
  AND r.end_ns > x.deadline
  AND NOT EXISTS (SELECT 1 FROM ends e WHERE e.run_id = x.run_id AND e.member_id = x.member_id
                                            AND e.wall_ns > x.at AND e.wall_ns <= x.deadline)
  AND NOT EXISTS (SELECT 1 FROM changes g WHERE g.run_id = x.run_id AND g.wall_ns > x.at
                                               AND g.wall_ns <= x.deadline)
""",
)

TIMERS_AND_CLOSES_AGREE = SqlCheck(
    name="timers_and_closes_agree",
    description="Timer and SessionClose entries are applied at the same log positions, with the same bytes, "
    "on every member, and only where the committed log has them",
    tables=("applied", "log"),
    sql="""
WITH tc AS (
  SELECT run_id, member_id, incarnation, log_position, entry_type FROM applied
  WHERE entry_type IN ('Timer', 'SessionClose')
),
spots AS (SELECT DISTINCT run_id, log_position FROM tc),
at_spot AS (
  SELECT /*+ BROADCAST(p) */ a.run_id, a.log_position,
         concat(a.entry_type, ' ', substring(lower(hex(a.entry_digest)), 1, 12)) AS what,
         concat(CAST(a.member_id AS STRING), '/', CAST(a.incarnation AS STRING)) AS who
  FROM applied a JOIN spots p ON a.run_id = p.run_id AND a.log_position = p.log_position
  WHERE a.entry_type <> 'Snapshot'
),
log_end AS (SELECT run_id, max(log_position) AS end_position FROM log GROUP BY run_id)
SELECT run_id,
       concat('members disagree on the ', kinds, ' entry ending at ', CAST(log_position AS STRING), ': ',
              seen) AS detail
FROM (
  SELECT run_id, log_position, COUNT(DISTINCT what) AS n,
         array_join(sort_array(collect_set(regexp_extract(what, '^[A-Za-z]+', 0))), '/') AS kinds,
         array_join(sort_array(collect_set(concat(what, ' by ', who))), '; ') AS seen
  FROM at_spot GROUP BY run_id, log_position
) t
WHERE n > 1
UNION ALL
SELECT tc.run_id,
       concat('member ', CAST(tc.member_id AS STRING), '/', CAST(tc.incarnation AS STRING), ' applied a ',
              tc.entry_type, ' entry ending at ', CAST(tc.log_position AS STRING),
              ' that is not in the committed log') AS detail
FROM tc JOIN log_end e ON e.run_id = tc.run_id
WHERE tc.log_position <= e.end_position
  AND NOT EXISTS (SELECT 1 FROM log l WHERE l.entry_type IN ('Timer', 'SessionClose')  -- filtered before any shuffle
                                           AND l.run_id = tc.run_id AND l.log_position = tc.log_position
                                           AND l.entry_type = tc.entry_type)
""",
)

SNAPSHOTS_AGREE = SqlCheck(
    name="snapshots_agree",
    description="snapshots are taken (and restored) only at a committed ClusterAction's position, and every "
    "member that applied that action live and went on took one there",
    tables=("events", "applied", "log"),
    sql="""
WITH taken AS (
  SELECT run_id, member_id, incarnation, log_position, 'took' AS how FROM events
  WHERE kind = 'snapshot' AND source LIKE 'node-%' AND log_position IS NOT NULL
  UNION ALL
  SELECT run_id, member_id, incarnation, log_position, 'restored' AS how FROM applied WHERE entry_type = 'Snapshot'
),
log_end AS (SELECT run_id, max(log_position) AS end_position FROM log GROUP BY run_id),
lasts AS (
  -- each incarnation's last position (a hash aggregate), not a join of applied with itself
  SELECT run_id, member_id, service_id, incarnation, max(log_position) AS last_position FROM applied
  GROUP BY run_id, member_id, service_id, incarnation
),
actions AS (
  SELECT a.run_id, a.member_id, a.service_id, a.incarnation, a.log_position FROM applied a
  JOIN lasts b ON b.run_id = a.run_id AND b.member_id = a.member_id AND b.service_id = a.service_id
                  AND b.incarnation = a.incarnation
  WHERE a.entry_type = 'ClusterAction' AND NOT a.replay AND b.last_position > a.log_position
)
SELECT k.run_id,
       concat('member ', CAST(k.member_id AS STRING), '/', CAST(k.incarnation AS STRING), ' ', k.how,
              ' a snapshot at ', CAST(k.log_position AS STRING),
              ', where the committed log has no ClusterAction entry') AS detail
FROM taken k JOIN log_end e ON e.run_id = k.run_id
WHERE k.log_position <= e.end_position
  AND NOT EXISTS (SELECT 1 FROM log l WHERE l.run_id = k.run_id AND l.log_position = k.log_position
                                           AND l.entry_type = 'ClusterAction')
UNION ALL
SELECT a.run_id,
       concat('member ', CAST(a.member_id AS STRING), '/', CAST(a.incarnation AS STRING),
              ' applied the ClusterAction at ', CAST(a.log_position AS STRING),
              ' where other members took a snapshot, went on, and took none there') AS detail
FROM actions a
WHERE EXISTS (SELECT 1 FROM events s WHERE s.run_id = a.run_id AND s.kind = 'snapshot'
                                          AND s.source LIKE 'node-%' AND s.log_position = a.log_position)
  AND NOT EXISTS (SELECT 1 FROM events s WHERE s.run_id = a.run_id AND s.kind = 'snapshot'
                                              AND s.source LIKE 'node-%' AND s.member_id = a.member_id
                                              AND s.log_position = a.log_position)
""",
)

# Members whose consensus module records a ``session_close`` event for each SessionClose it applies (its
# ``start`` event says so); older traces have none and are not judged.
SESSIONS_CLOSE_EVERYWHERE = SqlCheck(
    name="sessions_close_everywhere",
    description="each SessionClose a member's service applies closed that session in the member's consensus "
    "module too, at the same log position (no member keeps a closed session open)",
    tables=("applied", "events"),
    sql="""
WITH recorded AS (
  SELECT DISTINCT run_id, member_id FROM events
  WHERE kind = 'start' AND source LIKE 'node-%' AND get_json_object(detail, '$.session_close_events') = 'true'
),
closes AS (
  SELECT DISTINCT a.run_id, a.member_id, a.log_position FROM applied a
  JOIN recorded r ON r.run_id = a.run_id AND r.member_id = a.member_id
  WHERE a.entry_type = 'SessionClose'
),
module AS (
  SELECT run_id, member_id, log_position,
         max(CASE WHEN get_json_object(detail, '$.open') = 'true' THEN 1 ELSE 0 END) AS kept_open
  FROM events WHERE kind = 'session_close' AND source LIKE 'node-%'
  GROUP BY run_id, member_id, log_position
)
SELECT c.run_id,
       concat('member ', CAST(c.member_id AS STRING), ' applied the SessionClose ending at log position ',
              CAST(c.log_position AS STRING), ' in its service, but its consensus module ',
              CASE WHEN m.log_position IS NULL THEN 'closed no session there' ELSE 'kept that session open' END)
         AS detail
FROM closes c
LEFT JOIN module m ON m.run_id = c.run_id AND m.member_id = c.member_id AND m.log_position = c.log_position
WHERE m.log_position IS NULL OR m.kept_open = 1
""",
)

# A follower (or a replay) that reads a TimerEvent records a ``timer_event`` event saying whether that timer
# is still scheduled in its consensus module (nodes whose ``start`` event declares ``timer_events``).
TIMERS_FIRE_ONCE = SqlCheck(
    name="timers_fire_once",
    description="a timer whose TimerEvent a member read from the log is no longer scheduled in that member's "
    "consensus module (else its next leader fires it again)",
    tables=("events",),
    sql="""
SELECT run_id,
       concat('member ', CAST(member_id AS STRING), ' (incarnation ', CAST(incarnation AS STRING),
              ') read the TimerEvent of timer ', get_json_object(detail, '$.correlation_id'),
              ' ending at log position ', CAST(log_position AS STRING),
              ' and still has that timer scheduled: a next leader fires it again') AS detail
FROM events
WHERE kind = 'timer_event' AND source LIKE 'node-%' AND get_json_object(detail, '$.scheduled') = 'true'
""",
)

# A consensus module that cancels a scheduled timer for its service records a ``timer_cancel`` event saying
# whether that timer is still scheduled afterwards.
CANCELLED_TIMERS_STAY_CANCELLED = SqlCheck(
    name="cancelled_timers_stay_cancelled",
    description="a timer its service cancelled is no longer scheduled in that member's consensus module "
    "(else a leader fires it after the cancel)",
    tables=("events",),
    sql="""
SELECT run_id,
       concat('member ', CAST(member_id AS STRING), ' (incarnation ', CAST(incarnation AS STRING),
              ') cancelled timer ', get_json_object(detail, '$.correlation_id'),
              ' for its service and still has that timer scheduled: a leader fires it after the cancel')
         AS detail
FROM events
WHERE kind = 'timer_cancel' AND source LIKE 'node-%' AND get_json_object(detail, '$.scheduled') = 'true'
""",
)

LEADER_HAS_QUORUM_OF_VOTES = SqlCheck(
    name="leader_has_quorum_of_votes",
    description="every leader of a term won it with a quorum of YES votes for that very term (its own "
    "included; the voters' vote events, which a real node writes out before it sends the vote)",
    tables=("events",),
    sql=f"""
WITH leaders AS (
  SELECT DISTINCT run_id, member_id AS leader, leadership_term_id AS term
  FROM events WHERE kind = 'leader' AND source LIKE 'node-%' AND leadership_term_id IS NOT NULL
),
size AS (
  SELECT run_id, COUNT(DISTINCT member_id) AS members FROM events WHERE source LIKE 'node-%' GROUP BY run_id
),
yes AS (
  SELECT DISTINCT run_id, member_id AS voter, candidate, candidate_term_id FROM ({_VOTES}) v WHERE yes
),
tally AS (
  SELECT l.run_id, l.leader, l.term, COUNT(DISTINCT y.voter) + 1 AS votes
  FROM leaders l
  LEFT JOIN yes y ON y.run_id = l.run_id AND y.candidate = l.leader AND y.candidate_term_id = l.term
                     AND y.voter <> l.leader
  GROUP BY l.run_id, l.leader, l.term
)
SELECT t.run_id,
       concat('member ', CAST(t.leader AS STRING), ' led term ', CAST(t.term AS STRING), ' with ',
              CAST(t.votes AS STRING), ' YES vote(s) for that term (its own included); a quorum of ',
              CAST(s.members AS STRING), ' members is ', CAST(CAST(FLOOR(s.members / 2) AS BIGINT) + 1 AS STRING))
         AS detail
FROM tally t JOIN size s ON s.run_id = t.run_id
WHERE t.votes < CAST(FLOOR(s.members / 2) AS BIGINT) + 1
""",
)

# (term, position) as one int64 that orders by term, then position: a running max over a peer's reports
# is then its latest term's highest position. Positions stay below 2^40 bytes.
_TERM_SCALE = 1 << 40
_MEMBER_IDS = range(9)  # every member id a cluster may have (clusterlab.chaos.limits: up to 9 members)
_RUNNING = (
    "OVER (PARTITION BY run_id, member_id, incarnation ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
)
_REPORTS = ",\n".join(
    f"max(CASE WHEN peer = {k} AND msg_type = 'AppendPosition' THEN leadership_term_id * {_TERM_SCALE} + log_position "
    f"END) {_RUNNING} AS a{k},\n"
    f"max(CASE WHEN peer = {k} AND msg_type IN ('CanvassPosition', 'Vote') "
    f"THEN log_leadership_term_id * {_TERM_SCALE} + log_position END) {_RUNNING} AS c{k}"
    for k in _MEMBER_IDS
)
_BACKERS = " + ".join(
    f"(CASE WHEN (s.a{k} >= s.term * {_TERM_SCALE} + s.pos AND s.a{k} < (s.term + 1) * {_TERM_SCALE}) "
    f"OR (s.a{k} >= s.log_term * {_TERM_SCALE} + s.pos AND s.a{k} < (s.log_term + 1) * {_TERM_SCALE}) "
    f"OR (s.c{k} >= s.log_term * {_TERM_SCALE} + s.pos AND s.c{k} < (s.log_term + 1) * {_TERM_SCALE}) "
    "THEN 1 ELSE 0 END)"
    for k in _MEMBER_IDS
)

# A leader's evidence, in the order its member recorded it (``seq``): the AppendPositions it received in
# its term, and the logs that CanvassPositions, Votes and AppendPositions reported, counted only when they
# end in the same term as its own log (a term has one leader, so a log ending in it holds that leader's
# bytes: a leader-elect that led its log's term counts the followers that replicated it then). The
# leader's term and log term are those of its latest RequestVote (a leader-elect sends CommitPositions in
# its log's term until it has started its own). A position reported in an older term may describe bytes
# since truncated, or another leader's bytes at the same positions.
COMMIT_BACKED_BY_QUORUM = SqlCheck(
    name="commit_backed_by_quorum",
    description="every commit position a leader sends is held by a quorum (the leader and the followers that "
    "reported it before: AppendPosition in the leader's term, or a canvassed, voted or appended log ending in the "
    "term of the leader's log), unless an earlier term already committed it",
    tables=("events", "messages"),
    sql=f"""
WITH m AS (
  SELECT run_id, member_id, incarnation, seq, msg_type, peer, leadership_term_id, log_leadership_term_id,
         log_position
  FROM messages
  WHERE member_id >= 0 AND log_position IS NOT NULL AND leadership_term_id IS NOT NULL
        AND ((direction = 'send' AND msg_type = 'CommitPosition')
             OR (direction = 'recv' AND msg_type = 'AppendPosition')
             OR (direction = 'recv' AND msg_type IN ('CanvassPosition', 'Vote') AND log_leadership_term_id IS NOT NULL)
             OR (direction = 'send' AND msg_type = 'RequestVote' AND log_leadership_term_id IS NOT NULL))
),
running AS (
  SELECT run_id, member_id, incarnation, seq, msg_type, leadership_term_id, log_position AS pos,
         max(CASE WHEN msg_type = 'RequestVote'
                  THEN leadership_term_id * {_TERM_SCALE} + log_leadership_term_id + 1 END) {_RUNNING} AS candidacy,
         {_REPORTS}
  FROM m
),
sends AS (
  SELECT run_id, member_id, incarnation, pos,
         greatest(leadership_term_id, coalesce(CAST(FLOOR(candidacy / {_TERM_SCALE}) AS BIGINT), -1)) AS term,
         CASE WHEN candidacy IS NULL THEN -2 ELSE candidacy % {_TERM_SCALE} - 1 END AS log_term,
         {", ".join(f"a{k}, c{k}" for k in _MEMBER_IDS)}
  FROM running WHERE msg_type = 'CommitPosition'
),
per_term AS (
  SELECT run_id, term, max(pos) AS top FROM sends GROUP BY run_id, term
),
earlier AS (
  SELECT run_id, term,
         max(top) OVER (PARTITION BY run_id ORDER BY term ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
  FROM per_term
),
size AS (
  SELECT run_id, COUNT(DISTINCT member_id) AS members FROM events WHERE source LIKE 'node-%' GROUP BY run_id
),
counted AS (
  SELECT /*+ BROADCAST(e) */ s.run_id, s.member_id, s.incarnation, s.term, s.pos, coalesce(e.before, 0) AS before,
         min(1 + {_BACKERS}) AS holders
  FROM sends s LEFT JOIN earlier e ON e.run_id = s.run_id AND e.term = s.term
  WHERE s.pos > coalesce(e.before, 0)
  GROUP BY s.run_id, s.member_id, s.incarnation, s.term, s.pos, coalesce(e.before, 0)
)
SELECT c.run_id,
       concat('member ', CAST(c.member_id AS STRING), ' (incarnation ', CAST(c.incarnation AS STRING),
              ') sent commit position ', CAST(c.pos AS STRING), ' in term ', CAST(c.term AS STRING), ' held by ',
              CAST(c.holders AS STRING), ' member(s) (itself included) as their reports showed it; a quorum of ',
              CAST(z.members AS STRING), ' members is ', CAST(CAST(FLOOR(z.members / 2) AS BIGINT) + 1 AS STRING),
              ' (earlier terms committed up to ', CAST(c.before AS STRING), ')') AS detail
FROM counted c JOIN size z ON z.run_id = c.run_id
WHERE c.holders < CAST(FLOOR(z.members / 2) AS BIGINT) + 1
""",
)

# A node's ``snapshot`` event (taken) and ``snapshot_loaded`` event (restored at start) carry a summary of
# the consensus module's state as that snapshot holds it (``Snapshots.module_state``); older traces have none
# and are not judged.
SNAPSHOT_RESTORES_MODULE_STATE = SqlCheck(
    name="snapshot_restores_module_state",
    description="a member restored from a consensus-module snapshot gets back the sessions, timers and pending "
    "service messages the module held where that snapshot was taken",
    tables=("events",),
    sql="""
WITH states AS (
  SELECT run_id, member_id, incarnation, kind, log_position,
         get_json_object(detail, '$.module_state.crc') AS crc,
         concat(get_json_object(detail, '$.module_state.sessions'), ' sessions, ',
                get_json_object(detail, '$.module_state.timers'), ' timers, ',
                get_json_object(detail, '$.module_state.pending_messages'), ' pending service messages (crc ',
                get_json_object(detail, '$.module_state.crc'), ')') AS held
  FROM events
  WHERE kind IN ('snapshot', 'snapshot_loaded') AND source LIKE 'node-%' AND log_position IS NOT NULL
        AND get_json_object(detail, '$.module_state.crc') IS NOT NULL
),
taken AS (
  SELECT run_id, log_position, min(held) AS held, collect_set(crc) AS crcs
  FROM states WHERE kind = 'snapshot' GROUP BY run_id, log_position
)
SELECT l.run_id,
       concat('member ', CAST(l.member_id AS STRING), '/', CAST(l.incarnation AS STRING),
              ' restored the consensus-module snapshot at log position ', CAST(l.log_position AS STRING),
              ' with ', l.held, ', but the module that took it there held ', t.held) AS detail
FROM states l JOIN taken t ON t.run_id = l.run_id AND t.log_position = l.log_position
WHERE l.kind = 'snapshot_loaded' AND NOT array_contains(t.crcs, l.crc)
""",
)

# The sessions a consensus module holds where it takes or restores a snapshot (``module_state``: their count,
# and the sum and sum of squares of their ids) against the committed log's SessionOpen and SessionClose entries
# up to there, which every member's service applies: judged only where the trace's committed log starts at
# position 0. Events without the id sums (older traces) are judged by the count alone.
OPEN_SESSIONS_AGREE = SqlCheck(
    name="open_sessions_agree",
    description="where a member's consensus module takes or restores a snapshot it holds the client sessions "
    "the committed log has opened and not closed up to there (the sessions its service holds): as many, and "
    "the same ids (by their sum and sum of squares)",
    tables=("events", "log"),
    sql="""
WITH snaps AS (
  SELECT run_id, member_id, incarnation, kind, log_position,
         CAST(get_json_object(detail, '$.module_state.sessions') AS BIGINT) AS sessions,
         CAST(get_json_object(detail, '$.module_state.session_id_sum') AS BIGINT) AS id_sum,
         CAST(get_json_object(detail, '$.module_state.session_id_square_sum') AS BIGINT) AS id_square_sum
  FROM events
  WHERE kind IN ('snapshot', 'snapshot_loaded') AND source LIKE 'node-%' AND log_position IS NOT NULL
        AND get_json_object(detail, '$.module_state.sessions') IS NOT NULL
),
bounds AS (
  SELECT run_id, min(log_position - octet_length(entry)) AS first_start, max(log_position) AS end_position
  FROM log GROUP BY run_id
),
closed AS (
  SELECT run_id, event_session_id AS id, min(log_position) AS closed_at
  FROM log WHERE entry_type = 'SessionClose' GROUP BY run_id, event_session_id
),
opened AS (
  SELECT o.run_id, o.event_session_id AS id, o.log_position AS opened_at, c.closed_at
  FROM log o LEFT JOIN closed c ON c.run_id = o.run_id AND c.id = o.event_session_id
  WHERE o.entry_type = 'SessionOpen'
),
in_log AS (
  SELECT /*+ BROADCAST(s) */ s.run_id, s.member_id, s.incarnation, s.kind, s.log_position, s.sessions, s.id_sum,
         s.id_square_sum, count(o.opened_at) AS open_in_log, coalesce(sum(o.id), 0) AS log_id_sum,
         coalesce(sum(o.id * o.id), 0) AS log_id_square_sum,
         array_join(CAST(sort_array(collect_list(o.id)) AS ARRAY<STRING>), ', ') AS log_ids
  FROM snaps s
  LEFT JOIN opened o ON o.run_id = s.run_id AND o.opened_at <= s.log_position
                        AND (o.closed_at IS NULL OR o.closed_at > s.log_position)
  GROUP BY s.run_id, s.member_id, s.incarnation, s.kind, s.log_position, s.sessions, s.id_sum, s.id_square_sum
),
judged AS (
  SELECT i.run_id, i.member_id, i.incarnation, i.kind, i.log_position, i.sessions, i.open_in_log, i.id_sum,
         i.id_square_sum, i.log_id_sum, i.log_id_square_sum, i.log_ids,
         coalesce(i.id_sum <> i.log_id_sum OR i.id_square_sum <> i.log_id_square_sum, false) AS ids_differ
  FROM in_log i JOIN bounds b ON b.run_id = i.run_id
  WHERE b.first_start = 0 AND i.log_position <= b.end_position
)
SELECT j.run_id,
       concat('the consensus module of member ', CAST(j.member_id AS STRING), '/', CAST(j.incarnation AS STRING),
              ' held ', CAST(j.sessions AS STRING), ' client session(s) when it ',
              CASE WHEN j.kind = 'snapshot' THEN 'took' ELSE 'restored' END,
              ' the snapshot at log position ', CAST(j.log_position AS STRING), ', where the committed log has ',
              CAST(j.open_in_log AS STRING), ' open (opened and not closed), as every service holds',
              CASE WHEN j.ids_differ
                   THEN concat('; not the same ids: the log has sessions [', j.log_ids, '] open (id sum ',
                               CAST(j.log_id_sum AS STRING), ', sum of squares ',
                               CAST(j.log_id_square_sum AS STRING), '), the module held ids summing to ',
                               CAST(j.id_sum AS STRING), ' (sum of squares ', CAST(j.id_square_sum AS STRING), ')')
                   ELSE '' END) AS detail
FROM judged j
WHERE j.sessions <> j.open_in_log OR j.ids_differ
""",
)

CHECKS: tuple[SqlCheck, ...] = (
    VOTE_LOG_RECENCY,
    LEADER_HAS_QUORUM_OF_VOTES,
    COMMIT_BACKED_BY_QUORUM,
    ONE_VOTE_PER_TERM,
    VOTE_PROMISE_KEPT,
    ONE_LEADER_PER_TERM,
    TERM_STARTS_WITH_NEW_LEADERSHIP_TERM,
    LEADER_STEPS_DOWN_WITHOUT_QUORUM,
    TIMERS_AND_CLOSES_AGREE,
    SESSIONS_CLOSE_EVERYWHERE,
    TIMERS_FIRE_ONCE,
    CANCELLED_TIMERS_STAY_CANCELLED,
    SNAPSHOTS_AGREE,
    SNAPSHOT_RESTORES_MODULE_STATE,
    OPEN_SESSIONS_AGREE,
    MODULE_STATE_FOLLOWS_COMMITTED_LOG,
    SERVICES_TERMINATE_ONCE,
    CLIENTS_CLOSE_WHEN_CLUSTER_GONE,
)
NAMES: tuple[str, ...] = tuple(c.name for c in CHECKS)


def duckdb_sql(check: SqlCheck) -> str:
    """The check's SQL in DuckDB's dialect."""
    return to_duckdb(check.sql)  # the shared, cached transpile (Spark's join hints dropped)


def with_derived_columns(name: str, table: pa.Table) -> pa.Table:
    """``table`` of trace table ``name`` with the view layer's derived columns it lacks."""
    wanted = [f.name for f in derived_fields(name) if f.name not in table.column_names]
    raw = {n: table.column(n) for n in table.column_names}
    for column, values in derived_columns(name, raw, wanted).items():
        table = table.append_column(column, values)
    return table


def evaluate_duckdb(check: SqlCheck, tables: dict[str, pa.Table], run_id: str) -> list[dict[str, Any]]:
    """The violation rows (``run_id``, ``detail``) of ``check`` over one run's tables (harness/trace.py's
    ``Run.tables``), evaluated by an in-memory DuckDB. The committed log gets the ``run_id`` column the views
    carry."""
    import duckdb

    con = duckdb.connect()
    try:
        for name in check.tables:
            table = with_derived_columns(name, tables[name])
            if "run_id" not in table.column_names:
                table = table.append_column("run_id", pa.array([run_id] * table.num_rows, pa.string()))
            con.register(name, table)
        cursor = con.execute(duckdb_sql(check))
        columns = [d[0] for d in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    finally:
        con.close()
