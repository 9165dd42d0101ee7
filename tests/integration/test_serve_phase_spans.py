"""The engine speaks too: ``serve --otlp-endpoint`` exports each request's phases as child spans, end to end.

``trace collect`` (a process, its own store) receives what ``serve --otlp-endpoint`` (a process, chunked prefill with
a 256-token budget, the default ``--otlp-spans phases``) exports while ``bench --trace-context on`` (the library, in
this process) sends 600-token prompts over loopback. Per traced request the set must hold the ``llm_request`` span
under the client's span and, under it, ``receive``, ``queue``, one ``prefill`` per chunk (their tokens adding up to
the prompt), ``decode`` and ``stream end``, nested and not overlapping; their durations must be the parent's own
figures; ``trace join`` must give the same parts as on the parent span alone, and the critical path must count the
phases once, as inference.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_trace_join import _stop, collect_and_serve

import tailscope
from tailscope.records import Span

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PROMPT = 600
BUDGET = 256
PHASES = ("receive", "queue", "prefill", "decode", "stream end")


@pytest.fixture
def phased_server(tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[str]]]:
    trace_db = tmp_path / "traces.duckdb"
    budget = ("--max-num-seqs", "16", "--max-num-batched-tokens", str(BUDGET))
    with collect_and_serve(trace_db, *budget) as (url, collect, _, lines):
        assert any("and their phases" in line for line in lines), lines
        yield url, trace_db, collect


def _dur(s: Span) -> int:
    return s.end_ns - s.start_ns


def test_phase_spans_under_each_request_and_the_join_unchanged(
    tmp_path: Path, phased_server: tuple[str, Path, subprocess.Popen[str]]
) -> None:
    from tailscope.store.spans import SpanStore
    from tailscope.trace.critical_path import critical_path
    from tailscope.trace.facts import span_layers
    from tailscope.trace.join import decompose
    from tailscope.trace.tree import build_tree

    url, trace_db, collect = phased_server
    run_db = tmp_path / "runs.duckdb"
    result = tailscope.bench(
        url, requests=16, rate=4.0, arrival="constant", input_tokens=PROMPT, output_tokens=8, trace_context="on",
        metrics_url="off", store=run_db,
    )  # fmt: skip
    assert result.summary.requests.completed == 16
    time.sleep(1.5)  # the server's exporter sends every 0.5 s
    _stop(collect)  # flushes what it received into its store
    traces = SpanStore(trace_db).load_traces("live", [r.trace_id or "" for r in result.records])
    assert len(traces) >= 15, len(traces)  # the last batch may still have been in flight

    chunk_counts = []
    for r in result.records:
        spans = traces.get(r.trace_id or "")
        if not spans:
            continue
        (parent,) = [s for s in spans if s.name == "llm_request"]
        assert parent.parent_id == r.span_id  # the client's span, from traceparent
        kids = [s for s in spans if s is not parent]
        ids = {parent.span_id} | {s.span_id for s in kids}
        assert all(s.parent_id in ids for s in kids)
        top = [s for s in kids if s.parent_id == parent.span_id]
        names = [s.name for s in sorted(top, key=lambda s: (s.start_ns, s.end_ns))]
        assert names[:2] == ["receive", "queue"]
        assert names[-2:] == ["decode", "stream end"]
        assert set(names[2:-2]) == {"prefill"}, names
        # nested in the parent, siblings never overlap
        for s in kids:
            assert parent.start_ns <= s.start_ns <= s.end_ns <= parent.end_ns, s.name
            assert s.layer == "inference", (s.name, s.layer)
        for a, b in itertools.pairwise(sorted(top, key=lambda s: (s.start_ns, s.end_ns))):
            assert a.end_ns <= b.start_ns, (a.name, b.name)
        # one prefill span per chunk: the chunks' tokens are the prompt (less what the prefix cache held)
        chunks = [s for s in top if s.name == "prefill"]
        cached = chunks[0].attributes["tailscope.prefill.computed_tokens"]
        prompt = int(parent.attributes["gen_ai.usage.prompt_tokens"])
        assert sum(s.attributes["tailscope.prefill.chunk_tokens"] for s in chunks) == prompt - cached
        assert all(s.attributes["tailscope.prefill.chunk_tokens"] <= BUDGET for s in chunks)
        chunk_counts.append(len(chunks))
        # the phases are the parent's own figures (attributes in float seconds: 1 µs)
        a = parent.attributes
        queue = next(s for s in top if s.name == "queue")
        decode = next(s for s in top if s.name == "decode")
        assert abs(_dur(queue) - float(a["gen_ai.latency.time_in_queue"]) * 1e9) < 1e3
        assert abs(_dur(decode) - float(a["gen_ai.latency.time_in_model_decode"]) * 1e9) < 1e3
        prefill_attr = float(a["gen_ai.latency.time_in_model_prefill"]) * 1e9
        assert sum(_dur(s) for s in chunks) <= prefill_attr + 1e3  # gaps between chunks stay the parent's
        assert chunks[0].start_ns - queue.end_ns == 0
        assert decode.start_ns == chunks[-1].end_ns  # the last chunk ends at the first token
        # the join: the same parts with the phase spans as on the llm_request span alone
        with_phases = decompose(r, spans)
        alone = decompose(r, [parent])
        assert not isinstance(with_phases, str)
        assert not isinstance(alone, str)
        assert with_phases.ttft_parts_ns == alone.ttft_parts_ns
        assert with_phases.e2e_parts_ns == alone.e2e_parts_ns
        assert sum(with_phases.ttft_parts_ns.values()) == with_phases.ttft_ns
        assert abs(with_phases.ttft_parts_ns.get("queue", 0) - float(a["gen_ai.latency.time_in_queue"]) * 1e9) < 1e4
        assert abs(with_phases.ttft_parts_ns["prefill"] - prefill_attr) < 1e4
        # the critical path of the server's tree: the phases once each, all inference, adding up to the parent
        tree = build_tree([parent, *kids])
        path = critical_path(tree)
        assert path.total_ns == _dur(parent)
        assert set(span_layers(tree)) == {"inference"}
    assert len(chunk_counts) >= 15
    assert max(chunk_counts) >= 3  # a 600-token prompt under a 256-token budget: chunked prefill

    # trace join and analyze over the whole set, as a user runs them
    join = tailscope.join_traces("latest", "live", store=run_db, trace_store=trace_db, skew_tolerance_ms=5.0)
    assert join.joined >= 15, join.summary.unjoined
    for p in join.summary.per_request:
        assert sum(p.ttft_parts_ns.values()) == p.ttft_ns
        assert p.e2e_ns is not None
        assert sum(p.e2e_parts_ns.values()) == p.e2e_ns
        assert {"queue", "prefill"} <= set(p.ttft_parts_ns)
    analysis = tailscope.analyze_traces("live", store=trace_db)
    composition = analysis.layers["median_bucket"]["composition"]
    assert composition["inference"]["share"] == pytest.approx(1.0), composition
    ops = analysis.operations
    text = str(ops)
    for name in ("queue", "prefill", "decode"):
        assert name in text, ops
    assert not any("llm_request →" in w["pattern"] for w in analysis.waterfalls)  # phases are no waterfall to fix
    view = tailscope.show_trace(join.summary.per_request[0].trace_id, set_name="live", store=trace_db)
    assert view is not None


def test_otlp_spans_request_keeps_the_single_span(tmp_path: Path) -> None:
    trace_db = tmp_path / "traces.duckdb"
    with collect_and_serve(trace_db, "--otlp-spans", "request", set_name="one") as (url, _, _, _):
        result = tailscope.bench(url, requests=6, concurrency=2, input_tokens=32, output_tokens=4,
                                 trace_context="on", metrics_url="off")  # fmt: skip
        assert result.summary.requests.completed == 6
        time.sleep(1.5)
    import duckdb

    con = duckdb.connect(str(trace_db), read_only=True)
    try:
        names = [n for (n,) in con.execute("SELECT name FROM spans").fetchall()]
    finally:
        con.close()
    assert names
    assert set(names) == {"llm_request"}


def test_a_disaggregated_servers_phases_show_the_kv_transfer(tmp_path: Path) -> None:
    """``serve --disagg``: under each ``llm_request`` span the prefill rank's chunks, ``kv transfer``, ``queue
    (decode rank)`` and the decode rank's one-token chunk, tiling the parent; the join's parts are those of the parent
    alone (the KV transfer is part of the first token's wait, ``time_in_model_prefill``)."""
    from tailscope.store.spans import SpanStore
    from tailscope.trace.join import decompose

    trace_db = tmp_path / "traces.duckdb"
    budget = ("--max-num-seqs", "16", "--max-num-batched-tokens", str(BUDGET), "--disagg", "prefill=1x1,decode=1x1")
    with collect_and_serve(trace_db, *budget) as (url, _collect, _, lines):
        assert any("disaggregated prefill=1x1,decode=1x1" in line for line in lines), lines
        result = tailscope.bench(
            url, requests=8, rate=4.0, arrival="constant", input_tokens=PROMPT, output_tokens=8, trace_context="on",
            metrics_url="off",
        )  # fmt: skip
        assert result.summary.requests.completed == 8
        time.sleep(1.5)  # the server's exporter sends every 0.5 s
    traces = SpanStore(trace_db).load_traces("live", [r.trace_id or "" for r in result.records])
    assert len(traces) >= 7, len(traces)
    seen = 0
    for r in result.records:
        spans = traces.get(r.trace_id or "")
        if not spans:
            continue
        seen += 1
        (parent,) = [s for s in spans if s.name == "llm_request"]
        top = sorted((s for s in spans if s.parent_id == parent.span_id), key=lambda s: (s.start_ns, s.end_ns))
        names = [s.name for s in top]
        k = names.index("kv transfer")
        assert names[:2] == ["receive", "queue"]
        assert set(names[2:k]) == {"prefill"}, names
        assert names[k:] == ["kv transfer", "queue (decode rank)", "prefill", "decode", "stream end"], names
        assert [s.attributes.get("tailscope.pool") for s in top if s.name == "prefill"] == ["prefill"] * (k - 2) + [
            "decode"
        ]
        for a, b in itertools.pairwise(top):
            assert a.end_ns <= b.start_ns, (a.name, b.name)
        assert all(parent.start_ns <= s.start_ns <= s.end_ns <= parent.end_ns for s in top)
        prefill_attr = float(parent.attributes["gen_ai.latency.time_in_model_prefill"]) * 1e9
        first_wait = sum(_dur(s) for s in top[2 : k + 3])  # prefill chunks, transfer, decode queue, decode chunk
        assert first_wait <= prefill_attr + 1e3
        assert top[k + 2].end_ns == next(s for s in top if s.name == "decode").start_ns  # ends at the first token
        with_phases, alone = decompose(r, spans), decompose(r, [parent])
        assert not isinstance(with_phases, str)
        assert not isinstance(alone, str)
        assert with_phases.ttft_parts_ns == alone.ttft_parts_ns
    assert seen >= 7
