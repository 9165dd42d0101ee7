"""Start-up: how long ``tailscope --help`` takes, and how long after ``tailscope bench`` starts its first request
reaches the server.

The server is the scripted ground-truth server in this process (a thread); it logs each request's arrival on the
machine's monotonic clock, which the child process's start is read on too. Preflight's own requests (``GET
/v1/models``, a dialect probe) are not the first request: the first *load* request is. Targets: ``--help`` ≤ 0.2 s,
first request ≤ 0.5 s after the command starts. Best and median of ``--repeat`` runs.

    .venv/bin/python benchmarks/startup.py --repeat 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tailscope.testing.scripted_server import ScriptedConfig, ScriptedServer


def _cli() -> list[str]:
    exe = shutil.which("tailscope") or str(Path(sys.executable).with_name("tailscope"))
    return [exe] if Path(exe).exists() else [sys.executable, "-m", "tailscope"]


def help_s() -> float:
    t = time.perf_counter()
    subprocess.run([*_cli(), "--help"], check=True, capture_output=True)
    return time.perf_counter() - t


def first_request_s(url: str, srv: ScriptedServer, tmp: Path) -> float:
    seen = len(srv.truth.arrived_ns)
    t = time.perf_counter_ns()
    subprocess.run(
        [*_cli(), "bench", "--url", url, "--requests", "1", "--concurrency", "1", "--output-tokens", "4",
         "--input-tokens", "16", "--metrics-url", "off", "--quiet", "--db", str(tmp / "s.duckdb")],
        check=True, capture_output=True,
    )  # fmt: skip
    arrivals = sorted(srv.truth.arrived_ns.values())[seen:]
    return (arrivals[0] - t) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    import tempfile

    helps = [help_s() for _ in range(a.repeat)]
    with tempfile.TemporaryDirectory() as tmp, ScriptedServer(ScriptedConfig(ttft_ms=1, itl_ms=1)) as srv:
        firsts = [first_request_s(srv.url, srv, Path(tmp)) for _ in range(a.repeat)]
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, load {load:.1f}")
    print(
        f"tailscope --help          best {min(helps):.3f} s  median {statistics.median(helps):.3f} s  (target ≤ 0.2 s)"
    )
    print(f"bench → first request     best {min(firsts):.3f} s  median {statistics.median(firsts):.3f} s  (≤ 0.5 s)")


if __name__ == "__main__":
    main()
