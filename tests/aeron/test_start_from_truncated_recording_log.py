"""Port of Aeron's ``StartFromTruncatedRecordingLogTest`` (aeron-system-tests/src/test/java/io/aeron/cluster)
on real processes (LocalCluster, kv service): after a snapshot every member's recording log is cut down to
its last TERM entry (committed) plus the latest service and consensus-module snapshots, as Aeron's
``truncateRecordingLogAndDeleteMarkFiles`` does (we have no mark files; Aeron also deletes the archive
files of recordings the new log no longer names, ours stay and are never read)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from clusterlab.core.codec.enums import ToggleState
from clusterlab.core.consensus.context import SERVICE_ID_CONSENSUS_MODULE
from clusterlab.core.consensus.recording_log import RECORDING_LOG_FILE_NAME, RecordingLog
from clusterlab.core.runtime.storage import FileStorage
from clusterlab.harness.local import LocalCluster

from tests.cluster.helpers import LEADER_S, running_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def truncate_recording_log(member_dir: Path, scratch: Path) -> None:
    """Aeron's truncateRecordingLogAndDeleteMarkFiles: the last TERM (with its end) and the latest
    service 0 and consensus-module snapshots, written to a new file that replaces the old one."""
    shutil.rmtree(scratch, ignore_errors=True)
    with RecordingLog(FileStorage(member_dir), create_new=False) as old:
        last_term = old.find_last_term()
        assert last_term is not None, f"no term found in {member_dir}"
        snapshots = [old.latest_snapshot(0), old.latest_snapshot(SERVICE_ID_CONSENSUS_MODULE)]
        with RecordingLog(FileStorage(scratch)) as new:
            new.append_term(
                last_term.recording_id,
                last_term.leadership_term_id,
                last_term.term_base_log_position,
                last_term.timestamp,
            )
            new.commit_log_position(last_term.leadership_term_id, last_term.log_position)
            for s in snapshots:
                assert s is not None
                new.append_snapshot(
                    s.recording_id, s.leadership_term_id, s.term_base_log_position, s.log_position, s.timestamp,
                    s.service_id,
                )  # fmt: skip
    shutil.copyfile(scratch / RECORDING_LOG_FILE_NAME, member_dir / RECORDING_LOG_FILE_NAME)
    with RecordingLog(FileStorage(member_dir), create_new=False) as copied:
        assert len(copied.entries()) <= 3


def restart_cluster_with_truncated_recording_log(c: LocalCluster, scratch: Path, snapshots: int) -> None:
    leader = c.await_leader(LEADER_S)
    assert c.control("snapshot")
    c.await_condition(
        lambda: all((n := c.counters(m)) is not None and n.snapshot_count >= 1 for m in range(3)), 30.0, "snapshots"
    )
    neutral = int(ToggleState.NEUTRAL)
    c.await_condition(
        lambda: (n := c.counters(leader)) is not None and n.control_toggle == neutral, 30.0, "neutral control toggle"
    )
    c.stop(leader)
    for m in range(3):
        c.stop(m)
    for m in range(3):
        truncate_recording_log(c.member_dir(m), scratch / f"member-{m}-{snapshots}")
    for m in range(3):
        c.restart(m)


def test_should_be_able_to_start_cluster_from_truncated_recording_log(tmp_path: Path) -> None:
    """StartFromTruncatedRecordingLogTest.shouldBeAbleToStartClusterFromTruncatedRecordingLog: three
    rounds of snapshot, stop, truncate every recording log, restart; each time a leader is elected and
    the cluster takes messages. Stronger than Aeron's echo count: every earlier key is still there and
    revisions go on from where they were (nothing replayed twice, nothing lost)."""
    with running_cluster(tmp_path) as c:
        revision = 0
        for round_ in range(3):
            client = c.client()
            revision += 1
            assert client.put(f"before-{round_}", "v")["revision"] == revision
            client.close()
            restart_cluster_with_truncated_recording_log(c, tmp_path / "scratch", round_)
            c.await_leader(LEADER_S)
            client = c.client()
            for earlier in range(round_ + 1):
                assert client.get(f"before-{earlier}")["value"] == "v"
            for i in range(3):
                revision += 1
                assert client.put(f"after-{round_}-{i}", "w")["revision"] == revision
            client.close()
