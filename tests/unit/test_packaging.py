"""A wheel built from the source tree holds every module of every layer and clusterlab's own subpackages
(the CLI, the test apparatus) and the package data; a non-editable install then imports what an editable
one does. The wheel is built from a copy of the tracked files: a build removes the tree's compiled
extensions (setup.py ``remove_extensions``), which the rest of the suite imports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from clusterlab import LAYERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DATA = ("spark/log4j2.properties",)  # pyproject.toml [tool.setuptools.package-data]

pytestmark = pytest.mark.timeout(600)


def _tracked_files() -> list[str]:
    """The repository's files as a fresh clone has them (git), else the tree without build products."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
        ).stdout.decode()
        return [p for p in listed.split("\0") if p and (ROOT / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".venv", "build", ".git", "__pycache__"}
        return [
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file() and not skip & set(p.relative_to(ROOT).parts) and ".so" not in p.suffixes
        ]


def _installed_name(path: str) -> str | None:
    """Where a source file lands in the wheel (``core/x.py`` → ``clusterlab/core/x.py``); None if it is not
    part of the package."""
    top = path.split("/", 1)[0]
    if top == "clusterlab":
        return path
    if top in LAYERS and (path.endswith(".py") or path in PACKAGE_DATA):
        return f"clusterlab/{path}"
    return None


def _extensions() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*.so"))


def test_a_wheel_holds_every_module_of_every_layer(tmp_path: Path) -> None:
    extensions = _extensions()
    files = _tracked_files()
    source = tmp_path / "src"
    for path in files:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, source / path)
    out = tmp_path / "dist"
    env = {**os.environ, "CLUSTERLAB_NO_MYPYC": "1"}  # the contents, not the compile: minutes saved
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir", "-q",
         "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=540, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = out.glob("clusterlab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {name for path in files if (name := _installed_name(path)) is not None and name.endswith(".py")}
    expected |= {f"clusterlab/{p}" for p in PACKAGE_DATA}
    assert {"clusterlab/cli/__init__.py", "clusterlab/testing/__init__.py", "clusterlab/core/__init__.py"} <= expected
    missing = sorted(expected - names)
    assert not missing, f"{len(missing)} source files are not in the wheel: {missing[:20]}"
    assert _extensions() == extensions, "the build touched the tree's compiled extensions"
