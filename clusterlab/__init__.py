"""clusterlab: the Aeron Cluster protocol in Python over ZeroMQ, with a record-replay chaos harness.

The repository keeps one top-level folder per layer; installed, they are subpackages of this one
(setup.py maps ``clusterlab.core`` to ``core/`` and so on), so nothing named ``core`` or ``harness``
lands in site-packages:

* ``clusterlab.core``     the sans-IO protocol (codec, consensus, archive, service, client) and the
                          ZeroMQ runtime that runs it as processes
* ``clusterlab.harness``  LocalCluster, SimCluster, the recorder and trace readers, sample services,
                          the safety properties
* ``clusterlab.chaos``    nemeses, schedules, scenarios, workloads, online checker, pytest plugin targets,
                          the local verdict and the HTML report
* ``clusterlab.spark``    the Spark engine: the trace data source, the check job, linearizability and
                          sweeps on executors
* ``clusterlab.golden``   golden-trace regression: bless, verify, regenerate, coverage, the golden diff
* ``clusterlab.cli``, ``clusterlab.pytest_plugin``  the top layer: the ``clusterlab`` command and the
                          pytest plugin (this folder)

Layers only point down (pyproject.toml's import-linter contracts, ``make lint``).
"""

__version__ = "0.1.0"

# Before any mypyc-compiled module loads: their sources instead if stale or CLUSTERLAB_NO_MYPYC is set.
from clusterlab import compiled as _compiled  # noqa: F401

# The repository's folders installed as subpackages, lowest layer first (setup.py maps each; its own copy of
# this tuple, read before clusterlab can be imported, is held equal by tests/unit/test_namespace.py).
LAYERS = ("core", "harness", "chaos", "spark", "golden")
