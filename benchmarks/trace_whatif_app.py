"""Validation: what-if's projection of a fix against the P95 measured after making it, on the reference app.

For each step below, runs ``tailscope app`` (the knowledge-assistant preset, ``--time-scale 0.1``, one seed) without
and with the fix, drives it with ``tailscope bench`` (``--requests`` requests, ``--concurrency`` in flight) and
collects its spans with ``tailscope trace collect`` — all on 127.0.0.1, each run bounded in time. Then projects the
fix on the traces taken without it (``tailscope.whatif``) and prints projected and measured P50/P95/P99:

0. ``--fix parallel-retrieval`` alone projected as ``--parallel "search faq,search products,search tickets"``
   (the issue's check: the projected P95 of that fix within 10 % of the P95 measured with it);
1. ``--fix async-auth`` projected as ``--set-duration "auth=2.5ms"`` (the cached permission check: median 25 ms × 0.1);
2. ``--fix async-auth,parallel-retrieval,rerank-top30,semantic-cache`` projected as that plus
   ``--parallel "search faq,search products,search tickets"``, ``--scale "search *=0.38"`` and
   ``--scale "rerank=0.39"`` (top 30 of 100 documents: the per-document part of the cost falls to 0.3, the
   connection does not) and ``--cache "retrieve=0.38:0.6ms"`` (the semantic cache's 38 % hit rate).

    .venv/bin/python benchmarks/trace_whatif_app.py [--requests 100] [--concurrency 8] [--seed 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import tailscope

STEPS: list[tuple[str, str, dict[str, list[str]]]] = [
    ("parallel retrieval alone", "parallel-retrieval", {"parallel": ["search faq,search products,search tickets"]}),
    ("async-auth", "async-auth", {"set_duration": ["auth=2.5ms"]}),
    (
        "+ parallel retrieval, rerank top 30, semantic cache",
        "async-auth,parallel-retrieval,rerank-top30,semantic-cache",
        {
            "set_duration": ["auth=2.5ms"],
            "parallel": ["search faq,search products,search tickets"],
            "scale": ["search *=0.38", "rerank=0.39"],
            "cache": ["retrieve=0.38:0.6ms"],
        },
    ),
]


def ts(*args: str) -> list[str]:
    return [sys.executable, "-m", "tailscope", *args]


def measure(db: Path, set_name: str, fix: str, args: argparse.Namespace, log: Path) -> None:
    """One app run under bench load, its spans collected into ``set_name``."""
    port, app_port = "43181", "48080"
    with open(log / f"{set_name}.log", "w") as out:
        collect = subprocess.Popen(ts("trace", "collect", "--set", set_name, "--port", port, "--duration", "300",
                                      "--db", str(db)), stdout=out, stderr=out)  # fmt: skip
        time.sleep(3)
        app = subprocess.Popen(ts("app", "--port", app_port, "--time-scale", "0.1", "--seed", str(args.seed),
                                  "--otlp-endpoint", f"http://127.0.0.1:{port}", "--duration", "280",
                                  *(["--fix", fix] if fix else [])), stdout=out, stderr=out)  # fmt: skip
        time.sleep(8)
        try:
            subprocess.run(ts("bench", "--url", f"http://127.0.0.1:{app_port}", "--concurrency", str(args.concurrency),
                              "--requests", str(args.requests), "--output-tokens", "32"),
                           stdout=out, stderr=out, timeout=240, check=True, cwd=log)  # fmt: skip
        finally:
            app.terminate()
            app.wait(30)
            time.sleep(4)  # the app's exporter flushes its last batch
            collect.send_signal(signal.SIGINT)
            collect.wait(30)


def row(label: str, d: dict[str, Any]) -> str:
    return f"{label:10s}" + "".join(f"{d[f'{s}_ms']:10.1f}" for s in ("p50", "p95", "p99"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=None, help="keep the store and logs here")
    ap.add_argument("--steps", default=None, help="comma-separated step numbers to run (0-based; default all)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        db = where / "s.duckdb"
        measure(db, "before", "", args, where)
        for k, (label, fix, changes) in enumerate(STEPS):
            if args.steps is not None and str(k) not in args.steps.split(","):
                continue
            measure(db, f"after{k}", fix, args, where)
            projected = tailscope.whatif("before", store=db, **changes)  # type: ignore[arg-type]
            measured = tailscope.whatif(f"after{k}", store=db, scale=["*=1"])  # every operation as it was
            print(f"\n{k + 1}. {label}  (--fix {fix})")
            print(f"{'':10s}{'p50 ms':>10s}{'p95 ms':>10s}{'p99 ms':>10s}")
            print(row("before", projected.before))
            print(row("projected", projected.after))
            print(row("measured", measured.before))
            err = projected.after["p95_ms"] / measured.before["p95_ms"] - 1
            print(f"projected P95 vs measured: {err:+.1%}  ({projected.traces} and {measured.traces} traces)")


if __name__ == "__main__":
    main()
