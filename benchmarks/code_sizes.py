"""Code sizes: the largest classes and the longest functions of clusterlab's packages, read with ``ast``.

Reads the sources (nothing is imported) of ``core``, ``harness``, ``chaos``, ``golden`` and ``clusterlab``
and prints the largest classes by lines and every function or method longer than ``--over`` lines
(default 70, the project's limit), each sorted longest first, with the count over 70 and over 100.
A definition's lines run from its ``def``/``class`` line (decorators excluded) to its last line,
docstring, comments and blank lines inside included; a nested function counts on its own and inside
its parent. ``--json PATH`` writes the same figures as JSON (``benchmarks/code_sizes.json`` is the
committed one).

Run: python -m benchmarks.code_sizes [--classes N] [--over LINES] [--json PATH]
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import write_results
from clusterlab import LAYERS

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (*LAYERS, "clusterlab")
LIMIT = 70  # the project's function-length limit
LONG = 100  # the second count reported


@dataclass(frozen=True)
class Definition:
    """One class or function: its qualified name, where it starts and how many lines it spans."""

    kind: str  # "class" or "function"
    name: str  # dotted within its module: Class.method, outer.inner
    path: str  # relative to the repository root
    line: int
    lines: int


def _definitions(path: Path, root: Path) -> list[Definition]:
    """Every class and function (methods and nested ones included) defined in the source file ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = str(path.relative_to(root))
    found: list[Definition] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                name = f"{prefix}{child.name}"
                end = child.end_lineno if child.end_lineno is not None else child.lineno
                found.append(Definition(kind, name, rel, child.lineno, end - child.lineno + 1))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def collect(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Definition]:
    """Every definition in the ``.py`` files under ``packages`` (folders of ``root``), in path order."""
    found: list[Definition] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" not in path.parts:
                found.extend(_definitions(path, root))
    return found


def _longest_first(definitions: list[Definition]) -> list[Definition]:
    return sorted(definitions, key=lambda d: (-d.lines, d.path, d.line))


def report(definitions: list[Definition], classes: int, over: int) -> dict[str, object]:
    """The figures: counts over ``LIMIT`` and ``LONG`` lines, the ``classes`` largest classes and the
    functions longer than ``over`` lines, each list longest first."""
    functions = [d for d in definitions if d.kind == "function"]
    return {
        "packages": list(PACKAGES),
        "functions": len(functions),
        f"functions_over_{LIMIT}": sum(d.lines > LIMIT for d in functions),
        f"functions_over_{LONG}": sum(d.lines > LONG for d in functions),
        "largest_classes": [asdict(d) for d in _longest_first([d for d in definitions if d.kind == "class"])[:classes]],
        "over": over,
        "long_functions": [asdict(d) for d in _longest_first([d for d in functions if d.lines > over])],
    }


def _print(doc: dict[str, object]) -> None:
    print(
        f"{doc['functions']} functions in {', '.join(PACKAGES)}: {doc[f'functions_over_{LIMIT}']} over {LIMIT} lines, "
        f"{doc[f'functions_over_{LONG}']} over {LONG}"
    )
    sections = (("largest classes", "largest_classes"), (f"functions over {doc['over']} lines", "long_functions"))
    for title, key in sections:
        rows = doc[key]
        assert isinstance(rows, list)
        print(f"\n{title}:")
        for row in rows:
            print(f"  {row['lines']:5d}  {row['path']}:{row['line']}  {row['name']}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes", type=int, default=10, help="how many of the largest classes (default 10)")
    parser.add_argument("--over", type=int, default=LIMIT, help=f"list functions longer than this (default {LIMIT})")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = parser.parse_args(argv)
    doc = report(collect(), args.classes, args.over)
    _print(doc)
    if args.json:
        print(f"\nwrote {write_results(args.json, doc)}")


if __name__ == "__main__":
    main()
