"""One writer per piece of state: ``ModuleState``'s term and log positions change only through its
writer methods (``set_commit_position``, ``set_leadership_term_id``, ``set_consumed_position`` …).

Checked on the syntax tree of the production packages. The syntax tree has no types, so the scan
fails closed: every assignment, augmented assignment or ``setattr`` to one of the guarded attribute
names is a violation unless the scan can tell the receiver is not a ``ModuleState``:

* ``self`` inside one of ModuleState's writer methods, for the field that method owns;
* ``self`` inside a class with a field of its own under that name (``OWN_FIELD_CLASSES``, each with
  its reason);
* a ``MemberStatus`` (a peer's last reported log term), known by how the function binds the name:
  ``x.this_member``, ``x.status(id)``, or a loop over ``x.statuses`` / ``x.followers()``.

Tests are not scanned: they plant broken states on purpose (tests/sim/test_invariants.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clusterlab import LAYERS

REPO = Path(__file__).resolve().parents[2]
# The production layers (setup.py LAYERS) and the top package (cli, pytest plugin, testing hooks).
PRODUCTION_PACKAGES = (*LAYERS, "clusterlab")

MODULE_STATE_FILE = "core/consensus/module_state.py"
MODULE_STATE_CLASS = "ModuleState"
# ModuleState's writer methods and the fields each may assign.
WRITERS: dict[str, frozenset[str]] = {
    "__init__": frozenset({"commit_position", "leadership_term_id", "consumed_position", "notified_commit_position"}),
    "set_commit_position": frozenset({"commit_position"}),
    "restore_commit_position": frozenset({"commit_position"}),
    "set_leadership_term_id": frozenset({"leadership_term_id"}),
    "restore_leadership_term_id": frozenset({"leadership_term_id"}),
    "set_consumed_position": frozenset({"consumed_position"}),
    "restore_consumed_position": frozenset({"consumed_position"}),
    "set_notified_commit_position": frozenset({"notified_commit_position"}),
    "advance_notified_commit_position": frozenset({"notified_commit_position"}),
    "restore_notified_commit_position": frozenset({"notified_commit_position"}),
}
GUARDED_FIELDS = frozenset().union(*WRITERS.values())

# Classes holding a field of the same name that is their own state, not ModuleState's: their methods
# may assign ``self.<field>``.
OWN_FIELD_CLASSES: dict[tuple[str, str], str] = {
    ("core/consensus/election.py", "Election"): "the term the election is deciding (Aeron Election.leadershipTermId)",
    ("core/consensus/members.py", "MemberStatus"): "the log term a peer last reported (Aeron ClusterMember)",
    ("core/codec/framewalk.py", "Frame"): "the term in a log entry's header",
}
# How a function gets hold of a MemberStatus: attributes, method calls, and iterables of them.
MEMBER_STATUS_ATTRIBUTES = frozenset({"this_member", "_this_member"})
MEMBER_STATUS_CALLS = frozenset({"status", "_status"})
MEMBER_STATUS_ITERABLES = frozenset({"statuses", "_statuses", "followers"})


@dataclass(frozen=True, slots=True)
class Write:
    path: str
    line: int
    receiver: str
    field: str
    where: str

    def describe(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.receiver}.{self.field} assigned in {self.where}; "
            f"ModuleState.{self.field} changes only through its writer methods"
        )


def _is_member_status_source(node: ast.expr) -> bool:
    """An expression that yields a MemberStatus (``st.this_member``, ``st.status(id)``)."""
    if isinstance(node, ast.Attribute):
        return node.attr in MEMBER_STATUS_ATTRIBUTES
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in MEMBER_STATUS_CALLS
    return False


def _is_member_status_iterable(node: ast.expr) -> bool:
    """An expression iterating MemberStatus objects (``st.statuses``, ``st.followers()``)."""
    if isinstance(node, ast.Call):
        node = node.func
    return isinstance(node, ast.Attribute) and node.attr in MEMBER_STATUS_ITERABLES


def _member_status_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
    """Local names every binding of which in ``func`` is a MemberStatus."""
    kinds: dict[str, set[bool]] = {}
    for arg in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs):
        is_status = arg.annotation is not None and ast.unparse(arg.annotation).strip("'\"") == "MemberStatus"
        kinds.setdefault(arg.arg, set()).add(is_status)
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    kinds.setdefault(target.id, set()).add(_is_member_status_source(node.value))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name):
            value = node.value if not isinstance(node, ast.AugAssign) else None
            kinds.setdefault(node.target.id, set()).add(value is not None and _is_member_status_source(value))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(node.target, ast.Name):
            kinds.setdefault(node.target.id, set()).add(_is_member_status_iterable(node.iter))
    return frozenset(name for name, seen in kinds.items() if seen == {True})


def _is_allowed(
    path: str, cls: str | None, func: str | None, receiver: ast.expr, field: str, statuses: frozenset[str]
) -> bool:
    if isinstance(receiver, ast.Name) and receiver.id == "self" and cls is not None:
        if (path, cls) == (MODULE_STATE_FILE, MODULE_STATE_CLASS):
            return func is not None and field in WRITERS.get(func, frozenset())
        return (path, cls) in OWN_FIELD_CLASSES
    if _is_member_status_source(receiver):
        return True
    return isinstance(receiver, ast.Name) and receiver.id in statuses


class _Scanner(ast.NodeVisitor):
    """Collects the writes to guarded attribute names that are not provably someone else's field."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.cls: str | None = None
        self.func: str | None = None
        self.statuses: frozenset[str] = frozenset()
        self.writes: list[Write] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer = self.cls, self.func, self.statuses
        self.cls, self.func, self.statuses = node.name, None, frozenset()
        self.generic_visit(node)
        self.cls, self.func, self.statuses = outer

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.func, self.statuses
        self.func, self.statuses = node.name, _member_status_names(node)
        self.generic_visit(node)
        self.func, self.statuses = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not isinstance(node.ctx, ast.Load) and node.attr in GUARDED_FIELDS:
            self._check(node, node.value, node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        # setattr(x, "field", v) and object.__setattr__(x, "field", v)
        name = ast.unparse(node.func)
        if name in ("setattr", "object.__setattr__") and len(node.args) >= 2:
            field = node.args[1]
            if isinstance(field, ast.Constant) and field.value in GUARDED_FIELDS:
                self._check(node, node.args[0], str(field.value))
        self.generic_visit(node)

    def _check(self, node: ast.AST, receiver: ast.expr, field: str) -> None:
        if not _is_allowed(self.path, self.cls, self.func, receiver, field, self.statuses):
            where = ".".join(p for p in (self.cls, self.func) if p) or "module level"
            self.writes.append(Write(self.path, getattr(node, "lineno", 0), ast.unparse(receiver), field, where))


def scan_source(source: str, path: str) -> list[Write]:
    scanner = _Scanner(path)
    scanner.visit(ast.parse(source, filename=path))
    return scanner.writes


def production_files() -> Iterator[Path]:
    for package in PRODUCTION_PACKAGES:
        yield from sorted((REPO / package).rglob("*.py"))


def test_module_state_fields_have_one_writer_each() -> None:
    violations = [
        w
        for file in production_files()
        for w in scan_source(file.read_text(encoding="utf-8"), file.relative_to(REPO).as_posix())
    ]
    assert not violations, "\n".join(w.describe() for w in violations)


def test_the_writer_methods_and_owner_classes_named_here_exist() -> None:
    """A renamed writer or owner class must be renamed here too, not left as a stale exemption."""
    tree = ast.parse((REPO / MODULE_STATE_FILE).read_text(encoding="utf-8"))
    (cls,) = (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == MODULE_STATE_CLASS)
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert set(WRITERS) <= methods, f"no such ModuleState methods: {sorted(set(WRITERS) - methods)}"
    for path, name in OWN_FIELD_CLASSES:
        classes = {
            n.name
            for n in ast.walk(ast.parse((REPO / path).read_text(encoding="utf-8")))
            if isinstance(n, ast.ClassDef)
        }
        assert name in classes, f"{path} has no class {name}"


@pytest.mark.parametrize(
    "source",
    [
        "def f(st):\n    st.consumed_position = 1\n",
        "class LogAdapter:\n    def f(self):\n        self._s.notified_commit_position = 2\n",
        "def f(st):\n    st.commit_position += 1\n",
        "def f(st):\n    st.leadership_term_id, x = 1, 2\n",
        "def f(st):\n    setattr(st, 'leadership_term_id', 3)\n",
        "def f(st):\n    s = st.status(1)\n    s = st\n    s.leadership_term_id = 3\n",
        "class ModuleState:\n    def set_consumed_position(self, p):\n        self.commit_position = p\n",
        "class ModuleState:\n    def helper(self, p):\n        self.leadership_term_id = p\n",
    ],
)
def test_a_write_around_the_writers_is_found(source: str) -> None:
    assert scan_source(source, MODULE_STATE_FILE), source


@pytest.mark.parametrize(
    "source",
    [
        "def f(st):\n    me = st.this_member\n    me.leadership_term_id = 1\n",
        "def f(st):\n    for s in st.followers():\n        s.leadership_term_id = 1\n",
        "def f(st):\n    st.status(1).leadership_term_id = 1\n",
        "class ModuleState:\n    def set_consumed_position(self, p):\n        self.consumed_position = p\n",
        "def f(st):\n    x = st.consumed_position\n",
    ],
)
def test_someone_elses_field_or_a_read_is_not_a_violation(source: str) -> None:
    assert not scan_source(source, MODULE_STATE_FILE), source
