"""The linearizability checker's Model API: models written from the Model docstring (the docs'
example, clusterlab.chaos.model_example) agree with the built-in ones on histories with known
verdicts, generated ones and random ones; a broken contract is a clear error; dict states; the
describe hooks; one budget for deciding and shrinking; a shown sub-history is a violation of its
own and stands for the whole history, also when a value is written more than once."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from clusterlab.chaos.linearizability import (
    INFO,
    LINEARIZABLE,
    MODELS,
    OK,
    VIOLATION,
    Budget,
    Model,
    ModelError,
    Operation,
    check_history,
    check_key,
    freeze,
    linearizable,
)
from clusterlab.chaos.model_example import KvStoreModel, TallyModel
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_linearizability import CASES, get, op, put, sequential_histories


def test_an_op_the_built_in_models_do_not_name_is_described_with_what_it_carries() -> None:
    transfer = Operation(2, 7, "transfer", "a1", 0, 5, "ok", value=10, arg="b2", result=[90, 10])
    assert transfer.describe() == "c2 #7 transfer a1 arg=b2 value=10 = [90, 10]"
    assert Operation(1, 3, "reset", None, 0, None, "info").describe() == "c1 #3 reset (info)"


KV = MODELS["kv"]
ROOT = Path(__file__).resolve().parents[2]


def _mine(ops: list[Operation]) -> Model:
    return KvStoreModel() if any(o.key is not None for o in ops) else TallyModel()


@pytest.mark.parametrize(("name", "ops", "expected"), CASES, ids=[c[0] for c in CASES])
def test_models_from_the_docs_give_the_known_verdicts(name: str, ops: list[Operation], expected: str) -> None:
    got = check_history(ops, model=_mine(ops))
    assert got.verdict == expected, [k.describe() for k in got.keys]
    for k in got.violations():  # the shown sub-history fails under both models
        assert linearizable(k.minimal, _mine(ops)).verdict == VIOLATION
        assert check_history(k.minimal).verdict == VIOLATION


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["kv", "counter"]).flatmap(sequential_histories))
def test_models_from_the_docs_pass_histories_of_the_model(ops: list[Operation]) -> None:
    assert check_history(ops, model=_mine(ops)).verdict == LINEARIZABLE == check_history(ops).verdict


@st.composite
def random_kv_histories(draw: Any, values: int | None = None) -> list[Operation]:
    """Ops with random intervals and results: mostly not linearizable. ``values``: written values
    drawn from that many (repeated), else unique per op."""
    n = draw(st.integers(1, 7))
    pool = [None, *(f"v{i}" for i in range(values or n))]
    out = []
    for i in range(n):
        f = draw(st.sampled_from(["put", "get", "cas", "delete"]))
        t0 = draw(st.integers(0, 40))
        info = draw(st.integers(0, 6)) == 0 and f != "get"
        value = draw(st.sampled_from(pool[1:])) if values else f"v{i}"
        out.append(
            Operation(
                draw(st.integers(0, 2)),
                i,
                f,
                "k",
                t0,
                None if info else t0 + draw(st.integers(0, 20)),
                INFO if info else OK,
                value if f in ("put", "cas") else None,
                draw(st.sampled_from(pool)) if f == "cas" else None,
                None if info else draw(st.sampled_from([*pool, value])),
            )
        )
    return out


@settings(max_examples=300, deadline=None)
@given(random_kv_histories())
def test_the_docs_kv_model_agrees_with_the_register_on_random_histories(ops: list[Operation]) -> None:
    assert check_history(ops, model=KvStoreModel()).verdict == check_history(ops).verdict


# ------------------------------------------------------------------------------- the contract


class _Register(Model):
    """A register whose state is a one-entry dict, stepped as the docstring says."""

    name = "reg"
    init: dict[str, Any] = {"v": None}

    def step(self, state: dict[str, Any], op: Operation) -> dict[str, Any] | None:
        if op.f == "get":
            return None if op.status == OK and op.result != state["v"] else state
        return {"v": op.value}


def test_none_means_impossible() -> None:
    """The defect this API had: a model returning None (as documented) found nothing impossible."""
    stale = [put(0, 0, 1, "a"), put(1, 2, 3, "b"), get(2, 4, 5, "a")]
    assert check_history(stale, model=_Register()).verdict == VIOLATION
    assert check_history([*stale[:2], get(2, 4, 5, "b")], model=_Register()).verdict == LINEARIZABLE


def test_a_broken_contract_is_a_clear_error() -> None:
    class NoInit(_Register):
        init = None

    class InPlace(_Register):
        def step(self, state: dict[str, Any], op: Operation) -> dict[str, Any] | None:
            if op.f == "put":
                state["v"] = op.value  # modifies the state it was given
            return state

    class Slot:  # defines equality, so it is not hashable, and is no container freeze() knows
        def __eq__(self, other: object) -> bool:
            return isinstance(other, Slot)

    class Opaque(_Register):
        init = {"v": Slot()}

    ops = [put(0, 0, 1, "a"), get(1, 2, 3, "a")]
    with pytest.raises(ModelError, match="init is None"):
        check_history(ops, model=NoInit())
    with pytest.raises(ModelError, match="modified its state in place"):
        check_history([put(0, 0, 5, "a"), put(1, 0, 5, "b")], model=InPlace())
    with pytest.raises(ModelError, match="neither hashable nor"):
        check_history(ops, model=Opaque())


def test_freeze_compares_contents() -> None:
    assert freeze({"a": [1, {2}], "b": None}) == freeze({"b": None, "a": [1, {2}]})
    assert freeze({"a": [1]}) != freeze({"a": [2]}) and freeze([1, 2]) != freeze([2, 1])
    assert hash(freeze({"a": {"b": [1, 2]}})) == hash(freeze({"a": {"b": [1, 2]}}))


def test_a_key_hook_decides_which_states_are_the_same() -> None:
    class Logged(Model):
        """Keeps the order of the puts too; key() says only the last value matters, so states merge."""

        name, init = "logged", (None, ())

        def step(self, state: Any, op: Operation) -> Any:
            if op.f == "get":
                return None if op.status == OK and op.result != state[0] else state
            return (op.value, (*state[1], op.value))

        def key(self, state: Any) -> Any:
            return state[0]

    class Plain(Logged):
        key = Model.key

    ops = [put(c, 0, 50, f"v{c}") for c in range(6)] + [get(9, 60, 61, "nope")]
    merged, plain = linearizable(ops, Logged()), linearizable(ops, Plain())
    assert merged.verdict == plain.verdict == VIOLATION
    assert merged.explored * 5 < plain.explored


class _SetModel(Model):
    """A grow-only set of all keys (one object): ``add`` (``value``), ``read`` returns a sorted list."""

    name, init = "set", frozenset()

    def step(self, state: frozenset[Any], op: Operation) -> frozenset[Any] | None:
        if op.f == "add":
            return state | {op.value}
        return None if op.status == OK and op.result != sorted(state) else state

    def removable(self, op: Operation) -> bool:
        return op.f == "read"

    def describe_op(self, op: Operation) -> str:
        return f"{op.f} {op.value if op.f == 'add' else op.result}"

    def describe_state(self, state: frozenset[Any]) -> str:
        return "{" + ", ".join(map(str, sorted(state))) + "}"

    def partition_key(self, op: Operation) -> str:
        return "the set"


def test_model_hooks_partition_and_describe() -> None:
    adds = [op(0, "add", 0, 5, key="x", value=1), op(1, "add", 0, 5, key="y", value=2)]
    ok = check_history([*adds, op(2, "read", 6, 7, key="z", result=[1, 2])], model=_SetModel())
    assert [(k.key, k.verdict) for k in ok.keys] == [("the set", LINEARIZABLE)]
    bad = check_history([*adds, op(2, "read", 6, 7, key="z", result=[1])], model=_SetModel())
    (k,) = bad.violations()
    assert k.model == "set" and k.texts() == ["add 1", "add 2", "read [1]"]
    assert "at most 2 of 3 ops linearize, leaving {1, 2}" in k.describe()
    assert [o["text"] for o in k.as_dict()["minimal"]] == ["add 1", "add 2", "read [1]"]


def test_the_docs_kv_model_describes_ops_and_dict_states() -> None:
    got = check_key("k", [put(0, 0, 1, "a"), put(1, 2, 3, "b", "a"), get(2, 4, 5, "a")], KvStoreModel())
    assert got.verdict == VIOLATION and got.minimal_complete
    text = got.describe()
    assert "client 2: get(k) -> 'a'" in text and "leaving {k: 'b'}" in text, text


# ------------------------------------------------------------------------------- the budget


def _slow_to_shrink() -> list[Operation]:
    """Concurrent writes of unknown outcome (an expensive search), then a read of a value never
    written: every shrink step searches about as much as the decision."""
    ops = [put(i, i, None, f"v{i}", status=INFO) for i in range(7)]
    ops += [get(20 + i, 100 + i, 200, f"v{(i * 5) % 7}") for i in range(7)]
    return [*ops, get(40, 300, 301, "nope")]


def test_shrinking_shares_the_decisions_state_budget() -> None:
    ops = _slow_to_shrink()
    decided = linearizable(ops, KV, max_states=10**7, max_seconds=None)
    assert decided.verdict == VIOLATION
    got = check_key("k", ops, max_states=decided.explored + 50, max_seconds=None)
    assert got.verdict == VIOLATION and not got.minimal_complete and "states spent" in got.reason
    assert "sub-history (not minimal: search budget of" in got.describe()
    assert linearizable(got.minimal, KV, max_states=10**7).verdict == VIOLATION  # still a violation
    full = check_key("k", ops, max_states=10**7, max_seconds=None)
    assert full.minimal_complete and len(full.minimal) < len(got.minimal)


class _Ticks:
    """A clock that advances one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_shrinking_shares_the_decisions_deadline() -> None:
    ops = _slow_to_shrink()
    deciding = Budget(10**7, 10**6, clock=_Ticks())
    assert linearizable(ops, KV, budget=deciding).verdict == VIOLATION
    reads = deciding.clock.now  # type: ignore[attr-defined]
    # A deadline a few clock reads after the decision: the shrink stops there, with what it has.
    got = check_key("k", ops, budget=Budget(10**7, reads + 3, clock=_Ticks()))
    assert got.verdict == VIOLATION and not got.minimal_complete and "time budget" in got.reason
    assert linearizable(got.minimal, KV, max_states=10**7).verdict == VIOLATION
    unbounded = check_key("k", ops, budget=Budget(10**7, None))
    assert unbounded.minimal_complete and len(unbounded.minimal) < len(got.minimal)


# ------------------------------------------------------------------------------- values written again


def test_a_read_is_not_shown_as_from_the_future() -> None:
    """ "a" is written twice before a put that returns "absent": that put is the violation. Dropping
    the first write of "a" would show instead a read of "a" before any write of it, which the whole
    history does not have (the read saw the first write)."""
    first, read = put(2, 1, 9, "a"), get(2, 4, 5, "a")
    ops = [first, read, get(2, 4, 14, "a"), put(0, 12, 14, "a", None), put(1, 29, 33, "a", None)]
    got = check_key("k", ops)
    assert got.verdict == VIOLATION and got.minimal_complete
    assert [(o.op_id, o.f, o.checked) for o in got.minimal] == [
        (first.op_id, "put", False),
        (ops[3].op_id, "put", True),
    ], got.describe()
    # Without the first write, the read and the second write fail too, but only as a read from the future.
    assert not KV.may_drop([read, ops[3]], [first])
    assert linearizable([read, ops[3]], KV).verdict == VIOLATION


@st.composite
def register_runs(draw: Any) -> list[Operation]:
    """Linearizable register histories with values written again: ops applied in order at instants
    10, 20, ..., each with an interval around its instant; some outcomes unknown (applied or not)."""
    now: Any = None
    out = []
    for i in range(draw(st.integers(1, 9))):
        f = draw(st.sampled_from(["put", "get", "cas", "delete"]))
        value = draw(st.sampled_from(["a", "b"]))
        if f == "cas" and value == now:
            f = "put"  # a cas that finds its own new value would read as one that swapped
        expected = draw(st.sampled_from([None, "a", "b"]))
        after = {"put": value, "delete": None, "get": now}.get(f, value if now == expected else now)
        result = after if f == "cas" else now
        info = f != "get" and draw(st.integers(0, 5)) == 0
        if not info or draw(st.booleans()):
            now = after
        t = 10 * (i + 1)
        lo, hi = t - draw(st.integers(0, 15)), t + draw(st.integers(0, 15))
        out.append(
            Operation(
                draw(st.integers(0, 2)),
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
    return out


@settings(max_examples=300, deadline=None)
@given(register_runs(), st.randoms(use_true_random=False))
def test_what_the_shrink_may_drop_keeps_a_linearizable_history_linearizable(
    ops: list[Operation], rng: random.Random
) -> None:
    """Sound shrinking: any part of a linearizable history that may_drop lets go leaves the rest
    linearizable, so a shrunk sub-history that fails means the whole one fails."""
    assert linearizable(ops, KV).verdict == LINEARIZABLE
    kept = [o for o in ops if rng.random() < 0.5]
    dropped = [o for o in ops if o not in kept]
    if KV.may_drop(kept, dropped):
        assert linearizable(kept, KV).verdict == LINEARIZABLE


@settings(max_examples=300, deadline=None)
@given(random_kv_histories(values=2))
def test_a_shown_sub_history_with_repeated_values_fails_when_rechecked(ops: list[Operation]) -> None:
    got = check_key("k", ops)
    if got.verdict != VIOLATION:
        return
    assert got.minimal_complete
    assert linearizable(got.minimal, KV, max_seconds=None).verdict == VIOLATION
    assert check_history(got.minimal).verdict == VIOLATION
    for i, o in enumerate(got.minimal):  # minimal: no single op can go
        rest = got.minimal[:i] + got.minimal[i + 1 :]
        assert not KV.may_drop(rest, [o]) or linearizable(rest, KV).verdict == LINEARIZABLE


def test_the_docs_show_the_example_models_as_they_are() -> None:
    doc = (ROOT / "docs" / "linearizability.md").read_text()
    section = doc[doc.index("## Writing your own model") :]
    shown = section[section.index("```python\n") + len("```python\n") :]
    assert shown[: shown.index("```\n")] == (ROOT / "chaos" / "model_example.py").read_text()
