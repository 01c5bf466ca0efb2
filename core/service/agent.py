"""Aeron's ``ClusteredServiceAgent``, sans-IO: feeds the committed log to a ``ClusteredService`` and
talks to its consensus module over the service control stream (docs/protocol.md b.13-b.15, e.3, e.7).

Inputs (the runtime or simulator calls these; nothing here reads a clock or a socket):

* ``start(snapshot_recording_id)``: recovery. Loads the snapshot (or starts empty), calls
  ``on_start``, acks with ackId 0.
* ``on_join_log(JoinLog)``: the service joins a log (a local replay or the live log) at exactly its
  own position ("Cluster log must be contiguous"), acks, and takes the JoinLog's role.
* ``on_log_frames(frames, commit_position, is_replay)``: log entries; only those ending at or before
  the commit position (and the JoinLog's ``max_log_position``) are applied, in order. Aeron's
  ``BoundedLogAdapter``; the rest wait for the commit position to advance.
* ``on_service_termination_position``, ``on_request_service_ack``, ``on_log_end``, and
  ``on_service_message(bytes)`` which decodes any CM -> service message and dispatches it.
* ``close()``: the service container closes without a crash (Aeron ``onClose``): a service that
  started and was not told yet gets ``on_terminate``, once.

Outputs: encoded messages to ``to_consensus_module`` (ServiceAck, ScheduleTimer, CancelTimer,
CloseSession, SessionMessageHeader for ``Cluster.offer``), encoded egress SessionMessageHeaders to
``egress(response_channel, cluster_session_id, message)`` (leader only), and one ``AppliedEntry`` per
applied entry to ``on_applied`` (the trace's ``applied`` table; with ``on_applied_run`` as well, a
block's run of session messages arrives there as one columnar ``AppliedRun`` instead). Trace events
go to ``events`` (the node's ``EventSink`` signature): ``start`` once started, and ``service_terminate``
each time the service is told ``on_terminate`` (docs/trace-schema.md).

What a service sends while handling an entry is held back until the entry has been applied, so a
service that raises (``ServiceError``) leaves no trace of that entry: nothing sent, no applied row,
position unchanged. The agent then refuses further input; the member stops and recovers.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence
from enum import StrEnum
from functools import partial
from typing import Any, NamedTuple

from clusterlab.core.archive.snapshots import SnapshotStore
from clusterlab.core.codec import (
    HDR_TYPE_PAD,
    ClusterAction,
    ClusterActionRequest,
    ClusterActionRequestFlags,
    ClusterMembersExtendedResponse,
    ClusterMembersQuery,
    ClusterMembersResponse,
    ClusterTimeUnit,
    DecodeError,
    Frame,
    JoinLog,
    LogBlock,
    LogEndOfStream,
    MembershipChangeEvent,
    NewLeadershipTermEvent,
    RequestServiceAck,
    ServiceAck,
    ServiceTerminationPosition,
    SessionCloseEvent,
    SessionMessageHeader,
    SessionOpenEvent,
    TimerEvent,
    frame,
)
from clusterlab.core.codec import CancelTimer as CancelTimerMsg
from clusterlab.core.codec import ClientSession as ClientSessionRecord
from clusterlab.core.codec import CloseSession as CloseSessionMsg
from clusterlab.core.codec import ScheduleTimer as ScheduleTimerMsg
from clusterlab.core.codec.digests import entry_digest, records_digest
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.codec.header import peek_template_id
from clusterlab.core.codec.registry import decode, message_name
from clusterlab.core.codec.session import (
    SESSION_HEADER_LENGTH,
    encode_session_message,
    session_message_fields,
    unpack_session_message,
)
from clusterlab.core.consensus.context import APP_VERSION, EventSink, Role, null_event_sink
from clusterlab.core.service.api import (
    UNDIGESTED,
    CallbackScope,
    ClientSession,
    ClusteredService,
    ClusterError,
    ClusterTerminationException,
    digest_due,
    has_own_digest,
)
from clusterlab.core.service.snapshot import (
    SnapshotFormatError,
    SnapshotImage,
    SnapshotWriter,
    decode_service_snapshot,
    encode_service_snapshot,
)

NULL_VALUE = -1
NULL_POSITION = -1
MAX_LOG_POSITION = 2**63 - 1  # JoinLog.max_log_position of a live log (Aeron Long.MAX_VALUE)
DIGEST_SIZE = 16


class EntryType(StrEnum):
    """``applied.entry_type`` values (docs/trace-schema.md)."""

    SESSION_MESSAGE = "SessionMessage"
    SESSION_OPEN = "SessionOpen"
    SESSION_CLOSE = "SessionClose"
    TIMER = "Timer"
    CLUSTER_ACTION = "ClusterAction"
    NEW_LEADERSHIP_TERM = "NewLeadershipTerm"
    MEMBERSHIP_CHANGE = "MembershipChange"  # deprecated in Aeron; applied as a no-op
    SNAPSHOT = "Snapshot"  # the row a service restored from a snapshot writes first


class AppliedEntry(NamedTuple):
    """One row of the trace's ``applied`` table, minus what the recorder adds (run, member, service,
    incarnation). A NamedTuple (immutable, compared by value) rather than a frozen dataclass: one is
    made per applied entry on every member while recording, and a tuple is three times cheaper."""

    log_position: int  # end of the entry (for SNAPSHOT: the snapshot's position)
    length: int  # framed length in the log (0 for SNAPSHOT)
    leadership_term_id: int
    entry_type: EntryType
    cluster_time: int
    entry_digest: bytes  # XXH3-128 of the framed entry (for SNAPSHOT: of its records), codec.digests
    state_digest: bytes  # service.state_digest() after applying it
    replay: bool

    def describe(self) -> str:
        """One canonical line."""
        return (
            f"AppliedEntry({self.entry_type} position={self.log_position} length={self.length} "
            f"term={self.leadership_term_id} time={self.cluster_time} entry={self.entry_digest.hex()} "
            f"state={self.state_digest.hex()}{' replay' if self.replay else ''})"
        )


class AppliedRun(NamedTuple):
    """Consecutive session messages applied from one block, as columns: the rows the agent would
    give ``on_applied`` one AppliedEntry at a time (entry type SESSION_MESSAGE, one ``replay`` flag).
    Given to ``on_applied_run`` so that a recorder extends its columns once per run instead of
    building and transposing a tuple per entry."""

    log_positions: list[int]
    lengths: list[int]
    leadership_term_ids: list[int]
    cluster_times: list[int]
    entry_digests: list[bytes]
    state_digests: list[bytes]
    replay: bool

    def entries(self) -> list[AppliedEntry]:
        """The run as the AppliedEntry rows ``on_applied`` would have received, in order."""
        session_message = EntryType.SESSION_MESSAGE
        return [
            AppliedEntry(position, length, term, session_message, time, entry, state, self.replay)
            for position, length, term, time, entry, state in zip(
                self.log_positions,
                self.lengths,
                self.leadership_term_ids,
                self.cluster_times,
                self.entry_digests,
                self.state_digests,
                strict=True,
            )
        ]


class ServiceError(Exception):
    """The user's service raised while handling something; names where in the log that was."""

    def __init__(self, log_position: int, entry_type: str, cause: BaseException) -> None:
        super().__init__(
            f"service failed at log position {log_position} ({entry_type}): {type(cause).__name__}: {cause}"
        )
        self.log_position = log_position
        self.entry_type = entry_type
        self.cause = cause


class ServiceTerminated(ServiceError):
    """The service raised ClusterTerminationException: it asked to stop (Aeron's service container
    closes). ``on_terminate`` has been called; the agent applies nothing more. Its runtime ends the
    service, and the consensus module learns that its service closed (the member terminates)."""


class SnapshotError(ServiceError):
    """Taking a snapshot failed. The entry counts as applied (a snapshot does not change state) and the
    consensus module got an ack with a NULL recording id, so the agent stays usable (as in Aeron)."""


class AgentError(Exception):
    """The agent was driven against the protocol (out-of-order log, a JoinLog at the wrong position,
    an undecodable committed entry, a bad snapshot), or used after it failed."""


class LogContiguityError(AgentError):
    """A log or JoinLog does not continue exactly where the service's processing stopped."""


# What the agent holds back while an entry is applied: see ClusteredServiceAgent._held.
_Held = bytes | tuple[str, int, bytes]
# What applying an entry other than a session message does: its type and timestamp, the service callback
# (None: none) and the undo of the agent's own change should the callback fail (ClusteredServiceAgent._entry_action).
_EntryAction = tuple[EntryType, int, Callable[[], object] | None, Callable[[], object] | None]

_digest = entry_digest  # XXH3-128 (core/codec/digests.py)
_records_digest = records_digest


def _major(version: int) -> int:
    return (version >> 16) & 0xFF


def _entry_digest_in(block: bytes | None, block_position: int, f: Frame) -> bytes:
    """The entry digest of ``f``: hashed from its bytes in ``block`` (the LogBlock it came in, which
    starts at ``block_position``) when it lies there (a bytes slice is cheaper to hash than a
    memoryview slice), else from the frame built again."""
    position = f.position
    end = f.end_position
    if block is not None and position >= block_position and end <= block_position + len(block):
        return _digest(block[position - block_position : end - block_position])
    return _digest(frame(f.payload, position, f.leadership_term_id, f.frame_type))


def _noop_log(line: str) -> None:
    """Default log sink: drop the line."""


_NO_LIFECYCLE = ""
_ON_SESSION_MESSAGE = "on_session_message"
# The service callback each entry type calls (the callback scope's names; ClusterAction: on_take_snapshot).
_CALLBACKS: dict[EntryType, str] = {
    EntryType.TIMER: "on_timer_event",
    EntryType.SESSION_OPEN: "on_session_open",
    EntryType.SESSION_CLOSE: "on_session_close",
    EntryType.NEW_LEADERSHIP_TERM: "on_new_leadership_term_event",
}


class ClusteredServiceAgent:
    """Runs one ``ClusteredService`` for one member. Implements the ``Cluster`` handle the service uses
    (as Aeron's agent does)."""

    def __init__(
        self,
        service_id: int,
        member_id: int,
        service: ClusteredService,
        to_consensus_module: Callable[[bytes], None],
        egress: Callable[[str, int, bytes], None],
        snapshot_store: SnapshotStore | None,
        on_applied: Callable[[AppliedEntry], None] | None = None,
        *,
        on_applied_run: Callable[[AppliedRun], None] | None = None,
        app_version: int = APP_VERSION,
        client_id: int = 0,
        log: Callable[[str], None] | None = None,
        callback_scope: CallbackScope | None = None,
        events: EventSink | None = None,
    ) -> None:
        self._service_id = service_id
        self._member_id = member_id
        self.service = service
        self._to_cm = to_consensus_module
        self._egress = egress
        self.snapshot_store = snapshot_store
        # The service's own digest, or one derived from its snapshot at the positions digest_due picks.
        self._digest_of: Callable[[], bytes] = service.state_digest if has_own_digest(service) else self._derived_digest
        self._on_applied = on_applied
        # With on_applied set, a block's run of session messages goes here as one AppliedRun (in
        # order with on_applied's rows: the run is given before the next entry is applied).
        self._on_applied_run = on_applied_run
        self.app_version = app_version
        self.client_id = client_id  # relevantId of the first ack: identifies this service incarnation
        self._log = log or _noop_log
        # The trace's event seam (the node's EventSink signature): ``start`` once started, declaring
        # ``service_terminate_events``, and one ``service_terminate`` when the service is told on_terminate.
        self._events: EventSink = events or null_event_sink
        # A test harness's observer of the service's callbacks (api.CallbackScope); None in production.
        self._scope = callback_scope

        self._role = Role.FOLLOWER
        self._log_position = 0
        self._cluster_time = 0
        self._leadership_term_id = NULL_VALUE
        self._time_unit = ClusterTimeUnit.MILLIS
        self._next_ack_id = 0
        self._sessions: dict[int, ClientSession] = {}

        self._started = False
        self._log_active = False
        self._max_log_position = NULL_POSITION
        self._commit_position = NULL_POSITION
        self._frames: deque[tuple[Frame, bool]] = deque()
        self._buffered_end = 0  # position after the last buffered frame
        self._termination_position = NULL_POSITION
        self._requested_ack_position = NULL_POSITION
        self._terminated = False
        # Aeron isServiceActive: started without error and not yet told on_terminate (close() tells it).
        self._active = False
        self._failure: BaseException | None = None

        self._lifecycle = _NO_LIFECYCLE  # set while a callback that must not send runs
        # Sends held back while an entry is applied: a message to the consensus module (bytes) or an
        # egress (response_channel, cluster_session_id, message).
        self._held: list[_Held] | None = None

        self.cluster_members: ClusterMembersResponse | ClusterMembersExtendedResponse | None = None
        self._block: bytes | None = None  # the framed bytes of the block being applied (on_log_frames)
        self._block_position = 0
        self.applied_count = 0  # entries applied (and snapshots loaded), whether or not on_applied listens
        self.ignored: Counter[str] = Counter()
        self.errors: list[BaseException] = []  # swallowed as in Aeron (on_terminate)

    # --- state ----------------------------------------------------------------------------------------

    @property
    def service_id(self) -> int:
        return self._service_id

    @property
    def member_id(self) -> int:
        return self._member_id

    @property
    def role(self) -> Role:
        if self._scope is not None:
            self._scope.role_read()
        return self._role

    @property
    def time(self) -> int:
        return self._cluster_time

    @property
    def time_unit(self) -> ClusterTimeUnit:
        return self._time_unit

    @property
    def log_position(self) -> int:
        """Position after the last applied entry (or of the loaded snapshot)."""
        return self._log_position

    @property
    def leadership_term_id(self) -> int:
        return self._leadership_term_id

    @property
    def commit_position(self) -> int:
        return self._commit_position

    @property
    def next_ack_id(self) -> int:
        return self._next_ack_id

    @property
    def pending_frames(self) -> int:
        """Entries received but not yet applied (past the commit position)."""
        return len(self._frames)

    @property
    def is_terminated(self) -> bool:
        return self._terminated

    @property
    def is_active(self) -> bool:
        """Started without error and not yet told ``on_terminate`` (Aeron ``isServiceActive``)."""
        return self._active

    @property
    def failure(self) -> BaseException | None:
        """The error that stopped the agent, if any."""
        return self._failure

    # --- Cluster handle (what the service calls) ----------------------------------------------------

    def schedule_timer(self, correlation_id: int, deadline: int) -> bool:
        """Cluster.schedule_timer: a ScheduleTimer to the consensus module."""
        self._check_valid_invocation()
        self._send_cm(ScheduleTimerMsg(correlation_id=correlation_id, deadline=deadline).encode())
        return True

    def cancel_timer(self, correlation_id: int) -> bool:
        """Cluster.cancel_timer: a CancelTimer to the consensus module."""
        self._check_valid_invocation()
        self._send_cm(CancelTimerMsg(correlation_id=correlation_id).encode())
        return True

    def offer(self, payload: bytes) -> bool:
        """Cluster.offer: a service-originated message; the header's session id carries the service id
        (docs/protocol.md c.8) and the consensus module appends it to the log."""
        self._check_valid_invocation()
        self._send_cm(
            encode_session_message(self._leadership_term_id, self._service_id, self._cluster_time, bytes(payload))
        )
        return True

    def close_client_session(self, cluster_session_id: int) -> bool:
        """Cluster.close_client_session: a CloseSession to the consensus module."""
        self._check_valid_invocation()
        session = self._sessions.get(cluster_session_id)
        if session is None:
            raise ClusterError(f"unknown clusterSessionId: {cluster_session_id}")
        if session.is_closing:
            return True
        self._send_cm(CloseSessionMsg(cluster_session_id=cluster_session_id).encode())
        session.is_closing = True
        return True

    def get_client_session(self, cluster_session_id: int) -> ClientSession | None:
        return self._sessions.get(cluster_session_id)

    def client_sessions(self) -> list[ClientSession]:
        return [self._sessions[k] for k in sorted(self._sessions)]

    def query_cluster_members(self, correlation_id: int, extended: bool = False) -> None:
        """Send a ClusterMembersQuery; the answer lands in ``cluster_members``."""
        self._to_cm(
            ClusterMembersQuery(
                correlation_id=correlation_id, extended=BooleanType.TRUE if extended else BooleanType.FALSE
            ).encode()
        )

    def _offer_egress(self, session: ClientSession, payload: bytes) -> bool:
        self._check_valid_invocation()
        if self._role is not Role.LEADER:
            return True  # Aeron MOCKED_OFFER: followers' services behave as if sent
        message = encode_session_message(self._leadership_term_id, session.id, self._cluster_time, payload)
        if self._held is not None:
            self._held.append((session.response_channel, session.id, message))
        else:
            self._egress(session.response_channel, session.id, message)
        return True

    def _send_cm(self, message: bytes) -> None:
        if self._held is not None:
            self._held.append(message)
        else:
            self._to_cm(message)

    def _check_valid_invocation(self) -> None:
        if self._lifecycle:
            raise ClusterError(f"sending messages or scheduling timers is not allowed from {self._lifecycle}")

    # --- recovery -------------------------------------------------------------------------------------

    def start(self, snapshot_recording_id: int | None = None, *, cluster_time: int = 0) -> None:
        """Recover (Aeron ``recoverState``): load the snapshot or start empty, then ack with ackId 0 and
        relevantId = ``client_id`` (NULL if starting failed, and the error is raised after the ack: the
        consensus module then closes, Aeron "failed to start clustered service(s)")."""
        if self._started:
            raise AgentError("start() called twice")
        self._started = True
        self._cluster_time = cluster_time
        error: BaseException | None = None
        try:
            if snapshot_recording_id is None:
                self._call_lifecycle("on_start", lambda: self.service.on_start(self, None), "Start")
            else:
                self.load_snapshot(snapshot_recording_id)
        except Exception as e:
            error = e
        self._ack(self._log_position, self.client_id if error is None else NULL_VALUE)
        if error is not None:
            self._failure = error
            raise error
        self._active = True
        self._events(
            "start",
            self._member_id,
            None,
            self._log_position,
            {
                "service_id": self._service_id,
                "snapshot_recording_id": snapshot_recording_id,
                "service_terminate_events": True,  # each on_terminate is a service_terminate event
            },
        )

    def close(self) -> None:
        """The service container closes (Aeron ``ClusteredServiceAgent.onClose``): an active service
        is told ``on_terminate`` - once, whatever stopped it (a graceful stop of its member, its node
        gone, a failure), errors swallowed and kept in ``errors``. A service that failed to start or
        was already told (SHUTDOWN/ABORT, ClusterTerminationException) is not told again. A crash
        (SIGKILL) runs no close at all."""
        if not self._active:
            return
        self._active = False
        self._notify_terminate("close")

    def load_snapshot(self, recording_id: int) -> SnapshotImage:
        """Restore sessions and position from a service snapshot recording, hand the application part to
        ``on_start``, and write the ``Snapshot`` applied row. Called by :meth:`start`."""
        if self.snapshot_store is None:
            raise AgentError(f"cannot load snapshot {recording_id}: the agent has no snapshot store")
        records = self.snapshot_store.read_snapshot(recording_id)
        try:
            snapshot = decode_service_snapshot(records)
        except SnapshotFormatError as e:
            raise AgentError(f"snapshot recording {recording_id}: {e}") from e
        if _major(snapshot.app_version) != _major(self.app_version):
            raise AgentError(
                f"incompatible app version: {self.app_version:#x} snapshot={snapshot.app_version:#x} "
                f"(recording {recording_id})"
            )
        self._sessions.clear()
        for record in snapshot.sessions:
            self._add_session(record)
        self._log_position = snapshot.log_position
        self._buffered_end = snapshot.log_position
        self._leadership_term_id = snapshot.leadership_term_id
        self._time_unit = snapshot.time_unit
        image = snapshot.image()
        self._call_lifecycle("on_start", lambda: self.service.on_start(self, image), "Snapshot")
        state_digest = self._state_digest("Snapshot")
        self.applied_count += 1
        self._emit_applied(
            AppliedEntry(
                log_position=snapshot.log_position,
                length=0,
                leadership_term_id=snapshot.leadership_term_id,
                entry_type=EntryType.SNAPSHOT,
                cluster_time=self._cluster_time,
                entry_digest=_records_digest(records),
                state_digest=state_digest,
                replay=True,
            )
        )
        self._log(
            f"service {self._service_id}: loaded snapshot {recording_id} at position {snapshot.log_position}, "
            f"{len(snapshot.sessions)} sessions, {len(snapshot.app_records)} app records"
        )
        return image

    # --- CM -> service --------------------------------------------------------------------------------

    def on_service_message(self, buffer: bytes, *, is_replay: bool = False) -> None:
        """Decode any message of the CM -> service stream and dispatch it. LogBlock / LogEndOfStream are
        accepted too, for a runtime that carries the service's log on the same stream. A LogBlock that
        ends at or before the JoinLog's ``max_log_position`` of a replayed log is a replay (as is every
        block when ``is_replay``); a block's entries get their digests from its bytes."""
        try:
            msg = decode(buffer)
        except DecodeError as e:
            self._ignore("undecodable service message", f"{message_name(buffer)}: {e}")
            return
        if isinstance(msg, LogBlock):  # the common message first
            walked = msg.walk()
            if walked.error is not None:
                # A damaged block is the sender's problem, not a reason to stop: count it, apply nothing.
                self._ignore("corrupt log block", f"at {msg.start_position}: {walked.error}")
                return
            max_log_position = self._max_log_position
            replayed = max_log_position != MAX_LOG_POSITION and msg.end_position <= max_log_position
            self.on_log_frames(
                walked.frames,
                msg.commit_position,
                is_replay or replayed,
                block=msg.entries,
                block_position=msg.start_position,
            )
        elif isinstance(msg, JoinLog):
            self.on_join_log(msg)
        elif isinstance(msg, ServiceTerminationPosition):
            self.on_service_termination_position(msg.log_position)
        elif isinstance(msg, RequestServiceAck):
            self.on_request_service_ack(msg.log_position)
        elif isinstance(msg, ClusterMembersResponse | ClusterMembersExtendedResponse):
            self.cluster_members = msg
        elif isinstance(msg, LogEndOfStream):
            self.on_log_end()
        else:
            self._ignore("not a service message", type(msg).__name__)

    def on_join_log(self, join: JoinLog) -> None:
        """Join a log at ``join.log_position`` (Aeron ``onJoinLog`` + ``joinActiveLog``).

        The current log first runs to exactly the join position, as far as it is committed; entries
        buffered beyond that belong to the old stream and are dropped (the new one starts at the join
        position). The service must then be exactly at the join position."""
        self._check_usable()
        if self._terminated:
            self._ignore("terminated", join.describe())
            return
        try:
            new_role = Role(join.role)
        except ValueError:
            raise AgentError(f"JoinLog with unknown role {join.role}") from None
        if self._log_active:
            self._max_log_position = min(self._max_log_position, join.log_position)
            self._deliver()
            if self._frames:
                self._log(
                    f"service {self._service_id}: JoinLog at {join.log_position} drops {len(self._frames)} "
                    f"buffered entries of the previous log"
                )
                self._frames.clear()
        if self._log_position != join.log_position:
            raise LogContiguityError(
                f"Cluster log must be contiguous for active log event: expectedPosition={self._log_position} "
                f"eventPosition={join.log_position} (service {self._service_id} of member {self._member_id})"
            )
        self._log_active = True
        self._max_log_position = join.max_log_position
        self._buffered_end = join.log_position
        self._member_id = join.member_id
        self._ack(join.log_position, NULL_VALUE)
        if new_role is Role.LEADER:
            for session in self._sessions.values():
                session.is_closing = False  # Aeron resetClosing: a new leader re-handles close requests
        self._set_role(new_role)
        self._check_positions()

    def on_log_frames(
        self,
        frames: Sequence[Frame],
        commit_position: int,
        is_replay: bool = False,
        *,
        block: bytes | None = None,
        block_position: int = 0,
    ) -> int:
        """Receive log entries and/or a new commit position; apply every entry that is committed.
        Returns how many entries were applied.

        ``block`` (optional): the framed bytes the frames were walked from, starting at
        ``block_position``; an entry applied from it gets its ``entry_digest`` from those bytes
        instead of framing its payload again (the same bytes for a frame written by ``frame``)."""
        if block is not None and self._on_applied is not None:
            self._block, self._block_position = block, block_position
            try:
                return self._on_log_frames(frames, commit_position, is_replay)
            finally:
                self._block = None
        return self._on_log_frames(frames, commit_position, is_replay)

    def _on_log_frames(self, frames: Sequence[Frame], commit_position: int, is_replay: bool) -> int:
        self._check_usable()
        if self._terminated:
            if frames:
                self._ignore("terminated", f"{len(frames)} frames")
            return 0
        if commit_position > self._commit_position:
            self._commit_position = commit_position
        if not self._log_active:
            if frames:
                self._ignore("no active log", f"{len(frames)} frames from {frames[0].position}")
            return 0
        applied = 0
        if not self._frames and frames and frames[0].position == self._buffered_end:
            # Nothing buffered ahead: apply the committed prefix as it comes (the usual case of a
            # service fed committed blocks), buffer only the rest.
            bound = self._bound()
            i, n = 0, len(frames)
            while i < n:
                # The block's run of session messages in one call (the usual entries), then one
                # other entry through the general path.
                i = self._apply_session_run(frames, i, bound, is_replay)
                if i >= n:
                    break
                f = frames[i]
                if f.position != self._buffered_end or f.end_position > bound:
                    break
                self._buffered_end = f.end_position
                i += 1
                snapshot_error = self._apply(f, is_replay)
                if snapshot_error is not None:
                    self._buffer(frames[i:], is_replay)
                    raise snapshot_error
            applied = i
            frames = frames[i:]
        self._buffer(frames, is_replay)
        applied += self._deliver()
        self._check_positions()
        return applied

    def _buffer(self, frames: Sequence[Frame], is_replay: bool) -> None:
        for f in frames:
            expected = self._buffered_end
            if f.position != expected:
                if f.end_position <= expected:
                    # Already buffered or applied: a resend overlapping what we have.
                    self._ignore("duplicate frame", f"{f.position}..{f.end_position}")
                    continue
                raise LogContiguityError(
                    f"Cluster log must be contiguous: frame at {f.position}, expected {expected} "
                    f"(service {self._service_id} of member {self._member_id})"
                )
            self._frames.append((f, is_replay))
            self._buffered_end = f.end_position

    def on_log_end(self) -> None:
        """The log stream ended (Aeron ``closeLog``: image end-of-stream). Uncommitted entries are
        dropped, egress stops and the role reverts to FOLLOWER until the next JoinLog."""
        self._check_usable()
        if not self._log_active:
            return
        self._deliver()
        self._frames.clear()
        self._log_active = False
        self._set_role(Role.FOLLOWER)
        self._check_positions()

    def on_service_termination_position(self, log_position: int) -> None:
        """Terminate on reaching ``log_position`` (0: at once). Entries past it are not applied."""
        self._check_usable()
        if self._terminated:
            self._ignore("terminated", f"ServiceTerminationPosition {log_position}")
            return
        self._termination_position = log_position
        self._check_positions()

    def on_request_service_ack(self, log_position: int) -> None:
        """Ack once the service has reached ``log_position``."""
        self._check_usable()
        self._requested_ack_position = log_position
        self._check_positions()

    # --- applying the log -----------------------------------------------------------------------------

    def _bound(self) -> int:
        bound = min(self._commit_position, self._max_log_position)
        if self._termination_position != NULL_POSITION:
            bound = min(bound, self._termination_position)
        return bound

    def _deliver(self) -> int:
        applied = 0
        bound = self._bound()
        frames = self._frames
        while frames and frames[0][0].end_position <= bound:
            f, replay = frames[0]
            snapshot_error = self._apply(f, replay)
            frames.popleft()
            applied += 1
            if snapshot_error is not None:
                raise snapshot_error
        return applied

    def _apply(self, f: Frame, replay: bool) -> SnapshotError | None:
        """Apply one committed entry; returns a SnapshotError to raise once the entry is done."""
        if f.frame_type == HDR_TYPE_PAD:
            self._log_position = f.end_position
            return None
        msg = self._decode_entry(f, replay)
        if msg is None:
            return None  # a session message, applied
        saved = (self._log_position, self._cluster_time, self._leadership_term_id, self._time_unit, self._next_ack_id)
        snapshot_failure: list[BaseException] = []
        entry_type, timestamp, action, undo = self._entry_action(msg, f, snapshot_failure)
        self._run_entry(f, replay, saved, entry_type, timestamp, action, undo)
        if snapshot_failure:
            return SnapshotError(f.end_position, entry_type, snapshot_failure[0])
        return None

    def _decode_entry(self, f: Frame, replay: bool) -> Any:
        """The entry's message; a session message is applied here instead and gives None. An entry
        that does not decode fails the agent."""
        payload = f.payload
        fields = session_message_fields(payload)
        if fields is not None:
            self._apply_session_message(f, replay, fields[1], fields[2], payload[SESSION_HEADER_LENGTH:])
            return None
        try:
            if peek_template_id(payload) == SessionMessageHeader.TEMPLATE_ID:
                _term, session_id, timestamp, body = unpack_session_message(payload)
                self._apply_session_message(f, replay, session_id, timestamp, body)
                return None
            return decode(payload)
        except DecodeError as e:
            self._failure = AgentError(f"undecodable committed log entry at {f.position}..{f.end_position}: {e}")
            raise self._failure from e

    def _entry_action(self, msg: Any, f: Frame, snapshot_failure: list[BaseException]) -> _EntryAction:
        """What applying a log entry other than a session message does: its type, its timestamp, the
        service callback to call (None: none) and how to undo the agent's own change to its sessions
        if that callback fails. A snapshot action's failure is put in ``snapshot_failure``."""
        end = f.end_position
        if isinstance(msg, TimerEvent):
            action = partial(self.service.on_timer_event, msg.correlation_id, msg.timestamp)
            return EntryType.TIMER, msg.timestamp, action, None
        if isinstance(msg, SessionOpenEvent):
            return self._session_open_action(msg, end)
        if isinstance(msg, SessionCloseEvent):
            return self._session_close_action(msg, end)
        if isinstance(msg, ClusterActionRequest):
            if msg.log_position != end:
                self._failure = AgentError(
                    f"ClusterActionRequest at {f.position}..{end} says log_position {msg.log_position}"
                )
                raise self._failure
            snapshot: Callable[[], object] | None = None
            if msg.action is ClusterAction.SNAPSHOT and msg.flags == ClusterActionRequestFlags.DEFAULT:
                snapshot = partial(self._snapshot_action, msg.leadership_term_id, snapshot_failure)
            return EntryType.CLUSTER_ACTION, msg.timestamp, snapshot, None
        if isinstance(msg, NewLeadershipTermEvent):
            return self._new_leadership_term_action(msg, end)
        if isinstance(msg, MembershipChangeEvent):
            return EntryType.MEMBERSHIP_CHANGE, msg.timestamp, None, None
        self._failure = AgentError(f"unexpected {type(msg).__name__} in the log at {f.position}..{end}")
        raise self._failure

    def _session_open_action(self, msg: SessionOpenEvent, end: int) -> _EntryAction:
        """Aeron ``onSessionOpen``: the session is added before ``on_session_open`` (removed again if
        it fails); an id already open fails the agent."""
        if msg.cluster_session_id in self._sessions:
            self._failure = AgentError(
                f"clashing open clusterSessionId={msg.cluster_session_id} "
                f"leadershipTermId={msg.leadership_term_id} logPosition={end}"
            )
            raise self._failure
        opened = self._add_session(
            ClientSessionRecord(
                cluster_session_id=msg.cluster_session_id,
                response_stream_id=msg.response_stream_id,
                response_channel=msg.response_channel,
                encoded_principal=msg.encoded_principal,
            )
        )
        undo = partial(self._sessions.pop, opened.id, None)
        return EntryType.SESSION_OPEN, msg.timestamp, partial(self.service.on_session_open, opened, msg.timestamp), undo

    def _session_close_action(self, msg: SessionCloseEvent, end: int) -> _EntryAction:
        """Aeron ``onSessionClose``: the session is removed before ``on_session_close`` (put back if it
        fails); an unknown session is counted as ignored and nothing is called."""
        closed = self._sessions.pop(msg.cluster_session_id, None)
        if closed is None:
            self._ignore("unknown session close", f"{msg.cluster_session_id} at {end}")
            return EntryType.SESSION_CLOSE, msg.timestamp, None, None
        undo = partial(self._sessions.__setitem__, closed.id, closed)
        action = partial(self.service.on_session_close, closed, msg.timestamp, msg.close_reason)
        return EntryType.SESSION_CLOSE, msg.timestamp, action, undo

    def _new_leadership_term_action(self, msg: NewLeadershipTermEvent, end: int) -> _EntryAction:
        """Aeron ``onNewLeadershipTermEvent``: a log of another major version fails the agent; the
        event's time unit, when set, becomes the agent's."""
        if _major(msg.app_version) != _major(self.app_version):
            self._failure = AgentError(f"incompatible version: {self.app_version:#x} log={msg.app_version:#x} at {end}")
            raise self._failure
        if msg.time_unit is not ClusterTimeUnit.NULL_VAL:
            self._time_unit = msg.time_unit
        action = partial(
            self.service.on_new_leadership_term_event,
            msg.leadership_term_id,
            msg.log_position,
            msg.timestamp,
            msg.term_base_log_position,
            msg.leader_member_id,
            msg.log_session_id,
            self._time_unit,
            msg.app_version,
        )
        return EntryType.NEW_LEADERSHIP_TERM, msg.timestamp, action, None

    def _run_entry(
        self,
        f: Frame,
        replay: bool,
        saved: tuple[int, int, int, Any, int],
        entry_type: EntryType,
        timestamp: int,
        action: Callable[[], object] | None,
        undo: Callable[[], object] | None,
    ) -> None:
        """The entry's position, time and term become the agent's, ``action`` runs (in the service's
        scope), and what the service sent is released and the entry recorded; if ``action`` raises,
        ``undo`` runs and the agent is restored to ``saved`` and fails."""
        end = f.end_position
        self._log_position = end
        self._cluster_time = timestamp
        # Aeron takes the term from NewLeadershipTermEvent and the recovery state; the entry's own frame
        # says the same and also holds for a service restored from a snapshot mid-term.
        self._leadership_term_id = f.leadership_term_id
        self._held = []
        state_digest = b""
        try:
            if action is not None:
                if self._scope is not None and entry_type in _CALLBACKS:
                    self._scoped(_CALLBACKS[entry_type], action)
                else:
                    action()
            if self._on_applied is not None:
                state_digest = self._state_digest(entry_type)
        except Exception as e:
            if undo is not None:
                undo()
            raise self._failed_apply(saved, e, end, entry_type) from e
        self._release_held()
        self._applied(f, entry_type, timestamp, state_digest, replay)

    def _failed_apply(
        self, saved: tuple[int, int, int, Any, int], e: Exception, end: int, entry_type: EntryType
    ) -> ServiceError:
        """An entry's apply raised: drop what it held, restore the agent's position and clocks, and
        remember the failure (the agent applies nothing more)."""
        self._held = None
        (self._log_position, self._cluster_time, self._leadership_term_id, self._time_unit, self._next_ack_id) = saved
        if isinstance(e, ClusterTerminationException):
            return self._terminate_on_request(end, entry_type, e)
        failure = e if isinstance(e, ServiceError) else ServiceError(end, entry_type, e)
        self._failure = failure
        return failure

    def _terminate_on_request(self, end: int, entry_type: str, e: ClusterTerminationException) -> ServiceTerminated:
        """The service raised ClusterTerminationException: ``on_terminate`` if it is active (errors
        swallowed, as Aeron's onClose does; not from ``on_start``, as Aeron's service is active only
        once started), then the agent is stopped with a ServiceTerminated failure."""
        failure = ServiceTerminated(end, entry_type, e)
        self._failure = failure
        self._frames.clear()
        self._terminated = True
        if self._active:  # Aeron: the container closes, and onClose tells an active service
            self._active = False
            self._notify_terminate("termination_exception")
        return failure

    def _notify_terminate(self, reason: str) -> None:
        """``service.on_terminate`` (no sending from it); an error it raises is counted in ``errors``
        and logged, never raised (Aeron's counted error handler). Records a ``service_terminate``
        event first, with ``reason``: ``close`` (the container closed), ``termination_position`` (the
        position a SHUTDOWN or ABORT terminates at; the service is not told which) or
        ``termination_exception`` (the service raised ClusterTerminationException)."""
        self._events(
            "service_terminate",
            self._member_id,
            None if self._leadership_term_id == NULL_VALUE else self._leadership_term_id,
            self._log_position,
            {"service_id": self._service_id, "reason": reason},
        )
        self._lifecycle = "on_terminate"
        try:
            self.service.on_terminate(self)
        except Exception as e:
            self.errors.append(e)
            self._log(f"service {self._service_id}: on_terminate raised {type(e).__name__}: {e}")
        finally:
            self._lifecycle = _NO_LIFECYCLE

    def _apply_session_message(self, f: Frame, replay: bool, session_id: int, timestamp: int, body: bytes) -> None:
        """The common entry, without the generic path's per-entry closures (same semantics)."""
        saved = (self._log_position, self._cluster_time, self._leadership_term_id, self._time_unit, self._next_ack_id)
        self._log_position = f.end_position
        self._cluster_time = timestamp
        self._leadership_term_id = f.leadership_term_id
        self._held = []
        state_digest = b""
        try:
            if self._scope is not None:
                self._scoped(
                    _ON_SESSION_MESSAGE,
                    partial(self.service.on_session_message, self._sessions.get(session_id), timestamp, body),
                )
            else:
                self.service.on_session_message(self._sessions.get(session_id), timestamp, body)
            if self._on_applied is not None:
                state_digest = self._state_digest(EntryType.SESSION_MESSAGE)
        except Exception as e:
            raise self._failed_apply(saved, e, f.end_position, EntryType.SESSION_MESSAGE) from e
        held, self._held = self._held, None
        if held:
            self._send_held(held)
        if self._on_applied is None:
            self.applied_count += 1
        else:
            self._applied(f, EntryType.SESSION_MESSAGE, timestamp, state_digest, replay)
        return None

    def _apply_session_run(self, frames: Sequence[Frame], i: int, bound: int, replay: bool) -> int:
        """Apply ``frames[i:]`` while they are contiguous, committed (end <= ``bound``) session
        messages of the usual shape; returns the index of the first frame not applied. The same
        semantics as :meth:`_apply` + :meth:`_apply_session_message` per entry, in one loop per block
        (this is every member's per-entry path). With ``on_applied_run`` the run's rows are built as
        columns and given once, also when an entry of the run fails (the entries before it were applied)."""
        n = len(frames)
        on_applied = self._on_applied
        run_sink = self._on_applied_run if on_applied is not None else None
        block = self._block if on_applied is not None else None
        block_position = self._block_position
        session_message = EntryType.SESSION_MESSAGE
        # The run's columns (with run_sink): appended per entry, given once at the end as an AppliedRun.
        ends: list[int] = []
        lengths: list[int] = []
        terms: list[int] = []
        times: list[int] = []
        entry_digests: list[bytes] = []
        state_digests: list[bytes] = []
        held: list[_Held] = []  # each entry's sends in turn (emptied after each entry)
        try:
            while i < n:
                f = frames[i]
                position = f.position
                end = f.end_position
                if position != self._buffered_end or end > bound or f.frame_type == HDR_TYPE_PAD:
                    break
                payload = f.payload
                fields = session_message_fields(payload)
                if fields is None:
                    break
                self._buffered_end = end
                i += 1
                timestamp = fields[2]
                digest = self._apply_run_entry(f, fields[1], timestamp, payload, held, on_applied is not None)
                self.applied_count += 1
                if on_applied is None:
                    continue
                term = f.leadership_term_id
                entry_digest = _entry_digest_in(block, block_position, f)
                if run_sink is not None:
                    ends.append(end)
                    lengths.append(end - position)
                    terms.append(term)
                    times.append(timestamp)
                    entry_digests.append(entry_digest)
                    state_digests.append(digest)
                else:
                    # Positional: a NamedTuple built from keywords costs a third more (one per entry).
                    on_applied(
                        AppliedEntry(
                            end, end - position, term, session_message, timestamp, entry_digest, digest, replay
                        )
                    )
        finally:
            if ends:
                assert run_sink is not None
                run_sink(AppliedRun(ends, lengths, terms, times, entry_digests, state_digests, replay))
        return i

    def _apply_run_entry(
        self, f: Frame, session_id: int, timestamp: int, payload: bytes, held: list[_Held], with_digest: bool
    ) -> bytes:
        """One session message of a run: the service applies it (in its scope), then what it sent
        leaves; returns the state digest after it (b"" without ``with_digest``). If the service
        raises, the agent is restored and fails, as :meth:`_apply_session_message` does."""
        end = f.end_position
        saved = (self._log_position, self._cluster_time, self._leadership_term_id, self._time_unit, self._next_ack_id)
        self._log_position = end
        self._cluster_time = timestamp
        self._leadership_term_id = f.leadership_term_id
        self._held = held
        digest = b""
        try:
            session = self._sessions.get(session_id)
            scope = self._scope
            if scope is None:
                self.service.on_session_message(session, timestamp, payload[SESSION_HEADER_LENGTH:])
            else:
                scope.enter(_ON_SESSION_MESSAGE, end)
                try:
                    self.service.on_session_message(session, timestamp, payload[SESSION_HEADER_LENGTH:])
                finally:
                    scope.exit()
            if with_digest:
                digest = self._digest_of()
                if type(digest) is not bytes or len(digest) != DIGEST_SIZE:
                    digest = self._state_digest(EntryType.SESSION_MESSAGE)  # raises the precise error
        except Exception as e:
            raise self._failed_apply(saved, e, end, EntryType.SESSION_MESSAGE) from e
        self._held = None
        if held:
            self._send_held(held)
            held.clear()
        return digest

    def _release_held(self) -> None:
        """Send what the service sent while its entry was applied (it applied without error)."""
        held, self._held = self._held, None
        assert held is not None
        self._send_held(held)

    def _send_held(self, held: list[_Held]) -> None:
        """Send held-back messages, in the order the service sent them."""
        for item in held:
            if isinstance(item, bytes):
                self._to_cm(item)
            else:
                self._egress(item[0], item[1], item[2])

    def _applied(self, f: Frame, entry_type: EntryType, timestamp: int, state_digest: bytes, replay: bool) -> None:
        """Count an applied entry; with an ``on_applied`` listener, its row with both digests (only
        then are they computed: the state digest is one hash, the entry digest another)."""
        self.applied_count += 1
        on_applied = self._on_applied
        if on_applied is not None:
            # Positional: a NamedTuple built from keywords costs a third more (one per entry).
            on_applied(
                AppliedEntry(
                    f.end_position,  # log_position
                    f.end_position - f.position,  # length
                    f.leadership_term_id,
                    entry_type,
                    timestamp,  # cluster_time
                    self._entry_digest(f),
                    state_digest,
                    replay,
                )
            )

    def _entry_digest(self, f: Frame) -> bytes:
        block = self._block
        if block is not None:
            start = f.position - self._block_position
            end = f.end_position - self._block_position
            if start >= 0 and end <= len(block):
                return _digest(memoryview(block)[start:end])
        return _digest(frame(f.payload, f.position, f.leadership_term_id, f.frame_type))

    def _snapshot_action(self, leadership_term_id: int, failure: list[BaseException]) -> None:
        """Take a snapshot at the current position and ack it (Aeron ``executeAction``); a failure acks
        with NULL and is reported after the entry is done."""
        recording_id = NULL_VALUE
        try:
            recording_id = self._take_snapshot(leadership_term_id)
        except Exception as e:
            failure.append(e)
        self._ack(self._log_position, recording_id)

    def take_snapshot(self) -> int:
        """Take a snapshot at the current position outside the log (a replay's probe of the service's
        snapshot); returns its recording id. Nothing is acked."""
        self._check_usable()
        return self._take_snapshot(self._leadership_term_id)

    def _take_snapshot(self, leadership_term_id: int) -> int:
        if self.snapshot_store is None:
            raise AgentError("cannot take a snapshot: the agent has no snapshot store")
        writer = SnapshotWriter()
        if self._scope is not None:
            self._scoped("on_take_snapshot", partial(self.service.on_take_snapshot, writer))
        else:
            self.service.on_take_snapshot(writer)
        sessions = [
            ClientSessionRecord(
                cluster_session_id=s.id,
                response_stream_id=s.response_stream_id,
                response_channel=s.response_channel,
                encoded_principal=s.encoded_principal,
            )
            for s in self._sessions.values()
        ]
        records = encode_service_snapshot(
            self._log_position, leadership_term_id, self._time_unit, self.app_version, sessions, writer.records
        )
        recording_id = self.snapshot_store.write_snapshot(
            records, leadership_term_id, self._log_position, self._service_id
        )
        self._log(
            f"service {self._service_id}: snapshot at {self._log_position} -> recording {recording_id}, "
            f"{len(sessions)} sessions, {len(writer.records)} app records"
        )
        return recording_id

    # --- helpers --------------------------------------------------------------------------------------

    def _check_positions(self) -> None:
        """After every input (Aeron ``pollServiceAdapter``): termination, then a requested ack."""
        if self._termination_position != NULL_POSITION and self._log_position >= self._termination_position:
            self._terminate()
            return
        if self._requested_ack_position != NULL_POSITION and self._log_position >= self._requested_ack_position:
            if self._log_position > self._requested_ack_position:
                self._log(
                    f"service {self._service_id}: invalid ack request: logPosition={self._log_position} "
                    f"> requestedAckPosition={self._requested_ack_position}"
                )
            self._requested_ack_position = NULL_POSITION
            self._ack(self._log_position, NULL_VALUE)

    def _terminate(self) -> None:
        if self._log_position > self._termination_position:
            self._log(
                f"service {self._service_id}: terminate: logPosition={self._log_position} "
                f"> terminationPosition={self._termination_position}"
            )
        self._active = False
        # Aeron counts an error of on_terminate and still acks: termination must not hang on a broken service.
        self._notify_terminate("termination_position")
        self._ack(self._log_position, NULL_VALUE)
        self._termination_position = NULL_POSITION
        self._terminated = True
        self._frames.clear()

    def _set_role(self, new_role: Role) -> None:
        if new_role is self._role:
            return
        self._role = new_role
        self._call_lifecycle("on_role_change", lambda: self.service.on_role_change(new_role), "RoleChange")

    def _call_lifecycle(self, name: str, call: Callable[[], None], entry_type: str) -> None:
        self._lifecycle = name
        try:
            if self._scope is not None:
                self._scoped(name, call)
            else:
                call()
        except Exception as e:
            failure = ServiceError(self._log_position, entry_type, e)
            self._lifecycle = _NO_LIFECYCLE
            if isinstance(e, ClusterTerminationException):
                failure = self._terminate_on_request(self._log_position, entry_type, e)
            self._failure = failure
            raise failure from e
        finally:
            self._lifecycle = _NO_LIFECYCLE

    def _derived_digest(self) -> bytes:
        if digest_due(self._log_position, self.service.digest_interval):
            return self.service.state_digest()
        return UNDIGESTED

    def _scoped(self, callback: str, call: Callable[[], object]) -> None:
        """``call`` (a service callback) inside the callback scope."""
        scope = self._scope
        assert scope is not None
        scope.enter(callback, self._log_position)
        try:
            call()
        finally:
            scope.exit()

    def _state_digest(self, entry_type: str) -> bytes:
        digest = self._digest_of()
        if not isinstance(digest, bytes) or len(digest) != DIGEST_SIZE:
            raise ServiceError(
                self._log_position,
                entry_type,
                ValueError(f"state_digest() must return {DIGEST_SIZE} bytes, got {digest!r:.60}"),
            )
        return digest

    def _ack(self, log_position: int, relevant_id: int) -> None:
        ack_id = self._next_ack_id
        self._next_ack_id += 1
        self._send_cm(
            ServiceAck(
                log_position=log_position,
                timestamp=self._cluster_time,
                ack_id=ack_id,
                relevant_id=relevant_id,
                service_id=self._service_id,
            ).encode()
        )

    def _add_session(self, record: ClientSessionRecord) -> ClientSession:
        session = ClientSession(
            record.cluster_session_id,
            record.response_stream_id,
            record.response_channel,
            record.encoded_principal,
            self._offer_egress,
        )
        self._sessions[session.id] = session
        return session

    def _emit_applied(self, entry: AppliedEntry) -> None:
        if self._on_applied is not None:
            self._on_applied(entry)

    def _ignore(self, reason: str, detail: str) -> None:
        self.ignored[reason] += 1
        self._log(f"service {self._service_id}: ignored ({reason}): {detail}")

    def _check_usable(self) -> None:
        if not self._started:
            raise AgentError("the agent has not been started: call start() first")
        if self._failure is not None:
            raise AgentError(f"the agent stopped after an error: {self._failure}") from self._failure
