"""Spark's progress on stderr (clusterlab/cli/spark_progress.py): what a line says, Connect's reports
tallied, and lines appearing while a real local Spark job runs."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import pytest

from clusterlab.cli.spark_progress import ConnectTally, Snapshot, SparkProgress


@dataclass
class _Stage:  # the fields of pyspark.sql.connect's StageInfo the tally reads
    stage_id: int
    num_tasks: int
    num_completed_tasks: int
    num_bytes_read: int
    done: bool


def test_a_line_says_jobs_stages_tasks_and_elapsed() -> None:
    snap = Snapshot(jobs_done=12, jobs_running=1, stages_done=37, running=[(41, 3, 8)])
    assert snap.line(45.21) == "spark: 12 jobs done, 1 running; stage 41: 3/8 tasks; 37 stages done; 45.2 s"
    assert snap.busy() and not Snapshot(jobs_done=3).busy()


def test_connect_reports_are_tallied() -> None:
    tally = ConnectTally()
    tally(
        stages=[_Stage(1, 4, 4, 1 << 20, True), _Stage(2, 8, 3, 1 << 20, False)],
        inflight_tasks=5,
        operation_id="a",
        done=False,
    )
    tally(stages=[_Stage(3, 1, 1, 0, True)], inflight_tasks=0, operation_id="b", done=True)
    snap = tally.snapshot()
    assert (snap.jobs_done, snap.jobs_running, snap.stages_done, snap.running) == (1, 1, 2, [(2, 3, 8)])
    assert snap.line(1.0) == "spark: 1 jobs done, 1 running; stage 2: 3/8 tasks; 2 stages done; 2.0 MiB read; 1.0 s"


def _hold_until(path: str) -> Any:
    """A task body that waits (bounded) until ``path`` exists: the job is still running when the
    progress thread first looks."""

    def hold(x: int) -> int:
        import os
        import time

        deadline = time.monotonic() + 120
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        return x

    return hold


@pytest.mark.spark
def test_lines_appear_while_spark_works(spark: Any, tmp_path: Any) -> None:
    """A job whose tasks wait (bounded) until the progress thread has printed a line showing them
    running: the line names the running job and its stage's tasks."""
    out = io.StringIO()
    flag = tmp_path / "printed"

    class Watched(io.StringIO):
        def write(self, s: str) -> int:
            n = out.write(s)
            if "tasks" in out.getvalue():  # a line showing a running stage
                flag.touch()
            return n

    with SparkProgress(out=Watched(), interval_s=0.2, quiet_s=0.5) as progress:
        total = spark.sparkContext.parallelize(range(4), 2).map(_hold_until(str(flag))).sum()
    assert total == 6 and flag.exists(), out.getvalue()
    lines = out.getvalue().splitlines()
    assert progress.lines == len(lines) >= 1
    assert all(line.startswith("spark: ") and "jobs done" in line and line.endswith(" s") for line in lines)
    running = [line for line in lines if "/2 tasks" in line]
    assert running and "1 running" in running[0], lines
