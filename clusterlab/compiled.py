"""Which build of the mypyc-compiled modules runs (setup.py ``COMPILED``): the extensions, or their sources.

In a development tree the extensions sit next to their sources (``pip install -e .``) and shadow them, so
an edit or a merge since the last build would run stale code. ``setup.py`` records the SHA-256 of each
source it compiled in ``clusterlab/mypyc_build.json`` (untracked); :func:`select_build` (run by
``clusterlab/__init__.py`` before any compiled module loads) runs every compiled module from its source
when one source no longer matches, or when ``CLUSTERLAB_NO_MYPYC`` is set (the pure-Python fallback, as
tests use it). All or none: compiled modules call each other's native classes directly. An installed
wheel has no record and runs its extensions as built.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

BUILD_RECORD = Path(__file__).with_name("mypyc_build.json")


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' ``.py`` sources ahead of their extensions."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.sources.get(fullname)
        return None if source is None else importlib.util.spec_from_file_location(fullname, source)


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def select_build(record_path: Path = BUILD_RECORD) -> str:
    """Install the source finder when the compiled modules must run interpreted; return which build runs:
    ``"compiled"``, ``"none"`` (nothing compiled here), ``"disabled"`` (CLUSTERLAB_NO_MYPYC) or
    ``"stale"`` (a source changed since the build: rebuild with ``pip install -e .``)."""
    try:
        record: dict[str, dict[str, str]] = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return "none"
    # module -> {"source": path, "sha256": digest}; only modules whose extension still exists count.
    built = {
        name: entry
        for name, entry in record.items()
        if any(Path(entry["source"]).parent.glob(name.rsplit(".", 1)[1] + ".cpython-*"))
    }
    if not built:
        return "none"
    if os.environ.get("CLUSTERLAB_NO_MYPYC"):
        state = "disabled"
    else:
        changed = [name for name, entry in built.items() if _sha256(entry["source"]) != entry["sha256"]]
        if not changed:
            return "compiled"
        state = "stale"
        warnings.warn(
            f"clusterlab: {', '.join(sorted(changed))} changed since the mypyc build: running every compiled "
            "module from source (slower); rebuild with `pip install -e .`",
            stacklevel=2,
        )
    sys.meta_path.insert(0, _SourceFinder({name: entry["source"] for name, entry in built.items()}))
    return state


BUILD = select_build()
