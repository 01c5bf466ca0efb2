"""The trace's 128-bit digests: XXH3-128 (xxhash), one definition for every producer and checker.

``applied.entry_digest`` is :func:`entry_digest` of an entry's framed bytes, computed by every service
for every entry it applies while recording, and recomputed by the checks (chaos/verdict.py, the
Spark source) from the log. XXH3-128 rather than blake2b-128: the trace needs no
cryptographic hash (a digest detects divergence between members, it does not resist an
adversary), and XXH3-128 costs ~1/7 of blake2b per entry. The width stays 16 bytes
(``fixed_size_binary(16)``). run.json's ``trace_format.entry_digest`` names the function a run
used; a run without it used blake2b-128, and
:func:`entry_digest_of_run` gives the checks the right one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import xxhash

DIGEST_SIZE = 16
BytesLike = bytes | bytearray | memoryview
ENTRY_DIGEST_NAME = "xxh3-128"  # what this code records (run.json trace_format.entry_digest)
LEGACY_ENTRY_DIGEST_NAME = "blake2b-128"  # runs whose run.json names none

# bytes -> 16 bytes: the C function itself, no Python frame per entry.
entry_digest: Callable[[BytesLike], bytes] = xxhash.xxh3_128_digest


def _blake2b_128(data: BytesLike) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest()


ENTRY_DIGESTS: dict[str, Callable[[BytesLike], bytes]] = {
    ENTRY_DIGEST_NAME: entry_digest,
    LEGACY_ENTRY_DIGEST_NAME: _blake2b_128,
}


def entry_digest_named(name: str) -> Callable[[BytesLike], bytes]:
    """The entry digest function called ``name`` (ValueError naming the known ones otherwise)."""
    try:
        return ENTRY_DIGESTS[name]
    except KeyError:
        raise ValueError(f"unknown entry digest {name!r} (known: {', '.join(ENTRY_DIGESTS)})") from None


def entry_digest_name_of_run(meta: Mapping[str, Any]) -> str:
    """The entry digest a run recorded with, from its run.json (``trace_format.entry_digest``)."""
    trace_format = meta.get("trace_format")
    name = trace_format.get("entry_digest") if isinstance(trace_format, Mapping) else None
    return str(name) if name else LEGACY_ENTRY_DIGEST_NAME


def entry_digest_of_run(meta: Mapping[str, Any]) -> Callable[[BytesLike], bytes]:
    """The entry digest function a run recorded with (see the module docstring)."""
    return entry_digest_named(entry_digest_name_of_run(meta))


def records_digest(records: Iterable[bytes]) -> bytes:
    """Digest of a sequence of records (a snapshot's), each length-prefixed so the split is part of it."""
    h = xxhash.xxh3_128()
    for record in records:
        h.update(len(record).to_bytes(4, "little"))
        h.update(record)
    return h.digest()
