"""The mypyc-compiled service apply path (core/service/agent.py, harness/services/kv.py,
core/codec/session_header.py: setup.py COMPILED) against the same sources run interpreted (what a
stale or missing build runs).

Both builds are fed the same committed log (session open, plain puts, puts of a client with a resend,
gets, cas, deletes, malformed and non-JSON commands, a timer) as a leader and as a follower, recording
on: every reply, every message to the consensus module and every applied row (with its entry and
state digests) must be the same bytes. A KV service answers a session message with
``encode_reply(execute(...))`` as a leader and applies it unanswered as a follower."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from clusterlab.core.codec import (
    BooleanType,
    JoinLog,
    LogBlock,
    SessionOpenEvent,
    TimerEvent,
    decode,
    encode_session_message,
    session_header,
)
from clusterlab.core.codec.errors import DecodeError
from clusterlab.core.codec.session import (
    SESSION_HEADER_LENGTH,
    SessionMessageHeader,
    session_message_ids,
    unpack_session_message,
)
from clusterlab.core.codec.transport import log_blocks
from clusterlab.core.consensus.context import Role
from clusterlab.core.service import agent as agent_module
from clusterlab.core.service.agent import MAX_LOG_POSITION
from clusterlab.core.service.api import ClientSession
from clusterlab.harness.services import kv
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterlab import compiled

TERM = 3
SESSION_ID = 7


def _interpreted(module: ModuleType, name: str) -> ModuleType:
    """``module``'s source run interpreted, as a separate module."""
    source = Path(module.__file__ or "").parent / (module.__name__.rsplit(".", 1)[1] + ".py")
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None and spec.loader is not None
    interpreted = importlib.util.module_from_spec(spec)
    sys.modules[name] = interpreted  # dataclasses and NamedTuples look their module up
    spec.loader.exec_module(interpreted)
    return interpreted


AGENT_INTERPRETED = _interpreted(agent_module, "clusterlab_agent_interpreted")
KV_INTERPRETED = _interpreted(kv, "clusterlab_kv_interpreted")
BUILDS = {"built": (agent_module, kv), "interpreted": (AGENT_INTERPRETED, KV_INTERPRETED)}


def test_the_build_compiled_the_service_path_when_its_extensions_are_present() -> None:
    for module in (agent_module, kv):
        assert module.__file__ is not None
        extension = any(
            p.name.startswith(f"{module.__name__.rsplit('.', 1)[1]}.") and p.suffix == ".so"
            for p in Path(module.__file__).parent.iterdir()
        )
        runs_compiled = not module.__file__.endswith(".py")
        assert runs_compiled == (extension and compiled.BUILD == "compiled")
    for module in (AGENT_INTERPRETED, KV_INTERPRETED):
        assert module.__file__ is not None and module.__file__.endswith(".py")


def _commands() -> list[bytes]:
    """Every kind of command the KV store answers, the common one (a plain put) most often."""
    commands = [kv.put(i, f"k{i % 5}", f"v{i}") for i in range(40)]
    commands += [kv.put(40, "k1", "no-prev", prev=False), kv.put(41, "ключ", 'va"l\\ue')]
    commands += [b'{"client":2,"id":1,"op":"put","key":"c","value":"x"}'] * 2  # a resend: applied once
    commands += [kv.get(42, "k1"), kv.get(43, "absent"), kv.cas(44, "k2", "v2", "w"), kv.cas(45, "k2", "zz", "y")]
    commands += [kv.delete(46, "k3"), kv.delete(47, "k3")]
    commands += [
        b"not json",
        b"[1,2]",
        b'{"id":48,"op":"put","key":"k"}',
        b'{"id":true,"op":"put","key":"k","value":"x"}',
    ]
    commands += [b'{"id":49,"op":"put","key":"k","value":"v","prev":0}', b'{"id":50,"op":"nope","key":"k"}']
    commands += [b'{"id":51,"op":"put","key":"k4","value":"v","client":null}']
    return commands


def _blocks(per_block: int) -> list[bytes]:
    """The committed log as LogBlocks: a session open, the commands, a timer in the middle."""
    entries: list[bytes] = [
        SessionOpenEvent(
            leadership_term_id=TERM,
            correlation_id=1,
            cluster_session_id=SESSION_ID,
            timestamp=1,
            response_stream_id=102,
            response_channel="egress",
            encoded_principal=b"",
        ).encode()
    ]
    for i, command in enumerate(_commands()):
        entries.append(encode_session_message(TERM, SESSION_ID, 100 + i, command))
        if i == 20:
            entries.append(TimerEvent(leadership_term_id=TERM, correlation_id=9, timestamp=120).encode())
    return log_blocks(entries, TERM, per_block, log_session_id=1)


def _apply(build: str, role: Role, per_block: int, runs: bool) -> dict[str, Any]:
    """Everything the agent and its KV service put out while applying the log."""
    agent_mod, kv_mod = BUILDS[build]
    out: dict[str, Any] = {"cm": [], "egress": [], "rows": []}

    def on_run(run: Any) -> None:
        out["rows"].extend(tuple(row) for row in run.entries())

    service = kv_mod.KeyValueService()
    agent = agent_mod.ClusteredServiceAgent(
        0,
        0,
        service,
        out["cm"].append,
        lambda channel, session, message: out["egress"].append((channel, session, message)),
        None,
        lambda row: out["rows"].append(tuple(row)),
        on_applied_run=on_run if runs else None,
    )
    agent.start(None)
    agent.on_join_log(
        JoinLog(
            log_position=0,
            max_log_position=MAX_LOG_POSITION,
            member_id=0,
            is_startup=BooleanType.TRUE,
            role=int(role),
            log_session_id=1,
            log_stream_id=100,
            log_channel="",
        )
    )
    for payload in _blocks(per_block):
        block = decode(payload)
        assert isinstance(block, LogBlock)
        walked = block.walk()
        agent.on_log_frames(
            walked.frames, block.commit_position, block=block.entries, block_position=block.start_position
        )
    out["state"] = (service.state_digest(), service.entries, service.revision, service.replies)
    out["position"] = (agent.log_position, agent.applied_count, agent.next_ack_id)
    return out


@pytest.mark.parametrize("role", [Role.LEADER, Role.FOLLOWER], ids=["leader", "follower"])
@pytest.mark.parametrize("per_block", [1, 7, 64])
@pytest.mark.parametrize("runs", [True, False], ids=["applied_run", "applied_rows"])
def test_compiled_and_interpreted_service_paths_give_the_same_bytes(role: Role, per_block: int, runs: bool) -> None:
    built = _apply("built", role, per_block, runs)
    interpreted = _apply("interpreted", role, per_block, runs)
    assert built == interpreted
    commands = len(_commands())
    assert built["position"][1] == commands + 2  # the open, every command and the timer applied
    # Only the leader's service answers, each command once (the resend gets the remembered reply).
    assert len(built["egress"]) == (commands if role is Role.LEADER else 0)
    if role is Role.LEADER:
        replies = [kv.decode_reply(message[SESSION_HEADER_LENGTH:]) for _c, _s, message in built["egress"]]
        assert replies[42] == replies[43] and replies[43]["revision"] == replies[42]["revision"]
        errors = [r.get("error", "")[:24] for r in replies[-7:-1]]
        assert errors == [
            "bad request: not JSON: i",
            "bad request: not a JSON ",
            "bad request: missing 'va",
            "bad request: 'id' must b",
            "bad request: 'prev' must",
            "bad request: unknown op ",
        ]


class _Session:
    """A leader's session: keeps what the service offers."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.session = ClientSession(SESSION_ID, 102, "egress", b"", self._offer)

    def _offer(self, _session: ClientSession, payload: bytes) -> bool:
        self.sent.append(payload)
        return True


@pytest.mark.parametrize("build", ["built", "interpreted"])
@settings(max_examples=150, deadline=None)
@given(
    commands=st.lists(
        st.one_of(
            st.builds(
                kv.put,
                st.integers(-(2**63), 2**63 - 1),
                st.sampled_from(["a", "b", 'é"\\']),
                st.text(max_size=8),
                st.booleans(),
            ),
            st.builds(kv.get, st.integers(0, 9), st.sampled_from(["a", "b"])),
            st.builds(kv.delete, st.integers(0, 9), st.sampled_from(["a", "b"])),
            st.sampled_from(
                [
                    b"nope",
                    b"{}",
                    b'{"id":1,"op":"put","key":"a","value":1}',
                    b'{"client":1,"id":2,"op":"put","key":"a","value":"c"}',
                    b'{"id":3,"op":"put","key":"a","value":"v","prev":null}',
                ]
            ),
        ),
        max_size=25,
    )
)
def test_kv_answers_a_session_message_as_execute_and_encode_reply_do(build: str, commands: list[bytes]) -> None:
    """A leader's on_session_message answers each command once with encode_reply(execute()); a
    follower reaches the same state without answering; the incremental digest is the recomputed one."""
    kv_mod = BUILDS[build][1]
    direct, general = kv_mod.KeyValueService(), kv_mod.KeyValueService()
    leader = _Session()
    expected: list[bytes] = []
    for command in commands:
        direct.on_session_message(leader.session, 1, command)
        expected.append(kv_mod.encode_reply(general.execute(command)))
    assert leader.sent == expected
    assert (direct.entries, direct.revision, direct.replies) == (general.entries, general.revision, general.replies)
    assert direct.state_digest() == general.state_digest() == general.recompute_digest()
    follower = kv_mod.KeyValueService()
    for command in commands:
        follower.on_session_message(None, 1, command)  # service-originated: applied, never answered
    assert follower.state_digest() == direct.state_digest()


def test_an_interpreted_subclass_of_the_compiled_kv_service_overrides_its_methods() -> None:
    """Tests and golden variants subclass KeyValueService: their overrides run when the compiled
    agent and the compiled service call them."""

    class Shouting(kv.KeyValueService):
        def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
            super().on_session_message(session, timestamp, payload.replace(b'"v1"', b'"V1"'))

        def state_digest(self) -> bytes:
            return b"S" * 16

    service, leader = Shouting(), _Session()
    service.on_session_message(leader.session, 1, kv.put(1, "k", "v1"))
    assert service.entries["k"][0] == "V1" and service.state_digest() == b"S" * 16
    assert kv.decode_reply(leader.sent[0]) == {"id": 1, "ok": True, "revision": 1, "value": None}


SESSION_HEADER_BUILDS = [session_header, _interpreted(session_header, "clusterlab_session_header_interpreted")]
INT64 = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.parametrize("module", SESSION_HEADER_BUILDS, ids=["built", "interpreted"])
@settings(max_examples=300, deadline=None)
@given(term=INT64, session=INT64, timestamp=INT64, payload=st.binary(max_size=40), noise=st.binary(max_size=48))
def test_session_header_helpers_agree_with_the_message_codec(
    module: ModuleType, term: int, session: int, timestamp: int, payload: bytes, noise: bytes
) -> None:
    """The compiled per-entry helpers (core/codec/session_header.py) against SessionMessageHeader's
    own codec, for bytes, bytearray and memoryview input, and arbitrary bytes."""
    encoded = module.encode_session_message(term, session, timestamp, payload)
    assert encoded == SessionMessageHeader(term, session, timestamp, payload).encode()
    assert module.encode_session_message(term, session, timestamp, bytearray(payload)) == encoded
    for buf in (encoded, bytearray(encoded), memoryview(encoded)):
        assert module.session_message_fields(buf) == (term, session, timestamp)
    for buf in (noise, bytearray(noise), memoryview(noise), encoded[: module.SESSION_HEADER_LENGTH - 1]):
        fields = module.session_message_fields(buf)
        if fields is not None:  # only a header of the usual shape: then it decodes to the same ids
            decoded = SessionMessageHeader.decode(bytes(buf))
            assert fields == (decoded.leadership_term_id, decoded.cluster_session_id, decoded.timestamp)
    with pytest.raises(ValueError, match="SessionMessageHeader"):
        module.encode_session_message(2**63, session, timestamp, payload)


def _decoded(buf: bytes) -> tuple[int, int, int, bytes] | str:
    try:
        m = SessionMessageHeader.decode(buf)
    except DecodeError as e:
        return str(e)
    return m.leadership_term_id, m.cluster_session_id, m.timestamp, m.payload


@settings(max_examples=300, deadline=None)
@given(
    head=st.tuples(
        st.sampled_from([24, 28, 16]), st.sampled_from([1, 2]), st.sampled_from([111, 7]), st.integers(11, 13)
    ),
    ids=st.tuples(INT64, INT64, INT64),
    tail=st.binary(max_size=40),
    cut=st.integers(0, 80),
)
def test_session_message_ids_and_unpack_read_what_the_codec_decodes(
    head: tuple[int, int, int, int], ids: tuple[int, int, int], tail: bytes, cut: int
) -> None:
    """session.py's readers (the usual header through session_message_fields, any other through the
    codec) give what SessionMessageHeader.decode gives, or raise its DecodeError, for every input kind."""
    wire = struct.pack("<HHHHqqq", *head, *ids) + tail
    wire = wire[: max(0, len(wire) - cut)] if cut > 40 else wire
    expected = _decoded(wire)
    for buf in (wire, bytearray(wire), memoryview(wire)):
        if isinstance(expected, str):
            with pytest.raises(DecodeError) as unpack_error:
                unpack_session_message(buf)
            with pytest.raises(DecodeError) as ids_error:
                session_message_ids(buf)
            assert str(unpack_error.value) == str(ids_error.value) == expected
        else:
            assert unpack_session_message(buf) == expected
            assert session_message_ids(buf) == expected[:3]


def test_the_build_compiled_the_session_header_helpers_when_an_extension_is_present() -> None:
    assert session_header.__file__ is not None
    built = any(p.name.startswith("session_header.") and p.suffix == ".so"
                for p in Path(session_header.__file__).parent.iterdir())  # fmt: skip
    assert (built and compiled.BUILD == "compiled") == session_header.COMPILED
    assert SESSION_HEADER_BUILDS[1].COMPILED is False
