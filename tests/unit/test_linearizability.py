"""The linearizability checker (clusterlab.chaos.linearizability): hand-written histories with known
verdicts, histories generated from the sequential models (always linearizable), the budget's
``unknown``, the minimal sub-history of a violation and the trace's ops rows."""

from __future__ import annotations

import random
from typing import Any

import pytest
from clusterlab.chaos.linearizability import (
    INFO,
    LINEARIZABLE,
    MODELS,
    OK,
    UNKNOWN,
    VIOLATION,
    Operation,
    check_history,
    check_key,
    linearizable,
    operations_from_rows,
    shrink,
)
from hypothesis import given, settings
from hypothesis import strategies as st

_ids = iter(range(1, 10**9))


def op(
    client: int,
    f: str,
    invoke: int,
    complete: int | None,
    *,
    key: str | None = "k",
    value: Any = None,
    arg: Any = None,
    result: Any = None,
    status: str = OK,
) -> Operation:
    return Operation(client, next(_ids), f, key, invoke, complete, status, value, arg, result)


def put(c: int, t0: int, t1: int | None, value: str, prev: Any = None, status: str = OK) -> Operation:
    return op(c, "put", t0, t1, value=value, result=prev, status=status)


def get(c: int, t0: int, t1: int, result: Any) -> Operation:
    return op(c, "get", t0, t1, result=result)


def cas(c: int, t0: int, t1: int | None, expected: Any, value: str, result: Any, status: str = OK) -> Operation:
    return op(c, "cas", t0, t1, value=value, arg=expected, result=result, status=status)


def add(c: int, t0: int, t1: int | None, delta: int, result: Any = None, status: str = OK) -> Operation:
    return op(c, "add", t0, t1, key=None, value=delta, result=result, status=status)


def cget(c: int, t0: int, t1: int, result: int) -> Operation:
    return op(c, "get", t0, t1, key=None, result=result)


CASES: list[tuple[str, list[Operation], str]] = [
    ("empty", [], LINEARIZABLE),
    ("sequential put then get", [put(0, 0, 1, "a"), get(1, 2, 3, "a")], LINEARIZABLE),
    ("get of an absent key", [get(0, 0, 1, None)], LINEARIZABLE),
    ("get of a value never written", [get(0, 0, 1, "x")], VIOLATION),
    ("stale read after a newer write", [put(0, 0, 1, "a"), put(1, 2, 3, "b", "a"), get(2, 4, 5, "a")], VIOLATION),
    ("read concurrent with a write: old", [put(0, 0, 1, "a"), put(1, 2, 6, "b", "a"), get(2, 3, 4, "a")], LINEARIZABLE),
    ("read concurrent with a write: new", [put(0, 0, 1, "a"), put(1, 2, 6, "b", "a"), get(2, 3, 4, "b")], LINEARIZABLE),
    (
        "two reads concurrent with a write disagree in real time",
        [put(0, 0, 1, "a"), put(1, 2, 10, "b", "a"), get(2, 3, 4, "b"), get(3, 5, 6, "a")],
        VIOLATION,
    ),
    ("put returns the wrong previous value", [put(0, 0, 1, "a"), put(1, 2, 3, "b", None)], VIOLATION),
    (
        "concurrent puts, each sees the other's value first",
        [put(0, 0, 5, "a", "b"), put(1, 0, 5, "b", "a")],
        VIOLATION,
    ),
    ("concurrent puts, one after the other", [put(0, 0, 5, "a", None), put(1, 0, 5, "b", "a")], LINEARIZABLE),
    (
        "lost update: two cas from the same value both swap",
        [put(0, 0, 1, "a"), cas(1, 2, 5, "a", "b", "b"), cas(2, 2, 5, "a", "c", "c"), get(0, 6, 7, "c")],
        VIOLATION,
    ),
    (
        "cas: one swaps, the other fails and sees the new value",
        [put(0, 0, 1, "a"), cas(1, 2, 5, "a", "b", "b"), cas(2, 2, 5, "a", "c", "b"), get(0, 6, 7, "b")],
        LINEARIZABLE,
    ),
    ("cas fails although the value matched", [put(0, 0, 1, "a"), cas(1, 2, 3, "a", "b", "a")], VIOLATION),
    (
        "delete returns the previous value, then absent",
        [put(0, 0, 1, "a"), op(1, "delete", 2, 3, result="a"), get(2, 4, 5, None)],
        LINEARIZABLE,
    ),
    (
        "read after delete sees the old value",
        [put(0, 0, 1, "a"), op(1, "delete", 2, 3, result="a"), get(2, 4, 5, "a")],
        VIOLATION,
    ),
    (
        "info write that took effect later",
        [put(0, 0, None, "a", status=INFO), get(1, 5, 6, None), get(1, 7, 8, "a")],
        LINEARIZABLE,
    ),
    ("info write that never took effect", [put(0, 0, None, "a", status=INFO), get(1, 5, 6, None)], LINEARIZABLE),
    (
        "info write seen, then unseen",
        [put(0, 0, None, "a", status=INFO), get(1, 5, 6, "a"), get(1, 7, 8, None)],
        VIOLATION,
    ),
    ("info write cannot act before its invocation", [get(1, 0, 1, "a"), put(0, 2, None, "a", status=INFO)], VIOLATION),
    ("a failed write never happened", [put(0, 0, 1, "a", status="fail"), get(1, 2, 3, "a")], VIOLATION),
    (
        "counter: concurrent adds in either order",
        [add(0, 0, 5, 1, 3), add(1, 0, 5, 2, 2), cget(2, 6, 7, 3)],
        LINEARIZABLE,
    ),
    ("counter: an add counted twice", [add(0, 0, 1, 1, 1), add(1, 2, 3, 2, 4)], VIOLATION),
    ("counter: stale read", [add(0, 0, 1, 1, 1), add(1, 2, 3, 2, 3), cget(2, 4, 5, 1)], VIOLATION),
    (
        "counter: info add may count",
        [add(0, 0, None, 5, status=INFO), add(1, 2, 3, 1, 6), cget(2, 4, 5, 6)],
        LINEARIZABLE,
    ),
    ("counter: info add may not count", [add(0, 0, None, 5, status=INFO), add(1, 2, 3, 1, 1)], LINEARIZABLE),
]


@pytest.mark.parametrize(("name", "ops", "expected"), CASES, ids=[c[0] for c in CASES])
def test_hand_written_histories(name: str, ops: list[Operation], expected: str) -> None:
    got = check_history(ops)
    assert got.verdict == expected, [k.describe() for k in got.keys]


def test_keys_are_checked_independently() -> None:
    a = [put(0, 0, 1, "a"), get(1, 2, 3, "a")]
    b = [op(0, "put", 0, 1, key="j", value="x"), op(1, "get", 2, 3, key="j", result=None)]  # stale on j
    got = check_history(a + b)
    assert got.verdict == VIOLATION
    assert [k.key for k in got.violations()] == ["j"]
    assert {k.key: k.verdict for k in got.keys} == {"k": LINEARIZABLE, "j": VIOLATION}


def test_minimal_sub_history_of_a_stale_read() -> None:
    noise = [put(3, 10 * i, 10 * i + 1, f"n{i}", f"n{i - 1}" if i else None) for i in range(20)]
    stale = [put(0, 300, 301, "a", "n19"), put(1, 302, 303, "b", "a"), get(2, 304, 305, "a")]
    after = [put(3, 310 + i, 311 + i, f"m{i}", "b" if i == 0 else f"m{i - 1}") for i in range(10)]
    got = check_key("k", noise + stale + after)
    assert got.verdict == VIOLATION
    # The read of "a", the write of "a" it needs, and the write of "b" that made it stale.
    assert [(o.f, o.value if o.f == "put" else o.result) for o in got.minimal] == [
        ("put", "a"),
        ("put", "b"),
        ("get", "a"),
    ]
    assert linearizable(got.minimal, MODELS["kv"]).verdict == VIOLATION


def test_minimal_sub_history_is_minimal() -> None:
    """No single op of the minimal history can go without the rest passing (or explaining nothing)."""
    rng = random.Random(5)
    ops = [put(rng.randrange(3), 10 * i, 10 * i + 15, f"v{i}", f"v{i - 1}" if i else None) for i in range(12)]
    ops.append(get(0, 200, 201, "v3"))  # stale: v11 was written before
    model = MODELS["kv"]
    assert linearizable(ops, model).verdict == VIOLATION
    shrunk = shrink(ops, model)
    minimal = shrunk.ops
    assert shrunk.minimal and linearizable(minimal, model).verdict == VIOLATION
    assert len(minimal) < len(ops)
    for i in range(len(minimal)):
        rest = minimal[:i] + minimal[i + 1 :]
        assert not model.may_drop(rest, [minimal[i]]) or linearizable(rest, model).verdict == LINEARIZABLE


def test_counter_shrink_keeps_the_adds() -> None:
    ops = [add(0, 0, 1, 1, 1), cget(1, 2, 3, 1), add(1, 4, 5, 2, 3), cget(2, 6, 7, 3), cget(0, 8, 9, 1)]
    got = check_key("counter", ops)
    assert got.verdict == VIOLATION
    assert [o.f for o in got.minimal].count("add") == 2
    assert [o.result for o in got.minimal if o.f == "get"] == [1]


def test_budget_gives_unknown_never_ok() -> None:
    # Many concurrent info writes and concurrent reads: a large search space.
    ops = [put(i, i, None, f"v{i}", status=INFO) for i in range(14)]
    ops += [get(20 + i, 100 + i, 200, f"v{(i * 5) % 14}") for i in range(14)]
    ops.append(get(40, 300, 301, "nope"))  # never written: no linearization exists
    small = linearizable(ops, MODELS["kv"], max_states=50, max_seconds=None)
    assert small.verdict == UNKNOWN and "50 states" in small.reason
    assert check_key("k", ops, max_states=50).verdict == UNKNOWN
    timed = linearizable(ops, MODELS["kv"], max_states=10**9, max_seconds=0.0)
    assert timed.verdict in (UNKNOWN, VIOLATION)


# ------------------------------------------------------------------------- generated from the model


@st.composite
def sequential_histories(draw: Any, service: str) -> list[Operation]:
    """Ops applied atomically in order at instants 10, 20, ..., each given an interval around its
    instant (so they overlap) and a result from the sequential model; some outcomes unknown."""
    n = draw(st.integers(0, 25))
    clients = draw(st.integers(1, 4))
    state: Any = None if service == "kv" else 0
    out = []
    for i in range(n):
        at = 10 * (i + 1)
        lo = at - draw(st.integers(0, 25))
        hi = at + draw(st.integers(0, 25))
        info = draw(st.integers(0, 9)) == 0
        applied = not info or draw(st.booleans())
        client = draw(st.integers(0, clients - 1))
        if service == "kv":
            f = draw(st.sampled_from(["put", "get", "cas", "delete"]))
            value = f"v{i}"
            expected = draw(st.sampled_from([state, None, f"v{max(0, i - 1)}"]))
            if f == "get":
                result, after = state, state
            elif f == "put":
                result, after = state, value
            elif f == "delete":
                result, after = state, None
            else:
                after = value if state == expected else state
                result = after
            if applied:
                state = after
            out.append(
                Operation(
                    client,
                    i,
                    f,
                    "k",
                    lo,
                    None if info else hi,
                    INFO if info else OK,
                    value if f in ("put", "cas") else None,
                    expected if f == "cas" else None,
                    None if info else result,
                )
            )
        else:
            f = draw(st.sampled_from(["add", "get"]))
            delta = draw(st.integers(1, 9)) if f == "add" else 0
            after = state + delta
            result = after if f == "add" else state
            if applied and f == "add":
                state = after
            out.append(
                Operation(
                    client,
                    i,
                    f,
                    None,
                    lo,
                    None if info else hi,
                    INFO if info else OK,
                    delta if f == "add" else None,
                    None,
                    None if info else result,
                )
            )
    return out


@settings(max_examples=150, deadline=None)
@given(sequential_histories("kv"))
def test_histories_from_the_register_model_are_linearizable(ops: list[Operation]) -> None:
    got = check_history(ops)
    assert got.verdict == LINEARIZABLE, [k.describe() for k in got.keys]


@settings(max_examples=150, deadline=None)
@given(sequential_histories("counter"))
def test_histories_from_the_counter_model_are_linearizable(ops: list[Operation]) -> None:
    got = check_history(ops)
    assert got.verdict == LINEARIZABLE, [k.describe() for k in got.keys]


@settings(max_examples=100, deadline=None)
@given(sequential_histories("kv"), st.data())
def test_a_planted_stale_read_is_found(ops: list[Operation], data: Any) -> None:
    """A read after the whole generated history that returns a value overwritten since: caught."""
    written = [
        i for i, o in enumerate(ops) if o.status == OK and (o.f == "put" or (o.f == "cas" and o.result == o.value))
    ]
    if len(written) < 2:
        return
    newest = ops[written[-1]]
    if any(o.f in ("put", "cas", "delete") for o in ops[written[-1] + 1 :]):
        return  # the newest write may not be the last effective one
    older = [ops[i] for i in written[:-1] if ops[i].complete is not None and ops[i].complete < newest.invoke]
    if not older:
        return
    old = data.draw(st.sampled_from(older))  # it precedes the newest write in real time
    end = max(o.complete or o.invoke for o in ops) + 100
    stale = Operation(9, 10**6, "get", "k", end, end + 1, OK, result=old.value)
    assert check_history([*ops, stale]).verdict == VIOLATION


# ------------------------------------------------------------------------- from the trace's rows


def test_operations_from_trace_rows() -> None:
    rows = [
        {"client_id": 0, "op_id": 1, "kind": "invoke", "wall_ns": 10, "f": "put", "key": "k", "value": "a"},
        {
            "client_id": 1,
            "op_id": 1,
            "kind": "invoke",
            "wall_ns": 11,
            "f": "cas",
            "key": "k",
            "value": "b",
            "arg": '"a"',
        },
        {
            "client_id": 0,
            "op_id": 1,
            "kind": "ok",
            "wall_ns": 20,
            "f": "put",
            "key": "k",
            "value": "a",
            "result": "null",
        },
        {"client_id": 1, "op_id": 1, "kind": "ok", "wall_ns": 30, "f": "cas", "key": "k", "result": '"b"'},
        {"client_id": 2, "op_id": 4, "kind": "invoke", "wall_ns": 40, "f": "put", "key": "k", "value": "c"},
        {"client_id": 2, "op_id": 5, "kind": "invoke", "wall_ns": 41, "f": "get", "key": "k"},
        {"client_id": 2, "op_id": 5, "kind": "fail", "wall_ns": 42, "f": "get", "key": "k", "result": "bad"},
        # a simulator row: the whole reply as the result
        {"client_id": 3, "op_id": 9, "kind": "invoke", "wall_ns": 50, "f": "add", "key": None, "arg": "4"},
        {"client_id": 3, "op_id": 9, "kind": "ok", "wall_ns": 60, "f": "add", "result": '{"id":9,"value":4}'},
    ]
    ops = {(o.client, o.op_id): o for o in operations_from_rows(rows)}
    assert ops[(0, 1)].status == OK and ops[(0, 1)].result is None and ops[(0, 1)].complete == 20
    assert ops[(1, 1)].arg == "a" and ops[(1, 1)].result == "b"
    assert ops[(2, 4)].status == INFO and ops[(2, 4)].complete is None  # never completed: unknown
    assert ops[(2, 5)].status == "fail"
    assert ops[(3, 9)].value == 4 and ops[(3, 9)].result == 4
    kv = [o for o in ops.values() if o.key is not None]
    assert check_history(kv).verdict == LINEARIZABLE
