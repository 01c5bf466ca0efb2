"""Regenerate the generated docs: ``python docs/gen.py`` (tests/unit/test_docs.py checks they are current)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clusterlab.core.consensus.election import transition_diagram

from clusterlab import LAYERS

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
PACKAGES = (*LAYERS, "clusterlab")  # the installed clusterlab's source folders


def election_md() -> str:
    """docs/election.md: the election state diagram from TRANSITIONS."""
    return (
        "# Election state diagram\n\n"
        "Generated from `clusterlab.core.consensus.election.TRANSITIONS` (docs/protocol.md a.3); regenerate with\n"
        "`python docs/gen.py` after changing the table. `tests/unit/test_docs.py` fails when this file is stale.\n\n"
        "```mermaid\n" + transition_diagram() + "```\n"
    )


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring, on one line, with Sphinx roles reduced to their code."""
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    if not docstring:
        raise SystemExit(f"{path.relative_to(ROOT)} has no module docstring: say what the module is")
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    paragraph = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", paragraph).replace("``", "`")
    return re.split(r"(?<=[.;])\s", paragraph, maxsplit=1)[0].replace("|", "\\|")


def modules_md() -> str:
    """docs/modules.md: every source module with the first sentence of its docstring, folder by folder."""
    out = [
        "# Module map\n\n",
        "Every module of the installed `clusterlab` package, by repository folder, with the first sentence of its\n"
        "docstring. Generated from the code by `python docs/gen.py`; `tests/unit/test_docs.py` fails when this\n"
        "file is stale. docs/architecture.md explains how the parts fit together.\n",
    ]
    for package in PACKAGES:
        folders: dict[str, list[Path]] = {}
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" not in path.parts and path.name != "__init__.py":
                folders.setdefault(str(path.parent.relative_to(ROOT)), []).append(path)
        for folder, paths in sorted(folders.items()):
            out.append(f"\n## `{folder}/`\n\n| module | what it is |\n|---|---|\n")
            out.extend(f"| `{path.name}` | {_summary(path)} |\n" for path in paths)
    return "".join(out)


GENERATED = {"election.md": election_md, "modules.md": modules_md}

if __name__ == "__main__":
    for name, make in GENERATED.items():
        (DOCS / name).write_text(make())
        print(f"wrote docs/{name}")
