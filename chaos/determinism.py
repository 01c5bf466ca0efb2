"""Determinism checks that replay a run's committed log (the trace's ``log`` table) into fresh
instances of its service (run.json's ``config.service``, built-in or ``package.module:factory``) and
compare their state digests:

* ``snapshot-roundtrip``: every snapshot the log asks for (its snapshot actions, where the members
  took theirs), two the replay takes of its own (at a third and two thirds of the log) and one at
  the log's end is restored into a fresh service, which follows the rest of the log; its digest
  must equal the digest of the replay that went on without restoring, at the snapshot's position
  and at every later one. A snapshot that forgets state is caught even when no
  member restarted from it; both replays run in one process, so hash order is not blamed on it.
* ``replay-equivalence``: the whole log replayed into fresh services in :data:`REPLAYS_ELSEWHERE`
  other processes, each started with its own ``PYTHONHASHSEED``, must reproduce the live digests the
  members recorded (the ``applied`` table) at every position. A state that depends on the iteration
  order of hash-ordered sets of strings is caught, also in the simulator, where every member shares
  one process and one hash seed; so is any other state that does not follow from the log alone (a
  clock, a random number, a snapshot restored on a member that forgot something). Several seeds,
  because one other seed orders a set of two strings as the run did half the time: each replay
  misses such a state with probability 1/2 at worst, all of them with 1/2**REPLAYS_ELSEWHERE.

Each violation names the first diverging log position, the member(s) whose live digest differs,
and the callback that applied the entry. Both need only the trace directory, so ``clusterlab check
RUN`` runs them too. When the members run several services, each is replayed on its own (as a
member builds it: a service that shares the log by address sees only its own messages) and compared
with its own live digests, and its findings name its service id. A run without a committed log has
nothing to replay and passes vacuously.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
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
REPLAYS_ELSEWHERE = 3  # replays in other processes per service, each with its own hash seed

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


def live_digests(applied: pa.Table, service_id: int = 0) -> Live:
    """Service ``service_id``'s state digest at every log position on every member (the entries'
    rows, not the ``Snapshot`` rows of restores; the first row per member and position)."""
    live: Live = {}
    columns = applied.select(["member_id", "service_id", "log_position", "entry_type", "state_digest"])
    for member, service, position, entry_type, digest in zip(*(c.to_pylist() for c in columns.columns), strict=True):
        if service == service_id and entry_type != "Snapshot":
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


def services_of(run: Run) -> list[str]:
    """The services each member of ``run`` runs, by service id (names or ``package.module:factory``)."""
    config = run.meta.get("config") or {}
    if config.get("services"):
        return [str(s) for s in config["services"]]
    return [str(config.get("service") or "kv")]


def _factory(run: Run, service_id: int) -> Callable[[], ClusteredService]:
    """A fresh instance of the run's service ``service_id``, as a member builds it (a service that
    shares the log by address sees only its own messages when the members run several)."""
    from clusterlab.core.service.addressed import addressed_factory
    from clusterlab.harness.services import service_factory

    names = services_of(run)
    return addressed_factory(service_factory(names[service_id]), service_id, len(names))


def _named(service_id: int, count: int, finding: str) -> str:
    return f"service {service_id}: {finding}" if count > 1 else finding


def snapshot_roundtrip(run: Run, factory: Callable[[], ClusteredService], service_id: int = 0) -> list[str]:
    """The ``snapshot-roundtrip`` violations of service ``service_id`` of ``run`` (see the module
    docstring): per snapshot, its first divergence from the replay that went on without it. Both
    replays run here, so a state that differs between processes (hash order: replay-equivalence's)
    is not blamed on the snapshot."""
    from clusterlab.harness.replay import replay_log

    restored: dict[int, list[Entry]] = {}

    def on_restored(snapshot_position: int, e: AppliedEntry) -> None:
        restored.setdefault(snapshot_position, []).append((e.log_position, str(e.entry_type), e.state_digest))

    replay = replay_log(run.log.to_pylist(), factory, on_restored=on_restored)
    uninterrupted = {e.log_position: e.state_digest for e in replay.entries}
    live = live_digests(run.applied, service_id)
    out = []
    for snapshot_position, entries in sorted(restored.items()):
        first = _first_restore_divergence(entries, uninterrupted, live)
        if first is not None:
            out.append(f"snapshot at log position {snapshot_position} restored into a fresh service: {first}")
    if replay.error is not None:
        out.append(f"the replay of the committed log stopped: {replay.error}")
    return out


def _first_restore_divergence(entries: Iterable[Entry], uninterrupted: dict[int, bytes], live: Live) -> str | None:
    """The first entry a restored service applied whose digest differs from the uninterrupted replay's
    at its position, described with the members that hold the replay's digest; None if none."""
    for position, entry_type, digest in entries:
        want = uninterrupted.get(position)
        if want is None or want == digest:
            continue
        agreeing = sorted(m for m, d in live.get(position, {}).items() if d == want)
        members = f" and member(s) {', '.join(map(str, agreeing))}" if agreeing else ""
        unlike_live = (
            "; no member held the replay's state there either: the service does not follow the log alone "
            "(a clock, randomness, hash order), whatever its snapshot holds"
            if live.get(position) and not agreeing
            else ""
        )
        return (
            f"log position {position}: the restored service holds {digest.hex()[:12]}, the replay without "
            f"the snapshot{members} {want.hex()[:12]}, after {entry_type} ({CALLBACKS.get(entry_type, entry_type)})"
            + unlike_live
        )
    return None


def replayed_digests(run_dir: Path | str, service_id: int = 0) -> dict[str, Any]:
    """The whole committed log of ``run_dir`` replayed into a fresh instance of its service
    ``service_id`` in this process: its entries as ``[position, entry type, digest hex]`` and the
    replay's error (what the other process of :func:`replay_equivalence` prints)."""
    from clusterlab.harness.replay import replay_log

    cpu = time.process_time()
    run = open_run(run_dir, whole_payloads=False)  # the replay reads the committed log only
    replay = replay_log(run.log.to_pylist(), _factory(run, service_id))
    entries = [[e.log_position, e.entry_type, e.state_digest.hex()] for e in replay.entries]
    hash_seed = os.environ.get("PYTHONHASHSEED")
    return {"entries": entries, "error": replay.error, "hash_seed": hash_seed, "cpu_s": time.process_time() - cpu}


_ELSEWHERE_CPU_S = [0.0]  # the CPU seconds the replays in other processes reported (written by one function)


def elsewhere_cpu_s() -> float:
    """The CPU seconds every replay in another process has reported to this process so far: a sweep
    adds its share to a run's CPU, which would otherwise leave the replay workers out."""
    return _ELSEWHERE_CPU_S[0]


def other_hash_seed(run: Run, avoid: Iterable[int] = ()) -> int:
    """A ``PYTHONHASHSEED`` for a replaying process of its own, different from this process's, from
    every member's recorded in run.json and from ``avoid`` (deterministic per run)."""
    taken = {str(s) for s in (run.meta.get("hash_seeds") or {}).values()} | {str(s) for s in avoid}
    taken.add(os.environ.get("PYTHONHASHSEED", ""))
    seed = zlib.crc32(str(run.meta.get("run_id", "")).encode()) % 4_000_000_000 + 1
    while str(seed) in taken:
        seed += 1
    return seed


class ReplayWorker:
    """A Python process with its own ``PYTHONHASHSEED`` and import path that replays runs on request:
    one request line (a run directory and a result file) on its stdin, the result file written and
    ``done`` on its stdout. Starting Python with the trace reader's imports costs about a second, so
    the process serves every run of this process that it may replay (:func:`replay_worker`). It exits
    when its stdin closes (this process gone) and is stopped by its PID at this process's exit."""

    def __init__(self, hash_seed: int, path: list[str]) -> None:
        self.hash_seed = hash_seed
        self.owner = os.getpid()
        self.scratch = Path(tempfile.mkdtemp(prefix="clusterlab-replay-"))
        env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "PYTHONPATH": os.pathsep.join(path)}
        command = [sys.executable, "-m", "clusterlab.chaos.determinism", "--serve"]
        with open(self.scratch / "stderr.log", "wb") as stderr:
            self.proc = subprocess.Popen(
                command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1
            )
        self.requests = 0
        self.lock = threading.Lock()  # one request at a time: held from submit to collect
        self._failed: str | None = None  # why the request just submitted cannot be answered

    def replay(self, run_dir: Path, service_id: int, timeout_s: float) -> dict[str, Any]:
        """:func:`replayed_digests` of ``run_dir`` in the worker; raises ReplayWorkerError if the worker
        died, failed or took longer than ``timeout_s`` (it is then stopped)."""
        return self.collect(self.submit(run_dir, service_id), timeout_s)

    def submit(self, run_dir: Path, service_id: int) -> Path:
        """Start :meth:`replay` and return at once (the worker replays while this process works); the
        worker is this caller's until :meth:`collect` of the returned result file, which must follow."""
        self.lock.acquire()
        self.requests += 1
        result = self.scratch / f"result-{self.requests}.json"
        assert self.proc.stdin is not None
        try:
            request = {"run": str(run_dir), "service_id": service_id, "result": str(result)}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError as e:
            self._failed = self._died(f"cannot reach the replay process: {e}")
        return result

    def collect(self, result: Path, timeout_s: float) -> dict[str, Any]:
        """The result of the request :meth:`submit` started (see :meth:`replay`)."""
        try:
            failed, self._failed = self._failed, None
            if failed is not None:
                raise ReplayWorkerError(failed)
            assert self.proc.stdout is not None
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
            line = self.proc.stdout.readline() if ready else ""
            if not ready:
                self.stop()
                raise ReplayWorkerError(f"did not finish in {timeout_s:.0f}s (not judged)")
            if line.strip() != "done":
                raise ReplayWorkerError(self._died("the replay process exited"))
            got: dict[str, Any] = json.loads(result.read_text())
            result.unlink()
            if "failure" in got:
                raise ReplayWorkerError(str(got["failure"]))
            return got
        finally:
            self.lock.release()

    def _died(self, what: str) -> str:
        """``what`` with the process's exit code and last stderr line, read before :meth:`stop` removes
        the scratch directory that holds it."""
        self._end_process()
        try:
            lines = (self.scratch / "stderr.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        self.stop()
        return f"{what} (exit {self.proc.returncode}): {(lines or ['no output'])[-1]}"

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def stop(self) -> None:
        """Close its stdin (it exits), else kill it by its PID; remove its scratch directory."""
        if self.owner != os.getpid():
            return  # a forked child's copy: the worker is its parent's
        self._end_process()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _end_process(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()


class ReplayWorkerError(Exception):
    """The replay process could not give a result (died, failed, timed out)."""


_WORKERS: dict[tuple[tuple[str, ...], int], ReplayWorker] = {}
MAX_WORKERS = 2 * REPLAYS_ELSEWHERE  # workers kept alive at once (by import path and seed; the least recent stopped)


def worker_hash_seeds() -> tuple[int, ...]:
    """This process's replay workers' ``PYTHONHASHSEED`` values, :data:`REPLAYS_ELSEWHERE` of them:
    distinct, fixed per process (another process draws others, so a sweep's pool samples many hash
    orders), never this process's own."""
    own = os.environ.get("PYTHONHASHSEED")
    seeds: list[int] = []
    for i in range(REPLAYS_ELSEWHERE):
        seed = zlib.crc32(f"replay-{os.getpid()}-{i}".encode()) % 4_000_000_000 + 1
        while str(seed) == own or seed in seeds:
            seed += 1
        seeds.append(seed)
    return tuple(seeds)


def replay_worker(path: list[str], seed: int | None = None) -> ReplayWorker:
    """The live replay worker of this process for import path ``path`` and hash seed ``seed`` (the
    first of :func:`worker_hash_seeds` by default), started if needed."""
    seed = worker_hash_seeds()[0] if seed is None else seed
    key = (tuple(path), seed)
    worker = _WORKERS.pop(key, None)
    if worker is None or not worker.alive():
        worker = ReplayWorker(seed, path)
    _WORKERS[key] = worker  # the most recent last
    while len(_WORKERS) > MAX_WORKERS:
        _WORKERS.pop(next(iter(_WORKERS))).stop()
    return worker


@atexit.register
def stop_replay_workers() -> None:
    """Stop every replay worker this process started (also run at exit)."""
    while _WORKERS:
        _WORKERS.popitem()[1].stop()


class ReplayElsewhere:
    """The replayed digests of ``run`` from a process with hash seed ``seed`` (one of
    :func:`worker_hash_seeds`): this process's worker of that seed when no member of the run had it,
    else a process of its own with another seed. Started when made, so that this process can replay
    too meanwhile (the machine's other core); :meth:`result` (which must be called) waits for it and
    gives the seed and the result, or why there is none."""

    def __init__(self, run: Run, service_id: int, timeout_s: float, seed: int | None = None) -> None:
        from clusterlab.harness.services import import_roots

        self.timeout_s = timeout_s
        inherited = filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))
        # A Spark executor imports clusterlab (and a user's package) from zips put on sys.path, not on
        # PYTHONPATH: the replaying process needs them too.
        zips = [p for p in sys.path if p.endswith(".zip") and os.path.isfile(p)]
        path = [*import_roots(services_of(run)), os.getcwd(), *inherited, *zips]
        taken = {str(s) for s in (run.meta.get("hash_seeds") or {}).values()}
        seed = worker_hash_seeds()[0] if seed is None else seed
        self.worker: ReplayWorker | None = None
        self.proc: subprocess.Popen[str] | None = None
        if str(seed) not in taken:
            self.worker = replay_worker(path, seed)
            self.seed = self.worker.hash_seed
            self.pending = self.worker.submit(run.directory, service_id)
            return
        self.seed = other_hash_seed(run, avoid=worker_hash_seeds())
        env = {**os.environ, "PYTHONHASHSEED": str(self.seed), "PYTHONPATH": os.pathsep.join(path)}
        command = [sys.executable, "-m", "clusterlab.chaos.determinism", str(run.directory), str(service_id)]
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(self) -> tuple[int, dict[str, Any] | str]:
        if self.worker is not None:
            try:
                return self.seed, self.worker.collect(self.pending, self.timeout_s)
            except ReplayWorkerError as e:
                return self.seed, str(e)
        proc = self.proc
        assert proc is not None
        try:
            out, err = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, 9)
            proc.communicate()
            return self.seed, f"did not finish in {self.timeout_s:.0f}s (not judged)"
        if proc.returncode != 0:
            tail = (err.strip().splitlines() or ["no output"])[-1]
            return self.seed, f"failed (exit {proc.returncode}): {tail}"
        return self.seed, json.loads(out)


def replay_equivalence(run: Run, service_id: int = 0, timeout_s: float = REPLAY_TIMEOUT_S) -> list[str]:
    """The ``replay-equivalence`` violations of service ``service_id`` of ``run`` (see the module
    docstring)."""
    return _equivalence_findings(run, service_id, replays_elsewhere(run, service_id, timeout_s))


def replays_elsewhere(run: Run, service_id: int, timeout_s: float) -> list[ReplayElsewhere]:
    """The replays of ``run``'s service ``service_id`` in other processes, one per seed of
    :func:`worker_hash_seeds`, all started (collect each with :meth:`ReplayElsewhere.result`)."""
    return [ReplayElsewhere(run, service_id, timeout_s, seed) for seed in worker_hash_seeds()]


def _equivalence_findings(run: Run, service_id: int, elsewheres: list[ReplayElsewhere]) -> list[str]:
    """Every replay's findings against the live digests: a replay that gave no result (not judged),
    one that stopped, and the first divergence of the replays that diverged, with their seeds."""
    found: list[str] = []
    diverged: list[tuple[int, str]] = []
    live = live_digests(run.applied, service_id)
    for seed, got in [e.result() for e in elsewheres]:
        if isinstance(got, str):
            found.append(f"the replay with PYTHONHASHSEED={seed} {got}")
            continue
        _ELSEWHERE_CPU_S[0] += float(got.get("cpu_s", 0.0))
        first = first_divergence([(p, t, bytes.fromhex(d)) for p, t, d in got["entries"]], live)
        if first is not None:
            diverged.append((seed, first))
        if got["error"] is not None:
            found.append(f"the replay with PYTHONHASHSEED={seed} stopped: {got['error']}")
    if diverged:
        seed, first = diverged[0]
        found.insert(
            0,
            f"replayed in another process (PYTHONHASHSEED={seed}; {len(diverged)} of {len(elsewheres)} replays "
            f"diverged): {first}; the state does not follow from the log alone (hash order, a clock, "
            "randomness, or a member restored from a snapshot that forgot it)",
        )
    return found


def determinism_violations(trace_dir: Path | str, *, run: Run | None = None) -> dict[str, list[str]]:
    """Both checks of one run, by name, over every service its members run (empty lists: passed, or
    nothing to replay); with several services each finding names its service id. Raises TraceError
    when a service cannot be imported here (the run is not judged)."""
    run = run if run is not None else open_run(trace_dir, whole_payloads=False)
    out: dict[str, list[str]] = {name: [] for name in DETERMINISM_CHECKS}
    if run.log.num_rows == 0:
        return out
    from clusterlab.chaos.workload_api import import_from_cwd

    import_from_cwd()  # a user's package.module:factory, found from where the check runs (as `run` does)
    count = len(services_of(run))
    for service_id in range(count):
        try:
            factory = _factory(run, service_id)
        except (ImportError, AttributeError, KeyError) as e:  # not judged: no verdict without the service
            name = services_of(run)[service_id]
            raise TraceError(
                f"{run.directory}: cannot load the run's service {name!r} to replay its log "
                f"({type(e).__name__}: {e}); check it where that package is importable"
            ) from None
        elsewhere = replays_elsewhere(run, service_id, REPLAY_TIMEOUT_S)  # replay beside this process's replay
        try:
            roundtrip = snapshot_roundtrip(run, factory, service_id)
        finally:
            equivalence = _equivalence_findings(run, service_id, elsewhere)
        out[SNAPSHOT_ROUNDTRIP] += [_named(service_id, count, f) for f in roundtrip]
        out[REPLAY_EQUIVALENCE] += [_named(service_id, count, f) for f in equivalence]
    return out


def serve() -> int:
    """The replay worker's loop (``--serve``): a JSON request per stdin line, ``{"run": DIR, "result":
    FILE}``; writes :func:`replayed_digests` (or ``{"failure": why}``) to FILE, then prints ``done``."""
    for line in sys.stdin:
        request = json.loads(line)
        try:
            got = replayed_digests(request["run"], int(request.get("service_id", 0)))
        except Exception as e:  # one run's failure is its verdict's, not the worker's end
            got = {"failure": f"failed: {type(e).__name__}: {e}"}
        Path(request["result"]).write_text(json.dumps(got))
        print("done", flush=True)
    return 0


def main(argv: list[str]) -> int:
    """``python -m clusterlab.chaos.determinism RUN_DIR [SERVICE_ID]``: print :func:`replayed_digests`
    as JSON; ``--serve``: the replay worker (:class:`ReplayWorker`)."""
    if argv == ["--serve"]:
        return serve()
    if len(argv) not in (1, 2) or not (len(argv) == 1 or argv[1].isdigit()):
        print("usage: python -m clusterlab.chaos.determinism RUN_DIR [SERVICE_ID] | --serve", file=sys.stderr)
        return 2
    try:
        print(json.dumps(replayed_digests(argv[0], int(argv[1]) if len(argv) == 2 else 0)))
    except TraceError as e:
        print(str(e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
