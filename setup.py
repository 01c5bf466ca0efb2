"""Packaging: the top-level folders become subpackages of ``clusterlab`` (metadata is in pyproject.toml).

``core/`` installs as ``clusterlab.core``, ``harness/`` as ``clusterlab.harness`` and so on, so an installed
clusterlab puts a single ``clusterlab`` package into site-packages.

Hot modules (``COMPILED``) are compiled with mypyc when it is available (it comes with mypy, listed in
``build-system.requires``) and a C compiler works; otherwise the build goes on without them and the
same modules run as plain Python (each has a pure-Python fallback: see its docstring)."""

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from setuptools import find_packages, setup

LAYERS = ("core", "harness", "chaos", "spark", "golden")
# Modules compiled with mypyc: (module, source file). They may import other clusterlab modules of
# core/ and harness/ (those stay interpreted unless listed); nothing may monkeypatch their functions.
COMPILED = (
    ("clusterlab.core.codec.framewalk", "core/codec/framewalk.py"),
    ("clusterlab.harness.services.kvdigest", "harness/services/kvdigest.py"),
    ("clusterlab.harness.promotion", "harness/promotion.py"),
    ("clusterlab.core.archive.recording", "core/archive/recording.py"),
    ("clusterlab.harness.simnet", "harness/simnet.py"),
    ("clusterlab.harness.sim", "harness/sim.py"),
    ("clusterlab.core.consensus.term_replication", "core/consensus/term_replication.py"),
    ("clusterlab.core.consensus.log_adapter", "core/consensus/log_adapter.py"),
    ("clusterlab.core.consensus.client_sessions", "core/consensus/client_sessions.py"),
    ("clusterlab.core.consensus.module_state", "core/consensus/module_state.py"),
    ("clusterlab.core.consensus.module", "core/consensus/module.py"),
    ("clusterlab.core.consensus.member_driver", "core/consensus/member_driver.py"),
    ("clusterlab.core.consensus.service_link", "core/consensus/service_link.py"),
    ("clusterlab.core.consensus.election_link", "core/consensus/election_link.py"),
    ("clusterlab.core.client.client", "core/client/client.py"),
    ("clusterlab.core.service.agent", "core/service/agent.py"),
    ("clusterlab.harness.services.kv", "harness/services/kv.py"),
    ("clusterlab.core.codec.session_header", "core/codec/session_header.py"),
)
# Layers mypy reads while compiling COMPILED (the modules they import, type-checked but not compiled).
SOURCE_LAYERS = ("core", "harness")


# What was compiled from which source (clusterlab/compiled.py runs the sources instead once one changes).
BUILD_RECORD = Path("clusterlab/mypyc_build.json")


def remove_extensions() -> None:
    """Delete the in-place extensions of a previous build (they would shadow the sources) and its record."""
    try:
        previous = json.loads(BUILD_RECORD.read_text())
    except (OSError, ValueError):
        previous = {}
    modules = {module: source for module, source in COMPILED} | {m: e["source"] for m, e in previous.items()}
    for module, source in modules.items():
        name = module.rsplit(".", 1)[1]
        for built in Path(source).parent.glob(f"{name}*.cpython-*"):
            if built.name.startswith((f"{name}.", f"{name}__mypyc.")):
                built.unlink()
    BUILD_RECORD.unlink(missing_ok=True)


def record_build() -> None:
    """Write BUILD_RECORD: each compiled module's source path and SHA-256."""
    record = {
        module: {"source": str(Path(source).resolve()), "sha256": hashlib.sha256(Path(source).read_bytes()).hexdigest()}
        for module, source in COMPILED
    }
    BUILD_RECORD.write_text(json.dumps(record, indent=1) + "\n")


def compiled_extensions() -> list:
    """mypyc extensions for COMPILED, or [] when mypyc cannot run here (CLUSTERLAB_NO_MYPYC=1 skips them)."""
    remove_extensions()
    if os.environ.get("CLUSTERLAB_NO_MYPYC"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("clusterlab: mypyc not available, hot modules stay pure Python", file=sys.stderr)
        return []
    # mypyc names a module after its path: lay the sources out under their installed package names
    # (a fresh copy of core/ and harness/, so mypy follows the compiled modules' imports into them).
    root = Path("build/mypyc-src")
    shutil.rmtree(root, ignore_errors=True)
    (root / "clusterlab").mkdir(parents=True)
    (root / "clusterlab" / "__init__.py").touch()
    for layer in SOURCE_LAYERS:
        shutil.copytree(layer, root / "clusterlab" / layer, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    paths = [str(root / "clusterlab" / source) for _, source in COMPILED]
    # The project's mypy config (pyproject) reads another layout: use none, missing stubs are fine.
    options = ["--config-file=", "--ignore-missing-imports", "--follow-imports=silent", "--python-version=3.11"]
    try:
        # One shared library per module, next to it (a group of several would be one library at the
        # top level, which only imports with the source tree on sys.path).
        extensions = mypycify(
            [*options, *paths], only_compile_paths=paths, opt_level="3", target_dir="build/mypyc-c", separate=True
        )
    except (Exception, SystemExit) as e:  # mypyc exits on a type error: run them interpreted
        print(f"clusterlab: mypyc failed ({e}), hot modules stay pure Python", file=sys.stderr)
        return []
    record_build()
    return extensions


setup(
    # clusterlab/ itself (the CLI, the test apparatus, the pytest plugin) and each layer's folder.
    packages=[
        "clusterlab",
        *find_packages(include=["clusterlab.*"]),
        *(f"clusterlab.{p}" for p in find_packages(include=[f"{layer}*" for layer in LAYERS])),
    ],
    package_dir={"clusterlab": "clusterlab", **{f"clusterlab.{layer}": layer for layer in LAYERS}},
    ext_modules=compiled_extensions(),
)
