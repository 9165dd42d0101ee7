"""Soak: ``tailscope serve`` and ``tailscope bench`` side by side at a steady rate for a long time, with the resident
memory (RSS) and open file descriptors of both processes sampled all along.

The bench runs open loop at ``--rate`` with ``--stream-records`` (records go to the store only; the summary reads them
back after the run), so what grows in memory during the run is what the client and the server keep per request —
which should be nothing. Memory growth is judged after a warm-up: the slope of a least-squares line through the RSS
samples (MB per hour) and the plain difference last − first. The method's own leak threshold: ≤ 15 MB per hour.

    .venv/bin/python benchmarks/soak.py --duration 3600 --rate 40 --output-tokens 256      # ≈ 10 M token events
    .venv/bin/python benchmarks/soak.py --duration 120 --rate 10                            # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("tailscope")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "tailscope"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


@dataclass
class Series:
    """(seconds since start, RSS MB, open fds) samples of one process."""

    t: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    def sample(self, pid: int, t: float) -> None:
        r, f = rss_mb(pid), open_fds(pid)
        if r is not None and f is not None:
            self.t.append(t)
            self.rss.append(r)
            self.fds.append(f)

    def judge(self, warmup_s: float) -> dict[str, Any]:
        """Growth after warm-up: least-squares slope (MB/hour), last − first (MB), peak RSS, fds first/last/max."""
        pts = [(t, r) for t, r in zip(self.t, self.rss, strict=True) if t >= warmup_s]
        fds = [f for t, f in zip(self.t, self.fds, strict=True) if t >= warmup_s]
        if len(pts) < 3:
            return {"samples": len(pts)}
        n = len(pts)
        mt = sum(t for t, _ in pts) / n
        mr = sum(r for _, r in pts) / n
        var = sum((t - mt) ** 2 for t, _ in pts)
        slope = sum((t - mt) * (r - mr) for t, r in pts) / var if var > 0 else 0.0
        # growth between the first and last minute after warm-up (medians: one sample's allocator noise is not growth)
        window = max(3, min(n // 5, sum(1 for t, _ in pts if t <= pts[0][0] + 60.0)))
        settled = statistics.median(r for _, r in pts[-window:]) - statistics.median(r for _, r in pts[:window])
        return {
            "samples": n,
            "rss_after_warmup_mb": round(pts[0][1], 1),
            "rss_last_mb": round(pts[-1][1], 1),
            "rss_peak_mb": round(max(self.rss), 1),
            "growth_mb": round(pts[-1][1] - pts[0][1], 1),
            "settled_growth_mb": round(settled, 1),
            "slope_mb_per_h": round(slope * 3600.0, 1),
            "fds_first": fds[0],
            "fds_last": fds[-1],
            "fds_max": max(fds),
        }


def soak(
    duration_s: float, rate: float, output_tokens: int, input_tokens: int, interval_s: float, warmup_s: float, tmp: Path
) -> dict[str, Any]:
    port = free_port()
    server = subprocess.Popen(
        [*_cli(), "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.time() > deadline:
                    raise SystemExit("tailscope serve did not start") from None
                time.sleep(0.2)
        out = tmp / "bench.json"
        bench = subprocess.Popen(
            [*_cli(), "bench", "--url", f"http://127.0.0.1:{port}", "--rate", str(rate), "--arrival", "constant",
             "--duration", str(duration_s), "--output-tokens", str(output_tokens), "--input-tokens",
             str(input_tokens), "--metrics-url", "off", "--stream-records", "--quiet", "--no-fail",
             "--db", str(tmp / "soak.duckdb"), "--json", str(out)],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        client, srv = Series(), Series()
        t0 = time.monotonic()
        while bench.poll() is None:
            t = time.monotonic() - t0
            if t <= duration_s:  # the load phase only (the summary at the end is not the steady state)
                client.sample(bench.pid, t)
                srv.sample(server.pid, t)
            time.sleep(interval_s)
        if bench.returncode not in (0, 3):
            raise SystemExit(f"bench exited {bench.returncode}")
        doc = json.loads(out.read_text())
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
    s = doc["summary"]
    events = sum(len(r.get("chunk_times_s") or ()) for r in doc.get("requests", []))
    return {
        "duration_s": duration_s,
        "rate": rate,
        "requests_ok": s["requests"]["completed"],
        "requests_failed": s["requests"]["failed"],
        "token_events": events or round(s["output_tokens_per_s"] * s["duration_s"]),
        "client": client.judge(warmup_s),
        "server": srv.judge(warmup_s),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=3600.0, help="seconds of load")
    ap.add_argument("--rate", type=float, default=40.0, help="requests per second (constant arrivals)")
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between RSS/fd samples")
    ap.add_argument("--warmup", type=float, default=None, help="seconds left out of the judgement (default 10 %%)")
    a = ap.parse_args()
    warmup = a.warmup if a.warmup is not None else max(5.0, a.duration * 0.1)
    with tempfile.TemporaryDirectory() as tmp:
        res = soak(a.duration, a.rate, a.output_tokens, a.input_tokens, a.interval, warmup, Path(tmp))
    print(json.dumps(res, indent=1))
    for who in ("client", "server"):
        j = res[who]
        if "slope_mb_per_h" in j:
            verdict = "ok" if j["slope_mb_per_h"] <= 15.0 else "GROWING"
            print(
                f"{who}: RSS {j['rss_after_warmup_mb']} → {j['rss_last_mb']} MB after warm-up, slope "
                f"{j['slope_mb_per_h']} MB/h ({verdict}, ≤ 15 MB/h), fds {j['fds_first']} → {j['fds_last']}"
            )


if __name__ == "__main__":
    main()
