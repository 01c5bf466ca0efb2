"""Golden traces on disk: blessing a run into ``golden/traces/NAME/``, reading one back, and the recipe
manifest ``golden/traces/goldens.json`` from which every golden can be re-created with one command.

A golden is itself a trace directory (docs/trace-schema.md), readable by ``clustertrace`` and pyarrow:

    golden/traces/NAME/
      run.json                 run_id "golden-NAME" and a ``golden`` object: the recipe (driver sim|real,
                               scenario, seed, members, duration), the service, the clusterlab version
                               and git commit it was blessed from, the source run's id and metadata
      log/committed.arrow      the committed log (log_position, leadership_term_id, entry_type, entry)
      applied/golden.arrow     the agreed state at every log position: one ``applied`` row per entry
                               (member_id -1), entry and state digests
      messages/golden.arrow    simulator goldens only: the run's whole message table, in recording order

Its run.json carries a manifest of those files (every stream message's CRC-32) and is sealed, as a
recorded run's is (harness/completeness.py): a golden whose files or run.json changed after blessing is a
CORRUPT golden, one that lost data an INCOMPLETE golden, never a divergence of the code.

Files are zstd-compressed Arrow IPC streams (pyarrow reads them transparently) so goldens stay small
enough for git.

Blessing refuses a run that fails the local verdict, has no committed log, or whose committed log,
replayed through today's code, does not reproduce the digests its members recorded (the service would
not be deterministic, and the golden would be wrong from the start).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from clusterlab.chaos.runner import check_service
from clusterlab.chaos.verdict import verify_run
from clusterlab.core import __version__
from clusterlab.core.service.api import ClusteredService
from clusterlab.harness.arrow_stream import read_stream
from clusterlab.harness.completeness import SchemaVersionError, assess, sealed_json
from clusterlab.harness.completeness import manifest as trace_manifest  # `manifest` is the recipes file here
from clusterlab.harness.recorder import SCHEMAS, TABLES, git_commit
from clusterlab.harness.replay import Replay, replay_log
from clusterlab.harness.services import SERVICES, service_factory
from clusterlab.harness.trace import Run, TraceError, open_run

ROOT = Path(__file__).resolve().parent
TRACES = ROOT / "traces"
MANIFEST = TRACES / "goldens.json"
GOLDEN_FORMAT = 1
COMPRESSION = "zstd"
DRIVERS = ("sim", "real")


class GoldenError(Exception):
    """A golden or a run that cannot be blessed/verified: the message says which and why. ``status`` is
    ``INCOMPLETE``/``CORRUPT``/``FAIL`` when that is the reason (the CLI's exit code follows it)."""

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Recipe:
    """How to re-create a golden: run ``scenario`` with ``seed`` on ``members`` members for
    ``duration_s`` seconds in the simulator (``driver`` sim) or as real processes (real), then bless."""

    name: str
    driver: str
    scenario: str
    seed: int
    members: int = 3
    duration_s: float | None = None
    summary: str = ""
    service: str = "kv"  # the clustered service the run drives (harness/services, or package.module:factory)
    workload: str | None = None  # a user's service's workload (package.module:factory); None: the sample's

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS:
            raise GoldenError(f"golden {self.name}: driver must be one of {DRIVERS}, not {self.driver!r}")


@dataclass
class Golden:
    """A golden read back from disk."""

    name: str
    directory: Path
    meta: dict[str, Any]
    log: pa.Table
    applied: pa.Table
    messages: pa.Table | None

    @property
    def info(self) -> dict[str, Any]:
        return self.meta["golden"]

    @property
    def driver(self) -> str:
        return str(self.info["driver"])

    @property
    def run_id(self) -> str:
        return str(self.meta["run_id"])


def golden_run_id(name: str) -> str:
    return f"golden-{name}"


# --------------------------------------------------------------------------------------------- manifest


def load_manifest(path: Path = MANIFEST) -> list[Recipe]:
    """Every recipe in the manifest (empty if there is none)."""
    if not path.is_file():
        return []
    try:
        doc = json.loads(path.read_text())
        return [Recipe(**r) for r in doc["goldens"]]
    except (ValueError, KeyError, TypeError) as e:
        raise GoldenError(f"{path}: not a golden manifest ({type(e).__name__}: {e})") from e


def recipe_json(recipe: Recipe) -> dict[str, Any]:
    """A recipe as plain data; a sample service's has no ``workload`` (its workload is the service's)."""
    doc = asdict(recipe)
    if doc["workload"] is None:
        del doc["workload"]
    return doc


def golden_service(service: str, workload: str | None, where: str) -> Callable[[], ClusteredService]:
    """The factory of a golden's (or a run's) service, its workload importable too: a sample service
    by name, or a user's ``package.module:factory`` imported from the current directory or the
    installed packages; GoldenError, one line, when either cannot be."""
    if ":" not in service:
        if service not in SERVICES:
            raise GoldenError(f"{where}: unknown service {service!r}")
        return SERVICES[service]
    try:
        check_service(service, workload)
    except ValueError as e:
        raise GoldenError(f"{where}: {e}; run it where that package is importable") from None
    return service_factory(service)


def save_manifest(recipes: list[Recipe], path: Path = MANIFEST) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "about": "Recipes of the golden traces: `python -m clusterlab.golden.regenerate` re-runs each and blesses it.",
        "goldens": [recipe_json(r) for r in sorted(recipes, key=lambda r: r.name)],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def upsert_recipe(recipe: Recipe, path: Path = MANIFEST) -> None:
    """Add ``recipe`` to the manifest, replacing one of the same name."""
    recipes = [r for r in load_manifest(path) if r.name != recipe.name]
    save_manifest([*recipes, recipe], path)


# --------------------------------------------------------------------------------------------- files


def write_stream(path: Path, table: pa.Table, compression: str | None = COMPRESSION) -> None:
    """``table`` as one Arrow IPC stream file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    options = ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, table.schema, options=options) as w:
        w.write_table(table, max_chunksize=64 * 1024)


def read_stream_whole(path: Path) -> pa.Table:
    """A golden's file, whole: a golden with a torn or unreadable file is corrupt, not tolerated."""
    if not path.is_file():
        raise GoldenError(
            f"INCOMPLETE golden: {path} is missing; re-bless it (python -m clusterlab.golden.regenerate)", "INCOMPLETE"
        )
    got = read_stream(str(path))  # read, not mapped: a golden re-blessed while mapped would fault the reader
    if got.schema is None:
        raise GoldenError(
            f"CORRUPT golden file {path} at byte 0: {got.error}; re-bless it (python -m clusterlab.golden.regenerate)",
            "CORRUPT",
        )
    if got.error is not None or not got.closed:
        raise GoldenError(
            f"INCOMPLETE golden file {path}: {got.rows} rows readable, {got.bytes_ignored} B after byte "
            f"{got.bytes_read} unreadable ({got.error or 'no end-of-stream marker'}); re-bless it "
            "(python -m clusterlab.golden.regenerate)",
            "INCOMPLETE",
        )
    return got.table()


def applied_table(run_id: str, replay: Replay) -> pa.Table:
    """One ``applied`` row per replayed entry (member -1: the agreed state)."""
    rows = [
        {
            "run_id": run_id,
            "member_id": -1,
            "service_id": 0,
            "incarnation": 0,
            "log_position": e.log_position,
            "length": e.length,
            "leadership_term_id": e.leadership_term_id,
            "entry_type": e.entry_type,
            "cluster_time": e.cluster_time,
            "entry_digest": e.entry_digest,
            "state_digest": e.state_digest,
            "replay": True,
            "wall_ns": 0,
            "seq": i,
        }
        for i, e in enumerate(replay.entries)
    ]
    return pa.Table.from_pylist(rows, schema=SCHEMAS["applied"])


def messages_in_order(messages: pa.Table) -> pa.Table:
    """The message table in recording order (a stable order to diff in)."""
    return messages.sort_by(
        [("wall_ns", "ascending"), ("process", "ascending"), ("incarnation", "ascending"), ("seq", "ascending")]
    )


def with_run_id(table: pa.Table, run_id: str) -> pa.Table:
    i = table.schema.get_field_index("run_id")
    return table.set_column(i, "run_id", pa.array([run_id] * table.num_rows, pa.string()))


# --------------------------------------------------------------------------------------------- bless


def _recorded_states(applied: pa.Table) -> dict[int, set[tuple[bytes, bytes]]]:
    states: dict[int, set[tuple[bytes, bytes]]] = {}
    for pos, etype, entry, state in zip(
        applied.column("log_position").to_pylist(),
        applied.column("entry_type").to_pylist(),
        applied.column("entry_digest").to_pylist(),
        applied.column("state_digest").to_pylist(),
        strict=True,
    ):
        if etype != "Snapshot":
            states.setdefault(pos, set()).add((entry, state))
    return states


def _run_duration(run_dir: Path) -> float | None:
    """The scenario duration a ``clusterlab run`` recorded beside its trace (its chaos.json, in the
    run's directory or the trace's parent): what the golden's re-run must use to be the same run."""
    for summary in (run_dir / "chaos.json", run_dir.parent / "chaos.json"):
        try:
            duration = json.loads(summary.read_text()).get("duration_s")
        except (OSError, ValueError, AttributeError):
            continue
        return float(duration) if isinstance(duration, int | float) else None
    return None


def bless(
    run_dir: Path | str,
    name: str,
    *,
    traces: Path = TRACES,
    duration_s: float | None = None,
    summary: str = "",
    force: bool = False,
    manifest: Path | None = None,
) -> Golden:
    """Store run ``run_dir`` as golden ``name`` under ``traces`` and record its recipe in the manifest.
    Raises GoldenError (saying why) for a run that cannot be a golden."""

    if not name or any(c in name for c in "/\\ ") or name.startswith("."):
        raise GoldenError(f"golden name {name!r}: use letters, digits, '-' and '_'")
    run = _passing_run(run_dir)
    meta = run.meta
    config = meta.get("config") or {}
    service = str(config.get("service", "kv"))
    workload = (meta.get("workload") or {}).get("workload")
    replay = _deterministic_replay(run, run_dir, service, workload)
    recipe = Recipe(
        name,
        "sim" if config.get("runtime") == "sim" else "real",
        str(meta.get("scenario") or "unknown"),
        int(meta.get("seed") or 0),
        len(meta.get("members") or []) or 3,
        _run_duration(Path(run_dir)) if duration_s is None else duration_s,
        summary,
        service,
        workload,
    )
    target = traces / name
    if target.exists() and not force:
        raise GoldenError(f"golden {name} exists at {target}; pass --force to replace it")
    traces.mkdir(parents=True, exist_ok=True)  # a project's own goldens directory, made at its first golden
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=traces))
    try:
        _write_golden(tmp, run, replay, recipe)
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if manifest is not None or traces == TRACES:
        upsert_recipe(recipe, manifest or traces / MANIFEST.name)
    return load_golden(name, traces)


def _passing_run(run_dir: Path | str) -> Run:
    """The run at ``run_dir`` opened, if it may be blessed: complete, with an untorn committed log, and
    passing its checks. Raises GoldenError saying why not."""
    try:
        run = open_run(run_dir)
    except TraceError as e:
        raise GoldenError(str(e)) from e
    if run.completeness is not None and not run.completeness.ok:
        c = run.completeness
        raise GoldenError(
            f"{run_dir}: the run is {c.status}, not PASS; only a PASS can be blessed: "
            + "; ".join(f.describe() for f in c.findings[:5]),
            str(c.status),
        )
    if run.log.num_rows == 0:
        raise GoldenError(f"{run_dir}: the run has no committed log (log/*.arrow); only finished runs can be blessed")
    if run.torn and any(t.table == "log" for t in run.torn):
        raise GoldenError(f"{run_dir}: the committed log file is torn")
    verdict = verify_run(run_dir)
    if verdict.status != "PASS":
        raise GoldenError(
            f"{run_dir}: the run fails its checks ({', '.join(verdict.failed())}): it is {verdict.status}, "
            "not PASS; a golden must be a correct run",
            verdict.status,
        )
    return run


def _deterministic_replay(run: Run, run_dir: Path | str, service: str, workload: str | None) -> Replay:
    """Today's replay of the run's committed log, which must give the states the members recorded."""
    replay = replay_log(run.log.to_pylist(), golden_service(service, workload, str(run_dir)))
    if replay.error is not None:
        raise GoldenError(f"{run_dir}: today's code cannot replay the committed log: {replay.error}", "FAIL")
    recorded = _recorded_states(run.applied)
    for entry in replay.entries:
        got = recorded.get(entry.log_position)
        if got is not None and (entry.entry_digest, entry.state_digest) not in got:
            raise GoldenError(
                f"{run_dir}: replaying the committed log gives state {entry.state_digest.hex()} at position "
                f"{entry.log_position}, the run's members recorded {sorted(s.hex() for _, s in got)}: "
                f"the service is not deterministic, or the log is not the one the members applied",
                "FAIL",
            )
    return replay


def _write_golden(tmp: Path, run: Run, replay: Replay, recipe: Recipe) -> None:
    """Write the golden's tables and its sealed run.json into the directory ``tmp``."""
    meta = run.meta
    run_id = golden_run_id(recipe.name)
    write_stream(tmp / "log" / "committed.arrow", run.log)
    write_stream(tmp / "applied" / "golden.arrow", applied_table(run_id, replay))
    messages_rows = 0
    if recipe.driver == "sim":
        messages = with_run_id(messages_in_order(run.messages), run_id)
        messages_rows = messages.num_rows
        write_stream(tmp / "messages" / "golden.arrow", messages)
    golden_meta = {
        "format": GOLDEN_FORMAT,
        **recipe_json(recipe),
        "service": recipe.service,
        "clients": int((meta.get("workload") or {}).get("clients", 1)),  # the re-run's concurrent clients
        "clusterlab_version": __version__,
        "git_commit": git_commit(),
        "blessed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source_run_id": meta.get("run_id"),
        "source_git_commit": meta.get("git_commit"),
        "positions": len(replay.entries),
        "end_position": replay.end_position,
        "log_entries": run.log.num_rows,
        "messages": messages_rows,
        "final_state_digest": replay.entries[-1].state_digest.hex() if replay.entries else None,
    }
    doc = {
        "run_id": run_id,
        "scenario": recipe.scenario,
        "seed": recipe.seed,
        "members": meta.get("members"),
        "config": meta.get("config") or {},
        "clusterlab_version": __version__,
        "git_commit": golden_meta["git_commit"],
        "golden": golden_meta,
        "source": {k: meta.get(k) for k in ("run_id", "outcome", "committed_log", "sim") if k in meta},
        "trace_format": meta.get("trace_format"),
        "outcome": "ok",  # a golden is a finished run that passed
        **trace_manifest(tmp, TABLES),
    }
    (tmp / "run.json").write_bytes(sealed_json(json.loads(json.dumps(doc, default=str))))


# --------------------------------------------------------------------------------------------- read


def golden_names(traces: Path = TRACES) -> list[str]:
    """Every golden directory under ``traces``."""
    if not traces.is_dir():
        return []
    return sorted(p.name for p in traces.iterdir() if p.is_dir() and not p.name.startswith("."))


def load_golden(name: str, traces: Path = TRACES) -> Golden:
    """Read golden ``name``; GoldenError says what is missing or corrupt."""
    directory = traces / name
    if not directory.is_dir():
        known = ", ".join(golden_names(traces)) or "none"
        raise GoldenError(f"no golden named {name!r} in {traces} (known: {known})")
    try:
        completeness = assess(directory, TABLES)  # its run.json's seal and manifest against its files
    except SchemaVersionError as e:
        raise GoldenError(f"golden {name}: {e}") from e
    if not completeness.ok:
        raise GoldenError(
            f"{completeness.status} golden {name}: "
            + "; ".join(f.describe() for f in completeness.findings[:5])
            + f"; re-bless it (python -m clusterlab.golden.regenerate {name})",
            str(completeness.status),
        )
    try:
        meta = json.loads((directory / "run.json").read_text())
        info = meta["golden"]
        missing = [k for k in ("driver", "scenario", "seed", "members", "service", "git_commit") if k not in info]
        if missing:
            raise KeyError(", ".join(missing))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise GoldenError(
            f"golden {name}: {directory / 'run.json'} is missing or corrupt "
            f"({type(e).__name__}: {e}); re-bless it (python -m clusterlab.golden.regenerate {name})"
        ) from e
    if info["driver"] not in DRIVERS:  # a re-run needs its driver: never skipped for one it cannot name
        raise GoldenError(
            f"CORRUPT golden {name}: run.json's golden.driver {info['driver']!r} is none of {', '.join(DRIVERS)}; "
            f"re-bless it (python -m clusterlab.golden.regenerate {name})",
            "CORRUPT",
        )
    log = read_stream_whole(directory / "log" / "committed.arrow")
    applied = read_stream_whole(directory / "applied" / "golden.arrow")
    for table, schema, what in ((log, SCHEMAS["log"], "log"), (applied, SCHEMAS["applied"], "applied")):
        missing = [f.name for f in schema if f.name not in table.column_names]
        if missing:
            raise GoldenError(f"golden {name}: {what} table lacks columns {missing}")
    messages = None
    if info["driver"] == "sim":
        messages = read_stream_whole(directory / "messages" / "golden.arrow")
    # Complete or not judged: every table holds the rows the golden's run.json declares.
    counts = [("applied/golden.arrow", applied, "positions"), ("log/committed.arrow", log, "log_entries")]
    if messages is not None:
        counts.append(("messages/golden.arrow", messages, "messages"))
    for file, table, key in counts:
        want = info.get(key)
        if isinstance(want, int) and table.num_rows != want:
            raise GoldenError(
                f"INCOMPLETE golden {name}: {file} has {table.num_rows} rows, run.json declares {want} "
                f"({want - table.num_rows} rows lost)",
                "INCOMPLETE",
            )
    return Golden(name, directory, meta, log, applied, messages)


def current_commit() -> str | None:
    """The git commit of this checkout (None outside git)."""
    return git_commit()
