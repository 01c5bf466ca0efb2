"""Generated docs are current, and the transition table covers every election state."""

from __future__ import annotations

import importlib.util
import re
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


def _count(text: str, pattern: str) -> tuple[int, ...]:
    """The numbers the one place ``pattern`` (a regex with groups of digits or number words) matches in ``text``."""
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
    found = re.findall(pattern, text)
    assert len(found) == 1, f"expected the phrase /{pattern}/ once, found {len(found)}: update it or this test"
    groups = found[0] if isinstance(found[0], tuple) else (found[0],)
    return tuple(int(g) if g.isdigit() else words[g] for g in groups)


def test_the_counts_the_readme_and_docs_give_are_the_code_s() -> None:
    """Every count the README (and the docs quoting it) states: scenarios, goldens of each driver,
    planted bugs, election states, transitions, log entry types and callbacks the goldens must cover."""
    from clusterlab.chaos.scenarios import SCENARIOS
    from clusterlab.golden.coverage import required
    from clusterlab.golden.store import load_manifest

    from clusterlab.testing.mutants import MUTANTS

    readme = (ROOT / "README.md").read_text()
    drivers = [recipe.driver for recipe in load_manifest()]
    must = {category: len(items) for category, items in required().items()}
    assert _count(readme, r"# the (\d+) named scenarios") == (len(SCENARIOS),)
    assert _count(readme, r"(\d+) simulator and (\d+) real goldens") == (drivers.count("sim"), drivers.count("real"))
    assert _count(readme, r"are (\w+) real chaos runs") == (drivers.count("real"),)
    assert _count(readme, r"\d+/(\d+) election states") == (len(ElectionState),) == (must["election_state"],)
    assert _count(readme, r"\d+/(\d+) transitions") == (len(TRANSITIONS),) == (must["transition"],)
    assert _count(readme, r"\d+/(\d+) log entry types") == (must["entry_type"],)
    assert _count(readme, r"\d+/(\d+) callbacks") == (must["callback"],)
    assert _count(readme, r"\d+ of the (\d+) planted bugs") == (len(MUTANTS),)
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    assert _count(architecture, r"Aeron's (\d+) states") == (len(ElectionState),)
    mutants = (ROOT / "docs" / "mutants.md").read_text()
    assert _count(mutants, r"(\d+)/(\d+) caught by black-box runs") == (len(MUTANTS), len(MUTANTS))
