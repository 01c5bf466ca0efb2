"""NodeState: propose-max semantics, persistence across reopen, atomic updates, corrupt files refused."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from clusterlab.core.consensus.node_state import FILE_LENGTH, NODE_STATE_FILE_NAME, NodeState, NodeStateError
from clusterlab.core.runtime.storage import FileStorage


def test_fresh_node_state_starts_at_minus_one_and_is_written(tmp_path: Path) -> None:
    lines: list[str] = []
    ns = NodeState.open(FileStorage(tmp_path / "member"), log=lines.append)
    assert ns.candidate_term_id == -1
    assert (tmp_path / "member" / NODE_STATE_FILE_NAME).stat().st_size == FILE_LENGTH
    assert lines


def test_propose_max_writes_only_larger_and_returns_stored(tmp_path: Path) -> None:
    ns = NodeState.open(FileStorage(tmp_path))
    assert ns.propose_max_candidate_term_id(3, 640, 1000) == 3
    assert ns.propose_max_candidate_term_id(2, 960, 2000) == 3  # smaller: ignored
    assert ns.propose_max_candidate_term_id(3, 960, 2000) == 3  # equal: ignored
    assert (ns.log_position, ns.timestamp) == (640, 1000)  # untouched by the ignored proposals
    assert ns.propose_max_candidate_term_id(5, 1280, 3000) == 5
    assert (ns.candidate_term_id, ns.log_position, ns.timestamp) == (5, 1280, 3000)


def test_candidate_term_persists_across_reopen(tmp_path: Path) -> None:
    ns = NodeState.open(FileStorage(tmp_path))
    ns.propose_max_candidate_term_id(7, 4096, 123)
    ns.close()
    again = NodeState.open(FileStorage(tmp_path))
    assert (again.candidate_term_id, again.log_position, again.timestamp) == (7, 4096, 123)
    assert again.propose_max_candidate_term_id(6, 0, 0) == 7


def test_update_candidate_term_id_is_unconditional(tmp_path: Path) -> None:
    ns = NodeState.open(FileStorage(tmp_path))
    ns.propose_max_candidate_term_id(9, 0, 0)
    ns.update_candidate_term_id(4, 64, 5)
    assert NodeState.open(FileStorage(tmp_path)).candidate_term_id == 4


def test_update_is_atomic_leftover_temp_ignored(tmp_path: Path) -> None:
    ns = NodeState.open(FileStorage(tmp_path))
    ns.propose_max_candidate_term_id(2, 0, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [NODE_STATE_FILE_NAME]
    # A crash after writing the temp file but before the rename: the old value stands.
    (tmp_path / (NODE_STATE_FILE_NAME + ".tmp")).write_bytes(b"half")
    assert NodeState.open(FileStorage(tmp_path)).candidate_term_id == 2
    assert not (tmp_path / (NODE_STATE_FILE_NAME + ".tmp")).exists()


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda b: b[:-1], "39 bytes, expected 40"),
        (lambda b: b + b"\x00", "41 bytes"),
        (lambda b: b"XXXX" + b[4:], "bad magic"),
        (lambda b: b[:10] + bytes([b[10] ^ 1]) + b[11:], "checksum mismatch"),
        (lambda b: b"", "0 bytes"),
    ],
)
def test_corrupt_file_is_refused_with_a_clear_error(tmp_path: Path, damage, match: str) -> None:
    ns = NodeState.open(FileStorage(tmp_path))
    ns.propose_max_candidate_term_id(3, 0, 0)
    path = tmp_path / NODE_STATE_FILE_NAME
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(NodeStateError, match=match) as info:
        NodeState.open(FileStorage(tmp_path))
    message = str(info.value)
    assert str(path) in message and "delete the file" in message and "vot" in message


def test_incompatible_major_version_is_refused(tmp_path: Path) -> None:
    NodeState.open(FileStorage(tmp_path))
    path = tmp_path / NODE_STATE_FILE_NAME
    raw = bytearray(path.read_bytes())
    struct.pack_into("<i", raw, 4, 2 << 16)
    struct.pack_into("<I", raw, 32, zlib.crc32(bytes(raw[:32])))
    path.write_bytes(bytes(raw))
    with pytest.raises(NodeStateError, match="incompatible"):
        NodeState.open(FileStorage(tmp_path))
