"""Ports of Aeron's ``NodeStateFileTest`` onto clusterlab.core.consensus.node_state.NodeState (our own
small file format; see docs/aeron-parity.md for the two tests that depend on Aeron's format)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from clusterlab.core.consensus.node_state import NODE_STATE_FILE_NAME, NODE_STATE_VERSION, NodeState, NodeStateError
from clusterlab.core.runtime.storage import FileStorage


def test_should_create_if_create_new_true_and_file_does_not_exist(tmp_path: Path) -> None:
    """NodeStateFileTest.shouldCreateIfCreateNewTrueAndFileDoesNotExist"""
    assert list(tmp_path.iterdir()) == []
    NodeState.open(FileStorage(tmp_path)).close()
    assert (tmp_path / NODE_STATE_FILE_NAME).exists()


def test_should_have_null_candidate_term_id_on_initial_creation(tmp_path: Path) -> None:
    """NodeStateFileTest.shouldHaveNullCandidateTermIdOnInitialCreation"""
    assert NodeState.open(FileStorage(tmp_path)).candidate_term_id == -1


def test_should_persist_candidate_term_id(tmp_path: Path) -> None:
    """NodeStateFileTest.shouldPersistCandidateTermId"""
    candidate_term_id, timestamp_ms, log_position = 832234, 324234, 8923423
    NodeState.open(FileStorage(tmp_path)).update_candidate_term_id(candidate_term_id, log_position, timestamp_ms)
    state = NodeState.open(FileStorage(tmp_path))
    assert (state.candidate_term_id, state.timestamp, state.log_position) == (
        candidate_term_id,
        timestamp_ms,
        log_position,
    )


def test_should_throw_if_version_mismatch(tmp_path: Path) -> None:
    """NodeStateFileTest.shouldThrowIfVersionMismatch (major version + 1, checksum kept valid)."""
    NodeState.open(FileStorage(tmp_path)).close()
    path = tmp_path / NODE_STATE_FILE_NAME
    data = bytearray(path.read_bytes())
    struct.pack_into("<i", data, 4, NODE_STATE_VERSION + (1 << 16))
    struct.pack_into("<I", data, 32, zlib.crc32(bytes(data[:32])) & 0xFFFFFFFF)
    path.write_bytes(bytes(data))
    with pytest.raises(NodeStateError, match="incompatible"):
        NodeState.open(FileStorage(tmp_path))


def test_should_propose_new_max_term_id(tmp_path: Path) -> None:
    """NodeStateFileTest.shouldProposeNewMaxTermId"""
    state = NodeState.open(FileStorage(tmp_path))
    state.update_candidate_term_id(5, 10, 10)
    next_candidate_term_id = state.candidate_term_id + 1
    assert state.propose_max_candidate_term_id(next_candidate_term_id, 20, 20) == next_candidate_term_id
    too_low = state.candidate_term_id - 1
    assert state.propose_max_candidate_term_id(too_low, 30, 30) == next_candidate_term_id
    assert NodeState.open(FileStorage(tmp_path)).candidate_term_id == next_candidate_term_id
