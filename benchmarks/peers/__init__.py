"""Peer systems for the cluster benchmark (``benchmarks.cluster_bench``).

* :mod:`benchmarks.peers.pysyncobj_node` — one PySyncObj node process (a replicated dict) with a
  small control socket that runs the shared load driver inside the process (PySyncObj has no
  client protocol: its callers are threads of a member process).
* :mod:`benchmarks.peers.raw_zmq` — the raw ZeroMQ replication bound: one leader process and two
  follower processes appending to files, the client acked at quorum, no protocol beyond that.
* :mod:`benchmarks.peers.common` — what every system shares: free ports, process start/stop by PID,
  the control request/reply, and the load driver (saturation, paced latency, failover probe).
"""
