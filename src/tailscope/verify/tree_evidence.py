"""What the troubleshooting trees read off a run: the thresholds and evidence helpers the trees share (queueing, KV
pressure, stream pauses, buffered or unstreamed answers, GPU figures, a model's size from its name)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from tailscope.verify.findings import RunView, finite
from tailscope.verify.rules_engine import STALL_FACTOR, STALL_MIN_MS
from tailscope.verify.tree_model import TreeInput

#: thresholds more than one tree reads
BURST_SPAN_SHARE = 0.05  # a buffered stream: all tokens within 5 % of the request's time, after a long wait
GPU_LOW_PCT = 50.0

#: a GPU branch's evidence when the run has no GPU figures
NO_GPU_TELEMETRY = "no GPU telemetry (give --telemetry-url)"

QUANTISED = re.compile(r"(awq|gptq|int4|int8|fp8|w4a16|w8a8|4bit|8bit|gguf|q4_|q8_|nf4|bnb)", re.IGNORECASE)
_PARAMS = re.compile(r"(\d+(?:\.\d+)?)\s*[bB](?![a-zA-Z])")


def model_params_b(model: str | None) -> float | None:
    """Parameters in billions read from a model name (``llama-3.1-70b`` → 70), ``None`` when it does not say."""
    if not model:
        return None
    found = _PARAMS.findall(model.split("/")[-1])
    return float(found[-1]) if found else None


def figure(x: float | None, unit: str = "ms", digits: int = 0) -> str:
    return "n/a" if x is None else f"{x:.{digits}f} {unit}".strip()


def queued_share(v: RunView) -> tuple[float, float] | None:
    q = v.gauge("queue_depth")
    if q is None:
        return None
    return float((q.values > 0).mean()), float(q.values.max())


def kv_pressure(v: RunView) -> tuple[float | None, float]:
    kv = v.gauge("kv_usage")
    pre = v.counter("vllm:num_preemptions_total")
    return (float(np.percentile(kv.values, 90)) if kv is not None else None), (pre.delta if pre is not None else 0.0)


def stall_gaps(v: RunView) -> tuple[np.ndarray, float]:
    if v.gap_ms.size == 0:
        return np.zeros(0, dtype=bool), STALL_MIN_MS
    threshold = max(STALL_FACTOR * float(np.median(v.gap_ms)), STALL_MIN_MS)
    return v.gap_ms >= threshold, threshold


def burst_share(v: RunView) -> tuple[float, int]:
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


def single_chunk_share(v: RunView) -> tuple[float, int]:
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


def kv_evidence(kv_p90: float | None, preemptions: float) -> str:
    """What :func:`kv_pressure` found, in a branch's words."""
    return "no KV usage scraped" if kv_p90 is None else f"KV usage p90 {kv_p90:.0%}, {preemptions:.0f} preemptions"


def gpu_util(t: TreeInput) -> float | None:
    u = t.gpu.get("util_pct")
    return float(u["mean"]) if isinstance(u, Mapping) else None


def util_evidence(util: float | None) -> str:
    """What :func:`gpu_util` found (a percentage), in a branch's words."""
    return NO_GPU_TELEMETRY if util is None else f"GPU utilisation mean {util:.0f} %"


def memory_fraction(t: TreeInput) -> float | None:
    m = t.gpu.get("memory_used_frac")
    return float(m["max"]) if isinstance(m, Mapping) else None


def tokens_per_request(v: RunView) -> float | None:
    tot = v.input_tokens + np.nan_to_num(v.output_tokens, nan=0.0)
    f = finite(tot)
    return float(f.mean()) if f.size else None


def tool_share(trace: Mapping[str, Any] | None) -> float | None:
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


def synchronous_pauses(v: RunView, mask: np.ndarray) -> int:
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


def finished_rps(v: RunView) -> float:
    end = finite(v.end_ms)
    span = (end.max() - v.sched_ms.min()) / 1000.0 if end.size and v.n else 0.0
    return float(v.ok.sum()) / span if span > 0 else 0.0
