"""clusterlab: the Aeron Cluster protocol in Python over ZeroMQ, with a record-replay chaos harness.

The repository keeps one top-level folder per layer; installed, they are subpackages of this one
(setup.py maps ``clusterlab.core`` to ``core/`` and so on), so nothing named ``core`` or ``harness``
lands in site-packages:

* ``clusterlab.core``     the sans-IO protocol (codec, consensus, archive, service, client) and the
                          ZeroMQ runtime that runs it as processes
* ``clusterlab.harness``  LocalCluster, SimCluster, the recorder and trace readers, sample services,
                          the safety properties
* ``clusterlab.chaos``    nemeses, schedules, scenarios, workloads, online checker, pytest plugin targets
* ``clusterlab.golden``   the Spark checks and golden-trace regression, the HTML report
* ``clusterlab.cli``, ``clusterlab.pytest_plugin``  the top layer: the ``clusterlab`` command and the
                          pytest plugin (this folder)

Layers only point down (pyproject.toml's import-linter contracts, ``make lint``).
"""

__version__ = "0.1.0"

# Before any mypyc-compiled module loads: their sources instead if stale or CLUSTERLAB_NO_MYPYC is set.
from clusterlab import compiled as _compiled  # noqa: F401
