"""Replaying a committed log through today's consensus module and service reproduces the digests
the members recorded; a broken log is reported with its position, not raised."""

from __future__ import annotations

from pathlib import Path

from clusterlab.harness.replay import describe_entry, replay_log
from clusterlab.harness.services import SERVICES
from clusterlab.harness.trace import open_run


def test_replay_reproduces_every_recorded_state(sim_run: Path) -> None:
    run = open_run(sim_run)
    replay = replay_log(run.log.to_pylist(), SERVICES["kv"])
    assert replay.error is None
    assert replay.end_position == max(run.log.column("log_position").to_pylist())
    recorded: dict[int, set[tuple[bytes, bytes]]] = {}
    for r in run.applied.to_pylist():
        if r["entry_type"] != "Snapshot":
            recorded.setdefault(r["log_position"], set()).add((r["entry_digest"], r["state_digest"]))
    assert {e.log_position for e in replay.entries} == set(recorded)
    for e in replay.entries:
        assert recorded[e.log_position] == {(e.entry_digest, e.state_digest)}, e.log_position
    # The consensus module's log adapter opened the same sessions the service saw, at every position.
    assert replay.session_mismatches == []
    assert any(e.cm_sessions for e in replay.entries)


def test_a_gap_in_the_log_is_reported_with_its_position(sim_run: Path) -> None:
    rows = open_run(sim_run).log.to_pylist()
    del rows[10]
    replay = replay_log(rows, SERVICES["kv"])
    assert replay.error is not None
    assert f"starts at {rows[10]['log_position'] - len(rows[10]['entry'])}" in replay.error
    assert replay.entries == []


def test_a_damaged_entry_is_reported_with_its_position(sim_run: Path) -> None:
    rows = open_run(sim_run).log.to_pylist()
    entry = bytearray(rows[20]["entry"])
    entry[40] ^= 0xFF  # inside the payload: the frame's checksum no longer matches
    rows[20]["entry"] = bytes(entry)
    replay = replay_log(rows, SERVICES["kv"])
    start = rows[20]["log_position"] - len(entry)
    assert replay.error is not None and f"entry at {start}..{rows[20]['log_position']}" in replay.error


def test_describe_entry_decodes_the_framed_bytes(sim_run: Path) -> None:
    rows = open_run(sim_run).log.to_pylist()
    first = rows[0]
    assert describe_entry(first["entry"], first["log_position"] - len(first["entry"])).startswith(
        "NewLeadershipTermEvent"
    )
