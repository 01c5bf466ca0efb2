"""The ``spark-submit`` entry point: runs a ``clusterlab`` command (``check``, ``golden verify``)
inside the session spark-submit created, on whatever master it was given.

    pip wheel --no-deps . -w dist && cp dist/clusterlab-*.whl clusterlab-py.zip
    spark-submit --master spark://HOST:7077 --py-files clusterlab-py.zip \\
        clusterlab/cli/spark_job.py check /shared/runs/run-1 /shared/runs/run-2

The driver needs clusterlab installed (it plans the jobs). Executors get the package (its wheel) with
``--py-files`` and import only ``clusterlab.spark.source`` and ``clusterlab.harness.arrow_stream``
from it (pyarrow and pyspark, nothing else); they read the trace files at the same paths, so put runs
on a filesystem every node mounts.
"""

from __future__ import annotations

import sys

from clusterlab.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
