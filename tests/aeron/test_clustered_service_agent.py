"""Ports of Aeron's ``ClusteredServiceAgentTest`` (aeron-cluster service package)."""

from __future__ import annotations

from clusterlab.core.codec.enums import BooleanType, CloseReason
from clusterlab.core.codec.framing import frame
from clusterlab.core.codec.log_events import SessionCloseEvent
from clusterlab.core.codec.service import JoinLog
from clusterlab.core.codec.transport import LogBlock
from clusterlab.core.consensus.context import Role
from clusterlab.core.service.agent import ClusteredServiceAgent
from clusterlab.harness.services.kv import KeyValueService

MAX_LONG = 2**63 - 1


def test_should_log_error_instead_of_throwing_if_session_is_not_found_on_close() -> None:
    """ClusteredServiceAgentTest.shouldLogErrorInsteadOfThrowingIfSessionIsNotFoundOnClose: a
    SessionCloseEvent for a session the service does not know is counted and logged, not raised."""
    lines: list[str] = []
    agent = ClusteredServiceAgent(0, 0, KeyValueService(), lambda _m: None, lambda *_: None, None, log=lines.append)
    agent.start()
    agent.on_service_message(
        JoinLog(
            log_position=0,
            max_log_position=MAX_LONG,
            member_id=0,
            log_session_id=1,
            log_stream_id=100,
            is_startup=BooleanType.TRUE,
            role=int(Role.FOLLOWER),
            log_channel="log:0",
        ).encode()
    )
    close = frame(
        SessionCloseEvent(
            leadership_term_id=0, cluster_session_id=99, timestamp=9999, close_reason=CloseReason.CLIENT_ACTION
        ).encode(),
        0,
        0,
    )
    before = sum(agent.ignored.values())
    agent.on_service_message(
        LogBlock(
            leadership_term_id=0,
            start_position=0,
            commit_position=len(close),
            leader_member_id=0,
            log_session_id=1,
            entries=close,
        ).encode()
    )
    assert sum(agent.ignored.values()) == before + 1
    assert agent.ignored["unknown session close"] == 1
    assert any("unknown session close" in line and "99" in line for line in lines)
    assert agent.log_position == len(close), "the entry is consumed; the service goes on"
