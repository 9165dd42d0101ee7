"""The latency trees: TTFT high, TPOT high, stuttering output, P99 ≫ P50 (``shared/method/001`` §5.1, ``004`` §9)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tailscope.records import ErrorClass
from tailscope.verify.findings import corr, finite, pct, series
from tailscope.verify.rules_engine import SATURATION_QUEUED_SHARE, any_prefill_overlap
from tailscope.verify.tree_evidence import (
    BURST_SPAN_SHARE,
    GPU_LOW_PCT,
    QUANTISED,
    burst_share,
    figure,
    gpu_util,
    kv_pressure,
    model_params_b,
    queued_share,
    single_chunk_share,
    stall_gaps,
    synchronous_pauses,
    tool_share,
    util_evidence,
)
from tailscope.verify.tree_model import NO, UNKNOWN, YES, Branch, Tree, TreeInput

#: symptom thresholds (the method's numbers where it gives one)
TTFT_HIGH_MS = 2000.0  # 003/perceived: a first token after 2 s feels broken
TTFT_HIGH_SHARE = 0.05  # … for at least this share of requests (the p95)
TPOT_READING_MS = 33.0  # 001: slower than ~30 tokens/s is slower than reading
TAIL_RATIO = 3.0  # P99 ≫ P50: p99 at least this many times p50 (E2E or TTFT)
STUTTER_SHARE = 0.01  # share of streams with a pause ≥ max(10 × median ITL, 100 ms)
TAIL_FEATURE_FACTOR = 1.5  # tail requests' mean prompt/output this many times the others'
TAIL_MIN_REQUESTS = 10  # the tail is the slowest 1 %, but at least this many requests (at most 10 %)
LARGE_MODEL_B = 30.0  # parameters (billions) that count as a large model for short, simple outputs
SHORT_OUTPUT_TOKENS = 200


def ttft_tree(t: TreeInput) -> Tree:
    v = t.view
    p95, p50 = pct(v.ttft, 95), pct(v.ttft, 50)
    over = float((finite(v.ttft) > TTFT_HIGH_MS).mean()) if finite(v.ttft).size else 0.0
    present = over >= TTFT_HIGH_SHARE
    single, n = single_chunk_share(v)
    burst, nb = burst_share(v)
    branches = [
        Branch(
            "Is streaming off (answers arrive as one event)?",
            YES if single >= 0.5 else NO if n else UNKNOWN,
            f"{single:.0%} of {n} answers arrived as one event" if n else "no multi-token answers",
            "stream the answer (SSE): the first token then arrives after prefill, not after the whole answer",
        ),
        Branch(
            "Does a gateway or proxy buffer the stream (all tokens in one burst)?",
            YES if burst >= 0.5 else NO if nb else UNKNOWN,
            f"{burst:.0%} of {nb} streamed answers arrived in one burst at the end "
            f"(tokens within {BURST_SPAN_SHARE:.0%} of the request's time)"
            if nb
            else "no streamed answers of ≥ 8 tokens",
            "turn response buffering off on the proxy (nginx: proxy_buffering off; X-Accel-Buffering: no)",
        ),
    ]
    qs = queued_share(v)
    q_at = v.gauge("queue_depth")
    r_q = corr(q_at.at(np.nan_to_num(v.sent_ms, nan=0.0)), v.ttft) if q_at is not None else None
    branches.append(
        Branch(
            "Is the inference queue long (num_requests_waiting)?",
            UNKNOWN if qs is None else YES if qs[0] >= SATURATION_QUEUED_SHARE and qs[1] >= 1 else NO,
            "no queue metric scraped (give --metrics-url)"
            if qs is None
            else f"queue > 0 in {qs[0]:.0%} of scrapes, max {qs[1]:.0f}"
            + (f"; TTFT vs queue at send r = {r_q:.2f}" if r_q is not None else ""),
            "add replicas or raise max_num_seqs when KV usage allows; shed or queue load at the gateway",
        )
    )
    med_in = pct(v.input_tokens, 50)
    r_in = corr(v.input_tokens, v.ttft)
    branches.append(
        Branch(
            "Are prompts long?",
            UNKNOWN
            if med_in is None
            else YES
            if (med_in >= 1000 or (r_in is not None and r_in >= 0.6 and med_in >= 500))
            else NO,
            "no prompt token counts"
            if med_in is None
            else f"median prompt {med_in:.0f} tokens, p99 {pct(v.input_tokens, 99) or 0:.0f}"
            + (f"; TTFT vs prompt tokens r = {r_in:.2f}" if r_in is not None else ""),
            "prefix caching for the static part; compress or trim prompts (fewer chunks, summarised history)",
        )
    )
    hit = v.prefix_hit_rate()
    shared = float(v.shared_prefix.mean()) if v.n else 0.0
    misses = hit is not None and hit < 0.3 and shared >= 0.5
    branches.append(
        Branch(
            "Does the prefix (KV) cache miss — dynamic fields in the prompt?",
            UNKNOWN if hit is None else YES if misses else NO,
            "no prefix-cache metric scraped"
            if hit is None
            else f"prefix-cache hit rate {hit:.1%}; {shared:.0%} of requests share a prefix"
            + (" — shared prompts that miss: a timestamp or id early in the prompt" if misses else ""),
            "move timestamps, ids and user data after the shared system prompt; enable prefix caching",
        )
    )
    return Tree(
        "ttft_high",
        "TTFT high (users wait long for the first token)",
        present,
        f"TTFT p50 {figure(p50)}, p95 {figure(p95)}; {over:.1%} of requests over {TTFT_HIGH_MS:.0f} ms",
        tuple(branches),
        "004 §9 TTFT; 001 §5.1 slow first token",
    )


def tpot_tree(t: TreeInput) -> Tree:
    v = t.view
    p50, p90 = pct(v.tpot, 50), pct(v.tpot, 90)
    present = p90 is not None and p90 > TPOT_READING_MS
    quant = bool(t.model and QUANTISED.search(t.model))
    util = gpu_util(t)
    running = v.gauge("running")
    conc = v.settings.get("concurrency")
    params = model_params_b(t.model)
    out_med = pct(v.output_tokens, 50)
    accepted = series(v.samples, "vllm:spec_decode_num_accepted_tokens_total")
    drafted = series(v.samples, "vllm:spec_decode_num_draft_tokens_total")
    dram = t.gpu.get("dram_active")
    branches = [
        Branch(
            "Are the weights unquantised (FP16/BF16: twice the bytes per decode step of INT8)?",
            UNKNOWN if not t.model else NO if quant else YES,
            "model not known"
            if not t.model
            else f"model {t.model!r} " + ("names a quantisation" if quant else "names no quantisation (FP16/BF16)"),
            "evaluate INT8 / AWQ INT4 weights: half the bytes per decode step; check quality on the business metric",
        ),
        Branch(
            "Is the batch too small (GPU utilisation low)?",
            UNKNOWN if util is None else YES if util < GPU_LOW_PCT else NO,
            util_evidence(util)
            + (f"; running batch mean {running.values.mean():.1f}" if running is not None else "")
            + (f" at concurrency {conc}" if conc else ""),
            "raise max_num_seqs / max_num_batched_tokens; send more concurrent requests per replica",
        ),
        Branch(
            "Is speculative decoding off, or not paying?",
            UNKNOWN
            if accepted is None or drafted is None
            else YES
            if drafted.delta > 0 and accepted.delta / drafted.delta < 0.5
            else NO,
            "no speculative-decoding metrics (off, or not exposed): a candidate when outputs are predictable"
            if accepted is None or drafted is None
            else f"acceptance {accepted.delta / drafted.delta:.0%} of {drafted.delta:.0f} draft tokens"
            if drafted.delta > 0
            else "no draft tokens during the run",
            "where acceptance is high (code, templates), enable Medusa/EAGLE speculative decoding; off where it is low",
        ),
        Branch(
            "Is a large model overkill for the task?",
            UNKNOWN
            if params is None or out_med is None
            else YES
            if params >= LARGE_MODEL_B and out_med <= SHORT_OUTPUT_TOKENS
            else NO,
            "model size not in its name"
            if params is None
            else f"{params:g}B parameters, median output {out_med or 0:.0f} tokens",
            "route simple requests to a small model (`tailscope plan routing`)",
        ),
        Branch(
            "Is memory bandwidth the limit (or another workload on the GPU)?",
            UNKNOWN if not isinstance(dram, Mapping) else YES if float(dram["mean"]) >= 0.7 else NO,
            f"DRAM active mean {float(dram['mean']):.0%}, max {float(dram['max']):.0%}"
            if isinstance(dram, Mapping)
            else "no DCGM_FI_PROF_DRAM_ACTIVE scraped",
            "a GPU with more bandwidth, INT8 weights/FP8 KV, or stop co-located workloads",
        ),
    ]
    return Tree(
        "tpot_high",
        "TPOT high (tokens come slowly)",
        present,
        f"TPOT p50 {figure(p50, digits=1)}, p90 {figure(p90, digits=1)} "
        f"(reading speed ≈ {TPOT_READING_MS:.0f} ms/token)",
        tuple(branches),
        "004 §9 TPOT; 001 §5.1 slow generation",
    )


def stutter_tree(t: TreeInput) -> Tree:
    v = t.view
    stalled, threshold = stall_gaps(v)
    streams = {int(r) for r in v.gap_req[stalled]} if stalled.any() else set()
    ok = int(v.ok.sum())
    present = ok > 0 and len(streams) >= max(2, STUTTER_SHARE * ok)
    in_prefill = any_prefill_overlap(v)[stalled] if stalled.any() else np.zeros(0, dtype=bool)
    share = float(in_prefill.mean()) if in_prefill.size else 0.0
    _, pre = kv_pressure(v)
    pre_series = v.counter("vllm:num_preemptions_total")
    lag_stats = (t.summary or {}).get("loop_lag_ms")
    lag = lag_stats.get("p99") if isinstance(lag_stats, Mapping) else None
    branches = [
        Branch(
            "Do pauses coincide with other requests' prefills (scheduling: prefill interference)?",
            UNKNOWN if not in_prefill.size else YES if share >= 0.5 else NO,
            f"{int(in_prefill.sum())} of {in_prefill.size} pauses ≥ {threshold:.0f} ms overlap another request's "
            "prefill"
            if in_prefill.size
            else "no pauses",
            "chunked prefill with a lower max_num_batched_tokens; long prompts on their own replicas; cap max_tokens",
        ),
        Branch(
            "Are requests preempted (KV cache full)?",
            UNKNOWN if pre_series is None else YES if pre > 0 else NO,
            "no preemption counter scraped" if pre_series is None else f"{pre:.0f} preemptions during the run",
            "cap concurrency to the KV budget (`tailscope plan kv`); more KV memory",
        ),
        Branch(
            "Is the network or the client unsteady?",
            UNKNOWN if not isinstance(lag, int | float) else YES if lag > 20 else NO,
            f"client event-loop lag p99 {lag:.1f} ms"
            if isinstance(lag, int | float)
            else "compare the server's token timeline (a trace) with the client's",
            "keep-alive and HTTP/2 to the gateway; run the client apart from the server",
        ),
    ]
    return Tree(
        "stutter",
        "Output stutters (tokens arrive in fits)",
        present,
        f"{len(streams)} of {ok} streams paused ≥ {threshold:.0f} ms (ITL p50 {figure(pct(v.gap_ms, 50), digits=1)}, "
        f"p99 {figure(pct(v.gap_ms, 99), digits=1)})",
        tuple(branches),
        "001 §5.1 stuttering output",
    )


def tail_tree(t: TreeInput) -> Tree:
    v = t.view
    e50, e99 = pct(v.e2e, 50), pct(v.e2e, 99)
    t50, t99 = pct(v.ttft, 50), pct(v.ttft, 99)
    ratio_e = e99 / e50 if e50 and e99 is not None else None
    ratio_t = t99 / t50 if t50 and t99 is not None else None
    present = max(ratio_e or 0.0, ratio_t or 0.0) >= TAIL_RATIO
    e2e = v.e2e
    n_ok = finite(e2e).size
    tail_share = max(1.0, 100.0 * TAIL_MIN_REQUESTS / n_ok) if n_ok else 1.0
    cut = pct(e2e, 100.0 - min(tail_share, 10.0))
    branches: list[Branch] = []
    if cut is not None and finite(e2e).size >= 20:
        tail = np.isfinite(e2e) & (e2e >= cut)
        rest = np.isfinite(e2e) & ~tail
        feats = []
        yes = False
        for name, arr in (("prompt", v.input_tokens), ("output", v.output_tokens)):
            ta, ra = finite(arr[tail]), finite(arr[rest])
            a, b = (float(ta.mean()) if ta.size else None), (float(ra.mean()) if ra.size else None)
            if a is not None and b:
                feats.append(f"{name} mean {a:.0f} vs {b:.0f} tokens")
                yes = yes or a >= TAIL_FEATURE_FACTOR * b
        classes = {r.request_class for r, m in zip(v.records, tail, strict=True) if m}
        if len({r.request_class for r in v.records}) > 1:
            feats.append("tail classes: " + ", ".join(sorted(classes)))
        branches.append(
            Branch(
                "What do the tail requests have in common (long prompt, long output)?",
                YES if yes else NO,
                f"slowest {int(tail.sum())} requests vs the rest: " + "; ".join(feats),
                "a separate queue/replica for long requests; cap max_tokens; SLOs per class",
            )
        )
    else:
        branches.append(Branch("What do the tail requests have in common?", UNKNOWN, "too few requests", "—"))
    timeouts = sum(1 for r in v.records if r.error in (ErrorClass.TIMEOUT_FIRST_TOKEN, ErrorClass.TIMEOUT_TOTAL))
    tool = tool_share(v.trace)
    branches.append(
        Branch(
            "Do external tools time out?",
            YES if (tool is not None and tool >= 0.3) or timeouts else NO if v.trace is not None else UNKNOWN,
            (f"tool spans hold {tool:.0%} of the critical path" if tool is not None else "no trace analysis (--traces)")
            + f"; {timeouts} request timeouts",
            "a 3 s timeout and a circuit breaker on tool calls, degrade on timeout; call independent tools in parallel",
        )
    )
    stalled, _ = stall_gaps(v)
    in_prefill = any_prefill_overlap(v)[stalled] if stalled.any() else np.zeros(0, dtype=bool)
    _, pre = kv_pressure(v)
    unexplained = int((~in_prefill).sum()) if in_prefill.size else 0
    sync = synchronous_pauses(v, stalled & ~any_prefill_overlap(v))
    gc = series(v.samples, "python_gc_collections_total")
    branches.append(
        Branch(
            "GC or compaction pauses?",
            YES if sync >= 2 and pre == 0 else NO if stalled.any() or v.gap_ms.size else UNKNOWN,
            f"{unexplained} pauses overlap no prefill; {sync} of them stop several streams at once with no preemption"
            + (f"; {gc.delta:.0f} Python GC collections" if gc is not None else ""),
            "tune or disable the collector on the hot path (gc.freeze after start-up), schedule compactions off-peak",
        )
    )
    return Tree(
        "tail",
        "P99 ≫ P50 (long tail)",
        present,
        f"E2E p99/p50 ×{ratio_e or 0:.1f} ({figure(e99)} vs {figure(e50)}); TTFT p99/p50 ×{ratio_t or 0:.1f}",
        tuple(branches),
        "004 §9 P99 ≫ P50; 001 §5.1 P50 fine, P99 broken",
    )
