"""A Spark standalone cluster on this machine: a master and N workers, each its own JVM, started from
the pyspark installation (``bin/spark-class``; pyspark's wheel has no ``sbin/start-*.sh``).

``clusterlab spark start --workers N`` starts one; ``--master spark://127.0.0.1:PORT`` then runs the
checks, the golden diff or a sweep on its executors (one per worker), each a JVM of its own with its
own Python workers, so everything crosses process boundaries as on a real cluster: the ``clustertrace``
source, the checks' code and a sweep's simulator runs are pickled to executors that import clusterlab
from the zip the driver sends (:mod:`clusterlab.spark.ship`).

Everything binds to loopback on ports the OS picks (``--port 0``; the master's port is read from its
log). The PIDs, URL and logs go to ``cluster.json`` in the state directory (that of
:mod:`clusterlab.spark.connect`); ``stop`` ends those PIDs (workers first) and nothing else."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from clusterlab.spark.connect import START_TIMEOUT_S, _spark_home, end_pid, state_dir

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_MASTER_UP = re.compile(r"Starting Spark master at (spark://[^\s]+)")
_REGISTERED = "Successfully registered with master"


class SparkClusterError(RuntimeError):
    """The standalone cluster could not be started (says why and where its logs are)."""


@dataclass(frozen=True)
class ClusterInfo:
    """A started standalone cluster: the master's URL and PID, the workers' PIDs, the logs."""

    url: str
    master_pid: int
    worker_pids: list[int] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)

    def pids(self) -> list[int]:
        """Every JVM of the cluster, workers first (the order ``stop`` ends them in)."""
        return [*self.worker_pids, self.master_pid]


def _cluster_json(directory: str | Path | None) -> Path:
    return state_dir(directory) / "cluster.json"


def _launch(home: Path, name: str, args: list[str], log4j: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``spark-class ARGS`` in its own session, its output in ``home/name.log``."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(_spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(home),
        SPARK_DAEMON_JAVA_OPTS=f"-Dlog4j2.configurationFile=file:{log4j}",
    )
    log = home / f"{name}.log"
    with open(log, "wb") as out:
        # spark-class execs the JVM: this PID is the daemon's.
        proc = subprocess.Popen(
            [str(_spark_home() / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    return proc, log


def _log4j(home: Path) -> Path:
    """Errors only, plus the master's and workers' start lines (the master's names its port)."""
    from clusterlab.spark.session import LOG4J

    path = home / "log4j2-standalone.properties"
    path.write_text(
        LOG4J.read_text()
        + "logger.master.name = org.apache.spark.deploy.master.Master\nlogger.master.level = info\n"
        + "logger.worker.name = org.apache.spark.deploy.worker.Worker\nlogger.worker.level = info\n"
    )
    return path


def _await(
    what: str, probe: Callable[[], str | None], procs: list[tuple[subprocess.Popen[bytes], Path]], timeout_s: float
) -> str:
    """Wait until ``probe()`` returns a value; a daemon that exits first fails the start."""
    from clusterlab.harness.local import wait_until

    def ready() -> str | None:
        for proc, log in procs:
            if proc.poll() is not None:
                raise SparkClusterError(f"a Spark daemon exited with {proc.returncode} before {what}; see {log}")
        return probe()

    return str(wait_until(ready, timeout_s, what, interval_s=0.2))


def start(
    directory: str | Path | None = None,
    *,
    workers: int = 2,
    worker_cores: int = 1,
    worker_memory: str = "2g",
    timeout_s: float = START_TIMEOUT_S,
) -> ClusterInfo:
    """Start a master and ``workers`` workers (or return the cluster already running from ``directory``)."""
    from clusterlab.harness.local import LocalTimeout

    running = status(directory)
    if running is not None:
        return running
    home = state_dir(directory)
    home.mkdir(parents=True, exist_ok=True)
    log4j = _log4j(home)
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        master = _launch(
            home, "master", [MASTER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"], log4j
        )
        started.append(master)
        url = _await(
            "the Spark master's start",
            lambda: m.group(1) if (m := _MASTER_UP.search(master[1].read_text(errors="replace"))) else None,
            started,
            timeout_s,
        )
        for i in range(workers):
            work = home / f"worker-{i}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            args = [WORKER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
            args += ["--cores", str(worker_cores), "--memory", worker_memory, "--work-dir", str(work), url]
            started.append(_launch(home, f"worker-{i}", args, log4j))
        _await(
            f"{workers} Spark workers' registration",
            lambda: "up" if all(_REGISTERED in log.read_text(errors="replace") for _, log in started[1:]) else None,
            started,
            timeout_s,
        )
    except (LocalTimeout, SparkClusterError, OSError):
        for proc, _ in reversed(started):
            end_pid(proc.pid)
        raise
    info = ClusterInfo(url, master[0].pid, [p.pid for p, _ in started[1:]], [str(log) for _, log in started])
    _cluster_json(directory).write_text(json.dumps(asdict(info)))
    return info


def _read(directory: str | Path | None) -> ClusterInfo | None:
    try:
        return ClusterInfo(**json.loads(_cluster_json(directory).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def status(directory: str | Path | None = None) -> ClusterInfo | None:
    """The cluster started from ``directory`` if its master and every worker are alive; else None (a
    stale ``cluster.json`` is removed once none of its processes lives)."""
    from clusterlab.harness.local import pid_alive

    info = _read(directory)
    if info is None:
        return None
    alive = [pid_alive(pid) for pid in info.pids()]
    if all(alive):
        return info
    if not any(alive):
        _cluster_json(directory).unlink(missing_ok=True)
    return None


def stop(directory: str | Path | None = None) -> ClusterInfo | None:
    """Stop the cluster started from ``directory`` by its PIDs (workers, then the master); the one
    stopped, or None if none was recorded."""
    info = _read(directory)
    if info is None:
        return None
    for pid in info.pids():
        end_pid(pid)
    _cluster_json(directory).unlink(missing_ok=True)
    return info


__all__ = ["ClusterInfo", "SparkClusterError", "start", "status", "stop"]
