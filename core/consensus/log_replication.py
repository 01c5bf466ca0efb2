"""Replication of earlier terms from the leader's archive (FOLLOWER_LOG_REPLICATION), both sides:
the follower's ReplayRequest / ReplayBlock loop and the archive answering a peer's request
(Aeron's ``LogReplication`` over ``ReplicationSession`` / archive replay)."""

from __future__ import annotations

from clusterlab.core.archive.errors import ArchiveError as StoreError
from clusterlab.core.archive.layout import LOG_RECORDING_ID
from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.codec.enums import ReplayPurpose
from clusterlab.core.codec.framing import walk_frames
from clusterlab.core.codec.transport import ArchiveError, ReplayBlock, ReplayRequest
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE, Timeouts
from clusterlab.core.consensus.election import ElectionError
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.publishers import ArchivePublisher
from clusterlab.core.consensus.term_replication import MAX_BLOCK_BYTES, MAX_BYTES_IN_FLIGHT


class LogReplication:
    """One member's archive replication: as the replicating follower and as the serving archive."""

    def __init__(
        self,
        state: ModuleState,
        archive: RecordingStore,
        timeouts: Timeouts,
        publisher: ArchivePublisher,
        log_recording_id: int,
    ) -> None:
        self._s = state
        self._archive = archive
        self._timeouts = timeouts
        self._publisher = publisher
        self._log_recording_id = log_recording_id
        self.replication_source = NULL_VALUE
        self.replication_stop_position = NULL_POSITION
        self.replication_correlation_id = 0
        self.time_of_last_replication_progress_ns = 0
        self.time_of_last_replication_request_ns = 0
        self.replication_progress_position = NULL_POSITION

    # ------------------------------------------------------------------ replicating follower
    def start(self, leader_member_id: int, recording_id: int, stop_position: int, now_ns: int) -> None:
        self.replication_source = leader_member_id
        self.replication_stop_position = stop_position
        self.replication_progress_position = self._archive.stop_position
        self.time_of_last_replication_progress_ns = now_ns
        self._request(now_ns, recording_id)

    def _request(self, now_ns: int, recording_id: int = LOG_RECORDING_ID) -> None:
        self.replication_correlation_id += 1
        self.time_of_last_replication_request_ns = now_ns
        self._publisher.replay_request(
            self.replication_source,
            ReplayRequest(
                correlation_id=self.replication_correlation_id,
                recording_id=recording_id,
                from_position=self._archive.stop_position,
                to_position=self.replication_stop_position,
                requester_member_id=self._s.member_id,
                purpose=ReplayPurpose.REPLICATION,
                max_bytes=MAX_BYTES_IN_FLIGHT,
            ),
        )

    def poll(self, now_ns: int) -> int:
        """Progress check; re-requests after a lost request or reply, fails after the heartbeat timeout."""
        if self.replication_source == NULL_VALUE:
            return 0
        position = self._archive.stop_position
        if position > self.replication_progress_position:
            self.replication_progress_position = position
            self.time_of_last_replication_progress_ns = now_ns
            return 1
        if position >= self.replication_stop_position:
            return 0
        if now_ns >= self.time_of_last_replication_progress_ns + self._timeouts.leader_heartbeat_timeout_ns:
            raise ElectionError(f"replication made no progress from {position} within heartbeat timeout")
        if now_ns >= self.time_of_last_replication_request_ns + self._timeouts.leader_heartbeat_interval_ns:
            self._request(now_ns)  # a lost request or reply: ask again from where we are
            return 1
        return 0

    def replicated_position(self) -> int:
        return self._archive.stop_position

    def stop(self) -> None:
        self.replication_source = NULL_VALUE
        self.replication_stop_position = NULL_POSITION

    def on_replay_block(self, src: int, msg: ReplayBlock, now_ns: int) -> None:
        """Append blocks that start at our stop position, up to the replication stop."""
        if self.replication_source == NULL_VALUE or src != self.replication_source:
            self._s.ignore("ReplayBlock", f"no replication from {src} runs")
            return
        stop = self._archive.stop_position
        if msg.start_position != stop:
            # Out of order or duplicate: the progress check re-requests from our position.
            self._s.ignore("ReplayBlock", f"starts at {msg.start_position}, not at our end {stop}")
            return
        walk = walk_frames(msg.entries, msg.start_position)
        if walk.error is not None:
            self._s.ignore("ReplayBlock", f"bad entries at {walk.end_position}: {walk.error}")
        usable = [f for f in walk.frames if f.end_position <= self.replication_stop_position]
        if usable:
            self._archive.append_walked(msg.entries[: usable[-1].end_position - msg.start_position], stop, usable)

    def on_archive_error(self, src: int, msg: ArchiveError, now_ns: int) -> None:
        self._s.ignore("ArchiveError", f"from {src}: {msg.error_message}")

    # ------------------------------------------------------------------ serving archive
    def on_replay_request(self, src: int, msg: ReplayRequest, now_ns: int) -> None:
        """Answer a replication/replay request with blocks of our recording."""
        st = self._s
        archive = self._archive
        if msg.recording_id != self._log_recording_id:
            st.ignore("ReplayRequest", f"unknown recording {msg.recording_id}")
            return
        stop = archive.stop_position
        to = stop if msg.to_position == NULL_POSITION else min(msg.to_position, stop)
        position = msg.from_position
        if position < archive.start_position or position > stop:
            st.ignore("ReplayRequest", f"from_position {position} outside [{archive.start_position}, {stop}]")
            return
        budget = max(msg.max_bytes, MAX_BLOCK_BYTES)
        sent = 0
        try:
            while position < to and sent < budget:
                data = archive.read(position, to, max_bytes=MAX_BLOCK_BYTES)
                if not data:
                    break
                last = position + len(data) >= to
                self._publisher.replay_block(
                    src,
                    ReplayBlock(
                        correlation_id=msg.correlation_id,
                        recording_id=msg.recording_id,
                        start_position=position,
                        recording_stop_position=stop,
                        leadership_term_id=st.leadership_term_id,
                        purpose=msg.purpose,
                        flags=1 if last else 0,
                        entries=data,
                    ),
                )
                position += len(data)
                sent += len(data)
        except StoreError as e:  # a read of a bad range: say why, keep serving
            st.ignore("ReplayRequest", str(e))

    def check_invariants(self) -> None:
        """A running replication has a stop position."""
        if self.replication_source != NULL_VALUE:
            assert self.replication_stop_position != NULL_POSITION, f"member {self._s.member_id}: replication"
