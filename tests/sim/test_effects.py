"""The effects seam (clusterlab.core.consensus.effects): a member stepped by hand returns, for each
input, what it sent to members and to clients, the events it reported, what it changed on storage
(in the order it did all of it) and when it next needs a duty cycle, as one value; nothing leaves
through a callback the caller has to capture."""

from __future__ import annotations

import errno
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clusterlab.core.archive.storage import MemoryStorage, ObservedStorage, StorageChange
from clusterlab.core.codec.consensus import AppendPosition, CanvassPosition, RequestVote, Vote
from clusterlab.core.codec.enums import BooleanType, EventCode
from clusterlab.core.codec.session import SessionConnectRequest, SessionEvent
from clusterlab.core.consensus.context import (
    CLIENT_PROTOCOL_VERSION,
    NULL_VALUE,
    PROTOCOL_VERSION,
    Channel,
    ClusterMember,
    ConsensusModuleContext,
    ElectionState,
    EventSink,
    Outbox,
    Timeouts,
)
from clusterlab.core.consensus.effects import Effects, EgressSend, Event, MemberSend, Received, SteppedModule

from clusterlab.testing.faulty_storage import FaultyStorage
from clusterlab.testing.mutants import ACK_BEFORE_APPEND, rules_for
from tests.sim.probe import Probe, session_entries

T = Timeouts.fast()
PEERS = (1, 2)


def _member(tmp_path: Path) -> SteppedModule:
    """Member 0 of a fresh three-member cluster, in memory, not yet started."""

    def context(outbox: Outbox, events: EventSink) -> ConsensusModuleContext:
        return ConsensusModuleContext(
            member_id=0,
            members=[ClusterMember(i) for i in range(3)],
            cluster_dir=tmp_path,
            storage=MemoryStorage(),
            outbox=outbox,
            rng=random.Random("effects"),
            timeouts=T,
            service_count=0,
            events=events,
            check_invariants=True,
        )

    return SteppedModule(context)


def _canvass(member_id: int) -> CanvassPosition:
    """What a fresh member canvasses: an empty log, no term."""
    return CanvassPosition(
        log_leadership_term_id=NULL_VALUE,
        log_position=0,
        leadership_term_id=NULL_VALUE,
        follower_member_id=member_id,
        protocol_version=PROTOCOL_VERSION,
    )


def _request_vote(candidate_term_id: int, candidate_member_id: int) -> RequestVote:
    """A candidate's request for a fresh member's vote: an empty log, no term."""
    return RequestVote(
        log_leadership_term_id=NULL_VALUE,
        log_position=0,
        candidate_term_id=candidate_term_id,
        candidate_member_id=candidate_member_id,
        protocol_version=PROTOCOL_VERSION,
    )


def _states(effects: Effects) -> list[tuple[str | None, str]]:
    return [(e.detail["from"], e.detail["to"]) for e in effects.events if e.kind == "election_state"]


def _canvassing(tmp_path: Path) -> tuple[SteppedModule, Effects]:
    """Member 0 started and in CANVASS, with the effects of its first canvass."""
    member = _member(tmp_path)
    member.start(0)
    member.tick(0)
    return member, member.tick(0)


def _run_until(member: SteppedModule, effects: Effects, end_ns: int, stop: type) -> tuple[int, Effects]:
    """Duty cycles at each deadline the effects name, until one sends a ``stop`` (or ``end_ns`` passes)."""
    now = 0
    while now <= end_ns:
        now = max(now, effects.next_deadline_ns)
        effects = member.tick(now)
        if any(isinstance(s.message, stop) for s in effects.sends):
            return now, effects
    raise AssertionError(f"no {stop.__name__} by {end_ns}")


def test_start_reports_the_startup_election_and_asks_for_a_duty_cycle_now(tmp_path: Path) -> None:
    member = _member(tmp_path)

    started = member.start(0)

    assert [e.kind for e in started.events] == ["start", "election_start", "election_state"]
    assert started.events[1] == Event(
        "election_start", 0, NULL_VALUE, 0, {"reason": "node startup", "election_count": 1}
    )
    assert _states(started) == [(None, "INIT")]
    assert (started.sends, started.egress, started.next_deadline_ns) == ((), (), 0)

    entered = member.tick(0)
    assert _states(entered) == [("INIT", "CANVASS")]
    assert entered.sends == () and entered.next_deadline_ns == 0


def test_canvass_goes_to_each_peer_as_values_and_a_second_step_sends_nothing(tmp_path: Path) -> None:
    member, canvass = _canvassing(tmp_path)

    assert canvass.sends == tuple(MemberSend(p, Channel.CONSENSUS, _canvass(0)) for p in PEERS)
    assert canvass.events == () and canvass.egress == ()
    assert canvass.work_count > 0
    assert 0 < canvass.next_deadline_ns <= T.election_status_interval_ns

    again = member.tick(0)
    assert again.is_empty and again.work_count == 0
    assert again.next_deadline_ns == canvass.next_deadline_ns
    assert member.step(0).is_empty  # no input: a duty cycle alone


def test_canvass_is_sent_again_each_status_interval(tmp_path: Path) -> None:
    member, canvass = _canvassing(tmp_path)

    at, resent = _run_until(member, canvass, T.election_status_interval_ns, CanvassPosition)

    assert at == T.election_status_interval_ns
    assert resent.sends == canvass.sends


def test_startup_canvass_timeout_nominates_and_the_ballot_requests_votes_from_each_peer(tmp_path: Path) -> None:
    """One peer canvasses (a quorum, not everyone): the member waits out the startup canvass
    timeout, nominates itself, and after the back-off asks every peer for its vote."""
    member, _ = _canvassing(tmp_path)
    heard = member.receive(0, Received.of(1, _canvass(1)))
    assert heard.is_empty

    at, ballot = _run_until(member, heard, T.startup_canvass_timeout_ns + T.election_timeout_ns, RequestVote)

    assert T.startup_canvass_timeout_ns <= at <= T.startup_canvass_timeout_ns + T.election_timeout_ns // 2
    request = _request_vote(candidate_term_id=0, candidate_member_id=0)
    assert ballot.sends == tuple(MemberSend(p, Channel.CONSENSUS, request) for p in PEERS)
    assert member.module.election_state == ElectionState.CANDIDATE_BALLOT
    assert at < ballot.next_deadline_ns


def test_a_request_vote_is_answered_by_a_vote_send_and_a_vote_event(tmp_path: Path) -> None:
    member, _ = _canvassing(tmp_path)
    request = _request_vote(candidate_term_id=5, candidate_member_id=1)

    answered = member.receive(5, Received.of(1, request))

    vote = Vote(
        candidate_term_id=5,
        log_leadership_term_id=NULL_VALUE,
        log_position=0,
        candidate_member_id=1,
        follower_member_id=0,
        vote=BooleanType.TRUE,
    )
    assert answered.sends == (MemberSend(1, Channel.CONSENSUS, vote),)
    [voted] = [e for e in answered.events if e.kind == "vote"]
    assert (voted.leadership_term_id, voted.detail["candidate"], voted.detail["vote"]) == (5, 1, True)
    assert _states(answered) == [("CANVASS", "FOLLOWER_BALLOT")]


def _connect(correlation_id: int) -> SessionConnectRequest:
    return SessionConnectRequest(
        correlation_id=correlation_id,
        response_stream_id=102,
        version=CLIENT_PROTOCOL_VERSION,
        response_channel="client-9",
        encoded_credentials=b"",
    )


def _session_opened(effects: Effects, correlation_id: int, term: int) -> None:
    [egress] = effects.egress
    assert isinstance(egress, EgressSend) and egress.response_channel == "client-9"
    assert isinstance(egress.message, SessionEvent)
    assert (egress.message.correlation_id, egress.message.code) == (correlation_id, EventCode.OK)
    assert (egress.message.leadership_term_id, egress.message.leader_member_id) == (term, 0)


def test_a_leader_answers_a_session_connect_on_egress(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader()

    opened = probe.stepped.step(probe.now_ns, Received.of(NULL_VALUE, _connect(5), Channel.INGRESS))

    _session_opened(opened, 5, term)
    assert opened.work_count > 0


def test_an_ingress_batch_is_taken_and_the_next_duty_cycle_answers(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    term = probe.to_leader()

    taken = probe.stepped.receive_ingress(probe.now_ns, [_connect(6).encode()])

    assert taken.is_empty  # pending: the leader opens sessions in its duty cycle, due at once
    assert taken.next_deadline_ns == probe.now_ns
    _session_opened(probe.stepped.tick(probe.now_ns), 6, term)


def test_effects_of_calls_on_the_module_are_drained(tmp_path: Path) -> None:
    """An offer on the leader's module sends nothing itself; the drain names the work now due, and
    the next duty cycle sends the new log to each follower."""
    probe = Probe(tmp_path)
    probe.to_leader()
    now = probe.now_ns
    assert probe.stepped.drain().is_empty

    end = probe.cm.offer(b"entry", now)

    due = probe.stepped.drain()
    assert (due.sends, due.egress, due.events) == ((), (), ()) and due.next_deadline_ns == now
    [appended] = due.ordered  # the leader appends to its own log at once
    assert isinstance(appended, StorageChange) and appended.op == "write"
    assert appended.path.startswith("archive/log/") and appended.offset + appended.length == end
    sent = probe.stepped.tick(now).sends
    assert {s.member_id for s in sent if s.channel == Channel.LOG} == set(PEERS)
    assert end > 0


def _index(effects: Effects, wanted: type, where: Callable[[Any], bool]) -> int:
    """Where in ``effects.ordered`` the first effect of type ``wanted`` for which ``where`` holds is."""
    return next(i for i, e in enumerate(effects.ordered) if isinstance(e, wanted) and where(e))


def test_a_vote_is_on_storage_before_it_is_sent(tmp_path: Path) -> None:
    """Aeron's Election.onRequestVote: the candidate term id is in the node-state file before the
    Vote that grants it leaves; the step's effects say so in their order."""
    member, _ = _canvassing(tmp_path)
    request = _request_vote(candidate_term_id=3, candidate_member_id=2)

    answered = member.receive(5, Received.of(2, request))

    persisted = _index(answered, StorageChange, lambda c: c.op == "replace" and c.path == "node-state.dat")
    sent = _index(answered, MemberSend, lambda s: isinstance(s.message, Vote))
    assert persisted < sent
    assert answered.storage == (answered.ordered[persisted],)


def test_a_follower_appends_a_log_block_before_it_reports_the_append_position(tmp_path: Path) -> None:
    probe = Probe(tmp_path)
    probe.to_follower(leader=1, leadership_term_id=0)
    frames = session_entries(0, 0, [b"a" * 20, b"b" * 20])
    end = sum(len(f) for f in frames)

    block = Received.of(1, probe.log_block(1, 0, 0, b"".join(frames)), Channel.LOG)
    appended = probe.stepped.step(probe.now_ns, block)

    [write] = [c for c in appended.storage if c.op == "write" and c.path.startswith("archive/log/")]
    assert (write.offset, write.length) == (0, end)
    reported = _index(appended, MemberSend, lambda s: isinstance(s.message, AppendPosition))
    assert appended.ordered.index(write) < reported
    assert appended.ordered[reported].message.log_position == end


def test_observed_storage_reports_each_change_once_made_and_not_a_failed_one() -> None:
    changes: list[StorageChange] = []
    faulty = FaultyStorage(MemoryStorage())
    storage = ObservedStorage(faulty, changes.append)

    storage.make_dirs("d")
    storage.make_dirs("d")  # already there: nothing changed
    f = storage.open("d/f")
    f.write(0, b"abc")
    f.sync()
    f.truncate(1)
    storage.replace("d/g", b"xy", sync=True)
    storage.remove("d/missing", missing_ok=True)  # nothing there: nothing changed
    storage.remove("d/g")
    faulty.fail_writes(errno.ENOSPC, "d/")
    with pytest.raises(OSError):
        f.write(1, b"z")

    assert changes == [
        StorageChange("make_dirs", "d"),
        StorageChange("create", "d/f"),
        StorageChange("write", "d/f", 0, 3),
        StorageChange("sync", "d/f", synced=True),
        StorageChange("truncate", "d/f", length=1),
        StorageChange("replace", "d/g", length=2, synced=True),
        StorageChange("remove", "d/g"),
    ]
    assert storage.read_file("d/f") == b"a"


def test_the_probe_refuses_an_append_position_beyond_what_storage_holds(tmp_path: Path) -> None:
    """Every probe step is held to it through its storage effects: a follower that acknowledges a
    block on arrival and appends it only when the next arrives (planted ``ack-before-append``) fails
    the probe at its first early acknowledgement; the protocol's follower passes the same inputs."""
    frames = session_entries(0, 0, [b"a" * 20])
    block = Probe.log_block(1, 0, 0, frames[0])

    honest = Probe(tmp_path / "honest")
    honest.to_follower(leader=1, leadership_term_id=0)
    honest.deliver(1, block, channel=Channel.LOG)
    honest.settle()
    assert honest.sent(AppendPosition, dst=1)[-1].log_position == len(frames[0])

    planted = Probe(tmp_path / "planted", rules=rules_for([ACK_BEFORE_APPEND]))
    planted.to_follower(leader=1, leadership_term_id=0)
    with pytest.raises(
        AssertionError, match=f"AppendPosition reports {len(frames[0])} but the storage holds the log to 0"
    ):
        planted.deliver(1, block, channel=Channel.LOG)
        planted.settle()
