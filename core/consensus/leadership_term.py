"""The one builder of ``NewLeadershipTerm`` (PROTOCOL.md b.4), used by a leader in its election and
in steady state (the answer to a CanvassPosition).

A NewLeadershipTerm is tailored to the recipient's ``log_leadership_term_id``: when the recipient's
log ends in an earlier term, the ``next_*`` fields describe the term after it from the leader's
recording log, so the recipient knows where that term ended (truncate or replicate up to there).
Aeron builds it in two places with two rules (``Election.publishNewLeadershipTerm`` and
``ConsensusModuleAgent.onCanvassPosition``); they agree wherever both apply, and we keep the
union as one rule:

- the term after the recipient's is in our recording log: its id and base, and its end — or, if
  it is our last (open) term, our append position, since that is where it ends so far (Election);
- it is not (the recipient's log ends in our last term but we are in a newer one): our term
  and its base, end unknown (both);
- the recipient's log is already in our term: nothing next (NULL), so that a follower whose log
  ends in our term never takes our term base for a truncation point (ConsensusModuleAgent).
"""

from __future__ import annotations

from collections.abc import Callable

from clusterlab.core.codec.consensus import NewLeadershipTerm
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.consensus.context import APP_VERSION, NULL_POSITION, NULL_VALUE
from clusterlab.core.consensus.recording_log import Entry

TermEntryLookup = Callable[[int], Entry | None]  # RecordingLog.find_term_entry


def new_leadership_term(
    find_term_entry: TermEntryLookup,
    *,
    log_leadership_term_id: int,
    leadership_term_id: int,
    term_base_log_position: int,
    log_position: int,
    leader_recording_id: int,
    timestamp: int,
    leader_member_id: int,
    log_session_id: int,
    is_startup: bool,
) -> NewLeadershipTerm:
    """The NewLeadershipTerm a leader of ``leadership_term_id`` (log from ``term_base_log_position``
    to ``log_position``) sends a member whose log ends in ``log_leadership_term_id``."""
    assert log_position >= term_base_log_position, f"log position {log_position} before term base"
    if log_leadership_term_id < leadership_term_id:
        nxt = find_term_entry(log_leadership_term_id + 1)
        if nxt is not None:
            next_term, next_base = nxt.leadership_term_id, nxt.term_base_log_position
            next_log_position = nxt.log_position if nxt.log_position != NULL_POSITION else log_position
        else:
            next_term, next_base, next_log_position = leadership_term_id, term_base_log_position, NULL_POSITION
    else:
        next_term, next_base, next_log_position = NULL_VALUE, NULL_POSITION, NULL_POSITION
    return NewLeadershipTerm(
        log_leadership_term_id=log_leadership_term_id,
        next_leadership_term_id=next_term,
        next_term_base_log_position=next_base,
        next_log_position=next_log_position,
        leadership_term_id=leadership_term_id,
        term_base_log_position=term_base_log_position,
        log_position=log_position,
        leader_recording_id=leader_recording_id,
        timestamp=timestamp,
        leader_member_id=leader_member_id,
        log_session_id=log_session_id,
        app_version=APP_VERSION,
        is_startup=BooleanType.TRUE if is_startup else BooleanType.FALSE,
    )
