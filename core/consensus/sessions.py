"""Client sessions as the consensus module keeps them (Aeron ``ClusterSession``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from clusterlab.core.codec.enums import CloseReason
from clusterlab.core.consensus.context import NULL_POSITION, NULL_VALUE

# The detail of the SessionEvent ERROR that refuses a connect while the leader holds
# ``max_concurrent_sessions`` sessions (Aeron: "concurrent session limit").
SESSION_LIMIT: Final = "concurrent session limit"


class ClusterSessionState(IntEnum):
    """Aeron ``ClusterSession.State``."""

    INIT = 0
    CONNECTING = 1
    CONNECTED = 2
    CHALLENGED = 3
    AUTHENTICATED = 4
    REJECTED = 5
    OPEN = 6
    CLOSING = 7
    INVALID = 8
    CLOSED = 9


@dataclass(slots=True)
class ClusterSession:
    """One client session. Pending sessions live on the leader only; OPEN ones on every member."""

    cluster_session_id: int
    response_stream_id: int
    response_channel: str
    correlation_id: int = NULL_VALUE
    state: ClusterSessionState = ClusterSessionState.INIT
    encoded_principal: bytes = b""
    encoded_challenge: bytes = b""
    time_of_last_activity_ns: int = 0
    opened_log_position: int = NULL_POSITION  # log position after its SessionOpenEvent
    close_reason: CloseReason | None = None
    has_new_leader_event_pending: bool = False
    has_open_event_pending: bool = False  # OK SessionEvent still to send to the client
    reject_detail: str = ""

    def describe(self) -> str:
        """One canonical line."""
        reason = self.close_reason.name if self.close_reason is not None else "-"
        return (
            f"ClusterSession(id={self.cluster_session_id} state={self.state.name} channel={self.response_channel!r} "
            f"opened_at={self.opened_log_position} close_reason={reason})"
        )

    def closing(self, reason: CloseReason) -> None:
        """Aeron ``closing``: zero activity so the session checker handles it on its next tick."""
        self.state = ClusterSessionState.CLOSING
        self.close_reason = reason
        self.time_of_last_activity_ns = -(1 << 62)
