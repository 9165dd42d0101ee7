"""The method's troubleshooting tables as decision trees: symptom → the checks in the method's order → each check's
verdict from what tailscope saw in the run (records, server metrics, GPU telemetry, a trace analysis, a baseline).

Sources: ``shared/method/001`` §5.1 (the table: slow first token, slow generation, stuttering, OOM under
concurrency, P50 fine / P99 broken, smaller model slower) and ``004`` §9 (the decision tree: TTFT high, TPOT high,
P99 ≫ P50, throughput ceiling, cost spike). A branch's verdict is ``yes`` (the evidence points here), ``no`` (the
evidence rules it out) or ``unknown`` (this run holds no evidence for it — the branch says what would).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailscope.metrics.gpu import summarize_gpu
from tailscope.records import ErrorClass, Status
from tailscope.verify.findings import RunView, corr, finite, pct, series
from tailscope.verify.rules_engine import (
    KV_HIGH_USAGE,
    SATURATION_QUEUED_SHARE,
    STALL_FACTOR,
    STALL_MIN_MS,
    any_prefill_overlap,
)

YES, NO, UNKNOWN = "yes", "no", "unknown"

#: symptom thresholds (the method's numbers where it gives one)
TTFT_HIGH_MS = 2000.0  # 003/perceived: a first token after 2 s feels broken
TTFT_HIGH_SHARE = 0.05  # … for at least this share of requests (the p95)
TPOT_READING_MS = 33.0  # 001: slower than ~30 tokens/s is slower than reading
TAIL_RATIO = 3.0  # P99 ≫ P50: p99 at least this many times p50 (E2E or TTFT)
STUTTER_SHARE = 0.01  # share of streams with a pause ≥ max(10 × median ITL, 100 ms)
BURST_SPAN_SHARE = 0.05  # a buffered stream: all tokens within 5 % of the request's time, after a long wait
GPU_SATURATED_PCT = 90.0
GPU_LOW_PCT = 50.0
MEMORY_FULL_FRAC = 0.95
CPU_SATURATED_PCT = 90.0
TAIL_FEATURE_FACTOR = 1.5  # tail requests' mean prompt/output this many times the others'
TAIL_MIN_REQUESTS = 10  # the tail is the slowest 1 %, but at least this many requests (at most 10 %)
COST_SPIKE_FACTOR = 1.3  # tokens per request ×1.3 against the baseline
HEAVY_SESSION_SHARE = 0.2  # one session or class holding this share of all tokens
LARGE_MODEL_B = 30.0  # parameters (billions) that count as a large model for short, simple outputs
SHORT_OUTPUT_TOKENS = 200

_QUANT = re.compile(r"(awq|gptq|int4|int8|fp8|w4a16|w8a8|4bit|8bit|gguf|q4_|q8_|nf4|bnb)", re.IGNORECASE)
_OOM = re.compile(r"out of memory|\boom\b|cuda error", re.IGNORECASE)
_SERVER_ERRORS = (ErrorClass.HTTP_5XX, ErrorClass.STREAM_BROKEN, ErrorClass.SERVER_ERROR_EVENT)
_PARAMS = re.compile(r"(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")


@dataclass(frozen=True, slots=True)
class Branch:
    """One check of a tree.

    Attributes:
        check: what the method says to check.
        verdict: ``yes`` (the evidence points here), ``no`` (ruled out) or ``unknown`` (no evidence in this run).
        evidence: the numbers behind the verdict, or what would give one.
        remedy: the method's fix for this branch.
    """

    check: str
    verdict: str
    evidence: str
    remedy: str

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "verdict": self.verdict, "evidence": self.evidence, "remedy": self.remedy}


@dataclass(frozen=True, slots=True)
class Tree:
    """One symptom's decision tree, walked on a run.

    Attributes:
        symptom: the tree's id (``ttft_high``, ``tpot_high``, ``stutter``, ``oom``, ``tail``, ``throughput_ceiling``,
            ``smaller_model_slower``, ``cost_spike``).
        title: the symptom in the method's words.
        present: whether the run shows the symptom (``None``: cannot tell, e.g. no baseline to compare with).
        evidence: the numbers behind ``present``.
        branches: the checks in the method's order.
        source: where in the method the tree comes from.
    """

    symptom: str
    title: str
    present: bool | None
    evidence: str
    branches: tuple[Branch, ...]
    source: str

    @property
    def causes(self) -> tuple[Branch, ...]:
        """The branches the evidence points at."""
        return tuple(b for b in self.branches if b.verdict == YES)

    def to_dict(self) -> dict[str, Any]:
        return {
            "symptom": self.symptom,
            "title": self.title,
            "present": self.present,
            "evidence": self.evidence,
            "source": self.source,
            "branches": [b.to_dict() for b in self.branches],
        }


@dataclass(frozen=True, slots=True)
class TreeInput:
    """What the trees read besides the run's view: GPU figures, model names, a baseline run's view."""

    view: RunView
    gpu: Mapping[str, Any]
    model: str | None = None
    baseline: RunView | None = None
    baseline_model: str | None = None
    summary: Mapping[str, Any] | None = None


def model_params_b(model: str | None) -> float | None:
    """Parameters in billions read from a model name (``llama-3.1-70b`` → 70), ``None`` when it does not say."""
    if not model:
        return None
    found = _PARAMS.findall(model.split("/")[-1])
    return float(found[-1]) if found else None


def _f(x: float | None, unit: str = "ms", digits: int = 0) -> str:
    return "n/a" if x is None else f"{x:.{digits}f} {unit}".strip()


def _queued_share(v: RunView) -> tuple[float, float] | None:
    q = v.gauge("queue_depth")
    if q is None:
        return None
    return float((q.values > 0).mean()), float(q.values.max())


def _kv(v: RunView) -> tuple[float | None, float]:
    kv = v.gauge("kv_usage")
    pre = v.counter("vllm:num_preemptions_total")
    return (float(np.percentile(kv.values, 90)) if kv is not None else None), (pre.delta if pre is not None else 0.0)


def _stall_gaps(v: RunView) -> tuple[np.ndarray, float]:
    if v.gap_ms.size == 0:
        return np.zeros(0, dtype=bool), STALL_MIN_MS
    threshold = max(STALL_FACTOR * float(np.median(v.gap_ms)), STALL_MIN_MS)
    return v.gap_ms >= threshold, threshold


def _burst_share(v: RunView) -> tuple[float, int]:
    """Share of multi-token answers whose tokens all arrived in one burst at the end (a buffered stream)."""
    n = burst = 0
    for r, ok in zip(v.records, v.ok, strict=True):
        if not ok or r.first_token_ns is None or r.end_ns is None or sum(r.chunk_tokens or (0,)) < 8:
            continue
        n += 1
        total = r.end_ns - r.scheduled_ns
        span = r.end_ns - r.first_token_ns
        if total > 0 and span <= BURST_SPAN_SHARE * total:
            burst += 1
    return (burst / n if n else 0.0), n


def _single_chunk_share(v: RunView) -> tuple[float, int]:
    """Share of multi-token answers delivered as one event (no streaming)."""
    n = single = 0
    for r, ok in zip(v.records, v.ok, strict=True):
        tokens = sum(r.chunk_tokens) if r.chunk_tokens else (r.output_tokens or 0)
        if not ok or tokens < 2:
            continue
        n += 1
        if len(r.chunk_times_ns) <= 1:
            single += 1
    return (single / n if n else 0.0), n


def _gpu_util(t: TreeInput) -> float | None:
    u = t.gpu.get("util_pct")
    return float(u["mean"]) if isinstance(u, Mapping) else None


def _mem_frac(t: TreeInput) -> float | None:
    m = t.gpu.get("memory_used_frac")
    return float(m["max"]) if isinstance(m, Mapping) else None


def _tokens_per_request(v: RunView) -> float | None:
    tot = v.input_tokens + np.nan_to_num(v.output_tokens, nan=0.0)
    f = finite(tot)
    return float(f.mean()) if f.size else None


# --- the trees ---------------------------------------------------------------------------------------------------


def ttft_tree(t: TreeInput) -> Tree:
    v = t.view
    p95, p50 = pct(v.ttft, 95), pct(v.ttft, 50)
    over = float((finite(v.ttft) > TTFT_HIGH_MS).mean()) if finite(v.ttft).size else 0.0
    present = over >= TTFT_HIGH_SHARE
    single, n = _single_chunk_share(v)
    burst, nb = _burst_share(v)
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
    qs = _queued_share(v)
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
        f"TTFT p50 {_f(p50)}, p95 {_f(p95)}; {over:.1%} of requests over {TTFT_HIGH_MS:.0f} ms",
        tuple(branches),
        "004 §9 TTFT; 001 §5.1 slow first token",
    )


def tpot_tree(t: TreeInput) -> Tree:
    v = t.view
    p50, p90 = pct(v.tpot, 50), pct(v.tpot, 90)
    present = p90 is not None and p90 > TPOT_READING_MS
    quant = bool(t.model and _QUANT.search(t.model))
    util = _gpu_util(t)
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
            (f"GPU utilisation mean {util:.0f} %" if util is not None else "no GPU telemetry (give --telemetry-url)")
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
        f"TPOT p50 {_f(p50, digits=1)}, p90 {_f(p90, digits=1)} (reading speed ≈ {TPOT_READING_MS:.0f} ms/token)",
        tuple(branches),
        "004 §9 TPOT; 001 §5.1 slow generation",
    )


def stutter_tree(t: TreeInput) -> Tree:
    v = t.view
    stalled, threshold = _stall_gaps(v)
    streams = {int(r) for r in v.gap_req[stalled]} if stalled.any() else set()
    ok = int(v.ok.sum())
    present = ok > 0 and len(streams) >= max(2, STUTTER_SHARE * ok)
    in_prefill = any_prefill_overlap(v)[stalled] if stalled.any() else np.zeros(0, dtype=bool)
    share = float(in_prefill.mean()) if in_prefill.size else 0.0
    _, pre = _kv(v)
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
        f"{len(streams)} of {ok} streams paused ≥ {threshold:.0f} ms (ITL p50 {_f(pct(v.gap_ms, 50), digits=1)}, "
        f"p99 {_f(pct(v.gap_ms, 99), digits=1)})",
        tuple(branches),
        "001 §5.1 stuttering output",
    )


def oom_tree(t: TreeInput) -> Tree:
    v = t.view
    failed = [r for r in v.records if r.status is Status.ERROR]
    oom = [r for r in failed if r.error_detail and _OOM.search(r.error_detail)]
    server = [r for r in failed if r.error in _SERVER_ERRORS]
    kv_p90, pre = _kv(v)
    mem = _mem_frac(t)
    present = bool(oom) or (bool(server) and ((mem or 0) >= MEMORY_FULL_FRAC or (kv_p90 or 0) >= KV_HIGH_USAGE))
    conc = v.settings.get("concurrency")
    branches = [
        Branch(
            "Is the KV cache over budget (usage near full, preemptions)?",
            UNKNOWN if kv_p90 is None else YES if kv_p90 >= KV_HIGH_USAGE or pre > 0 else NO,
            "no KV usage scraped" if kv_p90 is None else f"KV usage p90 {kv_p90:.0%}, {pre:.0f} preemptions",
            "lower the concurrency cap (max_num_seqs) to what KV holds; paged KV; shorter max_model_len",
        ),
        Branch(
            "Is GPU memory full (memory curve)?",
            UNKNOWN if mem is None else YES if mem >= MEMORY_FULL_FRAC else NO,
            "no GPU telemetry (give --telemetry-url)" if mem is None else f"fullest GPU at {mem:.0%} of its memory",
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
    tool = _tool_share(v.trace)
    branches.append(
        Branch(
            "Do external tools time out?",
            YES if (tool is not None and tool >= 0.3) or timeouts else NO if v.trace is not None else UNKNOWN,
            (f"tool spans hold {tool:.0%} of the critical path" if tool is not None else "no trace analysis (--traces)")
            + f"; {timeouts} request timeouts",
            "a 3 s timeout and a circuit breaker on tool calls, degrade on timeout; call independent tools in parallel",
        )
    )
    stalled, _ = _stall_gaps(v)
    in_prefill = any_prefill_overlap(v)[stalled] if stalled.any() else np.zeros(0, dtype=bool)
    _, pre = _kv(v)
    unexplained = int((~in_prefill).sum()) if in_prefill.size else 0
    sync = _synchronous_pauses(v, stalled & ~any_prefill_overlap(v))
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
        f"E2E p99/p50 ×{ratio_e or 0:.1f} ({_f(e99)} vs {_f(e50)}); TTFT p99/p50 ×{ratio_t or 0:.1f}",
        tuple(branches),
        "004 §9 P99 ≫ P50; 001 §5.1 P50 fine, P99 broken",
    )


def _tool_share(trace: Mapping[str, Any] | None) -> float | None:
    """The agent/tool layers' share of the slow traces' critical path (a ``trace analyze`` dict)."""
    if not trace:
        return None
    comp = ((trace.get("layers") or {}).get("tail_bucket") or {}).get("composition") or {}
    if not isinstance(comp, Mapping) or not comp:
        return None
    return sum(
        float(row.get("share", 0.0))
        for name, row in comp.items()
        if isinstance(row, Mapping) and ("tool" in str(name) or "agent" in str(name))
    )


def _synchronous_pauses(v: RunView, mask: np.ndarray) -> int:
    """Pauses that overlap a pause of another stream (a server-wide stop, like a GC pause)."""
    idx = np.flatnonzero(mask)
    if idx.size < 2:
        return 0
    s, e, req = v.gap_start_ms[idx], v.gap_end_ms[idx], v.gap_req[idx]
    count = 0
    for i in range(idx.size):
        others = (req != req[i]) & (s < e[i]) & (e > s[i])
        count += int(others.any())
    return count


def throughput_tree(t: TreeInput) -> Tree:
    v = t.view
    qs = _queued_share(v)
    present = qs is not None and qs[0] >= SATURATION_QUEUED_SHARE and qs[1] >= 1
    util = _gpu_util(t)
    mem = _mem_frac(t)
    kv_p90, pre = _kv(v)
    cpu = t.gpu.get("cpu_busy_pct")
    lag = pct(v.send_lag, 99)
    branches = [
        Branch(
            "Is the GPU saturated?",
            UNKNOWN if util is None else YES if util >= GPU_SATURATED_PCT else NO,
            "no GPU telemetry (give --telemetry-url)" if util is None else f"GPU utilisation mean {util:.0f} %",
            "add GPUs / replicas (`tailscope plan capacity`)",
        ),
        Branch(
            "GPU not busy but requests queue: is the KV cache too small?",
            UNKNOWN
            if kv_p90 is None
            else YES
            if (kv_p90 >= KV_HIGH_USAGE or pre > 0) and (util is None or util < GPU_SATURATED_PCT)
            else NO,
            "no KV usage scraped" if kv_p90 is None else f"KV usage p90 {kv_p90:.0%}, {pre:.0f} preemptions",
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
        else f"queue > 0 in {qs[0]:.0%} of scrapes (max {qs[1]:.0f}); {_rps(v):.2f} requests/s finished",
        tuple(branches),
        "004 §9 throughput ceiling; 001 §5.2 memory not full but throughput low",
    )


def _rps(v: RunView) -> float:
    end = finite(v.end_ms)
    span = (end.max() - v.sched_ms.min()) / 1000.0 if end.size and v.n else 0.0
    return float(v.ok.sum()) / span if span > 0 else 0.0


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
    quant = bool(t.model and _QUANT.search(t.model))
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
        f"{t.model} ({mine:g}B) E2E p50 {_f(e_me)} vs {t.baseline_model} ({theirs:g}B) {_f(e_b)}",
        tuple(branches),
        "001 §5.1 smaller model slower; §5.2",
    )


def cost_tree(t: TreeInput) -> Tree:
    v, b = t.view, t.baseline
    tpr = _tokens_per_request(v)
    tpr_b = _tokens_per_request(b) if b is not None else None
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


#: every tree, in the order the method lists the symptoms
TREES: dict[str, Callable[[TreeInput], Tree]] = {
    "ttft_high": ttft_tree,
    "tpot_high": tpot_tree,
    "stutter": stutter_tree,
    "oom": oom_tree,
    "tail": tail_tree,
    "throughput_ceiling": throughput_tree,
    "smaller_model_slower": smaller_model_tree,
    "cost_spike": cost_tree,
}


def walk_trees(
    view: RunView,
    *,
    gpu: Mapping[str, Any] | None = None,
    model: str | None = None,
    baseline: RunView | None = None,
    baseline_model: str | None = None,
    summary: Mapping[str, Any] | None = None,
) -> tuple[Tree, ...]:
    """Every tree walked on a run (``gpu``: ``summary.gpu``, computed from the view's samples when not given)."""
    if gpu is None:
        out_tokens = int(np.nansum(view.output_tokens)) if view.n else 0
        gpu = summarize_gpu(view.samples, output_tokens=out_tokens or None)
    inp = TreeInput(view, gpu, model=model, baseline=baseline, baseline_model=baseline_model, summary=summary)
    return tuple(tree(inp) for tree in TREES.values())
