"""The HTML report as an operator sees it: rendered by a real headless browser (Debian's chromium,
which ci/browser installs where it is missing), for a recorded simulator run with a planted stale
read. The DOM the browser built must show the timeline, the verdicts and the violation's minimal
sub-history, with values (no Python or JSON dict reprs); a screenshot is taken as well.

Without a browser the test skips locally with the reason; in CI (``CLUSTERLAB_REQUIRE_BROWSER=1``,
set by ci/suite) it fails instead."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from clusterlab.chaos.html_report import write_report
from clusterlab.chaos.runner import run_scenario

BROWSERS = ("chromium", "chromium-browser")
BROWSER_TIMEOUT_S = 120.0  # a loaded 2-core machine; a healthy render takes a few seconds
REQUIRE_ENV = "CLUSTERLAB_REQUIRE_BROWSER"


def _browser() -> str:
    """The headless browser's path; skips (locally) or fails (in CI) when there is none."""
    for name in BROWSERS:
        if (path := shutil.which(name)) is not None:
            return path
    reason = f"no headless browser ({' or '.join(BROWSERS)} on PATH): ci/browser installs Debian's chromium"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason}; {REQUIRE_ENV}=1 requires one")
    pytest.skip(reason)


def _run_browser(browser: str, page: Path, profile: Path, *args: str) -> str:
    """Run the browser headless on ``page`` with ``args``; its stdout. It exits by itself once the
    page is loaded and its virtual time budget spent; past the timeout it is killed by its PID."""
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        *args,
        page.as_uri(),
    ]
    env = {**os.environ, "HOME": str(profile)}  # nothing written to a shared home directory
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=BROWSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{browser} did not finish rendering {page} within {BROWSER_TIMEOUT_S:g} s")
    assert proc.returncode == 0, f"{browser} exited {proc.returncode}: {err[-2000:]}"
    return out


class _Text(HTMLParser):
    """The text a reader sees (script and style contents left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _visible_text(dom: str) -> str:
    parser = _Text()
    parser.feed(dom)
    return " ".join(parser.parts)


@pytest.fixture(scope="module")
def stale_read_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of ``clusterlab run leader-isolation --sim --fault-stale-read`` (a linearizability
    violation with a minimal sub-history)."""
    r = run_scenario(
        "leader-isolation", seed=1, sim=True, directory=tmp_path_factory.mktemp("stale-read"), fault_stale_read=True
    )
    assert not r.ok, "the planted stale read must fail the run"
    return write_report(r.trace_dir)


def test_the_browser_shows_timeline_verdicts_and_the_violations_sub_history(
    stale_read_report: Path, tmp_path: Path
) -> None:
    browser = _browser()
    dom = _run_browser(browser, stale_read_report, tmp_path / "profile", "--dump-dom")
    assert "<html" in dom[:200].lower() and dom.rstrip().endswith("</html>"), dom[:200]
    text = _visible_text(dom)
    # The timeline: a role lane per member, commit lines, client ops, the fault shaded.
    for m in (0, 1, 2):
        assert f"member {m}" in text
    assert len(re.findall(r'<rect class="role"', dom)) >= 3
    assert len(re.findall(r'<polyline class="commit"', dom)) >= 3
    assert len(re.findall(r'<circle class="op"', dom)) > 10
    assert 'class="fault"' in dom
    # The verdicts: the run fails, linearizability is the failing check, the others pass.
    assert re.search(r"Verdict:\s*FAIL", text), text[:500]
    row = re.search(r"<tr><td>linearizability</td><td class=\"fail\">FAIL</td><td>(\d+)</td>", dom)
    assert row is not None and int(row[1]) >= 1
    assert re.search(r"<tr><td>agreement</td><td class=\"pass\">ok</td>", dom)
    # The violation's minimal sub-history: its heading, its drawing and its ops as text.
    heading = re.search(r"key (\S+)(?: \(run [^)]*\))?: (\d+) of (\d+) ops cannot be linearized", text)
    assert heading is not None, text[-2000:]
    assert 2 <= int(heading[2]) <= int(heading[3])
    history = re.search(r"<h3>key [^<]*cannot be linearized</h3><svg[^>]*>(.*?)</svg><pre>(.*?)</pre>", dom, re.S)
    assert history is not None
    assert history[1].count("<rect") == int(heading[2])
    ops = history[2].strip().splitlines()
    assert len(ops) == int(heading[2]) and any(" get " in f" {op} " for op in ops), ops
    # Values, not reprs: no Python or JSON mapping or list syntax anywhere a reader looks.
    for repr_mark in ("{'", '{"', "['", "': ", "[0]"):
        assert repr_mark not in text, f"{repr_mark!r} in the report's text"


def test_the_report_screenshot_is_drawn(stale_read_report: Path, tmp_path: Path) -> None:
    browser = _browser()
    shot = tmp_path / "report.png"
    _run_browser(browser, stale_read_report, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2600")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 2600)
    assert len(data) > 50_000, "a near-empty screenshot: the page did not render"
    keep = os.environ.get("CLUSTERLAB_REPORT_SCREENSHOT")
    if keep:  # for a person to look at
        shutil.copy(shot, keep)
