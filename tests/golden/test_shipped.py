"""The goldens shipped in golden/traces/: enough of them, small, readable, each with its recipe and
the commit it was blessed from (``ci/golden`` verifies them against today's code)."""

from __future__ import annotations

from clusterlab.golden.store import MANIFEST, TRACES, golden_names, load_golden, load_manifest

MAX_BYTES = 1024 * 1024  # each golden <= 1 MiB


def test_every_golden_has_a_recipe_and_loads() -> None:
    recipes = {r.name: r for r in load_manifest(MANIFEST)}
    assert set(golden_names(TRACES)) == set(recipes)
    drivers = [r.driver for r in recipes.values()]
    assert drivers.count("sim") >= 3 and drivers.count("real") >= 3
    real = {r.scenario for r in recipes.values() if r.driver == "real"}
    assert {"leader-kill", "truncate-follower-tail"} <= real and any("partition" in s for s in real)
    for name, r in recipes.items():
        g = load_golden(name)
        assert (g.driver, g.info["scenario"], g.info["seed"], g.info["members"]) == (
            r.driver,
            r.scenario,
            r.seed,
            r.members,
        )
        assert g.info["git_commit"] and g.info["clusterlab_version"]
        assert g.applied.num_rows == g.info["positions"] > 100
        assert (g.messages is not None) == (r.driver == "sim")
        size = sum(p.stat().st_size for p in g.directory.rglob("*") if p.is_file())
        assert size <= MAX_BYTES, (name, size)
