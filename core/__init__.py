"""clusterlab core: the Aeron Cluster protocol, sans-IO (codec, consensus, archive, service, client)
plus the ZeroMQ runtime that runs it as real processes (clusterlab.core.runtime, the only package that does IO)."""

__version__ = "0.1.0"
