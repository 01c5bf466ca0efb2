"""Regenerate the generated docs: ``python docs/gen.py`` (tests/unit/test_docs.py checks they are current)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clusterlab.core.consensus.election import transition_diagram

DOCS = Path(__file__).resolve().parent


def election_md() -> str:
    """docs/election.md: the election state diagram from TRANSITIONS."""
    return (
        "# Election state diagram\n\n"
        "Generated from `clusterlab.core.consensus.election.TRANSITIONS` (docs/protocol.md a.3); regenerate with\n"
        "`python docs/gen.py` after changing the table. `tests/unit/test_docs.py` fails when this file is stale.\n\n"
        "```mermaid\n" + transition_diagram() + "```\n"
    )


GENERATED = {"election.md": election_md}

if __name__ == "__main__":
    for name, make in GENERATED.items():
        (DOCS / name).write_text(make())
        print(f"wrote docs/{name}")
