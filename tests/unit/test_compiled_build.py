"""The mypyc build (setup.py COMPILED, clusterlab/compiled.py) against its pure-Python fallback.

The compiled modules and their sources must run the same simulation to the same bytes (same seed,
same messages at the same times), CLUSTERLAB_NO_MYPYC must run every one of them from source, and a
source edited since the build must not be shadowed by its stale extension."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from clusterlab import compiled

# A leader under load, killed half-way: elections, replication, the archive, sessions and the network.
RUN = """
from clusterlab import compiled
from clusterlab.core.consensus.context import MS, SECOND
from clusterlab.harness.sim import SimCluster
import clusterlab.core.consensus.module as module

with SimCluster(members=3, seed=11) as c:
    c.await_leader(30 * SECOND)
    for i in range(150):
        if i == 75:
            c.kill(c.leader_id() or 0)
        if c.leader_id() is not None:
            c.offer_batch([b"entry-%d" % i] * 5)
        c.run_for(10 * MS)
    print(compiled.BUILD, module.__file__.endswith(".py"), c.message_digest(), c.now_ns)
"""


def _run(code: str, *args: str, no_mypyc: bool = False) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERLAB_NO_MYPYC"}
    if no_mypyc:
        env["CLUSTERLAB_NO_MYPYC"] = "1"
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, *args], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_compiled_and_source_builds_run_the_same_simulation() -> None:
    state, from_source, digest, now_ns = _run(RUN)  # without CLUSTERLAB_NO_MYPYC, whatever this process has
    fb_state, fb_from_source, fb_digest, fb_now_ns = _run(RUN, no_mypyc=True)
    assert state in ("compiled", "stale", "none")
    assert from_source == str(state != "compiled")  # the extension runs when the build is fresh
    assert fb_from_source == "True" and fb_state in ("disabled", "none")
    assert (digest, now_ns) == (fb_digest, fb_now_ns)  # byte for byte: same messages at the same times


def test_a_source_changed_since_the_build_runs_from_source(tmp_path: Path) -> None:
    record = tmp_path / "mypyc_build.json"
    if compiled.BUILD == "none":  # nothing compiled here: there is nothing to shadow
        assert compiled.select_build(record) == "none"
        return
    code = """
import json, sys
from pathlib import Path
from clusterlab import compiled
record = json.loads(compiled.BUILD_RECORD.read_text())
record["clusterlab.core.consensus.module_state"]["sha256"] = "0" * 64  # as if edited since
Path(sys.argv[1]).write_text(json.dumps(record))
state = compiled.select_build(Path(sys.argv[1]))
import clusterlab.core.consensus.module as module, clusterlab.core.archive.recording as recording
print(state, module.__file__.endswith(".py"), recording.__file__.endswith(".py"))
"""
    assert _run(code, str(record)) == ["stale", "True", "True"]  # all of them: they call each other natively
    assert "clusterlab.core.consensus.module_state" in json.loads(record.read_text())
