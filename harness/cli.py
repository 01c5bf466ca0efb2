"""The ``clusterlab`` command line. Each subcommand is documented in its ``--help``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from clusterlab.core import __version__


def _cmd_demo(args: argparse.Namespace) -> int:
    """The README's main job: a seeded chaos scenario on a simulated 3-member cluster, checked."""
    from clusterlab.harness.demo import run_demo

    return run_demo(seed=args.seed, members=args.members, directory=args.dir)


def _cmd_codec_selfcheck(args: argparse.Namespace) -> int:
    """Round-trip every registered message type once and print a line per type."""
    from clusterlab.core.codec.selfcheck import run_selfcheck

    return run_selfcheck()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clusterlab",
        description="Aeron Cluster in Python over ZeroMQ, with a record-replay chaos harness.",
    )
    parser.add_argument("--version", action="version", version=f"clusterlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="a guided simulator walk-through (the main job is `clusterlab run`)")
    demo.add_argument("--seed", type=int, default=1, help="seed of the scenario (same seed, same run)")
    demo.add_argument("--members", type=int, default=3, choices=[1, 3, 5], help="cluster size")
    demo.add_argument("--dir", default=None, help="directory for member files (default: a fresh temp dir)")
    demo.set_defaults(func=_cmd_demo)

    selfcheck = sub.add_parser("codec-selfcheck", help="encode/decode every message type once")
    selfcheck.set_defaults(func=_cmd_codec_selfcheck)

    for name in _COMMAND_MODULES:
        _register(sub, name)
    return parser


# Subcommand modules, each with ``register(sub)``. Imported only when the parser is built, so that
# ``clusterlab --version`` does not pay for pyarrow/pyspark imports.
_COMMAND_MODULES = ("cli_cluster", "cli_trace", "cli_run", "cli_check", "cli_golden", "cli_report")


def _register(sub: argparse._SubParsersAction, name: str) -> None:
    import importlib

    try:
        module = importlib.import_module(f"clusterlab.harness.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"clusterlab.harness.{name}":
            raise
        return  # a command whose module is not in this tree yet
    module.register(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``clusterlab`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
