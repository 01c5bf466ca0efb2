"""Incremental state digests for the sample services.

A state is viewed as a set of items (a key with its value, a counter with its value, a pending timer).
Each item hashes to a 128-bit integer (XXH3-128 of a canonical, length-prefixed encoding after a
per-service domain prefix so two services never share item hashes); the state digest is the sum of the item
hashes modulo 2**128. Changing one item costs one subtraction and one addition, whatever the state's
size, and the result depends only on the set of items, not on the order they were added in, so an
incrementally maintained digest equals one computed from scratch over the same state.

Sum rather than XOR: with XOR two equal items cancel, so a bug that duplicates an item twice would
leave the digest unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

MODULUS = 1 << 128
DIGEST_SIZE = 16

Field = bytes | str | int | None


def _encode_field(value: Field) -> bytes:
    # One tag byte per type, so 1, "1" and b"1" hash differently; lengths make the encoding prefix-free.
    if value is None:
        return b"N"
    if isinstance(value, bool):
        raise TypeError("bool is ambiguous in a digest item; use int")
    if isinstance(value, int):
        raw = str(value).encode("ascii")
        tag = b"I"
    elif isinstance(value, str):
        raw = value.encode("utf-8")
        tag = b"S"
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        tag = b"B"
    else:
        raise TypeError(f"digest item field must be bytes, str, int or None, not {type(value).__name__}")
    return tag + len(raw).to_bytes(4, "little") + raw


_HASHERS: dict[bytes, xxhash.xxh3_128] = {}
_PREFIXES: dict[bytes, bytes] = {}


def _prefix(domain: bytes) -> bytes:
    # Length-prefixed, so no domain's prefix is the start of another's item bytes.
    prefix = _PREFIXES.get(domain)
    if prefix is None:
        prefix = _PREFIXES[domain] = len(domain[:16]).to_bytes(1, "little") + domain[:16]
    return prefix


def hasher(domain: bytes) -> xxhash.xxh3_128:
    """A fresh XXH3-128 hasher that has already taken ``domain``'s prefix (its first 16 bytes): a copy
    of one kept per domain (one per applied entry)."""
    base = _HASHERS.get(domain)
    if base is None:
        base = _HASHERS[domain] = xxhash.xxh3_128(_prefix(domain))
    return base.copy()


_int_digest = xxhash.xxh3_128_intdigest  # the 128 bits as an int, in one C call
_U32 = struct.Struct("<I").pack


def item_hash(domain: bytes, *fields: Field) -> int:
    """The 128-bit hash of one item of a state."""
    return _int_digest(b"".join([_prefix(domain), *[_encode_field(value) for value in fields]]))


_COUNTER_CONSTANTS: dict[tuple[bytes, str], int] = {}


def counter_item_hash(domain: bytes, tag: str, number: int) -> int:
    """The hash of a ``(tag, number)`` item that changes on every entry (a store's revision): ``number``
    times an odd constant of ``(domain, tag)``, mod 2**128. Injective in ``number`` (odd constants are
    invertible mod 2**128), and a multiply instead of a hash per applied entry. Not a hash of the
    item's bytes, so a state digest that uses it says so (KeyValueService)."""
    constant = _COUNTER_CONSTANTS.get((domain, tag))
    if constant is None:
        constant = _COUNTER_CONSTANTS[(domain, tag)] = item_hash(domain, "counter constant", tag) | 1
    return number * constant % MODULUS


def str_item_head(domain: bytes, tag: str) -> bytes:
    """The bytes :func:`item_hash` hashes for a ``(tag, key: str, ...)`` item up to the key's length:
    the domain prefix, the encoded tag and the key's type byte (kvdigest.KeyDigests's ``head``)."""
    return _prefix(domain) + _encode_field(tag) + b"S"


def encode_field(value: Field) -> bytes:
    """The canonical encoding of one item field (what :func:`item_hash` hashes)."""
    return _encode_field(value)


class MultisetDigest:
    """Sum of item hashes modulo 2**128, updated as items come and go."""

    __slots__ = ("domain", "value")

    def __init__(self, domain: bytes, value: int = 0) -> None:
        if len(domain) > 16:
            raise ValueError("domain is at most 16 bytes (the item hashes' prefix)")
        self.domain = domain
        self.value = value

    def add(self, *fields: Field) -> None:
        """An item entered the state."""
        self.value = (self.value + item_hash(self.domain, *fields)) % MODULUS

    def remove(self, *fields: Field) -> None:
        """An item left the state (it must have been added)."""
        self.value = (self.value - item_hash(self.domain, *fields)) % MODULUS

    def replace(self, old: tuple[Field, ...], new: tuple[Field, ...]) -> None:
        """An item changed."""
        self.remove(*old)
        self.add(*new)

    def digest(self) -> bytes:
        """The 16-byte digest."""
        return self.value.to_bytes(DIGEST_SIZE, "little")

    def clear(self) -> None:
        """The empty state."""
        self.value = 0

    @classmethod
    def of(cls, domain: bytes, items: Iterable[tuple[Field, ...]]) -> MultisetDigest:
        """The digest of a whole state, from scratch."""
        d = cls(domain)
        for item in items:
            d.add(*item)
        return d
