"""Duplicated ingress (the ``duplicate-ingress`` nemesis and scenario): every message a simulator client
sends to a member arrives twice, the copy 1-20 ms later, while the leader is killed, so duplicated
requests and the clients' resends meet a new leader. The kv store deduplicates (client tag + request
id) and the run passes; a store that lost its deduplication (planted ``resend-applied-twice``) applies
the copies again and is caught black-box by durability and linearizability."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest
from clusterlab.chaos.runner import run_scenario
from clusterlab.chaos.sweep import SweepConfig, check_sweep
from clusterlab.core.consensus.context import MS, Channel
from clusterlab.harness.simnet import SimNetwork
from clusterlab.harness.trace import open_run

from clusterlab.cli import main
from clusterlab.testing.mutants import RESEND_APPLIED_TWICE

pytestmark = [pytest.mark.chaos, pytest.mark.sim]


def duplicated_requests_at_new_leader(trace_dir: Path) -> int:
    """Session messages delivered twice (two recv rows of one message) to a member the leader fault spared."""
    run = open_run(trace_dir)
    events = run.events.to_pylist()
    kinds = [e["kind"] for e in events]
    assert "ingress_duplicated" in kinds and "ingress_restored" in kinds, kinds
    applied = next(json.loads(e["detail"]) for e in events if e["kind"] == "chaos_apply")
    recv = [
        r
        for r in run.tables["messages"].to_pylist()
        if r["channel"] == "ingress" and r["direction"] == "recv" and r["msg_type"] == "SessionMessageHeader"
    ]
    copies = Counter(r["msg_id"] for r in recv)
    return sum(1 for r in recv if copies[r["msg_id"]] > 1 and r["member_id"] not in applied["victims"])


@pytest.mark.parametrize(("members", "seed"), [(3, 1), (3, 2), (5, 1)])
def test_duplicated_requests_are_applied_once(tmp_path: Path, members: int, seed: int) -> None:
    r = run_scenario("duplicate-ingress", seed=seed, members=members, sim=True, directory=tmp_path)
    assert r.ok, r.failure_message()
    assert r.client_resends and r.elections_s
    assert duplicated_requests_at_new_leader(r.trace_dir) > 10


@pytest.mark.parametrize(("members", "seed"), [(3, 1), (5, 1)])
def test_a_store_that_applies_a_copy_again_is_caught(tmp_path: Path, members: int, seed: int) -> None:
    r = run_scenario(
        "duplicate-ingress", seed=seed, members=members, sim=True, directory=tmp_path, mutants=[RESEND_APPLIED_TWICE]
    )
    assert not r.ok
    assert r.verdict is not None and {"durability", "linearizability"} <= set(r.verdict.failed()), r.failure_message()


def test_a_service_that_does_not_deduplicate_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    refused = r"duplicate-ingress delivers requests twice: it needs a service that deduplicates them .* not 'counter'"
    with pytest.raises(ValueError, match=refused):
        run_scenario("duplicate-ingress", sim=True, service="counter", directory=tmp_path)
    assert not any(tmp_path.iterdir())  # refused before the run
    for service in ("counter", "kv,counter"):  # a sweep, of one service or a mix
        with pytest.raises(ValueError, match=refused):
            check_sweep(SweepConfig("duplicate-ingress", (1,), service=service))
    assert main(["run", "duplicate-ingress", "--sim", "--service", "counter", "--no-spark"]) == 2
    err = capsys.readouterr().err
    assert re.search(refused, err) and len(err.strip().splitlines()) == 1, err


def test_an_explicit_schedule_that_duplicates_ingress_tags_requests_and_checks_the_service(tmp_path: Path) -> None:
    steps = [{"quiet": 1.0}, {"nemesis": "duplicate-ingress", "seconds": 2.0, "then": "isolate-leader"}, {"quiet": 1.0}]
    r = run_scenario("random", seed=3, sim=True, schedule=steps, directory=tmp_path / "kv")
    assert r.ok, r.failure_message()
    assert r.client_resends and duplicated_requests_at_new_leader(r.trace_dir) > 0
    with pytest.raises(ValueError, match="scenario random delivers requests twice"):
        run_scenario("random", seed=3, sim=True, schedule=steps, service="counter", directory=tmp_path / "counter")


def test_real_processes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duplicate-ingress runs in the simulator only; add --sim"):
        run_scenario("duplicate-ingress", directory=tmp_path)


def _sends(net: SimNetwork) -> list[tuple[int, int, bool]]:
    net.send(0, -1, 0, Channel.INGRESS, b"a")
    net.send(0, 0, -1, Channel.EGRESS, b"b")  # the other direction
    net.send(MS, -1, 1, Channel.INGRESS, b"c")  # another member
    return [(m.dst, m.deliver_ns, m.duplicate) for m in net.in_flight()]


def test_a_duplicated_link_delivers_each_message_again_a_little_later() -> None:
    net = SimNetwork(random.Random(7))
    net.duplicate_link(-1, 0)
    _sends(net)
    original, copy = (m for m in net.in_flight() if m.dst == 0)
    assert copy.duplicate and copy.seq == original.seq + 1  # the recorder links a copy to its original so
    assert MS <= copy.deliver_ns - original.deliver_ns <= 20 * MS
    assert len(net.in_flight()) == 4 and net.stats.duplicated == Counter({Channel.INGRESS: 1})


def test_a_network_without_duplicated_links_draws_as_before() -> None:
    plain, restored = SimNetwork(random.Random(7)), SimNetwork(random.Random(7))
    restored.duplicate_link(-1, 0)
    restored.duplicate_link(-1, 0, None)
    assert _sends(plain) == _sends(restored)
    assert plain._rng.getstate() == restored._rng.getstate()
