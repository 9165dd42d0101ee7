"""A small agent app instrumented with the real OpenTelemetry SDK exports OTLP/HTTP to ``tailscope trace collect``.

The app (a threaded HTTP server on 127.0.0.1) handles ``POST /chat`` under a SERVER span: a planning model call to the
built-in ``tailscope serve``, three tool calls one after another (one runs a real SQLite query), a second model call,
two tool calls in parallel threads, and a final model call. ``trace analyze`` must find the sequential group it was
written with, and its projected saving.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

TOOL_MS = {"search_kb": 40, "get_order": 30, "get_user": 35}
REQUESTS = 12


def _start(args: list[str], pattern: str, env_db: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailscope", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(pattern, line)
        if m:
            return proc, m.group(1)
    proc.kill()
    _, err = proc.communicate(timeout=10)
    raise AssertionError(f"{args[0]} did not start: {lines} {err}")


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
    return out + err


@pytest.fixture
def serve_url() -> Iterator[str]:
    proc, url = _start(
        ["serve", "--port", "0", "--speed", "20", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"],
        r"at (http://127\.0\.0\.1:\d+)/v1",
    )
    try:
        yield url
    finally:
        _stop(proc)


def _agent_app(tracer: Any, llm_url: str, db_path: Path) -> ThreadingHTTPServer:
    from opentelemetry import context, trace

    def llm(name: str, prompt: str) -> None:
        with tracer.start_as_current_span(f"chat {name}", kind=trace.SpanKind.CLIENT) as s:
            s.set_attribute("gen_ai.operation.name", "chat")
            s.set_attribute("gen_ai.request.model", "llama-3.1-8b")
            body = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": prompt}], "max_tokens": 4}
            req = urllib.request.Request(
                llm_url + "/v1/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=20) as r:
                usage = json.loads(r.read())["usage"]
            s.set_attribute("gen_ai.usage.output_tokens", usage["completion_tokens"])

    def tool(name: str, ms: int) -> None:
        with tracer.start_as_current_span(f"execute_tool {name}") as s:
            s.set_attribute("gen_ai.operation.name", "execute_tool")
            s.set_attribute("gen_ai.tool.name", name)
            if name == "get_order":
                with tracer.start_as_current_span("SELECT orders", kind=trace.SpanKind.CLIENT) as q:
                    q.set_attribute("db.system.name", "sqlite")
                    q.set_attribute("db.query.text", "SELECT id, total FROM orders WHERE user_id = ?")
                    con = sqlite3.connect(db_path)
                    try:
                        con.execute("SELECT id, total FROM orders WHERE user_id = ?", (42,)).fetchall()
                    finally:
                        con.close()
                    time.sleep(ms / 1000)
            else:
                time.sleep(ms / 1000)

    def in_thread(fn: Any, *args: Any) -> Any:
        ctx = context.get_current()

        def run() -> None:
            token = context.attach(ctx)
            try:
                fn(*args)
            finally:
                context.detach(token)

        return run

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with tracer.start_as_current_span("POST /chat", kind=trace.SpanKind.SERVER) as s:
                s.set_attribute("http.request.method", "POST")
                s.set_attribute("http.route", "/chat")
                with tracer.start_as_current_span("invoke_agent support") as a:
                    a.set_attribute("gen_ai.operation.name", "invoke_agent")
                    llm("plan", "plan the answer")
                    for name, ms in TOOL_MS.items():  # written sequentially on purpose: the waterfall
                        tool(name, ms)
                    llm("reflect", "what else is needed")
                    with ThreadPoolExecutor(2) as pool:
                        futures = [pool.submit(in_thread(tool, n, 30)) for n in ("weather", "stock")]
                        for f in futures:
                            f.result()
                    llm("answer", "write the answer")
                s.set_attribute("http.response.status_code", 200)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def test_otel_sdk_to_collect_then_analyze_finds_the_waterfall(tmp_path: Path, serve_url: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    db = tmp_path / "store.duckdb"
    app_db = tmp_path / "app.sqlite"
    con = sqlite3.connect(app_db)
    con.execute("CREATE TABLE orders (id INTEGER, user_id INTEGER, total REAL)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(k, 42, 9.5) for k in range(50)])
    con.commit()
    con.close()

    collector, port = _start(
        ["trace", "collect", "--port", "0", "--set", "live", "--db", str(db), "--token", "s3cret"],
        r"listening on http://127\.0\.0\.1:(\d+)/v1/traces",
    )
    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    exporter = OTLPSpanExporter(
        endpoint=f"http://127.0.0.1:{port}/v1/traces", headers={"Authorization": "Bearer s3cret"}, timeout=10
    )
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    server = _agent_app(provider.get_tracer("agent-app"), serve_url, app_db)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        app_url = f"http://127.0.0.1:{server.server_address[1]}/chat"
        for _ in range(REQUESTS):
            req = urllib.request.Request(app_url, data=b"{}", headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
        assert provider.force_flush(timeout_millis=20_000)
    finally:
        server.shutdown()
        server.server_close()
        provider.shutdown()
        log = _stop(collector)
    assert collector.returncode == 0, log
    assert f"received {REQUESTS * 11} spans" in log, log

    out = tmp_path / "analysis.json"
    res = subprocess.run(
        [sys.executable, "-m", "tailscope", "trace", "analyze", "--set", "live", "--db", str(db), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    result = json.loads(out.read_text())
    assert result["traces"]["count"] == REQUESTS
    assert list(result["root_ops"]) == ["POST /chat"]
    patterns = {w["pattern"]: w for w in result["waterfalls"]}
    key = "invoke_agent support → execute_tool search_kb, execute_tool get_order, execute_tool get_user"
    assert key in patterns, list(patterns)
    w = patterns[key]
    assert w["traces"] == REQUESTS
    # Overlapped, the three tools take as long as the longest (40 ms) instead of ≈ 105 ms: ≈ 65 ms saved per trace.
    assert 50 <= w["mean_saving_ms"] <= 90, w
    assert w["projected_p99_ms"] < result["root_ops"]["POST /chat"]["p99"] - 40
    # The parallel pair is not reported as a waterfall.
    assert not any("weather" in p for p in patterns)
    layers = result["layers"]["median_bucket"]["composition"]
    assert layers["inference"]["ms_per_trace"] > 0
    assert layers["business"]["ms_per_trace"] > 0  # the SQLite query
    assert result["operations"]["SELECT orders"]["spans"] == REQUESTS

    show = subprocess.run(
        [sys.executable, "-m", "tailscope", "trace", "show", "", "--set", "live", "--db", str(db), "--json", "-"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert show.returncode == 1  # an empty prefix matches every trace: ambiguous, one clear line
    assert "ambiguous" in show.stderr
