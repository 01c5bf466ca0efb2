"""Sample services: behaviour, incremental digests, snapshot/restore, and a run through the agent."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import xxhash
from clusterlab.core.archive.catalogue import Catalogue
from clusterlab.core.archive.snapshots import SnapshotStore
from clusterlab.core.codec import (
    BooleanType,
    CloseReason,
    ClusterAction,
    ClusterActionRequest,
    ClusterTimeUnit,
    Frame,
    JoinLog,
    ScheduleTimer,
    ServiceAck,
    SessionOpenEvent,
    TimerEvent,
    decode,
    encode_session_message,
    frame,
    framed_length,
    unframe,
)
from clusterlab.core.codec.header import HEADER_LENGTH
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.core.service import (
    AppliedEntry,
    ClientSession,
    ClusteredServiceAgent,
    Role,
    SnapshotImage,
    SnapshotWriter,
)
from clusterlab.harness.services import SERVICES, CounterService, EchoService, KeyValueService, counter, kv, kvdigest
from clusterlab.harness.services.digest import MultisetDigest, item_hash, str_item_head
from hypothesis import given, settings
from hypothesis import strategies as st


class FakeCluster:
    """Just enough of ``Cluster`` for a service driven directly by a test."""

    def __init__(self, time_unit: ClusterTimeUnit = ClusterTimeUnit.MILLIS) -> None:
        self.member_id = 0
        self.service_id = 0
        self.role = Role.LEADER
        self.time = 0
        self.time_unit = time_unit
        self.log_position = 0
        self.sessions: dict[int, ClientSession] = {}
        self.timers: dict[int, int] = {}
        self.offers: list[bytes] = []
        self.closed: list[int] = []
        self.egress: list[tuple[int, bytes]] = []

    def schedule_timer(self, correlation_id: int, deadline: int) -> bool:
        self.timers[correlation_id] = deadline
        return True

    def cancel_timer(self, correlation_id: int) -> bool:
        self.timers.pop(correlation_id, None)
        return True

    def offer(self, payload: bytes) -> bool:
        self.offers.append(payload)
        return True

    def close_client_session(self, cluster_session_id: int) -> bool:
        self.closed.append(cluster_session_id)
        return True

    def get_client_session(self, cluster_session_id: int) -> ClientSession | None:
        return self.sessions.get(cluster_session_id)

    def client_sessions(self) -> list[ClientSession]:
        return [self.sessions[k] for k in sorted(self.sessions)]

    def open(self, session_id: int) -> ClientSession:
        session = ClientSession(session_id, 102, f"egress-{session_id}", b"", self._send)
        self.sessions[session_id] = session
        return session

    def _send(self, session: ClientSession, payload: bytes) -> bool:
        self.egress.append((session.id, payload))
        return True


def started(service: Any, cluster: FakeCluster | None = None) -> tuple[Any, FakeCluster]:
    cluster = cluster or FakeCluster()
    service.on_start(cluster, None)
    return service, cluster


def snapshot_of(service: Any) -> SnapshotImage:
    writer = SnapshotWriter()
    service.on_take_snapshot(writer)
    return SnapshotImage(tuple(writer.records), log_position=0, leadership_term_id=0)


def restored(service_type: type, image: SnapshotImage, cluster: FakeCluster | None = None) -> Any:
    service = service_type()
    service.on_start(cluster or FakeCluster(), image)
    return service


# --- digest ------------------------------------------------------------------------------------------


def test_multiset_digest_is_order_independent_and_reversible() -> None:
    a = MultisetDigest(b"t")
    a.add("x", 1)
    a.add("y", 2)
    b = MultisetDigest.of(b"t", [("y", 2), ("x", 1)])
    assert a.digest() == b.digest() and len(a.digest()) == 16
    a.remove("x", 1)
    assert a.digest() == MultisetDigest.of(b"t", [("y", 2)]).digest()
    a.remove("y", 2)
    assert a.digest() == bytes(16)


def test_item_hash_tells_types_and_field_boundaries_apart() -> None:
    assert item_hash(b"t", 1) != item_hash(b"t", "1") != item_hash(b"t", b"1")
    assert item_hash(b"t", "ab", "c") != item_hash(b"t", "a", "bc")
    assert item_hash(b"t", None) != item_hash(b"t", "")
    assert item_hash(b"a", 1) != item_hash(b"b", 1)
    with pytest.raises(TypeError):
        item_hash(b"t", True)


def _interpreted_kvdigest() -> ModuleType:
    """kvdigest.py's source run interpreted: what runs where the mypyc build could not."""
    source = Path(kvdigest.__file__).with_name("kvdigest.py")
    spec = importlib.util.spec_from_file_location("kvdigest_interpreted", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


KVDIGEST_INTERPRETED = _interpreted_kvdigest()
KVDIGEST_MODULES = [kvdigest, KVDIGEST_INTERPRETED]


@pytest.mark.parametrize("module", KVDIGEST_MODULES, ids=["built", "interpreted"])
@pytest.mark.parametrize(
    ("key", "value", "number"),
    [("k", "v", 1), ("", "", 0), ("ключ", "värde", 10**12), ('a"b', "x" * 3000, -5)],
)
def test_key_digests_item_hash_is_item_hash(module: ModuleType, key: str, value: str, number: int) -> None:
    # The KV store's per-write hash must be the general item hash (digests recomputed from scratch).
    digests = module.KeyDigests(str_item_head(b"clusterlab-kv", "entry"), 3, xxhash.xxh3_128_intdigest)
    assert digests.item_hash(key, value, number) == item_hash(b"clusterlab-kv", "entry", key, value, number)
    other = module.KeyDigests(str_item_head(b"other", "entry"), 3, xxhash.xxh3_128_intdigest)
    assert other.item_hash(key, value, number) != item_hash(b"clusterlab-kv", "entry", key, value, number)


@pytest.mark.parametrize("module", KVDIGEST_MODULES, ids=["built", "interpreted"])
def test_key_digests_follow_writes_and_deletes_like_a_multiset_digest(module: ModuleType) -> None:
    digests = module.KeyDigests(str_item_head(b"t", "entry"), 5, xxhash.xxh3_128_intdigest)
    entries: dict[str, tuple[str, int]] = {}
    expected = MultisetDigest(b"t")
    for step, (op, key) in enumerate([("w", "a"), ("w", "b"), ("w", "a"), ("d", "b"), ("w", "c"), ("d", "a")]):
        if key in entries:
            expected.remove("entry", key, *entries[key])
        if op == "w":
            entries[key] = (f"v{step}", step)
            expected.add("entry", key, *entries[key])
            digests.written(key)
        else:
            del entries[key]
            digests.deleted(key)
        if step % 2:  # a digest after some steps only: writes in between are hashed once
            want = (expected.value + step * 5) % (1 << 128)
            assert digests.digest(entries, step) == want.to_bytes(16, "little")
    fresh = module.KeyDigests(str_item_head(b"t", "entry"), 5, xxhash.xxh3_128_intdigest)
    fresh.reset(entries)
    assert fresh.digest(entries, 9) == digests.digest(entries, 9)


key_digest_steps = st.lists(
    st.tuples(st.sampled_from(["write", "delete", "digest", "reset"]), st.sampled_from("abc"), st.sampled_from("xy")),
    max_size=40,
)


@pytest.mark.parametrize("module", KVDIGEST_MODULES, ids=["built", "interpreted"])
@given(steps=key_digest_steps)
def test_key_digests_equal_a_multiset_digest_whatever_falls_between_digests(
    module: ModuleType, steps: list[tuple[str, str, str]]
) -> None:
    # Several writes and deletes of one key between two digests (written, deleted, written again)
    # must count the key once, with its last value, or not at all.
    digests = module.KeyDigests(str_item_head(b"t", "entry"), 7, xxhash.xxh3_128_intdigest)
    entries: dict[str, tuple[str, int]] = {}
    for revision, (op, key, value) in enumerate(steps, 1):
        if op == "write":
            entries[key] = (value, revision)
            digests.written(key)
        elif op == "delete" and key in entries:
            del entries[key]
            digests.deleted(key)
        elif op == "reset":
            digests.reset(entries)
        expected = MultisetDigest.of(b"t", [("entry", k, v, rev) for k, (v, rev) in entries.items()])
        want = ((expected.value + revision * 7) % (1 << 128)).to_bytes(16, "little")
        if op == "digest" or revision == len(steps):
            assert digests.digest(entries, revision) == want


def test_the_build_compiled_kvdigest_when_an_extension_is_present() -> None:
    # setup.py compiles it with mypyc (pip install -e .); the interpreted source is the fallback.
    built = any(p.name.startswith("kvdigest.") and p.suffix != ".py" for p in Path(kvdigest.__file__).parent.iterdir())
    assert built == kvdigest.COMPILED
    assert KVDIGEST_INTERPRETED.COMPILED is False


def test_duplicated_items_do_not_cancel() -> None:
    d = MultisetDigest(b"t")
    d.add("x")
    d.add("x")
    assert d.digest() != bytes(16)


# --- key-value store -----------------------------------------------------------------------------------


def test_kv_commands_and_replies() -> None:
    service, cluster = started(KeyValueService())
    session = cluster.open(1)

    def call(payload: bytes) -> dict[str, Any]:
        service.on_session_message(session, 0, payload)
        return kv.decode_reply(cluster.egress[-1][1])

    assert call(kv.get(1, "a")) == {"id": 1, "ok": False, "value": None, "revision": 0}
    assert call(kv.put(2, "a", "x")) == {"id": 2, "ok": True, "value": None, "revision": 1}
    assert call(kv.put(3, "a", "y")) == {"id": 3, "ok": True, "value": "x", "revision": 2}
    assert call(kv.cas(4, "a", "x", "z")) == {"id": 4, "ok": False, "value": "y", "revision": 2}
    assert call(kv.cas(5, "a", "y", "z")) == {"id": 5, "ok": True, "value": "z", "revision": 3}
    assert call(kv.cas(6, "b", None, "new")) == {"id": 6, "ok": True, "value": "new", "revision": 4}
    assert call(kv.cas(7, "b", None, "again"))["ok"] is False
    assert call(kv.get(8, "a")) == {"id": 8, "ok": True, "value": "z", "revision": 4}
    assert call(kv.delete(9, "a")) == {"id": 9, "ok": True, "value": "z", "revision": 5}
    assert call(kv.delete(10, "a")) == {"id": 10, "ok": False, "value": None, "revision": 5}
    assert service.entries == {"b": ("new", 4)}


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xfe",
        b"[1, 2]",
        b'{"op": "put", "key": "a", "value": "x"}',
        b'{"id": true, "op": "put", "key": "a", "value": "x"}',
        b'{"id": 1, "op": "put", "key": 5, "value": "x"}',
        b'{"id": 1, "op": "put", "key": "a"}',
        b'{"id": 1, "op": "cas", "key": "a", "value": "x"}',
        b'{"id": 1, "op": "frobnicate", "key": "a"}',
    ],
)
def test_kv_bad_requests_get_an_error_and_change_nothing(payload: bytes) -> None:
    service, cluster = started(KeyValueService())
    session = cluster.open(1)
    before = service.state_digest()
    service.on_session_message(session, 0, payload)
    reply = kv.decode_reply(cluster.egress[-1][1])
    assert reply["ok"] is False and reply["error"].startswith("bad request")
    assert service.state_digest() == before


def test_kv_order_of_writes_is_part_of_the_state() -> None:
    ab, _ = started(KeyValueService())
    ba, _ = started(KeyValueService())
    for service, order in ((ab, "ab"), (ba, "ba")):
        for i, key in enumerate(order):
            service.on_session_message(None, 0, kv.put(i, key, key.upper()))
    assert {k: v for k, (v, _) in ab.entries.items()} == {k: v for k, (v, _) in ba.entries.items()}
    assert ab.state_digest() != ba.state_digest(), "different histories, different mod revisions"


def test_kv_service_originated_commands_apply_without_reply() -> None:
    service, cluster = started(KeyValueService())
    service.on_session_message(None, 0, kv.put(1, "k", "v"))
    assert service.entries == {"k": ("v", 1)}
    assert cluster.egress == []


kv_ops = st.lists(
    st.one_of(
        st.builds(lambda k, v: kv.put(0, k, v), st.sampled_from("abcd"), st.sampled_from(["1", "2", "3"])),
        st.builds(lambda k: kv.get(0, k), st.sampled_from("abcd")),
        st.builds(
            lambda k, e, v: kv.cas(0, k, e, v),
            st.sampled_from("abcd"),
            st.sampled_from([None, "1", "2", "3"]),
            st.sampled_from(["1", "2", "3"]),
        ),
        st.builds(lambda k: kv.delete(0, k), st.sampled_from("abcd")),
        st.just(b"garbage"),
    ),
    max_size=40,
)


@given(kv_ops)
def test_kv_incremental_digest_equals_digest_from_scratch(ops: list[bytes]) -> None:
    service, _ = started(KeyValueService())
    model: dict[str, str] = {}
    for op in ops:
        service.on_session_message(None, 0, op)
        assert service.state_digest() == service.recompute_digest()
        command = json.loads(op) if op != b"garbage" else {}
        if command.get("op") == "put" or (
            command.get("op") == "cas" and model.get(command["key"]) == command["expected"]
        ):
            model[command["key"]] = command["value"]
        elif command.get("op") == "delete":
            model.pop(command["key"], None)
    assert {k: v for k, (v, _) in service.entries.items()} == model


@settings(max_examples=60)
@given(kv_ops, kv_ops)
def test_kv_digests_are_equal_exactly_when_states_are(ops_a: list[bytes], ops_b: list[bytes]) -> None:
    a, _ = started(KeyValueService())
    b, _ = started(KeyValueService())
    again, _ = started(KeyValueService())
    for op in ops_a:
        a.on_session_message(None, 0, op)
        again.on_session_message(None, 0, op)
        assert a.state_digest() == again.state_digest(), "equal histories, equal digests at every step"
    for op in ops_b:
        b.on_session_message(None, 0, op)
    same_state = (a.entries, a.revision) == (b.entries, b.revision)
    assert same_state == (a.state_digest() == b.state_digest())


@given(kv_ops)
def test_kv_snapshot_round_trip(ops: list[bytes]) -> None:
    service, _ = started(KeyValueService())
    for op in ops:
        service.on_session_message(None, 0, op)
    copy = restored(KeyValueService, snapshot_of(service))
    assert (copy.entries, copy.revision) == (service.entries, service.revision)
    assert copy.state_digest() == service.state_digest()
    for s in (service, copy):
        s.on_session_message(None, 0, kv.put(0, "z", "after"))
    assert copy.state_digest() == service.state_digest()


def test_kv_snapshot_batches_large_states() -> None:
    service, _ = started(KeyValueService())
    for i in range(600):
        service.on_session_message(None, 0, kv.put(i, f"k{i:04d}", str(i)))
    image = snapshot_of(service)
    assert len(image.records) == 1 + 3
    assert restored(KeyValueService, image).state_digest() == service.state_digest()


# --- counter -------------------------------------------------------------------------------------------


def test_counter_commands_and_replies() -> None:
    service, cluster = started(CounterService())
    session = cluster.open(1)

    def call(payload: bytes) -> dict[str, Any]:
        service.on_session_message(session, 0, payload)
        return counter.decode_reply(cluster.egress[-1][1])

    assert call(counter.get(1)) == {"id": 1, "ok": True, "value": 0, "revision": 0}
    assert call(counter.add(2, 5)) == {"id": 2, "ok": True, "value": 5, "revision": 1}
    assert call(counter.add(3, -7)) == {"id": 3, "ok": True, "value": -2, "revision": 2}
    before = service.state_digest()
    assert call(b'{"id": 4, "op": "add", "delta": "x"}')["ok"] is False
    assert call(b'{"id": 5, "op": "mul"}')["ok"] is False
    assert call(b"nope")["id"] is None
    assert service.state_digest() == before


@given(st.lists(st.integers(-(10**6), 10**6), max_size=30))
def test_counter_incremental_digest_and_snapshot(deltas: list[int]) -> None:
    service, _ = started(CounterService())
    digests = set()
    for i, delta in enumerate(deltas):
        service.on_session_message(None, 0, counter.add(i, delta))
        assert service.state_digest() == service.recompute_digest()
        digests.add(service.state_digest())
    assert len(digests) == len(deltas), "every add changes the state (its revision)"
    assert service.value == sum(deltas)
    copy = restored(CounterService, snapshot_of(service))
    assert (copy.value, copy.revision, copy.state_digest()) == (service.value, service.revision, service.state_digest())


# --- echo ----------------------------------------------------------------------------------------------


def test_echo_echoes_and_manages_timers() -> None:
    service, cluster = started(EchoService())
    session = cluster.open(3)
    service.on_session_message(session, 1000, b"hello there")
    assert cluster.egress[-1] == (3, b"hello there")

    service.on_session_message(session, 1000, b"timer t1 250")
    assert cluster.egress[-1] == (3, b"timer t1 scheduled 1250")
    assert cluster.timers == {1: 1250}
    service.on_session_message(session, 1100, b"timer t1 500")  # reschedule: same correlation id
    assert cluster.timers == {1: 1600}
    service.on_session_message(session, 1100, b"timer t2 10")
    assert cluster.timers == {1: 1600, 2: 1110}

    cluster.timers.pop(2)  # fired by the consensus module
    service.on_timer_event(2, 1111)
    assert cluster.egress[-1] == (3, b"timer t2 fired 1111")
    service.on_timer_event(2, 1112)  # already fired: nothing
    assert cluster.egress[-1] == (3, b"timer t2 fired 1111")

    service.on_session_message(session, 1200, b"cancel t1")
    assert cluster.egress[-1] == (3, b"cancel t1 ok") and cluster.timers == {}
    service.on_session_message(session, 1200, b"cancel t1")
    assert cluster.egress[-1] == (3, b"cancel t1 unknown")
    assert service.timers == {}


def test_echo_timer_delay_follows_the_cluster_time_unit() -> None:
    service, cluster = started(EchoService(), FakeCluster(ClusterTimeUnit.NANOS))
    service.on_session_message(cluster.open(1), 5, b"timer x 2")
    assert cluster.timers == {1: 5 + 2_000_000}


def test_echo_offer_broadcasts_through_the_log_and_close() -> None:
    service, cluster = started(EchoService())
    one, two = cluster.open(1), cluster.open(2)
    service.on_session_message(one, 0, b"offer news of the day")
    assert cluster.offers == [b"news of the day"]
    service.on_session_message(None, 0, b"news of the day")  # comes back through the log
    assert cluster.egress[-2:] == [(1, b"broadcast news of the day"), (2, b"broadcast news of the day")]
    assert service.broadcasts == 1
    service.on_session_message(two, 0, b"close")
    assert cluster.closed == [2]


def test_echo_cancels_a_closed_sessions_timers() -> None:
    service, cluster = started(EchoService())
    one, two = cluster.open(1), cluster.open(2)
    service.on_session_message(one, 0, b"timer a 10")
    service.on_session_message(two, 0, b"timer a 10")
    service.on_session_close(one, 5, CloseReason.TIMEOUT)
    assert cluster.timers == {2: 10}
    assert [t[0] for t in service.timers.values()] == [2]


echo_steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("message"),
            st.integers(1, 3),
            st.sampled_from([b"timer a 5", b"timer b 9", b"cancel a", b"hi", b"offer x", b"timer c nope"]),
        ),
        st.tuples(st.just("fire"), st.integers(0, 5), st.just(b"")),
        st.tuples(st.just("service"), st.just(0), st.just(b"x")),
        st.tuples(st.just("close"), st.integers(1, 3), st.just(b"")),
    ),
    max_size=40,
)


@given(echo_steps)
def test_echo_incremental_digest_equals_digest_from_scratch_and_snapshots(steps: list[tuple[str, int, bytes]]) -> None:
    service, cluster = started(EchoService())
    for sid in (1, 2, 3):
        cluster.open(sid)
    for time, (kind, arg, payload) in enumerate(steps):
        if kind == "message" and arg in cluster.sessions:
            service.on_session_message(cluster.sessions[arg], time, payload)
        elif kind == "fire" and service.timers:
            cid = sorted(service.timers)[arg % len(service.timers)]
            cluster.timers.pop(cid)  # the consensus module's timer fired
            service.on_timer_event(cid, time)
        elif kind == "service":
            service.on_session_message(None, time, payload)
        elif kind == "close" and arg in cluster.sessions:
            service.on_session_close(cluster.sessions.pop(arg), time, CloseReason.CLIENT_ACTION)
        assert service.state_digest() == service.recompute_digest()
    assert set(cluster.timers) == set(service.timers)
    copy = restored(EchoService, snapshot_of(service))
    assert copy.timers == service.timers and copy.state_digest() == service.state_digest()
    assert copy.next_correlation_id == service.next_correlation_id


# --- registry, and every sample through the agent ------------------------------------------------------


def test_registry() -> None:
    assert set(SERVICES) == {"kv", "counter", "echo", "timers"}  # timers: the counter, driven with timers
    for factory in SERVICES.values():
        assert len(factory().state_digest()) == 16


def _commands(name: str) -> list[bytes]:
    if name == "kv":
        return [kv.put(1, "a", "1"), kv.cas(2, "a", "1", "2"), kv.put(3, "b", "x"), kv.delete(4, "b")]
    if name == "counter":
        return [counter.add(1, 3), counter.add(2, 4), counter.get(3), counter.add(4, -1)]
    return [b"timer t 50", b"hello", b"timer u 70", b"offer hey"]


class LogWriter:
    def __init__(self) -> None:
        self.position = 0

    def entry(self, payload: bytes) -> Frame:
        f = unframe(frame(payload, self.position, 1))
        self.position = f.end_position
        return f


def _join(position: int, role: Role) -> JoinLog:
    return JoinLog(
        log_position=position,
        max_log_position=2**63 - 1,
        member_id=0,
        log_session_id=1,
        log_stream_id=100,
        is_startup=BooleanType.FALSE,
        role=int(role),
        log_channel="log",
    )


def _agent(name: str, store: SnapshotStore, applied: list[AppliedEntry], sent: list[Any]) -> ClusteredServiceAgent:
    return ClusteredServiceAgent(
        0, 0, SERVICES[name](), lambda b: sent.append(decode(b)), lambda *e: sent.append(e), store, applied.append
    )


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_sample_service_through_the_agent_snapshot_and_restore(name: str, tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    store = SnapshotStore(storage, Catalogue.open(storage))
    log = LogWriter()
    entries = [
        log.entry(
            SessionOpenEvent(
                leadership_term_id=1,
                correlation_id=1,
                cluster_session_id=1,
                timestamp=10,
                response_stream_id=102,
                response_channel="egress-1",
                encoded_principal=b"",
            ).encode()
        )
    ]
    commands = _commands(name)
    entries += [log.entry(encode_session_message(1, 1, 20 + i, c)) for i, c in enumerate(commands[:2])]
    action_end = log.position + framed_length(HEADER_LENGTH + ClusterActionRequest.BLOCK_LENGTH)
    entries.append(
        log.entry(
            ClusterActionRequest(
                leadership_term_id=1, log_position=action_end, timestamp=30, action=ClusterAction.SNAPSHOT, flags=0
            ).encode()
        )
    )
    after = [log.entry(encode_session_message(1, 1, 40 + i, c)) for i, c in enumerate(commands[2:])]
    after.append(log.entry(TimerEvent(leadership_term_id=1, correlation_id=1, timestamp=90).encode()))

    applied: list[AppliedEntry] = []
    sent: list[Any] = []
    agent = _agent(name, store, applied, sent)
    agent.start()
    agent.on_join_log(_join(0, Role.LEADER))
    agent.on_log_frames([*entries, *after], commit_position=log.position)
    recording_id = [m for m in sent if isinstance(m, ServiceAck)][2].relevant_id
    assert recording_id >= 0
    if name == "echo":
        assert ScheduleTimer(correlation_id=1, deadline=70) in sent
        assert any(isinstance(m, tuple) and m[2].endswith(b"timer t fired 90") for m in sent)

    restored_applied: list[AppliedEntry] = []
    restored_agent = _agent(name, store, restored_applied, [])
    restored_agent.start(recording_id)
    restored_agent.on_join_log(_join(action_end, Role.FOLLOWER))
    restored_agent.on_log_frames(after, commit_position=log.position)
    original = {a.log_position: a.state_digest for a in applied}
    for row in restored_applied:
        assert row.state_digest == original[row.log_position], f"{name}: digest differs at {row.log_position}"
    assert [r.log_position for r in restored_applied] == [action_end] + [f.end_position for f in after]


def test_kv_applies_a_resent_request_once_and_snapshots_the_memory() -> None:
    """A request naming its client is applied once; a resend gets the first reply, also after a
    snapshot restore (members restored from a snapshot must deduplicate like the others)."""
    from clusterlab.harness.services import kv as kvmod

    service = kvmod.KeyValueService()
    first = service.execute(b'{"client":9,"id":1,"key":"k","op":"put","value":"a"}')
    digest = service.state_digest()
    again = service.execute(b'{"client":9,"id":1,"key":"k","op":"put","value":"a"}')
    assert again == first and service.revision == 1 and service.state_digest() == digest
    other = service.execute(b'{"client":10,"id":1,"key":"k","op":"put","value":"b"}')
    assert other["revision"] == 2  # another client's id 1 is another request
    unnamed = [service.execute(b'{"id":1,"key":"k","op":"put","value":"c"}') for _ in range(2)]
    assert [r["revision"] for r in unnamed] == [3, 4]  # without a client: applied each time

    # A real SnapshotImage: the compiled service checks its records are the declared tuple.
    copy = restored(kvmod.KeyValueService, snapshot_of(service))
    assert copy.state_digest() == service.state_digest()
    assert copy.execute(b'{"client":9,"id":1,"key":"k","op":"put","value":"a"}') == first
    assert copy.revision == 4


# ------------------------------------------------------------------ kv: the formatted fast paths


@settings(max_examples=200, deadline=None)
@given(
    request_id=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    key=st.text(max_size=12),
    value=st.text(max_size=40),
    ok=st.booleans(),
    revision=st.integers(min_value=0, max_value=2**40),
    previous=st.one_of(st.none(), st.text(max_size=20)),
)
def test_kv_formatted_commands_and_replies_are_the_json_bytes(
    request_id: int, key: str, value: str, ok: bool, revision: int, previous: str | None
) -> None:
    """put() and encode_reply() format the usual shapes directly: byte for byte what the sorted,
    compact json.dumps gives (so digests and traces do not depend on which path ran)."""
    assert kv.put(request_id, key, value) == kv._dumps({"id": request_id, "op": "put", "key": key, "value": value})
    assert kv.put(request_id, key, value, prev=False) == kv._dumps(
        {"id": request_id, "op": "put", "key": key, "value": value, "prev": False}
    )
    reply = {"id": request_id, "ok": ok, "value": previous, "revision": revision}
    encoded = kv.encode_reply(reply)
    assert encoded == kv._dumps(reply)
    assert kv.reply_outcome(encoded) == (request_id, False)


def test_kv_reply_outcome_tells_errors_and_decodes_anything_else() -> None:
    store = KeyValueService()
    error = kv._dumps(store.execute(b"not json"))
    assert kv.reply_outcome(error) == (None, True)
    assert kv.reply_outcome(kv._dumps(store.execute(b'{"id": 4, "op": "nope", "key": "k"}'))) == (4, True)
    assert kv.reply_outcome(b'{"id": 7, "ok": true}') == (7, False)  # not compact: decoded in full
    with pytest.raises(ValueError):
        kv.reply_outcome(b"[1, 2]")


def test_kv_put_fast_path_answers_like_the_general_path() -> None:
    """Malformed puts still get the general path's precise error; good ones the same reply."""
    store = KeyValueService()
    assert store.execute(kv.put(1, "k", "v")) == {"id": 1, "ok": True, "value": None, "revision": 1}
    assert store.execute(kv.put(2, "k", "w")) == {"id": 2, "ok": True, "value": "v", "revision": 2}
    assert store.execute(b'{"id": 3, "op": "put", "key": "k"}')["error"] == "bad request: missing 'value'"
    assert store.execute(b'{"id": 4, "op": "put", "key": 5, "value": "x"}')["error"] == "bad request: 'key' must be str"
    bool_id = b'{"id": true, "op": "put", "key": "k", "value": "x"}'
    assert store.execute(bool_id)["error"] == "bad request: 'id' must be int"
    assert store.revision == 2 and store.state_digest() == store.recompute_digest()


def test_kv_put_without_prev_replies_without_the_previous_value_and_writes_the_same() -> None:
    """``"prev": false`` (etcd's put without prev_kv) changes the reply only: same state, same digest."""
    with_prev, without = KeyValueService(), KeyValueService()
    for request_id, value in enumerate(["v", "w", "x"], start=1):
        a = with_prev.execute(kv.put(request_id, "k", value))
        b = without.execute(kv.put(request_id, "k", value, prev=False))
        assert b == {**a, "value": None}
    assert with_prev.execute(kv.put(9, "k", "y"))["value"] == "x"
    assert without.execute(kv.put(9, "k", "y", prev=True))["value"] == "x"
    assert with_prev.entries == without.entries and with_prev.state_digest() == without.state_digest()
    for bad in (
        b'{"id": 5, "op": "put", "key": "k", "value": "z", "prev": 0}',
        b'{"id": 5, "op": "put", "key": "k", "value": "z", "prev": "no"}',
    ):
        assert without.execute(bad)["error"] == "bad request: 'prev' must be true or false"
    assert without.revision == 4 and without.state_digest() == without.recompute_digest()


def test_kv_lazy_digest_equals_the_digest_from_scratch_whenever_asked() -> None:
    """Writes only mark keys; a digest hashes what changed. Asked at any point, after any mix of
    puts, overwrites and deletes, it equals the digest computed from scratch."""
    import random

    rng = random.Random(11)
    store = KeyValueService()
    for i in range(2000):
        key = f"k{rng.randrange(15)}"
        if rng.random() < 0.2:
            store.execute(kv.delete(i, key))
        else:
            store.execute(kv.put(i, key, "v" * rng.randrange(4)))
        if rng.random() < 0.25:
            assert store.state_digest() == store.recompute_digest(), f"after op {i}"
    assert store.state_digest() == store.recompute_digest()
