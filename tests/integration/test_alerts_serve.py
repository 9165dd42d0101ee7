"""Generated alerts in a real Prometheus scraping ``tailscope serve``: a bench run that overloads one server (two
running slots, sixteen concurrent streams) fires the queueing and TTFT alerts; a gentle bench on the other fires none.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_alerts_prometheus import Prometheus, write_rules

pytestmark = [pytest.mark.integration, pytest.mark.prometheus, pytest.mark.slow]

_URL = re.compile(r"at (http://127\.0\.0\.1:\d+)/v1")


def _start_serve(log: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    out = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailscope", "serve", "--port", "0", *extra],
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = _URL.search(log.read_text(errors="replace"))
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    proc.wait(timeout=5)
    raise AssertionError(f"tailscope serve did not start: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[dict[str, str]]:
    procs: list[subprocess.Popen[bytes]] = []
    urls: dict[str, str] = {}
    try:
        for name, extra in (("healthy", ()), ("faulty", ("--max-num-seqs", "2"))):
            proc, url = _start_serve(tmp_path / f"serve-{name}.log", *extra)
            procs.append(proc)
            urls[name] = url
        yield urls
    finally:
        for p in procs:
            _stop(p)


def _bench(url: str, db: Path, log: Path, concurrency: int) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailscope", "bench", "--url", url, "--concurrency", str(concurrency),
         "--duration", "120", "--input-tokens", "256", "--output-tokens", "96", "--db", str(db), "--quiet",
         "--metrics-url", "off"],
        stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out.close()
    return proc


def test_overload_fires_alerts_and_gentle_load_does_not(tmp_path: Path, servers: dict[str, str]) -> None:
    targets = {job: url.removeprefix("http://") for job, url in servers.items()}
    rule_files = [write_rules(tmp_path, "healthy-svc", "healthy"), write_rules(tmp_path, "faulty-svc", "faulty")]
    prom = Prometheus(tmp_path, targets, rule_files)
    prom.start()
    benches = [
        _bench(servers["faulty"], tmp_path / "faulty.duckdb", tmp_path / "bench-faulty.log", 16),
        _bench(servers["healthy"], tmp_path / "healthy.duckdb", tmp_path / "bench-healthy.log", 1),
    ]
    try:
        wanted = {"FaultySvcRequestsQueueing", "FaultySvcTTFTP99SloBreach"}
        firing: set[str] = set()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not wanted <= firing:
            firing = {a["labels"]["alertname"] for a in prom.alerts() if a["state"] == "firing"}
            time.sleep(0.5)
        assert wanted <= firing, f"firing: {sorted(firing)}; bench: {(tmp_path / 'bench-faulty.log').read_text()}"
        served = prom.query('tailscope:ttft_seconds:p50{contract="healthy-svc"}')
        assert served, "the healthy server's TTFT was never recorded (no traffic?)"
        assert float(served[0]["value"][1]) < 1.5
        active = prom.alerts()
        assert not [a for a in active if a["labels"].get("contract") == "healthy-svc"], active
    finally:
        for b in benches:
            _stop(b)
        prom.stop()
