"""Packaging: the top-level folders become subpackages of ``clusterlab`` (metadata is in pyproject.toml).

``core/`` installs as ``clusterlab.core``, ``harness/`` as ``clusterlab.harness`` and so on, so an installed
clusterlab puts a single ``clusterlab`` package into site-packages.

Hot modules (``COMPILED``) are compiled with mypyc when it is available (it comes with mypy, listed in
``build-system.requires``) and a C compiler works; otherwise the build goes on without them and the
same modules run as plain Python (each has a pure-Python fallback: see its docstring)."""

import os
import shutil
import sys
from pathlib import Path

from setuptools import find_packages, setup

LAYERS = ("core", "harness", "chaos", "golden")
# Modules compiled with mypyc: (module, source file). Each must import only the standard library.
COMPILED = (
    ("clusterlab.core.codec.framewalk", "core/codec/framewalk.py"),
    ("clusterlab.harness.services.kvdigest", "harness/services/kvdigest.py"),
    ("clusterlab.harness.promotion", "harness/promotion.py"),
)


def compiled_extensions() -> list:
    """mypyc extensions for COMPILED, or [] when mypyc cannot run here (CLUSTERLAB_NO_MYPYC=1 skips them)."""
    if os.environ.get("CLUSTERLAB_NO_MYPYC"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("clusterlab: mypyc not available, hot modules stay pure Python", file=sys.stderr)
        return []
    # mypyc names a module after its path: lay the sources out under their installed package names
    # (empty __init__.py files, so mypy reads nothing but these modules).
    root = Path("build/mypyc-src")
    paths = []
    for module, source in COMPILED:
        parts = module.split(".")
        for i in range(1, len(parts)):
            init = root.joinpath(*parts[:i], "__init__.py")
            init.parent.mkdir(parents=True, exist_ok=True)
            init.touch()
        target = root.joinpath(*parts[:-1], parts[-1] + ".py")
        shutil.copyfile(source, target)
        paths.append(str(target))
    try:
        # One shared library per module, next to it (a group of several would be one library at the
        # top level, which only imports with the source tree on sys.path).
        return mypycify(paths, opt_level="3", target_dir="build/mypyc-c", separate=True)
    except Exception as e:  # a mypyc that cannot compile them: run them interpreted
        print(f"clusterlab: mypyc failed ({e}), hot modules stay pure Python", file=sys.stderr)
        return []


setup(
    packages=["clusterlab", *(f"clusterlab.{p}" for p in find_packages(include=[f"{layer}*" for layer in LAYERS]))],
    package_dir={"clusterlab": "clusterlab", **{f"clusterlab.{layer}": layer for layer in LAYERS}},
    ext_modules=compiled_extensions(),
)
