"""The ``messages`` table's promoted columns (msg_type, term, log position), compiled with mypyc.

Every message a process sends or receives is a ``messages`` row (on the leader node one per client
request, on the leader service one per reply), so promotion runs per log entry while recording.
``setup.py`` compiles this module with mypyc (``clusterlab.harness.promotion``, like
core/codec/framewalk.py): the header and the fixed-block fields are read as native integers straight
from the bytes. Where the build cannot run it is imported as plain Python and the recorder keeps its
own loops (``COMPILED`` says which; ``tests/unit/test_recorder.py`` checks the compiled module, its
source run interpreted and the recorder's loops give the same rows). Standard library only: the
table of message layouts and the naming of unknown payloads come from the recorder.
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


def _u32(b: bytes, o: int) -> int:
    return b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)


def promote_one(
    payload: bytes,
    table: dict[int, tuple[str, int, int, int]],
    unknown: Callable[[bytes], tuple[str, int | None, int | None]],
) -> tuple[str, int | None, int | None]:
    """(msg_type, leadership_term_id, log_position) of one payload: a message whose template id is in
    ``table`` (name, term offset | -1, position offset | -1, block start offset | -1) has its fields
    read here (a block's position is its start plus the length of its entries, which follow the
    sender's fixed block); a payload too short for a header or of an unknown template goes to
    ``unknown``."""
    n = len(payload)
    spec = table.get(payload[2] | (payload[3] << 8)) if n >= HEADER_LENGTH else None
    if spec is None:
        return unknown(payload)
    name, term_at, position_at, start_at = spec
    term: int | None = _i64(payload, term_at) if 0 <= term_at <= n - 8 else None
    if start_at >= 0:
        # Variable data starts after the *sender's* block length (SBE); entries is the only var field.
        var_at = HEADER_LENGTH + (payload[0] | (payload[1] << 8))
        if start_at <= n - 8 and var_at <= n - 4:
            return name, term, _i64(payload, start_at) + _u32(payload, var_at)
        return name, term, None
    return name, term, _i64(payload, position_at) if 0 <= position_at <= n - 8 else None


def promote_fixed(
    payloads: list[bytes],
    table: dict[int, tuple[str, int, int, int]],
    unknown: Callable[[bytes], tuple[str, int | None, int | None]],
) -> tuple[list[str], list[int | None], list[int | None]]:
    """:func:`promote_one` of every payload, as three columns."""
    names: list[str] = []
    terms: list[int | None] = []
    positions: list[int | None] = []
    for payload in payloads:
        name, term, position = promote_one(payload, table, unknown)
        names.append(name)
        terms.append(term)
        positions.append(position)
    return names, terms, positions


# True when this module runs as the mypyc-compiled extension (its __file__ is the shared object).
COMPILED: Final = not __file__.endswith(".py")
