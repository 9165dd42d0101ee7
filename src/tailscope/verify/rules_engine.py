"""Diagnosis rules about the serving engine: queueing, prefill, prefix cache, KV cache, decode interference, tails.

Each rule is a pure function ``RunView -> Finding | None``; thresholds are module constants so the docs can cite them.
"""

from __future__ import annotations

import numpy as np

from tailscope.verify.findings import Finding, RunView, clip01, corr, finite, pct

#: saturation: share of scrapes with a waiting queue, and how much TTFT must rise (late / early median).
SATURATION_QUEUED_SHARE = 0.2
SATURATION_TTFT_RISE = 1.5
SATURATION_QUEUE_CORR = 0.5
#: saturation with the backlog resident in the engine (admitted, sharing steps; the waiting queue empty): the
#: client's in-flight requests at send and the median TTFT must both rise ≥ ×1.5 from the first to the last third
#: and still ≥ ×1.2 from the middle to the last (growing to the end, not a warm-up filling), by ≥ this many requests
SATURATION_STILL_RISING = 1.2
SATURATION_BACKLOG_MIN = 8
#: prefill-bound TTFT: correlation of TTFT with prompt length, minimum median prompt and TTFT.
PREFILL_CORR = 0.6
PREFILL_MIN_INPUT_TOKENS = 1000
PREFILL_MIN_TTFT_MS = 150.0
#: low prefix-cache hit rate: share of requests with a shared prefix, and the hit rate called low.
PREFIX_SHARED_SHARE = 0.5
PREFIX_LOW_HIT_RATE = 0.3
#: KV pressure: KV usage (0–1) at the 90th percentile of scrapes.
KV_HIGH_USAGE = 0.9
#: prefill interference: a prompt is long at ≥ this many times the median and ≥ the minimum; ITL tail ratio.
LONG_PROMPT_FACTOR = 4.0
LONG_PROMPT_MIN_TOKENS = 512
INTERFERENCE_RATIO = 2.0
INTERFERENCE_MIN_GAPS = 20
#: long-output tail: E2E p99/p50, correlation with output length, and TPOT p99/p50 that counts as steady.
TAIL_RATIO = 3.0
TAIL_OUTPUT_CORR = 0.7
TAIL_STEADY_TPOT = 2.0
#: stalls: a gap is a stall at ≥ this many median ITLs and ≥ the minimum; share of requests that must stall.
STALL_FACTOR = 10.0
STALL_MIN_MS = 100.0
STALL_MIN_SHARE = 0.01
#: stalls are blamed on prefills when at least this share of them overlaps another request's prefill
STALL_PREFILL_SHARE = 0.5


def saturation(v: RunView) -> Finding | None:
    """Offered load exceeds capacity: TTFT rises over the run while the backlog grows.

    The backlog shows in the server's waiting queue; or, where the engine admits everything (KV cache to spare,
    prompts prefilled in chunks alongside the running decodes), in the running set: the waiting queue stays empty
    while the requests in flight and TTFT keep growing to the end of the run.
    """
    if v.n < 20:
        return None
    return _queued_saturation(v) or _resident_saturation(v)


def _thirds(a: np.ndarray) -> tuple[float | None, float | None, float | None]:
    """Medians of the first, middle and last third of ``a`` (in send order)."""
    third = max(1, len(a) // 3)
    return pct(a[:third], 50), pct(a[third:-third], 50), pct(a[-third:], 50)


_KNEE = "find the knee with `tailscope bench --rate` sweeps or `tailscope sim`; plan capacity at ≤ 80 % of it"


def _saturation_finding(
    v: RunView, title: str, symptom: str, cause: str, evidence: list[str], actions: tuple[str, ...]
) -> Finding:
    early = _thirds(v.ttft)[0]
    p99 = pct(v.ttft, 99) or 0.0
    return Finding(
        rule="saturation",
        title=title,
        symptom=symptom.format(p99=p99),
        evidence=tuple(evidence),
        cause=cause,
        actions=actions,
        impact=clip01(1.0 - (early or 0.0) / p99) if p99 else 0.5,
    )


def _queued_saturation(v: RunView) -> Finding | None:
    queue = v.gauge("queue_depth")
    if queue is None:
        return None
    queued_share = float((queue.values > 0).mean())
    if queued_share < SATURATION_QUEUED_SHARE or queue.values.max() < 1:
        return None
    early, _, late = _thirds(v.ttft)
    rise = late / early if early and late is not None else None
    q_at_send = queue.at(np.nan_to_num(v.sent_ms, nan=0.0))
    r = corr(q_at_send, v.ttft)
    if not ((rise is not None and rise >= SATURATION_TTFT_RISE) or (r is not None and r >= SATURATION_QUEUE_CORR)):
        return None
    evidence = [
        f"waiting queue > 0 in {queued_share:.0%} of scrapes (mean {queue.values.mean():.1f}, max "
        f"{queue.values.max():.0f}, {queue.name})",
    ]
    if rise is not None:
        evidence.append(
            f"median TTFT rose from {early:.0f} ms (first third) to {late:.0f} ms (last third), ×{rise:.1f}"
        )
    if r is not None:
        evidence.append(f"TTFT vs queue depth at send: r = {r:.2f}")
    return _saturation_finding(
        v,
        "Saturation: requests queue before prefill",
        "TTFT grows during the run (p99 {p99:.0f} ms) while requests wait in the server queue",
        "the offered load exceeds what the replica can admit; TTFT is mostly queueing time, not compute",
        evidence,
        (
            "lower the offered load or add replicas until the waiting queue stays near 0 at the target rate",
            _KNEE,
            "if KV usage is low, raise max_num_seqs / max_num_batched_tokens so more requests run at once",
            "autoscale or shed load on vllm:num_requests_waiting (see `tailscope alerts`)",
        ),
    )


def _rising(thirds: tuple[float | None, float | None, float | None]) -> bool:
    early, mid, late = thirds
    if not early or not mid or late is None:
        return False
    return late >= SATURATION_TTFT_RISE * early and late >= SATURATION_STILL_RISING * mid


def _resident_saturation(v: RunView) -> Finding | None:
    in_flight = v.in_flight_at(np.nan_to_num(v.sent_ms, nan=0.0))
    held, ttft = _thirds(in_flight), _thirds(v.ttft)
    if not (_rising(held) and _rising(ttft)) or (held[2] or 0.0) - (held[0] or 0.0) < SATURATION_BACKLOG_MIN:
        return None
    queue = v.gauge("queue_depth")
    queued_share = float((queue.values > 0).mean()) if queue is not None else 0.0
    if queued_share >= SATURATION_QUEUED_SHARE:
        return None  # a queue that did not make TTFT rise with it: not this picture
    evidence = [
        f"requests in flight at send (client) rose from {held[0]:.0f} (first third) to {held[1]:.0f} (middle) "
        f"to {held[2]:.0f} (last third): arrivals outpace completions",
        f"median TTFT rose from {ttft[0]:.0f} to {ttft[1]:.0f} to {ttft[2]:.0f} ms",
    ]
    running = v.gauge("running")
    if running is not None:
        evidence.append(f"running requests up to {running.values.max():.0f} ({running.name})")
    evidence.append(
        f"waiting queue > 0 in {queued_share:.0%} of scrapes ({queue.name}): the backlog is admitted, not queued"
        if queue is not None
        else "no server queue samples"
    )
    return _saturation_finding(
        v,
        "Saturation: the backlog grows inside the engine",
        "TTFT grows during the run (p99 {p99:.0f} ms) while ever more requests are in flight",
        "the offered load exceeds what the replica completes; every request is admitted, so instead of a waiting "
        "queue the running batch grows and each step (prefill chunks shared among more requests) takes longer",
        evidence,
        (
            "lower the offered load or add replicas until TTFT and the requests in flight stay flat over a run",
            _KNEE,
            "cap max_num_seqs near the knee's batch: admitted requests keep their step time, and the overload "
            "shows as a waiting queue that alerts and autoscaling can read",
            "autoscale or shed load on vllm:num_requests_running or the client's in-flight count (see "
            "`tailscope alerts`)",
        ),
    )


def prefill_bound(v: RunView) -> Finding | None:
    """TTFT tracks prompt length while nothing queues: prefill compute dominates TTFT."""
    inp = finite(v.input_tokens)
    if inp.size < 20:
        return None
    med_in = float(np.median(inp))
    ttft_med = pct(v.ttft, 50)
    r = corr(v.input_tokens, v.ttft)
    if r is None or r < PREFILL_CORR or med_in < PREFILL_MIN_INPUT_TOKENS or (ttft_med or 0) < PREFILL_MIN_TTFT_MS:
        return None
    queue = v.gauge("queue_depth")
    if queue is not None and float((queue.values > 0).mean()) >= SATURATION_QUEUED_SHARE:
        return None  # queueing, not prefill: the saturation rule speaks
    mask = np.isfinite(v.input_tokens) & np.isfinite(v.ttft)
    slope, intercept = np.polyfit(v.input_tokens[mask], v.ttft[mask], 1)
    conc = pct(v.in_flight_at(np.nan_to_num(v.sent_ms, nan=0.0)), 50) or 0.0
    return Finding(
        rule="prefill_bound",
        title="Prefill-bound TTFT: long prompts",
        symptom=f"TTFT is high (median {ttft_med:.0f} ms) and grows with prompt length, even at low load",
        evidence=(
            f"median prompt {med_in:.0f} tokens; TTFT vs prompt tokens r = {r:.2f}",
            f"TTFT ≈ {intercept:.0f} ms + {slope * 1000:.1f} ms per 1k prompt tokens",
            f"median client concurrency at send {conc:.0f}"
            + ("; server queue empty" if queue is not None else "; no server queue samples"),
        ),
        cause="prefill compute of long prompts dominates time to first token",
        actions=(
            "cache the shared part of prompts (enable prefix caching; put static system/RAG text first)",
            "trim the prompt: fewer retrieved chunks, shorter history, summarised context",
            "tune chunked prefill (max_num_batched_tokens) or use tensor parallelism / a faster GPU for prefill",
            "set TTFT SLOs per prompt-length class (class: long_context) instead of one global limit",
        ),
        impact=clip01(r * r),
    )


def prefix_cache_low(v: RunView) -> Finding | None:
    """Most requests share a prefix but the engine reports few prefix-cache hits."""
    if v.n < 10:
        return None
    shared = float(v.shared_prefix.mean())
    if shared < PREFIX_SHARED_SHARE:
        return None
    hit = v.prefix_hit_rate()
    if hit is None or hit >= PREFIX_LOW_HIT_RATE:
        return None
    return Finding(
        rule="prefix_cache_low",
        title="Shared prompts, low prefix-cache hit rate",
        symptom=f"{shared:.0%} of requests share a prompt prefix, yet only {hit:.0%} of prompt tokens hit the cache",
        evidence=(
            f"requests marked shared_prefix: {shared:.0%}",
            f"prefix cache hit rate over the run: {hit:.1%}",
            f"TTFT p50 {pct(v.ttft, 50) or 0:.0f} ms, p99 {pct(v.ttft, 99) or 0:.0f} ms",
        ),
        cause="the shared prompt is not byte-identical across requests (a timestamp, request id or user name early in "
        "the prompt), prefix caching is off, or requests of one prefix land on different replicas",
        actions=(
            "move dynamic content (dates, ids, user data) after the shared system prompt and tool definitions",
            "start the engine with prefix caching enabled (vLLM: --enable-prefix-caching)",
            "route by prefix or session (prefix-aware load balancing) so one replica keeps the prefix warm",
        ),
        impact=clip01(shared * (1.0 - hit) * 0.6),
    )


def kv_pressure(v: RunView) -> Finding | None:
    """KV cache near full, preemptions, and TPOT rising with concurrency."""
    kv = v.gauge("kv_usage")
    pre = v.counter("vllm:num_preemptions_total")
    preemptions = pre.delta if pre is not None else 0.0
    kv_p90 = float(np.percentile(kv.values, 90)) if kv is not None else None
    if preemptions <= 0 and (kv_p90 is None or kv_p90 < KV_HIGH_USAGE):
        return None
    mid = np.where(v.ok, (np.nan_to_num(v.sent_ms) + np.nan_to_num(v.end_ms)) / 2.0, np.nan)
    conc = v.in_flight_at(np.nan_to_num(mid, nan=0.0))
    r = corr(conc, v.tpot)
    evidence = []
    if kv is not None:
        evidence.append(f"KV cache usage p90 {kv_p90:.0%}, max {kv.values.max():.0%} ({kv.name})")
    if pre is not None:
        evidence.append(f"{preemptions:.0f} preemptions during the run")
    if r is not None:
        evidence.append(
            f"TPOT vs concurrency r = {r:.2f}; TPOT p50 {pct(v.tpot, 50) or 0:.1f} ms, "
            f"p99 {pct(v.tpot, 99) or 0:.1f} ms"
        )
    return Finding(
        rule="kv_pressure",
        title="KV-cache pressure",
        symptom="the KV cache runs full: requests are preempted and decode slows as concurrency grows",
        evidence=tuple(evidence),
        cause="more concurrent tokens than the KV cache holds; preempted requests are recomputed or swapped",
        actions=(
            "cap concurrency (max_num_seqs) at what the KV cache holds for your prompt + output lengths "
            "(`tailscope plan kv`)",
            "free memory for KV: raise gpu_memory_utilization, FP8 KV cache, shorter max_model_len",
            "add replicas or tensor parallelism; enable prefix caching to share KV blocks",
        ),
        impact=clip01(0.4 + (0.3 if preemptions > 0 else 0.0) + (0.2 * r if r and r > 0 else 0.0)),
    )


def prefill_windows(v: RunView, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the prefill windows (sent → first token) of the requests in ``mask``: disjoint, sorted."""
    firsts = np.asarray([np.nan if r.first_token_ns is None else r.first_token_ns / 1e6 for r in v.records])
    mask = mask & np.isfinite(v.sent_ms) & np.isfinite(firsts)
    if not mask.any():
        return np.empty(0), np.empty(0)
    starts, ends = v.sent_ms[mask], firsts[mask]
    order = np.argsort(starts)
    starts, ends = starts[order], ends[order]
    u_s, u_e = [float(starts[0])], [float(ends[0])]
    for s, e in zip(starts[1:], ends[1:], strict=True):
        if s <= u_e[-1]:
            u_e[-1] = max(u_e[-1], float(e))
        else:
            u_s.append(float(s))
            u_e.append(float(e))
    return np.asarray(u_s), np.asarray(u_e)


def gaps_in_prefill(v: RunView, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per decode gap: whether it overlaps the prefill of another request in ``mask``; and whether the gap's own
    request is in ``mask`` (those gaps are left out of the comparison)."""
    us, ue = prefill_windows(v, mask)
    own = mask[v.gap_req] if v.gap_req.size else np.zeros(0, dtype=bool)
    if us.size == 0:
        return np.zeros(v.gap_ms.size, dtype=bool), own
    idx = np.searchsorted(us, v.gap_end_ms, side="left") - 1
    overlaps = (idx >= 0) & (ue[np.clip(idx, 0, None)] > v.gap_start_ms) & ~own
    return overlaps, own


def any_prefill_overlap(v: RunView) -> np.ndarray:
    """Per decode gap: whether another request was being prefilled (sent → first token) during it.

    A window overlaps a gap when it starts before the gap ends and ends after it starts; a request's own window ends
    at its first token, before any of its gaps, so it never counts.
    """
    firsts = np.asarray([np.nan if r.first_token_ns is None else r.first_token_ns / 1e6 for r in v.records])
    ok = np.isfinite(v.sent_ms) & np.isfinite(firsts)
    if not ok.any() or v.gap_ms.size == 0:
        return np.zeros(v.gap_ms.size, dtype=bool)
    starts, ends = np.sort(v.sent_ms[ok]), np.sort(firsts[ok])
    started = np.searchsorted(starts, v.gap_end_ms, side="left")
    ended = np.searchsorted(ends, v.gap_start_ms, side="right")
    out: np.ndarray = (started - ended) > 0
    return out


def prefill_interference(v: RunView) -> Finding | None:
    """Decode gaps that overlap another request's prefill are much longer than the others.

    First with long prompts only (≥ :data:`LONG_PROMPT_FACTOR` × the median); when prompts are of one scale (the
    demo's ``uniform:100:900``), with every other request's prefill: a new prompt admitted into the running batch
    stalls every decode for its prefill step.
    """
    inp = finite(v.input_tokens)
    if inp.size < 10 or v.gap_ms.size < 2 * INTERFERENCE_MIN_GAPS:
        return None
    threshold = max(LONG_PROMPT_FACTOR * float(np.median(inp)), LONG_PROMPT_MIN_TOKENS)
    long_mask = (v.input_tokens >= threshold) & v.ok
    found = _interference(v, long_mask, threshold) if long_mask.any() else None
    return found or _interference(v, None, None)


def _interference(v: RunView, long_mask: np.ndarray | None, threshold: float | None) -> Finding | None:
    if long_mask is not None:
        overlaps, own = gaps_in_prefill(v, long_mask)
    else:
        overlaps, own = any_prefill_overlap(v), np.zeros(v.gap_ms.size, dtype=bool)
    hit, rest = v.gap_ms[overlaps], v.gap_ms[~overlaps & ~own]
    if hit.size < INTERFERENCE_MIN_GAPS or rest.size < INTERFERENCE_MIN_GAPS:
        return None
    hit_p95, rest_p95 = float(np.percentile(hit, 95)), float(np.percentile(rest, 95))
    ratio = hit_p95 / rest_p95 if rest_p95 > 0 else float("inf")
    if ratio < INTERFERENCE_RATIO:
        return None
    itl_med = float(np.median(v.gap_ms))
    stall_at = max(STALL_FACTOR * itl_med, STALL_MIN_MS)
    stalled = v.gap_ms >= stall_at
    evidence = []
    if long_mask is not None:
        evidence.append(
            f"{int(long_mask.sum())} long prompts (≥ {threshold:.0f} tokens) with prefill windows covering "
            f"{hit.size} of {v.gap_ms.size} decode gaps"
        )
    else:
        evidence.append(
            f"{hit.size} of {v.gap_ms.size} decode gaps ({hit.size / v.gap_ms.size:.1%}) overlap another request's "
            f"prefill (prompts p50 {pct(v.input_tokens, 50) or 0:.0f}, max {np.nanmax(v.input_tokens):.0f} tokens)"
        )
    evidence.append(f"ITL p95 during prefills {hit_p95:.1f} ms vs {rest_p95:.1f} ms otherwise")
    if stalled.any():
        evidence.append(
            f"{int((stalled & overlaps).sum())} of {int(stalled.sum())} pauses ≥ {stall_at:.0f} ms fall inside another "
            "request's prefill"
        )
    pre = v.counter("vllm:num_preemptions_total")
    if pre is not None:
        kv_note = "not KV pressure" if pre.delta == 0 else "also KV pressure"
        evidence.append(f"{pre.delta:.0f} preemptions: {kv_note}")
    return Finding(
        rule="prefill_interference",
        title="Prefill interference: "
        + ("long prompts stall running decodes" if long_mask is not None else "new prompts' prefills stall decodes"),
        symptom=f"inter-token gaps are ×{ratio:.1f} longer while "
        + ("a long prompt" if long_mask is not None else "another request's prompt")
        + " is being prefilled",
        evidence=tuple(evidence),
        cause="a prefill runs in the same batch step as ongoing decodes, so every running stream waits for it",
        actions=(
            "enable chunked prefill and lower max_num_batched_tokens so prefills are split across steps",
            "serve long-context requests on separate replicas, or disaggregate prefill and decode",
            "give TPOT/ITL SLOs per class so interactive traffic is protected from long-prompt traffic",
        ),
        impact=clip01(1.0 - 1.0 / ratio) * 0.8,
    )


def long_output_tail(v: RunView) -> Finding | None:
    """The E2E tail comes from long outputs, not slow decoding."""
    p50, p99 = pct(v.e2e, 50), pct(v.e2e, 99)
    if not p50 or p99 is None or p99 / p50 < TAIL_RATIO:
        return None
    r = corr(v.output_tokens, v.e2e)
    t50, t99 = pct(v.tpot, 50), pct(v.tpot, 99)
    if r is None or r < TAIL_OUTPUT_CORR or not t50 or t99 is None or t99 / t50 >= TAIL_STEADY_TPOT:
        return None
    out50, out99 = pct(v.output_tokens, 50) or 0, pct(v.output_tokens, 99) or 0
    return Finding(
        rule="long_output_tail",
        title="Long-output tail",
        symptom=f"E2E p99 is ×{p99 / p50:.1f} the median ({p99:.0f} vs {p50:.0f} ms), driven by output length",
        evidence=(
            f"E2E vs output tokens r = {r:.2f}; output tokens p50 {out50:.0f}, p99 {out99:.0f}",
            f"TPOT is steady: p50 {t50:.1f} ms, p99 {t99:.1f} ms",
        ),
        cause="a few requests generate many more tokens; decoding speed is fine",
        actions=(
            "judge interactive latency by TTFT and TPOT, not E2E; keep E2E SLOs per output-length class",
            "cap max_tokens where the product allows; stream so users see progress",
        ),
        impact=0.3,
    )


def stalls(v: RunView) -> Finding | None:
    """Streams pause far longer than the usual inter-token gap."""
    if v.gap_ms.size < 10:
        return None
    itl_med = float(np.median(v.gap_ms))
    threshold = max(STALL_FACTOR * itl_med, STALL_MIN_MS)
    stalled = np.isfinite(v.max_gap) & (v.max_gap >= threshold)
    count = int(stalled.sum())
    ok = int(v.ok.sum())
    if count < 2 or count < STALL_MIN_SHARE * ok:
        return None
    worst_i = int(np.nanargmax(np.where(stalled, v.max_gap, np.nan)))
    pre = v.counter("vllm:num_preemptions_total")
    evidence = [
        f"{count} of {ok} streams ({count / ok:.1%}) paused ≥ {threshold:.0f} ms (median ITL {itl_med:.1f} ms)",
        f"longest pause {v.max_gap[worst_i]:.0f} ms in request {v.records[worst_i].id} "
        f"at t = {v.sched_ms[worst_i] / 1000:.1f} s",
    ]
    if pre is not None:
        evidence.append(f"{pre.delta:.0f} preemptions during the run")
    stall_gaps = v.gap_ms >= threshold
    in_prefill = any_prefill_overlap(v)[stall_gaps]
    prefill_share = float(in_prefill.mean()) if in_prefill.size else 0.0
    cause = (
        "preemption and recompute under KV pressure, engine pauses (GC, compilation, scheduling), or a proxy "
        "buffering the SSE stream"
    )
    if in_prefill.size:
        evidence.append(
            f"{int(in_prefill.sum())} of {in_prefill.size} pauses ({prefill_share:.0%}) fall inside another "
            "request's prefill"
        )
    explained_by = None
    actions: tuple[str, ...] = (
        "check preemptions and KV usage at the stall times (`tailscope report`); see the KV-pressure actions",
        "disable response buffering on proxies in the path (nginx: proxy_buffering off)",
        "look for host-level pauses: CPU throttling, swap, Python GC in the server",
    )
    if prefill_share >= STALL_PREFILL_SHARE and (pre is None or pre.delta == 0):
        cause = (
            "other requests' prefills: the pauses coincide with prompts being admitted into the running batch "
            "(see prefill interference), not preemption, GC or a proxy"
        )
        actions = (
            "split prefills across steps: chunked prefill with a lower max_num_batched_tokens",
            "serve long prompts apart (their own replicas, or prefill/decode disaggregation)",
        )
        explained_by = "prefill_interference"
    return Finding(
        rule="stalls",
        title="Stream stalls",
        symptom=f"some streams stop for {v.max_gap[worst_i]:.0f} ms mid-answer although tokens usually arrive every "
        f"{itl_med:.1f} ms",
        evidence=tuple(evidence),
        cause=cause,
        actions=actions,
        impact=clip01(0.3 + count / ok),
        explained_by=explained_by,
    )
