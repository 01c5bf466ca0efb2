"""Replication within the current term: the leader's log publication, LogBlocks to each follower, the
followers' AppendPosition, and the quorum commit position (Aeron's ``LogPublisher``,
``updateLeaderPosition``, ``FollowerLogAdapter`` and the MDC log destinations).

Log-transport stand-in (ZeroMQ for Aeron's UDP log with NAKs): the leader keeps a send position
per follower and sends ``LogBlock``s from it; a follower appends only frames that start at its own
append position and reports ``AppendPosition``; when a follower's reported position stops
advancing the leader rewinds that follower's send position to it and resends. A lost, duplicated
or reordered block therefore slows the log down but never corrupts it.
"""

from __future__ import annotations

import random

from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.codec.consensus import AppendPosition, CatchupPosition, CommitPosition
from clusterlab.core.codec.enums import AppendPositionFlags
from clusterlab.core.codec.framing import walk_frames
from clusterlab.core.codec.transport import LogBlock
from clusterlab.core.consensus.catchup import Catchup
from clusterlab.core.consensus.context import (
    NULL_POSITION,
    NULL_SESSION_ID,
    NULL_VALUE,
    ElectionState,
    Role,
    Timeouts,
)
from clusterlab.core.consensus.members import MemberStatus, quorum_position
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.publishers import ConsensusPublisher, LogPublisher

# Largest block of log bytes sent in one LogBlock / ReplayBlock (Aeron: MTU-sized fragments and
# term-length windows; we only need a bound on message size and on bytes in flight).
MAX_BLOCK_BYTES = 64 * 1024
MAX_BYTES_IN_FLIGHT = 512 * 1024


class TermReplication:
    """The live log of the current term, leader and follower sides (see module docstring)."""

    def __init__(
        self,
        state: ModuleState,
        archive: RecordingStore,
        timeouts: Timeouts,
        rng: random.Random,
        log_publisher: LogPublisher,
        consensus_publisher: ConsensusPublisher,
        catchup: Catchup,
    ) -> None:
        self._s = state
        self._archive = archive
        self._timeouts = timeouts
        self._rng = rng
        self._log_publisher = log_publisher
        self._publisher = consensus_publisher
        self._catchup = catchup
        # Leader log publication (one per term): its term, base position and session id.
        self.log_publication_term_id = NULL_VALUE
        self.log_session_id = NULL_SESSION_ID
        self.log_term_base_position = 0
        # Follower log subscription: the term it accepts blocks of.
        self.log_subscription_term_id = NULL_VALUE
        self.time_of_last_append_position_send_ns = 0
        self.last_append_position_sent = NULL_POSITION
        self.time_of_last_commit_publish_ns = 0
        # Invariant baselines: (term, append position) last seen, and truncations since.
        self._checked_append = (NULL_VALUE, 0)
        self.truncations = 0
        self._checked_truncations = 0

    # ------------------------------------------------------------------ publication / subscription
    def create_log_publication(self, leadership_term_id: int, position: int) -> int:
        """Leader: a new term's log stream starting at ``position``; returns its log session id."""
        self.log_publication_term_id = leadership_term_id
        self.log_term_base_position = position
        self.log_session_id = self._rng.randrange(1, 2**31 - 1)
        for s in self._s.statuses:
            s.reset_log_send()
        return self.log_session_id

    def subscribe_to_log(self, leadership_term_id: int, log_session_id: int) -> None:
        self.log_subscription_term_id = leadership_term_id
        self.log_session_id = log_session_id

    def has_log_subscription(self) -> bool:
        return self.log_subscription_term_id != NULL_VALUE

    def reset(self) -> None:
        """Aeron ``prepareForNewLeadership``: drop the log publication and subscription."""
        self.log_publication_term_id = NULL_VALUE
        self.log_session_id = NULL_SESSION_ID
        self.log_subscription_term_id = NULL_VALUE
        for s in self._s.statuses:
            s.reset_log_send()

    def on_election_complete(self, now_ns: int) -> None:
        st = self._s
        self._s.time_of_last_log_update_ns = now_ns
        self.time_of_last_append_position_send_ns = 0
        if st.role == Role.LEADER:
            self.time_of_last_commit_publish_ns = 0
            for s in st.followers():
                s.time_of_last_append_position_ns = now_ns

    # ------------------------------------------------------------------ leader
    def update_leader_position(self, now_ns: int, append_position: int, leadership_term_id: int) -> int:
        """Aeron ``updateLeaderPosition``: commit = min(quorum position, own position), heartbeat."""
        st = self._s
        me = st.this_member
        me.log_position = append_position
        me.leadership_term_id = leadership_term_id
        me.time_of_last_append_position_ns = now_ns
        # Only positions reported in this term count: a canvassed position from an older log term
        # (a deposed leader's uncommitted tail) describes bytes we may not hold.
        quorum = quorum_position(
            (s.log_position for s in st.statuses if s.leadership_term_id == leadership_term_id),
            len(st.statuses),
        )
        commit = st.rules.commit_position(quorum, append_position)
        if commit > st.commit_position or now_ns >= (
            self.time_of_last_commit_publish_ns + self._timeouts.leader_heartbeat_interval_ns
        ):
            if commit > st.commit_position:
                st.set_commit_position(commit)
            self.time_of_last_commit_publish_ns = now_ns
            self.publish_commit_position(leadership_term_id, st.commit_position)
            return 1
        return 0

    def publish_commit_position(self, leadership_term_id: int, position: int) -> None:
        st = self._s
        for s in st.followers():
            self._publisher.commit_position(s.member_id, leadership_term_id, position, st.member_id)

    def send_log_blocks(self, now_ns: int) -> int:
        """Leader: send each joined follower the log from its send position (bounded in flight)."""
        st = self._s
        archive = self._archive
        work = 0
        stop = archive.stop_position
        for s in st.followers():
            if s.log_send_position == NULL_POSITION:
                continue
            acked = max(s.last_progress_position, 0)
            # Resend rule: the follower's position stopped advancing short of what we sent.
            if (
                s.log_send_position > acked
                and now_ns >= s.time_of_last_progress_ns + self._timeouts.leader_heartbeat_interval_ns
            ):
                s.log_send_position = max(acked, archive.start_position)
                s.time_of_last_progress_ns = now_ns
            while s.log_send_position < stop and s.log_send_position - acked < MAX_BYTES_IN_FLIGHT:
                data = archive.read(s.log_send_position, stop, max_bytes=MAX_BLOCK_BYTES)
                if not data:
                    break
                self._log_publisher.block(
                    s.member_id,
                    catchup=s.catchup_active,
                    leadership_term_id=self.log_publication_term_id,
                    start_position=s.log_send_position,
                    commit_position=st.commit_position,
                    leader_member_id=st.member_id,
                    log_session_id=self.log_session_id,
                    entries=data,
                )
                s.log_send_position += len(data)
                work += 1
        return work

    def has_blocks_to_send(self) -> bool:
        """Leader: some follower can be sent log now (so the next duty cycle is due at once)."""
        stop = self._archive.stop_position
        return any(
            s.log_send_position != NULL_POSITION
            and s.log_send_position < stop
            and s.log_send_position - max(s.last_progress_position, 0) < MAX_BYTES_IN_FLIGHT
            for s in self._s.followers()
        )

    def on_append_position(self, src: int, msg: AppendPosition, now_ns: int) -> None:
        st = self._s
        s = st.status(msg.follower_member_id)
        if s is None:
            st.ignore("AppendPosition", f"unknown member {msg.follower_member_id}")
            return
        if st.election is not None:
            st.election.on_append_position(msg.leadership_term_id, msg.log_position, msg.follower_member_id, now_ns)
        elif st.role == Role.LEADER and msg.leadership_term_id <= st.leadership_term_id:
            s.time_of_last_append_position_ns = now_ns
            # Deviation from Aeron (which relies on in-order delivery): a position reported in an
            # older term may describe bytes since truncated, so only this term's positions count.
            if msg.leadership_term_id == st.leadership_term_id:
                s.log_position = msg.log_position
                s.leadership_term_id = msg.leadership_term_id
        else:
            st.ignore("AppendPosition", f"not the leader of term {msg.leadership_term_id}")
            return
        if st.role == Role.LEADER:
            self._on_follower_progress(s, msg, now_ns)

    def _on_follower_progress(self, s: MemberStatus, msg: AppendPosition, now_ns: int) -> None:
        """Leader: live-log join, the resend rule's progress tracking, and catch-up completion."""
        if msg.leadership_term_id != self.log_publication_term_id:
            return
        if msg.log_position > s.last_progress_position:
            s.last_progress_position = msg.log_position
            s.time_of_last_progress_ns = now_ns
        stop = self._archive.stop_position
        if (
            s.log_send_position == NULL_POSITION
            and msg.flags & AppendPositionFlags.CATCHUP == 0
            and msg.log_position >= self.log_term_base_position
        ):
            # Join the live log at the follower's position (Aeron: MDC destination added).
            s.log_send_position = min(msg.log_position, stop)
        # trackCatchupCompletion
        if (s.catchup_active or msg.flags & AppendPositionFlags.CATCHUP) and msg.log_position >= stop:
            self._publisher.stop_catchup(s.member_id, self.log_publication_term_id, s.member_id)
            s.catchup_active = False

    def on_catchup_position(self, src: int, msg: CatchupPosition, now_ns: int) -> None:
        """Leader: a follower asks to catch up from ``msg.log_position``."""
        st = self._s
        s = st.status(msg.follower_member_id)
        if s is None:
            st.ignore("CatchupPosition", f"unknown member {msg.follower_member_id}")
            return
        term = self.log_publication_term_id
        if st.role != Role.LEADER or term == NULL_VALUE or msg.leadership_term_id > term or s.catchup_active:
            st.ignore("CatchupPosition", f"not leading term {msg.leadership_term_id}, or its catch-up runs")
            return
        stop = self._archive.stop_position
        if msg.log_position > stop:
            st.ignore("CatchupPosition", f"position {msg.log_position} beyond leader log {stop}")
            return
        # Aeron starts an archive replay to the follower's catch-up endpoint; we point the follower's
        # send position at the requested position and send on the catch-up channel.
        s.catchup_active = True
        s.log_send_position = msg.log_position
        s.last_progress_position = msg.log_position
        s.time_of_last_progress_ns = now_ns

    def stop_all_catchups(self) -> None:
        for s in self._s.statuses:
            s.catchup_active = False

    # ------------------------------------------------------------------ follower
    def send_append_position(self, now_ns: int, flags: int) -> int:
        """Follower: report our append position to the leader when it moved or on the heartbeat."""
        st = self._s
        position = self._archive.stop_position
        if st.leader_member_id == NULL_VALUE or st.leader_member_id == st.member_id:
            return 0
        if position > self.last_append_position_sent or now_ns >= (
            self.time_of_last_append_position_send_ns + self._timeouts.leader_heartbeat_interval_ns
        ):
            self._publisher.append_position(st.leader_member_id, st.election_term(), position, st.member_id, flags)
            self.last_append_position_sent = position
            self.time_of_last_append_position_send_ns = now_ns
            return 1
        return 0

    def on_commit_position(self, msg: CommitPosition, now_ns: int) -> bool:
        """Follower steady state: the leader's commit position. False when it is not from our
        leader in our term (the caller decides whether that means a new election)."""
        st = self._s
        if (
            st.role != Role.FOLLOWER
            or msg.leadership_term_id != st.leadership_term_id
            or msg.leader_member_id != st.leader_member_id
        ):
            return False
        st.set_notified_commit_position(msg.log_position)
        self._s.time_of_last_log_update_ns = now_ns
        return True

    def on_log_block(self, src: int, msg: LogBlock, now_ns: int) -> None:
        """Follower: a log block from the leader, appended as the rules say (the protocol's: at once)."""
        self._s.rules.on_log_block(self, msg, now_ns)

    def report_appended(self, position: int, now_ns: int) -> None:
        """Tell our leader now that our log is appended up to ``position`` (if that is news to it)."""
        st = self._s
        if st.leader_member_id not in (NULL_VALUE, st.member_id) and position > self.last_append_position_sent:
            self._publisher.append_position(st.leader_member_id, st.election_term(), position, st.member_id, 0)
            self.last_append_position_sent = position
            self.time_of_last_append_position_send_ns = now_ns

    def append_log_block(self, msg: LogBlock, now_ns: int) -> None:
        """Append the frames of ``msg`` that start at our append position; drop the rest."""
        st = self._s
        e = st.election
        catchup = self._catchup
        following_term = self.log_subscription_term_id
        if following_term == NULL_VALUE or msg.leadership_term_id != following_term:
            # Not (yet) subscribed to this term's log: the leader resends when we report.
            st.ignore("LogBlock", f"not following term {msg.leadership_term_id}")
            return
        if msg.leader_member_id != st.leader_member_id and not (
            e is not None and msg.leader_member_id == e.leader_member_id
        ):
            st.ignore("LogBlock", f"from {msg.leader_member_id}, not our leader")
            return
        stop = self._archive.stop_position
        end = msg.start_position + len(msg.entries)
        if msg.start_position > stop or end <= stop:
            # A gap (lost block) or old data: wait for the leader to resend from our position.
            st.ignore("LogBlock", "gap before the block" if msg.start_position > stop else "already appended")
            return
        walk = walk_frames(msg.entries, msg.start_position)
        if walk.error is not None:
            st.ignore("LogBlock", f"bad entries at {walk.end_position}: {walk.error}")
        # Keep the whole, valid frames from our stop position on; the walk above already checked them.
        fresh = [f for f in walk.frames if f.position >= stop]
        if fresh and fresh[0].position == stop:
            data = msg.entries[stop - msg.start_position : fresh[-1].end_position - msg.start_position]
            self._archive.append_walked(data, stop, fresh)
            if (e is not None and e.state == ElectionState.FOLLOWER_CATCHUP_AWAIT) or (
                catchup.is_catchup_active and e is not None
            ):
                catchup.catchup_log_joined = True
        elif catchup.is_catchup_active:
            catchup.catchup_log_joined = True
        self._s.time_of_last_log_update_ns = now_ns
        if e is None and st.role == Role.FOLLOWER:
            st.advance_notified_commit_position(msg.commit_position)

    def leader_heartbeat_expired(self, now_ns: int) -> bool:
        """Follower: nothing from the leader for the heartbeat timeout."""
        return now_ns >= self._s.time_of_last_log_update_ns + self._timeouts.leader_heartbeat_timeout_ns

    # ------------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Append position monotonic within a term (unless truncated); a leader's commit within its log."""
        st = self._s
        append = self._archive.stop_position
        term, last = self._checked_append
        if term == st.leadership_term_id and self.truncations == self._checked_truncations:
            assert append >= last, f"member {st.member_id}: append position went back {last} -> {append} in term {term}"
        self._checked_append = (st.leadership_term_id, append)
        self._checked_truncations = self.truncations
        if st.role == Role.LEADER and st.election is None:
            assert self.log_publication_term_id == st.leadership_term_id, (
                f"member {st.member_id}: leader of {st.leadership_term_id} "
                f"publishes term {self.log_publication_term_id}"
            )
