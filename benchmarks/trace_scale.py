"""Benchmark: ingest plus analyze of ~1,000,000 spans with ``tailscope trace``, on every input shape.

Generates the same synthetic agent traces (:func:`tailscope.demo_traces`) written five ways (not timed):

* ``lines``   — OTLP JSON lines in 4 files, 5,000 spans per line (what the OpenTelemetry collector's file exporter
  writes);
* ``lines1``  — the same lines in one file;
* ``doc``     — one large OTLP JSON document, one resource per service (:func:`tailscope.spans_to_otlp_json` of all
  spans);
* ``proto``   — one OTLP protobuf ``ExportTraceServiceRequest`` file;
* ``jaeger``  — one Jaeger query-API JSON document (``{"data": [trace, …]}``, times in µs);
* ``issue``   — issue 22's case, a smaller set on its own: 20,000 agent-shaped traces of 17 spans (``--extra-calls 2``),
  ≈ 340,000 spans, as one OTLP JSON document like ``doc``.

Then, per shape, runs ``tailscope trace ingest`` and ``tailscope trace analyze --json`` as fresh processes (as a user
would), times each, and prints a table: wall-clock seconds, seconds per million spans, the CPU seconds of the two
commands and their workers (less sensitive to other load than wall-clock time), and the 1-minute load average
before the run (the machine may be shared: compare shapes measured side by side, and repeat a run when the load was
high). The ``analysis`` column checks that every shape gives the same ``analyze`` JSON.

    .venv/bin/python benchmarks/trace_scale.py [--traces 50000] [--extra-calls 3] [--shapes lines,doc,...]
                                               [--repeat 1] [--data /tmp/trace-scale]

``--data DIR`` keeps the generated files and reuses them on the next run (generating takes longer than the runs).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tailscope
from tailscope import Span

SHAPES = ("lines", "lines1", "doc", "proto", "jaeger", "issue")
# issue 22's one-document case: 20,000 traces of 17 spans (fewer for a smoke run)
ISSUE = (int(os.environ.get("TRACE_SCALE_ISSUE_TRACES", "20000")), 2)
WHATIF = (  # benchmarks/trace_whatif.py's three changes
    "--set-duration", "execute_tool get_user=30ms",
    "--parallel", "execute_tool search_kb,execute_tool get_order,execute_tool get_user",
    "--cache", "qdrant search=0.4:2ms",
)  # fmt: skip
CHUNK_TRACES = 250  # 250 traces of 20 spans = 5,000 spans per OTLP JSON line


def chunks(traces: int, extra_calls: int) -> Iterator[list[list[Span]]]:
    """The demo traces in chunks of :data:`CHUNK_TRACES`."""
    batch: list[list[Span]] = []
    for spans in tailscope.demo_traces(traces, extra_calls=extra_calls):
        batch.append(spans)
        if len(batch) == CHUNK_TRACES:
            yield batch
            batch = []
    if batch:
        yield batch


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def jaeger_trace(spans: list[Span]) -> dict[str, Any]:
    """One trace in Jaeger's query-API JSON (µs times, tags, one process per service)."""
    procs: dict[str, str] = {}
    out = []
    for s in spans:
        pid = procs.setdefault(s.service, f"p{len(procs) + 1}")
        tags = [{"key": k, "type": "string", "value": str(v)} for k, v in s.attributes.items()]
        tags.append({"key": "span.kind", "type": "string", "value": s.kind.lower()})
        if s.status == "ERROR":
            tags.append({"key": "error", "type": "bool", "value": True})
        out.append(
            {
                "traceID": s.trace_id,
                "spanID": s.span_id,
                "operationName": s.name,
                "references": [{"refType": "CHILD_OF", "traceID": s.trace_id, "spanID": s.parent_id}]
                if s.parent_id
                else [],
                "startTime": s.start_ns // 1000,
                "duration": (s.end_ns - s.start_ns) // 1000,
                "tags": tags,
                "processID": pid,
            }
        )
    processes = {pid: {"serviceName": svc, "tags": []} for svc, pid in procs.items()}
    return {"traceID": spans[0].trace_id, "spans": out, "processes": processes}


def proto_chunk(spans: list[Span]) -> bytes:
    """A chunk of spans as one serialized ``ExportTraceServiceRequest`` (serialized requests concatenate into one)."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = tailscope.spans_to_otlp_json(spans)
    for rs in doc["resourceSpans"]:
        for scope in rs["scopeSpans"]:
            for sp in scope["spans"]:  # the protobuf JSON mapping wants base64 ids
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = base64.b64encode(bytes.fromhex(sp[key])).decode()
    return ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()  # type: ignore[no-any-return]


def file_paths(folder: Path) -> dict[str, list[Path]]:
    """The files of each shape."""
    return {
        "lines": [folder / f"part{k}.otlp.jsonl" for k in range(4)],
        "lines1": [folder / "all.otlp.jsonl"],
        "doc": [folder / "doc.otlp.json"],
        "proto": [folder / "doc.otlp.pb"],
        "jaeger": [folder / "doc.jaeger.json"],
        "issue": [folder / "issue.otlp.json"],
    }


def write_doc(path: Path, by_service: dict[str, list[str]]) -> None:
    """One OTLP JSON document, one resource per service, from each service's spans (JSON text)."""
    with open(path, "w", encoding="utf-8") as fh:
        resources = []
        for svc, spans in by_service.items():
            head = _dumps({"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": svc}}]}})
            resources.append(head[:-1] + ',"scopeSpans":[{"scope":{"name":"tailscope.demo"},"spans":[')
            resources.append(",".join(spans) + "]}]}")
        fh.write('{"resourceSpans":[' + ",".join(resources[k] + resources[k + 1] for k in range(0, len(resources), 2)))
        fh.write("]}")


def add_spans(by_service: dict[str, list[str]], flat: list[Span]) -> None:
    for rs in tailscope.spans_to_otlp_json(flat)["resourceSpans"]:
        service = rs["resource"]["attributes"][0]["value"]["stringValue"]
        by_service.setdefault(service, []).extend(_dumps(sp) for sp in rs["scopeSpans"][0]["spans"])


def generate_issue(folder: Path) -> int:
    """Write issue 22's one-document case (:data:`ISSUE`); return its span count."""
    by_service: dict[str, list[str]] = {}
    spans_total = 0
    for batch in chunks(*ISSUE):
        flat = [s for t in batch for s in t]
        spans_total += len(flat)
        add_spans(by_service, flat)
    write_doc(file_paths(folder)["issue"][0], by_service)
    (folder / "ISSUE").write_text(json.dumps({"key": list(ISSUE), "spans": spans_total}))
    return spans_total


def generate(folder: Path, traces: int, extra_calls: int, shapes: list[str]) -> dict[str, list[Path]]:
    """Write every shape's files; return them per shape."""
    t = time.perf_counter()
    paths = file_paths(folder)
    parts = [open(p, "w", encoding="utf-8") for p in paths["lines"]]  # noqa: SIM115
    one = open(paths["lines1"][0], "w", encoding="utf-8")  # noqa: SIM115
    proto = open(paths["proto"][0], "wb")  # noqa: SIM115
    by_service: dict[str, list[str]] = {}
    jaeger: list[str] = []
    spans_total = 0
    for k, batch in enumerate(chunks(traces, extra_calls)):
        flat = [s for t in batch for s in t]
        spans_total += len(flat)
        line = _dumps(tailscope.spans_to_otlp_json(flat)) + "\n"
        parts[k % 4].write(line)
        one.write(line)
        if "doc" in shapes:
            add_spans(by_service, flat)
        if "jaeger" in shapes:
            jaeger.extend(_dumps(jaeger_trace(t)) for t in batch)
        if "proto" in shapes:
            proto.write(proto_chunk(flat))
    for fh in [*parts, one, proto]:
        fh.close()
    write_doc(paths["doc"][0], by_service)
    by_service.clear()
    with open(paths["jaeger"][0], "w", encoding="utf-8") as fh:
        fh.write('{"data":[' + ",".join(jaeger) + '],"total":0,"limit":0,"offset":0,"errors":null}')
    generate_issue(folder)
    for shape, files in paths.items():
        size = sum(p.stat().st_size for p in files) / 1e6
        print(f"generated {shape:7s} {size:6.0f} MB in {len(files)} file(s)")
    print(f"{spans_total:,} spans in {traces:,} traces, generated in {time.perf_counter() - t:.0f} s (not timed)")
    (folder / "DONE").write_text(json.dumps({"key": [traces, extra_calls], "spans": spans_total}))
    return paths


def adopt_orphans() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux), so the CPU time of a command's worker
    processes — children of a fork server the command does not wait for — is counted in ``RUSAGE_CHILDREN``."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def run(args: list[str]) -> tuple[float, float, float]:
    """Wall-clock seconds of one ``tailscope`` command in a fresh process, and CPU seconds (user + system) of its
    main process and of its worker processes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailscope", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)  # not Popen.wait: wait4 gives the main process's own CPU time
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    took = time.perf_counter() - t
    with contextlib.suppress(ChildProcessError):
        while True:  # the orphaned fork server and workers, adopted by adopt_orphans()
            os.waitpid(-1, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code:
        raise SystemExit(f"tailscope {' '.join(args)} failed:\n{stderr}")
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    main_cpu = usage.ru_utime + usage.ru_stime
    return took, main_cpu, total - main_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=50_000)
    parser.add_argument("--extra-calls", type=int, default=3, help="cache calls per tool (3 → 20 spans per trace)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--repeat", type=int, default=1, help="runs per shape (shapes alternate between runs)")
    parser.add_argument("--data", type=Path, default=None, help="keep the generated files here and reuse them")
    parser.add_argument(
        "--whatif", action="store_true", help="also time `trace whatif` with three changes on each shape's set"
    )
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    cpu_note = "" if adopt_orphans() else " (CPU s: the main processes only; workers not counted here)"
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or Path(tmp)
        data.mkdir(parents=True, exist_ok=True)
        done = data / "DONE"
        key = [args.traces, args.extra_calls]
        if done.exists() and json.loads(done.read_text())["key"] == key:
            spans = json.loads(done.read_text())["spans"]
            paths = file_paths(data)
            print(f"reusing the generated files in {data} ({spans:,} spans)")
        else:
            paths = generate(data, args.traces, args.extra_calls, list(SHAPES))
            spans = json.loads(done.read_text())["spans"]
        issue = data / "ISSUE"
        if "issue" in shapes and not (issue.exists() and json.loads(issue.read_text())["key"] == list(ISSUE)):
            generate_issue(data)
        counts = {shape: spans for shape in SHAPES}
        if issue.exists():
            counts["issue"] = json.loads(issue.read_text())["spans"]
        header = (
            f"{'shape':7s} {'spans':>9s} {'load':>5s} {'ingest':>7s} {'analyze':>8s} {'total':>7s} {'per 1M':>7s}  "
            f"{'CPU s main+workers':>24s}  {'quiet 2-CPU est.':>16s}"
        )
        print(f"\n{header}  analysis")
        first: dict[str, Any] | None = None
        for r in range(args.repeat):
            for shape in shapes:
                db = Path(tmp) / f"{shape}-{r}.duckdb"
                load = os.getloadavg()[0]
                ingest, main_i, work_i = run(
                    ["trace", "ingest", *map(str, paths[shape]), "--set", "b", "--db", str(db)]
                )
                analyze, main_a, work_a = run(
                    ["trace", "analyze", "--set", "b", "--db", str(db), "--json", str(db) + ".json"]
                )
                total = ingest + analyze
                result = json.loads(Path(str(db) + ".json").read_text())
                if shape == "issue":
                    same = "(its own set)"
                else:
                    first = first or result
                    # Jaeger's µs times round the demo's ns: its percentiles differ in the last digits
                    same = (
                        "same as the first"
                        if result == first
                        else "differs (µs times)"
                        if shape == "jaeger"
                        else "DIFFERS"
                    )
                n = counts[shape]
                per_million = total / n * 1e6
                # On a quiet 2-CPU machine: the ingest's workers share 2 CPUs after the main process cut the files
                # (and before it folds them in); the analyze's main process and its one worker run side by side.
                quiet = main_i + work_i / 2 + max(main_a, work_a)
                cpu = f"ingest {main_i:4.1f}+{work_i:4.1f} analyze {main_a:4.1f}+{work_a:4.1f}"
                figures = f"{n:9,d} {load:5.2f} {ingest:6.2f}s {analyze:7.2f}s {total:6.2f}s {per_million:6.1f}s  {cpu}"
                print(f"{shape:7s} {figures}  {quiet / n * 1e6:5.1f}s per 1M  {same}", flush=True)
                if args.whatif:
                    load = os.getloadavg()[0]
                    took, main_w, work_w = run(["trace", "whatif", "--set", "b", "--db", str(db), *WHATIF])
                    print(
                        f"{'':7s} {'':9s} {load:5.2f} whatif (3 changes) {took:6.2f}s = {took / n * 1e6:5.1f}s per 1M"
                        f"  CPU {main_w:4.1f}+{work_w:4.1f}",
                        flush=True,
                    )
                db.unlink()
        loads = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"load average after the runs: {loads} ({os.cpu_count()} CPUs){cpu_note}")


if __name__ == "__main__":
    main()
