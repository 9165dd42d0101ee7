"""Benchmark: ingest plus analyze of ~1,000,000 spans (~50,000 agent traces) with ``tailscope trace``.

Generates synthetic OTLP JSON-lines files (not timed), then times ``ingest`` (parse, classify, bulk-load into DuckDB)
and ``analyze`` (stream traces from the store, trees, critical paths, waterfalls, set aggregation) separately.

    .venv/bin/python benchmarks/trace_scale.py [--traces 50000] [--extra-calls 3] [--data /tmp/trace-scale]

``--data DIR`` keeps the generated files and reuses them on the next run (generation takes longer than the run).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tailscope.store.spans import SpanStore
from tailscope.trace.analysis import analyze_facts
from tailscope.trace.demo import demo_traces, to_otlp_json
from tailscope.trace.ingest.sets import default_workers, ingest_paths, set_facts


def generate(folder: Path, traces: int, extra_calls: int, files: int) -> list[Path]:
    """Write the synthetic traces as ``files`` OTLP JSON-lines files (5,000 spans per line); return their paths."""
    t = time.perf_counter()
    paths = [folder / f"part{k}.otlp.json" for k in range(files)]
    handles = [open(p, "w", encoding="utf-8") for p in paths]  # noqa: SIM115
    spans_total = 0
    batch: list = []
    for k, spans in enumerate(demo_traces(traces, extra_calls=extra_calls)):
        batch.extend(spans)
        spans_total += len(spans)
        if len(batch) >= 5000:
            handles[k % files].write(json.dumps(to_otlp_json(batch), separators=(",", ":")) + "\n")
            batch = []
    if batch:
        handles[0].write(json.dumps(to_otlp_json(batch), separators=(",", ":")) + "\n")
    for h in handles:
        h.close()
    size_mb = sum(p.stat().st_size for p in paths) / 1e6
    print(
        f"generated {spans_total:,} spans in {traces:,} traces ({size_mb:.0f} MB OTLP JSON) "
        f"in {time.perf_counter() - t:.1f} s (not timed)"
    )
    (folder / "DONE").write_text(f"{traces} {extra_calls} {files}")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=int, default=50_000)
    parser.add_argument("--extra-calls", type=int, default=3, help="cache calls per tool (3 → 20 spans per trace)")
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: CPU count)")
    parser.add_argument("--data", type=Path, default=None, help="keep the generated files here and reuse them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = args.data or folder
        data.mkdir(parents=True, exist_ok=True)
        key = f"{args.traces} {args.extra_calls} {args.files}"
        done = data / "DONE"
        if done.exists() and done.read_text() == key:
            paths = [data / f"part{k}.otlp.json" for k in range(args.files)]
            print(f"reusing {sum(p.stat().st_size for p in paths) / 1e6:.0f} MB of OTLP JSON in {data}")
        else:
            # Generated in a child process: the timed part then runs in a process that has not just made and freed
            # a million Span objects (like the CLI, where ingest and analyze are fresh processes).
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
                paths = pool.submit(generate, data, args.traces, args.extra_calls, args.files).result()
        workers = args.workers or default_workers()
        store = SpanStore(folder / "bench.duckdb")
        t0 = time.perf_counter()
        report = ingest_paths(store, "bench", [str(p) for p in paths], workers=workers)
        t1 = time.perf_counter()
        facts = set_facts(store, "bench", workers=workers)
        t2 = time.perf_counter()
        result = analyze_facts(facts)
        t3 = time.perf_counter()
        print(f"ingest:  {t1 - t0:6.2f} s  ({report.spans:,} spans, {report.spans / (t1 - t0):,.0f} spans/s)")
        print(f"facts:   {t2 - t1:6.2f} s  ({len(facts):,} traces: trees, critical paths, waterfalls)")
        print(f"analyze: {t3 - t2:6.2f} s  (set aggregation)")
        print(f"total ingest + analyze: {t3 - t0:.2f} s for {report.spans:,} spans ({workers} processes)")
        print(f"load average after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        top = result["waterfalls"][0] if result["waterfalls"] else None
        if top:
            print(f"top waterfall: {top['pattern']} in {top['traces']:,} traces, p99 saving {top['p99_saving_ms']} ms")


if __name__ == "__main__":
    main()
