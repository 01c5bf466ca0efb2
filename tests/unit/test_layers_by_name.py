"""The layer contracts (pyproject.toml, import-linter) see imports; core/runtime also loads a few objects of
the layers above it by a ``"package.module:attr"`` name, which import-linter cannot see. This test holds
those names to a short, reviewed list, so no other upward reference enters production code unseen — and
none into the test apparatus (``clusterlab.testing``): a production node reaches it only through the test
context a test names in ``CLUSTERLAB_TEST_CONTEXT``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UPPER = re.compile(r"^clusterlab\.(testing|harness|chaos|golden|cli)\b")

# (file, name): why core loads it by name.
ALLOWED = {
    ("core/runtime/recording.py", "clusterlab.harness.recorder:process_recorder"): "the Arrow recorder",
    ("core/runtime/service.py", "clusterlab.harness.services:SERVICES"): "the sample services by short name",
    ("core/runtime/service.py", "clusterlab.harness.tripwire:process_tripwire"): "callback tripwires, when asked",
}


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """Every string literal of the module that is not a docstring, with its line."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def upward_names() -> dict[tuple[str, str], int]:
    """(file, name) -> line of every string in core that names a module of a layer above core."""
    found: dict[tuple[str, str], int] = {}
    for path in sorted((REPO / "core").rglob("*.py")):
        for line, value in _string_constants(path):
            if UPPER.match(value):
                found[(str(path.relative_to(REPO)), value)] = line
    return found


def test_core_names_upper_layers_only_where_reviewed() -> None:
    found = upward_names()
    unexpected = [f"{file}:{line}: {name!r}" for (file, name), line in found.items() if (file, name) not in ALLOWED]
    assert not unexpected, "core loads an upper layer by name (review it and add it to ALLOWED):\n" + "\n".join(
        unexpected
    )
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED names what core no longer loads: {stale}"


def test_no_production_module_names_the_test_apparatus() -> None:
    assert not [key for key in upward_names() if key[1].startswith("clusterlab.testing")]


def test_a_new_upward_name_is_found(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""doc naming clusterlab.testing.x is fine"""\nFACTORY = "clusterlab.testing.node:environment"\n'
    )
    assert [value for _line, value in _string_constants(module) if UPPER.match(value)] == [
        "clusterlab.testing.node:environment"
    ]
