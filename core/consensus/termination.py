"""Orderly termination (SHUTDOWN / ABORT, PROTOCOL.md e.8): the leader's TerminationPosition, the
followers' TerminationAck, the services' acks, then a clean stop. Aeron's ``ClusterTermination``
and the termination parts of ``ConsensusModuleAgent``."""

from __future__ import annotations

from clusterlab.core.codec.consensus import TerminationAck, TerminationPosition
from clusterlab.core.codec.service import ServiceTerminationPosition
from clusterlab.core.consensus.context import NULL_POSITION, ConsensusModuleState, Role, Timeouts
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.publishers import ConsensusPublisher
from clusterlab.core.consensus.recording_log import RecordingLog
from clusterlab.core.consensus.service_link import ServiceLink


class Termination:
    """One member's side of an orderly termination."""

    def __init__(
        self,
        state: ModuleState,
        timeouts: Timeouts,
        publisher: ConsensusPublisher,
        services: ServiceLink,
        recording_log: RecordingLog,
    ) -> None:
        self._s = state
        self._timeouts = timeouts
        self._publisher = publisher
        self._services = services
        self._recording_log = recording_log
        self.termination_position = NULL_POSITION
        self.termination_deadline_ns = 0
        self.time_of_last_termination_send_ns = 0
        self.termination_is_shutdown = False
        self.service_termination_sent = False
        self.services_terminated = False
        self.terminated_followers: set[int] = set()
        self.terminated_reason = ""
        self.unexpected = False  # closed by terminate_now (no termination position)

    @property
    def is_pending(self) -> bool:
        return self.termination_position != NULL_POSITION

    def begin(self, position: int, now_ns: int, *, shutdown: bool) -> None:
        """Leader: terminate at ``position``; tell every follower."""
        st = self._s
        self.termination_position = position
        self.termination_is_shutdown = shutdown
        self.termination_deadline_ns = now_ns + self._timeouts.termination_timeout_ns
        self.time_of_last_termination_send_ns = now_ns
        self.terminated_followers.clear()
        for s in st.followers():
            self._publisher.termination_position(s.member_id, st.leadership_term_id, position)
        st.event("termination", {"shutdown": shutdown}, term=st.leadership_term_id, pos=position)

    def on_termination_position(self, src: int, msg: TerminationPosition, now_ns: int) -> None:
        """Follower: our leader terminates at ``msg.log_position`` (also a sign of life from it)."""
        st = self._s
        if msg.leadership_term_id != st.leadership_term_id or st.role != Role.FOLLOWER:
            st.ignore("TerminationPosition", f"not a follower in term {msg.leadership_term_id}")
            return
        self.termination_position = msg.log_position
        st.time_of_last_log_update_ns = now_ns

    def on_termination_ack(self, src: int, msg: TerminationAck, now_ns: int) -> None:
        st = self._s
        if (
            st.role != Role.LEADER
            or msg.leadership_term_id != st.leadership_term_id
            or self.termination_position == NULL_POSITION
            or msg.log_position < self.termination_position
        ):
            st.ignore("TerminationAck", "no termination of ours awaits it")
            return
        if st.status(msg.member_id) is None:
            st.ignore("TerminationAck", f"unknown member {msg.member_id}")
            return
        self.terminated_followers.add(msg.member_id)
        st.event("termination_ack", {"member": msg.member_id}, pos=msg.log_position)

    def work(self, now_ns: int) -> int:
        """Drive an orderly SHUTDOWN/ABORT once the termination position is reached (e.8)."""
        st = self._s
        if self.termination_position == NULL_POSITION or st.terminated:
            return 0
        if (
            st.role == Role.FOLLOWER
            and st.state not in (ConsensusModuleState.TERMINATING, ConsensusModuleState.SNAPSHOT)
            and st.consumed_position >= self.termination_position
        ):
            st.state = ConsensusModuleState.TERMINATING
        if st.state != ConsensusModuleState.TERMINATING:
            return 0
        if not self.service_termination_sent:
            self.service_termination_sent = True
            self._services.to_service(ServiceTerminationPosition(log_position=self.termination_position).encode())
        if not self.services_terminated:
            if self._services.service_count and self._services.service_acks_at(self.termination_position) is None:
                return 0
            self.services_terminated = True  # latched: the acks are consumed from the queue
        if st.role == Role.LEADER:
            followers = {s.member_id for s in st.followers()}
            if not followers <= self.terminated_followers and now_ns < self.termination_deadline_ns:
                # Consensus messages may be lost: resend until each follower acks (or the deadline).
                if now_ns >= self.time_of_last_termination_send_ns + self._timeouts.leader_heartbeat_interval_ns:
                    self.time_of_last_termination_send_ns = now_ns
                    for member_id in followers - self.terminated_followers:
                        self._publisher.termination_position(
                            member_id, st.leadership_term_id, self.termination_position
                        )
                return 0
        else:
            self._publisher.termination_ack(
                st.leader_member_id, st.leadership_term_id, self.termination_position, st.member_id
            )
        self._recording_log.commit_log_position(st.leadership_term_id, self.termination_position)
        st.terminated = True
        self.terminated_reason = "expected termination"
        st.state = ConsensusModuleState.CLOSED
        st.event("stop", {"reason": "termination"}, term=st.leadership_term_id, pos=self.termination_position)
        return 1

    def terminate_now(self, reason: str, now_ns: int) -> None:
        """Aeron's ``unexpectedTermination``: tell the service(s) to terminate at once (position 0) and
        close, without the termination protocol (followers find out by the leader's silence)."""
        st = self._s
        self._services.to_service(ServiceTerminationPosition(log_position=0).encode())
        self.unexpected = True
        st.terminated = True
        self.terminated_reason = reason
        st.state = ConsensusModuleState.CLOSED
        st.event("stop", {"reason": reason}, term=st.leadership_term_id, pos=st.commit_position)

    def restore_uncommitted(self, log_position: int) -> None:
        """Our own termination action was never committed: forget it."""
        st = self._s
        if self.termination_position > log_position and st.leader_member_id == st.member_id:
            self.termination_position = NULL_POSITION

    def check_invariants(self) -> None:
        """Acks only from known followers; a terminated member is closed and had a termination position."""
        st = self._s
        if self.terminated_followers:
            known = {s.member_id for s in st.followers()}
            assert self.terminated_followers <= known, f"member {st.member_id}: acks from {self.terminated_followers}"
        if self.terminated_reason:
            assert st.terminated and (self.unexpected or self.termination_position != NULL_POSITION)
