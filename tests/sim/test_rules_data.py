"""The consensus module's rules as scripts of inputs and printed effects (tests/sim/testdata/*.txt).

Each script drives one real ConsensusModule, a member of a cluster whose other members the script
plays, through :class:`~clusterlab.core.consensus.effects.SteppedModule`, and prints every effect of
every input: the messages it sends, its events, its storage changes and its next deadline. Commands:

- ``member id=I members=N [appointed_leader=L]`` — a fresh member (memory storage, fast timeouts, a
  seeded random source) at time 0, not yet started; a script begins with one.
- ``start`` — recover from storage and begin the startup election (``on_start``).
- ``tick [at=T]`` — one duty cycle at ``T`` (default: the current time).
- ``run to=T`` — every duty cycle the module asks for (its deadlines) up to ``T``.
- ``deliver from=M [channel=consensus|log|catchup|archive] [at=T] Message field=value ...`` — the
  message as member ``M`` sends it, then a duty cycle at the same instant (as the simulator delivers).
  ``protocol_version``, ``app_version`` and a client's ``version`` default to this build's, credentials to
  none; an enum field takes its name, a text field its text, a bytes field its hex, and a LogBlock's
  ``entries=messages:a,bb`` are session messages with those payloads, framed from its start position.
- ``ingress [at=T] Message field=value ...`` — a client's message (a SessionConnectRequest ...) taken from
  the ingress socket, without a duty cycle after it: the deadline then says when the module wants one.
- ``state`` — role, election state, terms and positions.

Times are milliseconds (``at=250`` or ``at=250ms``; ``us`` and ``s`` suffixes too). Output lines are, in the order
the module made them, ``@T send -> M channel Message field=value ...``, ``@T egress -> channel Message
...``, ``@T event kind term=.. pos=.. key=value ...`` and ``@T storage op path ...`` (a change on the
member's storage: ``create``, ``write offset=.. length=..``, ``truncate length=..``, ``sync``,
``replace length=.. [synced]``, ``remove``, ``make_dirs``, ``sync_dir``); after each command,
``deadline T``.
``CLUSTERLAB_REWRITE=1`` rewrites the scripts with what the code prints (tests/sim/datadriven.py)."""

from __future__ import annotations

import dataclasses
import enum
import random
from pathlib import Path
from typing import Any

import pytest
from clusterlab.core.archive.storage import MemoryStorage
from clusterlab.core.codec import enums
from clusterlab.core.codec.message import Message
from clusterlab.core.codec.registry import REGISTRY
from clusterlab.core.consensus.context import (
    CLIENT_PROTOCOL_VERSION,
    MS,
    NULL_VALUE,
    PROTOCOL_VERSION,
    Channel,
    ConsensusModuleContext,
    EventSink,
    Outbox,
    Timeouts,
)
from clusterlab.core.consensus.effects import Effect, Effects, EgressSend, Event, MemberSend, Received, SteppedModule
from clusterlab.core.consensus.members import ClusterMember

from tests.sim.datadriven import key_values, run_script
from tests.sim.probe import session_entries

pytestmark = pytest.mark.sim

TESTDATA = Path(__file__).with_name("testdata")
MESSAGES: dict[str, type[Message]] = {cls.__name__: cls for cls in REGISTRY.values()}
ENUMS: dict[str, type[enum.Enum]] = {
    name: value for name, value in vars(enums).items() if isinstance(value, type) and issubclass(value, enum.Enum)
}
DEFAULTS: dict[str, Any] = {
    "protocol_version": PROTOCOL_VERSION,
    "app_version": 0,
    "version": CLIENT_PROTOCOL_VERSION,
    "encoded_credentials": b"",
}
UNITS = {"ms": MS, "us": MS // 1000, "s": 1000 * MS}
MESSAGES_VALUE = "messages:"  # a bytes field written as session messages (framed_messages)


def parse_time(text: str) -> int:
    """``250``, ``250ms``, ``1.5s``, ``300us`` -> nanoseconds (a bare number is milliseconds)."""
    for suffix, unit in UNITS.items():
        if text.endswith(suffix):
            return round(float(text[: -len(suffix)]) * unit)
    return round(float(text) * MS)


def show_time(ns: int) -> str:
    """Milliseconds, exact to the nanosecond, without trailing zeros."""
    return f"{ns / MS:.6f}".rstrip("0").rstrip(".") + "ms"


def show_value(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return f"0x{data.hex()}" if len(data) <= 16 else f"<{len(data)} bytes 0x{data[:8].hex()}..>"
    if isinstance(value, list | tuple):
        return "[" + ",".join(show_value(v) for v in value) + "]"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "{" + " ".join(f"{f.name}={show_value(getattr(value, f.name))}" for f in dataclasses.fields(value)) + "}"
    return str(value)


def show_message(message: Message) -> str:
    fields = " ".join(
        f"{f.name}={show_value(getattr(message, f.name))}"
        for f in dataclasses.fields(message)  # type: ignore[arg-type]  # every codec message is a dataclass
    )
    return f"{type(message).__name__} {fields}".rstrip()


def show_effect(effect: Effect) -> str:
    """One effect as a script prints it (without its time)."""
    if isinstance(effect, MemberSend):
        return f"send -> {effect.member_id} {effect.channel.name.lower()} {show_message(effect.message)}"
    if isinstance(effect, EgressSend):
        return f"egress -> {effect.response_channel} {show_message(effect.message)}"
    if isinstance(effect, Event):
        detail = " ".join(f"{k}={show_value(v)}" for k, v in sorted(effect.detail.items()))
        term = "-" if effect.leadership_term_id is None else effect.leadership_term_id
        pos = "-" if effect.log_position is None else effect.log_position
        return f"event {effect.kind} term={term} pos={pos} {detail}".rstrip()
    shape = {"write": f"offset={effect.offset} length={effect.length}", "truncate": f"length={effect.length}"}
    if effect.op == "replace":
        return f"storage replace {effect.path} length={effect.length}" + (" synced" if effect.synced else "")
    return f"storage {effect.op} {effect.path} {shape.get(effect.op, '')}".rstrip()


def build_message(words: list[str], pairs: dict[str, str]) -> Message:
    """The message a ``deliver`` line names, from its field values (enum fields by member name)."""
    if len(words) != 1 or words[0] not in MESSAGES:
        raise ValueError(f"deliver names one message class, got {words}")
    cls = MESSAGES[words[0]]
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # every codec message is a dataclass
        if f.name not in pairs:
            if f.name not in DEFAULTS:
                raise ValueError(f"{cls.__name__}: give {f.name}=")
            values[f.name] = DEFAULTS[f.name]
            continue
        text = pairs.pop(f.name)
        enum_type = next((e for name, e in ENUMS.items() if name in str(f.type)), None)
        if enum_type is not None:
            values[f.name] = enum_type[text]
        elif str(f.type) in ("str", "AsciiVar"):
            values[f.name] = text
        elif str(f.type) in ("bytes", "DataVar") and text.startswith(MESSAGES_VALUE):
            values[f.name] = text  # framed once the block's start position and term are known
        elif str(f.type) in ("bytes", "DataVar"):
            values[f.name] = bytes.fromhex(text.removeprefix("0x"))
        else:
            values[f.name] = int(text, 0)
    if pairs:
        raise ValueError(f"{cls.__name__} has no field(s) {sorted(pairs)}")
    for name, value in values.items():
        if isinstance(value, str) and value.startswith(MESSAGES_VALUE):
            values[name] = framed_messages(value, values)
    return cls(**values)


def framed_messages(text: str, values: dict[str, Any]) -> bytes:
    """``messages:a,bb`` as a LogBlock's entries: one session message per payload (its text's bytes),
    framed end to end from the block's ``start_position`` in its ``leadership_term_id``."""
    if "start_position" not in values or "leadership_term_id" not in values:
        raise ValueError(f"{text}: only a message with start_position and leadership_term_id frames entries")
    payloads = [p.encode() for p in text.removeprefix(MESSAGES_VALUE).split(",")]
    return b"".join(session_entries(values["start_position"], values["leadership_term_id"], payloads))


class ScriptedMember:
    """One ConsensusModule and the script's clock."""

    def __init__(self, member_id: int, members: int, appointed_leader_id: int) -> None:
        self.now_ns = 0
        self.storage = MemoryStorage(f"member-{member_id}")

        def context(outbox: Outbox, events: EventSink) -> ConsensusModuleContext:
            return ConsensusModuleContext(
                member_id=member_id,
                members=[ClusterMember(i) for i in range(members)],
                cluster_dir=Path(f"/member-{member_id}"),
                storage=self.storage,
                outbox=outbox,
                rng=random.Random(f"script:{member_id}"),
                timeouts=Timeouts.fast(),
                appointed_leader_id=appointed_leader_id,
                service_count=0,
                events=events,
                check_invariants=True,
            )

        self.stepped = SteppedModule(context)

    def at(self, pairs: dict[str, str]) -> int:
        if "at" in pairs:
            then = parse_time(pairs.pop("at"))
            if then < self.now_ns:
                raise ValueError(f"time cannot go back: {show_time(then)} < {show_time(self.now_ns)}")
            self.now_ns = then
        return self.now_ns

    def lines(self, effects: Effects) -> list[str]:
        at = f"@{show_time(self.now_ns)}"
        return [f"{at} {show_effect(effect)}" for effect in effects.ordered]

    def run_to(self, end_ns: int) -> list[str]:
        """Every duty cycle the module asks for up to ``end_ns``; the clock ends there."""
        out: list[str] = []
        for _ in range(100_000):
            deadline = self.stepped.module.next_deadline_ns()
            if deadline > end_ns:
                break
            self.now_ns = max(self.now_ns, deadline)
            out += self.lines(self.stepped.tick(self.now_ns))
        else:
            raise AssertionError(f"more than 100000 duty cycles before {show_time(end_ns)}: a livelock")
        self.now_ns = end_ns
        return out

    def state(self) -> str:
        m = self.stepped.module
        election = m.election.state.name if m.election is not None else "-"
        s = m.s
        return (
            f"role={m.role.name} election={election} leadership_term_id={s.leadership_term_id} "
            f"commit_position={s.commit_position} append_position={m.append_position}"
        )


class Script:
    """The handler :func:`run_script` calls for each command."""

    def __init__(self) -> None:
        self.member: ScriptedMember | None = None

    def __call__(self, command: str, arguments: tuple[str, ...]) -> str:
        words, pairs = key_values(arguments)
        if command == "member":
            appointed = int(pairs.pop("appointed_leader", NULL_VALUE))
            self.member = ScriptedMember(int(pairs.pop("id")), int(pairs.pop("members")), appointed)
            self._no_leftovers(words, pairs)
            return self.member.state()
        member = self.member
        if member is None:
            raise ValueError("a script begins with `member`")
        if command == "state":
            self._no_leftovers(words, pairs)
            return member.state()
        lines = self._step(member, command, words, pairs)
        self._no_leftovers(words, pairs)
        return "\n".join([*lines, f"deadline {show_time(member.stepped.module.next_deadline_ns())}"])

    def _step(self, member: ScriptedMember, command: str, words: list[str], pairs: dict[str, str]) -> list[str]:
        if command == "start":
            return member.lines(member.stepped.start(member.at(pairs)))
        if command == "tick":
            return member.lines(member.stepped.tick(member.at(pairs)))
        if command == "run":
            return member.run_to(parse_time(pairs.pop("to")))
        if command == "deliver":
            src = int(pairs.pop("from"))
            channel = Channel[pairs.pop("channel", "consensus").upper()]
            now = member.at(pairs)
            message = build_message(words, pairs)
            words.clear()
            pairs.clear()
            return member.lines(member.stepped.step(now, Received(src, channel, message.encode())))
        if command == "ingress":  # a client's message taken from the ingress socket, no duty cycle after it
            now = member.at(pairs)
            message = build_message(words, pairs)
            words.clear()
            pairs.clear()
            return member.lines(member.stepped.receive_ingress(now, [message.encode()]))
        raise ValueError(f"unknown command {command!r} (member, start, tick, run, deliver, ingress, state)")

    @staticmethod
    def _no_leftovers(words: list[str], pairs: dict[str, str]) -> None:
        if words or pairs:
            raise ValueError(f"unexpected arguments {words} {sorted(pairs)}")


@pytest.mark.parametrize("script", sorted(TESTDATA.glob("*.txt")), ids=lambda p: p.stem)
def test_script(script: Path) -> None:
    run_script(script, Script())


def test_there_are_scripts() -> None:
    assert len(list(TESTDATA.glob("*.txt"))) >= 3


def test_a_changed_output_fails_and_rewrite_writes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERLAB_REWRITE", raising=False)
    script = tmp_path / "s.txt"
    script.write_text("# a comment\nmember id=0 members=3\n----\nrole=LEADER\n")
    with pytest.raises(AssertionError, match=r"s\.txt:2: member"):
        run_script(script, Script())
    monkeypatch.setenv("CLUSTERLAB_REWRITE", "1")
    run_script(script, Script())
    assert script.read_text().startswith("# a comment\nmember id=0 members=3\n----\nrole=FOLLOWER election=-")
    monkeypatch.delenv("CLUSTERLAB_REWRITE")
    run_script(script, Script())  # the rewritten script now holds


def test_a_malformed_script_names_its_line(tmp_path: Path) -> None:
    script = tmp_path / "bad.txt"
    script.write_text("member id=0 members=3\nrole=FOLLOWER\n")
    with pytest.raises(ValueError, match=r"bad\.txt:1: .* is not followed by a '----' line"):
        run_script(script, Script())


def test_entries_as_messages_need_a_block_position_and_term() -> None:
    with pytest.raises(ValueError, match="messages:a: only a message with start_position and leadership_term_id"):
        build_message(
            ["SessionConnectRequest"],
            {
                "correlation_id": "1",
                "response_stream_id": "2",
                "response_channel": "c",
                "encoded_credentials": "messages:a",
            },
        )
    block = build_message(
        ["LogBlock"],
        {
            "leadership_term_id": "0",
            "start_position": "96",
            "commit_position": "0",
            "leader_member_id": "0",
            "log_session_id": "7",
            "entries": "messages:a,bb",
        },
    )
    assert block.entries == b"".join(session_entries(96, 0, [b"a", b"bb"]))  # type: ignore[attr-defined]
