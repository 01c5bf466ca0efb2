"""Checks of the paths and numbers given on the ``clusterlab`` command line, made before a command
starts any work: each returns None when the argument is usable, else one line naming the option, the
value and what is wrong with it (the command prints it and exits 2). Sizes and times are parsed by
:func:`bounded` (argparse refuses a value out of its :class:`~clusterlab.chaos.limits.Limit`, exit 2)
and their help shows the bound (:func:`ranged`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Collection
from pathlib import Path

from clusterlab.chaos.limits import Limit


def bounded(limit: Limit) -> Callable[[str], float]:
    """An argparse ``type``: the text as a number (an int for an integer limit) within ``limit``;
    argparse reports anything else as ``argument --members: must be 1 to 9, not 100``."""

    def parse(text: str) -> float:
        try:
            value: float = int(text) if limit.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if limit.integer else 'a number'} ({limit.describe()})"
            ) from None
        if not limit.contains(value):
            raise argparse.ArgumentTypeError(f"must be {limit.describe()}, not {text}")
        return value

    parse.__name__ = "int" if limit.integer else "float"
    return parse


def ranged(text: str, limit: Limit) -> str:
    """An option's help with its bound: ``cluster size (default 3) [1 to 9 members]``."""
    return f"{text} [{limit.describe()}]"


def output_file_error(option: str, path: str | Path) -> str | None:
    """Why the file ``path`` (given as ``option``) could not be written. The check creates the file
    (and removes it again if it did not exist): permission bits alone say nothing for root, a
    read-only mount or /proc."""
    target = Path(path)
    if target.is_dir():
        return f"{option} {path}: is a directory; give a file path"
    parent = target.parent
    if not parent.is_dir():
        existing = next((p for p in parent.parents if p.exists()), None) if not parent.exists() else parent
        if existing is not None and not existing.is_dir():
            return f"{option} {path}: {existing} is a file, not a directory"
        return f"{option} {path}: directory {parent} does not exist"
    existed = target.exists()
    try:
        with open(target, "a"):
            pass
    except OSError as e:
        return f"{option} {path}: cannot be written ({e.strerror or e})"
    if not existed:
        target.unlink(missing_ok=True)
    return None


def directory_error(option: str, path: str | Path, *, must_exist: bool = True, what: str = "directory") -> str | None:
    """Why ``path`` (given as ``option``) is not a usable directory (``what``, for the message):
    missing (when ``must_exist``), a file, or below a file."""
    target = Path(path)
    if target.exists():
        return None if target.is_dir() else f"{option} {path}: is a file, not a directory"
    if must_exist:
        return f"{option} {path}: no such {what}"
    for parent in target.parents:
        if parent.exists():
            return None if parent.is_dir() else f"{option} {path}: {parent} is a file, not a directory"
    return None


def writable_directory_error(option: str, path: str | Path) -> str | None:
    """Why files could not be created in the (existing or to-be-created) directory ``path``."""
    error = directory_error(option, path, must_exist=False)
    if error is not None:
        return error
    existing = next((p for p in (Path(path), *Path(path).parents) if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        return f"{option} {path}: {existing} is not writable"
    return None


def services_error(text: str, first_kinds: Collection[str] | None = None) -> str | None:
    """Why ``--services`` ``text`` (comma-separated service kinds, e.g. ``kv,counter``) cannot be used:
    an empty or unknown name, fewer than two, too many; ``first_kinds`` (when given): what service 0
    may be (the kinds with a workload)."""
    from clusterlab.core.runtime.config import parse_services
    from clusterlab.harness.services import SERVICES

    try:
        kinds = parse_services(text)
    except ValueError as e:
        return f"--services {text}: {e}"
    if len(kinds) < 2:
        return f"--services {text}: give two or more services (one service is --service)"
    unknown = [k for k in kinds if ":" not in k and k not in SERVICES]
    if unknown:
        return f"--services {text}: unknown service {unknown[0]!r}; use {', '.join(sorted(SERVICES))} or module:factory"
    if first_kinds is not None and kinds[0] not in first_kinds:
        allowed = ", ".join(first_kinds)
        return f"--services {text}: the first service drives the workload, so it must be one of {allowed}"
    return None


def unnamed_service_error(service: str | None, workload: str | None) -> str | None:
    """Why ``--workload`` without ``--service`` cannot run, or None: a workload drives the service it was
    written for, so the service is named rather than taken to be the default kv."""
    if service is None and workload is not None:
        return (
            f"--workload {workload}: name the service it drives, --service package.module:factory "
            "(or --service kv for the sample key-value service)"
        )
    return None
