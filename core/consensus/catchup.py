"""Follower catch-up (FOLLOWER_CATCHUP_*): joining the leader's log behind the live position and
consuming it until the leader's StopCatchup (Aeron's catch-up replay destination). The leader's
side — pointing the follower's send position at its CatchupPosition — is in log_replication."""

from __future__ import annotations

from clusterlab.core.codec.consensus import StopCatchup
from clusterlab.core.consensus.context import Timeouts
from clusterlab.core.consensus.election import ElectionError
from clusterlab.core.consensus.module_state import ModuleState


class Catchup:
    """The follower's catch-up state during an election."""

    def __init__(self, state: ModuleState, timeouts: Timeouts) -> None:
        self._s = state
        self._timeouts = timeouts
        self.is_catchup_stopped = True
        self.is_catchup_active = False
        self.catchup_log_joined = False
        self.time_of_last_catchup_progress_ns = 0
        self.catchup_progress = -1

    def reset(self) -> None:
        self.is_catchup_active = False
        self.is_catchup_stopped = True
        self.catchup_log_joined = False

    def initiated(self, now_ns: int) -> None:
        """CatchupPosition sent: wait for the first catch-up block at our position."""
        self.is_catchup_active = True
        self.is_catchup_stopped = False
        self.catchup_log_joined = False
        self.time_of_last_catchup_progress_ns = now_ns
        self.catchup_progress = -1

    def has_log_joined(self) -> bool:
        return self.catchup_log_joined

    def on_stop_catchup(self, src: int, msg: StopCatchup, now_ns: int) -> None:
        st = self._s
        if msg.leadership_term_id != st.election_term() or msg.follower_member_id != st.member_id:
            st.ignore("StopCatchup", f"for term {msg.leadership_term_id} member {msg.follower_member_id}")
            return
        self.is_catchup_active = False
        self.is_catchup_stopped = True

    def track_progress(self, progress: int, now_ns: int) -> None:
        """Progress = bytes appended or commit advanced; without either for the heartbeat timeout the
        catch-up has failed (e.g. its leader lost leadership after StopCatchup) and we elect again."""
        if progress > self.catchup_progress:
            self.catchup_progress = progress
            self.time_of_last_catchup_progress_ns = now_ns
        elif now_ns >= self.time_of_last_catchup_progress_ns + self._timeouts.leader_heartbeat_timeout_ns:
            raise ElectionError("no catchup progress")

    def check_invariants(self) -> None:
        """Catch-up is never both active and stopped."""
        assert not (self.is_catchup_active and self.is_catchup_stopped), f"member {self._s.member_id}: catch-up"
