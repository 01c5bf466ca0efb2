"""The chaos harness: nemeses (nemesis.py) on either driver (target.py: LocalCluster or SimCluster),
seeded schedules (schedule.py), the named scenarios (scenarios.py), model-checked workloads
(workload.py), the online checker (checker.py), the runner behind ``clusterlab run`` and the pytest
plugin (runner.py) and the local verdict on a recorded trace (verify.py)."""
