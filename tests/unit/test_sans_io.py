"""The protocol code stays sans-IO and deterministic (docs/architecture.md, "The rule that shapes
everything"): no sockets, threads or event loops, no clock reads, no module-level randomness.

Checked on the syntax tree, not with grep, so aliases (``import time as t``; ``from time import
monotonic``) are resolved and comments or strings mentioning ``time.time`` are not flagged."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SANS_IO_PACKAGES = ("core/codec", "core/consensus", "core/service", "core/archive", "core/client")

# Top-level modules that mean IO or concurrency. subprocess/_thread/concurrent/secrets go with the
# listed ones: each would make a member's behaviour depend on something other than its inputs.
BANNED_MODULES = frozenset(
    {
        "zmq",
        "socket",
        "threading",
        "_thread",
        "asyncio",
        "multiprocess",
        "multiprocessing",
        "concurrent",
        "subprocess",
        "select",
        "selectors",
        "secrets",
    }
)

# Fully qualified callables that read a clock, sleep or draw unseeded randomness.
BANNED_CALLS = frozenset(
    {
        "time.time",
        "time.time_ns",
        "time.monotonic",
        "time.monotonic_ns",
        "time.perf_counter",
        "time.perf_counter_ns",
        "time.process_time",
        "time.process_time_ns",
        "time.thread_time",
        "time.thread_time_ns",
        "time.clock_gettime",
        "time.clock_gettime_ns",
        "time.sleep",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
        "os.urandom",
        "uuid.uuid1",
        "uuid.uuid4",
    }
)
# Module ``random``: only the seeded generator class may be used; every module-level function
# (random, randint, choice, shuffle, uniform, seed, ...) shares one hidden global state.
RANDOM_ALLOWED = frozenset({"random.Random"})
DYNAMIC_IMPORTS = frozenset({"importlib.import_module", "__import__"})


@dataclass(frozen=True, slots=True)
class Violation:
    path: Path
    line: int
    what: str

    def describe(self) -> str:
        try:
            shown = self.path.relative_to(REPO)
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}: {self.what}"


def _top(module: str) -> str:
    return module.split(".", 1)[0]


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None (calls on call results etc. are not names)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _banned_callable(qualified: str) -> str | None:
    if qualified in BANNED_CALLS:
        why = "time arrives as now_ns" if qualified.startswith(("time.", "datetime.")) else "nondeterministic"
        return f"calls {qualified}() ({why})"
    if qualified.startswith("random.") and qualified not in RANDOM_ALLOWED:
        return f"uses module-level {qualified} (use the seeded random.Random passed in)"
    return None


def find_violations(path: Path) -> list[Violation]:
    """Every sans-IO violation in one Python file, in line order."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Violation] = []
    # Local name -> fully qualified name, from this file's imports (wherever they appear).
    aliases: dict[str, str] = {}

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _top(alias.name) in BANNED_MODULES:
                    found.append(Violation(path, node.lineno, f"imports {alias.name}"))
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases[_top(alias.name)] = _top(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _top(node.module) in BANNED_MODULES:
                found.append(Violation(path, node.lineno, f"imports from {node.module}"))
                continue
            for alias in node.names:
                qualified = f"{node.module}.{alias.name}"
                aliases[alias.asname or alias.name] = qualified
                reason = _banned_callable(qualified)
                if reason is not None:
                    found.append(Violation(path, node.lineno, f"imports {qualified}: {reason}"))

    _CallChecker(path, aliases, found).visit(tree)
    return sorted(found, key=lambda v: v.line)


class _CallChecker(ast.NodeVisitor):
    """Flags banned calls, resolving names through the file's imports. A function parameter with a
    module's name (``def f(random): random.random()``) shadows the import inside that function."""

    def __init__(self, path: Path, aliases: dict[str, str], found: list[Violation]) -> None:
        self.path = path
        self.aliases = aliases
        self.found = found
        self.shadowed: list[set[str]] = []

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        a = node.args
        params = {arg.arg for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
        params |= {arg.arg for arg in (a.vararg, a.kwarg) if arg is not None}
        self.shadowed.append(params)
        self.generic_visit(node)
        self.shadowed.pop()

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        name = _dotted(node.func)
        if name is None:
            return
        head, _, rest = name.partition(".")
        if any(head in scope for scope in self.shadowed):
            return
        if head not in self.aliases and name not in DYNAMIC_IMPORTS:
            return  # not bound by an import here: a local such as rng in rng.random()
        qualified = self.aliases.get(head, head) + (f".{rest}" if rest else "")
        reason = _banned_callable(qualified)
        if reason is not None:
            self.found.append(Violation(self.path, node.lineno, reason))
        elif qualified in DYNAMIC_IMPORTS and node.args:
            target = node.args[0]
            if (
                isinstance(target, ast.Constant)
                and isinstance(target.value, str)
                and _top(target.value) in BANNED_MODULES
            ):
                self.found.append(Violation(self.path, node.lineno, f"imports {target.value} dynamically"))


def sans_io_files(root: Path = REPO) -> list[Path]:
    return sorted(p for pkg in SANS_IO_PACKAGES if (root / pkg).is_dir() for p in (root / pkg).rglob("*.py"))


def test_core_protocol_packages_are_sans_io() -> None:
    files = sans_io_files()
    assert files, f"no files found under {SANS_IO_PACKAGES}: is REPO ({REPO}) right?"
    violations = [v for f in files for v in find_violations(f)]
    assert not violations, "sans-IO rule broken:\n" + "\n".join(v.describe() for v in violations)


PLANTED = """\
import zmq
import threading as th
from asyncio import sleep
import time, random
import time as t
from time import monotonic_ns
from datetime import datetime
import datetime as dt
import importlib
from random import shuffle

def bad(rng):
    time.time()
    t.perf_counter_ns()
    monotonic_ns()
    datetime.now()
    dt.date.today()
    random.randint(1, 6)
    random.choice([1, 2])
    importlib.import_module("socket")
"""

CLEAN = """\
import random
import struct
from random import Random

def good(rng: random.Random, now_ns: int) -> int:
    # time.time() in a comment is fine, and so is this string: "time.monotonic()"
    r = Random(7)
    own = random.Random(now_ns)
    return rng.randint(0, 9) + r.random() + own.random() + struct.calcsize("<q")

def shadowed(random):  # a parameter shadowing the imported module
    return random.random()
"""


def test_checker_catches_planted_violations(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(PLANTED)
    got = {(v.line, v.what.split(" (")[0].split(":")[0]) for v in find_violations(bad)}
    expected = {
        (1, "imports zmq"),
        (2, "imports threading"),
        (3, "imports from asyncio"),
        (6, "imports time.monotonic_ns"),
        (10, "imports random.shuffle"),
        (13, "calls time.time()"),
        (14, "calls time.perf_counter_ns()"),
        (15, "calls time.monotonic_ns()"),
        (16, "calls datetime.datetime.now()"),
        (17, "calls datetime.date.today()"),
        (18, "uses module-level random.randint"),
        (19, "uses module-level random.choice"),
        (20, "imports socket dynamically"),
    }
    assert got == expected
    assert find_violations(bad)[0].describe().endswith("bad.py:1: imports zmq")


def test_checker_passes_seeded_random_and_comments(tmp_path: Path) -> None:
    clean = tmp_path / "clean.py"
    clean.write_text(CLEAN)
    assert find_violations(clean) == []


@pytest.mark.parametrize("package", SANS_IO_PACKAGES)
def test_sans_io_package_exists(package: str) -> None:
    # Guards the walk itself: a renamed package would otherwise silently escape the check.
    assert (REPO / package).is_dir()
