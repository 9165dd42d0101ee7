"""Benchmark: ``whatif`` with three changes over a generated trace set of ~1,000,000 spans.

Generates the synthetic agent traces of ``trace.demo`` (20 spans each with ``--extra-calls 3``), ingests them into a
temporary store (not timed), then times, each as one figure:

* ``engine``  — the pure re-timing of every trace (:func:`tailscope.trace.whatif.project`, critical paths before and
  after included) over trees already in memory;
* ``api``     — :func:`tailscope.whatif` on the stored set as a user calls it: rows read from the store, dependency
  marks, re-timing, critical paths, bootstrap intervals;
* ``rank``    — the same with ``rank=True`` (candidates from the findings, each projected alone, greedy order), only
  with ``--rank``.

The three changes: ``--set-duration "execute_tool get_user=30ms"``, ``--parallel "execute_tool search_kb,execute_tool
get_order,execute_tool get_user"`` and ``--cache "qdrant search=0.4:2ms"``. Prints seconds, seconds per million
spans, CPU seconds (one process: a quiet machine's wall time) and the 1-minute load average before each run (the
machine may be shared).

    .venv/bin/python benchmarks/trace_whatif.py [--traces 50000] [--extra-calls 3] [--rank]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import tailscope
from tailscope.store.spans import SpanStore
from tailscope.trace.changes import parse_change
from tailscope.trace.demo import demo_traces, to_otlp_json
from tailscope.trace.tree import build_tree
from tailscope.trace.whatif import project

CHANGES = {
    "set_duration": ["execute_tool get_user=30ms"],
    "parallel": ["execute_tool search_kb,execute_tool get_order,execute_tool get_user"],
    "cache": ["qdrant search=0.4:2ms"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=int, default=50_000)
    ap.add_argument("--extra-calls", type=int, default=3)
    ap.add_argument("--rank", action="store_true", help="also time --rank")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "set.otlp.json"
        spans_n = 0
        trees = []
        with open(src, "w", encoding="utf-8") as fh:
            batch: list = []
            for spans in demo_traces(args.traces, extra_calls=args.extra_calls):
                spans_n += len(spans)
                trees.append(build_tree(spans))
                batch.extend(spans)
                if len(batch) >= 5000:
                    fh.write(json.dumps(to_otlp_json(batch)) + "\n")
                    batch = []
            if batch:
                fh.write(json.dumps(to_otlp_json(batch)) + "\n")
        store = SpanStore(Path(tmp) / "s.duckdb")
        tailscope.ingest_traces([src], "bench", store=store)
        print(f"{args.traces:,} traces, {spans_n:,} spans; changes: {CHANGES}")
        changes = [parse_change(k.replace("_", "-"), v) for k, vs in CHANGES.items() for v in vs]

        def run(label: str, fn: object) -> None:
            load = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            out = fn()  # type: ignore[operator]
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            # one process: its CPU seconds are what a quiet machine's wall time would be (less sensitive to load)
            print(
                f"{label:8s} {dt:7.2f} s  {dt / spans_n * 1e6:6.2f} s per million spans, CPU {cpu:6.2f} s"
                f"  (load {load:.1f})  {out}",
                flush=True,
            )

        def engine() -> str:
            p = project(trees, changes, seed=0)
            return f"traces={len(p.outcomes)}"

        run("engine", engine)
        trees.clear()  # the API run reads its own trees from the store

        def api() -> str:
            r = tailscope.whatif("bench", store=store, **CHANGES)  # type: ignore[arg-type]
            return f"p95 {r.before['p95_ms']:.0f} → {r.after['p95_ms']:.0f} ms"

        run("api", api)
        if args.rank:

            def rank() -> str:
                r = tailscope.whatif("bench", store=store, rank=True, resamples=0)
                return f"{len(r.candidates)} candidates, greedy {[g['change'] for g in r.greedy]}"

            run("rank", rank)
        loads = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"load average after the runs: {loads} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
