"""The ``messages`` table's promoted columns of a batch of payloads, compiled with mypyc.

Every client request the leader node receives and every reply its service sends is a ``messages``
row, so :func:`clusterlab.harness.recorder.promote_many` runs once per log entry in two processes
while recording. ``setup.py`` compiles this module with mypyc (``clusterlab.harness.promotion``, like
core/codec/framewalk.py): the header and the two fixed-block fields are read as native integers
straight from the bytes. Where the build cannot run it is imported as plain Python and the recorder
keeps its own loop (``COMPILED`` says which; ``tests/unit/test_recorder.py`` checks both give the
rows of :func:`~clusterlab.harness.recorder.promote`). Standard library only: the table of message
layouts and the general path come from the recorder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

HEADER_LENGTH: Final = 8


def _i64(b: bytes, o: int) -> int:
    v = (
        b[o]
        | (b[o + 1] << 8)
        | (b[o + 2] << 16)
        | (b[o + 3] << 24)
        | (b[o + 4] << 32)
        | (b[o + 5] << 40)
        | (b[o + 6] << 48)
        | (b[o + 7] << 56)
    )
    return v - (1 << 64) if v >= (1 << 63) else v


def promote_fixed(
    payloads: list[bytes],
    table: dict[int, tuple[str, int, int, int]],
    general: Callable[[bytes], tuple[str, int | None, int | None]],
) -> tuple[list[str], list[int | None], list[int | None]]:
    """(msg_type, leadership_term_id, log_position) columns of ``payloads``: a message whose template
    id is in ``table`` (name, term offset | -1, position offset | -1, block start offset | -1) and is
    not a block has its fields read here; any other payload goes through ``general``."""
    names: list[str] = []
    terms: list[int | None] = []
    positions: list[int | None] = []
    for payload in payloads:
        n = len(payload)
        spec = table.get(payload[2] | (payload[3] << 8)) if n >= HEADER_LENGTH else None
        if spec is None or spec[3] >= 0:  # not a known message, or a block: the general path
            name, term, position = general(payload)
        else:
            name, term_at, position_at, _start_at = spec
            term = _i64(payload, term_at) if 0 <= term_at <= n - 8 else None
            position = _i64(payload, position_at) if 0 <= position_at <= n - 8 else None
        names.append(name)
        terms.append(term)
        positions.append(position)
    return names, terms, positions


# True when this module runs as the mypyc-compiled extension (its __file__ is the shared object).
COMPILED: Final = not __file__.endswith(".py")
