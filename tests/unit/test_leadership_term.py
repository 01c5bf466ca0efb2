"""The one NewLeadershipTerm builder (core/consensus/leadership_term.py): its ``next_*`` rule for each
kind of recipient, the same whether the leader is in its election or in steady state."""

from __future__ import annotations

import pytest
from clusterlab.core.codec.consensus import NewLeadershipTerm
from clusterlab.core.codec.enums import BooleanType
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE
from clusterlab.core.consensus.leadership_term import new_leadership_term
from clusterlab.core.consensus.recording_log import Entry, EntryType

# The leader's recording log: terms 0 [0, 100), 1 [100, 250), 2 from 250 (open: our last term).
TERMS = {
    0: (0, 100),
    1: (100, 250),
    2: (250, NULL_POSITION),
}


def find_term_entry(leadership_term_id: int) -> Entry | None:
    if leadership_term_id not in TERMS:
        return None
    base, end = TERMS[leadership_term_id]
    return Entry(0, leadership_term_id, base, end, 0, -1, EntryType.TERM, leadership_term_id)


def build(log_leadership_term_id: int, leadership_term_id: int = 2, log_position: int = 400) -> NewLeadershipTerm:
    return new_leadership_term(
        find_term_entry,
        log_leadership_term_id=log_leadership_term_id,
        leadership_term_id=leadership_term_id,
        term_base_log_position=250,
        log_position=log_position,
        leader_recording_id=0,
        timestamp=7,
        leader_member_id=1,
        log_session_id=42,
        is_startup=True,
    )


def next_fields(msg: NewLeadershipTerm) -> tuple[int, int, int]:
    return msg.next_leadership_term_id, msg.next_term_base_log_position, msg.next_log_position


def test_recipient_in_an_older_closed_term_learns_where_the_next_term_ended() -> None:
    assert next_fields(build(log_leadership_term_id=0)) == (1, 100, 250)


def test_next_term_still_open_ends_at_the_leaders_log_position() -> None:
    # Term 2 is our last term and still open: it ends, so far, where our log ends.
    assert next_fields(build(log_leadership_term_id=1)) == (2, 250, 400)


def test_next_term_missing_from_the_recording_log_is_our_term_from_its_base() -> None:
    # We lead term 3, whose TERM entry is not written yet (an election before LEADER_INIT).
    msg = build(log_leadership_term_id=2, leadership_term_id=3, log_position=250)
    assert next_fields(msg) == (3, 250, NULL_POSITION)


@pytest.mark.parametrize("log_position", [250, 400], ids=["leader-ready", "steady-state"])
def test_recipient_already_in_our_term_gets_nothing_next(log_position: int) -> None:
    # Nothing it could take for a truncation point: a follower whose log ends in our term past our
    # base must keep it, in an election as in steady state.
    assert next_fields(build(log_leadership_term_id=2, log_position=log_position)) == (
        NULL_VALUE,
        NULL_POSITION,
        NULL_POSITION,
    )


def test_the_rest_of_the_message_describes_the_leader() -> None:
    msg = build(log_leadership_term_id=0)
    assert (msg.leadership_term_id, msg.term_base_log_position, msg.log_position) == (2, 250, 400)
    assert (msg.leader_member_id, msg.log_session_id, msg.timestamp) == (1, 42, 7)
    assert msg.is_startup == BooleanType.TRUE
    assert NewLeadershipTerm.decode(msg.encode()) == msg
