"""The node's answers to ``CountersRequest``, ``TestHook`` and ``PurgeSegments`` (control socket), kept
out of node.py."""

from __future__ import annotations

from clusterlab.core.codec.control import (
    ControlResponse,
    ControlResponseCode,
    Counters,
    DistinctError,
    PurgeSegments,
    TestHook,
    TestHookKind,
)
from clusterlab.core.consensus.context import ElectionState
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


def apply_test_hook(module: ConsensusModule | None, msg: TestHook) -> ControlResponse:
    """Arm or clear a hook on the module (clusterlab.core.consensus.hooks); ERROR names a bad value."""

    def answer(code: ControlResponseCode, text: str) -> ControlResponse:
        return ControlResponse(msg.correlation_id, code, text)

    if module is None:
        return answer(ControlResponseCode.REFUSED, "not started")
    hooks = module.hooks
    if msg.kind == TestHookKind.CLEAR:
        hooks.clear()
    elif msg.kind == TestHookKind.STALL_ELECTION_STATE:
        if msg.value not in ElectionState._value2member_map_:
            return answer(ControlResponseCode.ERROR, f"no election state {msg.value}")
        if msg.delay_ns < 0:
            return answer(ControlResponseCode.ERROR, f"stall duration must be >= 0 ns, got {msg.delay_ns}")
        hooks.clear()  # a new stall starts afresh
        hooks.stall_election_state = ElectionState(msg.value)
        hooks.stall_duration_ns = msg.delay_ns
    elif msg.kind == TestHookKind.FAIL_CATCHUP:
        if msg.value < 0:
            return answer(ControlResponseCode.ERROR, f"fail_catchup count must be >= 0, got {msg.value}")
        hooks.fail_catchup = msg.value
    elif msg.kind == TestHookKind.FAIL_REQUEST_VOTE:
        hooks.fail_request_vote_term = None if msg.value < 0 else msg.value
    elif msg.kind == TestHookKind.DELAY_SERVICE_MESSAGE:
        if msg.delay_ns < 0:
            return answer(ControlResponseCode.ERROR, f"delay_ns must be >= 0, got {msg.delay_ns}")
        hooks.delay_service_message_ns = msg.delay_ns
    return answer(ControlResponseCode.OK, hooks.describe())


def purge_segments(module: ConsensusModule | None, msg: PurgeSegments) -> ControlResponse:
    """Purge the log below the latest snapshot; the answer names the recording's new start position."""
    if module is None:
        return ControlResponse(msg.correlation_id, ControlResponseCode.REFUSED, "not started")
    try:
        start = module.purge_log_to_last_snapshot()
    except OSError as e:
        return ControlResponse(msg.correlation_id, ControlResponseCode.ERROR, f"purge failed: {e}"[:200])
    return ControlResponse(msg.correlation_id, ControlResponseCode.OK, f"start_position={start}")
