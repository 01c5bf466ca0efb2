"""The points where a test intercepts a running member, as Aeron's system tests do through their
ConsensusModule intercepts (StallLeaderLogReplicationIntercept, FailFirstElectionIntercept, a catch-up
that fails, a service slow to take one message) or through the archive (a log recording stopped).

The consensus module asks its context's ``intercepts`` at each point; :class:`Intercepts` intercepts
nothing, and every production member runs it. The test apparatus (``clusterlab.testing.intercepts``)
subclasses it with hooks a test arms while the member runs; nothing here knows how they are armed."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the context holds the intercepts
    from clusterlab.core.consensus.context import ElectionState, Outbox


class Intercepts:
    """No interception: the member runs as in production. A subclass may intercept at any point."""

    def outbox(self, outbox: Outbox) -> Outbox:
        """The outbox the module sends through: ``outbox`` itself (a test may hold messages back)."""
        return outbox

    def on_input(self, now_ns: int) -> None:
        """The module takes an input (a message or a duty cycle) at ``now_ns``."""

    def release_due(self, now_ns: int) -> int:
        """Send what the outbox held back and is now due; returns how many messages went."""
        return 0

    def next_due_ns(self) -> int | None:
        """When held-back messages are next due (the module's next deadline), else None."""
        return None

    def stalls(self, state: ElectionState | None, now_ns: int, leadership_term_id: int) -> bool:
        """Whether the member stays stalled in election ``state`` now: no election work, member
        messages dropped."""
        return False

    def stall_deadline_ns(self) -> int | None:
        """When a running timed stall ends, else None."""
        return None

    def fails_catchup(self, state: ElectionState) -> bool:
        """Whether the election's catch-up fails in ``state`` now (Aeron's election error path)."""
        return False

    def fails_request_vote(self, candidate_term_id: int) -> bool:
        """Whether another candidate's RequestVote for ``candidate_term_id`` fails in its handler."""
        return False

    def stops_log_recording(self) -> bool:
        """Whether the test stops the member's log recording now (asked once per duty cycle; the module
        then takes it as the input "the log recording stopped where it ends")."""
        return False

    def describe(self) -> str:
        """What is armed, for the member's log and a control reply."""
        return "no intercepts"


NO_INTERCEPTS = Intercepts()
