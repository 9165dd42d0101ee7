"""The method's troubleshooting trees (001 §5.1, 004 §9): every branch on a crafted run that points at it and on one
that rules it out or holds no evidence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from gate_factory import MS, gauge, record
from test_diagnose import healthy_records, healthy_samples

from tailscope.metrics.gpu import summarize_gpu
from tailscope.records import ErrorClass, RequestRecord, ServerSample, Status
from tailscope.report.verify import findings_text
from tailscope.verify.diagnose import Diagnosis
from tailscope.verify.findings import build_view
from tailscope.verify.tree_evidence import model_params_b
from tailscope.verify.trees import walk_trees


def walk(
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample] = (),
    *,
    base: Sequence[RequestRecord] | None = None,
    base_samples: Sequence[ServerSample] = (),
    **kw: Any,
) -> dict[str, Any]:
    view = build_view(records, samples, trace=kw.pop("trace", None), settings=kw.pop("settings", None))
    baseline = build_view(base, base_samples) if base is not None else None
    return {t.symptom: t for t in walk_trees(view, baseline=baseline, **kw)}


def verdict(tree: Any, words: str) -> str:
    return str(next(b.verdict for b in tree.branches if words in b.check))


def dcgm(name: str, values: Sequence[float], *, gpus: int = 1) -> list[ServerSample]:
    return [
        ServerSample(t_ns=round(k * 1000 * MS), name=name, value=float(v), labels=f'gpu="{g}"')
        for k, v in enumerate(values)
        for g in range(gpus)
    ]


def test_healthy_run_shows_no_symptom() -> None:
    trees = walk(healthy_records(), healthy_samples(), model="llama-3.1-8b")
    assert [s for s, t in trees.items() if t.present] == []
    assert trees["smaller_model_slower"].present is None  # no baseline: cannot tell
    assert trees["cost_spike"].present is None


def test_ttft_streaming_off_and_buffered_stream() -> None:
    slow = healthy_records(ttft_ms=3000.0)
    one_event = [
        replace(r, chunk_times_ns=(r.end_ns or 0,), chunk_tokens=(len(r.chunk_times_ns),), first_token_ns=r.end_ns)
        for r in slow
    ]
    t = walk(one_event)["ttft_high"]
    assert t.present
    assert verdict(t, "streaming off") == "yes"
    buffered = healthy_records(ttft_ms=3000.0, gaps_ms=[0.01] * 15)  # every token within 0.2 ms, after 3 s
    t = walk(buffered)["ttft_high"]
    assert verdict(t, "streaming off") == "no"
    assert verdict(t, "buffer the stream") == "yes"
    assert "100% of 200 streamed answers arrived in one burst" in t.branches[1].evidence
    assert verdict(walk(slow)["ttft_high"], "buffer the stream") == "no"  # tokens spread: a real stream


def test_ttft_queueing_long_prompts_and_prefix_misses() -> None:
    rising = healthy_records(ttft_ms=lambda i: 100.0 + 20.0 * i)
    queue = gauge("vllm:num_requests_waiting", list(range(25)))
    t = walk(rising, queue)["ttft_high"]
    assert t.present
    assert verdict(t, "queue") == "yes"
    assert verdict(walk(rising, healthy_samples())["ttft_high"], "queue") == "no"
    assert verdict(walk(rising)["ttft_high"], "queue") == "unknown"  # no metrics scraped

    rng = np.random.default_rng(1)
    inputs = rng.integers(1000, 8000, 200)
    long = healthy_records(input_tokens=lambda i: int(inputs[i]), ttft_ms=lambda i: 30.0 + 0.5 * inputs[i])
    assert verdict(walk(long)["ttft_high"], "prompts long") == "yes"
    assert verdict(walk(healthy_records())["ttft_high"], "prompts long") == "no"

    hits = gauge("vllm:prefix_cache_queries_total", np.linspace(0, 1e5, 25)) + gauge(
        "vllm:prefix_cache_hits_total", np.linspace(0, 5e3, 25)
    )
    shared = healthy_records(shared_prefix=True)
    t = walk(shared, hits)["ttft_high"]
    assert verdict(t, "prefix") == "yes"
    assert "timestamp or id" in t.branches[4].evidence
    good = gauge("vllm:prefix_cache_queries_total", np.linspace(0, 1e5, 25)) + gauge(
        "vllm:prefix_cache_hits_total", np.linspace(0, 8e4, 25)
    )
    assert verdict(walk(shared, good)["ttft_high"], "prefix") == "no"


def test_tpot_branches() -> None:
    slow = healthy_records(tpot_ms=60.0)
    low_util = dcgm("DCGM_FI_DEV_GPU_UTIL", [30] * 25) + dcgm("DCGM_FI_PROF_DRAM_ACTIVE", [0.2] * 25)
    t = walk(slow, low_util, model="meta-llama/Llama-3.1-70B-Instruct")["tpot_high"]
    assert t.present
    assert verdict(t, "unquantised") == "yes"  # the method: not quantised → evaluate AWQ INT4
    assert verdict(t, "batch too small") == "yes"
    assert verdict(t, "overkill") == "yes"  # 70B for ~16-token answers
    assert verdict(t, "bandwidth") == "no"
    assert verdict(t, "speculative") == "unknown"
    busy = dcgm("DCGM_FI_DEV_GPU_UTIL", [97] * 25) + dcgm("DCGM_FI_PROF_DRAM_ACTIVE", [0.9] * 25)
    spec = gauge("vllm:spec_decode_num_draft_tokens_total", np.linspace(0, 1000, 25)) + gauge(
        "vllm:spec_decode_num_accepted_tokens_total", np.linspace(0, 200, 25)
    )
    t = walk(slow, busy + spec, model="Qwen2.5-7B-Instruct-AWQ")["tpot_high"]
    assert verdict(t, "unquantised") == "no"
    assert verdict(t, "batch too small") == "no"
    assert verdict(t, "bandwidth") == "yes"
    assert verdict(t, "speculative") == "yes"  # 20 % acceptance: drafting does not pay
    assert "acceptance 20%" in t.branches[2].evidence
    assert verdict(t, "overkill") == "no"
    assert not walk(healthy_records())["tpot_high"].present
    assert model_params_b("llama-3.1-8b") == 8.0
    assert model_params_b("Qwen/Qwen2.5-0.5B-Instruct") == 0.5
    assert model_params_b("gpt-4o") is None


def _interference(delayed: bool) -> list[RequestRecord]:
    """Streams whose gaps stall while a new request is prefilled (the built-in engine's demo signature)."""
    recs = []
    for i in range(100):
        start = i * 200.0
        times = [start + 80.0]
        while len(times) < 40:
            t = times[-1] + 20.0
            # another request is prefilled from k*200 to k*200+80; a gap crossing it stalls
            if delayed and any(k * 200.0 < t and times[-1] < k * 200.0 + 80.0 for k in range(100) if k != i):
                t += 200.0
            times.append(t)
        recs.append(record(i, sched_ms=start, ttft_ms=80.0, gaps_ms=np.diff(times).tolist(), input_tokens=400))
    return recs


def test_stutter_blames_prefills_not_preemption_on_the_demo_signature() -> None:
    pre0 = gauge("vllm:num_preemptions_total", [0] * 25)
    t = walk(_interference(True), pre0)["stutter"]
    assert t.present
    assert verdict(t, "prefills") == "yes"
    assert verdict(t, "preempted") == "no"
    assert not walk(_interference(False), pre0)["stutter"].present
    t = walk(_interference(True), gauge("vllm:num_preemptions_total", np.linspace(0, 40, 25)))["stutter"]
    assert verdict(t, "preempted") == "yes"
    lagging = walk(_interference(True), summary={"loop_lag_ms": {"p99": 80.0}})["stutter"]
    assert verdict(lagging, "network or the client") == "yes"


def test_oom_under_concurrency() -> None:
    recs = healthy_records()
    for i in range(0, 200, 10):
        recs[i] = replace(
            recs[i], status=Status.ERROR, error=ErrorClass.HTTP_5XX, error_detail="CUDA out of memory. Tried to ..."
        )
    full = dcgm("DCGM_FI_DEV_FB_USED", [79000] * 25) + dcgm("DCGM_FI_DEV_FB_FREE", [1000] * 25)
    kv = gauge("vllm:kv_cache_usage_perc", [0.99] * 25)
    t = walk(recs, full + kv, settings={"concurrency": 64})["oom"]
    assert t.present
    assert [b.verdict for b in t.branches] == ["yes", "yes", "yes"]
    assert "99% of its memory" in t.branches[1].evidence
    assert not walk(healthy_records(), healthy_samples())["oom"].present


def test_tail_features_tool_timeouts_and_gc_pauses() -> None:
    long_prompt = healthy_records(
        input_tokens=lambda i: 6000 if i % 50 == 0 else 300, ttft_ms=lambda i: 2000.0 if i % 50 == 0 else 80.0
    )
    t = walk(long_prompt)["tail"]
    assert t.present
    assert verdict(t, "tail requests") == "yes"
    assert "prompt mean 2580 vs 300" in t.branches[0].evidence
    trace = {"layers": {"tail_bucket": {"composition": {"agent": {"share": 0.55}, "inference": {"share": 0.45}}}}}
    assert verdict(walk(long_prompt, trace=trace)["tail"], "tools time out") == "yes"
    assert verdict(walk(long_prompt)["tail"], "tools time out") == "unknown"
    quiet = {"layers": {"tail_bucket": {"composition": {"inference": {"share": 0.9}}}}}
    assert verdict(walk(long_prompt, trace=quiet)["tail"], "tools time out") == "no"

    # a server-wide stop: every running stream pauses 300 ms at t = 5.3 s and 15.3 s, while no request is prefilled
    def gaps(i: int) -> list[float]:
        out = []
        t = i * 1000.0 + 5.0
        for _ in range(150):
            g = 20.0
            if any(t < p < t + g for p in (5300.0, 15300.0)):
                g += 300.0
            out.append(g)
            t += g
        return out

    paused = [record(i, sched_ms=i * 1000.0, ttft_ms=5.0, gaps_ms=gaps(i)) for i in range(30)]
    t = walk(paused, gauge("vllm:num_preemptions_total", [0] * 25))["tail"]
    assert verdict(t, "GC") == "yes"
    assert verdict(walk(healthy_records(), healthy_samples())["tail"], "GC") == "no"


def test_throughput_ceiling_gpu_kv_memory_and_cpu() -> None:
    queue = gauge("vllm:num_requests_waiting", [3] * 25)
    busy = dcgm("DCGM_FI_DEV_GPU_UTIL", [98] * 25)
    t = walk(healthy_records(), queue + busy)["throughput_ceiling"]
    assert t.present
    assert verdict(t, "GPU saturated") == "yes"
    assert verdict(t, "KV cache too small") == "unknown"
    idle = dcgm("DCGM_FI_DEV_GPU_UTIL", [35] * 25)
    half = dcgm("DCGM_FI_DEV_FB_USED", [30000] * 25) + dcgm("DCGM_FI_DEV_FB_FREE", [50000] * 25)
    kv_full = gauge("vllm:kv_cache_usage_perc", [0.97] * 25)
    t = walk(healthy_records(), queue + idle + half + kv_full)["throughput_ceiling"]
    assert verdict(t, "GPU saturated") == "no"
    assert verdict(t, "KV cache too small") == "yes"
    assert verdict(t, "Memory not full") == "yes"
    cpu = [
        ServerSample(round(k * 1000 * MS), "node_cpu_seconds_total", float(v), f'cpu="0",mode="{m}"')
        for k in range(25)
        for m, v in (("idle", 0.02 * k), ("user", 0.98 * k))
    ]
    assert verdict(walk(healthy_records(), queue + cpu)["throughput_ceiling"], "gateway") == "yes"
    assert not walk(healthy_records(), healthy_samples())["throughput_ceiling"].present


def test_smaller_model_slower() -> None:
    big = healthy_records()
    small = healthy_records(tpot_ms=25.0, n_out=lambda i: 40)
    run_small, run_big = gauge("vllm:num_requests_running", [1] * 25), gauge("vllm:num_requests_running", [4] * 25)
    t = walk(small, run_small, base=big, base_samples=run_big, model="qwen-1.5b-int4", baseline_model="qwen-14b")[
        "smaller_model_slower"
    ]
    assert t.present
    assert [b.verdict for b in t.branches] == ["yes", "yes", "yes"]
    same = walk(big, base=big, model="qwen-1.5b", baseline_model="qwen-14b")["smaller_model_slower"]
    assert same.present is False


def test_cost_spike() -> None:
    base = healthy_records()
    grown = healthy_records(input_tokens=600)
    for i in range(0, 200):
        sess = "loop-user" if i % 2 == 0 else f"s{i}"
        grown[i] = replace(grown[i], session_id=sess)
    t = walk(grown, base=base)["cost_spike"]
    assert t.present
    assert verdict(t, "tokens go") == "yes"
    assert verdict(t, "one user") == "yes"
    assert "'loop-user'" in t.branches[2].evidence
    assert walk(base, base=base)["cost_spike"].present is False


def test_gpu_summary_from_dcgm_samples() -> None:
    samples = (
        dcgm("DCGM_FI_DEV_GPU_UTIL", [40, 60, 80], gpus=2)
        + dcgm("DCGM_FI_DEV_FB_USED", [1000, 2000, 3000], gpus=2)
        + dcgm("DCGM_FI_DEV_FB_FREE", [7000, 6000, 5000], gpus=2)
        + dcgm("DCGM_FI_DEV_POWER_USAGE", [300, 350, 400], gpus=2)
        + dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", [0, 350_000, 700_000], gpus=2)
    )
    g = summarize_gpu(samples, output_tokens=1000)
    assert g["gpus"] == 2
    assert g["util_pct"]["mean"] == 60.0
    assert g["memory_used_mib"]["max"] == 3000
    assert g["memory_total_mib"] == 8000
    assert g["memory_used_frac"]["max"] == 3000 / 8000
    assert g["power_w"]["max"] == 800.0
    assert g["energy_j"] == 1400.0  # 700 J per GPU
    assert g["energy_per_output_token_j"] == 1.4
    assert summarize_gpu(healthy_samples()) == {}


def test_trees_render_and_serialise() -> None:
    view = build_view(_interference(True), gauge("vllm:num_preemptions_total", [0] * 25))
    d = Diagnosis("r1", (), trees=walk_trees(view))
    assert "stutter" in [t.symptom for t in d.symptoms]
    text = findings_text(d)
    assert "Output stutters" in text
    assert "✔ yes" in text
    assert "not shown by this run: ttft_high (absent)" in text
    assert "OOM under concurrency" not in text
    assert "TPOT high" in findings_text(d, all_trees=True)
    doc = d.to_dict()
    assert doc["trees"][2]["symptom"] == "stutter"
    assert doc["trees"][2]["branches"][0]["verdict"] == "yes"
    assert d.tree("stutter").causes[0].check.startswith("Do pauses coincide")


def test_stalls_inside_prefills_are_not_blamed_on_proxies_or_gc() -> None:
    from tailscope.verify.diagnose import diagnose

    found = {f.rule: f for f in diagnose(_interference(True), gauge("vllm:num_preemptions_total", [0] * 25))}
    assert "prefill_interference" in found
    stalls = found["stalls"]
    assert "other requests' prefills" in stalls.cause
    assert not any("proxy" in a or "GC" in a for a in stalls.actions)
    assert any("chunked prefill" in a for a in stalls.actions)
    assert "0 preemptions: not KV pressure" in found["prefill_interference"].evidence
