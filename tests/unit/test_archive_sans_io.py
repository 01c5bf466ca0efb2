"""The durable-storage modules obey docs/architecture.md's rule: no networking/threads, no clock, no global random."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = [
    *sorted((ROOT / "core" / "archive").glob("*.py")),
    ROOT / "core" / "consensus" / "recording_log.py",
    ROOT / "core" / "consensus" / "node_state.py",
]
FORBIDDEN_IMPORTS = {
    "zmq",
    "socket",
    "threading",
    "multiprocess",
    "multiprocessing",
    "asyncio",
    "time",
    "datetime",
}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_is_sans_io(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").split(".")[0]]
        else:
            continue
        assert not set(names) & FORBIDDEN_IMPORTS, f"{path.name}:{node.lineno} imports {names}"
    # `random` may be imported only for the type of an injected random.Random, never called at module level.
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Name) and target.id == "random":
                pytest.fail(f"{path.name}:{node.lineno} calls random.{node.func.attr}: take a seeded Random")
