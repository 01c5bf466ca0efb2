"""The error of a path that is not a judgeable run, apart from harness/trace.py so that the CLI's entry
point can catch it without importing pyarrow. ``clusterlab.harness.trace`` re-exports it."""

from __future__ import annotations


class TraceError(Exception):
    """A path that is not a readable run, or a run that cannot be judged here: says which and why."""
