"""Benchmark: ``whatif`` with three changes over a generated trace set of ~1,000,000 spans.

Generates the synthetic agent traces of :func:`tailscope.demo_traces` (20 spans each with ``--extra-calls 3``),
ingests them into a temporary store with :func:`tailscope.ingest_traces` (not timed), then times, each as one figure,
:func:`tailscope.whatif` on the stored set as a user calls it:

* ``project`` — the projection alone as far as the public function isolates it: ``resamples=0`` (no bootstrap) and
  ``class_attribute=None`` (no class breakdown); rows read from the store, trees built, dependency marks (the
  ``--parallel`` change's evidence), every trace re-timed with its critical paths before and after;
* ``api``     — the default call: the same plus bootstrap intervals and the class breakdown;
* ``rank``    — the same with ``rank=True`` (candidates from the findings, each projected alone, greedy order), only
  with ``--rank``.

The three changes: ``--set-duration "execute_tool get_user=30ms"``, ``--parallel "execute_tool search_kb,execute_tool
get_order,execute_tool get_user"`` and ``--cache "qdrant search=0.4:2ms"``. Prints seconds, seconds per million
spans, CPU seconds (one process: a quiet machine's wall time) and the 1-minute load average before each run (the
machine may be shared).

Until 2026-12-03 the first figure (``engine``) re-timed trees already in memory through the internal projection loop;
``project`` also reads and builds the trees, so it is not comparable with those figures (``api`` is unchanged).

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
        db = Path(tmp) / "s.duckdb"
        spans_n = 0
        with open(src, "w", encoding="utf-8") as fh:
            batch: list[tailscope.Span] = []
            for spans in tailscope.demo_traces(args.traces, extra_calls=args.extra_calls):
                spans_n += len(spans)
                batch.extend(spans)
                if len(batch) >= 5000:
                    fh.write(json.dumps(tailscope.spans_to_otlp_json(batch)) + "\n")
                    batch = []
            if batch:
                fh.write(json.dumps(tailscope.spans_to_otlp_json(batch)) + "\n")
        tailscope.ingest_traces([src], "bench", store=db)
        print(f"{args.traces:,} traces, {spans_n:,} spans; changes: {CHANGES}")

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

        # The public function cannot take trees already in memory: reading and building them is part of this
        # figure (the earlier `engine` figure timed the internal loop over prebuilt trees).
        def project() -> str:
            r = tailscope.whatif("bench", store=db, resamples=0, class_attribute=None, **CHANGES)
            return f"traces={r.traces}"

        run("project", project)

        def api() -> str:
            r = tailscope.whatif("bench", store=db, **CHANGES)
            return f"p95 {r.before['p95_ms']:.0f} → {r.after['p95_ms']:.0f} ms"

        run("api", api)
        if args.rank:

            def rank() -> str:
                r = tailscope.whatif("bench", store=db, rank=True, resamples=0)
                return f"{len(r.candidates)} candidates, greedy {[g['change'] for g in r.greedy]}"

            run("rank", rank)
        loads = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"load average after the runs: {loads} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
