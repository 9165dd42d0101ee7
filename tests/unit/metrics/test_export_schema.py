"""The export documents match docs/metrics.md's "The export" section field for field, both ways.

Documents are built from the code that writes them (summaries, records, settings from the resolver, server telemetry,
mixed traffic, workers, dialects, a tiny simulation), flattened to dotted paths and compared with the paths the docs'
tables list: a field the code writes but the docs do not list fails, and so does a documented field no code writes.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tailscope.metrics.dialects import summarize_dialect
from tailscope.metrics.document import build_export
from tailscope.metrics.percentiles import compute_stats
from tailscope.metrics.server import summarize_server
from tailscope.metrics.slo import parse_slo
from tailscope.metrics.summary import summarize
from tailscope.records import ErrorClass, RequestRecord, Run, RunKind, RunStatus, ServerSample, Status, Target
from tailscope.runner.bench import new_run
from tailscope.runner.mixed import MixedRecord, summarize_mixed
from tailscope.runner.options import BenchOptions
from tailscope.runner.resolve import resolve
from tailscope.runner.target import TargetSession
from tailscope.runner.workers.report import WorkerState, lost_share, worker_rows
from tailscope.store.db import REQUEST_COLUMNS

DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def documented() -> tuple[set[str], set[str]]:
    """(paths of the JSON documents, Parquet/CSV columns) listed in the export section's tables."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## The export") :]
    section = section[: section.index("\n## ", 5)]
    paths: set[str] = set()
    columns: set[str] = set()
    in_requests = False
    for line in section.splitlines():
        if line.startswith("### "):
            in_requests = "requests[]" in line
        if not line.startswith("| `") and not line.startswith("| —"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[0])
        if in_requests:
            paths.update(f"requests[].{n}" for n in names)
            columns.update(re.findall(r"`([^`]+)`", cells[1]))
        else:
            paths.update(names)
    return paths, columns


DOCUMENTED, COLUMNS = documented()


def flatten(doc: dict[str, Any]) -> set[str]:
    """The paths of a document, stopping at documented paths, map placeholders and documented lists."""
    seen: set[str] = set()

    def walk(path: str, value: Any) -> None:
        if path in DOCUMENTED:
            seen.add(path)
            if not (isinstance(value, dict) and any(d.startswith(path + ".") for d in DOCUMENTED)):
                return  # a documented leaf; an object whose fields are listed too is walked on
        placeholders = [d for d in DOCUMENTED if d.startswith(path + ".<") and d.count(".") == path.count(".") + 1]
        if placeholders and isinstance(value, dict):
            if value:
                seen.add(placeholders[0])
            return
        if isinstance(value, list) and path + "[]" in DOCUMENTED:
            seen.add(path + "[]")
            return
        if path == "requests" and isinstance(value, list):
            for item in value:
                for k, v in item.items():
                    walk(f"requests[].{k}", v)
            return
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{path}.{k}" if path else k, v)
            return
        if value == {} and any(d.startswith(path + ".") for d in DOCUMENTED):
            return  # an empty object whose fields are documented (a sim run has no host facts)
        seen.add(path)

    walk("", doc)
    return seen


def record(i: int, *, cls: str = "a", ok: bool = True, **kw: Any) -> RequestRecord:
    t = i * 10_000_000
    if not ok:
        return RequestRecord(
            id=i, scheduled_ns=t, sent_ns=t, first_token_ns=None, end_ns=t + 5, status=Status.ERROR,
            error=ErrorClass.HTTP_5XX, error_detail="boom", http_status=500, request_class=cls,
        )  # fmt: skip
    first = t + 30_000_000
    return RequestRecord(
        id=i, scheduled_ns=t, sent_ns=t + 1000, first_token_ns=first, end_ns=first + 20_000_000,
        stream_end_ns=first + 21_000_000, first_event_ns=first - 1000, status=Status.OK, request_class=cls,
        input_tokens=100, output_tokens=3, requested_output_tokens=3, chunk_times_ns=(first, first + 10_000_000,
        first + 20_000_000), chunk_tokens=(1, 1, 1), server_request_id=f"r{i}", **kw,
    )  # fmt: skip


def sample_export(tmp_path: Path) -> dict[str, Any]:
    """A bench export that carries every optional part: classes, sessions, shared prefixes, failures, SLOs, loop lag,
    server telemetry, mixed traffic, workers, dialects."""
    records = [record(i, cls="a" if i % 2 else "b", worker=i % 2) for i in range(20)]
    records += [record(40 + i, reasoning_tokens=2, first_answer_ns=40 * 10_000_000 + 50_000_000, cached_tokens=64)
                for i in range(2)]  # fmt: skip
    records += [record(20 + t, session_id="s1", turn=t, shared_prefix=True) for t in range(3)]
    records += [record(30, ok=False)]
    records += [RequestRecord(id=31, scheduled_ns=0, sent_ns=0, first_token_ns=1, end_ns=2, status=Status.OK,
                              warmup=True)]  # fmt: skip
    summary = summarize(
        records, slos=(parse_slo("ttft_p99=1s"),), requested_rate_rps=10.0, loop_lag_ms=compute_stats([0.1, 0.2])
    ).to_dict()
    samples = [
        ServerSample(t_ns=t * 1_000_000_000, name=name, value=v + t)
        for t in range(3)
        for name, v in (
            ("vllm:num_requests_waiting", 1.0), ("vllm:num_requests_running", 4.0), ("vllm:kv_cache_usage_perc", 0.1),
            ("vllm:prefix_cache_queries_total", 100.0), ("vllm:prefix_cache_hits_total", 50.0),
            ("vllm:request_success_total", 1.0), ("vllm:spec_decode_num_accepted_tokens_total", 30.0),
            ("vllm:spec_decode_num_draft_tokens_total", 40.0),
        )
    ]  # fmt: skip
    summary["server"] = {**summarize_server(samples), "scrapes": {"ok": 3, "failed": 0}}
    from tailscope.metrics.gpu import summarize_gpu

    gpu_samples = [
        ServerSample(t_ns=t * 1_000_000_000, name=name, value=v, labels='gpu="0"')
        for t in range(3)
        for name, v in (("DCGM_FI_DEV_GPU_UTIL", 80.0), ("DCGM_FI_DEV_FB_USED", 1000.0), ("DCGM_FI_DEV_FB_FREE", 500.0))
    ]
    summary["gpu"] = {**summarize_gpu(gpu_samples, output_tokens=100), "scrapes": {"http://127.0.0.1:9400": {}}}
    summary["client"] = {"hot_loop": "compiled", "preopened_connections": 4, "warmed": False}
    summary["mixed"] = {k: v.to_dict() for k, v in summarize_mixed([MixedRecord("api", 0, 0, 5_000_000, 200)]).items()}
    states = [WorkerState(index=0, kind="process", slots=2), WorkerState(index=1, kind="process", slots=2)]
    summary["workers"] = worker_rows(states, records)
    summary["lost"] = lost_share(states, None, 4)
    summary["bottleneck_workers"] = []
    summary["trace_context"] = {"ratio": 1.0, "traced": 20, "t0_unix_ns": 0}
    from tailscope.metrics.sessions import session_summary

    summary["sessions"] = session_summary([replace(r, session_id=f"s{r.id % 3}") for r in records])
    summary["dialects"] = {"vllm": summarize_dialect(records, "vllm")}
    opts = BenchOptions(url="http://127.0.0.1:9", requests=10, slo=("ttft_p99=1s",), trace_context="on")
    cfg = resolve(opts).config
    ts = TargetSession("http://127.0.0.1:9", None, Target("http://127.0.0.1:9", "m"), "http://127.0.0.1:9/metrics")  # type: ignore[arg-type]
    run = new_run(cfg, ts, workers=2, worker_kind="process")
    return build_export(run, summary, records)


def profile_and_replay_settings(tmp_path: Path) -> list[dict[str, Any]]:
    profile = tmp_path / "p.yaml"
    profile.write_text(
        textwrap.dedent(
            """
            name: mix
            classes: [{name: a, input_tokens: 20, output_tokens: 10}]
            arrival: {mode: open, stages: [{rate: 4, duration_s: 2}]}
            stop: {duration_s: 2}
            mixed_traffic: [{name: api, url: "http://127.0.0.1:1/x", rate: 1}]
            """
        )
    )
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp_s": 0, "input_tokens": 5, "output_tokens": 5}\n')
    docs = []
    replay = BenchOptions(replay=trace, replay_prefix_tokens=64, arrival_stamp="kernel")
    staggered = BenchOptions(url="http://127.0.0.1:9", concurrency=4, requests=8, stagger=1.0, metrics_url="off")
    for opts in (BenchOptions(profile=profile, rate=3.0), replay, staggered):
        docs.append({"run": {"settings": resolve(opts).config.settings}})
    return docs


def sim_export() -> dict[str, Any]:
    from tailscope.metrics.document import run_to_json
    from tailscope.sim.run import SimArgs, run_sim

    out = run_sim(SimArgs(requests=10, concurrency=2, store=False))
    return {"run": run_to_json(out.run), "summary": out.summary}


def test_every_exported_field_is_documented_and_every_documented_field_is_exported(tmp_path: Path) -> None:
    observed = flatten(sample_export(tmp_path))
    for doc in (*profile_and_replay_settings(tmp_path), sim_export()):
        observed |= flatten(doc)
    undocumented = sorted(observed - DOCUMENTED)
    assert not undocumented, f"exported but not in docs/metrics.md's export section: {undocumented}"
    stale = sorted(DOCUMENTED - observed)
    assert not stale, f"documented but never exported: {stale}"


def test_every_parquet_column_is_documented() -> None:
    assert {name for name, _ in REQUEST_COLUMNS} == COLUMNS


@pytest.mark.parametrize("path", ["summary.loop_lag_ms", "summary.server.counter_deltas.<metric>"])
def test_figures_the_store_has_are_in_the_export(path: str, tmp_path: Path) -> None:
    assert path in flatten(sample_export(tmp_path))


def test_a_run_row_round_trips_its_kind() -> None:
    run = Run("x", RunKind.BENCH, "0", "now", Target("u", "m"), 0, status=RunStatus.COMPLETE)
    assert build_export(run, {}, [])["run"]["kind"] == "bench"
