"""The trace's digest functions (core/codec/digests.py): which one a run used, and what they compute."""

from __future__ import annotations

import hashlib

import pytest
import xxhash
from clusterlab.core.codec.digests import (
    ENTRY_DIGEST_NAME,
    entry_digest,
    entry_digest_name_of_run,
    entry_digest_named,
    entry_digest_of_run,
    records_digest,
)


def test_entry_digest_is_xxh3_128_of_the_bytes() -> None:
    data = b"\x01" * 100
    assert entry_digest(data) == xxhash.xxh3_128(data).digest()
    assert len(entry_digest(data)) == 16
    assert entry_digest(data) != entry_digest(data[:-1])


def test_a_run_names_its_digest_and_an_older_run_without_the_key_used_blake2b() -> None:
    data = b"framed entry"
    assert entry_digest_name_of_run({"trace_format": {"entry_digest": ENTRY_DIGEST_NAME}}) == "xxh3-128"
    assert entry_digest_of_run({"trace_format": {"entry_digest": "xxh3-128"}})(data) == entry_digest(data)
    legacy = hashlib.blake2b(data, digest_size=16).digest()
    assert entry_digest_of_run({"trace_format": {"tables": []}})(data) == legacy
    assert entry_digest_of_run({})(data) == legacy
    with pytest.raises(ValueError, match=r"unknown entry digest 'md5' \(known: xxh3-128, blake2b-128\)"):
        entry_digest_named("md5")


def test_records_digest_depends_on_how_the_records_are_split() -> None:
    assert records_digest([b"ab", b"c"]) != records_digest([b"a", b"bc"])
    assert records_digest([b"ab", b"c"]) == records_digest(iter([b"ab", b"c"]))
