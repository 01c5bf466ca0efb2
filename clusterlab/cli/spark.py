"""``clusterlab spark start|stop|status``: a warm Spark (a Spark Connect server) for repeated checks, or
a standalone Spark cluster (a master and workers, separate JVMs) to run checks and sweeps on."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from clusterlab.chaos.limits import DRIVER_MEMORY_MIB, SPARK_WORKERS, WARM_CHECKS
from clusterlab.cli.paths import bounded, ranged

_MIB = {"m": 1, "g": 1024, "t": 1024 * 1024}


def _memory(text: str) -> str:
    """``--driver-memory``: a JVM size with an m, g or t suffix, within DRIVER_MEMORY_MIB; the text as given."""
    raw = text.strip().lower()
    if raw[-1:] not in _MIB or not raw[:-1].isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 2g or 512m")
    if not DRIVER_MEMORY_MIB.contains(int(raw[:-1]) * _MIB[raw[-1]]):
        raise argparse.ArgumentTypeError(f"must be {DRIVER_MEMORY_MIB.describe()}, not {text}")
    return raw


def _start_cluster(args: argparse.Namespace, out: Console) -> int:
    from clusterlab.harness.local import LocalTimeout
    from clusterlab.spark import standalone

    try:
        info = standalone.start(args.state_dir, workers=args.workers, worker_memory=args.worker_memory)
    except (standalone.SparkClusterError, LocalTimeout, OSError) as e:
        print(f"clusterlab spark start: {e}", file=sys.stderr)
        return 2
    out.print(
        f"Spark standalone cluster up: {info.url} (master pid {info.master_pid}, "
        f"workers {', '.join(map(str, info.worker_pids))}); use --master {info.url}",
        highlight=False,
    )
    return 0


def _start_server(args: argparse.Namespace, out: Console) -> int:
    from clusterlab.harness.local import LocalTimeout
    from clusterlab.spark import connect

    try:
        info = connect.start(args.state_dir, master=args.master, driver_memory=args.driver_memory)
    except (connect.SparkServerError, LocalTimeout, OSError) as e:
        print(f"clusterlab spark start: {e}", file=sys.stderr)
        return 2
    out.print(f"Spark Connect server up: {info.url} (pid {info.pid}, {info.master}; log {info.log})", highlight=False)
    if args.warm:
        from clusterlab.golden.store import TRACES

        try:
            seconds = connect.warm(info, args.warm, TRACES / "real-leader-kill")
        except Exception as e:  # the server is up; say why its warm-up failed, no traceback
            print(f"clusterlab spark start: the server is up but its warm-up check failed: {e}", file=sys.stderr)
            return 2
        out.print(f"warmed: {args.warm} check(s) of the real-leader-kill golden in {seconds:.1f} s", highlight=False)
    return 0


def _stop(args: argparse.Namespace, out: Console) -> int:
    from clusterlab.spark import connect, standalone

    stopped = connect.stop(args.state_dir)
    if stopped is not None:
        out.print(f"stopped the Spark Connect server {stopped.url} (pid {stopped.pid})", highlight=False)
    cluster = standalone.stop(args.state_dir)
    if cluster is not None:
        out.print(f"stopped the Spark standalone cluster {cluster.url} (pids {cluster.pids()})", highlight=False)
    if stopped is None and cluster is None:
        out.print(
            f"no Spark Connect server or cluster recorded in {connect.state_dir(args.state_dir)}", highlight=False
        )
        return 1
    return 0


def _status(args: argparse.Namespace, out: Console) -> int:
    from clusterlab.spark import connect, standalone

    up = connect.status(args.state_dir)
    if up is not None:
        out.print(f"up: {up.url} (pid {up.pid}, {up.master}; log {up.log})", highlight=False)
    cluster = standalone.status(args.state_dir)
    if cluster is not None:
        out.print(f"up: standalone {cluster.url} (master pid {cluster.master_pid}, workers {cluster.worker_pids})")
    if up is None and cluster is None:
        where = connect.state_dir(args.state_dir)
        out.print(f"no Spark Connect server or cluster running (state: {where})", highlight=False)
        return 1
    return 0


def _cmd_spark(args: argparse.Namespace) -> int:
    """Start, stop or show the Spark Connect server ``clusterlab check --engine spark`` uses when it is
    up, or (``start --workers N``) a standalone Spark cluster on this machine: a master and N workers,
    each a JVM of its own, for ``--master spark://127.0.0.1:PORT`` (the URL ``start`` and ``status``
    print). ``stop`` ends both by their PIDs. Exit 0 on success (``status``: something is up), 1 when
    ``status`` finds nothing or ``stop`` had nothing to stop, 2 when it cannot start."""
    out = Console()
    if args.action == "start":
        return _start_cluster(args, out) if args.workers else _start_server(args, out)
    return _stop(args, out) if args.action == "stop" else _status(args, out)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``spark`` to the CLI."""
    p = sub.add_parser(
        "spark", help="manage a warm Spark (Spark Connect server) for checks", description=_cmd_spark.__doc__
    )
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument(
        "--state-dir",
        default=None,
        help="where server.json and the log live (default: $CLUSTERLAB_SPARK_STATE, ~/.cache/clusterlab/spark-connect)",
    )
    p.add_argument("--master", default="local[2]", help="the server's Spark master (default local[2])")
    p.add_argument(
        "--driver-memory",
        type=_memory,
        default="2g",
        help=f"the server's driver memory, e.g. 2g or 512m (default 2g) [{DRIVER_MEMORY_MIB.describe()}]",
    )
    p.add_argument(
        "--warm",
        type=bounded(WARM_CHECKS),
        default=0,
        metavar="N",
        help=ranged(
            "start: then run N checks of a shipped golden, so the JVM has compiled Spark's planner "
            "before the first real check (a new server's first checks are several times slower; default 0)",
            WARM_CHECKS,
        ),
    )
    p.add_argument(
        "--workers",
        type=bounded(SPARK_WORKERS),
        default=0,
        metavar="N",
        help=ranged(
            "start: a standalone cluster of N workers (separate JVMs) instead of a Connect server", SPARK_WORKERS
        ),
    )
    p.add_argument(
        "--worker-memory",
        type=_memory,
        default="2g",
        help=f"start --workers: each worker's memory for its executor, e.g. 2g [{DRIVER_MEMORY_MIB.describe()}]",
    )
    p.set_defaults(func=_cmd_spark)
