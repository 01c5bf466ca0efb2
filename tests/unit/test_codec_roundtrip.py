"""One table, every message: field -> wire type. It drives hypothesis round trips and an independent
byte-layout oracle (struct.pack of each field from this table, not from the codec's own spec).

The fuzz tests import ``TABLE`` and ``random_message`` from here.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import clusterlab.core.codec as codec
import pytest
from clusterlab.core.codec import (
    REGISTRY,
    AdminRequestType,
    AdminResponseCode,
    BooleanType,
    ChangeType,
    CloseReason,
    ClusterAction,
    ClusterTimeUnit,
    EventCode,
    MemberDetails,
    ReplayPurpose,
    SnapshotMark,
    ToggleState,
    control,
)
from clusterlab.core.codec.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# --- field types ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Int:
    """A fixed int field of struct format ``fmt``."""

    fmt: str

    @property
    def bounds(self) -> tuple[int, int]:
        bits = struct.calcsize(self.fmt) * 8
        if self.fmt.isupper():
            return 0, 2**bits - 1
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def strategy(self) -> st.SearchStrategy[Any]:
        return st.integers(*self.bounds)

    def rand(self, rng: random.Random) -> int:
        lo, hi = self.bounds
        return rng.choice([lo, hi, 0, -1 if lo < 0 else 1, rng.randint(lo, hi)])

    def expected(self, value: Any) -> bytes:
        return struct.pack("<" + self.fmt, value)


@dataclass(frozen=True)
class Enum32:
    """An int32 enum field."""

    enum: type[IntEnum]
    fmt: str = "i"

    def strategy(self) -> st.SearchStrategy[Any]:
        return st.sampled_from(list(self.enum))

    def rand(self, rng: random.Random) -> IntEnum:
        return rng.choice(list(self.enum))

    def expected(self, value: Any) -> bytes:
        return struct.pack("<i", int(value))


@dataclass(frozen=True)
class Ascii:
    """varAsciiEncoding: u32 length + ASCII."""

    def strategy(self) -> st.SearchStrategy[Any]:
        return st.text(st.characters(max_codepoint=127), max_size=40)

    def rand(self, rng: random.Random) -> str:
        return "".join(chr(rng.randrange(128)) for _ in range(rng.randrange(24)))

    def expected(self, value: Any) -> bytes:
        return struct.pack("<I", len(value)) + value.encode("ascii")


@dataclass(frozen=True)
class Data:
    """varDataEncoding: u32 length + bytes."""

    def strategy(self) -> st.SearchStrategy[Any]:
        return st.binary(max_size=64)

    def rand(self, rng: random.Random) -> bytes:
        return rng.randbytes(rng.randrange(40))

    def expected(self, value: Any) -> bytes:
        return struct.pack("<I", len(value)) + value


@dataclass(frozen=True)
class Rest:
    """SessionMessageHeader's payload: every byte after the block, no length."""

    def strategy(self) -> st.SearchStrategy[Any]:
        return st.binary(max_size=128)

    def rand(self, rng: random.Random) -> bytes:
        return rng.randbytes(rng.randrange(80))

    def expected(self, value: Any) -> bytes:
        return value


@dataclass(frozen=True)
class GroupOf:
    """Repeating group: {u16 block_length, u16 count} then entries (fixed block + vars)."""

    entry: type
    spec: tuple[tuple[str, Any], ...]

    def strategy(self) -> st.SearchStrategy[Any]:
        entry = st.fixed_dictionaries({name: ft.strategy() for name, ft in self.spec}).map(lambda kw: self.entry(**kw))
        return st.lists(entry, max_size=3).map(tuple)

    def rand(self, rng: random.Random) -> tuple[Any, ...]:
        return tuple(self.entry(**{name: ft.rand(rng) for name, ft in self.spec}) for _ in range(rng.randrange(3)))

    def expected(self, value: Any) -> bytes:
        out = struct.pack("<HH", block_length(self.spec), len(value))
        for item in value:
            out += layout(self.spec, item)
        return out


def is_fixed(ft: Any) -> bool:
    return isinstance(ft, Int | Enum32)


def block_length(spec: tuple[tuple[str, Any], ...]) -> int:
    return sum(struct.calcsize(ft.fmt) for _name, ft in spec if is_fixed(ft))


def layout(spec: tuple[tuple[str, Any], ...], obj: Any) -> bytes:
    """Fixed fields in order, then the rest in order (the codec requires fixed ones first)."""
    fixed = b"".join(ft.expected(getattr(obj, name)) for name, ft in spec if is_fixed(ft))
    rest = b"".join(ft.expected(getattr(obj, name)) for name, ft in spec if not is_fixed(ft))
    return fixed + rest


I64, I32, U8 = Int("q"), Int("i"), Int("B")
ASCII, DATA, PAYLOAD = Ascii(), Data(), Rest()

MEMBER_DETAILS = (
    ("leadership_term_id", I64),
    ("log_position", I64),
    ("time_of_last_append_ns", I64),
    ("member_id", I32),
    ("ingress_endpoint", ASCII),
    ("consensus_endpoint", ASCII),
    ("log_endpoint", ASCII),
    ("catchup_endpoint", ASCII),
    ("archive_endpoint", ASCII),
)

# --- THE table: every message class -> its fields in wire order (docs/protocol.md c.2-c.5, c.7, transport) --

TABLE: dict[type, tuple[tuple[str, Any], ...]] = {
    # c.2 client session protocol
    codec.SessionMessageHeader: (
        ("leadership_term_id", I64), ("cluster_session_id", I64), ("timestamp", I64), ("payload", PAYLOAD),
    ),
    codec.SessionEvent: (
        ("cluster_session_id", I64), ("correlation_id", I64), ("leadership_term_id", I64),
        ("leader_member_id", I32), ("code", Enum32(EventCode)), ("version", I32), ("detail", ASCII),
    ),
    codec.SessionConnectRequest: (
        ("correlation_id", I64), ("response_stream_id", I32), ("version", I32),
        ("response_channel", ASCII), ("encoded_credentials", DATA),
    ),
    codec.SessionCloseRequest: (("leadership_term_id", I64), ("cluster_session_id", I64)),
    codec.SessionKeepAlive: (("leadership_term_id", I64), ("cluster_session_id", I64)),
    codec.NewLeaderEvent: (
        ("leadership_term_id", I64), ("cluster_session_id", I64), ("leader_member_id", I32),
        ("ingress_endpoints", ASCII),
    ),
    codec.Challenge: (("correlation_id", I64), ("cluster_session_id", I64), ("encoded_challenge", DATA)),
    codec.ChallengeResponse: (
        ("correlation_id", I64), ("cluster_session_id", I64), ("encoded_credentials", DATA),
    ),
    codec.AdminRequest: (
        ("leadership_term_id", I64), ("cluster_session_id", I64), ("correlation_id", I64),
        ("request_type", Enum32(AdminRequestType)), ("payload", DATA),
    ),
    codec.AdminResponse: (
        ("cluster_session_id", I64), ("correlation_id", I64), ("request_type", Enum32(AdminRequestType)),
        ("response_code", Enum32(AdminResponseCode)), ("message", ASCII), ("payload", DATA),
    ),
    # c.3 log events
    codec.TimerEvent: (("leadership_term_id", I64), ("correlation_id", I64), ("timestamp", I64)),
    codec.SessionOpenEvent: (
        ("leadership_term_id", I64), ("correlation_id", I64), ("cluster_session_id", I64),
        ("timestamp", I64), ("response_stream_id", I32), ("response_channel", ASCII),
        ("encoded_principal", DATA),
    ),
    codec.SessionCloseEvent: (
        ("leadership_term_id", I64), ("cluster_session_id", I64), ("timestamp", I64),
        ("close_reason", Enum32(CloseReason)),
    ),
    codec.ClusterActionRequest: (
        ("leadership_term_id", I64), ("log_position", I64), ("timestamp", I64),
        ("action", Enum32(ClusterAction)), ("flags", I32),
    ),
    codec.NewLeadershipTermEvent: (
        ("leadership_term_id", I64), ("log_position", I64), ("timestamp", I64),
        ("term_base_log_position", I64), ("leader_member_id", I32), ("log_session_id", I32),
        ("time_unit", Enum32(ClusterTimeUnit)), ("app_version", I32),
    ),
    codec.MembershipChangeEvent: (
        ("leadership_term_id", I64), ("log_position", I64), ("timestamp", I64), ("leader_member_id", I32),
        ("cluster_size", I32), ("change_type", Enum32(ChangeType)), ("member_id", I32),
        ("cluster_members", ASCII),
    ),
    # c.4 service <-> CM
    codec.CloseSession: (("cluster_session_id", I64),),
    codec.ScheduleTimer: (("correlation_id", I64), ("deadline", I64)),
    codec.CancelTimer: (("correlation_id", I64),),
    codec.ServiceAck: (
        ("log_position", I64), ("timestamp", I64), ("ack_id", I64), ("relevant_id", I64), ("service_id", I32),
    ),
    codec.ClusterMembersQuery: (("correlation_id", I64), ("extended", Enum32(BooleanType))),
    codec.JoinLog: (
        ("log_position", I64), ("max_log_position", I64), ("member_id", I32), ("log_session_id", I32),
        ("log_stream_id", I32), ("is_startup", Enum32(BooleanType)), ("role", I32), ("log_channel", ASCII),
    ),
    codec.ClusterMembersResponse: (
        ("correlation_id", I64), ("leader_member_id", I32), ("active_members", ASCII),
        ("passive_followers", ASCII),
    ),
    codec.ServiceTerminationPosition: (("log_position", I64),),
    codec.ClusterMembersExtendedResponse: (
        ("correlation_id", I64), ("current_time_ns", I64), ("leader_member_id", I32), ("member_id", I32),
        ("active_members", GroupOf(MemberDetails, MEMBER_DETAILS)),
        ("passive_members", GroupOf(MemberDetails, MEMBER_DETAILS)),
    ),
    codec.RequestServiceAck: (("log_position", I64),),
    # c.5 consensus
    codec.CanvassPosition: (
        ("log_leadership_term_id", I64), ("log_position", I64), ("leadership_term_id", I64),
        ("follower_member_id", I32), ("protocol_version", I32),
    ),
    codec.RequestVote: (
        ("log_leadership_term_id", I64), ("log_position", I64), ("candidate_term_id", I64),
        ("candidate_member_id", I32), ("protocol_version", I32),
    ),
    codec.Vote: (
        ("candidate_term_id", I64), ("log_leadership_term_id", I64), ("log_position", I64),
        ("candidate_member_id", I32), ("follower_member_id", I32), ("vote", Enum32(BooleanType)),
    ),
    codec.NewLeadershipTerm: (
        ("log_leadership_term_id", I64), ("next_leadership_term_id", I64),
        ("next_term_base_log_position", I64), ("next_log_position", I64), ("leadership_term_id", I64),
        ("term_base_log_position", I64), ("log_position", I64), ("leader_recording_id", I64),
        ("timestamp", I64), ("leader_member_id", I32), ("log_session_id", I32), ("app_version", I32),
        ("is_startup", Enum32(BooleanType)),
    ),
    codec.AppendPosition: (
        ("leadership_term_id", I64), ("log_position", I64), ("follower_member_id", I32), ("flags", U8),
    ),
    codec.CommitPosition: (("leadership_term_id", I64), ("log_position", I64), ("leader_member_id", I32)),
    codec.CatchupPosition: (
        ("leadership_term_id", I64), ("log_position", I64), ("follower_member_id", I32),
        ("catchup_endpoint", ASCII),
    ),
    codec.StopCatchup: (("leadership_term_id", I64), ("follower_member_id", I32)),
    codec.TerminationPosition: (("leadership_term_id", I64), ("log_position", I64)),
    codec.TerminationAck: (("leadership_term_id", I64), ("log_position", I64), ("member_id", I32)),
    # c.7 snapshot contents
    codec.SnapshotMarker: (
        ("type_id", I64), ("log_position", I64), ("leadership_term_id", I64), ("index", I32),
        ("mark", Enum32(SnapshotMark)), ("time_unit", Enum32(ClusterTimeUnit)), ("app_version", I32),
    ),
    codec.ClientSession: (
        ("cluster_session_id", I64), ("response_stream_id", I32), ("response_channel", ASCII),
        ("encoded_principal", DATA),
    ),
    codec.ClusterSession: (
        ("cluster_session_id", I64), ("correlation_id", I64), ("opened_log_position", I64),
        ("time_of_last_activity", I64), ("close_reason", Enum32(CloseReason)), ("response_stream_id", I32),
        ("response_channel", ASCII),
    ),
    codec.Timer: (("correlation_id", I64), ("deadline", I64)),
    codec.ConsensusModuleSnapshot: (
        ("next_session_id", I64), ("next_service_session_id", I64), ("log_service_session_id", I64),
        ("pending_message_capacity", I32),
    ),
    codec.ClusterMembers: (("member_id", I32), ("high_member_id", I32), ("cluster_members", ASCII)),
    codec.PendingMessageTracker: (
        ("next_service_session_id", I64), ("log_service_session_id", I64),
        ("pending_message_capacity", I32), ("service_id", I32),
    ),
    # transport (ours, 200+)
    codec.LogBlock: (
        ("leadership_term_id", I64), ("start_position", I64), ("commit_position", I64),
        ("leader_member_id", I32), ("log_session_id", I32), ("entries", DATA),
    ),
    codec.LogEndOfStream: (("leadership_term_id", I64), ("log_position", I64), ("leader_member_id", I32)),
    codec.ReplayRequest: (
        ("correlation_id", I64), ("recording_id", I64), ("from_position", I64), ("to_position", I64),
        ("requester_member_id", I32), ("purpose", Enum32(ReplayPurpose)), ("max_bytes", I32),
    ),
    codec.ReplayBlock: (
        ("correlation_id", I64), ("recording_id", I64), ("start_position", I64),
        ("recording_stop_position", I64), ("leadership_term_id", I64), ("purpose", Enum32(ReplayPurpose)),
        ("flags", I32), ("entries", DATA),
    ),
    codec.ArchiveError: (("correlation_id", I64), ("code", I32), ("error_message", ASCII)),
    # runtime control (ours, 210-229)
    control.StatusRequest: (("correlation_id", I64),),
    control.NodeStatus: (
        ("correlation_id", I64), ("leadership_term_id", I64), ("commit_position", I64), ("append_position", I64),
        ("ignored_count", I64), ("gate_dropped_count", I64), ("send_dropped_count", I64), ("received_count", I64),
        ("member_id", I32), ("role", I32), ("election_state", I32), ("module_state", I32),
        ("leader_member_id", I32), ("session_count", I32), ("snapshot_count", I32), ("pid", I32),
        ("endpoints", ASCII), ("detail", ASCII), ("health", ASCII),
    ),
    control.ServiceStatus: (
        ("correlation_id", I64), ("log_position", I64), ("leadership_term_id", I64), ("applied_count", I64),
        ("ignored_count", I64), ("member_id", I32), ("role", I32), ("terminated", I32), ("pid", I32),
        ("state_digest", DATA),
    ),
    control.GateRule: (("correlation_id", I64), ("delay_ns", I64), ("dst_member_id", I32), ("loss_ppm", I32)),
    control.ClockOffset: (("correlation_id", I64), ("offset_ns", I64)),
    control.ClusterControlRequest: (("correlation_id", I64), ("toggle", Enum32(ToggleState))),
    control.ControlResponse: (
        ("correlation_id", I64), ("code", Enum32(control.ControlResponseCode)), ("message", ASCII),
    ),
    control.MembersConfig: (("correlation_id", I64), ("members", ASCII)),
    control.StorageFault: (
        ("correlation_id", I64), ("code", I32), ("count", I32), ("torn", I32), ("path_prefix", ASCII),
    ),
    control.CountersRequest: (("correlation_id", I64),),
    control.Counters: (
        ("correlation_id", I64), ("commit_position", I64), ("election_count", I64), ("leadership_term_id", I64),
        ("snapshot_count", I64), ("last_snapshot_duration_ns", I64), ("max_snapshot_duration_ns", I64),
        ("errors", I64), ("timed_out_client_count", I64), ("cluster_time_ms", I64), ("member_id", I32),
        ("module_state", I32), ("role", I32), ("control_toggle", I32), ("election_state", I32), ("started", I32),
        ("error_log", GroupOf(control.DistinctError, (("observation_count", I64), ("message", ASCII)))),
    ),
    control.TestHook: (
        ("correlation_id", I64), ("delay_ns", I64), ("kind", Enum32(control.TestHookKind)), ("value", I32),
    ),
    control.PurgeSegments: (("correlation_id", I64),),
    control.BackupQuery: (("correlation_id", I64), ("encoded_credentials", DATA)),
    control.BackupResponse: (
        ("correlation_id", I64), ("log_recording_id", I64), ("log_start_position", I64),
        ("log_stop_position", I64), ("commit_position", I64), ("leadership_term_id", I64),
        ("leader_member_id", I32), ("member_id", I32),
        ("terms", GroupOf(control.BackupTerm, (
            ("leadership_term_id", I64), ("term_base_log_position", I64), ("log_position", I64), ("timestamp", I64),
        ))),
        ("snapshots", GroupOf(control.BackupSnapshot, (
            ("recording_id", I64), ("leadership_term_id", I64), ("term_base_log_position", I64),
            ("log_position", I64), ("timestamp", I64), ("service_id", I32),
        ))),
        ("cluster_members", ASCII),
    ),
    control.SnapshotReplayRequest: (
        ("correlation_id", I64), ("recording_id", I64), ("from_position", I64), ("service_id", I32),
        ("max_bytes", I32),
    ),
}  # fmt: skip

CLASSES = sorted(TABLE, key=lambda cls: cls.TEMPLATE_ID)


def message_strategy(cls: type) -> st.SearchStrategy[Any]:
    """Hypothesis strategy for a valid ``cls`` instance, from the table."""
    return st.fixed_dictionaries({name: ft.strategy() for name, ft in TABLE[cls]}).map(lambda kw: cls(**kw))


def random_message(cls: type, rng: random.Random) -> Any:
    """A valid ``cls`` instance from a seeded random, for the fuzz loops."""
    return cls(**{name: ft.rand(rng) for name, ft in TABLE[cls]})


def expected_encoding(msg: Any) -> bytes:
    """What encode() must produce, computed from the table alone."""
    spec = TABLE[type(msg)]
    return struct.pack("<HHHH", block_length(spec), type(msg).TEMPLATE_ID, 111, 12) + layout(spec, msg)


def test_table_covers_every_registered_message() -> None:
    assert set(TABLE) == set(REGISTRY.values()), set(TABLE) ^ set(REGISTRY.values())


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_block_length_matches_table(cls: type) -> None:
    assert block_length(TABLE[cls]) == cls.BLOCK_LENGTH


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip(cls: type, data: st.DataObject) -> None:
    msg = data.draw(message_strategy(cls))
    encoded = msg.encode()
    assert encoded == expected_encoding(msg)
    assert cls.decode(encoded) == msg
    decoded = codec.decode(encoded)
    assert type(decoded) is cls and decoded == msg
    assert decoded.encode() == encoded
    assert codec.decode(bytearray(encoded)) == msg and codec.decode(memoryview(encoded)) == msg
    # The generated per-class encode/decode agree with the table-driven reference versions.
    assert Message.encode(msg) == encoded
    assert Message.decode.__func__(cls, encoded) == msg
    assert cls._decode_checked(encoded, len(encoded)) == msg
    line = msg.describe()
    assert line.startswith(cls.__name__ + "(") and "\n" not in line


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=20, deadline=None)
@given(data=st.data(), extra=st.binary(min_size=1, max_size=16))
def test_larger_sender_block_length_is_skipped(cls: type, data: st.DataObject, extra: bytes) -> None:
    """Schema evolution: a newer sender's extra fixed fields are skipped, the rest still decodes."""
    msg = data.draw(message_strategy(cls))
    encoded = msg.encode()
    end = 8 + cls.BLOCK_LENGTH
    newer = struct.pack("<H", cls.BLOCK_LENGTH + len(extra)) + encoded[2:end] + extra + encoded[end:]
    assert codec.decode(newer) == msg
    assert cls.decode(newer) == msg


@settings(max_examples=30, deadline=None)
@given(msg=message_strategy(codec.ClusterMembersExtendedResponse), extra=st.binary(min_size=1, max_size=8))
def test_larger_group_block_length_is_skipped(msg: Any, extra: bytes) -> None:
    def entries(items: tuple[MemberDetails, ...], entry_block: int) -> bytes:
        out = struct.pack("<HH", entry_block, len(items))
        for item in items:
            enc = layout(MEMBER_DETAILS, item)
            out += enc[:28] + extra + enc[28:]
        return out

    head = msg.encode()[: 8 + 24]
    wire = head + entries(msg.active_members, 28 + len(extra)) + entries(msg.passive_members, 28 + len(extra))
    assert codec.decode(wire) == msg
