"""Generated docs are current, and the transition table covers every election state."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from clusterlab.core.consensus.context import ElectionState
from clusterlab.core.consensus.election import TRANSITIONS

ROOT = Path(__file__).resolve().parents[2]


def _gen_module():
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "docs" / "gen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_docs_are_current() -> None:
    gen = _gen_module()
    for name, make in gen.GENERATED.items():
        assert (ROOT / "docs" / name).read_text() == make(), f"docs/{name} is stale: run python docs/gen.py"


def test_every_election_state_is_reachable_in_the_transition_table() -> None:
    reachable = {ElectionState.INIT} | {dst for (_src, dst) in TRANSITIONS}
    assert reachable == set(ElectionState)
    leaves_to_somewhere = {src for (src, _dst) in TRANSITIONS}
    assert leaves_to_somewhere == set(ElectionState) - {ElectionState.CLOSED}
