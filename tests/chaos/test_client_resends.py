"""Resending simulator clients (the ``client-resends`` scenario): replies are lost, then the leader is
killed, and clients resend each unanswered request with the same id. The kv store applies each once,
so the run passes; a store that lost its deduplication (planted ``resend-applied-twice``) applies the
resends again and the history's linearizability check fails, black-box."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.schedule import loses_replies, random_schedule
from clusterlab.harness.local import tag_client
from clusterlab.harness.trace import open_run

from clusterlab.testing.mutants import RESEND_APPLIED_TWICE

pytestmark = [pytest.mark.chaos, pytest.mark.sim]


def resent_requests(trace_dir: Path) -> int:
    """Client requests sent more than once (the same bytes: same client, same request id)."""
    rows = open_run(trace_dir).tables["messages"].to_pylist()
    sent = Counter(
        r["payload"]
        for r in rows
        if r["process"].startswith("client") and r["direction"] == "send" and r["channel"] == "ingress"
    )
    return sum(1 for n in sent.values() if n > 1)


def test_resent_requests_are_applied_once(tmp_path: Path) -> None:
    r = run_scenario("client-resends", seed=1, sim=True, directory=tmp_path)
    assert r.ok, r.failure_message()
    assert resent_requests(r.trace_dir) >= 3  # each of the 3 clients resent the request it had out
    assert r.unknown == 0  # every op resent until answered: no unknown outcomes


def test_a_store_that_applies_a_resend_again_is_caught_by_linearizability(tmp_path: Path) -> None:
    r = run_scenario("client-resends", seed=1, sim=True, directory=tmp_path, mutants=[RESEND_APPLIED_TWICE])
    assert not r.ok
    assert "is not linearizable" in r.failure_message().splitlines()[0]


def test_only_a_json_object_is_tagged_with_the_client() -> None:
    assert tag_client(b'{"id":1,"op":"get","key":"k"}', 7) == b'{"client":7,"id":1,"key":"k","op":"get"}'
    assert tag_client(b'{"client":3,"id":1}', 7) == b'{"client":3,"id":1}'  # already tagged: as it is
    assert tag_client(b"\x00binary", 7) == b"\x00binary"
    assert tag_client(b"[1,2]", 7) == b"[1,2]"


def test_random_simulator_schedules_lose_replies_before_a_leader_kill_for_some_seeds() -> None:
    schedules = [random_schedule(seed, 10.0, sim=True) for seed in range(1, 201)]
    losing = [s for s in schedules if loses_replies(s)]
    assert 0.08 * len(schedules) <= len(losing) <= 0.25 * len(schedules)
    for s in losing:
        steps = s.describe()
        at = next(i for i, d in enumerate(steps) if d.startswith("lost-replies"))
        assert steps[at + 2].startswith("kill(who=leader"), steps  # the leader change after the lost replies
    assert not any(loses_replies(random_schedule(seed, 10.0, sim=False)) for seed in range(1, 201))


def test_a_random_run_that_loses_replies_resends_and_applies_each_once(tmp_path: Path) -> None:
    seed = next(s for s in range(1, 50) if loses_replies(random_schedule(s, 10.0, sim=True)))
    r = run_scenario("random", seed=seed, sim=True, directory=tmp_path)
    assert r.ok, r.failure_message()
    assert r.client_resends and resent_requests(r.trace_dir) >= 1


def test_a_request_resent_through_a_replacement_client_is_the_same_request(tmp_path: Path) -> None:
    """Seed 111's schedule loses replies, then hangs a client: its unanswered request is resent by the
    client that replaces it, tagged as its first sender's (else the store applies it a second time)."""
    r = run_scenario("random", seed=111, sim=True, directory=tmp_path)
    assert r.ok, r.failure_message()
    ops = open_run(r.trace_dir).tables["ops"].to_pylist()
    invoked_by = {o["op_id"]: o["client_id"] for o in ops if o["kind"] == "invoke"}
    moved = [o for o in ops if o["kind"] == "ok" and invoked_by.get(o["op_id"]) not in (None, o["client_id"])]
    assert moved, "some request was answered to the client that replaced its sender"


def test_a_resending_client_whose_session_closed_unheard_reconnects(tmp_path: Path) -> None:
    """Seed 131's schedule (5 members, timers) loses replies just as the client's ``close`` op closes its
    session: the SessionEvent saying so is lost, so the session never answers again. The client of a run
    that resends reconnects after two unanswered requests in a row, and the run makes progress."""
    r = run_scenario("random", seed=131, members=5, sim=True, directory=tmp_path, service="timers")
    assert r.ok, r.failure_message()
    assert r.client_resends
