"""The registry against docs/protocol.md: every message of c.2-c.5 and c.7 exists with the documented
template id, block length, and field names/offsets/sizes.

The expected name -> template id list is kept inline as well; the document's headings and field tables
are parsed and must agree with both the inline list and the codec.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from clusterlab.core.codec import REGISTRY, GroupEntry, Message

PROTOCOL_MD = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

# docs/protocol.md name -> (class name, template id, block length). RemoveMember (35) is excluded: it is
# deprecated and Aeron no longer sends it (dynamic membership was removed).
EXPECTED: dict[str, tuple[str, int, int]] = {
    # c.2
    "SessionMessageHeader": ("SessionMessageHeader", 1, 24),
    "SessionEvent": ("SessionEvent", 2, 36),
    "SessionConnectRequest": ("SessionConnectRequest", 3, 16),
    "SessionCloseRequest": ("SessionCloseRequest", 4, 16),
    "SessionKeepAlive": ("SessionKeepAlive", 5, 16),
    "NewLeaderEvent": ("NewLeaderEvent", 6, 20),
    "Challenge": ("Challenge", 7, 16),
    "ChallengeResponse": ("ChallengeResponse", 8, 16),
    "AdminRequest": ("AdminRequest", 26, 28),
    "AdminResponse": ("AdminResponse", 27, 24),
    # c.3
    "TimerEvent": ("TimerEvent", 20, 24),
    "SessionOpenEvent": ("SessionOpenEvent", 21, 36),
    "SessionCloseEvent": ("SessionCloseEvent", 22, 28),
    "ClusterActionRequest": ("ClusterActionRequest", 23, 32),
    "NewLeadershipTermEvent": ("NewLeadershipTermEvent", 24, 48),
    "MembershipChangeEvent": ("MembershipChangeEvent", 25, 40),
    # c.4
    "CloseSession": ("CloseSession", 30, 8),
    "ScheduleTimer": ("ScheduleTimer", 31, 16),
    "CancelTimer": ("CancelTimer", 32, 8),
    "ServiceAck": ("ServiceAck", 33, 36),
    "ClusterMembersQuery": ("ClusterMembersQuery", 34, 12),
    "JoinLog": ("JoinLog", 40, 36),
    "ClusterMembersResponse": ("ClusterMembersResponse", 41, 12),
    "ServiceTerminationPosition": ("ServiceTerminationPosition", 42, 8),
    "ClusterMembersExtendedResponse": ("ClusterMembersExtendedResponse", 43, 24),
    "requestServiceAck": ("RequestServiceAck", 108, 8),
    # c.5
    "CanvassPosition": ("CanvassPosition", 50, 32),
    "RequestVote": ("RequestVote", 51, 32),
    "Vote": ("Vote", 52, 36),
    "NewLeadershipTerm": ("NewLeadershipTerm", 53, 88),
    "AppendPosition": ("AppendPosition", 54, 21),
    "CommitPosition": ("CommitPosition", 55, 20),
    "CatchupPosition": ("CatchupPosition", 56, 20),
    "StopCatchup": ("StopCatchup", 57, 12),
    "TerminationPosition": ("TerminationPosition", 75, 16),
    "TerminationAck": ("TerminationAck", 76, 20),
    # c.7 (template 105 is renamed so it does not clash with the consensus module class)
    "SnapshotMarker": ("SnapshotMarker", 100, 40),
    "ClientSession": ("ClientSession", 102, 12),
    "ClusterSession": ("ClusterSession", 103, 40),
    "Timer": ("Timer", 104, 16),
    "ConsensusModule": ("ConsensusModuleSnapshot", 105, 28),
    "ClusterMembers": ("ClusterMembers", 106, 8),
    "PendingMessageTracker": ("PendingMessageTracker", 107, 24),
}
EXCLUDED = {"RemoveMember"}
SECTIONS = ("c.2", "c.3", "c.4", "c.5", "c.7")
TRANSPORT = {
    "LogBlock": 200,
    "LogEndOfStream": 201,
    "ReplayRequest": 202,
    "ReplayBlock": 203,
    "ArchiveError": 204,
}
# The runtime's control messages (core/codec/control.py) own 210-229.
CONTROL = {
    "StatusRequest": 210,
    "NodeStatus": 211,
    "ServiceStatus": 212,
    "GateRule": 213,
    "ClockOffset": 214,
    "ClusterControlRequest": 215,
    "ControlResponse": 216,
    "MembersConfig": 217,
    "StorageFault": 218,
    "BackupQuery": 219,
    "BackupResponse": 220,
    "SnapshotReplayRequest": 221,
    "CountersRequest": 225,
    "Counters": 226,
    "TestHook": 227,
    "PurgeSegments": 228,
}

HEADING = re.compile(r"^#### (\w+) \(templateId (\d+), blockLength (\d+)(?:, ([^)]*))?\)\s*$")
ROW = re.compile(r"^\|( *)(\S+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|")


def snake(name: str) -> str:
    """Aeron's camelCase field name in our spelling: logPosition -> log_position."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def by_name() -> dict[str, type[Message]]:
    return {cls.__name__: cls for cls in REGISTRY.values()}


def parse_protocol(text: str) -> dict[str, dict]:
    """Message headings of the wanted sections, each with its top-level and group field rows."""
    messages: dict[str, dict] = {}
    section = None
    current: dict | None = None
    for line in text.splitlines():
        if line.startswith("### "):
            section = line.split()[1]
            current = None
            continue
        match = HEADING.match(line)
        if match:
            current = None
            if section in SECTIONS:
                name, template_id, block, notes = match.groups()
                current = {"template_id": int(template_id), "block_length": int(block), "notes": notes or ""}
                current["fields"] = []
                messages[name] = current
            continue
        row = ROW.match(line)
        if current is not None and row and row.group(2) not in ("field", "---"):
            in_group = len(row.group(1)) > 1  # group members are indented: "|   group.field |"
            field, kind, offset, size = (g.strip() for g in row.groups()[1:])
            current["fields"].append((in_group, field, kind, offset, size))
    return messages


def test_inline_list_matches_registry() -> None:
    classes = by_name()
    for doc_name, (class_name, template_id, block) in EXPECTED.items():
        assert class_name in classes, f"{doc_name}: no class {class_name}"
        cls = classes[class_name]
        assert REGISTRY[template_id] is cls, doc_name
        assert (template_id, block) == (cls.TEMPLATE_ID, cls.BLOCK_LENGTH), doc_name
    for class_name, template_id in (TRANSPORT | CONTROL).items():
        assert REGISTRY[template_id].__name__ == class_name
    extra = set(classes) - {c for c, _t, _b in EXPECTED.values()} - set(TRANSPORT) - set(CONTROL)
    assert not extra, f"registered but not in docs/protocol.md c.2-c.5/c.7 or the transport/control lists: {extra}"
    in_control_range = {REGISTRY[t].__name__ for t in REGISTRY if 210 <= t < 230}
    assert in_control_range == set(CONTROL), "210-229 are reserved for runtime control messages"


def test_snake_case_mapping() -> None:
    assert snake("logPosition") == "log_position"
    assert snake("timeOfLastAppendNs") == "time_of_last_append_ns"
    assert snake("isStartup") == "is_startup"


@pytest.fixture(scope="module")
def documented() -> dict[str, dict]:
    return parse_protocol(PROTOCOL_MD.read_text())


def test_protocol_headings_match_inline_list(documented: dict[str, dict]) -> None:
    parsed = {name: (m["template_id"], m["block_length"]) for name, m in documented.items() if name not in EXCLUDED}
    inline = {name: (t, b) for name, (_c, t, b) in EXPECTED.items()}
    assert parsed == inline


def _layout(cls: type[Message] | type[GroupEntry]) -> tuple[list[tuple[str, int, int]], list[str]]:
    """Our fixed fields as (name, offset, size) and the names of what follows the block."""
    fixed, offset = [], 0
    for name, fmt in cls._FIXED:
        size = struct.calcsize("<" + fmt)
        fixed.append((name, offset, size))
        offset += size
    return fixed, [name for name, _kind, _entry in cls._TAILS]


@pytest.mark.parametrize("doc_name", sorted(EXPECTED))
def test_fields_match_protocol_tables(documented: dict[str, dict], doc_name: str) -> None:
    cls = by_name()[EXPECTED[doc_name][0]]
    rows = documented[doc_name]["fields"]
    top = [r for r in rows if not r[0]]
    doc_fixed = [(snake(f), int(o), int(s)) for _g, f, _k, o, s in top if o.isdigit()]
    doc_tail = [snake(f) for _g, f, _k, o, _s in top if not o.isdigit()]
    assert doc_fixed, f"no field rows parsed for {doc_name}"
    fixed, tail = _layout(cls)
    assert fixed == doc_fixed
    # SessionMessageHeader's payload is not in the table: it follows the block directly.
    assert tail == (doc_tail or (["payload"] if cls.__name__ == "SessionMessageHeader" else []))
    for group_name, _kind, entry in cls._TAILS:
        if entry is None:
            continue
        group_rows = [r for r in rows if r[0] and snake(r[1].split(".")[0]) == group_name]
        entry_fixed, entry_tail = _layout(entry)
        doc_entry_fixed = [(snake(f.split(".")[1]), int(o), int(s)) for _g, f, _k, o, s in group_rows if o.isdigit()]
        assert entry_fixed == doc_entry_fixed
        assert entry_tail == [snake(f.split(".")[1]) for _g, f, _k, o, _s in group_rows if not o.isdigit()]
