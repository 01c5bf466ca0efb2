"""A warm Spark: a Spark Connect server this machine keeps running between checks.

``clusterlab spark start`` launches pyspark's own ``SparkConnectServer`` (the spark-connect jar ships in
pyspark's ``jars/``) through ``spark-submit`` as a child in its own session, on loopback and a port
the OS picks (``spark.connect.grpc.binding.port=0``; the port is read from the server's log). Its PID,
port and log path go to ``server.json`` in a state directory (``--state-dir``,
``$CLUSTERLAB_SPARK_STATE``, else ``$XDG_CACHE_HOME/clusterlab/spark-connect``); ``stop`` ends that
PID and nothing else. ``clusterlab check --engine spark`` connects to it (``sc://127.0.0.1:PORT``) when
it is up: the JVM, the Python workers and the registered ``clustertrace`` source are already warm.

The Python data source works through Connect: the client registers it (the class is pickled to the
server) and the server's Python workers — this interpreter, via ``PYSPARK_PYTHON`` — read the Arrow
files, so run paths are made absolute (the server's working directory is not the client's)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from clusterlab.spark.session import LOG4J

# clusterlab.harness.local (pid_alive, wait_until) is imported where used: it brings the whole process
# harness (~1 s), which `clusterlab check` asking status() before a warm check does not need.

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_MASTER = "local[2]"
START_TIMEOUT_S = 180.0  # a JVM start on a loaded 2-core machine
STOP_TIMEOUT_S = 30.0
_STARTED = re.compile(r"Spark Connect server started at: [^\s:]+:(\d+)")


class SparkServerError(RuntimeError):
    """The Spark Connect server could not be started, reached or stopped (says why)."""


@dataclass(frozen=True)
class ServerInfo:
    """A started server: its PID, port, master and log file."""

    pid: int
    port: int
    master: str
    log: str

    @property
    def url(self) -> str:
        """The Spark Connect URL clients use."""
        return f"sc://127.0.0.1:{self.port}"


def state_dir(given: str | Path | None = None) -> Path:
    """Where ``server.json`` and the server's log live."""
    if given:
        return Path(given)
    if os.environ.get("CLUSTERLAB_SPARK_STATE"):
        return Path(os.environ["CLUSTERLAB_SPARK_STATE"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "clusterlab" / "spark-connect"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def status(directory: str | Path | None = None) -> ServerInfo | None:
    """The server started from ``directory``, if its process is alive and its port accepts; else None
    (a stale ``server.json`` is removed)."""
    path = state_dir(directory) / "server.json"
    try:
        info = ServerInfo(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if _accepting(info.port) and Path(f"/proc/{info.pid}").exists():
        return info  # up (a dead server's port may be another process's: its PID must exist too)
    from clusterlab.harness.local import pid_alive

    if not pid_alive(info.pid):
        path.unlink(missing_ok=True)
    return None


def start(
    directory: str | Path | None = None,
    *,
    master: str = DEFAULT_MASTER,
    driver_memory: str = "2g",
    timeout_s: float = START_TIMEOUT_S,
) -> ServerInfo:
    """Start a server (or return the one already running from ``directory``)."""
    running = status(directory)
    if running is not None:
        return running
    home = state_dir(directory)
    home.mkdir(parents=True, exist_ok=True)
    log = home / "server.log"
    scratch = home / "scratch"
    scratch.mkdir(exist_ok=True)
    log4j = _write_log4j(home)
    env = _server_environment()
    cmd = _server_command(master, driver_memory, scratch, log4j)
    with open(log, "wb") as out:
        # spark-submit execs the JVM: this PID is the server's.
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    port = _await_port(proc, log, timeout_s)
    info = ServerInfo(proc.pid, port, master, str(log))
    (home / "server.json").write_text(json.dumps(asdict(info)))
    return info


def _write_log4j(home: Path) -> Path:
    """Writes the server's log4j2.properties into ``home`` and returns its path: clusterlab's logging
    (errors only) plus the server's own start line, which names its port."""
    log4j = home / "log4j2.properties"
    log4j.write_text(
        LOG4J.read_text()
        + "logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer\n"
        + "logger.connect.level = info\n"
    )
    return log4j


def _server_environment() -> dict[str, str]:
    """The server's environment: this one, with pyspark's Spark home, loopback and this interpreter for
    the server's Python workers."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(_spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,  # the server's Python workers: this interpreter (clusterlab, pyarrow)
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    return env


def _server_command(master: str, driver_memory: str, scratch: Path, log4j: Path) -> list[str]:
    """The ``spark-submit`` command line of the server: loopback, a port the OS picks, no UI, scratch
    space in ``scratch``, its logging configured by ``log4j``."""
    return [
        str(_spark_home() / "bin" / "spark-submit"),
        "--class",
        SERVER_CLASS,
        "--master",
        master,
        "--driver-memory",
        driver_memory,
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        "spark.connect.grpc.binding.port=0",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=" + os.environ.get("CLUSTERLAB_SPARK_PARTITIONS", "8"),
        "--conf",
        f"spark.local.dir={scratch}",
        "--conf",
        f"spark.sql.warehouse.dir={scratch / 'warehouse'}",
        "--conf",
        "spark.python.worker.reuse=true",
        "--conf",  # a client that never released its session (killed) holds its views until this expires
        "spark.connect.session.manager.defaultSessionTimeout=10min",
        # The status store (kept without a UI) of ~1000 executions filled a 2 GB heap's old generation
        # within ~25 checks (per-task metric arrays); the GC then took CPU from the checks. Keep less.
        "--conf",
        "spark.sql.ui.retainedExecutions=50",
        "--conf",
        "spark.ui.retainedJobs=100",
        "--conf",
        "spark.ui.retainedStages=100",
        "--conf",
        "spark.ui.retainedTasks=5000",
        "--conf",
        "spark.sql.inMemoryColumnarStorage.compressed=false",  # as session.py: the check's cached views
        "--conf",
        f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{log4j}",
        "spark-internal",
    ]


def _await_port(proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> int:
    """The port the starting server ``proc`` names in its ``log``, waited for up to ``timeout_s``;
    SparkServerError if it exits first. A server that does not start is ended before the error rises."""
    from clusterlab.harness.local import LocalTimeout, wait_until

    def started() -> int | None:
        if proc.poll() is not None:
            raise SparkServerError(f"the Spark Connect server exited with {proc.returncode}; see {log}")
        found = _STARTED.search(log.read_text(errors="replace"))
        return int(found.group(1)) if found else None

    try:
        return wait_until(started, timeout_s, "the Spark Connect server's start", interval_s=0.2)
    except (LocalTimeout, SparkServerError):
        end_pid(proc.pid)
        raise


def warm(info: ServerInfo, rounds: int, run_dir: Path) -> float:
    """Run the whole check ``rounds`` times on the recorded run ``run_dir`` (``clusterlab spark start
    --warm`` passes the shipped ``real-leader-kill`` golden) through the server ``info``; returns the
    seconds taken. A new server's JVM is still compiling Spark's analyzer and planner: its first checks
    of a small run took 15-60 s on a loaded 2-core machine, settling near 5 s only after ~20 checks. The
    run is read-only here (no check.json is written)."""
    import time

    from clusterlab.spark.check import check_runs
    from clusterlab.spark.session import spark_session

    started = time.monotonic()
    spark = spark_session(remote=info.url)
    try:
        for _ in range(rounds):
            check_runs([run_dir], spark=spark, write_json=False)
    finally:
        spark.stop()  # a Connect session: releases it, the server stays up
    return time.monotonic() - started


def end_pid(pid: int) -> None:
    """End the Spark JVM ``pid`` (SIGTERM, then SIGKILL after STOP_TIMEOUT_S) and reap it if it is a child."""
    from clusterlab.harness.local import LocalTimeout, pid_alive, wait_until

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        wait_until(lambda: not pid_alive(pid), STOP_TIMEOUT_S, f"the end of the Spark JVM {pid}")
    except LocalTimeout:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child


def stop(directory: str | Path | None = None) -> ServerInfo | None:
    """Stop the server started from ``directory`` (by its PID); the one stopped, or None if none ran."""
    path = state_dir(directory) / "server.json"
    try:
        info = ServerInfo(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    from clusterlab.harness.local import pid_alive

    if pid_alive(info.pid):
        end_pid(info.pid)
    path.unlink(missing_ok=True)
    return info
