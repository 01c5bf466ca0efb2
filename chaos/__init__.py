"""The chaos harness: nemeses (nemesis.py) on either driver (target.py: LocalCluster or SimCluster),
seeded schedules (schedule.py), the named scenarios (scenarios.py), model-checked workloads
(workload.py), the online checker (checker.py), the runner behind ``clusterlab run`` and the pytest
plugin (runner.py), the local verdict on a recorded trace (verify.py), seeded random fault schedules
on the simulator (fuzz.py) and the guided ``clusterlab demo`` (demo.py)."""
