"""Client overhead: how accurately tailscope measures, and at what CPU cost, as concurrent streams grow.

Setup (as in shared/TARGETS.md): a loopback ground-truth streaming server in its own process (TTFT 50 ms, ITL 10 ms,
256 output tokens, closed loop), which logs the true send time of every token event on the same monotonic clock.
Error = the time tailscope measured for an event minus the server's true send time of that event.

Prints, per stream count: TTFT error p50/p99, ITL error p50/p99 (per token gap, measured gap − true gap), sustained
output tokens/s vs the ideal, client CPU % (process time / wall time) and the event-loop lag p99.

    .venv/bin/python benchmarks/client_overhead.py --streams 16,64,256 --tokens 256
    .venv/bin/python benchmarks/client_overhead.py --streams 64,256 --trace-context off,on   # traceparent's cost
    .venv/bin/python benchmarks/client_overhead.py --streams 64,256 --trace-context on --otlp off,on  # client spans
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tailscope.api._support import run_sync as run_async
from tailscope.client.openai import Timeouts
from tailscope.runner.bench import BenchConfig, run_bench
from tailscope.runner.loadgen import DispatchConfig
from tailscope.store.runs import RunStore
from tailscope.workload.lengths import fixed
from tailscope.workload.simple import LoadShape, simple_requests
from tailscope.workload.tracecontext import parse_trace_context, with_trace_context


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, truth: Path, ttft_ms: float, itl_ms: float) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tailscope.testing.scripted_server",
            "--port",
            str(port),
            "--ttft-ms",
            str(ttft_ms),
            "--itl-ms",
            str(itl_ms),
            "--truth-out",
            str(truth),
        ],
    )
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


def start_collector(port: int, db: Path) -> subprocess.Popen[bytes]:
    """``tailscope trace collect`` in its own process: where ``--otlp on`` rows send their client spans."""
    args = ["trace", "collect", "--port", str(port), "--set", "bench", "--db", str(db)]
    proc = subprocess.Popen([sys.executable, "-m", "tailscope", *args], stdout=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("collector did not start")


def measure(
    streams: int, tokens: int, rounds: int, ttft_ms: float, itl_ms: float, trace_ratio: float = 0.0, otlp: bool = False
) -> dict[str, float]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        truth_path = Path(tmp) / "truth.json"
        server = start_server(port, truth_path, ttft_ms, itl_ms)
        collector_port = free_port()
        collector = start_collector(collector_port, Path(tmp) / "traces.duckdb") if otlp else None
        try:
            cfg = BenchConfig(
                url=f"http://127.0.0.1:{port}",
                model=None,
                dispatch=DispatchConfig(concurrency=streams),
                timeouts=Timeouts(first_token_s=60, total_s=120),
                metrics_url=None,
                handle_signals=False,
                trace_ratio=trace_ratio,
                otlp_endpoint=f"http://127.0.0.1:{collector_port}" if otlp else None,
            )
            specs = simple_requests(
                LoadShape(concurrency=streams, requests=streams * rounds), fixed(64), fixed(tokens), seed=0
            )
            specs = with_trace_context(specs, trace_ratio, seed=0, ids=random.Random(1))
            cpu0, wall0 = time.process_time(), time.perf_counter()
            res = run_async(run_bench(cfg, specs, store=RunStore(Path(tmp) / "db.duckdb")))
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        finally:
            for proc in (server, collector):
                if proc is not None:
                    proc.send_signal(signal.SIGINT)
                    proc.wait(20)
        truth = json.loads(truth_path.read_text())
    ttft_err, itl_err = [], []
    for r in res.records:
        sent = truth["token_ns"].get(r.server_request_id or "")
        if not r.ok or not sent or len(sent) != len(r.chunk_times_ns):
            continue
        got = np.asarray(r.chunk_times_ns, dtype=np.int64) + res.t0_ns
        true = np.asarray(sent, dtype=np.int64)
        ttft_err.append((got[0] - true[0]) / 1e6)
        itl_err.extend(((np.diff(got) - np.diff(true)) / 1e6).tolist())
    s = res.summary
    ideal = streams * 1000.0 / itl_ms  # tokens/s if every stream ran at the server's pace
    return {
        "streams": streams,
        "requests_ok": s.requests.completed,
        "ttft_err_p50": float(np.percentile(ttft_err, 50)),
        "ttft_err_p99": float(np.percentile(ttft_err, 99)),
        "itl_err_p50": float(np.percentile(itl_err, 50)),
        "itl_err_p99": float(np.percentile(itl_err, 99)),
        "out_tok_s": s.output_tokens_per_s,
        "sustained_pct": 100.0 * s.output_tokens_per_s / ideal,
        "client_cpu_pct": 100.0 * cpu / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="16,64,128,256")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2, help="requests per stream")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--trace-context", default="off", help="comma list of off/on/RATIO: a row per value")
    ap.add_argument("--otlp", default="off", help="off,on: with on, client spans go to a trace collector process")
    a = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs; server TTFT {a.ttft_ms} ms, ITL {a.itl_ms} ms, {a.tokens} tokens")
    print(
        f"{'streams':>7} {'trace':>5} {'otlp':>4} {'ok':>5} {'TTFT err p50':>12} {'p99':>7} {'ITL err p50':>11} "
        f"{'p99':>7} {'out tok/s':>10} {'sustained':>9} {'client CPU':>10}"
    )
    rows = [(int(x), t, o) for x in a.streams.split(",") for t in a.trace_context.split(",") for o in a.otlp.split(",")]
    for n, tc, otlp in rows:
        ratio = parse_trace_context(tc)
        if otlp == "on" and ratio == 0:
            continue  # client spans are those of traced requests
        m = measure(n, a.tokens, a.rounds, a.ttft_ms, a.itl_ms, ratio, otlp == "on")
        print(
            f"{n:>7} {tc:>5} {otlp:>4} {m['requests_ok']:>5} {m['ttft_err_p50']:>10.2f}ms {m['ttft_err_p99']:>5.2f}ms "
            f"{m['itl_err_p50']:>9.3f}ms {m['itl_err_p99']:>5.2f}ms {m['out_tok_s']:>10,.0f} "
            f"{m['sustained_pct']:>8.1f}% {m['client_cpu_pct']:>9.1f}%",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
