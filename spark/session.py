"""The Spark session the jobs run on: embedded ``local[*]`` by default, any master by option."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from clusterlab.spark.ship import ship_clusterlab
from clusterlab.spark.source import ClusterTraceDataSource
from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
LOG4J = Path(__file__).with_name("log4j2.properties")


def spark_session_is_running() -> bool:
    """Whether this process already has an active Spark session: ``spark_session`` would return it
    (getOrCreate), so a caller that did not start it must not stop it (a pytest worker's shared one)."""
    return SparkSession.getActiveSession() is not None


def spark_session(
    master: str | None = None, app_name: str = "clusterlab", *, remote: str | None = None
) -> SparkSession:
    """A Spark session with the ``clustertrace`` source registered.

    ``remote`` (``sc://host:port``, or ``$CLUSTERLAB_SPARK_REMOTE`` when no master is given): a Spark
    Connect session on that server (``clusterlab spark start``). Else ``master`` None:
    ``$CLUSTERLAB_SPARK_MASTER`` or ``local[*]``; under ``spark-submit`` the submitted master wins
    (getOrCreate returns its session). Each process gets its own scratch and warehouse directory, so
    parallel pytest workers never share one."""
    remote = remote or (None if master else os.environ.get("CLUSTERLAB_SPARK_REMOTE"))
    if remote:
        spark = SparkSession.builder.remote(remote).getOrCreate()
        ship_clusterlab(spark)  # when the server's executors are a cluster's (before the source's pickle)
        spark.dataSource.register(ClusterTraceDataSource)
        return spark
    master = master or os.environ.get("CLUSTERLAB_SPARK_MASTER")
    if master is None and os.environ.get("PYSPARK_GATEWAY_PORT"):
        # Under spark-submit: the JVM exists with the submitted master and settings; use them as given.
        spark = SparkSession.builder.appName(app_name).getOrCreate()
        ship_clusterlab(spark)
        spark.dataSource.register(ClusterTraceDataSource)
        return spark
    master = master or DEFAULT_MASTER
    # Python workers run this interpreter (the one with pyarrow and clusterlab), not `python3`.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Bind the embedded Spark to loopback (no other address is needed, nor wanted, on this machine).
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    scratch = tempfile.mkdtemp(prefix="clusterlab-spark-")
    atexit.register(shutil.rmtree, scratch, True)  # Spark empties it on stop; the directory goes at exit
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", os.environ.get("CLUSTERLAB_SPARK_PARTITIONS", "8"))
        .config("spark.local.dir", scratch)
        .config("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse"))
        .config("spark.driver.memory", os.environ.get("CLUSTERLAB_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # The check caches its views; building compressed column buffers cost more than they saved
        # (medium bench, warm session: 13 checks in 28-37 s uncompressed, 46-80 s compressed).
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # A cluster's executors import clusterlab from the zip this sends; it must be on the path before the
    # source is registered (its pickle carries the Python includes of that moment).
    ship_clusterlab(spark)
    spark.dataSource.register(ClusterTraceDataSource)
    return spark
