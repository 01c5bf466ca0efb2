"""Benchmarks, run as modules: ``python -m benchmarks.codec_bench``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(out: str | Path, doc: Any) -> Path:
    """Write a benchmark's figures as indented JSON (creating the directory); returns the path."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
