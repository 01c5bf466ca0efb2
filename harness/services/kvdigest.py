"""The KV store's incremental state digest (:class:`KeyDigests`), compiled with mypyc.

While recording, every service computes its state digest after every applied entry; for the KV
store that is one item hash of the written key and a few 128-bit additions. Interpreted that is
~1.2 µs per entry (the largest recording cost of a service: docs/perf.md); ``setup.py`` compiles
this module with mypyc (``clusterlab.harness.services.kvdigest``, like core/codec/framewalk.py), and
where the build cannot run it is imported as plain Python with the same results (``COMPILED`` says
which; ``tests/unit/test_sample_services.py`` runs the compiled and the interpreted module side by
side against ``digest.item_hash``). Standard library only: the hash function (XXH3-128 as an int)
is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

MASK: Final = (1 << 128) - 1  # sums are mod 2**128 (digest.MODULUS)
# The 4-byte little-endian lengths of short fields, looked up rather than encoded per item.
_LENGTHS: Final = [n.to_bytes(4, "little") for n in range(1024)]


def _length(n: int) -> bytes:
    return _LENGTHS[n] if n < 1024 else n.to_bytes(4, "little")


class _Item:
    """One key's part of the sum: its item encoding up to the value (head, length, key, ``S``:
    keys are rewritten far more often than they are new, and this part never changes) and its
    item hash as of the last digest (0 until it is first hashed)."""

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self.hash = 0


class KeyDigests:
    """The sum of the item hashes of ``{key: (value, mod_revision)}`` plus the revision's counter
    item, kept lazily: :meth:`written` only marks the key; :meth:`digest` hashes the keys written
    since the last digest (each once, however often it was written), replaces their old hashes in
    the sum with the new ones, and adds ``revision * revision_constant``. A key's prefix and hash
    live in one ``_Item``, so a rehash is one lookup and two attribute writes.

    ``head`` is the item encoding's prefix up to the key's length: the domain prefix, the encoded
    tag and the key's type byte (``S``); an item hash is ``int_digest(head + len(key) + key + "S" +
    len(value) + value + "I" + len(str(mod_revision)) + str(mod_revision))`` (digest.item_hash's
    bytes for a (str, str, str, int) item)."""

    def __init__(self, head: bytes, revision_constant: int, int_digest: Callable[[bytes], int]) -> None:
        self.head = head
        self.revision_constant = revision_constant
        self.int_digest = int_digest
        self.items: dict[str, _Item] = {}
        self.total = 0  # sum of the items' hashes, reduced mod 2**128 only in a digest's bytes
        self.dirty: set[str] = set()  # keys written since the last digest

    def _prefix(self, key: str) -> bytes:
        """``key``'s item encoding up to the value: head, length, key, ``S``."""
        kb = key.encode("utf-8")
        return b"".join([self.head, _length(len(kb)), kb, b"S"])

    def _item(self, key: str) -> _Item:
        item = self.items.get(key)
        if item is None:
            item = self.items[key] = _Item(self._prefix(key))
        return item

    def _hash(self, prefix: bytes, value: str, mod_revision: int) -> int:
        vb = value.encode("utf-8")
        nb = str(mod_revision).encode("ascii")
        return self.int_digest(b"".join([prefix, _length(len(vb)), vb, b"I", _length(len(nb)), nb]))

    def item_hash(self, key: str, value: str, mod_revision: int) -> int:
        """The hash of one ``(key, value, mod_revision)`` item."""
        return self._hash(self._prefix(key), value, mod_revision)

    def reset(self, entries: dict[str, tuple[str, int]]) -> None:
        """Start over from a whole store (after a snapshot is loaded)."""
        self.items = {}
        total = 0
        for key, (value, mod_revision) in entries.items():
            item = self._item(key)
            item.hash = self._hash(item.prefix, value, mod_revision)
            total += item.hash
        self.total = total
        self.dirty = set()

    def written(self, key: str) -> None:
        """``key`` was (re)written: its hash waits for the next digest."""
        self.dirty.add(key)

    def deleted(self, key: str) -> None:
        """``key`` left the store."""
        self.dirty.discard(key)
        item = self.items.pop(key, None)
        if item is not None:
            self.total -= item.hash

    def digest(self, entries: dict[str, tuple[str, int]], revision: int) -> bytes:
        """The 16-byte state digest of ``entries`` (the store this object follows) at ``revision``."""
        dirty = self.dirty
        if dirty:
            total = self.total
            for key in dirty:
                value, mod_revision = entries[key]
                item = self._item(key)
                h = self._hash(item.prefix, value, mod_revision)
                total += h - item.hash
                item.hash = h
            self.total = total
            dirty.clear()
        return ((self.total + revision * self.revision_constant) & MASK).to_bytes(16, "little")


# True when this module runs as the mypyc-compiled extension (its __file__ is the shared object).
COMPILED: Final = not __file__.endswith(".py")
