"""PySpark jobs over clusterlab traces: the ``clustertrace`` data source, the run check, the golden diff."""
