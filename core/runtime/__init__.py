"""The ZeroMQ runtime: the only code in clusterlab that does IO (docs/architecture.md "Runtime").

* ``config``    cluster.json: members, endpoints (ipc in the cluster directory, or tcp with
                OS-assigned ports), service, timeouts
* ``transport`` framing (``[channel u8][src int16]`` + payload), socket options, links, egress cache
* ``runner``    the duty cycle (poll until the next deadline, drain, do_work), signals, process log
* ``clock``     monotonic clock with a chaos offset
* ``gate``      the chaos gate on every member-to-member send (loss, delay per directed link)
* ``node``      ``python -m clusterlab.core.runtime.node``: a member's ConsensusModule and archive
* ``service``   ``python -m clusterlab.core.runtime.service``: a member's ClusteredServiceAgent
* ``control``   the harness side of the control sockets (status, gate rules, cluster control)
* ``client``    a ClusterClient on ZeroMQ sockets, driven by blocking calls
* ``probe``     raw frames to a socket (tests, chaos)
"""
