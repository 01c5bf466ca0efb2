"""The node's answers to ``CountersRequest`` and ``PurgeSegments`` (control socket), kept out of
node.py. A ``TestHook`` is answered by the member's test context (core/runtime/test_context.py)."""

from __future__ import annotations

from clusterlab.core.codec.control import (
    ControlResponse,
    ControlResponseCode,
    Counters,
    DistinctError,
    PurgeSegments,
)
from clusterlab.core.consensus.counters import NO_ELECTION, ClusterCounters
from clusterlab.core.consensus.module import ConsensusModule

MAX_ERROR_LOG_ENTRIES = 1000  # distinct errors a Counters reply carries (most observed first)


def counters_reply(module: ConsensusModule | None, member_id: int, correlation_id: int, now_ns: int) -> Counters:
    """The module's counters and distinct error log as a ``Counters`` message (``started`` 0 before
    the module started)."""
    if module is None:
        return Counters(correlation_id, 0, 0, -1, 0, 0, 0, 0, 0, 0, member_id, -1, -1, -1, NO_ELECTION, 0, ())
    c = module.counters(now_ns)
    errors = sorted(module.s.distinct_errors.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_ERROR_LOG_ENTRIES]
    error_log = tuple(DistinctError(count, ascii_text(message)) for message, count in errors)
    return Counters(
        correlation_id=correlation_id,
        commit_position=c.commit_position,
        election_count=c.election_count,
        leadership_term_id=c.leadership_term_id,
        snapshot_count=c.snapshot_count,
        last_snapshot_duration_ns=c.last_snapshot_duration_ns,
        max_snapshot_duration_ns=c.max_snapshot_duration_ns,
        errors=c.errors,
        timed_out_client_count=c.timed_out_client_count,
        cluster_time_ms=c.cluster_time_ms,
        member_id=c.member_id,
        module_state=c.module_state,
        role=c.role,
        control_toggle=c.control_toggle,
        election_state=c.election_state,
        started=1,
        error_log=error_log,
    )


def ascii_text(text: str) -> str:
    """``text`` as ASCII for an AsciiVar field (anything else backslash-escaped)."""
    return text.encode("ascii", "backslashreplace").decode("ascii")


def counters_of(msg: Counters) -> ClusterCounters:
    """The ``ClusterCounters`` a ``Counters`` reply carries."""
    return ClusterCounters(**{name: getattr(msg, name) for name in ClusterCounters.__dataclass_fields__})


def error_log_of(msg: Counters) -> dict[str, int]:
    """The distinct error log a ``Counters`` reply carries: message -> observations."""
    return {e.message: e.observation_count for e in msg.error_log}


def purge_segments(module: ConsensusModule | None, msg: PurgeSegments) -> ControlResponse:
    """Purge the log below the latest snapshot; the answer names the recording's new start position."""
    if module is None:
        return ControlResponse(msg.correlation_id, ControlResponseCode.REFUSED, "not started")
    try:
        start = module.purge_log_to_last_snapshot()
    except OSError as e:
        return ControlResponse(msg.correlation_id, ControlResponseCode.ERROR, f"purge failed: {e}"[:200])
    return ControlResponse(msg.correlation_id, ControlResponseCode.OK, f"start_position={start}")
