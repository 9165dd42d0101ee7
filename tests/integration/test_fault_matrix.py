"""The fault matrix: bench keeps measuring through every server fault, classifies each, and loses nothing."""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import threading
import time
from pathlib import Path

import pytest

from tailscope.client.openai import Timeouts
from tailscope.runner.bench import run_bench
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.bench_result import BenchResult
from tailscope.runner.loadgen import DispatchConfig
from tailscope.store.runs import RunStore
from tailscope.testing.fault_server import FaultConfig, FaultServer
from tailscope.testing.judgement import Judgement
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer
from tailscope.workload.lengths import fixed
from tailscope.workload.simple import LoadShape, simple_requests

pytestmark = pytest.mark.integration

EXPECTED = {
    "reset": "stream_broken",
    "http500": "http_5xx",
    "http502": "http_5xx",
    "http503": "http_5xx",
    "http429": "http_429",
    "http429_bare": "http_429",
    "http401": "http_401",
    "http403": "http_4xx",
    "cut": "stream_broken",
    "stall": "timeout_total",
    "hang": "timeout_first_token",
    "slowloris": "timeout_first_token",
    "notjson": "malformed_sse",
    "badutf8": "malformed_sse",
    "hugeline": "malformed_sse",
    "error_event": "server_error_event",
}


def run(url: str, shape: LoadShape, db: Path, timeouts: Timeouts, http_client: str = "raw") -> BenchResult:
    cfg = BenchConfig(
        url=url,
        model=None,
        dispatch=DispatchConfig(concurrency=shape.concurrency, duration_s=shape.duration_s, drain_timeout_s=10),
        requested_rate=shape.rate,
        timeouts=timeouts,
        metrics_url=None,
        handle_signals=False,
        http_client=http_client.split("+")[0],
        arrival_stamp="kernel" if http_client.endswith("+kernel") else "user",
    )
    return asyncio.run(run_bench(cfg, simple_requests(shape, fixed(8), fixed(8), seed=0), store=RunStore(db)))


@pytest.mark.parametrize("http_client", ["raw", "raw+kernel", "aiohttp"])
def test_every_fault_is_classified_and_ok_requests_are_untouched(
    tmp_path: Path, http_client: str, judgement: Judgement
) -> None:
    faults: list[str] = []
    for f in EXPECTED:
        faults += ["ok", f]
    faults.append("ok")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with FaultServer(FaultConfig(faults=faults, ttft_ms=20, itl_ms=5, tokens=8, stall_ms=3000)) as srv:
        res = run(
            srv.url,
            LoadShape(concurrency=1, requests=len(faults)),
            tmp_path / "db.duckdb",
            Timeouts(connect_s=2, first_token_s=1.0, total_s=2.0),
            http_client,
        )
        log = srv.log
    if http_client.endswith("+kernel"):  # the kernel's stamps were taken, not silently the user-space ones
        assert res.extra["client"]["arrival_stamps"]["kernel"] > 0
    rss_growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    records = sorted(res.records, key=lambda r: r.id)
    assert len(records) == len(faults) == len(log.served)
    off_ns: list[int] = []
    for r, fault in zip(records, log.served, strict=True):
        if fault == "ok":
            assert r.ok, (r.id, r.error, r.error_detail)
            assert r.output_tokens == 8
            truth = log.token_ns[r.id]
            off_ns.append(abs((res.t0_ns + (r.first_token_ns or 0)) - truth[0]))
        else:
            assert r.error is not None, (fault, r)
            assert r.error.value == EXPECTED[fault], (fault, r.error, r.error_detail)
    s = res.summary
    assert s.requests.completed == faults.count("ok")
    assert s.requests.failed == len(EXPECTED)
    assert sum(s.errors.values()) == len(EXPECTED)
    http429 = next(r for r, f in zip(records, log.served, strict=True) if f == "http429")
    assert "Retry-After: 1" in (http429.error_detail or "")
    assert rss_growth_mb < 200  # the 10 MB line is refused at 1 MiB, not buffered without bound
    # an ok request right after a fault is measured as precisely as any other
    judgement.holds(
        max(off_ns) < 5_000_000, f"the first-token precision after a fault: {max(off_ns) / 1e6:.1f} ms worst"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused_then_server_restarted_mid_run(tmp_path: Path) -> None:
    port = free_port()
    first = ScriptedServer(ScriptedConfig(ttft_ms=10, itl_ms=2), port=port).__enter__()
    down_at: list[float] = []
    up_at: list[float] = []
    holder: dict[str, ScriptedServer] = {}

    def chaos() -> None:
        time.sleep(1.5)
        first.__exit__(None, None, None)
        down_at.append(time.perf_counter())
        time.sleep(1.5)
        holder["second"] = ScriptedServer(ScriptedConfig(ttft_ms=10, itl_ms=2), port=port).__enter__()
        up_at.append(time.perf_counter())

    t = threading.Thread(target=chaos)
    t.start()
    try:
        res = run(
            f"http://127.0.0.1:{port}",
            LoadShape(rate=10, arrival="constant", duration_s=5.0),
            tmp_path / "db.duckdb",
            Timeouts(connect_s=1, first_token_s=2, total_s=3),
        )
    finally:
        t.join()
        if "second" in holder:
            holder["second"].__exit__(None, None, None)
    records = res.records
    assert len(records) == 50
    errors = [r for r in records if not r.ok]
    assert errors, "requests sent while the server was down must fail"
    assert {r.error.value for r in errors if r.error} <= {"connect", "stream_broken"}
    assert any(r.error and r.error.value == "connect" for r in errors)
    # after the restart the run recovers: the last second of the schedule is all ok
    tail = [r for r in records if r.scheduled_ns > 4.0e9]
    assert tail
    assert all(r.ok for r in tail)
    assert res.summary.requests.completed + res.summary.requests.failed == 50


def test_two_writers_and_readers_on_one_store_lose_nothing_and_never_fail(tmp_path: Path) -> None:
    """Two benches write one store while `runs list` (which repairs) and `runs show` read it in a loop."""
    import json
    import subprocess
    import sys

    db = tmp_path / "s.duckdb"
    env = {**os.environ}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tailscope", *args, "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )

    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:

        def bench(i: int) -> list[str]:
            out = str(tmp_path / f"b{i}.json")
            return [sys.executable, "-m", "tailscope", "bench", "--url", srv.url, "--concurrency", "6", "--duration",
                    "4", "--output-tokens", "8", "--db", str(db), "--quiet", "--json", out]  # fmt: skip

        benches = [
            subprocess.Popen(bench(i), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(2)
        ]
        t0 = time.monotonic()
        reads = 0
        time.sleep(1.5)
        while any(b.poll() is None for b in benches):
            for args in (("runs", "list", "--json", "-"), ("runs", "show", "latest", "--json", "-")):
                p = cli(*args)
                assert p.returncode == 0, p.stderr
                assert "Traceback" not in p.stderr
                reads += 1
        for b in benches:
            _, err = b.communicate(timeout=60)
            assert b.returncode == 0, err
        print(f"benches done in {time.monotonic() - t0:.1f} s with {reads} reads")
    assert reads >= 2
    listing = cli("runs", "list", "--json", "-")
    runs = {r["run"]["id"]: r for r in json.loads(listing.stdout)}
    for i in range(2):
        export = json.loads((tmp_path / f"b{i}.json").read_text())
        stored = runs[export["run"]["id"]]
        assert stored["run"]["status"] == "complete"
        assert stored["requests"]["total"] == len([r for r in export["requests"] if not r.get("warmup")]) > 0
        assert stored["requests"]["completed"] == export["summary"]["requests"]["completed"]
