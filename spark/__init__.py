"""PySpark jobs over clusterlab traces: the ``clustertrace`` data source, the run check, linearizability and
sweeps on executors, and the Spark it runs on (local, a Spark Connect server, a standalone cluster)."""
