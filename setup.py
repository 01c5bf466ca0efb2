"""Packaging: the top-level folders become subpackages of ``clusterlab`` (metadata is in pyproject.toml).

``core/`` installs as ``clusterlab.core``, ``harness/`` as ``clusterlab.harness`` and so on, so an installed
clusterlab puts a single ``clusterlab`` package into site-packages."""

from setuptools import find_packages, setup

LAYERS = ("core", "harness", "chaos", "golden")

setup(
    packages=["clusterlab", *(f"clusterlab.{p}" for p in find_packages(include=[f"{layer}*" for layer in LAYERS]))],
    package_dir={"clusterlab": "clusterlab", **{f"clusterlab.{layer}": layer for layer in LAYERS}},
)
