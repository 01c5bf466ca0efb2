"""Golden traces: bless a run, verify today's code against it (replay and simulator re-run, diffed
with Spark), and prove the diff finds a planted change at exactly its position."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from clusterlab.golden.regenerate import regenerate
from clusterlab.golden.spark_diff import Comparison, diff_positions
from clusterlab.golden.store import GoldenError, Recipe, applied_table, bless, load_golden, load_manifest
from clusterlab.golden.verify import _write_replay, describe_position_diff, pattern, verify_goldens
from clusterlab.harness.completeness import sealed_json
from clusterlab.harness.replay import replay_log
from clusterlab.harness.trace import open_run

from clusterlab.cli import main
from tests.golden import plant, variants


@pytest.fixture(scope="module")
def traces(sim_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A goldens directory with the clean simulator run blessed as ``g-sim`` and again as ``g-msg``
    (whose messages a test plants a change in)."""
    root = tmp_path_factory.mktemp("traces")
    bless(sim_run, "g-sim", traces=root, manifest=root / "goldens.json", summary="test golden")
    g = bless(sim_run, "g-msg", traces=root, manifest=root / "goldens.json")
    path = g.directory / "messages" / "golden.arrow"
    rows = plant.read_file(path).to_pylist()
    target = next(i for i, r in enumerate(rows) if r["msg_type"] == "AppendPosition" and i > len(rows) // 2)
    rows[target]["payload"] = rows[target]["payload"][:-1] + b"\x7f"
    plant.write_file(path, pa.Table.from_pylist(rows, schema=plant.read_file(path).schema))
    plant.reseal(g.directory)  # a golden intact as blessed, whose messages differ from what the code sends
    (root / "planted.json").write_text(json.dumps({k: rows[target][k] for k in ("process", "incarnation", "seq")}))
    return root


def _session_message_position(sim_run: Path, fraction: float = 0.5) -> int:
    rows = [r for r in open_run(sim_run).log.to_pylist() if r["entry_type"] == "SessionMessage"]
    return rows[int(len(rows) * fraction)]["log_position"]


def test_bless_stores_log_digests_messages_and_recipe(traces: Path, sim_run: Path) -> None:
    g = load_golden("g-sim", traces)
    run = open_run(sim_run)
    assert g.driver == "sim" and g.info["scenario"] == "leader-kill" and g.info["seed"] == 1
    assert g.info["git_commit"] and g.info["clusterlab_version"] and g.info["source_run_id"] == run.meta["run_id"]
    assert g.log.equals(run.log)
    assert (
        g.applied.num_rows
        == g.info["positions"]
        == len({r["log_position"] for r in run.applied.to_pylist() if r["entry_type"] != "Snapshot"})
    )
    assert g.messages is not None and g.messages.num_rows == run.messages.num_rows
    assert set(g.applied.column("member_id").to_pylist()) == {-1}
    recipes = {r.name: r for r in load_manifest(traces / "goldens.json")}
    assert recipes["g-sim"] == Recipe("g-sim", "sim", "leader-kill", 1, 3, None, "test golden")


def test_bless_refuses_what_cannot_be_a_golden(
    traces: Path, sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(GoldenError, match="not a clusterlab run"):
        bless(tmp_path / "empty", "x", traces=traces)
    bad = plant.copy_run(sim_run, tmp_path / "bad", "bad")
    plant.plant_state_digest(bad, 1, plant.middle_entry(bad, 1)["log_position"])
    with pytest.raises(GoldenError, match="fails its checks"):
        bless(bad, "x", traces=traces)
    with pytest.raises(GoldenError, match="exists"):
        bless(sim_run, "g-sim", traces=traces)
    assert main(["golden", "bless", str(tmp_path / "missing"), "--name", "x", "--traces", str(traces)]) == 2
    err = capsys.readouterr().err
    assert "no such run directory" in err and len(err.strip().splitlines()) == 1


@pytest.mark.spark
def test_verify_passes_clean_and_names_a_planted_message(spark, traces: Path) -> None:
    report = verify_goldens(["g-sim", "g-msg"], traces=traces, spark=spark)
    by_name = {v.name: v for v in report.verdicts}
    clean = by_name["g-sim"]
    assert clean.ok, report.details()
    assert clean.replay is not None and clean.replay.ok and clean.replay.golden_positions == clean.positions
    assert clean.rerun is not None and clean.rerun.ok and clean.rerun.actual_positions == clean.positions
    assert clean.messages is not None and clean.messages.ok and clean.messages.golden_rows > 1000
    planted = by_name["g-msg"]
    assert not planted.ok and planted.replay is not None and planted.replay.ok
    assert planted.messages is not None and planted.messages.divergent == 1
    first = planted.messages.first
    assert first is not None
    assert {k: first[k] for k in ("process", "incarnation", "seq")} == json.loads((traces / "planted.json").read_text())
    assert first["golden_msg_type"] == first["actual_msg_type"] == "AppendPosition"
    assert any("first divergent message" in line for line in report.details())


@pytest.mark.spark
def test_verify_reports_a_one_off_wrong_digest_at_exactly_its_position(spark, traces: Path, sim_run: Path) -> None:
    p = _session_message_position(sim_run)
    report = verify_goldens(
        ["g-sim"], traces=traces, spark=spark, rerun=False, service_factory=variants.wrong_digest_once(p)
    )
    [v] = report.verdicts
    assert not v.ok and not report.ok
    d = v.replay
    assert d is not None and d.divergent == 1 and d.kinds == {"state": 1}
    assert d.first is not None and d.first["log_position"] == p
    assert d.first["golden_entry_digest"] == d.first["actual_entry_digests"][0]
    assert d.first["golden_state_digest"] != d.first["actual_state_digests"][0]
    assert pattern(d).startswith("one position differs")
    text = "\n".join(report.details())
    assert f"first divergent position {p} (state)" in text and "SessionMessageHeader" in text
    assert d.first["golden_state_digest"] in text


@pytest.mark.spark
def test_diff_tells_a_wrong_update_from_a_changed_digest_function(
    spark, traces: Path, sim_run: Path, tmp_path: Path
) -> None:
    g = load_golden("g-sim", traces)
    p = _session_message_position(sim_run, 0.3)
    comparisons = []
    for label, factory in (("wrong-value", variants.wrong_value_at(p)), ("digest-v2", variants.DigestChanged)):
        replay = replay_log(g.log.to_pylist(), factory)
        assert replay.error is None
        _write_replay(tmp_path / label, label, applied_table(label, replay))
        comparisons.append(Comparison(label, "replay", str(g.directory.resolve()), str((tmp_path / label).resolve())))
    diffs: dict[Any, Any] = diff_positions(spark, comparisons)
    wrong = diffs[("wrong-value", "replay")]
    assert wrong.first is not None and wrong.first["log_position"] == p and wrong.first["kind"] == "state"
    assert wrong.divergent == wrong.divergent_from_first  # nothing before p differs
    assert wrong.golden_positions == g.applied.num_rows
    changed = diffs[("digest-v2", "replay")]
    assert changed.divergent == changed.golden_positions == g.applied.num_rows
    assert pattern(changed).startswith("every position differs")
    assert not pattern(wrong).startswith("every position differs")
    lines = describe_position_diff(changed)
    assert f"{changed.divergent - 1} more divergent positions" in lines[3]


def test_a_corrupt_golden_fails_with_a_clear_error(
    traces: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    broken = tmp_path / "traces"
    shutil.copytree(traces / "g-sim", broken / "g-bad")
    log = broken / "g-bad" / "log" / "committed.arrow"
    plant.tear(log, 0.5)
    report = verify_goldens(["g-bad"], traces=broken, rerun=False)
    # A torn golden file is INCOMPLETE (rows lost), named.
    error = report.verdicts[0].errors[0]
    assert not report.ok and error.startswith("INCOMPLETE golden g-bad: log/committed.arrow: truncated"), error
    assert main(["golden", "verify", "g-bad", "--traces", str(broken)]) == 3  # the golden's fault, not the code's
    assert "INCOMPLETE golden" in capsys.readouterr().out
    shutil.copytree(traces / "g-sim", broken / "g-flipped")
    flipped = broken / "g-flipped" / "log" / "committed.arrow"
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x10  # a byte inside a stream message: its CRC no longer matches
    flipped.write_bytes(bytes(data))
    assert main(["golden", "verify", "g-flipped", "g-bad", "--traces", str(broken)]) == 4  # corrupt wins
    assert "CORRUPT golden" in capsys.readouterr().out
    assert main(["golden", "verify", "nosuch", "--traces", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "no golden named 'nosuch'" in err and len(err.strip().splitlines()) == 1
    shutil.copytree(traces / "g-sim", broken / "g-driver")
    meta = json.loads((broken / "g-driver" / "run.json").read_text())
    meta.pop("seal")
    meta["golden"]["driver"] = "simulator"  # resealed: only the value gives it away; its re-run must not be skipped
    (broken / "g-driver" / "run.json").write_bytes(sealed_json(meta))
    assert main(["golden", "verify", "g-driver", "--traces", str(broken)]) == 4
    assert "golden.driver 'simulator' is none of sim, real" in capsys.readouterr().out
    (broken / "g-bad" / "run.json").write_text("{")
    with pytest.raises(GoldenError, match=r"INCOMPLETE golden g-bad: run\.json: does not parse"):
        load_golden("g-bad", broken)


def test_regenerate_re_creates_a_simulator_golden_exactly(traces: Path, tmp_path: Path) -> None:
    recipe = Recipe("g-regen", "sim", "leader-kill", 1, 3, None, "")
    g = regenerate(recipe, traces=tmp_path, manifest=tmp_path / "goldens.json", say=lambda _line: None)
    original = load_golden("g-sim", traces)
    assert g.applied.drop_columns(["run_id"]).equals(original.applied.drop_columns(["run_id"]))
    assert g.log.equals(original.log)
    assert g.info["final_state_digest"] == original.info["final_state_digest"]
    assert [r.name for r in load_manifest(tmp_path / "goldens.json")] == ["g-regen"]


@pytest.mark.spark
@pytest.mark.slow
def test_ci_golden_script_fails_on_a_planted_divergence(traces: Path, tmp_path: Path) -> None:
    """The CI script itself: exit 0 on a clean golden, 1 when a golden's digest at P is planted."""
    import os
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    shutil.copytree(traces / "g-sim", tmp_path / "g-clean")
    shutil.copytree(traces / "g-sim", tmp_path / "g-planted")
    path = tmp_path / "g-planted" / "applied" / "golden.arrow"
    rows = plant.read_file(path).to_pylist()
    p = rows[len(rows) // 2]["log_position"]
    rows[len(rows) // 2]["state_digest"] = bytes(16)
    plant.write_file(path, pa.Table.from_pylist(rows, schema=plant.read_file(path).schema))
    plant.reseal(tmp_path / "g-planted")  # a golden intact as blessed, whose digest at P differs from the code's
    env = dict(os.environ, PYTHON=sys.executable)
    done = subprocess.run(
        [str(root / "ci" / "golden"), "--traces", str(tmp_path), "--no-rerun"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"first divergent position {p} (state)" in done.stdout
    assert "0 more divergent positions" in done.stdout and "g-clean" in done.stdout
