"""The capacity and cost trees: OOM under concurrency, a throughput ceiling, a smaller model that is slower, a cost
spike (``shared/method/001`` §5.1–5.2, ``004`` §9)."""

from __future__ import annotations

import re

from tailscope.records import ErrorClass, Status
from tailscope.verify.findings import pct
from tailscope.verify.rules_engine import KV_HIGH_USAGE, SATURATION_QUEUED_SHARE
from tailscope.verify.tree_evidence import (
    GPU_LOW_PCT,
    NO_GPU_TELEMETRY,
    QUANTISED,
    figure,
    finished_rps,
    gpu_util,
    kv_evidence,
    kv_pressure,
    memory_fraction,
    model_params_b,
    queued_share,
    tokens_per_request,
    util_evidence,
)
from tailscope.verify.tree_model import NO, UNKNOWN, YES, Branch, Tree, TreeInput

#: symptom thresholds (the method's numbers where it gives one)
GPU_SATURATED_PCT = 90.0
MEMORY_FULL_FRAC = 0.95
CPU_SATURATED_PCT = 90.0
COST_SPIKE_FACTOR = 1.3  # tokens per request ×1.3 against the baseline
HEAVY_SESSION_SHARE = 0.2  # one session or class holding this share of all tokens

OUT_OF_MEMORY = re.compile(r"out of memory|\boom\b|cuda error", re.IGNORECASE)
SERVER_ERRORS = (ErrorClass.HTTP_5XX, ErrorClass.STREAM_BROKEN, ErrorClass.SERVER_ERROR_EVENT)


def oom_tree(t: TreeInput) -> Tree:
    v = t.view
    failed = [r for r in v.records if r.status is Status.ERROR]
    oom = [r for r in failed if r.error_detail and OUT_OF_MEMORY.search(r.error_detail)]
    server = [r for r in failed if r.error in SERVER_ERRORS]
    kv_p90, pre = kv_pressure(v)
    mem = memory_fraction(t)
    present = bool(oom) or (bool(server) and ((mem or 0) >= MEMORY_FULL_FRAC or (kv_p90 or 0) >= KV_HIGH_USAGE))
    conc = v.settings.get("concurrency")
    branches = [
        Branch(
            "Is the KV cache over budget (usage near full, preemptions)?",
            UNKNOWN if kv_p90 is None else YES if kv_p90 >= KV_HIGH_USAGE or pre > 0 else NO,
            kv_evidence(kv_p90, pre),
            "lower the concurrency cap (max_num_seqs) to what KV holds; paged KV; shorter max_model_len",
        ),
        Branch(
            "Is GPU memory full (memory curve)?",
            UNKNOWN if mem is None else YES if mem >= MEMORY_FULL_FRAC else NO,
            NO_GPU_TELEMETRY if mem is None else f"fullest GPU at {mem:.0%} of its memory",
            "lower gpu_memory_utilization headroom misuse, shorter context (max_model_len), fewer sequences",
        ),
        Branch(
            "Did requests fail as concurrency rose?",
            NO if not failed else YES if server else NO,
            f"{len(failed)} failed ({len(oom)} say out of memory, {len(server)} 5xx/disconnect)"
            + (f" at concurrency {conc}" if conc else ""),
            "gate on error_rate at the target concurrency; cap concurrency at the gateway",
        ),
    ]
    return Tree(
        "oom",
        "OOM under concurrency",
        present,
        f"{len(oom)} out-of-memory errors, {len(server)} server errors of {v.n} requests",
        tuple(branches),
        "001 §5.1 OOM at high concurrency",
    )


def throughput_tree(t: TreeInput) -> Tree:
    v = t.view
    qs = queued_share(v)
    present = qs is not None and qs[0] >= SATURATION_QUEUED_SHARE and qs[1] >= 1
    util = gpu_util(t)
    mem = memory_fraction(t)
    kv_p90, pre = kv_pressure(v)
    cpu = t.gpu.get("cpu_busy_pct")
    lag = pct(v.send_lag, 99)
    branches = [
        Branch(
            "Is the GPU saturated?",
            UNKNOWN if util is None else YES if util >= GPU_SATURATED_PCT else NO,
            util_evidence(util),
            "add GPUs / replicas (`tailscope plan capacity`)",
        ),
        Branch(
            "GPU not busy but requests queue: is the KV cache too small?",
            UNKNOWN
            if kv_p90 is None
            else YES
            if (kv_p90 >= KV_HIGH_USAGE or pre > 0) and (util is None or util < GPU_SATURATED_PCT)
            else NO,
            kv_evidence(kv_p90, pre),
            "more KV: FP8 KV cache, adjust gpu_memory_utilization, shorter max_model_len",
        ),
        Branch(
            "Memory not full but throughput low: is the engine's admission the limit?",
            UNKNOWN if util is None or mem is None else YES if util < GPU_LOW_PCT and mem < 0.8 and present else NO,
            "needs GPU telemetry (utilisation and memory)"
            if util is None or mem is None
            else f"GPU utilisation {util:.0f} %, memory {mem:.0%} full while requests queue",
            "look at compute and bandwidth, not memory: raise max_num_seqs / max_num_batched_tokens, check kernels",
        ),
        Branch(
            "Is the gateway (or the client) CPU saturated?",
            YES
            if (isinstance(cpu, int | float) and cpu >= CPU_SATURATED_PCT) or (lag is not None and lag > 50)
            else NO
            if isinstance(cpu, int | float) or lag is not None
            else UNKNOWN,
            (f"host CPU busy {cpu:.0f} %" if isinstance(cpu, int | float) else "no node-exporter CPU scraped")
            + (f"; client send lag p99 {lag:.1f} ms" if lag is not None else ""),
            "scale the gateway apart from the inference tier; more client workers",
        ),
    ]
    return Tree(
        "throughput_ceiling",
        "Throughput ceiling (requests queue at some QPS)",
        present,
        "no queue metric scraped"
        if qs is None
        else f"queue > 0 in {qs[0]:.0%} of scrapes (max {qs[1]:.0f}); {finished_rps(v):.2f} requests/s finished",
        tuple(branches),
        "004 §9 throughput ceiling; 001 §5.2 memory not full but throughput low",
    )


def smaller_model_tree(t: TreeInput) -> Tree:
    v, b = t.view, t.baseline
    mine, theirs = model_params_b(t.model), model_params_b(t.baseline_model)
    if b is None or mine is None or theirs is None:
        return Tree(
            "smaller_model_slower",
            "A smaller model is slower",
            None,
            "needs a baseline run of a larger model (diagnose RUN --baseline BASE) with sizes in the model names",
            (),
            "001 §5.1 smaller model slower; §5.2",
        )
    e_me, e_b = pct(v.e2e, 50), pct(b.e2e, 50)
    present = mine < theirs and e_me is not None and e_b is not None and e_me > e_b
    run_me, run_b = v.gauge("running"), b.gauge("running")
    out_me, out_b = pct(v.output_tokens, 50), pct(b.output_tokens, 50)
    quant = bool(t.model and QUANTISED.search(t.model))
    branches = [
        Branch(
            "Is the small model's batch emptier than the baseline's?",
            UNKNOWN
            if run_me is None or run_b is None
            else YES
            if run_me.values.mean() < 0.8 * run_b.values.mean()
            else NO,
            "no running-batch metric in both runs"
            if run_me is None or run_b is None
            else f"running batch mean {run_me.values.mean():.1f} vs {run_b.values.mean():.1f} (baseline)",
            "raise the batch size (max_num_seqs) and the offered concurrency",
        ),
        Branch(
            "Is the quantisation precision costing speed (dequantisation kernels)?",
            YES if quant else NO,
            f"model {t.model!r} " + ("is quantised" if quant else "names no quantisation"),
            "check the kernels for that format on this GPU; compare with FP16/INT8",
        ),
        Branch(
            "Does the small model produce more tokens (or need more calls) for the same task?",
            UNKNOWN if out_me is None or out_b is None else YES if out_me >= 1.2 * out_b else NO,
            f"median output {out_me or 0:.0f} vs {out_b or 0:.0f} tokens (baseline)",
            "judge end to end: quality loss that adds calls or tokens costs more than the per-token speed-up",
        ),
    ]
    return Tree(
        "smaller_model_slower",
        "A smaller model is slower",
        present,
        f"{t.model} ({mine:g}B) E2E p50 {figure(e_me)} vs {t.baseline_model} ({theirs:g}B) {figure(e_b)}",
        tuple(branches),
        "001 §5.1 smaller model slower; §5.2",
    )


def cost_tree(t: TreeInput) -> Tree:
    v, b = t.view, t.baseline
    tpr = tokens_per_request(v)
    tpr_b = tokens_per_request(b) if b is not None else None
    present = None if tpr is None or tpr_b is None else tpr >= COST_SPIKE_FACTOR * tpr_b
    by_class: dict[str, float] = {}
    by_session: dict[str, float] = {}
    total = 0.0
    for r, ok in zip(v.records, v.ok, strict=True):
        tokens = float((r.input_tokens or 0) + ((r.output_tokens or 0) if ok else 0))
        total += tokens
        by_class[r.request_class] = by_class.get(r.request_class, 0.0) + tokens
        if r.session_id:
            by_session[r.session_id] = by_session.get(r.session_id, 0.0) + tokens
    top_class = max(by_class.items(), key=lambda kv: kv[1]) if by_class else None
    top_session = max(by_session.items(), key=lambda kv: kv[1]) if by_session else None
    hit = v.prefix_hit_rate()
    hit_b = b.prefix_hit_rate() if b is not None else None
    heavy = top_session is not None and total > 0 and top_session[1] / total >= HEAVY_SESSION_SHARE
    branches = [
        Branch(
            "Where do the tokens go (which class or tier)?",
            UNKNOWN if tpr is None else YES if present else NO if present is not None else UNKNOWN,
            (f"{tpr:.0f} tokens per request" if tpr is not None else "no token counts")
            + (f" vs {tpr_b:.0f} (baseline)" if tpr_b is not None else "")
            + (f"; top class {top_class[0]!r} holds {top_class[1] / total:.0%}" if top_class and total else ""),
            "route simple requests to small tiers (`tailscope plan routing`); max_tokens and prompt budgets",
        ),
        Branch(
            "Have the caches stopped hitting (prompt caching, semantic cache)?",
            UNKNOWN
            if hit is None
            else YES
            if (hit_b is not None and hit < 0.5 * hit_b) or (hit < 0.3 and float(v.shared_prefix.mean()) >= 0.5)
            else NO,
            "no prefix-cache metric scraped"
            if hit is None
            else f"prefix-cache hit rate {hit:.1%}" + (f" vs {hit_b:.1%} (baseline)" if hit_b is not None else ""),
            "keep the shared prefix byte-identical; check the cache's hit rate after each prompt change",
        ),
        Branch(
            "Is one user or session abusing or looping?",
            UNKNOWN if not by_session else YES if heavy else NO,
            "no sessions in the run"
            if not by_session or top_session is None
            else f"top session {top_session[0]!r} holds {top_session[1] / total:.0%} of {len(by_session)} sessions' "
            "tokens",
            "per-user token quotas and alerts on per-session token use; cap agent loop iterations",
        ),
    ]
    return Tree(
        "cost_spike",
        "Cost spike",
        present,
        "needs a baseline run to compare tokens per request (diagnose RUN --baseline BASE)"
        if present is None
        else f"tokens per request {tpr:.0f} vs {tpr_b:.0f} (baseline), ×{(tpr or 0) / (tpr_b or 1):.2f}",
        tuple(branches),
        "004 §9 cost spike",
    )
