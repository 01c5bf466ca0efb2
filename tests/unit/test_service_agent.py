"""ClusteredServiceAgent: the committed log to the service, acks to the consensus module."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from clusterlab.core.archive.catalogue import Catalogue
from clusterlab.core.archive.snapshots import SnapshotStore
from clusterlab.core.codec import (
    BooleanType,
    CancelTimer,
    CloseReason,
    CloseSession,
    ClusterAction,
    ClusterActionRequest,
    ClusterMembersResponse,
    ClusterTimeUnit,
    Frame,
    JoinLog,
    LogBlock,
    NewLeadershipTermEvent,
    RequestServiceAck,
    ScheduleTimer,
    ServiceAck,
    ServiceTerminationPosition,
    SessionCloseEvent,
    SessionMessageHeader,
    SessionOpenEvent,
    TimerEvent,
    decode,
    encode_session_message,
    frame,
    framed_length,
    unframe,
)
from clusterlab.core.codec.digests import entry_digest
from clusterlab.core.codec.header import HEADER_LENGTH
from clusterlab.core.codec.message import Message
from clusterlab.core.consensus.context import APP_VERSION
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.core.service import (
    MAX_LOG_POSITION,
    AgentError,
    AppliedEntry,
    AppliedRun,
    ClientSession,
    Cluster,
    ClusteredService,
    ClusteredServiceAgent,
    ClusterError,
    EntryType,
    LogContiguityError,
    Role,
    ServiceError,
    SnapshotError,
    SnapshotImage,
    SnapshotWriter,
)

NULL = -1
SERVICE_ID = 0
CLIENT_ID = 77


class RecordingService(ClusteredService):
    """Keeps every message it saw as its state; fails on b"boom"; sends what a message asks for."""

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.calls: list[tuple] = []
        self.state: list[bytes] = []
        self.fail_snapshot = False
        self.send_from_role_change = False

    def on_start(self, cluster: Cluster, snapshot: SnapshotImage | None) -> None:
        self.cluster = cluster
        self.calls.append(("start", None if snapshot is None else snapshot.log_position))
        self.state = [] if snapshot is None else list(snapshot.records)

    def on_session_open(self, session: ClientSession, timestamp: int) -> None:
        self.calls.append(("open", session.id, timestamp))
        self.state.append(b"open %d" % session.id)

    def on_session_close(self, session: ClientSession, timestamp: int, close_reason: CloseReason) -> None:
        self.calls.append(("close", session.id, timestamp, close_reason))
        self.state.append(b"close %d" % session.id)

    def on_session_message(self, session: ClientSession | None, timestamp: int, payload: bytes) -> None:
        assert self.cluster is not None
        self.calls.append(("message", None if session is None else session.id, timestamp, payload))
        if payload.startswith(b"timer-then-boom"):
            self.cluster.schedule_timer(1, 1)  # held back, must never reach the consensus module
            raise RuntimeError("boom")
        if payload == b"boom":
            raise RuntimeError("boom")
        if payload == b"close-unknown":
            self.cluster.close_client_session(999)
        self.state.append(payload)
        if payload.startswith(b"timer "):
            _, cid, deadline = payload.split()
            self.cluster.schedule_timer(int(cid), int(deadline))
        elif payload.startswith(b"cancel "):
            self.cluster.cancel_timer(int(payload.split()[1]))
        elif payload.startswith(b"offer "):
            self.cluster.offer(payload[6:])
        elif payload == b"close-me" and session is not None:
            self.cluster.close_client_session(session.id)
        elif session is not None:
            assert session.offer(b"re:" + payload)

    def on_timer_event(self, correlation_id: int, timestamp: int) -> None:
        self.calls.append(("timer", correlation_id, timestamp))
        self.state.append(b"timer %d" % correlation_id)

    def on_take_snapshot(self, writer: SnapshotWriter) -> None:
        self.calls.append(("snapshot",))
        if self.fail_snapshot:
            raise OSError("disk full")
        for record in self.state:
            writer.write(record)

    def on_role_change(self, new_role: Role) -> None:
        self.calls.append(("role", new_role))
        if self.send_from_role_change:
            assert self.cluster is not None
            self.cluster.offer(b"not allowed")

    def on_terminate(self, cluster: Cluster) -> None:
        self.calls.append(("terminate", cluster.log_position))

    def on_new_leadership_term_event(
        self,
        leadership_term_id: int,
        log_position: int,
        timestamp: int,
        term_base_log_position: int,
        leader_member_id: int,
        log_session_id: int,
        time_unit: ClusterTimeUnit,
        app_version: int,
    ) -> None:
        self.calls.append(("nlte", leadership_term_id, log_position, leader_member_id, time_unit))

    def state_digest(self) -> bytes:
        return hashlib.blake2b(b"\0".join(self.state), digest_size=16).digest()


class Harness:
    """An agent with its outputs captured and a log builder."""

    def __init__(
        self,
        tmp_path: Path,
        service: RecordingService | None = None,
        term: int = 0,
        on_applied_run: Callable[[AppliedRun], None] | None = None,
    ) -> None:
        storage = FileStorage(tmp_path)
        self.store = SnapshotStore(storage, Catalogue.open(storage))
        self.service = service or RecordingService()
        self.to_cm: list[Message] = []
        self.egress: list[tuple[str, int, bytes]] = []
        self.applied: list[AppliedEntry] = []
        self.agent = ClusteredServiceAgent(
            SERVICE_ID,
            1,
            self.service,
            lambda b: self.to_cm.append(decode(b)),
            lambda channel, sid, msg: self.egress.append((channel, sid, msg)),
            self.store,
            self.applied.append,
            on_applied_run=on_applied_run,
            client_id=CLIENT_ID,
        )
        self.term = term
        self.position = 0

    def entry(self, msg: Message | bytes) -> Frame:
        """Frame the next log entry."""
        payload = msg if isinstance(msg, bytes) else msg.encode()
        framed = frame(payload, self.position, self.term)
        f = unframe(framed, expected_position=self.position)
        self.position = f.end_position
        return f

    def message(self, session_id: int, payload: bytes, timestamp: int = 100) -> Frame:
        return self.entry(encode_session_message(self.term, session_id, timestamp, payload))

    def open(self, session_id: int, timestamp: int = 50) -> Frame:
        return self.entry(
            SessionOpenEvent(
                leadership_term_id=self.term,
                correlation_id=session_id * 10,
                cluster_session_id=session_id,
                timestamp=timestamp,
                response_stream_id=102,
                response_channel=f"egress-{session_id}",
                encoded_principal=b"user",
            )
        )

    def action(self, action: ClusterAction = ClusterAction.SNAPSHOT, flags: int = 0, timestamp: int = 300) -> Frame:
        # The leader computes the position after the entry before appending it (docs/protocol.md c.8).
        length = framed_length(HEADER_LENGTH + ClusterActionRequest.BLOCK_LENGTH)
        return self.entry(
            ClusterActionRequest(
                leadership_term_id=self.term,
                log_position=self.position + length,
                timestamp=timestamp,
                action=action,
                flags=flags,
            )
        )

    def join(self, position: int = 0, role: Role = Role.LEADER, max_position: int = MAX_LOG_POSITION) -> JoinLog:
        return JoinLog(
            log_position=position,
            max_log_position=max_position,
            member_id=1,
            log_session_id=9,
            log_stream_id=100,
            is_startup=BooleanType.FALSE,
            role=int(role),
            log_channel="log",
        )

    def started_and_joined(self, role: Role = Role.LEADER) -> ClusteredServiceAgent:
        self.agent.start()
        self.agent.on_join_log(self.join(0, role))
        return self.agent

    def acks(self) -> list[ServiceAck]:
        return [m for m in self.to_cm if isinstance(m, ServiceAck)]


def test_start_acks_with_ack_id_zero_and_the_client_id(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.agent.start(cluster_time=5)
    assert h.service.calls == [("start", None)]
    assert h.acks() == [ServiceAck(log_position=0, timestamp=5, ack_id=0, relevant_id=CLIENT_ID, service_id=SERVICE_ID)]


def test_join_log_acks_at_the_join_position_and_changes_role(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.started_and_joined(Role.LEADER)
    assert h.acks()[1] == ServiceAck(log_position=0, timestamp=0, ack_id=1, relevant_id=NULL, service_id=SERVICE_ID)
    assert h.service.calls[-1] == ("role", Role.LEADER)
    assert h.agent.role is Role.LEADER
    h.agent.on_join_log(h.join(0, Role.LEADER))  # same role: no callback
    assert [c for c in h.service.calls if c[0] == "role"] == [("role", Role.LEADER)]


def test_only_committed_entries_are_delivered(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    f1, f2, f3 = h.message(-1, b"a"), h.message(-1, b"b"), h.message(-1, b"c")
    assert agent.on_log_frames([f1, f2, f3], commit_position=f1.end_position) == 1
    assert h.service.state == [b"a"]
    assert agent.log_position == f1.end_position
    assert agent.pending_frames == 2
    # A commit inside an entry does not release it.
    assert agent.on_log_frames([], commit_position=f3.position + 32) == 1
    assert h.service.state == [b"a", b"b"]
    assert agent.on_log_frames([], commit_position=f3.end_position) == 1
    assert h.service.state == [b"a", b"b", b"c"]
    assert [a.log_position for a in h.applied] == [f1.end_position, f2.end_position, f3.end_position]
    # A stale (lower) commit position changes nothing.
    assert agent.on_log_frames([], commit_position=0) == 0
    assert agent.commit_position == f3.end_position


def test_nothing_is_delivered_beyond_the_join_max_log_position(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.agent.start()
    f1, f2 = h.message(-1, b"a"), h.message(-1, b"b")
    h.agent.on_join_log(h.join(0, Role.FOLLOWER, max_position=f1.end_position))
    h.agent.on_log_frames([f1, f2], commit_position=f2.end_position, is_replay=True)
    assert h.service.state == [b"a"]
    assert h.applied[0].replay is True


def test_join_log_must_be_contiguous(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.agent.start()
    with pytest.raises(LogContiguityError, match="Cluster log must be contiguous"):
        h.agent.on_join_log(h.join(64))


def test_frames_must_be_contiguous(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    h.message(-1, b"skipped")
    f2 = h.message(-1, b"b")
    with pytest.raises(LogContiguityError, match="Cluster log must be contiguous"):
        agent.on_log_frames([f2], commit_position=f2.end_position)


def test_resent_frames_are_ignored(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    f1, f2 = h.message(-1, b"a"), h.message(-1, b"b")
    agent.on_log_frames([f1], commit_position=0)
    agent.on_log_frames([f1, f2], commit_position=f2.end_position)
    assert h.service.state == [b"a", b"b"]
    assert agent.ignored["duplicate frame"] == 1


def test_join_log_runs_the_old_log_to_the_join_position_and_drops_the_rest(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined(Role.FOLLOWER)
    f1, f2 = h.message(-1, b"a"), h.message(-1, b"uncommitted")
    agent.on_log_frames([f1, f2], commit_position=f1.position)  # nothing committed yet
    agent.on_log_frames([], commit_position=f1.end_position)
    agent.on_join_log(h.join(f1.end_position, Role.LEADER))
    assert h.service.state == [b"a"]
    assert agent.pending_frames == 0
    # The new log re-delivers from the join position.
    h.position = f1.end_position
    f2b = h.message(-1, b"b")
    agent.on_log_frames([f2b], commit_position=f2b.end_position)
    assert h.service.state == [b"a", b"b"]


def test_acks_are_strictly_sequenced(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    f1 = h.message(-1, b"a")
    snap = h.action()
    f3 = h.message(-1, b"b")
    agent.on_log_frames([f1, snap, f3], commit_position=f3.end_position)
    agent.on_request_service_ack(f3.end_position)
    agent.on_service_termination_position(f3.end_position)
    acks = h.acks()
    assert [a.ack_id for a in acks] == [0, 1, 2, 3, 4]
    assert [a.log_position for a in acks] == [0, 0, snap.end_position, f3.end_position, f3.end_position]
    assert acks[2].relevant_id >= 0 and acks[3].relevant_id == NULL and acks[4].relevant_id == NULL


def test_snapshot_at_the_action_position_then_restore_gives_the_same_digest(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    frames = [h.open(5), h.message(5, b"a"), h.message(-1, b"b")]
    snap = h.action(timestamp=333)
    after = [h.message(5, b"c"), h.message(-1, b"d")]
    agent.on_log_frames([*frames, snap, *after], commit_position=h.position)
    ack = h.acks()[2]
    assert ack.log_position == snap.end_position and ack.timestamp == 333
    recording_id = ack.relevant_id
    assert h.store.catalogue.get(recording_id).log_position == snap.end_position
    assert h.service.calls.count(("snapshot",)) == 1
    digest_at_snapshot = next(a.state_digest for a in h.applied if a.log_position == snap.end_position)

    restored = Harness(tmp_path / "restored")
    restored.store = h.store
    restored.agent.snapshot_store = h.store
    restored.agent.start(recording_id, cluster_time=333)
    first = restored.applied[0]
    assert first.entry_type is EntryType.SNAPSHOT
    assert (first.log_position, first.length, first.replay) == (snap.end_position, 0, True)
    assert first.state_digest == digest_at_snapshot
    assert restored.service.calls[0] == ("start", snap.end_position)
    assert restored.acks()[0].log_position == snap.end_position
    assert restored.acks()[0].relevant_id == CLIENT_ID
    session = restored.agent.get_client_session(5)
    assert session is not None and session.response_channel == "egress-5" and session.encoded_principal == b"user"

    restored.agent.on_join_log(restored.join(snap.end_position, Role.LEADER))
    restored.agent.on_log_frames(after, commit_position=h.position)
    assert restored.applied[-1].state_digest == h.applied[-1].state_digest
    assert restored.service.state == h.service.state
    assert restored.egress[-1] == h.egress[-1]


def test_standby_snapshot_and_other_actions_do_not_snapshot(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    entries = [
        h.action(ClusterAction.SNAPSHOT, flags=1),
        h.action(ClusterAction.SUSPEND),
        h.action(ClusterAction.RESUME),
    ]
    agent.on_log_frames(entries, commit_position=h.position)
    assert ("snapshot",) not in h.service.calls
    assert len(h.acks()) == 2
    assert [a.entry_type for a in h.applied] == [EntryType.CLUSTER_ACTION] * 3


def test_action_whose_log_position_is_not_its_end_is_refused(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    bad = h.entry(
        ClusterActionRequest(leadership_term_id=0, log_position=0, timestamp=1, action=ClusterAction.SNAPSHOT, flags=0)
    )
    with pytest.raises(AgentError, match="says log_position 0"):
        agent.on_log_frames([bad], commit_position=bad.end_position)


def test_failed_snapshot_acks_null_and_the_agent_carries_on(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.service.fail_snapshot = True
    agent = h.started_and_joined()
    snap = h.action()
    f2 = h.message(-1, b"after")
    with pytest.raises(SnapshotError, match=f"log position {snap.end_position}") as info:
        agent.on_log_frames([snap, f2], commit_position=f2.end_position)
    assert isinstance(info.value.cause, OSError)
    assert h.acks()[-1].relevant_id == NULL and h.acks()[-1].log_position == snap.end_position
    assert agent.log_position == snap.end_position
    assert agent.failure is None
    agent.on_log_frames([], commit_position=f2.end_position)
    assert h.service.state[-1] == b"after"


def test_service_exception_is_a_service_error_and_nothing_of_the_entry_is_recorded(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    f1, bad, f3 = h.message(-1, b"a"), h.message(-1, b"timer-then-boom"), h.message(-1, b"c")
    sent_before = len(h.to_cm)
    with pytest.raises(ServiceError) as info:
        agent.on_log_frames([f1, bad, f3], commit_position=f3.end_position)
    err = info.value
    assert err.log_position == bad.end_position
    assert err.entry_type == EntryType.SESSION_MESSAGE
    assert f"log position {bad.end_position} (SessionMessage)" in str(err)
    assert isinstance(err.cause, RuntimeError)
    assert agent.log_position == f1.end_position
    assert [a.log_position for a in h.applied] == [f1.end_position]
    assert len(h.to_cm) == sent_before, "the ScheduleTimer of the failed entry was held back"
    assert agent.failure is err
    with pytest.raises(AgentError, match="stopped after an error"):
        agent.on_log_frames([], commit_position=f3.end_position)


def test_session_open_is_rolled_back_when_the_service_fails(tmp_path: Path) -> None:
    class RefusesSessions(RecordingService):
        def on_session_open(self, session: ClientSession, timestamp: int) -> None:
            raise ValueError("no")

    h = Harness(tmp_path, RefusesSessions())
    agent = h.started_and_joined()
    opened = h.open(3)
    with pytest.raises(ServiceError, match="SessionOpen"):
        agent.on_log_frames([opened], commit_position=opened.end_position)
    assert agent.get_client_session(3) is None
    assert agent.log_position == 0


def test_applied_rows(tmp_path: Path) -> None:
    h = Harness(tmp_path, term=2)
    agent = h.started_and_joined()
    entries = [
        h.entry(
            NewLeadershipTermEvent(
                leadership_term_id=2,
                log_position=h.position + framed_length(HEADER_LENGTH + NewLeadershipTermEvent.BLOCK_LENGTH),
                timestamp=10,
                term_base_log_position=0,
                leader_member_id=1,
                log_session_id=9,
                time_unit=ClusterTimeUnit.MILLIS,
                app_version=APP_VERSION,
            )
        ),
        h.open(4, timestamp=20),
        h.message(4, b"x", timestamp=30),
        h.entry(TimerEvent(leadership_term_id=2, correlation_id=8, timestamp=40)),
        h.action(ClusterAction.SUSPEND, timestamp=50),
        h.entry(
            SessionCloseEvent(
                leadership_term_id=2, cluster_session_id=4, timestamp=60, close_reason=CloseReason.TIMEOUT
            )
        ),
    ]
    agent.on_log_frames(entries, commit_position=h.position)
    rows = h.applied
    assert [r.entry_type for r in rows] == [
        EntryType.NEW_LEADERSHIP_TERM,
        EntryType.SESSION_OPEN,
        EntryType.SESSION_MESSAGE,
        EntryType.TIMER,
        EntryType.CLUSTER_ACTION,
        EntryType.SESSION_CLOSE,
    ]
    assert [r.cluster_time for r in rows] == [10, 20, 30, 40, 50, 60]
    for row, f in zip(rows, entries, strict=True):
        assert row.log_position == f.end_position
        assert row.length == f.length
        assert row.leadership_term_id == 2
        expected = entry_digest(frame(f.payload, f.position, 2))
        assert row.entry_digest == expected
        assert len(row.state_digest) == 16
        assert row.replay is False
    digests = [r.state_digest for r in rows]
    assert digests[1] != digests[0] and digests[2] != digests[1]
    assert digests[4] == digests[3], "SUSPEND does not change service state"


def test_callbacks_see_the_entry_position_and_time(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    seen: list[tuple[int, int]] = []
    original = h.service.on_timer_event

    def on_timer_event(correlation_id: int, timestamp: int) -> None:
        seen.append((agent.log_position, agent.time))
        original(correlation_id, timestamp)

    h.service.on_timer_event = on_timer_event  # type: ignore[method-assign]
    f = h.entry(TimerEvent(leadership_term_id=0, correlation_id=1, timestamp=1234))
    agent.on_log_frames([f], commit_position=f.end_position)
    assert seen == [(f.end_position, 1234)]
    assert h.service.calls[-1] == ("timer", 1, 1234)


def test_sessions_and_egress_only_from_the_leader(tmp_path: Path) -> None:
    h = Harness(tmp_path, term=3)
    agent = h.started_and_joined(Role.FOLLOWER)
    f1, f2 = h.open(7), h.message(7, b"hi", timestamp=99)
    agent.on_log_frames([f1, f2], commit_position=f2.end_position)
    assert h.service.calls[-1] == ("message", 7, 99, b"hi")
    assert h.egress == [], "a follower's service does not send egress"

    agent.on_join_log(h.join(f2.end_position, Role.LEADER))
    f3 = h.message(7, b"again", timestamp=120)
    agent.on_log_frames([f3], commit_position=f3.end_position)
    channel, session_id, message = h.egress[-1]
    assert (channel, session_id) == ("egress-7", 7)
    assert decode(message) == SessionMessageHeader(
        leadership_term_id=3, cluster_session_id=7, timestamp=120, payload=b"re:again"
    )
    close = h.entry(
        SessionCloseEvent(
            leadership_term_id=3, cluster_session_id=7, timestamp=130, close_reason=CloseReason.CLIENT_ACTION
        )
    )
    agent.on_log_frames([close], commit_position=close.end_position)
    assert agent.get_client_session(7) is None
    assert h.service.calls[-1] == ("close", 7, 130, CloseReason.CLIENT_ACTION)


def test_log_end_reverts_to_follower(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined(Role.LEADER)
    agent.on_log_end()
    assert agent.role is Role.FOLLOWER
    assert h.service.calls[-1] == ("role", Role.FOLLOWER)
    f = h.message(-1, b"late")
    agent.on_log_frames([f], commit_position=f.end_position)
    assert agent.ignored["no active log"] == 1
    assert h.service.state == []


def test_service_messages_to_the_consensus_module(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    entries = [
        h.open(2),
        h.message(2, b"timer 11 500"),
        h.message(2, b"cancel 11"),
        h.message(2, b"offer hello"),
        h.message(2, b"close-me"),
        h.message(-3, b"from a service"),
    ]
    agent.on_log_frames(entries, commit_position=h.position)
    sent = [m for m in h.to_cm if not isinstance(m, ServiceAck)]
    assert sent[0] == ScheduleTimer(correlation_id=11, deadline=500)
    assert sent[1] == CancelTimer(correlation_id=11)
    assert sent[2] == SessionMessageHeader(
        leadership_term_id=0, cluster_session_id=SERVICE_ID, timestamp=100, payload=b"hello"
    )
    assert sent[3] == CloseSession(cluster_session_id=2)
    assert agent.get_client_session(2).is_closing  # type: ignore[union-attr]
    assert h.service.calls[-1] == ("message", None, 100, b"from a service")


def test_closing_an_unknown_session_is_a_cluster_error(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    f = h.message(-1, b"close-unknown")
    with pytest.raises(ServiceError) as info:
        agent.on_log_frames([f], commit_position=f.end_position)
    assert isinstance(info.value.cause, ClusterError)


def test_no_sending_from_lifecycle_callbacks(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.service.send_from_role_change = True
    h.agent.start()
    with pytest.raises(ServiceError, match="RoleChange") as info:
        h.agent.on_join_log(h.join(0, Role.LEADER))
    assert isinstance(info.value.cause, ClusterError)
    assert "not allowed from on_role_change" in str(info.value.cause)


def test_termination_position(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    f1, f2 = h.message(-1, b"a"), h.message(-1, b"b")
    agent.on_service_termination_position(f1.end_position)
    assert not agent.is_terminated
    agent.on_log_frames([f1, f2], commit_position=f2.end_position)
    assert agent.is_terminated
    assert h.service.state == [b"a"], "nothing past the termination position"
    assert h.service.calls[-1] == ("terminate", f1.end_position)
    assert h.acks()[-1].log_position == f1.end_position
    agent.on_log_frames([], commit_position=f2.end_position)
    assert h.service.state == [b"a"]


def test_termination_position_zero_terminates_at_once(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    agent.on_service_message(ServiceTerminationPosition(log_position=0).encode())
    assert agent.is_terminated and h.acks()[-1].ack_id == 2


def test_request_service_ack_waits_for_the_position(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    f1 = h.message(-1, b"a")
    agent.on_service_message(RequestServiceAck(log_position=f1.end_position).encode())
    assert len(h.acks()) == 2
    agent.on_log_frames([f1], commit_position=f1.end_position)
    assert h.acks()[-1] == ServiceAck(
        log_position=f1.end_position, timestamp=100, ack_id=2, relevant_id=NULL, service_id=SERVICE_ID
    )


def test_service_message_dispatch(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.agent.start()
    h.agent.on_service_message(h.join(0, Role.FOLLOWER).encode())
    assert len(h.acks()) == 2
    f1, f2 = h.message(-1, b"a"), h.message(-1, b"b")
    block = LogBlock(
        leadership_term_id=0,
        start_position=0,
        commit_position=f1.end_position,
        leader_member_id=2,
        log_session_id=9,
        entries=frame(f1.payload, 0, 0) + frame(f2.payload, f1.end_position, 0),
    )
    h.agent.on_service_message(block.encode())
    assert h.service.state == [b"a"] and h.agent.pending_frames == 1
    response = ClusterMembersResponse(
        correlation_id=1, leader_member_id=2, active_members="0,1,2", passive_followers=""
    )
    h.agent.on_service_message(response.encode())
    assert h.agent.cluster_members == response
    h.agent.on_service_message(b"\x00\x01garbage")
    h.agent.on_service_message(CancelTimer(correlation_id=1).encode())
    assert h.agent.ignored["undecodable service message"] == 1
    assert h.agent.ignored["not a service message"] == 1


def test_new_leadership_term_event(tmp_path: Path) -> None:
    h = Harness(tmp_path, term=4)
    agent = h.started_and_joined()
    nlte = h.entry(
        NewLeadershipTermEvent(
            leadership_term_id=4,
            log_position=64,
            timestamp=10,
            term_base_log_position=0,
            leader_member_id=2,
            log_session_id=9,
            time_unit=ClusterTimeUnit.MICROS,
            app_version=APP_VERSION,
        )
    )
    offer = h.message(-1, b"offer x")
    agent.on_log_frames([nlte, offer], commit_position=h.position)
    assert ("nlte", 4, 64, 2, ClusterTimeUnit.MICROS) in h.service.calls
    assert agent.leadership_term_id == 4 and agent.time_unit is ClusterTimeUnit.MICROS
    sent = [m for m in h.to_cm if isinstance(m, SessionMessageHeader)]
    assert sent[-1].leadership_term_id == 4


def test_incompatible_app_version_in_the_log_is_refused(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    agent = h.started_and_joined()
    nlte = h.entry(
        NewLeadershipTermEvent(
            leadership_term_id=0,
            log_position=64,
            timestamp=10,
            term_base_log_position=0,
            leader_member_id=2,
            log_session_id=9,
            time_unit=ClusterTimeUnit.MILLIS,
            app_version=2 << 16,
        )
    )
    with pytest.raises(AgentError, match="incompatible version"):
        agent.on_log_frames([nlte], commit_position=nlte.end_position)


def test_misuse(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    with pytest.raises(AgentError, match="start"):
        h.agent.on_join_log(h.join(0))
    h.agent.start()
    with pytest.raises(AgentError, match="twice"):
        h.agent.start()
    h.agent.on_join_log(h.join(0))
    garbage = h.entry(b"\x00" * 16)
    with pytest.raises(AgentError, match="undecodable committed log entry"):
        h.agent.on_log_frames([garbage], commit_position=garbage.end_position)


def test_the_agent_is_a_cluster_handle(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.started_and_joined()
    assert isinstance(h.agent, Cluster)
    assert h.service.cluster is h.agent
    assert (h.agent.member_id, h.agent.service_id) == (1, SERVICE_ID)


def test_corrupt_log_block_is_ignored_with_a_counted_reason_and_applies_nothing() -> None:
    from clusterlab.core.codec.framing import frame
    from clusterlab.core.codec.session import encode_session_message
    from clusterlab.core.codec.transport import LogBlock
    from clusterlab.core.service.agent import ClusteredServiceAgent
    from clusterlab.harness.services.kv import KeyValueService, put

    acks: list[bytes] = []
    agent = ClusteredServiceAgent(0, 0, KeyValueService(), acks.append, lambda *_: None, None)
    agent.start()
    good = frame(encode_session_message(0, -1, 1, put(1, "k", "v")), 0, 0)
    damaged = bytearray(good)
    damaged[40] ^= 0xFF  # inside the payload: the frame checksum no longer matches
    block = LogBlock(
        leadership_term_id=0,
        start_position=0,
        commit_position=len(good),
        leader_member_id=0,
        log_session_id=1,
        entries=bytes(damaged),
    ).encode()
    agent.on_service_message(block)
    assert agent.ignored["corrupt log block"] == 1
    assert agent.log_position == 0
    assert agent.service.entries == {}


def test_entry_digests_from_the_block_bytes_equal_digests_of_the_reframed_entries() -> None:
    """A runtime that hands the agent the block's bytes gets the same applied rows (the entry digest
    read from the bytes rather than framed again), including for entries buffered across blocks."""
    from clusterlab.core.codec.framing import frame, walk_frames
    from clusterlab.core.codec.session import encode_session_message
    from clusterlab.harness.services.kv import KeyValueService, put

    rows: dict[str, list[AppliedEntry]] = {"plain": [], "block": []}
    agents = {}
    for name in rows:
        agent = ClusteredServiceAgent(
            0, 0, KeyValueService(), lambda _m: None, lambda *_: None, None, rows[name].append
        )
        agent.start(None)
        agent.on_join_log(
            JoinLog(log_position=0, max_log_position=MAX_LOG_POSITION, member_id=0, is_startup=1,
                    role=int(Role.FOLLOWER), log_session_id=1, log_stream_id=1, log_channel="")
        )  # fmt: skip
        agents[name] = agent
    position, blocks = 0, []
    for b in range(3):
        start, chunks = position, []
        for i in range(5):
            data = frame(encode_session_message(0, 7, b * 10 + i, put(b * 10 + i, "k", "v" * i)), position, 0)
            chunks.append(data)
            position += len(data)
        blocks.append((start, b"".join(chunks)))
    commits = [blocks[1][0], blocks[2][0] + 64, position]  # the second block waits for a later commit
    for (start, entries), commit in zip(blocks, commits, strict=True):
        frames = walk_frames(entries, start).frames
        agents["plain"].on_log_frames(frames, commit)
        agents["block"].on_log_frames(frames, commit, block=entries, block_position=start)
    assert len(rows["block"]) == 15
    assert rows["block"] == rows["plain"]


def test_a_committed_block_applies_like_entries_delivered_one_at_a_time(tmp_path: Path) -> None:
    """The block path (a run of committed session messages applied in one loop) and the general
    path (entries buffered, then delivered one by one as the commit position passes them) give the
    same applied rows, service calls, egress and messages to the consensus module."""
    harnesses = [Harness(tmp_path / "block", term=3), Harness(tmp_path / "deliver", term=3)]
    for h in harnesses:
        h.started_and_joined(Role.LEADER)
    built = []
    for h in harnesses:
        built.append(
            [
                h.open(4, timestamp=20),
                h.message(4, b"a", timestamp=30),
                h.message(4, b"timer 9 500", timestamp=31),
                h.message(-1, b"offer zz", timestamp=32),
                h.entry(TimerEvent(leadership_term_id=3, correlation_id=9, timestamp=40)),
                h.message(4, b"b", timestamp=41),
                h.message(4, b"cancel 9", timestamp=42),
                h.message(4, b"past the commit", timestamp=43),
            ]
        )
    block_h, deliver_h = harnesses
    frames = built[0]
    commit = frames[-2].end_position
    assert block_h.agent.on_log_frames(frames, commit) == 7
    deliver_h.agent.on_log_frames(built[1], 0)
    assert deliver_h.agent.pending_frames == 8
    assert deliver_h.agent.on_log_frames([], commit) == 7
    for h in harnesses:
        assert h.agent.log_position == commit
        assert h.agent.pending_frames == 1
    assert block_h.applied == deliver_h.applied
    assert [r.entry_type for r in block_h.applied] == [EntryType.SESSION_OPEN] + [EntryType.SESSION_MESSAGE] * 3 + [
        EntryType.TIMER
    ] + [EntryType.SESSION_MESSAGE] * 2
    assert block_h.service.calls == deliver_h.service.calls
    assert block_h.egress == deliver_h.egress and len(block_h.egress) == 2  # the replies to "a" and "b"
    assert block_h.to_cm == deliver_h.to_cm
    assert [type(m) for m in block_h.to_cm[-3:]] == [ScheduleTimer, SessionMessageHeader, CancelTimer]


def test_applied_runs_give_the_rows_on_applied_gives_in_log_order(tmp_path: Path) -> None:
    """With ``on_applied_run`` a block's run of session messages arrives as one columnar AppliedRun;
    read back in order with ``on_applied``'s rows, they are the rows an agent without it gives, and a
    run cut by a failing entry still gives the rows of the entries applied before it."""
    plain = Harness(tmp_path / "plain", term=3)
    given: list[AppliedRun] = []

    def on_run(run: AppliedRun) -> None:
        given.append(run)
        runs.applied.extend(run.entries())  # in log order with the rows given one by one

    runs = Harness(tmp_path / "runs", term=3, on_applied_run=on_run)
    rows = runs.applied
    for h in (plain, runs):
        h.started_and_joined(Role.LEADER)
    built = [
        [
            h.open(4, timestamp=20),
            h.message(4, b"a", timestamp=30),
            h.message(4, b"timer 9 500", timestamp=31),
            h.entry(TimerEvent(leadership_term_id=3, correlation_id=9, timestamp=40)),
            h.message(4, b"b", timestamp=41),
            h.message(4, b"c", timestamp=42),
            h.message(4, b"boom", timestamp=43),
            h.message(4, b"never", timestamp=44),
        ]
        for h in (plain, runs)
    ]
    for h, frames in zip((plain, runs), built, strict=True):
        with pytest.raises(ServiceError):
            h.agent.on_log_frames(frames, frames[-1].end_position)
    assert [len(r.log_positions) for r in given] == [2, 2]  # a, timer | b, c (boom failed, never not reached)
    assert all(r.replay is False for r in given)
    assert rows == plain.applied
    assert [r.entry_type for r in rows] == [EntryType.SESSION_OPEN] + [EntryType.SESSION_MESSAGE] * 2 + [
        EntryType.TIMER
    ] + [EntryType.SESSION_MESSAGE] * 2
    assert runs.egress == plain.egress and runs.to_cm == plain.to_cm
