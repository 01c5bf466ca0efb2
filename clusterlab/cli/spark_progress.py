"""Progress of long Spark work on stderr: jobs and stages done, tasks, bytes read, elapsed.

:class:`SparkProgress` is a context manager the CLI wraps around Spark work (``clusterlab check --engine
spark``, the Spark step of ``golden verify``). A daemon thread wakes every ``interval_s`` and prints one
line when something changed since the last one (and at least every ``quiet_s`` while work runs):

    spark: 12 jobs done, 1 running; stage 41: 3/8 tasks; 37 stages done; 45.2 s

On a classic session it polls the ``SparkContext``'s status tracker (the active context of this
process, so work that starts its own session is seen too); on a Spark Connect session the client has
no status tracker, and the server's progress reports (``registerProgressHandler``) are tallied
instead (stages, tasks and bytes read of each operation; there a "job" is one operation, a query).
Spark's status tracker has no row counts; the bytes read come from Connect's reports only."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

INTERVAL_S = float(os.environ.get("CLUSTERLAB_SPARK_PROGRESS_S", "5"))  # how often the thread looks
QUIET_S = 30.0  # a line at least this often while work runs, even when nothing moved


@dataclass
class Snapshot:
    """What Spark had done at one poll."""

    jobs_done: int = 0
    jobs_running: int = 0
    stages_done: int = 0
    running: list[tuple[int, int, int]] = field(default_factory=list)  # (stage, completed tasks, tasks)
    bytes_read: int | None = None

    def busy(self) -> bool:
        return bool(self.jobs_running or self.running)

    def key(self) -> tuple[Any, ...]:
        return (self.jobs_done, self.jobs_running, self.stages_done, tuple(self.running), self.bytes_read)

    def line(self, elapsed_s: float) -> str:
        parts = [f"{self.jobs_done} jobs done" + (f", {self.jobs_running} running" if self.jobs_running else "")]
        parts += [f"stage {s}: {done}/{n} tasks" for s, done, n in self.running[:3]]
        parts.append(f"{self.stages_done} stages done")
        if self.bytes_read is not None:
            parts.append(f"{self.bytes_read / 2**20:.1f} MiB read")
        return f"spark: {'; '.join(parts)}; {elapsed_s:.1f} s"


def classic_snapshot(sc: Any) -> Snapshot:
    """A :class:`Snapshot` from ``sc``'s status tracker (the jobs and stages Spark still remembers)."""
    tracker = sc.statusTracker()
    snap = Snapshot()
    stages_done: set[int] = set()
    for job_id in tracker.getJobIdsForGroup(None):
        info = tracker.getJobInfo(job_id)
        if info is None:
            continue
        if info.status == "SUCCEEDED":
            snap.jobs_done += 1
            stages_done.update(info.stageIds)
        elif info.status == "RUNNING":
            snap.jobs_running += 1
    for stage_id in sorted(tracker.getActiveStageIds()):
        stage = tracker.getStageInfo(stage_id)
        if stage is not None:
            snap.running.append((stage_id, stage.numCompletedTasks, stage.numTasks))
    snap.stages_done = len(stages_done - {s for s, _d, _n in snap.running})
    return snap


class ConnectTally:
    """The progress reports of a Spark Connect session, tallied into :class:`Snapshot` s."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._operations: dict[str, tuple[bool, list[Any]]] = {}  # operation id -> (done, its stages)

    def __call__(self, stages: list[Any], inflight_tasks: int, operation_id: str, done: bool, **_: Any) -> None:
        with self._lock:
            self._operations[operation_id] = (done, list(stages))

    def snapshot(self) -> Snapshot:
        with self._lock:
            ops = list(self._operations.values())
        snap = Snapshot(bytes_read=0)
        for done, stages in ops:
            snap.jobs_done += int(done)
            snap.jobs_running += int(not done)
            for s in stages:
                if s.done:
                    snap.stages_done += 1
                else:
                    snap.running.append((s.stage_id, s.num_completed_tasks, s.num_tasks))
                snap.bytes_read = (snap.bytes_read or 0) + int(s.num_bytes_read)
        return snap


class SparkProgress:
    """Print Spark's progress to ``out`` while the block runs (see the module docstring). ``spark``: the
    session when the caller has it (a Connect session needs it); else the process's active context."""

    def __init__(
        self, spark: Any = None, *, out: TextIO | None = None, interval_s: float = INTERVAL_S, quiet_s: float = QUIET_S
    ) -> None:
        self.out = out or sys.stderr
        self.interval_s = interval_s
        self.quiet_s = quiet_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="clusterlab-spark-progress", daemon=True)
        self._tally: ConnectTally | None = None
        self._spark = spark
        self.lines = 0

    def __enter__(self) -> SparkProgress:
        self._started = time.monotonic()
        if self._spark is not None and type(self._spark).__module__.startswith("pyspark.sql.connect"):
            self._tally = ConnectTally()
            self._spark.registerProgressHandler(self._tally)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._tally is not None:
            self._spark.removeProgressHandler(self._tally)

    def _source(self) -> Callable[[], Snapshot] | None:
        if self._tally is not None:
            return self._tally.snapshot
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        return None if sc is None else (lambda: classic_snapshot(sc))

    def _watch(self) -> None:
        last: tuple[Any, ...] | None = None
        last_at = time.monotonic()
        while not self._stop.wait(self.interval_s):
            source = self._source()
            if source is None:  # no session yet (the command is still starting one)
                continue
            try:
                snap = source()
            except Exception:  # a context stopping under us: no progress to show, never an error
                continue
            now = time.monotonic()
            if snap.key() != last or (snap.busy() and now - last_at >= self.quiet_s):
                print(snap.line(now - self._started), file=self.out, flush=True)
                self.lines += 1
                last, last_at = snap.key(), now
