"""``clusterlab demo``: the guided simulator walk-through runs to a passing verdict, every key read back,
and leaves a recording that ``clusterlab check`` judges as it judges any run."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterlab.chaos.demo import RUN_DIR
from clusterlab.harness.trace import open_run

from clusterlab.cli import main

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("members", [1, 3, 5])
def test_the_demo_passes_reads_every_key_back_and_leaves_a_trace(
    members: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["demo", "--seed", "1", "--members", str(members), "--dir", str(tmp_path)])

    out = capsys.readouterr().out
    assert code == 0, out
    assert ("killed and restarted the only member" if members == 1 else "all members converged") in out
    row = next(line for line in out.splitlines() if "every reply as the model" in line)
    assert "ok (" in row and " acked, " in row
    run = open_run(tmp_path / RUN_DIR)
    assert run.meta["outcome"] == "ok" and not run.torn and not run.unclosed
    kinds = [e["kind"] for e in run.events.to_pylist() if e["source"] == "harness"]
    assert "kill" in kinds and "restart" in kinds
    ops = run.ops.to_pylist()
    assert any(o["kind"] == "ok" for o in ops)


def test_the_demo_trace_passes_clusterlab_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--seed", "2", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()

    code = main(["check", str(tmp_path / RUN_DIR)])

    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS" in out
