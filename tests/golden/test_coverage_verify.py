"""``golden verify --coverage`` (what ``ci/golden`` runs): the coverage measured on verify's own replays
and re-runs is what ``golden coverage`` measures with runs of its own, and a set missing a must-cover
item fails the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clusterlab.golden.coverage import CATEGORIES, coverage_report
from clusterlab.golden.store import MANIFEST, load_manifest
from clusterlab.golden.verify import verify_goldens

from clusterlab.cli import main

pytestmark = [pytest.mark.sim, pytest.mark.spark]


def _pick() -> list[str]:
    """One real golden (measured on its replay) and the mute-candidate simulator golden (on its re-run)."""
    recipes = load_manifest(MANIFEST)
    real = next(r.name for r in recipes if r.driver == "real")
    return [real, "sim-mute-candidate-n5-s5"]


def test_verify_measures_what_golden_coverage_measures(spark: object) -> None:
    names = _pick()
    report = verify_goldens(names, spark=spark, coverage=True)
    assert report.ok, report.details()
    assert report.coverage is not None
    by_verify = {m.name: m for m in report.coverage.measurements}
    by_coverage = {m.name: m for m in coverage_report(names).measurements}
    assert set(by_verify) == set(by_coverage) == set(names)
    for n in names:
        a, b = by_verify[n], by_coverage[n]
        assert a.error is None and b.error is None, (a.error, b.error)
        for c in CATEGORIES:
            assert a.items[c] == b.items[c], (n, c, a.items[c] ^ b.items[c])
        assert a.lines and a.lines == b.lines, (n, len(a.lines ^ b.lines))
    sim = by_verify["sim-mute-candidate-n5-s5"]
    assert "CANDIDATE_BALLOT->FOLLOWER_LOG_REPLICATION" in sim.items["transition"]
    assert "RequestVote" in sim.items["message"]
    real = by_verify[names[0]]
    assert not real.items["election_state"] and "SessionMessage" in real.items["entry_type"]


def test_verify_coverage_of_a_subset_is_shown_not_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two goldens do not exercise every must-cover item: verify of that subset still passes (the
    judgement is over the whole set, as ci/golden runs it), and the JSON carries the coverage."""
    out = tmp_path / "verify.json"
    assert main(["golden", "verify", *_pick(), "--coverage", "--master", "local[2]", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ok"] and report["coverage"]["missing_required"], report["coverage"]["missing_required"]
    captured = capsys.readouterr()
    assert "not judged" in captured.err and "golden coverage: the set (2 goldens): FAIL" in captured.out


def test_verify_leaves_this_process_s_running_session_running(spark: object) -> None:
    """`golden verify` in a process that already runs Spark (a pytest worker's shared session, or a
    notebook's) uses that session and does not stop it: the next job on it still reads traces."""
    from clusterlab.golden.store import TRACES

    real = _pick()[0]
    assert main(["golden", "verify", real, "--master", "local[2]"]) == 0
    applied = spark.read.format("clustertrace").option("table", "applied").load(str(TRACES / real))  # type: ignore[attr-defined]
    assert applied.count() > 0
