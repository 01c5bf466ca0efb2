"""The protocol's rules at the points where a planted bug can change one: the consensus module asks its
context's ``rules`` (``ConsensusModuleContext.rules``) and never knows whether they are the protocol's.

``ConsensusRules`` is the protocol as Aeron Cluster runs it, and every production member runs it. The
test apparatus (``clusterlab.testing.mutants``) subclasses it to plant one realistic bug per rule, so
the black-box harness can be shown to catch each; nothing here names a bug. A real member process
takes other rules only through the runtime's ``CLUSTERLAB_RULES`` (a ``package.module:factory`` the
harness sets), imported by name, so no production module imports the apparatus.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # at run time imported where used: members and node_state import the context, which holds rules
    from clusterlab.core.codec.transport import LogBlock
    from clusterlab.core.consensus.members import MemberStatus
    from clusterlab.core.consensus.module import ConsensusModule
    from clusterlab.core.consensus.node_state import NodeState
    from clusterlab.core.consensus.sessions import ClusterSession
    from clusterlab.core.consensus.term_replication import TermReplication
    from clusterlab.core.consensus.timers import TimerService


class ConsensusRules:
    """The protocol's rules (Aeron Cluster's). A subclass may change one; the module asks at each point."""

    def describe(self) -> str:
        """What differs from the protocol's rules, for the member's log ("" for these)."""
        return ""

    # ------------------------------------------------------------------ election
    def quorum_member_count(self, member_count: int) -> int:
        """The member count a quorum of an election is counted from (a majority of it is a quorum)."""
        return member_count

    def is_quorum_candidate(self, statuses: Sequence[MemberStatus], candidate: MemberStatus, member_count: int) -> bool:
        """At the election timeout: a quorum of the members canvassed has a log no more recent than ours."""
        from clusterlab.core.consensus.members import is_quorum_candidate

        return is_quorum_candidate(statuses, candidate, self.quorum_member_count(member_count))

    def refuses_vote_for_log(
        self, own_term: int, own_position: int, candidate_term: int, candidate_position: int
    ) -> bool:
        """A RequestVote is refused when our log is more recent than the candidate's."""
        from clusterlab.core.consensus.members import compare_log

        return compare_log(own_term, own_position, candidate_term, candidate_position) > 0

    def record_vote(self, node_state: NodeState, candidate_term_id: int, log_position: int, timestamp: int) -> int:
        """The candidate term of a YES vote, written durably before the vote leaves (a restarted member
        never votes twice in one term); returns the candidate term the member now holds."""
        return node_state.propose_max_candidate_term_id(candidate_term_id, log_position, timestamp)

    def counts_vote(self, candidate_term_id: int, vote_candidate_term_id: int) -> bool:
        """A candidate in its ballot for ``candidate_term_id`` counts a Vote cast in the ballot for
        ``vote_candidate_term_id`` only when they are the same ballot (a late vote of an earlier candidacy
        says nothing about this one)."""
        return vote_candidate_term_id == candidate_term_id

    def keeps_vote_promise(self, leadership_term_id: int, vote_promise_term_id: int) -> bool:
        """A member in CANVASS follows a leader of ``leadership_term_id`` only when that term is at least
        the one it last voted YES for another member in (``vote_promise_term_id``): that vote promised
        to follow no leader of an earlier term."""
        return leadership_term_id >= vote_promise_term_id

    def counts_reported_log(self, reported_log_term: int, log_leadership_term_id: int, leadership_term_id: int) -> bool:
        """A leader-elect of ``leadership_term_id`` whose own log ends in ``log_leadership_term_id`` counts a
        member's reported position toward its commit position only when the member's log ends in the same
        term, or the member reports in the new term. A log that ends in an older term may hold another
        term's bytes at the same positions (a deposed leader's uncommitted tail)."""
        return reported_log_term in (log_leadership_term_id, leadership_term_id)

    def truncates_divergent_tail(self) -> bool:
        """A follower cuts an uncommitted tail the new leader's log lacks before following it."""
        return True

    def rejects_body_member_id(self) -> bool:
        """A member message whose body names a sender other than its proven source is dropped
        (core/consensus/senders.py): a stolen identity cannot speak in another member's name."""
        return True

    # ------------------------------------------------------------------ leading and following
    def steps_down_without_quorum(self) -> bool:
        """A leader whose followers stopped answering (no active quorum) enters an election."""
        return True

    def commit_position(self, quorum_position: int, append_position: int) -> int:
        """The leader's commit position: what a quorum appended, never past its own append position."""
        return min(quorum_position, append_position)

    def on_log_block(self, replication: TermReplication, msg: LogBlock, now_ns: int) -> None:
        """A follower appends a leader's log block as it arrives; its AppendPosition then reports only
        what it appended."""
        replication.append_log_block(msg, now_ns)

    def on_log_session_close(self, sessions: dict[int, ClusterSession], cluster_session_id: int) -> None:
        """A member applying a SessionClose from the log forgets the session (the leader already did)."""
        sessions.pop(cluster_session_id, None)

    def on_log_timer_event(self, timer_service: TimerService, correlation_id: int) -> None:
        """A member reading a TimerEvent from the log cancels that timer (or notes that it fired before
        its ScheduleTimer arrived); the leader took it off when it fired it."""
        timer_service.on_replay_timer_event(correlation_id)

    def on_cancel_timer(self, timer_service: TimerService, correlation_id: int) -> None:
        """A service's CancelTimer takes that timer off its consensus module's schedule, so no leader
        fires it after the cancel."""
        timer_service.cancel_timer(correlation_id)

    def follower_duties(self, module: ConsensusModule, now_ns: int) -> int:
        """Work an ACTIVE follower does beyond applying its leader's log: none. Only the leader fires
        expired timers and times client sessions out, into the log; followers apply what it logged."""
        return 0

    # ------------------------------------------------------------------ storage and snapshots
    def repairs_torn_tail(self) -> bool:
        """At start a torn log tail is cut off and the recording log cut back to the archive's end."""
        return True

    def snapshot_position(self, action_position: int, append_position: int) -> int:
        """A member's snapshot is recorded at the position of the ClusterAction that asked for it."""
        return action_position

    def snapshot_timers(self, timers: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The timers a consensus-module snapshot records, as (correlation_id, deadline): every one
        scheduled, so a member restored from it fires them as the one that took it would."""
        return timers


PROTOCOL_RULES = ConsensusRules()
