"""A seed sweep mapped over a Spark cluster's executors (``clusterlab sweep --master M``).

The tasks (seed, members) are a DataFrame; each partition's Python worker runs its seeds in the
simulator and writes each run's record as a file in the sweep directory's
``spark/`` folder, besides the failing runs' traces: the sweep directory must be storage every
executor shares (any local master; a real cluster needs a shared filesystem). The driver reports
records as their files appear and takes the job's result as the authority at the end."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from clusterlab.chaos.sweep import Mapper, Task
from clusterlab.spark.session import spark_session

POLL_S = 0.5  # how often the driver looks for finished runs (progress only; the job's end is awaited)


def spark_mapper(master: str | None, directory: Path | str, partitions: int | None = None) -> Mapper:
    """A sweep mapper running tasks on Spark ``master`` (local[2], spark://…); ``partitions``: how
    many tasks Spark splits the seeds into (default: 4 per core of the cluster, at most one per seed)."""
    outbox = Path(directory) / "spark"

    def run(fn: Callable[[Task], dict[str, Any]], tasks: list[Task]) -> Iterator[dict[str, Any]]:
        if not tasks:
            return
        outbox.mkdir(parents=True, exist_ok=True)
        for stale in outbox.glob("*.json"):
            stale.unlink()  # records of an interrupted session: their runs are not in results.jsonl
        spark = spark_session(master, app_name="clusterlab-sweep")
        parts = min(len(tasks), partitions or 4 * spark.sparkContext.defaultParallelism)
        df = spark.createDataFrame(tasks, "seed long, members int").repartition(parts)
        box = str(outbox)

        def run_partition(rows: Iterable[Any]) -> Iterator[str]:
            for row in rows:
                record = fn((int(row["seed"]), int(row["members"])))
                text = json.dumps(record)
                name = f"{record['members']}-{record['seed']}.json"
                Path(box, name + ".tmp").write_text(text)
                Path(box, name + ".tmp").rename(Path(box, name))  # whole files only
                yield text

        collected: list[str] = []
        failure: list[BaseException] = []

        def job() -> None:
            try:
                # The RDD of the rows (mapInArrow would need pandas on the workers).
                collected.extend(df.rdd.mapPartitions(run_partition).collect())
            except BaseException as e:  # re-raised in the driver's thread below
                failure.append(e)

        worker = threading.Thread(target=job, name="clusterlab-sweep-spark", daemon=True)
        worker.start()
        seen: set[str] = set()
        while True:
            finished = not worker.is_alive()
            for f in sorted(outbox.glob("*.json")):
                if f.name not in seen:
                    seen.add(f.name)
                    yield json.loads(f.read_text())
            if finished:
                break
            time.sleep(POLL_S)
        if failure:
            raise failure[0]
        # A task Spark retried wrote its file twice (same name); the job's result names every run once.
        for text in collected:
            record = json.loads(text)
            if f"{record['members']}-{record['seed']}.json" not in seen:
                yield record

    return run
