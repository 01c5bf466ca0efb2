"""docs/aeron-parity.md stays true: every Aeron test a port names is listed there as passing with that
port, and every port the table names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "aeron-parity.md"


def ported() -> dict[tuple[str, str], set[str]]:
    """(Aeron class, Aeron test) -> our tests whose docstring names it."""
    out: dict[tuple[str, str], set[str]] = {}
    for py in sorted((ROOT / "tests" / "aeron").glob("test_*.py")):
        text = py.read_text()
        for m in re.finditer(r'def (test_\w+)\((?:.|\n)*?"""((?:.|\n)*?)"""', text):
            for ref in re.findall(r"\b([A-Z]\w*Test)\.(\w+)", m.group(2)):
                out.setdefault(ref, set()).add(f"{py.relative_to(ROOT)}::{m.group(1)}")
    return out


def table() -> dict[tuple[str, str], tuple[str, str]]:
    """(Aeron class, Aeron test) -> (our tests cell, status) from the doc's per-class tables."""
    rows: dict[tuple[str, str], tuple[str, str]] = {}
    cls = None
    for line in DOC.read_text().splitlines():
        if line.startswith("### "):
            cls = line[4:].strip()
        m = re.match(r"\| `(\w+)` \| (.*?) \| (.*) \|$", line)
        if m and cls:
            rows[(cls, m.group(1))] = (m.group(2), m.group(3))
    return rows


def test_every_named_aeron_test_is_listed_as_passing_with_its_port() -> None:
    rows = table()
    for ref, ours in ported().items():
        assert ref in rows, f"{ref[0]}.{ref[1]} is ported but not in docs/aeron-parity.md"
        cell, status = rows[ref]
        assert status == "passes", f"{ref}: {status}"
        for test in ours:
            assert f"`{test}`" in cell, f"{ref}: {test} missing from the table"


def test_every_port_in_the_table_exists() -> None:
    for (cls, name), (cell, status) in table().items():
        for test in re.findall(r"`([^`]+::test_\w+)`", cell):
            path, func = test.split("::")
            assert f"def {func}(" in (ROOT / path).read_text(), f"{cls}.{name}: {test} does not exist"
        if status == "passes":
            assert cell != "-", f"{cls}.{name} passes without a test"
