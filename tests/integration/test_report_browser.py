"""The HTML reports and the dashboard in a real headless browser (Debian's Chromium driven by Playwright).

Never downloads a browser: Playwright launches ``/usr/bin/chromium`` (``$TAILSCOPE_CHROMIUM``) through
``executable_path``; ``scripts/setup_browser.sh`` installs both. Without them these tests skip with the reason, except
under ``CI``, where they fail. A screenshot of every page goes to ``test-artifacts/``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import test_report_dashboard

from tailscope.report.html import fmt_num

report_store = test_report_dashboard.report_store  # the same store fixture (two real bench runs + an XSS probe)

pytestmark = [pytest.mark.integration, pytest.mark.browser]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = os.environ.get("TAILSCOPE_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
XSS = "<script>alert(1)</script>"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"browser tests cannot run and CI is set, so they are not skipped: {reason}")
    pytest.skip(f"browser tests skipped: {reason} (run scripts/setup_browser.sh)")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium (the system one) for the whole module."""
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed in this venv")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=60_000)
        try:
            yield b
        finally:
            b.close()


class Page:
    """A page with everything it logged, every request it made and every dialog it opened."""

    def __init__(self, browser: Any) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.set_default_timeout(30_000)
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

        def on_dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", on_dialog)

    def open(self, url: str) -> Any:
        self.page.goto(url)
        self.page.wait_for_selector("body[data-charts-ready]")
        return self.page

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.page.close()


#: SVG elements plotly draws for data: lines, filled areas, bars.
DRAWN = ".scatterlayer .trace path.js-line, .scatterlayer .trace path.js-fill, .barlayer .trace .point path"


def check_charts(page: Any, expected_kinds: set[str]) -> None:
    """Every chart with data has drawn it (SVG traces present); the kinds expected are all there."""
    charts = page.evaluate(
        """(DRAWN) => Array.from(document.querySelectorAll('[data-kind]')).map(el => ({
            id: el.id, kind: el.dataset.kind, points: Number(el.dataset.points || 0), empty: el.dataset.empty === '1',
            svg: el.querySelectorAll('svg.main-svg').length,
            drawn: el.querySelectorAll(DRAWN).length,
        }))""",
        DRAWN,
    )
    kinds = {c["kind"] for c in charts}
    assert expected_kinds <= kinds, charts
    for c in charts:
        assert c["svg"] > 0, c
        if c["points"] > 0 and not c["empty"]:
            assert c["drawn"] > 0, c


def test_run_report_renders_without_errors_and_shows_export_numbers(
    browser: Any, report_store: dict[str, Any], tmp_path: Path
) -> None:
    from tailscope.cli.main import main

    run_id = report_store["bench"][0]
    out, export = tmp_path / "run.html", tmp_path / "run.json"
    for cmd in (["report", run_id, "--out", str(out)], ["runs", "export", run_id, "--out", str(export)]):
        with pytest.raises(SystemExit) as exc:
            main([*cmd, "--db", str(report_store["db"])])
        assert exc.value.code == 0, cmd
    doc = json.loads(export.read_text())
    p = Page(browser)
    try:
        page = p.open(out.as_uri())
        check_charts(page, {"cdf", "histogram", "timeseries", "gantt"})
        assert p.errors == []
        assert p.requests == [out.as_uri()]  # nothing fetched but the file itself
        for key in ("ttft_ms.p99", "e2e_ms.p50", "output_tokens_per_s", "requests.completed"):
            shown = page.inner_text(
                f'#percentiles [data-key="{key}"], #rates [data-key="{key}"], #errors [data-key="{key}"]'
            )
            obj: Any = doc["summary"]
            for part in key.split("."):
                obj = obj[part]
            assert shown.strip() == fmt_num(obj), key
        # the log-axis switch re-lays the CDFs out
        assert page.evaluate("document.getElementById('cdf-ttft_ms').layout.xaxis.type") == "log"
        page.click("#logx")
        assert page.evaluate("document.getElementById('cdf-ttft_ms').layout.xaxis.type") == "linear"
        p.shot("report-run")
    finally:
        p.close()


def test_xss_probe_is_inert(browser: Any, report_store: dict[str, Any], tmp_path: Path) -> None:
    import tailscope

    out = tailscope.write_report(tmp_path / "xss.html", report_store["xss"], store=report_store["db"])
    p = Page(browser)
    try:
        page = p.open(out.as_uri())
        page.wait_for_timeout(300)
        assert p.dialogs == []
        assert p.errors == []
        assert page.inner_text('[data-field="run.profile"]') == XSS  # shown as text, not run
        assert page.evaluate("document.querySelectorAll('script').length") == 3  # data, plotly, report: no others
        page.hover("#per-class")
        check_charts(page, {"cdf", "timeseries", "gantt"})
        p.shot("report-xss")
    finally:
        p.close()


def test_trace_report_renders(browser: Any, report_store: dict[str, Any], tmp_path: Path) -> None:
    import tailscope
    from tailscope.store.db import Database
    from tailscope.store.spans import SpanStore
    from tailscope.trace.demo import demo_traces

    db = Database(report_store["db"])
    store = SpanStore(db)
    if "browser-demo" not in {s.name for s in store.list_sets()}:
        store.write("browser-demo", (s for t in demo_traces(60) for s in t), source=XSS)
    out = tailscope.write_report(tmp_path / "traces.html", traces="browser-demo", store=report_store["db"])
    p = Page(browser)
    try:
        page = p.open(out.as_uri())
        check_charts(page, {"layers", "waterfall"})
        assert p.errors == []
        assert p.dialogs == []
        page.select_option("#trace-pick", "1")
        page.wait_for_timeout(200)
        assert p.errors == []
        p.shot("report-traces")
    finally:
        p.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dashboard(report_store: dict[str, Any]) -> Iterator[str]:
    """``tailscope ui`` as a real process on a free loopback port; stopped at the end."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailscope", "ui", "--port", str(port), "--db", str(report_store["db"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read().decode() if proc.stdout else ""
                    pytest.fail(f"tailscope ui did not start: {out}")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def test_dashboard_lists_opens_and_compares(browser: Any, report_store: dict[str, Any], dashboard: str) -> None:
    a, b = report_store["bench"]
    p = Page(browser)
    try:
        page = p.page
        page.goto(dashboard)
        rows = page.eval_on_selector_all("#runs tbody tr[data-run]", "els => els.map(e => e.dataset.run)")
        assert {a, b, report_store["xss"]} <= set(rows)
        p.shot("dashboard-runs")
        page.select_option("select[name=kind]", "bench")
        page.click("#filters button[type=submit]")
        page.wait_for_load_state()
        rows = page.eval_on_selector_all("#runs tbody tr[data-run]", "els => els.map(e => e.dataset.run)")
        assert set(rows) == {a, b}

        page.click(f'a[href="/runs/{a}"]')
        page.wait_for_selector("body[data-charts-ready]")
        check_charts(page, {"cdf", "histogram", "timeseries", "gantt"})
        assert a in page.inner_text("h1")
        p.shot("dashboard-run")

        page.go_back()
        page.check(f'input[value="{a}"]')
        page.check(f'input[value="{b}"]')
        page.click("#compare-button")
        page.wait_for_selector("body[data-charts-ready]")
        check_charts(page, {"cdf", "timeseries", "sweep"})
        assert page.locator("#cmp").count() == 1
        assert page.locator("#sweep").count() == 1
        p.shot("dashboard-compare")
        assert p.errors == []
        assert p.dialogs == []
        assert all(u.startswith(dashboard) for u in p.requests), p.requests
    finally:
        p.close()


def test_drill_report_shades_the_fault_window(browser: Any, tmp_path: Path) -> None:
    """A stored drill's report: the Drill section with its timeline, and the fault window shaded on the time-series
    charts (a rectangle from fault-start to fault-end), drawn without errors."""
    import test_drill

    import tailscope

    db = tmp_path / "d.duckdb"
    out = tmp_path / "drill.html"

    def make() -> Any:  # in its own thread: Playwright's sync API keeps an event loop running in this one
        with test_drill.app_in_thread() as url:
            result = tailscope.drill(test_drill.drill_doc(url, False), store=db, seed=2, timing=False)
        tailscope.write_report(out, "latest:drill", store=db)
        return result

    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(make).result(timeout=120)
    start = next(e.t_s for e in result.timeline if e.event == "fault-start")
    end = next(e.t_s for e in result.timeline if e.event == "fault-end")
    p = Page(browser)
    try:
        page = p.open(out.as_uri())
        assert p.errors == []
        assert "fault-start" in page.inner_text("#drill-timeline")
        shapes = page.evaluate(
            """() => Array.from(document.querySelectorAll('[data-kind="timeseries"]'))
                .map(el => (el.layout && el.layout.shapes) || []).flat()"""
        )
        rects = [s for s in shapes if s.get("type") == "rect"]
        assert rects, "no fault window on the time-series charts"
        assert rects[0]["x0"] == pytest.approx(start, abs=0.01)  # the summary keeps ms
        assert rects[0]["x1"] == pytest.approx(end, abs=0.01)
        p.shot("report-drill")
    finally:
        p.close()
