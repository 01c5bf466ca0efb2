"""Objects named by a ``"package.module:attribute"`` string, loaded when first needed.

The runtime is launched by the harness, one layer up (pyproject.toml's import-linter contracts), so
it never imports it: what it needs from there (the trace recorder, the sample services) it names
by string, and a member process can be pointed at any other implementation the same way.
"""

from __future__ import annotations

import importlib
from typing import Any


def import_object(spec: str) -> Any:
    """The object ``spec`` names (``"package.module:attribute"``); ValueError naming what is wrong."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"{spec!r} is not of the form package.module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"{spec!r}: cannot import {module_name} ({e})") from None
    except Exception as e:  # the module itself is broken: a syntax error, or raising as it runs
        raise ValueError(f"{spec!r}: importing {module_name} raised {_described(e)}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"{spec!r}: module {module_name} has no {attribute!r}") from None


def _described(error: BaseException) -> str:
    """One line for an error a user's module raised: its type and message, and for a syntax error the
    file and line."""
    if isinstance(error, SyntaxError) and error.filename:
        return f"SyntaxError: {error.msg} ({error.filename}, line {error.lineno})"
    return f"{type(error).__name__}: {error}"
