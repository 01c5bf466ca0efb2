"""clusterlab.core.atomic.write_atomically: the one way durable and shared files are replaced."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterlab.core.atomic import temp_path, write_atomically


@pytest.mark.parametrize("file_sync", [False, True])
def test_replaces_the_file_with_bytes_text_or_parts(tmp_path: Path, file_sync: bool) -> None:
    path = tmp_path / "state.json"
    write_atomically(path, b"old", file_sync=file_sync)
    assert path.read_bytes() == b"old"
    write_atomically(path, "new é", file_sync=file_sync)
    assert path.read_text(encoding="utf-8") == "new é"
    write_atomically(path, [b"a" * 70_000, b"", b"b"], file_sync=file_sync)
    assert path.read_bytes() == b"a" * 70_000 + b"b"
    assert not temp_path(path).exists()
    assert sorted(os.listdir(tmp_path)) == ["state.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "catalogue.json"
    write_atomically(path, b"committed")

    def parts() -> Iterator[bytes]:
        yield b"half of the new"
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, parts())
    assert path.read_bytes() == b"committed"
    assert not temp_path(path).exists()


def test_temp_path_is_beside_the_file() -> None:
    assert temp_path(Path("/d/node-state.dat")) == Path("/d/node-state.dat.tmp")
