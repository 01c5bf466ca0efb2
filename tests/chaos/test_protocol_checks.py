"""The protocol-level trace checks (clusterlab.chaos.checks.protocol), judged by DuckDB.

Clean simulator runs pass every check; each check fails on a planted violation: a core bug switched on by a
small monkeypatch where the simulator reaches it cheaply (a leader that never counts its quorum), otherwise the
clean trace with one row changed the way the bug would change it (a YES vote to a staler log, a second vote
after a restart, a timer applied where the log has none, ...)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from clusterlab.chaos.checks import protocol
from clusterlab.chaos.checks.protocol import CHECKS, evaluate_duckdb
from clusterlab.chaos.checks.views import SESSION_EVENTS, event_session_ids
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.verdict import verify_run
from clusterlab.core.codec.consensus import AppendPosition, CanvassPosition, CommitPosition, RequestVote
from clusterlab.harness.invariants import LeaderViews, TimersAndCloses, VoteSafety, fold_recorded_run
from clusterlab.harness.recorder import SCHEMAS, promote
from clusterlab.harness.trace import Run, open_run

from clusterlab.testing.mutants import TIMERS_LEFT_OUT_OF_SNAPSHOT

pytestmark = pytest.mark.sim


def test_a_candidacy_is_a_vote_for_itself_in_its_term() -> None:
    """VoteSafety counts a candidate's RequestVote as its YES vote for itself, in either order with a YES vote
    for another member in the same term; a candidate asking again in its term, or in a later one, is no
    second vote."""
    yes_for_2 = {
        "vote": True,
        "candidate": 2,
        "log_leadership_term_id": 1,
        "log_position": 64,
        "candidate_log_leadership_term_id": 1,
        "candidate_log_position": 64,
    }
    votes = VoteSafety()
    assert votes.observe(1, 0, 5, 64, yes_for_2) is None
    problem = votes.observe_candidacy(1, 1, 5)
    assert problem is not None and problem.startswith("one_vote_per_term: member 1 voted YES in term 5 for member 2")
    votes = VoteSafety()
    assert votes.observe_candidacy(1, 0, 5) is None
    assert votes.observe_candidacy(1, 0, 5) is None  # RequestVote sent again in the same ballot
    assert votes.observe_candidacy(1, 0, 6) is None
    again = votes.observe(1, 0, 5, 64, yes_for_2)
    assert again is not None and again.startswith("one_vote_per_term: member 1 voted YES in term 5 for member 1")


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A seeded simulator run with a snapshot, a leader kill and restart (votes in several terms)."""
    r = run_scenario("snapshot-under-chaos", seed=3, sim=True, directory=tmp_path_factory.mktemp("clean"), clients=1)
    assert r.ok, r.failure_message()
    return open_run(r.trace_dir)


def judge(tables: dict[str, pa.Table], name: str) -> list[str]:
    check = next(c for c in CHECKS if c.name == name)
    run_id = tables["events"].column("run_id")[0].as_py()
    return [r["detail"] for r in evaluate_duckdb(check, tables, run_id)]


def folds_agree(tables: dict[str, pa.Table], name: str, got: list[str]) -> None:
    """The online fold of the same property (clusterlab.harness.invariants), fed the same rows, gives
    the SQL check's verdict."""
    folded = {
        v.check
        for v in fold_recorded_run(
            tables["events"].to_pylist(), tables["applied"].to_pylist(), tables["messages"].to_pylist()
        )
    }
    assert (name in folded) == bool(got), (name, folded, got)


def rows(run: Run, table: str) -> list[dict[str, Any]]:
    return run.tables[table].to_pylist()


def with_rows(run: Run, table: str, new_rows: list[dict[str, Any]]) -> dict[str, pa.Table]:
    tables = dict(run.tables)
    tables[table] = pa.Table.from_pylist(new_rows, schema=run.tables[table].schema)
    return tables


def test_clean_run_passes_every_protocol_check(clean: Run) -> None:
    assert fold_recorded_run(rows(clean, "events"), rows(clean, "applied"), rows(clean, "messages")) == []
    for check in CHECKS:
        assert judge(clean.tables, check.name) == [], check.name
    votes = [e for e in rows(clean, "events") if e["kind"] == "vote"]
    assert any(json.loads(e["detail"])["vote"] for e in votes), "the run has YES votes to judge"
    assert verify_run(clean.directory).status == "PASS"


def test_check_names_are_the_catalogue() -> None:
    assert protocol.NAMES == (
        "vote_log_recency",
        "leader_has_quorum_of_votes",
        "commit_backed_by_quorum",
        "one_vote_per_term",
        "vote_promise_kept",
        "one_leader_per_term",
        "term_starts_with_new_leadership_term",
        "leader_steps_down_without_quorum",
        "timers_and_closes_agree",
        "sessions_close_everywhere",
        "timers_fire_once",
        "cancelled_timers_stay_cancelled",
        "snapshots_agree",
        "snapshot_restores_module_state",
        "open_sessions_agree",
        "module_state_follows_committed_log",
        "services_terminate_once",
        "clients_close_when_cluster_gone",
    )


def _yes_votes(run: Run) -> list[dict[str, Any]]:
    return [e for e in rows(run, "events") if e["kind"] == "vote" and json.loads(e["detail"])["vote"]]


def test_vote_to_a_staler_log_fails(clean: Run) -> None:
    events = rows(clean, "events")
    vote = next(e for e in events if e in _yes_votes(clean) and e["log_position"] > 0)
    detail = json.loads(vote["detail"])
    # The candidate's log one entry behind the voter's: a voter that skipped the recency check.
    detail["candidate_log_position"] = vote["log_position"] - 32
    detail["candidate_log_leadership_term_id"] = detail["log_leadership_term_id"]
    vote["detail"] = json.dumps(detail)
    got = judge(with_rows(clean, "events", events), "vote_log_recency")
    folds_agree(with_rows(clean, "events", events), "vote_log_recency", got)
    assert len(got) == 1 and f"member {vote['member_id']} " in got[0] and "more recent log" in got[0]


def test_a_leader_without_a_quorum_of_votes_fails(clean: Run) -> None:
    events = rows(clean, "events")
    leader = next(e for e in events if e["kind"] == "leader" and e["source"].startswith("node-"))
    term, member = leader["leadership_term_id"], leader["member_id"]
    assert judge(clean.tables, "leader_has_quorum_of_votes") == []

    def for_it(e: dict[str, Any]) -> bool:
        return (
            e["kind"] == "vote" and e["leadership_term_id"] == term and json.loads(e["detail"])["candidate"] == member
        )

    assert any(for_it(e) and json.loads(e["detail"])["vote"] for e in events), "the leader was voted for"
    # The same run as if the leader had counted votes nobody cast for its term (a stale or short ballot).
    got = judge(with_rows(clean, "events", [e for e in events if not for_it(e)]), "leader_has_quorum_of_votes")
    assert got == [
        f"member {member} led term {term} with 1 YES vote(s) for that term (its own included); "
        "a quorum of 3 members is 2"
    ], got


def test_a_commit_no_follower_reported_fails(clean: Run) -> None:
    messages = rows(clean, "messages")
    leader = next(r["member_id"] for r in messages if r["msg_type"] == "CommitPosition" and r["direction"] == "send")
    assert judge(clean.tables, "commit_backed_by_quorum") == []
    # The same run as if that leader had committed without its followers' AppendPositions (on its own append).
    kept = [r for r in messages if not (r["member_id"] == leader and r["msg_type"] == "AppendPosition")]
    got = judge(with_rows(clean, "messages", kept), "commit_backed_by_quorum")
    assert got and all(f"member {leader} " in g and "held by 1 member(s)" in g for g in got), got
    assert "a quorum of 3 members is 2" in got[0]


def _election_commit(canvassed_log_term: int) -> dict[str, pa.Table]:
    """The messages of one election as member 0 recorded them: it stands for term 2 with a log ending in
    term 1 at 4096, member 1 canvasses a log ending in ``canvassed_log_term`` at 4096, and member 0 (now
    leader) sends commit position 4096 before any AppendPosition of term 2 arrives."""
    sent = [
        ("send", 1, RequestVote(log_leadership_term_id=1, log_position=4096, candidate_term_id=2,
                                candidate_member_id=0, protocol_version=0)),
        ("recv", 1, CanvassPosition(log_leadership_term_id=canvassed_log_term, log_position=4096,
                                    leadership_term_id=1, follower_member_id=1, protocol_version=0)),
        ("send", 1, CommitPosition(leadership_term_id=2, log_position=4096, leader_member_id=0)),
    ]  # fmt: skip
    return _member_0_recorded(sent, members=3)


def _member_0_recorded(sent: list[tuple[str, int, Any]], members: int) -> dict[str, pa.Table]:
    """The messages and start events of a run of ``members`` in which member 0 recorded ``sent`` (direction,
    peer, message), in that order."""
    messages = []
    for seq, (direction, peer, msg) in enumerate(sent):
        payload = msg.encode()
        name, term, position = promote(payload)
        messages.append(
            {"run_id": "r", "member_id": 0, "process": "node-0", "incarnation": 0, "seq": seq, "wall_ns": seq,
             "mono_ns": seq, "direction": direction, "channel": "consensus", "peer": peer, "msg_type": name,
             "leadership_term_id": term, "log_position": position, "payload": payload}
        )  # fmt: skip
    starts = [
        {"run_id": "r", "wall_ns": 0, "source": f"node-{m}", "member_id": m, "kind": "start", "detail": "{}"}
        for m in range(members)
    ]
    return {
        "messages": pa.Table.from_pylist(messages, schema=SCHEMAS["messages"]),
        "events": pa.Table.from_pylist(starts, schema=SCHEMAS["events"]),
    }


def test_a_canvassed_log_backs_a_commit_only_when_it_ends_in_the_leaders_log_term() -> None:
    assert judge(_election_commit(canvassed_log_term=1), "commit_backed_by_quorum") == []
    got = judge(_election_commit(canvassed_log_term=0), "commit_backed_by_quorum")
    assert got == [
        "member 0 (incarnation 0) sent commit position 4096 in term 2 held by 1 member(s) (itself included) as "
        "their reports showed it; a quorum of 3 members is 2 (earlier terms committed up to 0)"
    ], got


def _relead_commit(appended_term: int) -> dict[str, pa.Table]:
    """Member 0 of five led term 3 and member 2 reported appending its log up to 4096 in
    ``appended_term``; member 0 then stands for term 6 with its log ending in term 3 at 4096, member 1
    reports 4096 in term 6, and member 0 sends commit position 4096 in term 6."""
    sent = [
        ("recv", 2, AppendPosition(leadership_term_id=appended_term, log_position=4096, follower_member_id=2, flags=0)),
        ("send", 1, RequestVote(log_leadership_term_id=3, log_position=4096, candidate_term_id=6,
                                candidate_member_id=0, protocol_version=0)),
        ("recv", 1, AppendPosition(leadership_term_id=6, log_position=4096, follower_member_id=1, flags=0)),
        ("send", 1, CommitPosition(leadership_term_id=6, log_position=4096, leader_member_id=0)),
    ]  # fmt: skip
    return _member_0_recorded(sent, members=5)


def test_a_follower_that_appended_the_leaders_own_log_term_backs_its_commit() -> None:
    """A leader-elect that led its log's term counts the followers that replicated that term from it (their
    logs hold its bytes); an AppendPosition of an older term than its log's does not count."""
    assert judge(_relead_commit(appended_term=3), "commit_backed_by_quorum") == []
    got = judge(_relead_commit(appended_term=2), "commit_backed_by_quorum")
    assert len(got) == 1 and "held by 2 member(s)" in got[0] and "a quorum of 5 members is 3" in got[0], got


def test_second_vote_in_a_term_after_restart_fails(clean: Run) -> None:
    events = rows(clean, "events")
    vote = _yes_votes(clean)[0]
    detail = json.loads(vote["detail"])
    other = next(m for m in range(3) if m not in (vote["member_id"], detail["candidate"]))
    again = dict(vote, incarnation=vote["incarnation"] + 1, wall_ns=vote["wall_ns"] + 1, seq=10**6)
    again["detail"] = json.dumps(dict(detail, candidate=other))
    got = judge(with_rows(clean, "events", [*events, again]), "one_vote_per_term")
    folds_agree(with_rows(clean, "events", [*events, again]), "one_vote_per_term", got)
    assert len(got) == 1
    assert f"voted YES in term {vote['leadership_term_id']} for members" in got[0]
    assert f"incarnations {vote['incarnation']},{vote['incarnation'] + 1}" in got[0]


def _following(vote: dict[str, Any], term: int, after_ns: int) -> dict[str, Any]:
    """The voter's election entering FOLLOWER_REPLAY for a leader of ``term``, ``after_ns`` after ``vote``."""
    detail = json.dumps({"from": "CANVASS", "to": "FOLLOWER_REPLAY"})
    return dict(vote, kind="election_state", leadership_term_id=term, wall_ns=vote["wall_ns"] + after_ns, detail=detail)


def test_following_an_older_leader_after_a_yes_vote_fails(clean: Run) -> None:
    events = rows(clean, "events")
    vote = next(e for e in _yes_votes(clean) if json.loads(e["detail"])["candidate"] != e["member_id"])
    term, voter = vote["leadership_term_id"], vote["member_id"]
    assert judge(clean.tables, "vote_promise_kept") == []
    # Following the voted term, or an older leader before the vote, keeps the promise.
    kept = [_following(vote, term, 1), _following(vote, term - 1, -1)]
    assert judge(with_rows(clean, "events", [*events, *kept]), "vote_promise_kept") == []
    got = judge(with_rows(clean, "events", [*events, _following(vote, term - 1, 1)]), "vote_promise_kept")
    assert len(got) == 1, got
    assert got[0].startswith(f"member {voter} (incarnation {vote['incarnation']}) voted YES for member ")
    assert f"in term {term}, then followed the leader of term {term - 1} (CANVASS -> FOLLOWER_REPLAY)" in got[0]


def test_a_member_that_voted_for_itself_promised_nothing(clean: Run) -> None:
    events = rows(clean, "events")
    vote = next(e for e in _yes_votes(clean) if json.loads(e["detail"])["candidate"] != e["member_id"])
    own = dict(vote, detail=json.dumps(dict(json.loads(vote["detail"]), candidate=vote["member_id"])))
    older = _following(own, own["leadership_term_id"] - 1, 1)
    kept = [e for e in events if e != vote]
    assert judge(with_rows(clean, "events", [*kept, own, older]), "vote_promise_kept") == []


def test_two_leaders_in_one_members_view_fails(clean: Run) -> None:
    events = rows(clean, "events")
    done = next(e for e in events if e["kind"] == "election_complete")
    leader = json.loads(done["detail"])["leader"]
    wrong = dict(done, detail=json.dumps({"leader": (leader + 1) % 3, "role": "FOLLOWER"}), seq=10**6)
    got = judge(with_rows(clean, "events", [*events, wrong]), "one_leader_per_term")
    folds_agree(with_rows(clean, "events", [*events, wrong]), "one_leader_per_term", got)
    assert len(got) == 1 and f"term {done['leadership_term_id']} has leaders" in got[0]


def test_term_without_its_new_leadership_term_entry_fails(clean: Run) -> None:
    applied = rows(clean, "applied")
    nlt = next(r for r in applied if r["entry_type"] == "NewLeadershipTerm" and r["leadership_term_id"] > 0)
    applied = [r for r in applied if r is not nlt]
    got = judge(with_rows(clean, "applied", applied), "term_starts_with_new_leadership_term")
    assert got and f"began term {nlt['leadership_term_id']} with a " in got[0]
    log = [r for r in rows(clean, "log") if not (r["entry_type"] == "NewLeadershipTerm" and r["leadership_term_id"])]
    got = judge(with_rows(clean, "log", log), "term_starts_with_new_leadership_term")
    assert any(g.startswith("committed log: term ") for g in got)


def test_timer_applied_outside_the_log_fails(clean: Run) -> None:
    applied = rows(clean, "applied")
    member = applied[-1]["member_id"]
    mine = [r for r in applied if r["member_id"] == member and r["entry_type"] == "SessionMessage"]
    local = mine[len(mine) // 2]
    local["entry_type"] = "Timer"  # a follower fired its timer locally, where the others applied the log
    got = judge(with_rows(clean, "applied", applied), "timers_and_closes_agree")
    folds_agree(with_rows(clean, "applied", applied), "timers_and_closes_agree", got)
    assert any(f"ending at {local['log_position']}: " in g and "members disagree" in g for g in got)
    assert any("that is not in the committed log" in g for g in got)


def test_snapshot_at_another_position_fails(clean: Run) -> None:
    events = rows(clean, "events")
    snaps = [e for e in events if e["kind"] == "snapshot" and e["source"].startswith("node-")]
    # One member's snapshot moved (a member that took only that one: a restarted member may take it again).
    snap = next(e for e in snaps if sum(x["member_id"] == e["member_id"] for x in snaps) == 1)
    snap["log_position"] += 64
    got = judge(with_rows(clean, "events", events), "snapshots_agree")
    assert any("took a snapshot at" in g and "no ClusterAction" in g for g in got)
    assert any(f"member {snap['member_id']}/" in g and "took none there" in g for g in got)


@pytest.fixture(scope="module")
def stuck_leader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The planted bug: a leader that never finds its quorum inactive (keeps leading when cut off)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("clusterlab.core.consensus.module.has_active_quorum", lambda *a, **k: True)
        r = run_scenario("leader-isolation", seed=2, sim=True, directory=tmp_path_factory.mktemp("stuck"), clients=1)
    return r.trace_dir


def test_leader_that_keeps_leading_without_quorum_fails(stuck_leader: Path) -> None:
    verdict = verify_run(stuck_leader)
    assert verdict.status == "FAIL"
    got = verdict.violations["leader_steps_down_without_quorum"]
    assert got and "did not step down within 1500 ms" in got[0], got


def test_leader_isolation_steps_down_in_time(tmp_path: Path) -> None:
    r = run_scenario("leader-isolation", seed=2, sim=True, directory=tmp_path, clients=1)
    assert r.ok, r.failure_message()
    run = open_run(r.trace_dir)
    assert any(e["kind"] == "partition" for e in rows(run, "events"))
    assert judge(run.tables, "leader_steps_down_without_quorum") == []


def test_online_folds_catch_the_same_violations(clean: Run) -> None:
    """The online forms (clusterlab.harness.invariants) fed the clean run's events and applied rows stay silent;
    fed the planted rows, they name the same violations as the SQL checks."""
    votes, views, timers = VoteSafety(), LeaderViews(), TimersAndCloses()
    for e in sorted(rows(clean, "events"), key=lambda e: (e["wall_ns"], e["seq"])):
        detail = json.loads(e["detail"] or "{}")
        if e["kind"] == "vote":
            assert (
                votes.observe(e["member_id"], e["incarnation"], e["leadership_term_id"], e["log_position"], detail)
                is None
            )
        elif e["kind"] == "election_complete":
            assert views.observe(e["leadership_term_id"], detail["leader"], e["member_id"]) is None
    for r in rows(clean, "applied"):
        assert (
            timers.observe(r["log_position"], (r["member_id"], r["incarnation"]), r["entry_type"], r["entry_digest"])
            is None
        )

    vote = _yes_votes(clean)[0]
    detail = json.loads(vote["detail"])
    other = next(m for m in range(3) if m not in (vote["member_id"], detail["candidate"]))
    again = votes.observe(
        vote["member_id"], 7, vote["leadership_term_id"], vote["log_position"], dict(detail, candidate=other)
    )
    assert again is not None and again.startswith("one_vote_per_term")
    stale = dict(detail, candidate_log_position=-1, candidate_log_leadership_term_id=-1, log_leadership_term_id=0)
    problem = votes.observe(vote["member_id"], 0, 99, 0, stale)
    assert problem is not None and problem.startswith("vote_log_recency")
    term, (leader, _) = next(iter(views.leader.items()))
    assert (views.observe(term, (leader + 1) % 3, 2) or "").startswith("one_leader_per_term")
    position = next(p for p, first in timers.first.items() if first[0] == "SessionMessage")
    assert (timers.observe(position, (9, 0), "Timer", b"\0" * 16) or "").startswith("timers_and_closes_agree")


@pytest.fixture(scope="module")
def closing(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A seeded simulator run whose silenced clients' sessions time out: SessionClose entries in the log."""
    r = run_scenario("client-silence", seed=1, sim=True, directory=tmp_path_factory.mktemp("closing"))
    assert r.ok, r.failure_message()
    return open_run(r.trace_dir)


def test_a_session_the_module_did_not_close_where_its_service_did_fails(closing: Run) -> None:
    assert judge(closing.tables, "sessions_close_everywhere") == []
    events = rows(closing, "events")
    closes = [e for e in events if e["kind"] == "session_close"]
    applied = {
        (r["member_id"], r["log_position"]) for r in rows(closing, "applied") if r["entry_type"] == "SessionClose"
    }
    assert closes and {(e["member_id"], e["log_position"]) for e in closes} >= applied, (
        "every member's module records its closes"
    )
    kept, lost = closes[0], closes[-1]
    kept["detail"] = json.dumps(dict(json.loads(kept["detail"]), open=True))  # a member that keeps the session
    got = judge(with_rows(closing, "events", [e for e in events if e is not lost]), "sessions_close_everywhere")
    where = f"member {kept['member_id']} applied the SessionClose ending at log position {kept['log_position']}"
    assert any(g.startswith(where) and g.endswith("kept that session open") for g in got), got
    where = f"member {lost['member_id']} applied the SessionClose ending at log position {lost['log_position']}"
    assert any(g.startswith(where) and g.endswith("closed no session there") for g in got), got


def test_a_node_that_does_not_declare_session_close_events_is_not_judged(closing: Run) -> None:
    """A trace recorded before nodes recorded session closes has none: not a violation."""
    events = [
        dict(e, detail=json.dumps({k: v for k, v in json.loads(e["detail"]).items() if k != "session_close_events"}))
        if e["kind"] == "start" and e["source"].startswith("node-")
        else e
        for e in rows(closing, "events")
        if e["kind"] != "session_close"
    ]
    assert judge(with_rows(closing, "events", events), "sessions_close_everywhere") == []


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A seeded simulator leader kill of the counter service, whose timers fire across the failover."""
    r = run_scenario("leader-kill", seed=1, sim=True, directory=tmp_path_factory.mktemp("timed"), service="counter")
    assert r.ok, r.failure_message()
    return open_run(r.trace_dir)


def test_a_timer_still_scheduled_after_its_timer_event_fails(timed: Run) -> None:
    assert judge(timed.tables, "timers_fire_once") == []
    events = rows(timed, "events")
    read = [e for e in events if e["kind"] == "timer_event"]
    assert read, "followers record the TimerEvents they read"
    kept = read[0]
    kept["detail"] = json.dumps(dict(json.loads(kept["detail"]), scheduled=True))  # a follower that kept it
    got = judge(with_rows(timed, "events", events), "timers_fire_once")
    assert got == [
        f"member {kept['member_id']} (incarnation {kept['incarnation']}) read the TimerEvent of timer "
        f"{json.loads(kept['detail'])['correlation_id']} ending at log position {kept['log_position']} and still "
        "has that timer scheduled: a next leader fires it again"
    ], got


@pytest.fixture(scope="module")
def restored(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A seeded simulator full restart of the counter service: a snapshot with its idle timer pending, then
    every member restarts from it."""
    r = run_scenario("full-restart", seed=1, sim=True, directory=tmp_path_factory.mktemp("restored"), service="counter")
    assert r.ok, r.failure_message()
    return open_run(r.trace_dir)


def _module_state(event: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(event["detail"])["module_state"])


def test_a_restore_that_loses_module_state_fails(restored: Run) -> None:
    assert judge(restored.tables, "snapshot_restores_module_state") == []
    events = rows(restored, "events")
    loads = [e for e in events if e["kind"] == "snapshot_loaded"]
    taken = {e["log_position"]: _module_state(e) for e in events if e["kind"] == "snapshot"}
    assert loads and all(e["log_position"] in taken for e in loads), "every member restarts from a snapshot"
    load = loads[0]
    held = taken[load["log_position"]]
    assert _module_state(load) == held and held["timers"] >= 1, "the restore gives back a pending timer"
    lost = dict(held, timers=0, crc="00000000")  # restored without its timers
    load["detail"] = json.dumps(dict(json.loads(load["detail"]), module_state=lost))
    got = judge(with_rows(restored, "events", events), "snapshot_restores_module_state")
    assert got == [
        f"member {load['member_id']}/{load['incarnation']} restored the consensus-module snapshot at log position "
        f"{load['log_position']} with {held['sessions']} sessions, 0 timers, {held['pending_messages']} pending "
        f"service messages (crc 00000000), but the module that took it there held {held['sessions']} sessions, "
        f"{held['timers']} timers, {held['pending_messages']} pending service messages (crc {held['crc']})"
    ], got


def test_timers_left_out_of_the_snapshot_are_caught_black_box(tmp_path: Path) -> None:
    r = run_scenario(
        "full-restart", seed=1, sim=True, directory=tmp_path, service="counter", mutants=[TIMERS_LEFT_OUT_OF_SNAPSHOT]
    )
    assert not r.ok
    assert "snapshot_restores_module_state" in r.failure_message(), r.failure_message()


def test_a_module_holding_a_session_the_log_never_opened_fails(restored: Run) -> None:
    assert judge(restored.tables, "open_sessions_agree") == []
    events = rows(restored, "events")
    taken = next(e for e in events if e["kind"] == "snapshot" and e["source"].startswith("node-"))
    held = _module_state(taken)
    assert held["sessions"] >= 1, "the clients' sessions are open at the snapshot"
    taken["detail"] = json.dumps(
        dict(json.loads(taken["detail"]), module_state=dict(held, sessions=held["sessions"] + 1))
    )
    got = judge(with_rows(restored, "events", events), "open_sessions_agree")
    assert got == [
        f"the consensus module of member {taken['member_id']}/{taken['incarnation']} held {held['sessions'] + 1} "
        f"client session(s) when it took the snapshot at log position {taken['log_position']}, where the committed "
        f"log has {held['sessions']} open (opened and not closed), as every service holds"
    ], got


def _open_ids(run: Run, position: int) -> list[int]:
    """The sessions the committed log has opened and not closed up to ``position`` (the view's ids)."""
    log = run.tables["log"]
    ids = event_session_ids(log.column("entry_type"), log.column("entry")).to_pylist()
    opened: set[int] = set()
    for row, sid in zip(log.to_pylist(), ids, strict=True):
        if row["log_position"] <= position and row["entry_type"] in SESSION_EVENTS:
            assert sid is not None, row["entry_type"]
            (opened.add if row["entry_type"] == "SessionOpen" else opened.discard)(sid)
    return sorted(opened)


def test_a_module_holding_other_sessions_than_the_log_fails(restored: Run) -> None:
    events = rows(restored, "events")
    taken = next(e for e in events if e["kind"] == "snapshot" and e["source"].startswith("node-"))
    held = _module_state(taken)
    ids = _open_ids(restored, taken["log_position"])
    assert ids and (held["session_id_sum"], held["session_id_square_sum"]) == (sum(ids), sum(i * i for i in ids))
    # As many sessions, one of them a session the log has not opened there (the last one's id + 1).
    other = [*ids[:-1], ids[-1] + 1]
    wrong = dict(held, session_id_sum=sum(other), session_id_square_sum=sum(i * i for i in other))
    taken["detail"] = json.dumps(dict(json.loads(taken["detail"]), module_state=wrong))
    got = judge(with_rows(restored, "events", events), "open_sessions_agree")
    assert got == [
        f"the consensus module of member {taken['member_id']}/{taken['incarnation']} held {len(ids)} client "
        f"session(s) when it took the snapshot at log position {taken['log_position']}, where the committed log "
        f"has {len(ids)} open (opened and not closed), as every service holds; not the same ids: the log has "
        f"sessions [{', '.join(map(str, ids))}] open (id sum {sum(ids)}, sum of squares {sum(i * i for i in ids)}), "
        f"the module held ids summing to {sum(other)} (sum of squares {sum(i * i for i in other)})"
    ], got
    # An older trace's event, without the id sums, is judged by the count alone.
    older = {k: v for k, v in wrong.items() if k not in ("session_id_sum", "session_id_square_sum")}
    taken["detail"] = json.dumps(dict(json.loads(taken["detail"]), module_state=older))
    assert judge(with_rows(restored, "events", events), "open_sessions_agree") == []
