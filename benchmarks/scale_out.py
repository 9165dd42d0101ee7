"""Benchmark: how many sustained streams 1, 2 and 4 load-generator workers drive, and how true their timings stay.

For each (mode, workers, streams) point a fresh scripted loopback server runs as a separate process
(``python -m tailscope.testing.scripted_server --truth-out``); a closed-loop bench keeps ``streams`` requests in flight
for ``--duration`` seconds. After the run the server's truth log (the perf_counter_ns at which it wrote each token)
is compared with what the client measured for the same token (same machine, same CLOCK_MONOTONIC):

* first-token error: measured first-token arrival − true first-token send, per request (ms)
* token error: the same for every token event (p50 / p99, ms)
* ITL error: measured inter-token gap − true gap (p99 of |error|, ms)

It also reports the sustained streams (mean in-flight requests, from the records), output tokens/s, and per-worker
CPU use and event-loop lag. Modes: ``inproc`` (:func:`tailscope.bench`, one process), ``process``
(``tailscope.bench(workers=N)``) and ``ray`` (the same with ``ray="auto"``: Ray actors, when Ray is installed).

    .venv/bin/python benchmarks/scale_out.py [--streams 64,256,512] [--workers 1,2,4] [--duration 8] [--ray]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

import tailscope
from tailscope import BenchResult


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """The scripted server as a child process; its truth log is read after SIGTERM."""

    def __init__(self, ttft_ms: float, itl_ms: float, folder: Path) -> None:
        self.port = free_port()
        self.truth_path = folder / f"truth-{self.port}.json"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tailscope.testing.scripted_server",
                "--port",
                str(self.port),
                "--ttft-ms",
                str(ttft_ms),
                "--itl-ms",
                str(itl_ms),
                "--truth-out",
                str(self.truth_path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("the scripted server did not start")

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        truth: dict[str, Any] = json.loads(self.truth_path.read_text())
        return truth


def timing_errors(res: BenchResult, truth: dict[str, Any], offsets_ns: dict[int, int]) -> dict[str, float]:
    first: list[float] = []
    tokens: list[float] = []
    itl: list[float] = []
    for r in res.records:
        sent = truth["token_ns"].get(r.server_request_id or "")
        if not r.ok or not sent or len(sent) != len(r.chunk_times_ns):
            continue
        base = res.t0_ns + offsets_ns.get(r.worker, 0)
        measured = np.asarray(r.chunk_times_ns, dtype=np.int64) + base
        true = np.asarray(sent, dtype=np.int64)
        err = (measured - true) / 1e6
        first.append(float(err[0]))
        tokens.extend(err.tolist())
        itl.extend(np.abs(np.diff(measured) - np.diff(true)).astype(float) / 1e6)
    f, t, i = np.asarray(first), np.asarray(tokens), np.asarray(itl)
    return {
        "matched": float(f.size),
        "first_p50_ms": float(np.median(f)) if f.size else float("nan"),
        "first_p99_ms": float(np.quantile(f, 0.99)) if f.size else float("nan"),
        "token_p50_ms": float(np.median(t)) if t.size else float("nan"),
        "token_p99_ms": float(np.quantile(t, 0.99)) if t.size else float("nan"),
        "itl_abs_p99_ms": float(np.quantile(i, 0.99)) if i.size else float("nan"),
    }


def sustained_streams(res: BenchResult) -> float:
    """Mean requests in flight over the measured window (sum of stream lifetimes / window)."""
    spans = [(r.sent_ns, r.end_ns) for r in res.records if r.sent_ns is not None and r.end_ns is not None]
    if not spans:
        return 0.0
    start = min(s for s, _ in spans)
    end = max(e for _, e in spans)
    return sum(e - s for s, e in spans) / max(1, end - start)


def run_point(mode: str, workers: int, streams: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    server = Server(args.ttft_ms, args.itl_ms, folder)
    try:
        res = tailscope.bench(
            server.url,
            concurrency=streams,
            duration=args.duration,
            input_tokens=64,
            output_tokens=args.output_tokens,
            seed=1,
            timeout_connect=10,
            timeout_first_token=60,
            timeout_total=120,
            metrics_url="off",
            workers=None if mode == "inproc" else workers,
            ray="auto" if mode == "ray" else None,
        )  # no store: the figures come from the result
    finally:
        truth = server.stop()
    stored = res.summary_dict()  # what the store would keep: the per-worker rows of a distributed run among it
    rows = stored.get("workers") or []
    offsets = {int(row["worker"]): round(float(row["clock_offset_ms"]) * 1e6) for row in rows}
    errs = timing_errors(res, truth, offsets)
    loop_p99 = [((row.get("loop_lag_ms") or {}).get("p99") or 0.0) for row in rows] or [
        stored.get("loop_lag_ms", {}).get("p99") or 0.0
    ]
    return {
        "mode": mode,
        "workers": workers,
        "streams_asked": streams,
        "streams_sustained": sustained_streams(res),
        "output_tok_s": res.summary.output_tokens_per_s,
        "requests": len(res.records),
        "failed": res.summary.requests.failed,
        "cpu_util": [row.get("cpu_util") for row in rows],
        "loop_lag_p99_ms": max(loop_p99),
        "offset_unc_ms": max((row["offset_uncertainty_ms"] for row in rows), default=0.0),
        "bottleneck_workers": stored.get("bottleneck_workers", []),
        **errs,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", default="64,256,512", help="closed-loop concurrency levels")
    p.add_argument("--workers", default="1,2,4", help="worker counts for the process mode")
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=20.0)
    p.add_argument("--ray", action="store_true", help="also run Ray actors (ray.init on this machine)")
    p.add_argument("--no-inproc", action="store_true", help="skip the single-process baseline")
    p.add_argument("--json", default=None, help="also write the results here")
    a = p.parse_args()
    streams = [int(x) for x in a.streams.split(",")]
    worker_counts = [int(x) for x in a.workers.split(",")]
    points: list[tuple[str, int]] = [] if a.no_inproc else [("inproc", 1)]
    points += [("process", w) for w in worker_counts]
    if a.ray:
        import ray

        ray.init(num_cpus=max(worker_counts), include_dashboard=False, log_to_driver=False)
        points += [("ray", w) for w in worker_counts if w > 1]
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start", flush=True)
    head = (
        f"{'mode':8} {'wk':>2} {'asked':>5} {'streams':>7} {'out tok/s':>9} {'1st err p50/p99 ms':>19} "
        f"{'tok err p50/p99 ms':>19} {'|ITL err| p99':>13} {'loop p99':>8} {'CPU/worker':>16}"
    )
    print(head, flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode, w in points:
            for s in streams:
                if s < w:
                    continue
                r = run_point(mode, w, s, a, Path(tmp))
                results.append(r)
                cpu = ",".join(f"{c:.0%}" for c in r["cpu_util"] if c is not None) or "-"
                print(
                    f"{mode:8} {w:>2} {s:>5} {r['streams_sustained']:>7.1f} {r['output_tok_s']:>9,.0f} "
                    f"{r['first_p50_ms']:>9.2f}/{r['first_p99_ms']:<9.2f} {r['token_p50_ms']:>9.2f}/"
                    f"{r['token_p99_ms']:<9.2f} {r['itl_abs_p99_ms']:>13.2f} {r['loop_lag_p99_ms']:>8.1f} {cpu:>16}",
                    flush=True,
                )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
