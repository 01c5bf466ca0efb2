"""The ``clustertrace`` Spark data source: contract schemas, many runs at once, one partition per
file, torn tails read up to the last whole batch and counted."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from clusterlab.harness.recorder import SCHEMAS, TABLES
from clusterlab.harness.trace import open_run, read_stream
from clusterlab.spark.source import TraceSourceError, find_runs
from pyspark.sql import functions as F

from tests.golden.plant import copy_run, tear

pytestmark = pytest.mark.spark


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_fixed_size_binary(t) or pa.types.is_binary(t):
        return "binary"
    return {
        pa.string(): "string",
        pa.int16(): "smallint",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.bool_(): "boolean",
    }[t]


def test_every_table_has_the_contract_columns_and_types(spark, sim_run: Path) -> None:
    for table in TABLES:
        df = spark.read.format("clustertrace").option("table", table).load(str(sim_run))
        types = dict(df.dtypes)
        for f in SCHEMAS[table]:
            assert types.get(f.name) == _spark_type(f.type), (table, f.name, types.get(f.name))
        assert types["run_id"] == "string" and types["file"] == "string"
        assert df.count() == open_run(sim_run).tables[table].num_rows, table
    log = spark.read.format("clustertrace").option("table", "log").load(str(sim_run))
    assert {"entry_digest", "cluster_session_id", "body"} <= set(log.columns)
    # The log's entry digest is the one the services record in `applied`.
    applied = spark.read.format("clustertrace").option("table", "applied").load(str(sim_run))
    joined = applied.where("entry_type != 'Snapshot'").join(
        log.select("log_position", "entry_digest"), ["log_position", "entry_digest"], "left_anti"
    )
    assert joined.count() == 0


def test_many_runs_one_partition_per_file(spark, sim_run: Path, tmp_path: Path) -> None:
    a = copy_run(sim_run, tmp_path / "a", "run-a")
    b = copy_run(sim_run, tmp_path / "b", "run-b")
    per_run = open_run(sim_run).applied.num_rows
    df = spark.read.format("clustertrace").option("table", "applied").load(f"{a},{b}")
    counts = {r["run_id"]: r["count"] for r in df.groupBy("run_id").count().collect()}
    assert counts == {"run-a": per_run, "run-b": per_run}
    files = len(list((a / "applied").glob("*.arrow"))) * 2
    assert df.rdd.getNumPartitions() == 1  # small files are packed into one partition by default
    per_file = spark.read.format("clustertrace").option("table", "applied").option("maxPartitionBytes", 0)
    per_file = per_file.load(f"{a},{b}")
    assert per_file.rdd.getNumPartitions() == files
    assert per_file.count() == 2 * per_run
    # A parent directory of runs expands to its runs.
    parent = spark.read.format("clustertrace").option("table", "applied").load(str(tmp_path))
    assert parent.count() == 2 * per_run


def test_torn_tail_is_tolerated_and_counted(spark, sim_run: Path, tmp_path: Path) -> None:
    run = copy_run(sim_run, tmp_path / "torn", "run-torn")
    victim = max((run / "messages").glob("*.arrow"), key=lambda p: p.stat().st_size)
    tear(victim, 0.5)
    expected = read_stream(victim)
    assert expected.error is not None and expected.table.num_rows > 0  # really cut inside a batch
    msgs = spark.read.format("clustertrace").option("table", "messages").load(str(run))
    got = msgs.where(F.col("file") == str(victim)).count()
    assert got == expected.table.num_rows
    files = spark.read.format("clustertrace").option("table", "files").load(str(run))
    torn = files.where("torn").collect()
    assert [r["file"] for r in torn] == [str(victim)]
    assert torn[0]["bytes_ignored"] == expected.bytes_ignored > 0
    assert torn[0]["rows"] == expected.table.num_rows


def test_runs_are_found_up_to_three_levels_down_and_not_inside_a_run(tmp_path: Path) -> None:
    """A sweep directory keeps its runs as runs/<run>/trace; a run's own folders are not searched."""
    for run in ("sweep/runs/n3-s1/trace", "sweep/runs/n3-s2/trace", "one/trace"):
        (tmp_path / run).mkdir(parents=True)
        (tmp_path / run / "run.json").write_text("{}")
    (tmp_path / "one" / "trace" / "nested" / "trace").mkdir(parents=True)
    (tmp_path / "one" / "trace" / "nested" / "trace" / "run.json").write_text("{}")
    (tmp_path / "deep" / "a" / "b" / "c" / "d").mkdir(parents=True)
    (tmp_path / "deep" / "a" / "b" / "c" / "d" / "run.json").write_text("{}")
    assert find_runs(str(tmp_path / "sweep")) == [str(tmp_path / f"sweep/runs/n3-s{i}/trace") for i in (1, 2)]
    assert find_runs(str(tmp_path / "one")) == [str(tmp_path / "one" / "trace")]
    assert find_runs(str(tmp_path / "sweep" / "runs" / "n3-s2")) == [str(tmp_path / "sweep/runs/n3-s2/trace")]
    with pytest.raises(TraceSourceError, match="holds no runs"):
        find_runs(str(tmp_path / "deep"))  # four levels down: not searched


def test_bad_paths_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(TraceSourceError, match="no such directory"):
        find_runs(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceSourceError, match="not a run directory"):
        find_runs(str(tmp_path / "empty"))


def test_unknown_table_is_refused(spark, sim_run: Path) -> None:
    with pytest.raises(Exception, match="unknown table 'nope'"):
        spark.read.format("clustertrace").option("table", "nope").load(str(sim_run)).count()


def test_large_files_are_split_into_stripes_of_batches(spark, sim_run: Path) -> None:
    """With a small maxPartitionBytes every file is striped by record batch; every row is read once."""
    biggest = max((sim_run / "messages").glob("*.arrow"), key=lambda p: p.stat().st_size)
    size = biggest.stat().st_size
    df = (
        spark.read.format("clustertrace")
        .option("table", "messages")
        .option("maxPartitionBytes", size // 4)
        .load(str(sim_run))
    )
    assert df.rdd.getNumPartitions() > len(list((sim_run / "messages").glob("*.arrow")))
    run = open_run(sim_run)
    assert df.count() == run.messages.num_rows
    keys = df.select("process", "incarnation", "seq").distinct().count()
    assert keys == run.messages.num_rows  # no batch read twice


def test_columns_option_projects_at_the_source(spark, sim_run: Path) -> None:
    """``columns`` gives exactly those columns, in that order, with the same values as a full read."""
    full = spark.read.format("clustertrace").option("table", "log").load(str(sim_run))
    narrow = (
        spark.read.format("clustertrace")
        .option("table", "log")
        .option("columns", "log_position, entry_digest")
        .load(str(sim_run))
    )
    assert narrow.columns == ["log_position", "entry_digest"]
    assert narrow.exceptAll(full.select("log_position", "entry_digest")).count() == 0
    assert narrow.count() == full.count() == open_run(sim_run).tables["log"].num_rows
    body = spark.read.format("clustertrace").option("table", "log").option("columns", "run_id,body").load(str(sim_run))
    assert body.where(F.col("body").isNotNull()).count() == full.where(F.col("body").isNotNull()).count() > 0
    with pytest.raises(Exception, match="no column 'nope'"):
        spark.read.format("clustertrace").option("table", "applied").option("columns", "seq,nope").load(str(sim_run))
