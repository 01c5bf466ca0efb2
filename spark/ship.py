"""Python code the executors need, sent to them as zips on their import path: nothing is installed or
copied by hand on a Spark cluster's nodes.

* :func:`ship_clusterlab`: clusterlab itself (its ``.py`` sources, every layer), for a session whose
  executors may lack it: any master that is not ``local``. The executors' data source reader, the
  linearizability judge and a sweep's simulator runs import it from the zip. The zip holds sources
  only: on executors the mypyc-compiled modules run interpreted (clusterlab/compiled.py: no build
  record in a zip).
* :func:`ship_package`: a user's package (a workload or service outside any installed package).

Executors still need what clusterlab imports from outside (pyarrow, pyspark's own Python), as every
Spark node needs its Python; the Python they run is ``spark.pyspark.python`` (``PYSPARK_PYTHON``)."""

from __future__ import annotations

import tempfile
import zipfile
from importlib import import_module
from pathlib import Path
from typing import Any

from clusterlab import LAYERS

_ZIPS: dict[str, Path] = {}  # what was zipped in this process: package directory -> its zip
_SENT: set[tuple[str, str]] = set()  # (session, zip) pairs already sent


def zip_package(package: Path, top: str) -> Path:
    """A zip of the ``.py`` files under ``package``, each at ``top/<relative path>`` (built once per
    process)."""
    key = f"{package}:{top}"
    if key not in _ZIPS:
        zipped = Path(tempfile.mkdtemp(prefix="clusterlab-pyfiles-")) / f"{top.replace('/', '-')}.zip"
        with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(package.rglob("*.py")):
                z.write(f, str(Path(top) / f.relative_to(package)))
        _ZIPS[key] = zipped
    return _ZIPS[key]


def clusterlab_zip() -> Path:
    """One zip of clusterlab's sources, laid out as installed (``clusterlab/core/...``), wherever the
    layers live (an editable install maps ``clusterlab.core`` to the repository's ``core/``)."""
    key = "clusterlab"
    if key not in _ZIPS:
        root = Path(import_module("clusterlab").__file__ or "").parent
        zipped = Path(tempfile.mkdtemp(prefix="clusterlab-pyfiles-")) / "clusterlab.zip"
        with zipfile.ZipFile(zipped, "w", zipfile.ZIP_DEFLATED) as z:
            for f in sorted(root.rglob("*.py")):  # clusterlab/ itself: cli, testing, the plugin
                z.write(f, f"clusterlab/{f.relative_to(root)}")
            for layer in LAYERS:
                where = Path(next(iter(import_module(f"clusterlab.{layer}").__path__)))
                for f in sorted(where.rglob("*.py")):
                    z.write(f, f"clusterlab/{layer}/{f.relative_to(where)}")
        _ZIPS[key] = zipped
    return _ZIPS[key]


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (its executors are the server's)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _session_key(spark: Any) -> str:
    return str(spark.session_id) if is_connect(spark) else str(spark.sparkContext.applicationId)


def send_zip(spark: Any, zipped: Path) -> None:
    """Put ``zipped`` on the import path of ``spark``'s executors (once per session)."""
    key = (_session_key(spark), str(zipped))
    if key in _SENT:
        return
    if is_connect(spark):
        spark.addArtifacts(str(zipped), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(zipped))
    _SENT.add(key)


def remote_executors(spark: Any) -> bool:
    """Whether ``spark``'s executors run outside this machine's ``local`` mode, so may lack clusterlab."""
    try:
        master = str(spark.conf.get("spark.master"))
    except Exception:  # a Connect server that does not say: assume a cluster
        return True
    return not master.startswith("local") or master.startswith("local-cluster")


def ship_clusterlab(spark: Any) -> bool:
    """Send clusterlab to ``spark``'s executors when they run on a cluster; whether it was sent."""
    if not remote_executors(spark):
        return False
    send_zip(spark, clusterlab_zip())
    return True


def ship_package(spark: Any, package: Path, top: str) -> None:
    """Send the package at ``package`` (imported as ``top``) to ``spark``'s executors."""
    send_zip(spark, zip_package(package, top))


__all__ = ["clusterlab_zip", "remote_executors", "send_zip", "ship_clusterlab", "ship_package", "zip_package"]
