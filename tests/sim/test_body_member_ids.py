"""A member id in a message body is bound to the message's proven source (core/consensus/senders.py).

The runtime proves a message's source (the connection's routing id or CURVE key); the consensus module
acts on the member named in the body. Here one real ConsensusModule (tests/sim/probe.py) is handed every
message whose body names its sender, with every kind of body/source mismatch: each is dropped, counted
(``body_member_mismatch_count``, an ignore reason, a ``body_member_mismatch`` event) and leaves the
module exactly as it was; the same message naming its real sender reaches its handler. Then the forged-ack
attack in the simulator: a forger that took member 2's identity while it is down acknowledges, in member
1's name, writes a leader cut off from member 1 holds alone. The leader must not commit them; with the
check switched off (rules whose ``rejects_body_member_id`` says no, as a planted bug would) it does, and they are lost
at the next failover."""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clusterlab.core.archive.layout import LOG_RECORDING_ID
from clusterlab.core.codec.consensus import (
    AppendPosition,
    CanvassPosition,
    CatchupPosition,
    CommitPosition,
    NewLeadershipTerm,
    RequestVote,
    TerminationAck,
    Vote,
)
from clusterlab.core.codec.enums import BooleanType, ReplayPurpose
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.selfcheck import sample
from clusterlab.core.codec.transport import LogBlock, LogEndOfStream, ReplayRequest
from clusterlab.core.consensus.context import (
    APP_VERSION,
    MS,
    NULL_POSITION,
    PROTOCOL_VERSION,
    SECOND,
    Channel,
    Role,
)
from clusterlab.core.consensus.module import ConsensusModule
from clusterlab.core.consensus.rules import PROTOCOL_RULES, ConsensusRules
from clusterlab.core.consensus.senders import ADDRESSEE_FIELD, BODY_MEMBER_MISMATCH, SENDER_FIELD, body_sender
from clusterlab.harness.invariants import SafetyViolation
from clusterlab.harness.sim import SimCluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.conftest import SimKit
from tests.sim.probe import Probe, session_entries

pytestmark = pytest.mark.sim

ME = 0  # the member under test; its peers are 1 and 2
STATES = ("leader", "follower", "canvass", "candidate")
# Channels each message travels on (every member channel reaches the same dispatcher).
CHANNEL = {LogBlock: Channel.LOG, ReplayRequest: Channel.ARCHIVE}
PROBE_EXAMPLES = 60  # per (message type, member state)


# ------------------------------------------------------------------------------ the module as it stands
_SIMPLE = (int, str, bool, float, type(None), enum.Enum)


def _simple_attributes(obj: Any, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Every plain-valued attribute of ``obj`` (ints, enums, strings, sets of them), its state."""
    out: dict[str, Any] = {}
    for name in dir(obj):
        if name.startswith("__") or name in skip:
            continue
        try:
            value = getattr(obj, name)
        except Exception:  # a property that needs state the object lacks now
            continue
        if isinstance(value, _SIMPLE):
            out[name] = value
        elif isinstance(value, (set, frozenset)):
            out[name] = frozenset(value)
    return out


def module_state(probe: Probe) -> dict[str, Any]:
    """Everything a dropped message must leave as it was: the shared state, each member's view, the
    election, the subsystems, the log, what was sent, the events and the vote on disk."""
    cm = probe.cm
    return {
        "shared": _simple_attributes(cm.s, frozenset({"body_member_mismatch_count"})),
        "members": [repr(s) for s in cm.s.statuses],
        "election": None if cm.election is None else _simple_attributes(cm.election),
        "subsystems": [
            _simple_attributes(part)
            for part in (cm.term_replication, cm.catchup, cm.log_replication, cm.termination, cm.log_adapter)
        ],
        "log": (cm.archive.stop_position, cm.archive.read(0, cm.archive.stop_position)),
        "sent": len(probe.outbox.sent),
        "events": [e for e in probe.events if e["kind"] != BODY_MEMBER_MISMATCH],
        "vote_on_disk": probe.candidate_term_on_disk(),
    }


class _TrustsBodyMemberIds(ConsensusRules):
    """The protocol's rules but for the check under test: a body's member id is believed."""

    def rejects_body_member_id(self) -> bool:
        return False


def _set_check(module: ConsensusModule, check_on: bool) -> None:
    """The module's rules: the protocol's (the check on) or ones that believe a body's member id."""
    module.s.rules = PROTOCOL_RULES if check_on else _TrustsBodyMemberIds()


def _probe_in(state: str, directory: Path) -> Probe:
    probe = Probe(directory, member_id=ME)
    if state == "leader":
        probe.to_leader()
        for i in range(3):
            probe.cm.offer(f"uncommitted-{i}".encode(), probe.now_ns)  # a log nobody acknowledged yet
        probe.settle()
    elif state == "follower":
        probe.to_follower(leader=1)
    elif state == "canvass":
        probe.to_canvass()
    else:
        probe.to_candidate_ballot()
    return probe


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Probe]]:
    """One member per state, shared by the examples: a dropped message leaves it as it was, which each
    example checks, so the next example finds the same member."""
    made = {state: _probe_in(state, tmp_path_factory.mktemp(state)) for state in STATES}
    yield made
    for probe in made.values():
        probe.cm.close()


# ------------------------------------------------------------------------------ messages to send
def _base_type(hint: Any) -> Any:
    return typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint


# The range of each fixed-width integer format of the codec (Message._FIXED).
_INT_RANGE = {"q": (-(1 << 63), (1 << 63) - 1), "i": (-(1 << 31), (1 << 31) - 1), "B": (0, 0xFF), "H": (0, 0xFFFF)}


def _field_values(probe: Probe, cls: type[Message], name: str, hint: Any) -> st.SearchStrategy[Any]:
    """Values a field takes: near the member's own term and positions (where a handler acts), and any
    other its wire format holds."""
    values = _any_field_value(probe, name, hint)
    fmt = dict(cls._FIXED).get(name)
    if fmt is None or not isinstance(_base_type(hint), type) or issubclass(_base_type(hint), enum.Enum):
        return values
    lo, hi = _INT_RANGE[fmt]
    return values.filter(lambda v: lo <= v <= hi) | st.integers(lo, hi)


def _any_field_value(probe: Probe, name: str, hint: Any) -> st.SearchStrategy[Any]:
    tp = _base_type(hint)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if tp is bytes:
        return st.binary(max_size=64)
    if tp is str:
        return st.sampled_from(["", "sim-member:1/catchup"])
    term = max(probe.cm.leadership_term_id, 0)
    if "term" in name:
        return st.sampled_from([-1, term - 1, term, term + 1, term + 7]) | st.integers(-1, 1 << 20)
    if "position" in name:
        append, commit = probe.cm.append_position, probe.cm.commit_position
        return st.sampled_from([0, commit, append, 1 << 40, NULL_POSITION]) | st.integers(0, 1 << 20)
    if name == "protocol_version":
        return st.just(PROTOCOL_VERSION)
    if name == "app_version":
        return st.just(APP_VERSION)
    if name == "recording_id":
        return st.just(LOG_RECORDING_ID)
    return st.integers(-1, 1 << 16)


@st.composite
def _message(draw: st.DrawFn, probe: Probe, cls: type[Message], body: int) -> Message:
    """A ``cls`` whose sender field is ``body``, every other field drawn."""
    hints = typing.get_type_hints(cls, include_extras=True)
    sender_field = SENDER_FIELD[cls]
    values = {
        f.name: draw(_field_values(probe, cls, f.name, hints[f.name]))
        for f in dataclasses.fields(cls)
        if f.name != sender_field
    }
    addressee = ADDRESSEE_FIELD.get(cls)
    if addressee is not None:  # mostly this member, as an honest sender writes it
        values[addressee] = draw(st.sampled_from([ME, ME, 1, 2, 9]))
    return dataclasses.replace(sample(cls), **values, **{sender_field: body})


MEMBER_IDS = st.integers(-1, 4) | st.sampled_from([-(1 << 31), (1 << 31) - 1])


def _deliver(probe: Probe, src: int, msg: Message) -> None:
    probe.deliver(src, msg, channel=CHANNEL.get(type(msg), Channel.CONSENSUS))


def _mismatches(probe: Probe) -> list[dict[str, Any]]:
    return [e["detail"] for e in probe.events if e["kind"] == BODY_MEMBER_MISMATCH]


# ------------------------------------------------------------------------------ the table itself
def test_every_member_id_field_of_every_member_message_is_classified() -> None:
    """Each *member_id field of a member-to-member message names the sender (bound at dispatch) or the
    member the message is for (its handler checks it is this member); none is left unexamined."""
    from clusterlab.core.codec.consensus import MESSAGES
    from clusterlab.core.codec.transport import ArchiveError, ReplayBlock

    member_messages = [*MESSAGES, LogBlock, LogEndOfStream, ReplayRequest, ReplayBlock, ArchiveError]
    for cls in member_messages:
        id_fields = {f.name for f in dataclasses.fields(cls) if f.name.endswith("member_id")}
        named = {SENDER_FIELD.get(cls), ADDRESSEE_FIELD.get(cls)} - {None}
        assert id_fields == named, f"{cls.__name__}: member fields {id_fields}, classified {named}"
    assert body_sender(sample(Vote)) == sample(Vote).follower_member_id
    assert body_sender(sample(ReplayBlock)) is None


# ------------------------------------------------------------------------------ the fuzz
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("cls", list(SENDER_FIELD), ids=lambda c: c.__name__)
def test_a_body_naming_another_sender_is_dropped_counted_and_changes_nothing(
    probes: dict[str, Probe], state: str, cls: type[Message]
) -> None:
    probe = probes[state]

    @settings(max_examples=PROBE_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data(), src=st.sampled_from(probe.peers), body=MEMBER_IDS)
    def check(data: st.DataObject, src: int, body: int) -> None:
        if body == src:
            return
        msg = data.draw(_message(probe, cls, body))
        before = module_state(probe)
        count = probe.cm.s.body_member_mismatch_count
        _deliver(probe, src, msg)
        assert module_state(probe) == before, f"{msg.describe()} from {src} changed the member"
        assert probe.cm.s.body_member_mismatch_count == count + 1
        assert _mismatches(probe)[-1] == {"message": cls.__name__, "body_member_id": body, "source": src}
        reason = f"{cls.__name__}: body names member {body}, sent by member {src}"
        assert probe.cm.ignored.get(reason, 0) >= 1, probe.cm.ignored
        assert f"member {ME} ignored {reason}" in probe.log_lines

    check()


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("cls", list(SENDER_FIELD), ids=lambda c: c.__name__)
def test_a_body_naming_its_real_sender_reaches_its_handler(
    probes: dict[str, Probe], state: str, cls: type[Message]
) -> None:
    probe = probes[state]
    reached: list[tuple[int, Message]] = []
    real = probe.cm._handlers[cls]
    probe.cm._handlers[cls] = lambda src, msg, now_ns: reached.append((src, msg))
    try:

        @settings(max_examples=PROBE_EXAMPLES // 3, deadline=None, suppress_health_check=list(HealthCheck))
        @given(data=st.data(), src=st.sampled_from(probe.peers))
        def check(data: st.DataObject, src: int) -> None:
            msg = data.draw(_message(probe, cls, src))
            count = probe.cm.s.body_member_mismatch_count
            _deliver(probe, src, msg)
            assert reached[-1] == (src, msg)
            assert probe.cm.s.body_member_mismatch_count == count

        check()
    finally:
        probe.cm._handlers[cls] = real


# ------------------------------------------------------------------------------ each type's effect
def _termination_pending(probe: Probe) -> None:
    probe.cm.termination.termination_position = probe.cm.append_position  # a SHUTDOWN under way


def _effective(probe: Probe, cls: type[Message], body: int) -> tuple[Message, Callable[[], None] | None]:
    """For each message type, one that its handler acts on in the member's state (and any setup it
    needs): naming ``body`` as its sender."""
    cm, term = probe.cm, probe.cm.leadership_term_id
    append = cm.append_position
    messages: dict[type[Message], Message] = {
        CanvassPosition: CanvassPosition(term, append, term, body, PROTOCOL_VERSION),
        RequestVote: RequestVote(term, append, term + 1, body, PROTOCOL_VERSION),
        Vote: Vote(probe.election.candidate_term_id, -1, 0, ME, body, BooleanType.TRUE)
        if cm.election is not None
        else sample(Vote),
        NewLeadershipTerm: Probe.new_leadership_term(body, term + 1, log_leadership_term_id=term),
        AppendPosition: AppendPosition(term, 1 << 40, body, 0),
        CommitPosition: CommitPosition(term + 1, append, body),
        CatchupPosition: CatchupPosition(term, 0, body, "sim-member:1/catchup"),
        TerminationAck: TerminationAck(term, append, body),
        LogBlock: Probe.log_block(
            body, term, append, b"".join(session_entries(append, term, [b"forged"])), log_session_id=7_777
        ),
        LogEndOfStream: LogEndOfStream(term, append, body),
        ReplayRequest: ReplayRequest(1, LOG_RECORDING_ID, 0, -1, body, ReplayPurpose(0), 1 << 16),
    }
    return messages[cls], _termination_pending if cls is TerminationAck else None


# The member state in which each type is acted on, naming member 1 (a peer the forger is not).
EFFECTIVE_STATE = {
    CanvassPosition: "leader",
    RequestVote: "leader",
    Vote: "candidate",
    NewLeadershipTerm: "follower",
    AppendPosition: "leader",
    CommitPosition: "follower",
    CatchupPosition: "leader",
    TerminationAck: "leader",
    LogBlock: "follower",
    LogEndOfStream: "follower",
    ReplayRequest: "leader",
}


@pytest.mark.parametrize("check_on", [True, False], ids=["check-on", "check-off"])
@pytest.mark.parametrize("cls", list(SENDER_FIELD), ids=lambda c: c.__name__)
def test_each_message_naming_member_1_from_member_2_acts_only_with_the_check_off(
    tmp_path: Path, cls: type[Message], check_on: bool
) -> None:
    """Member 2 (a stolen identity) speaks in member 1's name with a message the member would act on:
    dropped with the check, acted on without it (the check is what stands in the way)."""
    assert set(EFFECTIVE_STATE) == set(SENDER_FIELD)
    probe = _probe_in(EFFECTIVE_STATE[cls], tmp_path)
    if cls is LogBlock:  # the follower follows member 1, whose log block member 2 forges
        assert probe.cm.leader_member_id == 1
    msg, setup = _effective(probe, cls, body=1)
    if setup is not None:
        setup(probe)
    _set_check(probe.cm, check_on)
    before = module_state(probe)
    _deliver(probe, 2, msg)
    if check_on:
        assert module_state(probe) == before
        assert probe.cm.s.body_member_mismatch_count == 1
    else:
        assert module_state(probe) != before, f"{msg.describe()} had no effect: pick one its handler acts on"
        assert probe.cm.s.body_member_mismatch_count == 0
    probe.cm.close()


def test_a_forged_append_position_commits_without_a_quorum_only_with_the_check_off(tmp_path: Path) -> None:
    """The attack on one leader: its log holds entries nobody acknowledged; member 2's identity claims
    member 1 appended far past them."""
    for check_on in (True, False):
        probe = _probe_in("leader", tmp_path / str(check_on))
        _set_check(probe.cm, check_on)
        commit, append = probe.cm.commit_position, probe.cm.append_position
        assert commit < append
        _deliver(probe, 2, AppendPosition(probe.cm.leadership_term_id, 1 << 40, 1, 0))
        probe.settle()
        assert probe.cm.commit_position == (commit if check_on else append)
        # Member 1 speaking for itself is what a quorum is made of.
        _deliver(probe, 1, AppendPosition(probe.cm.leadership_term_id, append, 1, 0))
        probe.settle()
        assert probe.cm.commit_position == append
        probe.cm.close()


# ------------------------------------------------------------------------------ the attack, simulated
WRITES = 10
FORGERIES = 5


@dataclasses.dataclass(frozen=True)
class Attack:
    """Where the forged-acknowledgement attack left the cluster."""

    cluster: SimCluster
    leader: int  # cut off from ``named``
    committed: int  # the leader's commit position before the writes
    appended: int  # the leader's append position after them
    after: int  # the leader's commit position after the forgeries


def _forged_append_position_attack(sim: SimKit, *, check_on: bool) -> Attack:
    """A leader, member ``named`` cut off from it, member ``stolen`` down and its identity taken by a
    forger who tells the leader, in ``named``'s name, that it appended everything."""
    c = sim.cluster(members=3, seed=11)
    leader = c.await_leader()
    named, stolen = [m for m in range(3) if m != leader]
    for i in range(3):
        assert c.offer(f"before-{i}".encode()) > 0
    sim.converge(c)
    c.kill(stolen)
    c.block(leader, named)
    c.block(named, leader)
    member = c.member(leader)
    assert isinstance(member, ConsensusModule)
    _set_check(member, check_on)
    term, committed = c.member(leader).leadership_term_id, c.member(leader).commit_position
    for i in range(WRITES):
        assert c.offer(f"during-cut-{i}".encode()) > 0, c.status_line()
    forged = AppendPosition(term, 1 << 40, named, 0).encode()
    for _ in range(FORGERIES):  # every 100 ms, well within the leader's heartbeat timeout
        c.network.send(c.now_ns, stolen, leader, Channel.CONSENSUS, forged)
        c.run_for(100 * MS)
    assert c.member(leader).role == Role.LEADER, c.status_line()
    sim.check(c)  # the safety checker learns the committed log as it stands (the leader's included)
    m = c.member(leader)
    return Attack(c, leader, committed, m.append_position, m.commit_position)


def _failover(attack: Attack) -> None:
    """The cut-off leader dies; the forger is gone and the member it impersonated comes back; the two
    others elect; the old leader returns."""
    c = attack.cluster
    c.kill(attack.leader)
    c.heal()
    for m in range(c.member_count):
        if not c.is_alive(m) and m != attack.leader:
            c.restart(m)
    c.await_condition(lambda: c.leader_id() not in (None, attack.leader), 10 * SECOND, "a new leader")
    c.restart(attack.leader)


def test_simulated_forged_append_position_acknowledges_nothing_and_loses_nothing(sim: SimKit) -> None:
    attack = _forged_append_position_attack(sim, check_on=True)
    assert attack.appended > attack.committed, "the writes are in the cut-off leader's log"
    assert attack.after == attack.committed, "the leader committed writes only it holds"
    assert attack.cluster.member(attack.leader).s.body_member_mismatch_count == FORGERIES
    _failover(attack)
    sim.converge(attack.cluster)  # durability: everything ever committed is in every member's log


def test_simulated_forged_append_position_with_the_check_off_loses_committed_writes(sim: SimKit) -> None:
    attack = _forged_append_position_attack(sim, check_on=False)
    assert attack.after == attack.appended > attack.committed, "all the writes committed on a forgery"
    _failover(attack)
    with pytest.raises(SafetyViolation, match=r"^(durability|log matching): "):
        sim.converge(attack.cluster)
