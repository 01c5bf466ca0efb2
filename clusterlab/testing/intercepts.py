"""The armed intercepts of a member under test (``clusterlab.core.consensus.intercepts``), as Aeron's
system tests use ConsensusModule intercepts; off until armed.

* ``stall_election_state``: once the election enters that state the member stops: its election does no
  work (no timeouts fire) and member messages are dropped with a counted reason, until cleared, or for
  ``stall_duration_ns`` once (Aeron's StallLeaderLogReplicationIntercept parks the agent 2.5 s).
* ``fail_catchup``: the next N elections that reach FOLLOWER_CATCHUP fail there (Aeron's election error
  path: log, back to INIT, a new election).
* ``fail_request_vote_term``: a RequestVote of another candidate for that candidate term fails (counted
  error, no vote), as Aeron's FailFirstElectionIntercept throws in ``Election.onRequestVote``.
* ``delay_service_message_ns``: the next message the module sends its service(s) is held that long
  (everything after it waits behind it, order kept), as a service slow to handle one message.
* ``member_message_delays``: template id -> (delay_ns, duplicate). Every member message of that type
  the module sends is held ``delay_ns`` (later messages overtake it: a vote that arrives in a later
  ballot, an AppendPosition from an older term), or with ``duplicate`` sent at once and its copy again
  ``delay_ns`` later. Removing a rule leaves the held messages to go when due, as a network would.
* ``stop_log_recording``: at its next duty cycle the member's archive stops the log recording where it
  ends, once (Aeron's test calls ``tryStopRecordingByIdentity`` on the leader's archive); the module
  takes it as the input "the log recording stopped at P".

The simulator arms the fields directly (``SimCluster.stall_election`` ...); a member process through
the ``TestHook`` control message, which its test context answers (:func:`apply_test_hook`).
"""

from __future__ import annotations

import heapq
from collections import deque

from clusterlab.core.codec import consensus
from clusterlab.core.codec.control import ControlResponse, ControlResponseCode, TestHook, TestHookKind
from clusterlab.core.codec.header import HEADER_LENGTH, peek_template_id
from clusterlab.core.consensus.context import Channel, ElectionState, Outbox
from clusterlab.core.consensus.intercepts import Intercepts

MEMBER_MESSAGE_TEMPLATES: dict[int, str] = {m.TEMPLATE_ID: m.__name__ for m in consensus.MESSAGES}
"""The member-to-member messages a delay rule can hold: template id -> message name."""


def member_message_template(name: str) -> int:
    """The template id of member message ``name`` (``Vote``, ``AppendPosition``...); ValueError lists them."""
    for template_id, known in MEMBER_MESSAGE_TEMPLATES.items():
        if known == name:
            return template_id
    raise ValueError(f"no member message {name!r}; known: {', '.join(MEMBER_MESSAGE_TEMPLATES.values())}")


class TestHooks(Intercepts):
    """The armed intercepts of one consensus module (see module docstring)."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        self.stall_election_state: ElectionState | None = None
        self.stall_duration_ns = 0  # 0: until cleared; else stall this long once, then the hook clears
        self.stall_leadership_term_id: int | None = None  # only in this election term (None: any)
        self._stall_started_ns: int | None = None
        self.fail_catchup = 0
        self.fail_request_vote_term: int | None = None
        self.delay_service_message_ns = 0
        self.member_message_delays: dict[int, tuple[int, bool]] = {}
        self.member_messages_held = 0  # how many member messages the delay rules held (tests assert it)
        self.catchup_failures = 0  # how many catch-ups the hook failed (tests assert it fired)
        self.stalls_started = 0  # how many stalls began (tests assert the hook fired)
        self.stop_log_recording = False
        self.log_recording_stops = 0  # how many times the hook stopped the log recording
        self._outbox: HookedOutbox | None = None

    def outbox(self, outbox: Outbox) -> Outbox:
        self._outbox = HookedOutbox(outbox, self)
        return self._outbox

    def on_input(self, now_ns: int) -> None:
        if self._outbox is not None:
            self._outbox.now_ns = now_ns

    def release_due(self, now_ns: int) -> int:
        return self._outbox.release_due(now_ns) if self._outbox is not None else 0

    def next_due_ns(self) -> int | None:
        return self._outbox.next_due_ns() if self._outbox is not None else None

    def fails_request_vote(self, candidate_term_id: int) -> bool:
        return candidate_term_id == self.fail_request_vote_term

    def stops_log_recording(self) -> bool:
        if not self.stop_log_recording:
            return False
        self.stop_log_recording = False  # once
        self.log_recording_stops += 1
        return True

    def clear(self) -> None:
        self.stop_log_recording = False
        self.stall_election_state = None
        self.stall_duration_ns = 0
        self.stall_leadership_term_id = None
        self._stall_started_ns = None
        self.fail_catchup = 0
        self.fail_request_vote_term = None
        self.delay_service_message_ns = 0
        self.member_message_delays.clear()

    def stalls(self, state: ElectionState | None, now_ns: int, leadership_term_id: int) -> bool:
        """Whether the member stays stalled in ``state`` of the election for ``leadership_term_id`` now
        (a timed stall starts at the first ask)."""
        if state is None or state != self.stall_election_state:
            return False
        if self.stall_leadership_term_id is not None and leadership_term_id != self.stall_leadership_term_id:
            return False
        if self.stall_duration_ns == 0:
            return True
        if self._stall_started_ns is None:
            self._stall_started_ns = now_ns
            self.stalls_started += 1
        if now_ns < self._stall_started_ns + self.stall_duration_ns:
            return True
        self.stall_election_state = None  # once
        self.stall_duration_ns = 0
        self._stall_started_ns = None
        return False

    def stall_deadline_ns(self) -> int | None:
        """When a running timed stall ends (the module's next deadline), else None."""
        if self._stall_started_ns is None or self.stall_duration_ns == 0:
            return None
        return self._stall_started_ns + self.stall_duration_ns

    def fails_catchup(self, state: ElectionState) -> bool:
        """True (and one failure used) if the hook fails a catch-up in ``state``."""
        if self.fail_catchup > 0 and state == ElectionState.FOLLOWER_CATCHUP:
            self.fail_catchup -= 1
            self.catchup_failures += 1
            return True
        return False

    def describe(self) -> str:
        stall = self.stall_election_state.name if self.stall_election_state is not None else "-"
        return (
            f"TestHooks(stall={stall} stall_duration_ns={self.stall_duration_ns} fail_catchup={self.fail_catchup} "
            f"fail_request_vote_term={self.fail_request_vote_term} "
            f"delay_service_message_ns={self.delay_service_message_ns} "
            f"member_message_delays={dict(sorted(self.member_message_delays.items()))} "
            f"stop_log_recording={self.stop_log_recording})"
        )


class HookedOutbox:
    """The module's outbox with the delay hooks: a held service message and everything sent to the
    service after it wait until ``release_due`` passes its due time; a member message whose template
    has a delay rule waits on its own (others overtake it); other messages go straight on."""

    def __init__(self, outbox: Outbox, hooks: TestHooks) -> None:
        self._outbox = outbox
        self._hooks = hooks
        self.now_ns = 0  # set by the module before each input
        self._held: deque[tuple[int, bytes]] = deque()
        self._due_ns = 0
        self._late: list[tuple[int, int, int, bytes]] = []  # (due_ns, seq, member_id, payload): a heap
        self._late_seq = 0

    def send(self, member_id: int, channel: Channel, payload: bytes) -> None:
        if channel == Channel.CONSENSUS and self._hooks.member_message_delays and len(payload) >= HEADER_LENGTH:
            rule = self._hooks.member_message_delays.get(peek_template_id(payload))
            if rule is not None:
                self._hold_member_message(member_id, payload, *rule)
                return
        if channel != Channel.SERVICE:
            self._outbox.send(member_id, channel, payload)
            return
        if not self._held and self._hooks.delay_service_message_ns > 0:
            self._due_ns = self.now_ns + self._hooks.delay_service_message_ns
            self._hooks.delay_service_message_ns = 0  # one message
            self._held.append((member_id, payload))
            return
        if self._held:
            self._held.append((member_id, payload))
            return
        self._outbox.send(member_id, channel, payload)

    def send_egress(self, response_channel: str, payload: bytes) -> None:
        self._outbox.send_egress(response_channel, payload)

    def _hold_member_message(self, member_id: int, payload: bytes, delay_ns: int, duplicate: bool) -> None:
        if duplicate:
            self._outbox.send(member_id, Channel.CONSENSUS, payload)
        heapq.heappush(self._late, (self.now_ns + delay_ns, self._late_seq, member_id, payload))
        self._late_seq += 1
        self._hooks.member_messages_held += 1

    def release_due(self, now_ns: int) -> int:
        """Send the held messages that are due; returns how many went."""
        n = 0
        while self._late and self._late[0][0] <= now_ns:
            _, _, member_id, payload = heapq.heappop(self._late)
            self._outbox.send(member_id, Channel.CONSENSUS, payload)
            n += 1
        if not self._held or now_ns < self._due_ns:
            return n
        n += len(self._held)
        while self._held:
            member_id, payload = self._held.popleft()
            self._outbox.send(member_id, Channel.SERVICE, payload)
        return n

    def next_due_ns(self) -> int | None:
        dues = ([self._due_ns] if self._held else []) + ([self._late[0][0]] if self._late else [])
        return min(dues) if dues else None


def apply_test_hook(hooks: TestHooks, msg: TestHook) -> ControlResponse:
    """Arm or clear one of ``hooks`` as the ``TestHook`` control message says; ERROR names a bad value."""

    def answer(code: ControlResponseCode, text: str) -> ControlResponse:
        return ControlResponse(msg.correlation_id, code, text)

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
    elif msg.kind in (TestHookKind.DELAY_MEMBER_MESSAGE, TestHookKind.DUPLICATE_MEMBER_MESSAGE):
        if msg.delay_ns < 0:
            return answer(ControlResponseCode.ERROR, f"delay_ns must be >= 0, got {msg.delay_ns}")
        if msg.value not in MEMBER_MESSAGE_TEMPLATES:
            return answer(ControlResponseCode.ERROR, f"no member message has template id {msg.value}")
        if msg.delay_ns == 0:
            hooks.member_message_delays.pop(msg.value, None)
        else:
            duplicate = msg.kind == TestHookKind.DUPLICATE_MEMBER_MESSAGE
            hooks.member_message_delays[msg.value] = (msg.delay_ns, duplicate)
    elif msg.kind == TestHookKind.STOP_LOG_RECORDING:
        hooks.stop_log_recording = True
    return answer(ControlResponseCode.OK, hooks.describe())
