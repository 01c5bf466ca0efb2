"""``clusterlab report RUN``: one self-contained HTML file about a recorded run (inline CSS and SVG, no
script and nothing fetched from a network, so it opens offline and can be attached to a CI job):

- the verdict: the check's ``check.json`` (DuckDB or Spark) when the run has one, else the local verdict;
- a timeline: per member a lane coloured by role (follower, candidate, leader, down) with the
  leadership terms marked, the commit position over time, faults shaded (kill, partition, pause,
  truncate, every ``chaos_apply`` .. ``chaos_heal`` span), and every client operation's latency
  (invoke to ok/fail/info);
- the first divergence, if any: position, members and digests, and the messages around it.
"""

from __future__ import annotations

import html
import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusterlab.chaos.verdict import verify_run
from clusterlab.harness.completeness import Completeness
from clusterlab.harness.trace import Run, TraceError, open_run

WIDTH = 1100
LEFT = 120
RIGHT = 20
LANE = 26
ROLE_COLOURS = {"FOLLOWER": "#9ecae1", "CANDIDATE": "#fdae6b", "LEADER": "#31a354", "DOWN": "#d9d9d9"}
OP_COLOURS = {"ok": "#2b8cbe", "fail": "#de2d26", "info": "#fd8d3c"}
MEMBER_COLOURS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"]
LATENCY_FLOOR_MS = 0.1
MAX_POINTS = 1500  # per polyline: enough for a picture, small enough for a file to mail
FAULT_KINDS = {"kill", "partition", "pause", "truncate", "clock_skew", "chaos_apply"}
FAULT_ENDS = {"restart", "heal", "resume", "chaos_heal"}


class ReportError(Exception):
    """A path that cannot be reported on: says which and why."""


@dataclass
class Span:
    start: int
    end: int
    label: str


@dataclass
class _Axis:
    t0: int
    t1: int

    def x(self, t: int) -> float:
        span = max(self.t1 - self.t0, 1)
        return LEFT + (WIDTH - LEFT - RIGHT) * (t - self.t0) / span

    def seconds(self, t: int) -> float:
        return (t - self.t0) / 1e9


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def value_html(value: Any, limit: int = 400) -> str:
    """A value as an operator reads it: a mapping as a definition list (key, value), a list as its
    items (scalars comma-separated, structures one per row), a scalar as escaped text cut at
    ``limit`` characters; never a Python or JSON repr."""
    if isinstance(value, dict):
        if not value:
            return "-"
        return (
            '<dl class="kv">'
            + "".join(f"<dt>{_esc(k)}</dt><dd>{value_html(v, limit)}</dd>" for k, v in value.items())
            + "</dl>"
        )
    if isinstance(value, (list, tuple)):
        if not value:
            return "-"
        if all(not isinstance(v, (dict, list, tuple)) for v in value):
            return _esc(_cut(", ".join("-" if v is None else str(v) for v in value), limit))
        return '<ol class="kv">' + "".join(f"<li>{value_html(v, limit)}</li>" for v in value) + "</ol>"
    return "-" if value is None else _esc(_cut(str(value), limit))


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _thin(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    return [points[int(i * step)] for i in range(MAX_POINTS)] + [points[-1]]


# ----------------------------------------------------------------------------------------------- data


def _member_of_source(source: str) -> int | None:
    if source.startswith("node-"):
        try:
            return int(source.split("-", 1)[1])
        except ValueError:
            return None
    return None


def role_spans(events: list[dict[str, Any]], members: Iterable[int], t_end: int) -> dict[int, list[Span]]:
    """Per member, consecutive (start, end, role) spans: DOWN between a kill/stop and a (re)start."""
    changes: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for e in events:
        m, kind, source = e["member_id"], e["kind"], e["source"]
        detail = _detail(e)
        if source == "harness" and kind in ("kill", "stop"):
            changes[m].append((e["wall_ns"], "DOWN"))
        elif source == "harness" and kind in ("start", "restart") and detail.get("process", "node") == "node":
            changes[m].append((e["wall_ns"], "FOLLOWER"))
        elif kind == "role" and _member_of_source(source) is not None:
            changes[_member_of_source(source) or 0].append((e["wall_ns"], str(detail.get("role", "FOLLOWER"))))
    spans: dict[int, list[Span]] = {}
    for m in members:
        out: list[Span] = []
        seq = sorted(changes.get(m, []), key=lambda c: c[0])
        for i, (t, role) in enumerate(seq):
            end = seq[i + 1][0] if i + 1 < len(seq) else t_end
            if out and out[-1].label == role:
                out[-1].end = end
            elif end > t:  # a stop at the very end draws nothing
                out.append(Span(t, end, role))
        spans[m] = out
    return spans


def _detail(e: dict[str, Any]) -> dict[str, Any]:
    try:
        d = json.loads(e.get("detail") or "{}")
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def fault_spans(events: list[dict[str, Any]], t_end: int) -> list[Span]:
    """Shaded intervals: each chaos_apply to its chaos_heal; harness faults without one to their end."""
    spans: list[Span] = []
    open_chaos: list[tuple[int, str]] = []
    has_chaos = any(e["kind"] == "chaos_apply" for e in events)
    open_plain: dict[tuple[str, int], int] = {}
    ends = {"kill": "restart", "partition": "heal", "pause": "resume"}
    for e in sorted(events, key=lambda e: e["wall_ns"]):
        if e["source"] not in ("harness", "chaos"):
            continue
        kind, t = e["kind"], e["wall_ns"]
        d = _detail(e)
        if kind == "chaos_apply":
            victims = d.get("victims")
            names = ", ".join(map(str, victims)) if isinstance(victims, list) else victims
            label = f"{d.get('nemesis', 'fault')}" + (f" {names}" if names else "")
            open_chaos.append((t, label))
        elif kind == "chaos_heal" and open_chaos:
            start, label = open_chaos.pop(0)
            spans.append(Span(start, t, label))
        elif not has_chaos and kind in ends:
            open_plain[(kind, e["member_id"])] = t
        elif not has_chaos and kind in ("restart", "heal", "resume"):
            for k, v in list(open_plain.items()):
                if ends[k[0]] == kind and (k[1] == e["member_id"] or kind == "heal"):
                    spans.append(Span(v, t, f"{k[0]} {k[1] if k[1] >= 0 else ''}".strip()))
                    del open_plain[k]
        elif kind in ("truncate", "clock_skew") and not has_chaos:
            spans.append(Span(t, t, f"{kind} {e['member_id']}"))
    spans += [Span(t, t_end, label) for t, label in open_chaos]
    spans += [Span(v, t_end, f"{k[0]} {k[1]}") for k, v in open_plain.items()]
    return spans


def commit_series(events: list[dict[str, Any]]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Per (member, incarnation), (time, commit position) from its node's ``commit`` events: one line
    per incarnation, so a member that was down has a gap, not a line across its downtime."""
    out: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["kind"] == "commit" and e["log_position"] is not None:
            m = _member_of_source(e["source"])
            if m is not None:
                out[(m, e.get("incarnation") or 0)].append((e["wall_ns"], e["log_position"]))
    for series in out.values():
        series.sort()
    return out


def op_latencies(ops: list[dict[str, Any]]) -> list[tuple[int, float, str, str]]:
    """(invoke time, latency ms, outcome kind, label) per completed client operation."""
    invoked: dict[tuple[int, int], dict[str, Any]] = {}
    out = []
    for o in sorted(ops, key=lambda o: (o["wall_ns"], o.get("seq", 0))):
        key = (o["client_id"], o["op_id"])
        if o["kind"] == "invoke":
            invoked[key] = o
        elif key in invoked:
            start = invoked.pop(key)
            label = f"client {o['client_id']} op {o['op_id']} {o['f']} {o.get('key') or ''} -> {o['kind']}"
            out.append((start["wall_ns"], (o["wall_ns"] - start["wall_ns"]) / 1e6, o["kind"], label))
    return out


# ----------------------------------------------------------------------------------------------- verdict


def verdict_of(run_dir: Path) -> dict[str, Any]:
    """``check.json`` (the embedded or Spark check) if present, else the local verdict in the same shape."""
    check = run_dir / "check.json"
    if check.is_file():
        try:
            doc = json.loads(check.read_text())
            engine = "Embedded (DuckDB)" if doc.get("engine") == "duckdb" else "Spark"
            doc["source"] = f"{engine} check (check.json)"
            return doc
        except ValueError:
            pass

    v = verify_run(run_dir)
    checks: dict[str, Any] = {
        name: {"ok": not found, "count": len(found), "violations": found[:20]} for name, found in v.violations.items()
    }
    if v.linearizability is not None and "linearizability" in checks:
        # Structured, as in check.json: each violating key with its minimal sub-history (drawn below).
        checks["linearizability"]["violations"] = [
            {**k.as_dict(), "problem": k.describe()} for k in v.linearizability.violations()[:20]
        ]
    return {
        "source": "local verdict (DuckDB)",
        "ok": v.ok,
        "status": v.status,
        "rows": v.rows,
        "torn": v.torn,
        "checks": checks,
    }


def first_divergence(verdict: dict[str, Any]) -> dict[str, Any] | None:
    agreement = verdict.get("checks", {}).get("agreement", {})
    violations = agreement.get("violations") or []
    return violations[0] if violations else None


# ----------------------------------------------------------------------------------------------- svg


def _timeline_svg(run: Run, axis: _Axis, members: list[int], verdict: dict[str, Any] | None = None) -> str:
    """The run's timeline: role lanes, the commit position and client op latency over time, faults shaded
    across every panel, failing ops marked."""
    events = run.events.to_pylist()
    lanes_h = LANE * len(members)
    commit_top = 30 + lanes_h + 30
    lat_top = commit_top + PANEL_HEIGHT + 40
    height = lat_top + PANEL_HEIGHT + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">'
    ]
    parts += _fault_shading(fault_spans(events, axis.t1), axis, height)
    parts += _role_lanes(events, axis, members)
    parts += _commit_panel(commit_series(events), axis, members, commit_top)
    parts += _latency_panel(op_latencies(run.ops.to_pylist()), axis, lat_top)
    parts += _failing_op_marks(failing_ops(verdict or {}, run.ops.to_pylist()), axis, 20, height - 40)
    parts += _time_axis(axis, height - 20)
    parts.append("</svg>")
    return "\n".join(parts)


PANEL_HEIGHT = 160  # the commit position and op latency panels


def _fault_shading(faults: list[Any], axis: _Axis, height: int) -> list[str]:
    """Each fault, shaded across every panel and named at the top."""
    parts = []
    for f in faults:
        x0, x1 = axis.x(f.start), axis.x(f.end)
        parts.append(
            f'<rect class="fault" x="{x0:.1f}" y="20" width="{max(x1 - x0, 2):.1f}" height="{height - 40}" '
            f'fill="#e31a1c" fill-opacity="0.10"><title>{_esc(f.label)}: {axis.seconds(f.start):.2f}s'
            f"..{axis.seconds(f.end):.2f}s</title></rect>"
        )
        parts.append(f'<text x="{x0 + 2:.1f}" y="16" fill="#b30000">{_esc(f.label)}</text>')
    return parts


def _role_lanes(events: list[dict[str, Any]], axis: _Axis, members: list[int]) -> list[str]:
    """A lane per member coloured by its role over time, partitions marked, each term's start on its leader."""
    parts = []
    spans = role_spans(events, members, axis.t1)
    for i, m in enumerate(members):
        y = 30 + i * LANE
        parts.append(f'<text x="8" y="{y + LANE / 2 + 4}">member {m}</text>')
        for s in spans.get(m, []):
            x0, x1 = axis.x(s.start), axis.x(s.end)
            parts.append(
                f'<rect class="role" x="{x0:.1f}" y="{y + 2}" width="{max(x1 - x0, 1):.1f}" '
                f'height="{LANE - 4}" fill="{ROLE_COLOURS.get(s.label, "#bbb")}"><title>member {m} '
                f"{_esc(s.label)} {axis.seconds(s.start):.2f}s..{axis.seconds(s.end):.2f}s</title></rect>"
            )
    parts += _partition_marks(partition_spans(events, axis.t1), axis, members)
    for e in events:
        if e["kind"] == "leader" and e["leadership_term_id"] is not None:
            leader = _member_of_source(e["source"])
            if leader in members:
                y = 30 + members.index(leader) * LANE
                parts.append(
                    f'<text x="{axis.x(e["wall_ns"]) + 3:.1f}" y="{y + LANE / 2 + 4}" fill="#fff" '
                    f'font-weight="bold">term {e["leadership_term_id"]}</text>'
                )
    return parts


def _commit_panel(commits: dict[Any, Any], axis: _Axis, members: list[int], commit_top: int) -> list[str]:
    """Each member incarnation's commit position over time, with its legend."""
    commit_h = PANEL_HEIGHT
    top_pos = max((p for s in commits.values() for _, p in s), default=1) or 1
    parts = [f'<text x="8" y="{commit_top - 8}" font-weight="bold">commit position (max {top_pos})</text>']
    parts.append(
        f'<rect x="{LEFT}" y="{commit_top}" width="{WIDTH - LEFT - RIGHT}" height="{commit_h}" '
        f'fill="none" stroke="#ccc"/>'
    )
    for (m, incarnation), series in sorted(commits.items()):
        pts = " ".join(
            f"{axis.x(t):.1f},{commit_top + commit_h - commit_h * p / top_pos:.1f}" for t, p in _thin(series)
        )
        parts.append(_commit_line(m, incarnation, pts))
    parts += _commit_legend(members, commit_top)
    return parts


def _latency_panel(lats: list[tuple[Any, float, str, str]], axis: _Axis, lat_top: int) -> list[str]:
    """Each client op's latency at its time, log scale, coloured by its outcome."""
    lat_h = PANEL_HEIGHT
    top_lat = max([lat for _, lat, _, _ in lats] + [10.0])
    low, high = math.log10(LATENCY_FLOOR_MS), math.log10(top_lat)

    def lat_y(lat: float) -> float:
        return lat_top + lat_h - lat_h * (math.log10(max(lat, LATENCY_FLOOR_MS)) - low) / (high - low)

    parts = [
        f'<text x="8" y="{lat_top - 8}" font-weight="bold">client op latency, ms, log scale (max {top_lat:.1f})</text>'
    ]
    parts.append(
        f'<rect x="{LEFT}" y="{lat_top}" width="{WIDTH - LEFT - RIGHT}" height="{lat_h}" fill="none" stroke="#ccc"/>'
    )
    tick = 1.0
    while tick <= top_lat:
        tick_y = lat_y(tick)
        parts.append(
            f'<line x1="{LEFT}" y1="{tick_y:.1f}" x2="{WIDTH - RIGHT}" y2="{tick_y:.1f}" stroke="#eee"/>'
            f'<text x="{LEFT - 40}" y="{tick_y + 4:.1f}">{tick:g} ms</text>'
        )
        tick *= 10
    for t, lat, kind, label in lats[:: max(1, len(lats) // (MAX_POINTS * 2))]:
        op_y = lat_y(lat)
        parts.append(
            f'<circle class="op" cx="{axis.x(t):.1f}" cy="{op_y:.1f}" r="2" '
            f'fill="{OP_COLOURS.get(kind, "#999")}"><title>{_esc(label)}: {lat:.2f} ms</title></circle>'
        )
    for i, (kind, colour) in enumerate(OP_COLOURS.items()):
        parts.append(f'<text x="8" y="{lat_top + 14 + 14 * i}" fill="{colour}">{kind}</text>')
    return parts


def _time_axis(axis: _Axis, y: int) -> list[str]:
    """Ticks in seconds along the bottom, about ten of them."""
    parts = []
    total = axis.seconds(axis.t1)
    step = max(0.1, round(total / 10, 1)) if total > 0 else 1
    k = 0
    while k * step <= total + 1e-9:
        x = axis.x(axis.t0 + int(k * step * 1e9))
        parts.append(
            f'<line x1="{x:.1f}" y1="{y - 5}" x2="{x:.1f}" y2="{y}" stroke="#666"/>'
            f'<text x="{x - 8:.1f}" y="{y + 12}">{k * step:.1f}s</text>'
        )
        k += 1
    return parts


# Each member's commit line is told apart by its dash pattern as well as its colour, and drawn a pixel
# or two below the previous member's: members that agree would otherwise hide each other's line.
COMMIT_DASHES = ["", "7 3", "2 2", "9 3 2 3", "1 3"]
COMMIT_OFFSET_PX = 2.0


def _commit_style(m: int) -> tuple[str, str, float]:
    """(colour, dash pattern, vertical offset in px) of member ``m``'s commit line."""
    return MEMBER_COLOURS[m % len(MEMBER_COLOURS)], COMMIT_DASHES[m % len(COMMIT_DASHES)], COMMIT_OFFSET_PX * m


def _commit_line(m: int, incarnation: int, points: str) -> str:
    colour, dash, offset = _commit_style(m)
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<polyline class="commit" data-member="{m}" points="{points}" fill="none" stroke="{colour}" '
        f'stroke-width="1.5"{dash_attr} transform="translate(0 {offset:g})">'
        f"<title>member {m} incarnation {incarnation} commit position</title></polyline>"
    )


def _commit_legend(members: list[int], commit_top: int) -> list[str]:
    """Per member: a sample of its line (colour and dashes) and its name."""
    out = []
    for i, m in enumerate(members):
        colour, dash, _ = _commit_style(m)
        y = commit_top + 14 + 14 * i
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(
            f'<line class="commit-key" x1="8" y1="{y - 4}" x2="36" y2="{y - 4}" stroke="{colour}" '
            f'stroke-width="2"{dash_attr}/><text x="40" y="{y}" fill="{colour}">member {m}</text>'
        )
    return out


@dataclass
class PartitionSpan:
    start: int
    end: int
    groups: list[list[int]]

    def cut_off(self) -> list[int]:
        """The members outside the largest group (with no majority side: all but the first largest)."""
        if not self.groups:
            return []
        largest = max(self.groups, key=len)
        return sorted({m for g in self.groups if g is not largest for m in g} - set(largest))


def partition_spans(events: list[dict[str, Any]], t_end: int) -> list[PartitionSpan]:
    """Each network partition (a harness ``partition`` with its groups, or a ``chaos_apply`` that
    carries groups) until the next ``heal``/``chaos_heal`` (or the end of the run)."""
    out: list[PartitionSpan] = []
    open_span: PartitionSpan | None = None
    for e in sorted(events, key=lambda e: e["wall_ns"]):
        if e["source"] not in ("harness", "chaos"):
            continue
        groups = _detail(e).get("groups")
        if e["kind"] in ("partition", "chaos_apply") and isinstance(groups, list) and groups:
            groups = [sorted(map(int, g)) for g in groups]
            if open_span is not None and open_span.groups == groups:
                continue  # the nemesis's chaos_apply and the cluster's own partition event: one cut
            if open_span is not None:
                open_span.end = e["wall_ns"]
                out.append(open_span)
            open_span = PartitionSpan(e["wall_ns"], t_end, groups)
        elif e["kind"] in ("heal", "chaos_heal") and open_span is not None:
            open_span.end = e["wall_ns"]
            out.append(open_span)
            open_span = None
    if open_span is not None:
        out.append(open_span)
    return out


def _partition_marks(spans: list[PartitionSpan], axis: _Axis, members: list[int]) -> list[str]:
    """A hatched band on the lane of each member cut off by a partition, for as long as it lasts."""
    out = [
        '<defs><pattern id="cut" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="2" height="6" fill="#b30000" fill-opacity="0.55"/>'
        "</pattern></defs>"
    ]
    for span in spans:
        sides = " | ".join(",".join(map(str, g)) for g in span.groups)
        x0, x1 = axis.x(span.start), axis.x(span.end)
        for m in span.cut_off():
            if m not in members:
                continue
            y = 30 + members.index(m) * LANE
            out.append(
                f'<rect class="partitioned" data-member="{m}" x="{x0:.1f}" y="{y + 2}" '
                f'width="{max(x1 - x0, 2):.1f}" height="{LANE - 4}" fill="url(#cut)" stroke="#b30000">'
                f"<title>member {m} partitioned off ({_esc(sides)}) {axis.seconds(span.start):.2f}s.."
                f"{axis.seconds(span.end):.2f}s</title></rect>"
            )
    return out


_OP_IN_TEXT = re.compile(r"client (\d+) op (\d+)")


def failing_ops(verdict: dict[str, Any], ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client operations the verdict's violations name (Spark rows carry client_id/op_id, the
    local verdict's lines say ``client C op N``), each with its invoke and completion times."""
    named: list[tuple[int, int, str]] = []
    for check, result in (verdict.get("checks") or {}).items():
        for v in result.get("violations") or []:
            if isinstance(v, dict) and v.get("op_id") is not None and v.get("client_id") is not None:
                named.append((int(v["client_id"]), int(v["op_id"]), check))
            elif isinstance(v, str) and (match := _OP_IN_TEXT.search(v)):
                named.append((int(match[1]), int(match[2]), check))
    out = []
    seen = set()
    for client_id, op_id, check in named:
        if (client_id, op_id) in seen:
            continue
        seen.add((client_id, op_id))
        rows = sorted(
            (o for o in ops if o["client_id"] == client_id and o["op_id"] == op_id), key=lambda o: o["wall_ns"]
        )
        if rows:
            last = rows[-1]
            out.append(
                {
                    "client_id": client_id,
                    "op_id": op_id,
                    "check": check,
                    "start": rows[0]["wall_ns"],
                    "end": last["wall_ns"],
                    "label": f"client {client_id} op {op_id} {last['f']} {last.get('key') or ''} -> {last['kind']}",
                }
            )
    return out


def _failing_op_marks(ops: list[dict[str, Any]], axis: _Axis, top: float, height: float) -> list[str]:
    """A red band from invoke to completion of each op a violation names, across every panel."""
    out = []
    for op in ops:
        x0, x1 = axis.x(op["start"]), axis.x(op["end"])
        out.append(
            f'<rect class="failing-op" x="{x0:.1f}" y="{top}" width="{max(x1 - x0, 2):.1f}" height="{height}" '
            f'fill="none" stroke="#c62828" stroke-width="2" stroke-dasharray="5 3">'
            f"<title>failing op ({_esc(op['check'])}): {_esc(op['label'])}</title></rect>"
            f'<text x="{x0 + 3:.1f}" y="{top + height - 4}" fill="#c62828" font-weight="bold">'
            f"&#9888; {_esc(op['label'])} ({_esc(op['check'])})</text>"
        )
    return out


# ----------------------------------------------------------------------------------------------- html


_CSS = """
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: left; }
.pass { color: #1a7f37; font-weight: bold; } .fail { color: #c62828; font-weight: bold; }
code, pre { font-family: monospace; font-size: 12px; } pre { background: #f6f8fa; padding: 8px; overflow-x: auto; }
dl.kv { display: grid; grid-template-columns: max-content auto; gap: 1px 10px; margin: 0; }
dl.kv dt { color: #555; } dl.kv dd { margin: 0; } ol.kv { margin: 0; padding-left: 18px; }
.judged { margin: 8px 0 12px; font-size: 13px; } td.first { font-size: 12px; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 6px; border-radius: 3px; }
"""


def _completeness_html(completeness: Completeness | None) -> str:
    """The completeness verdict: red with every finding (file, rows lost, offset) when the trace is
    INCOMPLETE or CORRUPT; the torn tails a SIGKILL explains are listed either way."""
    if completeness is None:
        return ""
    rows = "".join(
        f'<tr><td class="{"pass" if f.status == "COMPLETE" else "fail"}">'
        f"{'ok' if f.status == 'COMPLETE' else _esc(f.status)}</td><td><code>{_esc(f.file)}</code></td>"
        f"<td>{_esc(f.problem)}</td><td>{'' if f.rows_lost is None else f.rows_lost}</td>"
        f"<td>{'' if f.offset is None else f.offset}</td></tr>"
        for f in [*completeness.findings, *completeness.notes]
    )
    status = completeness.status
    head = (
        f'<p>Completeness: <span class="{"pass" if completeness.ok else "fail"}">{_esc(status)}</span>'
        + (
            " (the trace lacks or changed data the run declares: not judged)"
            if not completeness.ok
            else " (every table and file the run declares is here, as it left them)"
        )
        + "</p>"
    )
    if not rows:
        return head
    return (
        head
        + "<table><tr><th>verdict</th><th>file</th><th>what</th><th>rows lost</th><th>offset</th></tr>"
        + rows
        + "</table>"
    )


def _verdict_html(verdict: dict[str, Any]) -> str:
    """The verdict line, what it was judged from (source, rows per table, torn files) and one row per
    check with its first violation's fields."""
    ok = verdict.get("ok")
    status = verdict.get("status") or ("PASS" if ok else "FAIL")
    rows = []
    for name, c in verdict.get("checks", {}).items():
        first = c.get("violations", [None])[0] if c.get("violations") else ""
        if isinstance(first, dict):
            first = {k: v for k, v in first.items() if k not in ("messages", "minimal")}
        rows.append(
            f'<tr><td>{_esc(name)}</td><td class="{"pass" if c.get("ok") else "fail"}">'
            f"{'ok' if c.get('ok') else 'FAIL'}</td><td>{c.get('count', 0)}</td>"
            f'<td class="first">{value_html(first) if first else ""}</td></tr>'
        )
    judged = {
        "source": verdict.get("source", ""),
        "rows": verdict.get("rows") or {},
        "torn files": verdict.get("torn", 0),
    }
    return (
        f'<p>Verdict: <span class="{"pass" if ok else "fail"}">{_esc(status)}</span></p>'
        f'<div class="judged">{value_html(judged)}</div>'
        "<table><tr><th>check</th><th>verdict</th><th>violations</th><th>first violation</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _divergence_html(div: dict[str, Any] | None) -> str:
    if div is None:
        return "<p>None: every member reached the same state at every log position.</p>"
    if isinstance(div, str):
        return f"<pre>{_esc(div)}</pre>"
    members = div.get("members") or []
    rows = "".join(
        f"<tr><td>{value_html(m.get('member'))}</td><td>{value_html(m.get('incarnation'))}</td>"
        f"<td>{value_html(m.get('entry_type'))}</td><td><code>{value_html(m.get('entry_digest'))}</code></td>"
        f"<td><code>{value_html(m.get('state_digest'))}</code></td></tr>"
        for m in members
    )
    msgs = div.get("messages") or []
    msg_rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{value_html(m.get(k))}</td>"
            for k in ("process", "direction", "channel", "msg_type", "leadership_term_id", "log_position")
        )
        + "</tr>"
        for m in msgs
    )
    return (
        f"<p>First divergent log position: <b>{value_html(div.get('log_position'))}</b> "
        f"({value_html(div.get('kind', ''))})</p>"
        "<table><tr><th>member</th><th>incarnation</th><th>entry</th><th>entry digest</th><th>state digest</th>"
        f"</tr>{rows}</table>"
        + (
            "<h3>Messages around it</h3><table><tr><th>process</th><th>dir</th><th>channel</th><th>type</th>"
            f"<th>term</th><th>position</th></tr>{msg_rows}</table>"
            if msgs
            else ""
        )
    )


_OP_COLOURS = {"ok": "#9ecae1", "info": "#fdd0a2", "stale": "#fb6a4a"}


def linearizability_html(verdict: dict[str, Any], max_keys: int = 5) -> str:
    """Each non-linearizable key's minimal sub-history drawn as Porcupine does: one row per client,
    each op a bar from invocation to completion (an op of unknown outcome runs on to the right edge,
    hatched), labelled with the call and what it returned; a read is red when it returned a value
    the write drawn after it had already replaced."""
    check = verdict.get("checks", {}).get("linearizability")
    if not check:
        return "<p>Not checked (a verdict from before the linearizability check).</p>"
    found = [v for v in check.get("violations") or [] if isinstance(v, dict) and v.get("minimal")]
    if not found:
        return (
            "<p>Every key's history is linearizable.</p>"
            if check.get("ok")
            else "<p>Violations without a sub-history to draw.</p>"
        )
    parts = []
    for v in found[:max_keys]:
        ops = v["minimal"]
        t0 = min(o["invoke"] for o in ops)
        t1 = max(max(o["invoke"], o["complete"] or o["invoke"]) for o in ops)
        span = max(1, t1 - t0)
        clients = sorted({o["client"] for o in ops})
        left, width, row = 70, 760, 34
        right = left + width
        height = row * len(clients) + 30

        def x(t: int, t0: int = t0, span: int = span, left: int = left, width: int = width) -> float:
            return left + (t - t0) / span * (width - 80)  # room on the right for unknown outcomes

        shapes = [
            f'<text x="4" y="{row * i + 22}" font-size="12">client {_esc(c)}</text>' for i, c in enumerate(clients)
        ]
        for o in ops:
            y = row * clients.index(o["client"]) + 6
            a = x(o["invoke"])
            b = right if o["complete"] is None else max(a + 3, x(o["complete"]))
            colour = _OP_COLOURS["info" if o["status"] != "ok" else "ok"]
            if o["f"] == "get" and o is ops[-1]:
                colour = _OP_COLOURS["stale"]
            dash = ' stroke-dasharray="4 2"' if o["complete"] is None else ""
            shapes.append(
                f'<rect x="{a:.1f}" y="{y}" width="{b - a:.1f}" height="22" fill="{colour}" stroke="#555"{dash}>'
                f"<title>{_esc(o['text'])}; invoked +{(o['invoke'] - t0) / 1e6:.3f} ms"
                + ("" if o["complete"] is None else f", completed +{(o['complete'] - t0) / 1e6:.3f} ms")
                + "</title></rect>"
                f'<text x="{a + 3:.1f}" y="{y + 15}" font-size="11">{_esc(o["text"].split(" ", 2)[-1])}</text>'
            )
        shapes.append(
            f'<text x="{left}" y="{height - 4}" font-size="10">0 ms</text>'
            f'<text x="{right - 80}" y="{height - 4}" font-size="10" text-anchor="end">'
            f"+{span / 1e6:.3f} ms</text>"
        )
        run = f" (run {_esc(v['run_id'])})" if v.get("run_id") else ""
        parts.append(
            f"<h3>key {_esc(v.get('key'))}{run}: {len(ops)} of {_esc(v.get('ops'))} ops cannot be linearized</h3>"
            f'<svg width="{right + 10}" height="{height}" xmlns="http://www.w3.org/2000/svg">{"".join(shapes)}</svg>'
            "<pre>" + _esc("\n".join(o["text"] for o in ops)) + "</pre>"
        )
    more = len(found) - max_keys
    parts.insert(
        0,
        "<p>Each key's smallest set of ops that no order can explain. Bars run from invocation to "
        "completion (dashed: outcome unknown); red: the read that cannot be placed. <code>= ?</code>: "
        "the value the op returned is not needed to show the violation.</p>",
    )
    return "".join(parts) + (f"<p>... and {more} more key(s).</p>" if more > 0 else "")


def render(run_dir: Path | str) -> str:
    """The report of ``run_dir`` as one HTML document."""
    return render_with_status(run_dir)[0]


def render_with_status(run_dir: Path | str) -> tuple[str, str]:
    """The report of ``run_dir`` as one HTML document, and the verdict it shows (``PASS``, ``FAIL``,
    ``INCOMPLETE`` or ``CORRUPT``)."""
    directory = Path(run_dir)
    try:
        run = open_run(directory)
    except TraceError as e:
        raise ReportError(str(e)) from e
    meta = run.meta
    completeness = run.completeness
    if completeness is not None and not completeness.ok:
        # Judged from the files as they are now (a check.json written before the damage would say PASS).
        verdict: dict[str, Any] = {
            "source": "completeness, read before any check",
            "ok": False,
            "status": str(completeness.status),
            "rows": {k: t.num_rows for k, t in run.tables.items()},
            "torn": len(run.torn),
            "checks": {},
        }
    else:
        verdict = verdict_of(directory)
    times = [
        t
        for table in (run.events, run.ops, run.applied)
        if table.num_rows
        for t in (min(table.column("wall_ns").to_pylist()), max(table.column("wall_ns").to_pylist()))
    ]
    axis = _Axis(min(times, default=0), max(times, default=1))
    members = sorted(
        {m["member_id"] for m in meta.get("members", []) if isinstance(m, dict) and "member_id" in m}
        | {m for m in run.applied.column("member_id").to_pylist() if m >= 0}
        | {m for m in map(_member_of_source, run.events.column("source").to_pylist()) if m is not None}
    )
    svg = _timeline_svg(run, axis, members, verdict)
    head = ", ".join(
        f"{k} <b>{value_html(meta.get(k))}</b>"
        for k in ("run_id", "scenario", "seed", "outcome", "git_commit")
        if meta.get(k) is not None
    )
    legend = "".join(f'<span style="background:{c}">{r.lower()}</span>' for r, c in ROLE_COLOURS.items())
    legend += '<span style="background:rgba(227,26,28,0.15)">fault</span>'
    status = str(verdict.get("status") or ("PASS" if verdict.get("ok") else "FAIL"))
    return (
        f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>clusterlab run {_esc(meta.get("run_id", directory.name))}</title>
<style>{_CSS}</style></head><body>
<h1>clusterlab run report</h1>
<p>{head}<br>{len(members)} members; {run.applied.num_rows} applied rows, {run.messages.num_rows} messages,
{run.ops.num_rows} client op rows; run directory <code>{_esc(directory.resolve())}</code>;
report written {time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}</p>
<h2>Verdict</h2>
{_completeness_html(completeness)}
{_verdict_html(verdict)}
<h2>Timeline</h2>
<p class="legend">{legend} (hover for details; time in seconds from the first event)</p>
{svg}
<h2>First divergence</h2>
{_divergence_html(first_divergence(verdict)) if verdict.get("checks") else "<p>Not judged.</p>"}
<h2>Linearizability: minimal non-linearizable sub-histories</h2>
{linearizability_html(verdict)}
</body></html>
""",
        status,
    )


def write_report(run_dir: Path | str, out: Path | str | None = None) -> Path:
    """Write the HTML report of ``run_dir`` (default ``RUN/report.html``); returns its path."""
    return write_report_with_status(run_dir, out)[0]


def write_report_with_status(run_dir: Path | str, out: Path | str | None = None) -> tuple[Path, str]:
    """Write the HTML report of ``run_dir`` (default ``RUN/report.html``); returns its path and the
    verdict it shows."""
    path = Path(out) if out is not None else Path(run_dir) / "report.html"
    document, status = render_with_status(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document)
    return path, status
