"""The safety properties (clusterlab.harness.invariants): each finds its violation, names it, and the
online checker and the trace verdict judge the same observations the same way."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
from clusterlab.harness.invariants import (
    Agreement,
    Contiguity,
    ElectionSafety,
    MonotonicCommit,
    SafetyChecker,
    SafetyViolation,
)

E1, E2, S1, S2 = b"\x01" * 16, b"\x02" * 16, b"\x0a" * 16, b"\x0b" * 16


def test_election_safety_one_leader_per_term() -> None:
    p = ElectionSafety()
    assert p.observe(1, 0) is None
    assert p.observe(1, 0) is None  # the same leader again is no news
    assert p.observe(2, 1) is None
    assert p.observe(1, 2) == "election safety: term 1 has leaders 0 and 2"
    assert p.violations() == ["election safety: term 1 has leaders [0, 2]"]
    assert p.leaders_by_term() == {1: 0, 2: 1}


def test_monotonic_commit_per_process_and_incarnation() -> None:
    p = MonotonicCommit()
    assert p.observe("node-1", 0, 64) is None
    assert p.observe("node-1", 1, 0) is None  # a new incarnation starts again
    assert p.observe("node-1", 0, 32) == "commit position of node-1 incarnation 0 moved back from 64 to 32"
    assert p.observe("node-1", 0, 48) is None  # judged against the last position seen
    assert p.violations() == ["commit position of node-1 incarnation 0 moved back from 64 to 32"]


def test_agreement_on_entries_and_states() -> None:
    p = Agreement()
    assert p.observe(64, (0, 0), "SessionMessage", E1, S1) is None
    assert p.observe(64, (1, 0), "SessionMessage", E1, S1) is None
    assert p.observe(64, (2, 0), "Snapshot", E2, S1) is None  # a snapshot's entry digest is not an entry
    problem = p.observe(64, (2, 1), "SessionMessage", E2, S1)
    assert problem is not None and problem.startswith("agreement: at log position 64 member 2/1 applied entry")
    problem = p.observe(96, (0, 0), "SessionMessage", E1, S1)
    assert problem is None
    problem = p.observe(96, (1, 0), "SessionMessage", E1, S2)
    assert problem is not None and "member 1/0 has state" in problem and "member 0/0 had" in problem
    assert [v.split(":")[1].strip() for v in p.violations()] == ["position 64", "position 96"]
    # A status poll knows the state only; reporting the same state again is not a disagreement.
    assert p.observe(128, (0, 0), "", None, S1) is None
    assert p.observe(128, (0, 0), "", None, S1) is None
    assert p.states[128] == {S1: [(0, 0)]}


def test_contiguity_from_zero_or_a_snapshot() -> None:
    p = Contiguity()
    assert p.observe((0, 0), "SessionMessage", 32, 32) is None
    assert p.observe((0, 0), "SessionMessage", 64, 32) is None
    assert p.observe((0, 1), "Snapshot", 640, 0) is None  # a restart resumes from its snapshot
    assert p.observe((0, 1), "SessionMessage", 672, 32) is None
    gap = p.observe((0, 1), "SessionMessage", 736, 32)
    assert gap == "member 0 incarnation 1: entry ending at 736 starts at 704, previous ended at 672"
    assert p.observe((1, 0), "SessionMessage", 64, 32) is not None  # the first entry must start at 0
    assert len(p.violations()) == 2


def _entry(end: int, length: int, entry: bytes, state: bytes, kind: str = "SessionMessage") -> SimpleNamespace:
    return SimpleNamespace(entry_type=kind, log_position=end, length=length, entry_digest=entry, state_digest=state)


def test_the_online_checker_raises_on_the_first_violation() -> None:
    checker = SafetyChecker()
    checker.on_event({"kind": "leader", "leadership_term_id": 3, "member_id": 0})
    with pytest.raises(SafetyViolation, match="term 3 has leaders 0 and 1"):
        checker.on_event({"kind": "leader", "leadership_term_id": 3, "member_id": 1})
    checker.on_event({"kind": "commit", "member_id": 0, "log_position": 64})
    with pytest.raises(SafetyViolation, match="commit position of member 0 incarnation 0 moved back"):
        checker.on_event({"kind": "commit", "member_id": 0, "log_position": 32})
    checker.on_applied(0, 0, _entry(32, 32, E1, S1))
    with pytest.raises(SafetyViolation, match="agreement: at log position 32"):
        checker.on_applied(1, 0, _entry(32, 32, E2, S1))
    with pytest.raises(SafetyViolation, match="contiguity: member 0 incarnation 0: entry ending at 128"):
        checker.on_applied(0, 0, _entry(128, 32, E1, S1))
    assert checker.leaders_by_term == {3: 0}


def test_log_matching_reads_only_new_bytes_per_incarnation_and_a_full_check_rereads() -> None:
    logs = {0: bytearray(b"a" * 64), 1: bytearray(b"a" * 64)}
    reads: list[tuple[int, int, int]] = []

    def reader(member: int) -> Callable[[int, int], bytes]:
        def read(start: int, end: int) -> bytes:
            reads.append((member, start, end))
            return bytes(logs[member][start:end])

        return read

    checker = SafetyChecker()
    checker.check_member(0, 64, reader(0), incarnation=0)
    checker.check_member(1, 32, reader(1), incarnation=0)
    logs[0] += b"b" * 32
    logs[1] += b"b" * 32
    checker.check_member(0, 96, reader(0), incarnation=0)
    checker.check_member(1, 96, reader(1), incarnation=0)
    assert reads == [(0, 0, 64), (1, 0, 32), (0, 64, 96), (1, 32, 96)]
    assert checker.committed == b"a" * 64 + b"b" * 32
    # New bytes that differ from the committed log are caught at their byte.
    logs[1] = bytearray(b"a" * 64 + b"b" * 32 + b"c" * 32)
    logs[0] = bytearray(b"a" * 64 + b"b" * 32 + b"d" * 32)
    checker.check_member(0, 128, reader(0), incarnation=0)
    with pytest.raises(SafetyViolation, match="differs from the committed log at byte 96"):
        checker.check_member(1, 128, reader(1), incarnation=0)
    # Bytes rewritten below what an incarnation already matched: only a full check re-reads them.
    logs[0][10:11] = b"x"
    checker.check_member(0, 128, reader(0), incarnation=0)
    with pytest.raises(SafetyViolation, match="at byte 10"):
        checker.check_member(0, 128, reader(0))
    # A new incarnation starts from 0; so does a log that fell back below what was matched.
    with pytest.raises(SafetyViolation, match="at byte 10"):
        checker.check_member(0, 128, reader(0), incarnation=1)
    logs[1] = bytearray(b"a" * 64)
    checker.check_member(1, 64, reader(1), incarnation=0)
    assert reads[-1] == (1, 0, 64)
