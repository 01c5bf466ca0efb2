"""Recovery at start (PROTOCOL.md c.10): make the recording log describe the log the archive holds,
invalidate snapshots whose log was lost, load the latest consensus-module snapshot and set the
positions the log adapter resumes from. Aeron's ``ConsensusModuleAgent.onStart`` / ``RecoveryPlan``."""

from __future__ import annotations

from clusterlab.core.archive.archive import Archive
from clusterlab.core.consensus.context import NULL_POSITION, ConsensusModuleState
from clusterlab.core.consensus.module_state import ModuleState
from clusterlab.core.consensus.recording_log import EntryType, RecordingLog, RecordingLogError, RecoveryPlan
from clusterlab.core.consensus.snapshots import Snapshots


def recover(
    st: ModuleState, archive_store: Archive, recording_log: RecordingLog, snapshots: Snapshots, service_count: int
) -> RecoveryPlan:
    """Recover one member's state from disk; returns the recovery plan the startup election starts from."""
    archive = archive_store.recording
    _invalidate_snapshots_beyond(st, recording_log, archive.stop_position)
    _truncate_terms_beyond(st, recording_log, archive.stop_position)
    plan = recording_log.create_recovery_plan(service_count, archive_store.recording_extent)
    if archive.repair is not None:
        r = archive.repair
        st.event(
            "truncate",
            {"repair": "torn tail", "from": r.from_position, "to": r.to_position, "reason": r.reason},
            pos=r.to_position,
        )
    st.restore_leadership_term_id(plan.last_leadership_term_id)
    st.restore_commit_position(0)
    if plan.snapshots:
        # Recovery = latest valid snapshot + replay of the log after it (c.10). The service loads
        # its own snapshot from the same recovery plan (Aeron's RecoveryState counter).
        cm_snapshot = plan.snapshots[0]
        st.restore_commit_position(snapshots.load_snapshot(cm_snapshot.recording_id))
        st.event(
            "snapshot_loaded",
            {"recording_id": cm_snapshot.recording_id, "module_state": snapshots.module_state()},
            term=cm_snapshot.leadership_term_id,
            pos=st.commit_position,
        )
    if st.commit_position < archive.start_position:
        # A recording that starts above where recovery resumes (a log purged, or copied from a backup from
        # a snapshot, without that snapshot) holds no log to replay from there: Aeron's archive refuses
        # the replay; refuse here, at start, naming both positions.
        raise RecordingLogError(
            f"cannot recover: the log recording starts at {archive.start_position}, above position "
            f"{st.commit_position} where recovery resumes (no valid snapshot at or after the log's start)"
        )
    st.restore_consumed_position(st.commit_position)
    st.restore_notified_commit_position(st.commit_position)
    st.state = ConsensusModuleState.ACTIVE
    st.event(
        "start",
        {
            "append_position": archive.stop_position,
            "last_leadership_term_id": plan.last_leadership_term_id,
            "leader_heartbeat_timeout_ns": st.timeouts.leader_heartbeat_timeout_ns,
            "election_timeout_ns": st.timeouts.election_timeout_ns,
            "session_timeout_ns": st.timeouts.session_timeout_ns,
            "session_close_events": True,  # each SessionClose the module applies is a session_close event
            "timer_events": True,  # each TimerEvent a follower or replay reads is a timer_event event
        },
    )
    return plan


def _invalidate_snapshots_beyond(st: ModuleState, recording_log: RecordingLog, stop: int) -> None:
    """A snapshot beyond the end of the recorded log (the log behind it was lost) cannot anchor a
    recovery: this member must refetch that log and replay it from the start (a follower that lacks the
    snapshot's log replays from the start). Invalidated here, before the service process reads the
    recovery plan, so node and service agree."""
    for entry in recording_log.entries():
        if entry.type == EntryType.SNAPSHOT and entry.is_valid and entry.log_position > stop:
            recording_log.invalidate_entry(entry.leadership_term_id, entry.entry_index)
            st.event(
                "snapshot_invalidated",
                {
                    "recording_id": entry.recording_id,
                    "service_id": entry.service_id,
                    "reason": "log behind the snapshot is missing",
                },
                pos=entry.log_position,
            )


def _truncate_terms_beyond(st: ModuleState, recording_log: RecordingLog, stop: int) -> None:
    """The recording log may describe more log than the archive holds (a torn tail repaired on open, or
    a recording truncated while the member was down): make it describe what we have, so we canvass with
    a true (log term, append position) and the leader walks us forward."""
    last = recording_log.find_last_term()
    removed = []
    if not st.rules.repairs_torn_tail():
        last = None  # the recording log keeps describing the lost tail
    if last is not None and (
        last.term_base_log_position > stop or (last.log_position != NULL_POSITION and last.log_position > stop)
    ):
        removed = recording_log.truncate_terms_after(stop)
    if removed:
        st.event(
            "truncate",
            {"recording_log": [e.describe() for e in removed], "reason": "recording shorter than recording log"},
            pos=stop,
        )
