"""Encode and decode one default instance of every registered message; used by the CLI."""

from __future__ import annotations

import dataclasses
import enum
import typing

from clusterlab.core.codec.registry import REGISTRY, decode


def _default(tp: typing.Any) -> typing.Any:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _default(typing.get_args(tp)[0])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(iter(tp))
    if tp is bytes:
        return b"\x01\x02"
    if tp is str:
        return "x"
    if tp is int:
        return 1
    if origin in (list, tuple):
        return origin()
    return None


def sample(cls: type) -> typing.Any:
    """A simple instance of a message class (first enum member, 1 for ints, short var data)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    kwargs = {f.name: _default(hints[f.name]) for f in dataclasses.fields(cls)}
    return cls(**kwargs)


def run_selfcheck() -> int:
    """Round-trip every message type; print one describe() line each; 0 if all match."""
    failures = 0
    for template_id, cls in sorted(REGISTRY.items()):
        try:
            msg = sample(cls)
            back = decode(msg.encode())
            ok = back == msg
        except Exception as e:  # report every type, not just the first failure
            print(f"FAIL {template_id:4d} {cls.__name__}: {e}")
            failures += 1
            continue
        print(f"{'ok  ' if ok else 'FAIL'} {template_id:4d} {msg.describe()}")
        failures += 0 if ok else 1
    print(f"{len(REGISTRY) - failures} of {len(REGISTRY)} message types round-trip")
    return 1 if failures else 0
