"""bench over real loopback sockets against the scripted server, whose true token send times are known."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tailscope.client.openai import Timeouts
from tailscope.metrics.slo import parse_slo
from tailscope.runner.bench import run_bench
from tailscope.runner.bench_config import BenchConfig
from tailscope.runner.bench_result import BenchResult
from tailscope.runner.loadgen import DispatchConfig
from tailscope.store.runs import RunStore
from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer
from tailscope.workload.lengths import fixed
from tailscope.workload.simple import LoadShape, simple_requests

pytestmark = pytest.mark.integration
MS = 1e6


def bench(srv: ScriptedServer, db: Path, shape: LoadShape, out_tokens: int = 16, **kw: object) -> BenchResult:
    cfg = BenchConfig(
        url=srv.url,
        model=None,
        dispatch=DispatchConfig(concurrency=shape.concurrency, duration_s=shape.duration_s),
        requested_rate=shape.rate,
        timeouts=Timeouts(connect_s=5, first_token_s=30, total_s=60),
        handle_signals=False,
        **kw,  # type: ignore[arg-type]
    )
    specs = simple_requests(shape, fixed(32), fixed(out_tokens), seed=1)
    return asyncio.run(run_bench(cfg, specs, store=RunStore(db)))


def test_timings_agree_with_server_truth(tmp_path: Path) -> None:
    with ScriptedServer(ScriptedConfig(ttft_ms=40, itl_ms=8)) as srv:
        res = bench(
            srv,
            tmp_path / "db.duckdb",
            LoadShape(concurrency=8, requests=48),
            out_tokens=24,
            slos=(parse_slo("ttft_p99=5s"),),
        )
        truth = srv.truth
    assert res.summary.requests.completed == 48
    first_err, end_err, itl_err = [], [], []
    for r in res.records:
        assert r.ok, r.error_detail
        sent = truth.token_ns[r.server_request_id or ""]
        assert len(sent) == len(r.chunk_times_ns) == 24
        measured = [res.t0_ns + t for t in r.chunk_times_ns]
        first_err.append((measured[0] - sent[0]) / MS)
        end_err.append((measured[-1] - sent[-1]) / MS)
        itl_err.extend((np.diff(measured) - np.diff(sent)) / MS)
    # every measured time is after the true send time, and close to it
    assert min(first_err) >= 0
    assert np.median(first_err) <= 2.0
    assert np.median(end_err) <= 2.0
    assert abs(np.median(itl_err)) <= 2.0
    assert res.summary.tpot_ms.p50 == pytest.approx(8.0, abs=2.0)
    assert res.summary.output_tokens.mean == 24
    assert res.summary.goodput_rps == pytest.approx(res.summary.requests_per_s)


def test_open_loop_stall_is_seen_by_every_request_scheduled_inside_it(tmp_path: Path) -> None:
    cfg = ScriptedConfig(ttft_ms=20, itl_ms=5, stall_start_s=1.5, stall_s=2.0)
    with ScriptedServer(cfg) as srv:
        t_server = srv.state.t_start_ns if srv.state else 0
        res = bench(srv, tmp_path / "db.duckdb", LoadShape(rate=20, arrival="constant", duration_s=5.0), out_tokens=4)
    s0 = t_server + int(1.5e9)
    s1 = s0 + int(2.0e9)
    inside = 0
    for r in res.records:
        sched_abs = res.t0_ns + r.scheduled_ns
        if s0 <= sched_abs <= s1 - int(0.1e9):
            inside += 1
            assert r.ok
            ttft = (r.first_token_ns or 0) - r.scheduled_ns
            # the token could not leave before the stall ended: TTFT covers the rest of the stall
            assert ttft >= (s1 - sched_abs) - int(5 * MS), (r.id, ttft / MS)
    assert inside >= 30
    # open loop: the schedule did not wait for the stalled responses
    assert res.summary.send_lag_ms.p99 is not None
    assert res.summary.send_lag_ms.p99 < 500  # a schedule that waited would lag by the 2 s stall


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--arrival", "zigzag", "--rate", "2"], "--arrival"),
        (["--input-tokens", "banana"], "--input-tokens"),
        (["--slo", "latency<5"], "--slo"),
        (["--rate", "5", "--concurrency", "0"], "--concurrency"),
        (["--endpoint", "embeddings"], "--endpoint"),
    ],
)
def test_bad_flag_values_give_one_clear_line(tmp_path: Path, args: list[str], needle: str) -> None:
    p = run_cli("bench", "--url", "http://127.0.0.1:9", "--requests", "3", "--db", str(tmp_path / "db"), *args)
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert needle in lines[0]
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(("mode", "needle"), [("html", "HTML page"), ("unauthorized", "401"), (None, "cannot reach")])
def test_bad_targets_give_one_clear_line(tmp_path: Path, mode: str | None, needle: str) -> None:
    if mode is None:
        url = f"http://127.0.0.1:{free_port()}"
        p = run_cli("bench", "--url", url, "--requests", "3", "--db", str(tmp_path / "db"), "--quiet")
    else:
        with ScriptedServer(ScriptedConfig(mode=mode)) as srv:
            p = run_cli("bench", "--url", srv.url, "--requests", "3", "--db", str(tmp_path / "db"), "--quiet")
    assert p.returncode == 1
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.startswith("tailscope: error")]
    assert len(lines) == 1, p.stderr
    assert needle in lines[0]
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_keeps_completed_records_and_marks_incomplete(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    db = tmp_path / "db.duckdb"
    # each request streams for 8 s, longer than the 5 s grace: requests in flight at SIGINT end incomplete
    with ScriptedServer(ScriptedConfig(ttft_ms=20, itl_ms=20)) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tailscope",
                "bench",
                "--url",
                srv.url,
                "--rate",
                "20",
                "--duration",
                "30",
                "--output-tokens",
                "400",
                "--db",
                str(db),
                "--quiet",
                "--json",
                str(tmp_path / "out.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(10.0)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        completed_on_server = srv.truth.completed
    assert proc.returncode == code, err
    show = run_cli("runs", "show", "latest", "--json", "-", "--db", str(db))
    doc = json.loads(show.stdout)
    assert doc["run"]["status"] == "incomplete"
    export = json.loads((tmp_path / "out.json").read_text())
    ok = [r for r in export["requests"] if r["status"] == "ok"]
    assert len(ok) == doc["summary"]["requests"]["completed"]
    # nothing the client completed is lost (the server may have finished writing a few responses that the
    # client had not read when the grace period ended: those are incomplete, not ok)
    assert 0 < len(ok) <= completed_on_server
    assert doc["summary"]["requests"]["incomplete"] >= 1


def test_store_readers_never_fail_while_a_run_writes(tmp_path: Path) -> None:
    db = tmp_path / "db.duckdb"
    with ScriptedServer(ScriptedConfig(ttft_ms=5, itl_ms=2)) as srv:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tailscope",
                "bench",
                "--url",
                srv.url,
                "--concurrency",
                "8",
                "--duration",
                "6",
                "--output-tokens",
                "16",
                "--db",
                str(db),
                "--quiet",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        reads = 0
        time.sleep(1.5)
        while proc.poll() is None:
            p = run_cli("runs", "list", "--json", "-", "--db", str(db))
            assert p.returncode == 0, p.stderr
            reads += 1
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    assert reads >= 2
    final = json.loads(run_cli("runs", "list", "--json", "-", "--db", str(db)).stdout)
    assert final[0]["run"]["status"] == "complete"
