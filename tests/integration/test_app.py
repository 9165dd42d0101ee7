"""``tailscope app``: the reference AI application, driven by the real bench over loopback, its spans collected by the
real OTLP receiver from the OpenTelemetry SDK's exporter, and analysed by ``trace``'s critical-path analysis.

The knowledge-assistant preset reproduces the method's case study (``../shared/method/004_*.txt``, section 10:
"总 P95 10.2s 中,模型仅占 21%"; five fixes take P95 to 1.6 s). At ``time_scale=0.1``: P95 ≈ 1.02 s (± 25 %), the
model ≈ 21 % (± 8 points) of the slow requests' critical path, and all fixes cut P95 by ≥ 75 %. Those timing
judgements pass on any machine when they hold and fail only on a quiet one (the ``judgement`` fixture: on a busy one
a miss is listed with the figures as not judged); the structural checks always run.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import tailscope
from tailscope.records import Span
from tailscope.trace.analysis import analyze_facts
from tailscope.trace.demo import to_otlp_json
from tailscope.trace.facts import trace_facts
from tailscope.trace.receiver import OtlpReceiver
from tailscope.trace.tree import build_tree

pytestmark = pytest.mark.integration

SCALE = 0.1
CASE_P95_S = 10.2
CASE_MODEL_SHARE = 0.21
REQUESTS = 100
CONCURRENCY = 8


async def _bench_app(fixes: str, spans: list[Span] | None) -> tuple[float, list[Span]]:
    receiver = None
    endpoint = None
    if spans is not None:
        receiver = OtlpReceiver(spans.extend, port=0, flush_interval_s=0.2)
        await receiver.start()
        endpoint = f"http://127.0.0.1:{receiver.port}"
    try:
        async with tailscope.start_app(fixes=fixes, time_scale=SCALE, otlp_endpoint=endpoint, seed=3) as app:
            result = await tailscope.bench_async(
                url=app.url, concurrency=CONCURRENCY, requests=REQUESTS, warmup=0, output_tokens=32, input_tokens=64,
                seed=3, timeout_total=60,
            )  # fmt: skip
            await app.flush_spans()
    finally:
        if receiver is not None:
            await asyncio.sleep(0.3)
            await receiver.stop()
    ok = [r for r in result.records if r.status.value == "ok"]
    assert len(ok) == REQUESTS, {r.status for r in result.records}
    p95 = result.summary.e2e_ms.p95
    assert p95 is not None
    return p95 / 1000, spans or []


def _analysis(spans: list[Span]) -> dict[str, Any]:
    by_trace: dict[str, list[Span]] = collections.defaultdict(list)
    for s in spans:
        by_trace[s.trace_id].append(s)
    return analyze_facts([trace_facts(build_tree(v)) for v in by_trace.values()])


def test_case_study_p95_model_share_and_fixes(tmp_path: Path, judgement: Any) -> None:
    spans: list[Span] = []
    p95, _ = asyncio.run(_bench_app("", spans))
    doc = _analysis(spans)
    assert doc["traces"]["count"] == REQUESTS
    tail = doc["layers"]["tail_p95_bucket"]["composition"]
    # every layer of the method is on the slow requests' critical path
    for layer in ("gateway", "retrieval", "agent", "inference", "network", "business"):
        assert tail[layer]["ms_per_trace"] > 0, (layer, tail)
    names = {s.name for s in spans}
    assert {"retrieve", "search faq", "search products", "search tickets", "rerank", "auth", "db pool wait"} <= names
    # the agent's next plan reads the previous tool call's result: its call id, for trace's dependency evidence
    call_ids = {s.attributes["gen_ai.tool.call.id"] for s in spans if s.name.startswith("tool ")}
    observed = [o for s in spans if s.name.startswith("plan ") for o in s.attributes.get("app.observations", ())]
    assert observed
    assert set(observed) <= call_ids
    fixed_p95, _ = asyncio.run(_bench_app("all", None))
    # what-if's projection of one fix on the unfixed traces, against the traces measured with the fix made
    parallel_spans: list[Span] = []
    asyncio.run(_bench_app("parallel-retrieval", parallel_spans))
    before_file, after_file = tmp_path / "before.json", tmp_path / "after.json"
    before_file.write_text(json.dumps(to_otlp_json(spans)), encoding="utf-8")
    after_file.write_text(json.dumps(to_otlp_json(parallel_spans)), encoding="utf-8")
    projected = tailscope.whatif(before_file, parallel=["search faq,search products,search tickets"])
    measured = tailscope.whatif(after_file, scale=["*=1"])  # every operation as it was: the measured distribution
    proj_p95, meas_p95 = projected.after["p95_ms"], measured.before["p95_ms"]
    # The measured P95 is itself a sample of 100 requests (one run's P95 moves by up to 15 % between runs): the
    # projection is held to 10 % of the measured P95's 95 % bootstrap interval, not of its point value.
    meas_low, meas_high = measured.before["p95_low_ms"], measured.before["p95_high_ms"]
    assert projected.after["p95_ms"] < projected.before["p95_ms"]  # the fix helps, whatever the machine
    figures = (
        f"P95 unfixed {p95:.3f} s, fixed {fixed_p95:.3f} s; model share of the tail {tail['inference']['share']:.3f}; "
        f"parallel retrieval: projected P95 {proj_p95:.1f} ms, measured {meas_p95:.1f} ms "
        f"[{meas_low:.1f}, {meas_high:.1f}]"
    )
    print(figures)
    judgement.holds(
        abs(p95 / (CASE_P95_S * SCALE) - 1) <= 0.25
        and abs(tail["inference"]["share"] - CASE_MODEL_SHARE) <= 0.08
        and fixed_p95 <= 0.25 * p95
        and 0.9 * meas_low <= proj_p95 <= 1.1 * meas_high,
        "the case study's P95 (± 25 %), model share (± 8 points), fixes (≥ 75 %), projection (± 10 % of the measured "
        f"P95's interval): {figures}",
    )


async def _surface() -> None:
    spans: list[Span] = []
    receiver = OtlpReceiver(spans.extend, port=0, flush_interval_s=0.2)
    await receiver.start()
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    try:
        app = tailscope.start_app(time_scale=0.02, otlp_endpoint=f"http://127.0.0.1:{receiver.port}", seed=1)
        async with app, aiohttp.ClientSession() as http:
            async with http.get(f"{app.url}/v1/models") as r:
                assert (await r.json())["data"][0]["id"] == "knowledge-assistant"
            body = {"model": "x", "messages": [{"role": "user", "content": "How do I reset my password?"}]}
            headers = {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
            async with http.post(f"{app.url}/v1/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200
                doc = await r.json()
            assert doc["object"] == "chat.completion"
            assert doc["usage"]["completion_tokens"] == app.preset.answer_tokens
            # degradation level 3: a static answer, no model call
            async with http.post(f"{app.url}/admin/degrade", json={"level": 3}) as r:
                assert (await r.json())["degrade"] == 3
            async with http.post(f"{app.url}/v1/chat/completions", json=body) as r:
                assert "busy" in (await r.json())["choices"][0]["message"]["content"]
            async with http.post(f"{app.url}/admin/degrade", json={"level": 9}) as r:
                assert r.status == 400
            await http.post(f"{app.url}/admin/degrade", json={"level": 0})
            # the model is down: the fallback answers from the FAQ, streamed as SSE
            async with http.post(f"{app.url}/admin/faults", json={"fault": "llm-down"}) as r:
                assert (await r.json())["faults"] == ["llm-down"]
            async with http.post(f"{app.url}/v1/chat/completions", json={**body, "stream": True}) as r:
                text = await r.text()
            assert r.status == 200
            assert "FAQ" in text
            assert text.rstrip().endswith("data: [DONE]")
            pipe = app._app.pipeline
            pipe.options = dataclasses.replace(pipe.options, fallback=False)  # as --no-fallback
            async with http.post(f"{app.url}/v1/chat/completions", json=body) as r:
                assert r.status == 502
            async with http.get(f"{app.url}/admin/state") as r:
                state = await r.json()
            assert (state["fallbacks"], state["errors"]) == (1, 1)
            await app.flush_spans()
    finally:
        await asyncio.sleep(0.3)
        await receiver.stop()
    mine = [s for s in spans if s.trace_id == trace_id]
    root = next(s for s in mine if s.name == "POST /v1/chat/completions")
    assert root.parent_id == "00f067aa0ba902b7"  # the incoming traceparent is the parent
    assert root.layer == "gateway"
    layers = {s.name: s.layer for s in mine}
    assert (layers["auth"], layers["rerank"], layers["SELECT users"]) == ("gateway", "retrieval", "business")
    assert any(s.layer == "inference" and s.name.startswith("chat ") for s in mine)
    rerank = next(s for s in mine if s.name == "rerank")
    assert set(rerank.attributes["app.consumes"]) == {"search faq", "search products", "search tickets"}
    searches = {s.span_id for s in mine if s.name.startswith("search ")}
    assert {span_id for _, span_id in rerank.links} == searches  # rerank consumes the searches: linked


def test_openai_surface_traceparent_degradation_and_fallback() -> None:
    asyncio.run(_surface())


async def _incident_run(incidents: str) -> tuple[list[float], float]:
    """(per request: last token − first token in ms, total ms spent waiting for a database connection)."""
    spans: list[Span] = []
    receiver = OtlpReceiver(spans.extend, port=0, flush_interval_s=0.2)
    await receiver.start()
    try:
        endpoint = f"http://127.0.0.1:{receiver.port}"
        async with tailscope.start_app(incidents=incidents, time_scale=0.1, otlp_endpoint=endpoint, seed=2) as app:
            result = await tailscope.bench_async(
                url=app.url, concurrency=8, requests=16, warmup=0, output_tokens=32, input_tokens=32, seed=2
            )
            await app.flush_spans()
    finally:
        await asyncio.sleep(0.3)
        await receiver.stop()
    spreads = [(r.end_ns - r.first_token_ns) / 1e6 for r in result.records if r.first_token_ns is not None and r.end_ns]
    assert len(spreads) == 16
    waits = sum(s.duration_ns for s in spans if s.name == "db pool wait") / 1e6
    return spreads, waits


def test_incidents_sse_buffering_and_pool_exhaustion() -> None:
    normal, normal_waits = asyncio.run(_incident_run(""))
    broken, broken_waits = asyncio.run(_incident_run("sse-buffering,pool-exhaustion"))
    # streamed: the 32 tokens arrive over the model's decode time; buffered by a proxy: all at once
    assert min(normal) > 3 * max(broken)
    # one pooled connection for 8 requests in flight: they queue for it
    assert broken_waits > 5 * normal_waits + 10


async def _llm_url() -> None:
    from tailscope.serve.app import build_app, make_runner
    from tailscope.serve.engine_factory import build_replica
    from tailscope.serve.site import serve_site

    engine, options = build_replica("llama-3.1-8b", "h100-sxm", speed=20.0, served_model_name="remote-model")
    runner = make_runner(build_app(engine, options))
    await runner.setup()
    port = await serve_site(runner, "127.0.0.1", 0)
    try:
        llm = f"http://127.0.0.1:{port}/v1"
        async with tailscope.start_app(llm_url=llm, time_scale=0.02) as app, aiohttp.ClientSession() as http:
            body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
            async with http.post(f"{app.url}/v1/chat/completions", json=body) as r:
                doc = await r.json()
            assert doc["usage"]["completion_tokens"] == 8
            assert app.stats.fallbacks == 0
    finally:
        await runner.cleanup()


def test_llm_url_sends_the_model_calls_elsewhere() -> None:
    asyncio.run(_llm_url())
