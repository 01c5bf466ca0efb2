"""The ``clusterlab`` command line. Each subcommand is documented in its ``--help``.

The top layer: it may import every package below it (core, harness, chaos, golden) and none of them
imports it (pyproject.toml's import-linter contracts). One module per group of commands, each with
``register(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from clusterlab.chaos.limits import SEED
from clusterlab.cli.paths import bounded, ranged, writable_directory_error
from clusterlab.core import __version__
from clusterlab.harness.trace_error import TraceError

# The modules registering subcommands, imported by build_parser. `check` and `spark` import little at
# the top: ``clusterlab check RUN`` builds a parser of that command alone and skips the rest (the
# harness, the simulator: ~1.5 s of a warm Spark check's whole command).
COMMAND_MODULES = ("cluster", "tool", "trace", "run", "check", "golden", "report", "spark", "mutants", "sweep")
LIGHT_COMMANDS = ("check", "spark")


def _cmd_demo(args: argparse.Namespace) -> int:
    """A guided walk-through on a simulated cluster, checked (the main job is ``clusterlab run``)."""
    if args.dir is not None and (error := writable_directory_error("--dir", args.dir)) is not None:
        print(f"clusterlab demo: {error}", file=sys.stderr)
        return 2
    from clusterlab.chaos.demo import run_demo  # here: it imports the whole harness (~1 s), which `check` never needs

    return run_demo(seed=args.seed, members=args.members, directory=args.dir)


def _cmd_codec_selfcheck(args: argparse.Namespace) -> int:
    """Round-trip every registered message type once and print a line per type."""
    from clusterlab.core.codec.selfcheck import run_selfcheck

    return run_selfcheck()


class OneLineParser(argparse.ArgumentParser):
    """argparse prints its usage and the error; this prints the error alone, on one line, exit 2. The
    subcommands' parsers are of this class too (argparse makes them of their parent's class)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``clusterlab`` argument parser with every subcommand registered (``only``: that one of
    :data:`LIGHT_COMMANDS` alone)."""
    parser = OneLineParser(
        prog="clusterlab",
        description="Aeron Cluster in Python over ZeroMQ, with a record-replay chaos harness.",
    )
    parser.add_argument("--version", action="version", version=f"clusterlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    if only is not None:
        importlib.import_module(f"clusterlab.cli.{only}").register(sub)
        return parser
    demo = sub.add_parser("demo", help="a guided simulator walk-through (the main job is `clusterlab run`)")
    demo.add_argument(
        "--seed", type=bounded(SEED), default=1, help=ranged("seed of the scenario (same seed, same run)", SEED)
    )
    demo.add_argument("--members", type=int, default=3, choices=[1, 3, 5], help="cluster size")
    demo.add_argument(
        "--dir", default=None, help="where the run's recording goes, as DIR/run (default: a fresh temp dir)"
    )
    demo.set_defaults(func=_cmd_demo)

    selfcheck = sub.add_parser("codec-selfcheck", help="encode/decode every message type once")
    selfcheck.set_defaults(func=_cmd_codec_selfcheck)

    for name in COMMAND_MODULES:
        importlib.import_module(f"clusterlab.cli.{name}").register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the command as Ctrl-C is: it unwinds the same way (its processes stopped by
    their PIDs, its trace closed) and exits 143."""


def _raise_on_sigterm(main_pid: int) -> None:
    """Make the first SIGTERM raise :class:`Terminated` in this process, and later ones wait for the
    cleanup it starts; a process forked from this one (a pool worker) gets the default action."""
    raised = False

    def on_sigterm(signum: int, _frame: object) -> None:
        nonlocal raised
        if os.getpid() != main_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        elif not raised:
            raised = True
            raise Terminated

    signal.signal(signal.SIGTERM, on_sigterm)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``clusterlab`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv and argv[0] in LIGHT_COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM)
    if in_main_thread:
        _raise_on_sigterm(os.getpid())
    try:
        return int(args.func(args) or 0)
    except TraceError as e:  # a run that cannot be judged (unreadable, its model broken): never a verdict
        print(f"clusterlab {args.command}: {e}", file=sys.stderr)
        return 2
    except Terminated:
        print("clusterlab: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("clusterlab: interrupted", file=sys.stderr)
        return 130
    finally:
        if in_main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)
