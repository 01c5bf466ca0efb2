"""The installed package is ``clusterlab`` alone: every module imports as ``clusterlab.…`` from any directory,
nothing is importable as a top-level layer name (``core``, ``harness``, ``spark`` ...), and importing the whole package
never pulls one of those names in (which would mean code that only works from the repository's root)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlab import LAYERS

# Imports every module of the package (pyspark-using ones included), the pytest plugin and the CLI's full
# parser, then reports any top-level layer name that got imported on the way.
SCRIPT = """
import pkgutil, sys, importlib
import clusterlab
import clusterlab.pytest_plugin
from clusterlab.cli import build_parser
build_parser()
for layer in {layers!r} + ("cli",):
    pkg = importlib.import_module("clusterlab." + layer)
    for info in pkgutil.walk_packages(pkg.__path__, "clusterlab." + layer + "."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
print(sorted(m for m in sys.modules if m.split(".")[0] in {layers!r}))
"""


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False
    )


@pytest.mark.parametrize("layer", LAYERS)
def test_no_top_level_layer_package(layer: str, tmp_path: Path) -> None:
    result = _run(f"import {layer}", tmp_path)
    assert result.returncode != 0
    assert f"No module named '{layer}'" in result.stderr


def test_every_module_imports_as_clusterlab(tmp_path: Path) -> None:
    result = _run(SCRIPT.format(layers=LAYERS), tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


def test_setup_py_maps_the_same_layers_as_the_package_names() -> None:
    """setup.py runs before clusterlab can be imported, so it keeps its own LAYERS: the same tuple."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / "setup.py").read_text())
    [value] = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in node.targets)
    ]
    assert ast.literal_eval(value) == LAYERS
