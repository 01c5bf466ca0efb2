"""Determinism checks that replay a run's committed log (the trace's ``log`` table) into fresh
instances of its service (run.json's ``config.service``, built-in or ``package.module:factory``) and
compare their state digests with the live ones the members recorded (the ``applied`` table):

* ``snapshot-roundtrip``: every snapshot the log asks for (its snapshot actions, where the members
  took theirs) is restored into a fresh service, which follows the rest of the log; its digest must
  equal the live digest at the snapshot's position and at every later one. A snapshot that forgets
  state is caught even when no member restarted from it.
* ``replay-equivalence``: the whole log replayed into a fresh service in another process, started
  with a different ``PYTHONHASHSEED``, must reproduce the live digest at every position. A state
  that depends on the iteration order of hash-ordered sets or dicts of strings is caught, also in
  the simulator, where every member shares one process and one hash seed.

Each violation names the first diverging log position, the member(s) whose live digest differs,
and the callback that applied the entry. Both need only the trace directory, so ``clusterlab check
RUN`` runs them too. A run whose members run several services is not replayed (a single service is
replayed as service 0); a run without a committed log has nothing to replay and passes vacuously.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
from clusterlab.core.service.agent import AppliedEntry
from clusterlab.core.service.api import ClusteredService
from clusterlab.harness.trace import Run, TraceError, open_run

SNAPSHOT_ROUNDTRIP = "snapshot-roundtrip"
REPLAY_EQUIVALENCE = "replay-equivalence"
DETERMINISM_CHECKS = (SNAPSHOT_ROUNDTRIP, REPLAY_EQUIVALENCE)
REPLAY_TIMEOUT_S = 300.0  # the other process's replay; a loaded 2-core machine replays ~10k entries/s

CALLBACKS = {
    "SessionMessage": "on_session_message",
    "SessionOpen": "on_session_open",
    "SessionClose": "on_session_close",
    "Timer": "on_timer_event",
    "ClusterAction": "on_take_snapshot",
    "NewLeadershipTerm": "on_new_leadership_term_event",
    "MembershipChange": "(no callback)",
    "Snapshot": "on_start(snapshot)",
}

Live = dict[int, dict[int, bytes]]  # log position -> member -> live state digest (service 0)
Entry = tuple[int, str, bytes]  # (log position, entry type, state digest) of a replayed entry


def live_digests(applied: pa.Table) -> Live:
    """Service 0's state digest at every log position on every member (the entries' rows, not the
    ``Snapshot`` rows of restores; the first row per member and position)."""
    live: Live = {}
    columns = applied.select(["member_id", "service_id", "log_position", "entry_type", "state_digest"])
    for member, service, position, entry_type, digest in zip(*(c.to_pylist() for c in columns.columns), strict=True):
        if service == 0 and entry_type != "Snapshot":
            live.setdefault(position, {}).setdefault(member, digest)
    return live


def first_divergence(entries: Iterable[Entry], live: Live) -> str | None:
    """The first replayed entry whose digest differs from the live one of a member at its position,
    described; None when every position the members recorded agrees."""
    for position, entry_type, digest in entries:
        members = live.get(position, {})
        if len(set(members.values())) > 1:
            continue  # the members disagree among themselves: the agreement check names it
        differ = sorted(m for m, d in members.items() if d != digest)
        if differ:
            live_digest = members[differ[0]]
            return (
                f"log position {position}: member(s) {', '.join(map(str, differ))} hold {live_digest.hex()[:12]}, "
                f"the replay {digest.hex()[:12]} after {entry_type} ({CALLBACKS.get(entry_type, entry_type)})"
            )
    return None


def _service_of(run: Run) -> str | None:
    """The run's single service by name, None when its members run several (not replayed here)."""
    config = run.meta.get("config") or {}
    if config.get("services") and len(config["services"]) > 1:
        return None
    return str(config.get("service") or "kv")


def _factory(name: str) -> Callable[[], ClusteredService]:
    from clusterlab.harness.services import service_factory

    return service_factory(name)


def snapshot_roundtrip(run: Run, factory: Callable[[], ClusteredService]) -> list[str]:
    """The ``snapshot-roundtrip`` violations of ``run`` (see the module docstring): per snapshot, its
    first divergence."""
    from clusterlab.harness.replay import replay_log

    restored: dict[int, list[Entry]] = {}

    def on_restored(snapshot_position: int, e: AppliedEntry) -> None:
        restored.setdefault(snapshot_position, []).append((e.log_position, str(e.entry_type), e.state_digest))

    replay = replay_log(run.log.to_pylist(), factory, on_restored=on_restored)
    live = live_digests(run.applied)
    out = []
    for snapshot_position, entries in sorted(restored.items()):
        first = first_divergence(entries, live)
        if first is not None:
            out.append(f"snapshot at log position {snapshot_position} restored into a fresh service: {first}")
    if replay.error is not None:
        out.append(f"the replay of the committed log stopped: {replay.error}")
    return out


def replayed_digests(run_dir: Path | str) -> dict[str, Any]:
    """The whole committed log of ``run_dir`` replayed into a fresh service in this process: its
    entries as ``[position, entry type, digest hex]`` and the replay's error (what the other process
    of :func:`replay_equivalence` prints)."""
    from clusterlab.harness.replay import replay_log

    run = open_run(run_dir)
    service = _service_of(run)
    assert service is not None, "a run of several services is not replayed"
    replay = replay_log(run.log.to_pylist(), _factory(service))
    entries = [[e.log_position, e.entry_type, e.state_digest.hex()] for e in replay.entries]
    return {"entries": entries, "error": replay.error, "hash_seed": os.environ.get("PYTHONHASHSEED")}


def other_hash_seed(run: Run) -> int:
    """A ``PYTHONHASHSEED`` for the replaying process, different from this process's and from every
    member's recorded in run.json (deterministic per run)."""
    taken = {str(s) for s in (run.meta.get("hash_seeds") or {}).values()}
    taken.add(os.environ.get("PYTHONHASHSEED", ""))
    seed = zlib.crc32(str(run.meta.get("run_id", "")).encode()) % 4_000_000_000 + 1
    while str(seed) in taken:
        seed += 1
    return seed


def replay_equivalence(run: Run, timeout_s: float = REPLAY_TIMEOUT_S) -> list[str]:
    """The ``replay-equivalence`` violations of ``run`` (see the module docstring)."""
    from clusterlab.harness.services import import_roots

    service = _service_of(run)
    assert service is not None
    seed = other_hash_seed(run)
    path = [*import_roots([service]), os.getcwd(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": os.pathsep.join(path)}
    command = [sys.executable, "-m", "clusterlab.chaos.determinism", str(run.directory)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, 9)
        proc.communicate()
        return [f"the replay with PYTHONHASHSEED={seed} did not finish in {timeout_s:.0f}s (not judged)"]
    if proc.returncode != 0:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return [f"the replay with PYTHONHASHSEED={seed} failed (exit {proc.returncode}): {tail}"]
    got = json.loads(out)
    entries = [(p, t, bytes.fromhex(d)) for p, t, d in got["entries"]]
    first = first_divergence(entries, live_digests(run.applied))
    found = [f"replayed with PYTHONHASHSEED={seed} in another process: {first}"] if first is not None else []
    if got["error"] is not None:
        found.append(f"the replay with PYTHONHASHSEED={seed} stopped: {got['error']}")
    return found


def determinism_violations(trace_dir: Path | str, *, run: Run | None = None) -> dict[str, list[str]]:
    """Both checks of one run, by name (empty lists: passed, or nothing to replay)."""
    run = run if run is not None else open_run(trace_dir)
    out: dict[str, list[str]] = {name: [] for name in DETERMINISM_CHECKS}
    service = _service_of(run)
    if service is None or run.log.num_rows == 0:
        return out
    try:
        factory = _factory(service)
    except (ImportError, AttributeError, KeyError) as e:
        reason = f"cannot load service {service!r} to replay the log ({type(e).__name__}: {e})"
        return {name: [reason] for name in DETERMINISM_CHECKS}
    out[SNAPSHOT_ROUNDTRIP] = snapshot_roundtrip(run, factory)
    out[REPLAY_EQUIVALENCE] = replay_equivalence(run)
    return out


def main(argv: list[str]) -> int:
    """``python -m clusterlab.chaos.determinism RUN_DIR``: print :func:`replayed_digests` as JSON."""
    if len(argv) != 1:
        print("usage: python -m clusterlab.chaos.determinism RUN_DIR", file=sys.stderr)
        return 2
    try:
        print(json.dumps(replayed_digests(argv[0])))
    except TraceError as e:
        print(str(e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
