"""The mypyc-compiled paths against their interpreted twins, in one process, interpreted and compiled
interleaved.

Run: ``python -m benchmarks.compiled_twins [--out FILE] [--rounds N]`` with the compiled build
(``python -c "import clusterlab.compiled as c; print(c.BUILD)"`` prints ``compiled``). For each twin
pair (docs/mypyc.md) every implementation runs the same items: (a) the compiled module as built,
(b) the interpreted twin, (c) the compiled module's own source loaded interpreted under another name;
a compiled path without a twin (one implementation) runs (a) and (c). Each figure is the best of
``--rounds`` rounds, the implementations of a pair taking turns within a round; CPU time
(``time.process_time``) is reported beside wall time. A pair's ``gain`` is the share of the
interpreted twin's CPU time the compiled path saves (``1 - compiled / twin``). Nothing is asserted
beyond the implementations giving the same results.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import xxhash
from clusterlab.core.codec import (
    AppendPosition,
    CommitPosition,
    LogBlock,
    SessionMessageHeader,
    frame,
    framewalk,
    framing,
    session_header,
)
from clusterlab.core.service.api import ClientSession
from clusterlab.harness import promotion
from clusterlab.harness import recorder as recorder_module
from clusterlab.harness.services import digest, kv, kvdigest

from benchmarks import write_results
from clusterlab import compiled

DEFAULT_OUT = Path(__file__).resolve().parent / "compiled_twins.json"
TERM = 7
TARGET_S = 0.03  # each timed run is sized to about this much wall time

Case = Callable[[], Any]


def interpreted(module: ModuleType, name: str) -> ModuleType:
    """``module``'s source run interpreted, as a separate module named ``name``."""
    source = Path(module.__file__ or "").parent / (module.__name__.rsplit(".", 1)[1] + ".py")
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded  # dataclasses look their module up
    spec.loader.exec_module(loaded)
    return loaded


# ---------------------------------------------------------------------------------------------- inputs


def log_block_entries(payload_size: int, count: int) -> tuple[bytes, int]:
    """``count`` framed session messages of ``payload_size`` bytes, as a LogBlock carries them."""
    parts, position = [], 1 << 20
    for i in range(count):
        framed = frame(session_header.encode_session_message(TERM, 42, 1_000 + i, bytes(payload_size)), position, TERM)
        parts.append(framed)
        position += len(framed)
    return b"".join(parts), 1 << 20


def trace_payloads() -> list[bytes]:
    """What a leader's trace records per client request, in proportion: the ingress message, the
    LogBlocks to two followers, their AppendPositions, the CommitPositions, the service's reply."""
    out: list[bytes] = []
    for i in range(64):
        position = 4096 + 128 * i
        request = session_header.encode_session_message(TERM, 42, 1_000 + i, kv.put(i, f"k{i % 16}", "v" * 20))
        entries = frame(request, position, TERM)
        block = LogBlock(TERM, position, position, 0, 1, entries).encode()
        reply = session_header.encode_session_message(TERM, 42, 1_000 + i, b'{"id":1,"ok":true}')
        out += [request, block, block, AppendPosition(TERM, position + 128, 1, 0).encode()]
        out += [AppendPosition(TERM, position + 128, 2, 0).encode(), CommitPosition(TERM, position + 128, 0).encode()]
        out += [CommitPosition(TERM, position + 128, 0).encode(), reply]
    return out


def kv_puts(count: int = 1024, keys: int = 64) -> list[bytes]:
    """A client's plain puts: ``keys`` keys rewritten over and over, 16-byte values."""
    return [kv.put(i, f"key-{i % keys}", f"value-{i:010d}") for i in range(count)]


def put_stream(count: int = 1024, keys: int = 64) -> list[tuple[str, str]]:
    return [(f"key-{i % keys}", f"value-{i:010d}") for i in range(count)]


# ---------------------------------------------------------------------------------------------- pairs


def walk_cases(size: int, compiled_walk: ModuleType) -> tuple[int, dict[str, Case]]:
    buffer, base = log_block_entries(size, 64)

    def source_walk() -> Any:
        frames, position, bad = compiled_walk.scan_frames(buffer, base)
        return framing.WalkResult(frames, position, None if bad < 0 else framing._error_at(buffer, bad, position))

    cases = {
        "compiled": lambda: framing.walk_frames(buffer, base),
        "twin": lambda: framing.walk_frames_py(buffer, base),
        "source": source_walk,
    }
    summaries = {
        name: [(f.position, f.leadership_term_id, f.frame_type, f.payload) for f in fn().frames]
        for name, fn in cases.items()
    }
    assert summaries["compiled"] == summaries["twin"] == summaries["source"] and len(summaries["twin"]) == 64
    return 64, cases


def promotion_cases(source: ModuleType, batch: bool) -> tuple[int, dict[str, Case]]:
    payloads = trace_payloads()
    table = recorder_module._promotions()
    unknown = recorder_module._unknown
    if batch:
        cases: dict[str, Case] = {
            "compiled": lambda: promotion.promote_fixed(payloads, table, unknown),
            "twin": lambda: recorder_module.promote_many_py(payloads, table),
            "source": lambda: source.promote_fixed(payloads, table, unknown),
        }
    else:
        one, one_py, one_src = promotion.promote_one, recorder_module.promote_py, source.promote_one
        cases = {
            "compiled": lambda: [one(p, table, unknown) for p in payloads],
            "twin": lambda: [one_py(p) for p in payloads],
            "source": lambda: [one_src(p, table, unknown) for p in payloads],
        }
    results = [fn() for fn in cases.values()]
    assert results[0] == results[1] == results[2]
    return len(payloads), cases


def digest_cases(source: ModuleType, every: int) -> tuple[int, dict[str, Case]]:
    """A stream of puts; the state digest after every ``every``-th (1: a recording service)."""
    puts = put_stream()
    head = digest.str_item_head(kv.DOMAIN, "entry")
    constant = digest.counter_item_hash(kv.DOMAIN, "revision", 1)

    def key_digests(module: ModuleType) -> Case:
        def run() -> list[bytes]:
            d = module.KeyDigests(head, constant, xxhash.xxh3_128_intdigest)
            entries: dict[str, tuple[str, int]] = {}
            out = []
            for revision, (key, value) in enumerate(puts, 1):
                entries[key] = (value, revision)
                d.written(key)
                if revision % every == 0:
                    out.append(d.digest(entries, revision))
            return out

        return run

    def multiset() -> list[bytes]:
        m = digest.MultisetDigest(kv.DOMAIN)
        entries: dict[str, tuple[str, int]] = {}
        out = []
        for revision, (key, value) in enumerate(puts, 1):
            old = entries.get(key)
            if old is not None:
                m.remove("entry", key, *old)
            entries[key] = (value, revision)
            m.add("entry", key, value, revision)
            if revision % every == 0:
                out.append(((m.value + revision * constant) % digest.MODULUS).to_bytes(16, "little"))
        return out

    cases = {"compiled": key_digests(kvdigest), "twin": multiset, "source": key_digests(source)}
    results = [fn() for fn in cases.values()]
    assert results[0] == results[1] == results[2] and results[0]
    return len(puts), cases


def _offered(sent: list[bytes], payload: bytes) -> bool:
    sent.append(payload)
    return True


def kv_apply(module: ModuleType, leader: bool) -> Case:
    """The KV service applying a stream of plain puts through on_session_message, as a leader
    (answering) or a follower."""
    payloads = kv_puts()

    def run() -> tuple[list[bytes], bytes]:
        sent: list[bytes] = []
        session = ClientSession(42, 102, "egress", b"", lambda _s, payload: _offered(sent, payload))
        service = module.KeyValueService()
        apply, to = service.on_session_message, session if leader else None
        for p in payloads:
            apply(to, 1, p)
        return sent, service.state_digest()

    return run


def kv_apply_cases(source: ModuleType, leader: bool) -> tuple[int, dict[str, Case]]:
    """One implementation (no twin): the compiled service against its source."""
    cases = {"compiled": kv_apply(kv, leader), "source": kv_apply(source, leader)}
    results = [fn() for fn in cases.values()]
    assert results[0] == results[1] and len(results[0][0]) == (len(kv_puts()) if leader else 0)
    return len(kv_puts()), cases


def session_encode_cases(source: ModuleType) -> tuple[int, dict[str, Case]]:
    payloads = [bytes([i]) * 64 for i in range(256)]
    enc, enc_src = session_header.encode_session_message, source.encode_session_message
    cases: dict[str, Case] = {
        "compiled": lambda: [enc(TERM, 42, 1_000, p) for p in payloads],
        "twin": lambda: [SessionMessageHeader(TERM, 42, 1_000, p).encode() for p in payloads],
        "source": lambda: [enc_src(TERM, 42, 1_000, p) for p in payloads],
    }
    results = [fn() for fn in cases.values()]
    assert results[0] == results[1] == results[2]
    return len(payloads), cases


def session_fields_cases(source: ModuleType) -> tuple[int, dict[str, Case]]:
    messages = [session_header.encode_session_message(TERM, 42, 1_000 + i, bytes(64)) for i in range(256)]
    fields, fields_src = session_header.session_message_fields, source.session_message_fields

    def decode_ids(message: bytes) -> tuple[int, int, int]:
        m = SessionMessageHeader.decode(message)
        return m.leadership_term_id, m.cluster_session_id, m.timestamp

    cases: dict[str, Case] = {
        "compiled": lambda: [fields(m) for m in messages],
        "twin": lambda: [decode_ids(m) for m in messages],
        "source": lambda: [fields_src(m) for m in messages],
    }
    results = [fn() for fn in cases.values()]
    assert results[0] == results[1] == results[2]
    return len(messages), cases


# ---------------------------------------------------------------------------------------------- timing


def calibrate(fn: Case) -> int:
    """Calls of ``fn`` per timed run (about TARGET_S of wall time)."""
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= TARGET_S / 4:
            return max(1, round(number * TARGET_S / elapsed))
        number *= 2


def measure(cases: dict[str, Case], items: int, rounds: int) -> dict[str, dict[str, float]]:
    """Best-of-``rounds`` ns per item (CPU and wall) of each case, the cases taking turns."""
    numbers = {name: calibrate(fn) for name, fn in cases.items()}
    best = {name: [float("inf"), float("inf")] for name in cases}
    names = list(cases)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # a different first each round
            fn, number = cases[name], numbers[name]
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(number):
                fn()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            best[name][0] = min(best[name][0], cpu / (number * items) * 1e9)
            best[name][1] = min(best[name][1], wall / (number * items) * 1e9)
    return {name: {"cpu_ns_per_item": round(c, 1), "wall_ns_per_item": round(w, 1)} for name, (c, w) in best.items()}


def ratios(figures: dict[str, dict[str, float]], compiled_case: str, twin_case: str) -> dict[str, float]:
    a, b = figures[compiled_case]["cpu_ns_per_item"], figures[twin_case]["cpu_ns_per_item"]
    return {"speedup": round(b / a, 2), "gain": round(1 - a / b, 3)}


TIMED = (framewalk, promotion, kvdigest, kv, session_header)


def machine_note() -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "build": compiled.BUILD,  # "none" for a wheel (no build record): see compiled_modules
        "clusterlab": str(Path(compiled.__file__).parent),
        "compiled_modules": [m.__name__ for m in TIMED if not (m.__file__ or "").endswith(".py")],
    }


def pairs() -> list[tuple[str, str, Callable[[], tuple[int, dict[str, Case]]]]]:
    """(pair, item, cases) of every twin pair."""
    walk_src = interpreted(framewalk, "clusterlab_bench_framewalk_source")
    promotion_src = interpreted(promotion, "clusterlab_bench_promotion_source")
    kvdigest_src = interpreted(kvdigest, "clusterlab_bench_kvdigest_source")
    kv_src = interpreted(kv, "clusterlab_bench_kv_source")
    header_src = interpreted(session_header, "clusterlab_bench_session_header_source")
    return [
        ("frame walk, 64 B messages", "frame", lambda: walk_cases(64, walk_src)),
        ("frame walk, 1 KiB messages", "frame", lambda: walk_cases(1024, walk_src)),
        ("promotion, batch (promote_many)", "payload", lambda: promotion_cases(promotion_src, batch=True)),
        ("promotion, one by one (promote)", "payload", lambda: promotion_cases(promotion_src, batch=False)),
        ("KV digest, digest after every put", "put", lambda: digest_cases(kvdigest_src, every=1)),
        ("KV digest, digest every 64 puts", "put", lambda: digest_cases(kvdigest_src, every=64)),
        ("KV plain puts, leader", "put", lambda: kv_apply_cases(kv_src, leader=True)),
        ("KV plain puts, follower", "put", lambda: kv_apply_cases(kv_src, leader=False)),
        ("session header encode", "message", lambda: session_encode_cases(header_src)),
        ("session header fields", "message", lambda: session_fields_cases(header_src)),
    ]


LABELS = {
    "frame walk": ("framewalk.scan_frames (walk_frames)", "framing.walk_frames_py"),
    "promotion": ("promotion.promote_fixed / promote_one", "recorder.promote_many_py / promote_py"),
    "KV digest": ("kvdigest.KeyDigests", "digest.MultisetDigest (item_hash)"),
    "KV plain puts": ("kv on_session_message: encode_reply(execute())", None),
    "session header encode": ("session_header.encode_session_message", "SessionMessageHeader(...).encode()"),
    "session header fields": ("session_header.session_message_fields", "SessionMessageHeader.decode"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--note", default="", help="what was measured (the build, the tree), kept in the JSON")
    args = parser.parse_args(argv)
    from_source = [m.__name__ for m in TIMED if (m.__file__ or "").endswith(".py")]
    if from_source:
        print(f"warning: build {compiled.BUILD!r}, from source: {from_source}: (a) is not compiled", file=sys.stderr)
    doc: dict[str, Any] = {"benchmark": "compiled_twins", "rounds": args.rounds, "note": args.note}
    doc["machine"] = machine_note()
    doc["pairs"] = []
    for pair, item, build in pairs():
        items, cases = build()
        figures = measure(cases, items, args.rounds)
        labels = next(v for k, v in LABELS.items() if pair.startswith(k))
        row: dict[str, Any] = {"pair": pair, "item": item, "compiled": labels[0], "twin": labels[1]}
        row["figures"] = figures
        if "twin" in figures:
            row["compiled_vs_twin"] = ratios(figures, "compiled", "twin")
        row["compiled_vs_own_source"] = ratios(figures, "compiled", "source")
        doc["pairs"].append(row)
        cpu = "  ".join(f"{n} {f['cpu_ns_per_item']:.0f}" for n, f in figures.items())
        gains = "  ".join(f"gain vs {k[12:]} {v['gain']:+.0%}" for k, v in row.items() if k.startswith("compiled_vs"))
        print(f"{pair:<36} ns/{item} CPU: {cpu}  {gains}")
    doc["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(f"written {write_results(args.out, doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
