"""Publishers: the only way the consensus module sends. Aeron's ``ConsensusPublisher`` and
``LogPublisher`` stand over Aeron publications; ours encode and hand bytes to the outbox."""

from __future__ import annotations

from clusterlab.core.codec.consensus import (
    AppendPosition,
    CanvassPosition,
    CatchupPosition,
    CommitPosition,
    NewLeadershipTerm,
    RequestVote,
    StopCatchup,
    TerminationAck,
    TerminationPosition,
    Vote,
)
from clusterlab.core.codec.transport import LogBlock, LogEndOfStream, ReplayBlock, ReplayRequest
from clusterlab.core.consensus.context import Channel, Outbox


class ConsensusPublisher:
    """Member-to-member consensus messages (Aeron ``ConsensusPublisher``)."""

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox

    def _send(self, member_id: int, payload: bytes) -> None:
        self._outbox.send(member_id, Channel.CONSENSUS, payload)

    def canvass_position(self, member_id: int, msg: CanvassPosition) -> None:
        self._send(member_id, msg.encode())

    def request_vote(self, member_id: int, msg: RequestVote) -> None:
        self._send(member_id, msg.encode())

    def vote(self, member_id: int, msg: Vote) -> None:
        self._send(member_id, msg.encode())

    def new_leadership_term(self, member_id: int, msg: NewLeadershipTerm) -> None:
        self._send(member_id, msg.encode())

    def append_position(
        self, member_id: int, leadership_term_id: int, log_position: int, follower_member_id: int, flags: int
    ) -> None:
        self._send(
            member_id,
            # _make: no __post_init__ validation of values the module computed (encode still packs them).
            AppendPosition._make(leadership_term_id, log_position, follower_member_id, flags).encode(),
        )

    def commit_position(
        self, member_id: int, leadership_term_id: int, log_position: int, leader_member_id: int
    ) -> None:
        self._send(
            member_id,
            CommitPosition._make(leadership_term_id, log_position, leader_member_id).encode(),
        )

    def catchup_position(
        self, member_id: int, leadership_term_id: int, log_position: int, follower_member_id: int, endpoint: str
    ) -> None:
        self._send(
            member_id,
            CatchupPosition(
                leadership_term_id=leadership_term_id,
                log_position=log_position,
                follower_member_id=follower_member_id,
                catchup_endpoint=endpoint,
            ).encode(),
        )

    def stop_catchup(self, member_id: int, leadership_term_id: int, follower_member_id: int) -> None:
        self._send(
            member_id,
            StopCatchup(leadership_term_id=leadership_term_id, follower_member_id=follower_member_id).encode(),
        )

    def termination_position(self, member_id: int, leadership_term_id: int, log_position: int) -> None:
        self._send(
            member_id, TerminationPosition(leadership_term_id=leadership_term_id, log_position=log_position).encode()
        )

    def termination_ack(self, member_id: int, leadership_term_id: int, log_position: int, own_id: int) -> None:
        self._send(
            member_id,
            TerminationAck(leadership_term_id=leadership_term_id, log_position=log_position, member_id=own_id).encode(),
        )


class LogPublisher:
    """The leader's log stream to followers (Aeron ``LogPublisher`` over an MDC publication).

    A block carries framed entries and the position of its first entry; live blocks go on the log
    channel, catch-up replays on the catch-up channel (same message, Aeron's replay-merge)."""

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox

    def block(
        self,
        member_id: int,
        *,
        catchup: bool,
        leadership_term_id: int,
        start_position: int,
        commit_position: int,
        leader_member_id: int,
        log_session_id: int,
        entries: bytes,
    ) -> None:
        self._outbox.send(
            member_id,
            Channel.CATCHUP if catchup else Channel.LOG,
            LogBlock._make(
                leadership_term_id, start_position, commit_position, leader_member_id, log_session_id, entries
            ).encode(),
        )

    def end_of_stream(self, member_id: int, leadership_term_id: int, log_position: int, leader_member_id: int) -> None:
        self._outbox.send(
            member_id,
            Channel.LOG,
            LogEndOfStream(
                leadership_term_id=leadership_term_id, log_position=log_position, leader_member_id=leader_member_id
            ).encode(),
        )


class ArchivePublisher:
    """Archive-to-archive requests and replies: replication of earlier terms (Aeron ``ReplicateRequest``
    and the replay it drives), carried on the archive channel."""

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox

    def replay_request(self, member_id: int, msg: ReplayRequest) -> None:
        self._outbox.send(member_id, Channel.ARCHIVE, msg.encode())

    def replay_block(self, member_id: int, msg: ReplayBlock) -> None:
        self._outbox.send(member_id, Channel.ARCHIVE, msg.encode())
