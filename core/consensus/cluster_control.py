"""Cluster control: SUSPEND / RESUME / SNAPSHOT / SHUTDOWN / ABORT (Aeron ``ClusterControl`` toggle).

The leader turns an accepted toggle into a ClusterActionRequest in the log (or into a termination)
and changes its module state when it appends it; followers change state when they meet the action
in the committed log (``on_log_cluster_action``). AdminRequest(SNAPSHOT) from a client is a toggle
request too.

The leader changes state before the action is committed, so it remembers the state each uncommitted
action left (Aeron's ``uncommittedPreviousState``: the action's position and the state before it).
Committed actions are forgotten (``sweep_uncommitted``); a leader that steps down with actions still
uncommitted goes back to the state before the first of them (``restore_uncommitted``), the state of
its committed log. If the next leader's log has those actions after all, this member meets them in
the committed log and changes state again then.
"""

from __future__ import annotations

from collections import deque

from clusterlab.core.archive.recording import RecordingStore
from clusterlab.core.codec.enums import AdminRequestType, AdminResponseCode, ClusterAction, ToggleState
from clusterlab.core.codec.framing import framed_length
from clusterlab.core.codec.log_events import ClusterActionRequest
from clusterlab.core.codec.session import AdminRequest, AdminResponse
from clusterlab.core.consensus.client_sessions import ClientSessions
from clusterlab.core.consensus.context import ConsensusModuleContext, ConsensusModuleState, Role
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.snapshots import Snapshots
from clusterlab.core.consensus.termination import Termination


class ClusterControl:
    """The control toggle and cluster actions of one member."""

    def __init__(
        self,
        state: ModuleState,
        ctx: ConsensusModuleContext,
        archive: RecordingStore,
        sessions: ClientSessions,
        snapshots: Snapshots,
        termination: Termination,
    ) -> None:
        self._s = state
        self._authorise_admin = ctx.authorise_admin
        self._archive = archive
        self._sessions = sessions
        self._snapshots = snapshots
        self._termination = termination
        self.toggle = ToggleState.INACTIVE
        # (position of an appended, uncommitted action, the module state before it), in log order.
        self.uncommitted_previous_states: deque[tuple[int, ConsensusModuleState]] = deque()

    def toggle_control(self, target: ToggleState) -> bool:
        """ClusterControl compare-and-set: from NEUTRAL to ``target``; RESUME only from SUSPEND.

        Refused on followers and during elections (the toggle is INACTIVE then)."""
        st = self._s
        expected = ToggleState.SUSPEND if target == ToggleState.RESUME else ToggleState.NEUTRAL
        if st.role != Role.LEADER or st.election is not None:
            return False
        # A leader elected while the cluster was suspended inherits SUSPENDED with a NEUTRAL toggle:
        # RESUME must still be possible, or nothing could ever resume the cluster.
        inherited_suspend = (
            target == ToggleState.RESUME
            and self.toggle == ToggleState.NEUTRAL
            and st.state == ConsensusModuleState.SUSPENDED
        )
        if self.toggle != expected and not inherited_suspend:
            return False
        self.toggle = target
        return True

    def on_admin_request(self, msg: AdminRequest, now_ns: int) -> None:
        s = self._sessions.open_session(msg.cluster_session_id, msg.leadership_term_id)
        if s is None:
            self._s.ignore("AdminRequest", "no open session in this term")
            return

        def respond(code: AdminResponseCode, text: str) -> None:
            self._sessions.send_egress(
                s.response_channel,
                AdminResponse(
                    cluster_session_id=s.cluster_session_id,
                    correlation_id=msg.correlation_id,
                    request_type=msg.request_type,
                    response_code=code,
                    message=text,
                    payload=b"",
                ).encode(),
            )

        # Aeron's order: authorise first (whatever the type), then an unknown type is an ERROR response.
        if not self._authorise_admin(s.encoded_principal, msg.request_type):
            respond(
                AdminResponseCode.UNAUTHORISED_ACCESS,
                f"Execution of the {msg.request_type.name} request was not authorised",
            )
        elif msg.request_type != AdminRequestType.SNAPSHOT:
            respond(AdminResponseCode.ERROR, f"Unknown request type: {msg.request_type.name}")
        elif self.toggle_control(ToggleState.SNAPSHOT):
            respond(AdminResponseCode.OK, "")
        else:
            respond(AdminResponseCode.ERROR, f"Failed to switch ClusterControl to SNAPSHOT from {self.toggle.name}")

    # ------------------------------------------------------------------ leader
    def append_cluster_action(self, action: ClusterAction, now_ns: int, flags: int = 0) -> int:
        """ClusterActionRequest whose log_position is the position just after it (Aeron's rule)."""
        st = self._s
        probe = ClusterActionRequest(
            leadership_term_id=st.leadership_term_id,
            log_position=0,
            timestamp=st.cluster_time_ms(now_ns),
            action=action,
            flags=flags,
        )
        position = self._archive.stop_position + framed_length(len(probe.encode()))
        msg = ClusterActionRequest(
            leadership_term_id=st.leadership_term_id,
            log_position=position,
            timestamp=probe.timestamp,
            action=action,
            flags=flags,
        )
        end = self._archive.append_entry(msg.encode(), st.leadership_term_id)
        assert end == position, f"cluster action appended to {end}, expected {position}"
        st.event("cluster_action", {"action": action.name}, term=st.leadership_term_id, pos=position)
        return position

    def check_toggle(self, now_ns: int) -> int:
        """Leader duty cycle: act on an accepted toggle."""
        st = self._s
        t = self.toggle
        if t in (ToggleState.NEUTRAL, ToggleState.INACTIVE):
            return 0
        state = st.state
        if t == ToggleState.SUSPEND and state == ConsensusModuleState.ACTIVE:
            self._append_state_change(ClusterAction.SUSPEND, ConsensusModuleState.SUSPENDED, now_ns)
        elif t == ToggleState.RESUME and state == ConsensusModuleState.SUSPENDED:
            self._append_state_change(ClusterAction.RESUME, ConsensusModuleState.ACTIVE, now_ns)
            self.toggle = ToggleState.NEUTRAL
            self._sessions.release_held_ingress(now_ns)
        elif t == ToggleState.SNAPSHOT and state == ConsensusModuleState.ACTIVE:
            position = self._append_state_change(ClusterAction.SNAPSHOT, ConsensusModuleState.SNAPSHOT, now_ns)
            self._snapshots.begin(position, st.leadership_term_id)
        elif t == ToggleState.STANDBY_SNAPSHOT and state == ConsensusModuleState.ACTIVE:
            self.append_cluster_action(ClusterAction.SNAPSHOT, now_ns, flags=1)
            self.toggle = ToggleState.NEUTRAL
        elif t == ToggleState.SHUTDOWN and state == ConsensusModuleState.ACTIVE:
            position = self._append_state_change(ClusterAction.SNAPSHOT, ConsensusModuleState.SNAPSHOT, now_ns)
            self._snapshots.begin(position, st.leadership_term_id)
            self._termination.begin(position, now_ns, shutdown=True)
        elif t == ToggleState.ABORT and state in (ConsensusModuleState.ACTIVE, ConsensusModuleState.SUSPENDED):
            self._termination.begin(self._archive.stop_position, now_ns, shutdown=False)
            st.state = ConsensusModuleState.TERMINATING
        else:
            return 0
        return 1

    def _append_state_change(self, action: ClusterAction, new_state: ConsensusModuleState, now_ns: int) -> int:
        """Append ``action`` and enter ``new_state``, remembering the state it leaves until the action
        commits (Aeron ``offerPositionAndPreviousState``). Returns the action's position."""
        st = self._s
        position = self.append_cluster_action(action, now_ns)
        self.uncommitted_previous_states.append((position, st.state))
        st.state = new_state
        return position

    def resume_after_snapshot(self, now_ns: int) -> None:
        """The snapshot is done and the leader is ACTIVE again: take held ingress."""
        self.toggle = ToggleState.NEUTRAL
        self._sessions.release_held_ingress(now_ns)

    def on_leader_election_complete(self) -> None:
        self.toggle = ToggleState.NEUTRAL

    def sweep_uncommitted(self, commit_position: int) -> None:
        """Leader: forget the previous states of actions now committed (Aeron ``sweepUncommittedEntriesTo``)."""
        previous = self.uncommitted_previous_states
        while previous and previous[0][0] <= commit_position:
            previous.popleft()

    def restore_uncommitted(self, log_position: int) -> None:
        """Leaving leadership: no toggle until the next leader's election completes, and the module
        state goes back to the state before the first action past ``log_position`` (the committed
        log's state; Aeron ``restoreUncommittedEntries``)."""
        st = self._s
        self.toggle = ToggleState.INACTIVE
        self.sweep_uncommitted(log_position)
        if self.uncommitted_previous_states and st.state != ConsensusModuleState.CLOSED:
            position, committed_state = self.uncommitted_previous_states[0]
            st.event(
                "state_rollback",
                {"from": st.state.name, "to": committed_state.name},
                term=st.leadership_term_id,
                pos=position,
            )
            st.state = committed_state
        self.uncommitted_previous_states.clear()

    # ------------------------------------------------------------------ committed log
    def on_log_cluster_action(self, payload: bytes) -> bool:
        """A ClusterActionRequest in the committed log; False pauses the log adapter (snapshot)."""
        st = self._s
        ev = ClusterActionRequest.decode(payload)
        # Every committed action is handled, whatever its term: Aeron's module
        # tracks the log's term while it replays (so its "same term" check always holds), and our
        # follower consumes an earlier term's committed tail after the election; skipping a SNAPSHOT
        # there would leave the services' snapshots without the module's.
        if ev.action == ClusterAction.SUSPEND:
            st.state = ConsensusModuleState.SUSPENDED
        elif ev.action == ClusterAction.RESUME:
            st.state = ConsensusModuleState.ACTIVE
        elif ev.action == ClusterAction.SNAPSHOT and ev.flags == 0:
            st.state = ConsensusModuleState.SNAPSHOT
            # The action's term: ours may lag while catching up.
            self._snapshots.begin(ev.log_position, ev.leadership_term_id)
            return False
        return True

    def check_invariants(self) -> None:
        """Only a leader out of an election holds a live toggle or uncommitted actions; those are in
        log order."""
        st = self._s
        if st.election is None and st.role == Role.FOLLOWER:
            assert self.toggle == ToggleState.INACTIVE, f"member {st.member_id}: follower toggle {self.toggle.name}"
            assert not self.uncommitted_previous_states, (
                f"member {st.member_id}: follower holds uncommitted actions {list(self.uncommitted_previous_states)}"
            )
        last = -1
        for position, _ in self.uncommitted_previous_states:
            assert position > last, f"member {st.member_id}: uncommitted actions out of log order"
            last = position
