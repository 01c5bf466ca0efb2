"""The service container (clusterlab.core.service.container): what a service process, a member's one
process and the simulator share about running a service: its snapshot store, its recovery from the
recording log, the node's messages to the agent (replays told by the JoinLog), and how it stops."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.core.codec import LogBlock, frame
from clusterlab.core.codec.digests import entry_digest
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.core.service import (
    MAX_LOG_POSITION,
    AgentError,
    AppliedEntry,
    ClientSession,
    ClusterTerminationException,
    Role,
    ServiceError,
)
from clusterlab.core.service.container import TERMINATED, ServiceContainer

from tests.unit.test_service_agent import Harness, RecordingService


class _Terminating(RecordingService):
    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        if payload == b"stop":
            raise ClusterTerminationException("asked to stop")
        super().on_session_message(session, timestamp, payload)


def _container(tmp_path: Path, service: RecordingService) -> tuple[ServiceContainer, list[AppliedEntry], list[str]]:
    applied: list[AppliedEntry] = []
    lines: list[str] = []
    container = ServiceContainer(
        0,
        1,
        service,
        FileStorage(tmp_path),
        to_consensus_module=lambda payload: None,
        egress=lambda channel, session, payload: None,
        log=lines.append,
        on_applied=applied.append,
    )
    return container, applied, lines


def _block(entries: list[bytes], start: int, commit: int) -> bytes:
    return LogBlock(
        leadership_term_id=0,
        start_position=start,
        commit_position=commit,
        leader_member_id=1,
        log_session_id=9,
        entries=b"".join(entries),
    ).encode()


def test_blocks_up_to_the_joins_max_log_position_are_replays_and_later_ones_live(tmp_path: Path) -> None:
    h = Harness(tmp_path / "log")  # builds the entries
    f1, f2, f3 = h.message(-1, b"a"), h.message(-1, b"b"), h.message(-1, b"c")
    framed = [frame(f.payload, f.position, 0) for f in (f1, f2, f3)]
    service = RecordingService()
    container, applied, _ = _container(tmp_path, service)
    assert container.recovery_snapshot() is None  # an empty recording log: no snapshot to load
    assert container.start(None) is None
    # Recovery replays the log up to f2, then the member joins the live log there.
    assert container.on_message(h.join(0, Role.FOLLOWER, max_position=f2.end_position).encode()) is None
    assert container.on_message(_block(framed[:2], 0, f2.end_position)) is None
    assert container.on_message(h.join(f2.end_position, Role.FOLLOWER, MAX_LOG_POSITION).encode()) is None
    assert container.on_message(_block(framed[2:], f2.end_position, f3.end_position)) is None
    assert service.state == [b"a", b"b", b"c"]
    assert [(a.log_position, a.replay) for a in applied] == [
        (f1.end_position, True),
        (f2.end_position, True),
        (f3.end_position, False),
    ]
    # Each entry's digest is read from the block's bytes: the digest of the framed entry.
    assert [a.entry_digest for a in applied] == [entry_digest(b) for b in framed]


def test_a_service_that_asks_to_terminate_stops_the_container(tmp_path: Path) -> None:
    h = Harness(tmp_path / "log")
    f1, f2 = h.message(-1, b"a"), h.message(-1, b"stop")
    container, _, lines = _container(tmp_path, _Terminating())
    container.start(None)
    container.on_message(h.join(0, Role.LEADER).encode())
    block = _block([frame(f.payload, f.position, 0) for f in (f1, f2)], 0, f2.end_position)
    assert container.on_message(block) == TERMINATED
    assert container.is_terminated
    assert any("requested termination" in line for line in lines)


def test_a_failed_snapshot_is_survived_and_a_failed_service_raises(tmp_path: Path) -> None:
    h = Harness(tmp_path / "log")
    service = RecordingService()
    service.fail_snapshot = True
    container, _, _ = _container(tmp_path, service)
    container.start(None)
    container.on_message(h.join(0, Role.LEADER).encode())
    snap, after, boom = h.action(), h.message(-1, b"after"), h.message(-1, b"boom")
    entries = [frame(f.payload, f.position, 0) for f in (snap, after)]
    assert container.on_message(_block(entries, 0, after.end_position)) is None
    assert len(container.errors) == 1 and container.errors[0].startswith("snapshot failed")
    assert container.on_message(_block([], after.end_position, after.end_position)) is None
    assert service.state[-1] == b"after"  # the agent carried on (Aeron)
    # A service that fails is the host's to handle: a process exits, the simulator reports it.
    with pytest.raises((ServiceError, AgentError)):
        container.on_message(_block([frame(boom.payload, boom.position, 0)], after.end_position, boom.end_position))


def test_a_service_that_cannot_load_its_snapshot_fails_to_start_with_the_reason(tmp_path: Path) -> None:
    container, _, lines = _container(tmp_path, RecordingService())
    failure = container.start(12345)  # no such recording in the service's catalogue
    assert failure is not None and failure.startswith("failed to start service=0 snapshotRecordingId=12345")
    assert container.errors == [failure] and failure in lines
