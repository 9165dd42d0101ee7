"""Server-side telemetry: which scraped metric means what, per engine, and summaries of the scraped series (pure).

Names known: vLLM (``vllm:*``), SGLang (``sglang:*``), Hugging Face TGI (``tgi_*``) and llama.cpp's server
(``llamacpp:*``, behind its ``--metrics`` flag). docs/servers.md has the table of what each server exposes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tailscope.records import ServerSample

#: semantic gauge → metric names that carry it, per engine.
GAUGES: dict[str, tuple[str, ...]] = {
    "queue_depth": (
        "vllm:num_requests_waiting",
        "sglang:num_queue_reqs",
        "tgi_queue_size",
        "llamacpp:requests_deferred",
    ),
    "running": (
        "vllm:num_requests_running",
        "sglang:num_running_reqs",
        "tgi_batch_current_size",
        "llamacpp:requests_processing",
    ),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
}
#: prefix cache counters (queries, hits) in tokens.
PREFIX_COUNTERS: tuple[tuple[str, str], ...] = (
    ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
    ("vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"),
)
PREFIX_RATE_GAUGES = ("sglang:cache_hit_rate", "vllm:gpu_prefix_cache_hit_rate")
COUNTERS = (
    "vllm:request_success_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)

#: every metric name worth storing (histogram buckets are not stored; their _sum/_count are).
KNOWN_PREFIXES = ("vllm:", "sglang:", "tgi_", "llamacpp:")


def keep_sample(name: str) -> bool:
    """Whether a scraped metric is stored with the run."""
    return name.startswith(KNOWN_PREFIXES) and not name.endswith("_bucket") and not name.endswith("_created")


def _series(samples: Sequence[ServerSample], name: str) -> list[tuple[int, float]]:
    """One metric's values over time, summed over label sets at each scrape time."""
    acc: dict[int, float] = {}
    for s in samples:
        if s.name == name:
            acc[s.t_ns] = acc.get(s.t_ns, 0.0) + s.value
    return sorted(acc.items())


def summarize_server(samples: Sequence[ServerSample]) -> dict[str, Any]:
    """Mean and max of queue depth, running requests and KV usage; prefix-cache hit rate over the run; counter
    deltas. Keys are absent when the server did not expose the metric."""
    out: dict[str, Any] = {}
    for key, names in GAUGES.items():
        for name in names:
            series = _series(samples, name)
            if series:
                vals = [v for _, v in series]
                out[key] = {"mean": sum(vals) / len(vals), "max": max(vals), "metric": name, "samples": len(vals)}
                break
    for q_name, h_name in PREFIX_COUNTERS:
        q, h = _series(samples, q_name), _series(samples, h_name)
        if len(q) >= 2 and len(h) >= 2:
            dq, dh = q[-1][1] - q[0][1], h[-1][1] - h[0][1]
            out["prefix_cache_hit_rate"] = dh / dq if dq > 0 else None
            break
    else:
        for name in PREFIX_RATE_GAUGES:
            series = _series(samples, name)
            if series:
                out["prefix_cache_hit_rate"] = sum(v for _, v in series) / len(series)
                break
    accepted = _series(samples, "vllm:spec_decode_num_accepted_tokens_total")
    drafted = _series(samples, "vllm:spec_decode_num_draft_tokens_total")
    if len(accepted) >= 2 and len(drafted) >= 2:
        d_acc, d_draft = accepted[-1][1] - accepted[0][1], drafted[-1][1] - drafted[0][1]
        out["spec_decode"] = {
            "accepted_tokens": d_acc,
            "draft_tokens": d_draft,
            "acceptance_rate": d_acc / d_draft if d_draft > 0 else None,
        }
    deltas = {}
    for name in COUNTERS:
        series = _series(samples, name)
        if len(series) >= 2:
            deltas[name] = series[-1][1] - series[0][1]
    if deltas:
        out["counter_deltas"] = deltas
    return out
