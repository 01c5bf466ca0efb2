"""A Spark standalone cluster on this machine (``clusterlab spark start --workers N``): a master and
workers, each its own JVM, recorded and stopped by PID; and the zip of clusterlab's sources a session
ships to a cluster's executors. The jobs on such a cluster (checks that pass and fail, a sweep, with
executors that do not have clusterlab) are ci/spark-cluster's, run by ci/suite."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from clusterlab.harness.local import pid_alive
from clusterlab.spark import standalone
from clusterlab.spark.ship import clusterlab_zip, remote_executors

from clusterlab.cli import main

pytestmark = pytest.mark.spark


def test_a_standalone_cluster_starts_and_stops_by_pid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLUSTERLAB_SPARK_STATE", str(tmp_path / "state"))
    assert main(["spark", "status"]) == 1
    with pytest.raises(SystemExit) as refused:  # out of range: argparse's exit 2, nothing started
        main(["spark", "start", "--workers", "-1"])
    assert refused.value.code == 2 and standalone.status() is None
    info = None
    try:
        assert main(["spark", "start", "--workers", "1", "--worker-memory", "512m"]) == 0
        info = standalone.status()
        assert info is not None and info.url.startswith("spark://127.0.0.1:")
        assert len(info.worker_pids) == 1 and all(pid_alive(p) for p in info.pids())
        recorded = json.loads((tmp_path / "state" / "cluster.json").read_text())
        assert recorded["master_pid"] == info.master_pid
        assert standalone.start(workers=1) == info  # already up: the same cluster, nothing started
        assert main(["spark", "status"]) == 0
    finally:
        assert main(["spark", "stop"]) == 0
    assert info is not None and not any(pid_alive(p) for p in info.pids())
    assert standalone.status() is None and not (tmp_path / "state" / "cluster.json").exists()
    assert main(["spark", "stop"]) == 1  # nothing left to stop


def test_the_shipped_zip_holds_every_layer_as_installed() -> None:
    names = set(zipfile.ZipFile(clusterlab_zip()).namelist())
    for module in (
        "clusterlab/__init__.py",
        "clusterlab/compiled.py",
        "clusterlab/cli/__init__.py",
        "clusterlab/testing/mutants.py",
        "clusterlab/core/consensus/module.py",
        "clusterlab/harness/arrow_stream.py",
        "clusterlab/chaos/sweep.py",
        "clusterlab/spark/source.py",
    ):
        assert module in names, module
    assert not [n for n in names if not n.endswith(".py")]  # sources only: no build record, no extensions


class _Conf:
    def __init__(self, master: str) -> None:
        self.master = master

    def get(self, key: str) -> str:
        assert key == "spark.master"
        return self.master


class _Session:
    def __init__(self, master: str) -> None:
        self.conf = _Conf(master)


@pytest.mark.parametrize(
    ("master", "remote"),
    [("local[2]", False), ("local[*]", False), ("local-cluster[2,1,1024]", True), ("spark://h:7077", True)],
)
def test_clusterlab_is_shipped_to_any_master_but_local(master: str, remote: bool) -> None:
    assert remote_executors(_Session(master)) is remote
