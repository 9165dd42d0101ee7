"""Cross-tool metric dialects: the same records summarized the way another benchmark tool defines its metrics.

Tools disagree on what TTFT, TPOT, ITL and E2E mean (first event vs first content, per chunk vs per request, TPOT
with or without the first token, E2E ending at the last token or at stream close, measured from the send rather than
the intended send). ``summarize_dialect(records, "vllm")`` recomputes a run's numbers exactly as ``vllm bench serve``
does, so a run measured once compares with numbers from any of these tools. Sources and the definitions, metric by
metric, are in ``docs/metrics.md`` § Dialects.

Every dialect returns the same shape::

    {"dialect", "source", "requests": {completed, failed}, "duration_s", "request_throughput",
     "output_throughput", "total_token_throughput", "metrics": {"ttft_ms": {...}, "tpot_ms": {...},
     "itl_ms": {...}, "e2e_ms": {...}, ...}, "names": {our key: the tool's name}, "notes": [...]}

with each metric as ``{mean, median, std, p90, p95, p99, min, max, count}`` computed with the tool's own percentile
rule (``None`` everywhere when there are no samples). Warmup records are left out (the tools do not record theirs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailscope.metrics import request as rq
from tailscope.metrics.summary import summarize
from tailscope.records import RequestRecord, TokensSource

DIALECTS = ("tailscope", "vllm", "sglang", "aiperf", "guidellm")
_MS = 1e6
_QS = (("p90", 0.90), ("p95", 0.95), ("p99", 0.99))

SOURCES = {
    "tailscope": "docs/metrics.md (this project's contract)",
    "vllm": "vllm-project/vllm vllm/benchmarks/serve.py (calculate_metrics) and "
    "vllm/benchmarks/lib/endpoint_request_func.py (async_request_openai_chat_completions)",
    "sglang": "sgl-project/sglang python/sglang/bench_serving.py (async_request_openai_chat_completions, "
    "calculate_metrics)",
    "aiperf": "ai-dynamo/aiperf docs/metrics_reference.md and src/aiperf/metrics/types/"
    "{ttft_metric,request_latency_metric,inter_token_latency_metric}.py",
    "guidellm": "vllm-project/guidellm src/guidellm/schemas/request_stats.py (GenerativeRequestStats) and "
    "src/guidellm/utils/statistics.py (DistributionSummary)",
}


def _linear(values: Sequence[float]) -> dict[str, float | int | None]:
    """numpy's default (linear, Hyndman–Fan type 7) percentiles; population std — vLLM, SGLang, AIPerf."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return _empty()
    out: dict[str, float | int | None] = {
        "mean": float(arr.mean()),
        "median": float(np.median(arr)),
        "std": float(arr.std()),
    }
    for name, q in _QS:
        out[name] = float(np.percentile(arr, q * 100))
    out |= {"min": float(arr.min()), "max": float(arr.max()), "count": int(arr.size)}
    return out


def _inverted_cdf(values: Sequence[float]) -> dict[str, float | int | None]:
    """GuideLLM's DistributionSummary: the smallest value whose cumulative share is ≥ q (no interpolation),
    median by the same rule, population std."""
    arr = np.sort(np.asarray(values, dtype=np.float64))
    if arr.size == 0:
        return _empty()
    # as GuideLLM builds it: equal probabilities 1/n summed in floating point (ten 0.05s add up to just under 0.5,
    # so with 20 values its median is the 11th) — exact fractions would pick the 10th, one sample off GuideLLM's own
    cdf = np.cumsum(np.full(arr.size, 1.0) / arr.size)

    def at(q: float) -> float:
        return float(arr[int(np.argmax(cdf >= q))])

    out: dict[str, float | int | None] = {"mean": float(arr.mean()), "median": at(0.5), "std": float(arr.std())}
    for name, q in _QS:
        out[name] = at(q)
    out |= {"min": float(arr[0]), "max": float(arr[-1]), "count": int(arr.size)}
    return out


def _empty() -> dict[str, float | int | None]:
    return {"mean": None, "median": None, "std": None, "p90": None, "p95": None, "p99": None, "min": None,
            "max": None, "count": 0}  # fmt: skip


def _usage_tokens(r: RequestRecord) -> int | None:
    """Output tokens as a server's usage (or the engine) reported them, else None."""
    if r.output_tokens is not None and r.tokens_source in (TokensSource.USAGE, TokensSource.ENGINE):
        return r.output_tokens
    return None


def _ms(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None else (a - b) / _MS


def _choice_events(r: RequestRecord) -> list[int]:
    """Arrival times of SSE events that carry a choice (vLLM's view): the first event (a role-only delta counts)
    and every token-bearing event."""
    times = list(r.chunk_times_ns)
    if r.first_event_ns is not None and (not times or r.first_event_ns < times[0]):
        times.insert(0, r.first_event_ns)
    return times


def _frame(
    dialect: str,
    ok: Sequence[RequestRecord],
    failed: int,
    duration_s: float,
    out_tokens: Callable[[RequestRecord], int],
    metrics: dict[str, list[float]],
    stats: Callable[[Sequence[float]], dict[str, float | int | None]],
    names: dict[str, str],
    notes: list[str],
) -> dict[str, Any]:
    total_out = sum(out_tokens(r) for r in ok)
    total_in = sum(r.input_tokens or 0 for r in ok)

    def per_s(x: float) -> float | None:
        return x / duration_s if duration_s > 0 else None

    return {
        "dialect": dialect,
        "source": SOURCES[dialect],
        "requests": {"completed": len(ok), "failed": failed},
        "duration_s": duration_s,
        "request_throughput": per_s(len(ok)),
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_out + total_in),
        "metrics": {k: stats(v) for k, v in metrics.items()},
        "names": names,
        "notes": notes,
    }


@dataclass(slots=True)
class _Samples:
    """The four latency samples (ms) the vLLM, SGLang and GuideLLM dialects report, each by its tool's rule."""

    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)

    def metrics(self) -> dict[str, list[float]]:
        return {"ttft_ms": self.ttft, "tpot_ms": self.tpot, "itl_ms": self.itl, "e2e_ms": self.e2e}


def _split(records: Iterable[RequestRecord]) -> tuple[list[RequestRecord], list[RequestRecord], int]:
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok and r.first_token_ns is not None and r.sent_ns is not None]
    return measured, ok, len(measured) - len(ok)


def _vllm(records: Iterable[RequestRecord]) -> dict[str, Any]:
    measured, ok, failed = _split(records)
    s = _Samples()
    for r in ok:
        ev = _choice_events(r) or [r.first_token_ns or 0]
        t1 = (ev[0] - r.sent_ns) / _MS  # type: ignore[operator]
        lat = (ev[-1] - r.sent_ns) / _MS  # type: ignore[operator]
        s.ttft.append(t1)
        s.e2e.append(lat)
        s.itl.extend((ev[i] - ev[i - 1]) / _MS for i in range(1, len(ev)))
        n = _usage_tokens(r) or rq.output_token_count(r)
        if n > 1:
            s.tpot.append((lat - t1) / (n - 1))
    return _frame(
        "vllm",
        ok,
        failed,
        _bench_duration_s(measured),
        lambda r: _usage_tokens(r) or rq.output_token_count(r),
        s.metrics(),
        _linear,
        {"ttft_ms": "TTFT", "tpot_ms": "TPOT (excl. 1st token)", "itl_ms": "ITL", "e2e_ms": "E2EL"},
        [
            "Times start when the request was sent (not when it was scheduled), so client lag is not included.",
            "First token = first SSE event with a choice (a role-only delta counts); ITL = every gap between such "
            "events, per chunk, pooled over requests; E2EL ends at the last such event.",
            "A trailing finish-reason chunk with empty content is not in the records; E2EL here ends at the last "
            "token-bearing event (the same time unless the server sends that chunk separately).",
            "Duration = first scheduled request → last stream close (vLLM times the whole gather).",
        ],
    )


def _sglang(records: Iterable[RequestRecord]) -> dict[str, Any]:
    measured, ok, failed = _split(records)
    s = _Samples()

    def n_out(r: RequestRecord) -> int:
        # bench_serving keeps the requested output length unless usage reports completion_tokens
        return _usage_tokens(r) or r.requested_output_tokens or rq.output_token_count(r)

    for r in ok:
        t1 = (r.first_token_ns - r.sent_ns) / _MS  # type: ignore[operator]
        lat = (r.closed_ns - r.sent_ns) / _MS  # type: ignore[operator]
        s.ttft.append(t1)
        s.e2e.append(lat)
        s.itl.extend(rq.icl_samples_ms(r))
        n = n_out(r)
        if n > 1:
            s.tpot.append((lat - t1) / (n - 1))
    out = _frame(
        "sglang",
        ok,
        failed,
        _bench_duration_s(measured),
        n_out,
        s.metrics(),
        _linear,
        {"ttft_ms": "TTFT", "tpot_ms": "TPOT (excl. 1st token)", "itl_ms": "ITL", "e2e_ms": "E2E Latency"},
        [
            "Times start at the send. First token = first chunk with non-empty delta content; ITL = gaps between "
            "content chunks (per chunk); E2E ends when the last line of the stream ([DONE]) was read.",
            "TPOT uses the requested max_tokens as N unless the server reported usage.",
        ],
    )
    dur = out["duration_s"]
    out["concurrency"] = (sum(s.e2e) / 1000.0 / dur) if dur else None
    return out


def _aiperf(records: Iterable[RequestRecord]) -> dict[str, Any]:
    _measured, ok, failed = _split(records)
    ttft: list[float] = []
    itl: list[float] = []
    icl: list[float] = []
    e2e: list[float] = []
    ttst: list[float] = []
    per_user: list[float] = []
    for r in ok:
        t1 = (r.first_token_ns - r.sent_ns) / _MS  # type: ignore[operator]
        lat = (r.end_ns - r.sent_ns) / _MS  # type: ignore[operator]
        ttft.append(t1)
        e2e.append(lat)
        icl.extend(rq.icl_samples_ms(r))
        if len(r.chunk_times_ns) > 1:
            ttst.append((r.chunk_times_ns[1] - r.chunk_times_ns[0]) / _MS)
        n = rq.output_token_count(r)
        if n > 1 and lat > t1:
            v = (lat - t1) / (n - 1)
            itl.append(v)
            per_user.append(1000.0 / v)
    # benchmark_duration = max response timestamp − min request timestamp
    starts = [r.sent_ns for r in ok if r.sent_ns is not None]
    ends = [r.end_ns for r in ok if r.end_ns is not None]
    dur = (max(ends) - min(starts)) / 1e9 if starts and ends else 0.0
    out = _frame(
        "aiperf", ok, failed, dur, rq.output_token_count,
        {"ttft_ms": ttft, "itl_ms": itl, "icl_ms": icl, "ttst_ms": ttst, "e2e_ms": e2e}, _linear,
        {"ttft_ms": "Time to First Token", "itl_ms": "Inter Token Latency (per-request average)",
         "icl_ms": "Inter Chunk Latency", "ttst_ms": "Time to Second Token", "e2e_ms": "Request Latency"},
        [
            "AIPerf's ITL is a per-request average, (request latency − TTFT)/(OSL − 1): what vLLM calls TPOT. Its "
            "per-chunk gaps are ICL.",
            "Times start at the send; first and last response = first and last content-bearing chunk.",
        ],
    )  # fmt: skip
    out["metrics"]["output_token_throughput_per_user"] = _linear(per_user)
    return out


def _guidellm(records: Iterable[RequestRecord]) -> dict[str, Any]:
    measured, ok, failed = _split(records)
    s = _Samples()
    for r in ok:
        n = rq.output_token_count(r)
        s.ttft.append((r.first_token_ns - r.sent_ns) / _MS)  # type: ignore[operator]
        s.e2e.append((r.closed_ns - r.sent_ns) / _MS)  # type: ignore[operator]
        if n > 0:
            s.tpot.append((r.end_ns - r.sent_ns) / _MS / n)  # type: ignore[operator]
        if n > 1:
            s.itl.append((r.end_ns - r.first_token_ns) / _MS / (n - 1))  # type: ignore[operator]
    starts = [r.sent_ns for r in measured if r.sent_ns is not None]
    ends = [e for r in ok if (e := r.closed_ns) is not None]
    dur = (max(ends) - min(starts)) / 1e9 if starts and ends else 0.0
    return _frame(
        "guidellm", ok, failed, dur, rq.output_token_count,
        s.metrics(), _inverted_cdf,
        {"ttft_ms": "TTFT", "tpot_ms": "TPOT (includes the first token)", "itl_ms": "ITL (per-request average)",
         "e2e_ms": "Request Latency"},
        [
            "GuideLLM's TPOT = (last token − request start)/N includes the TTFT; its ITL = (last − first token)/"
            "(N − 1) is what vLLM calls TPOT.",
            "Percentiles take the smallest value whose cumulative share is ≥ q (no interpolation; the 1/n shares "
            "summed in floating point).",
            "Request latency ends when the response finished (stream close); times start at the send.",
            "Throughputs here are totals over the benchmark duration; GuideLLM's own are time-weighted rate "
            "distributions, whose means are close but not identical.",
        ],
    )  # fmt: skip


def _tailscope(records: Iterable[RequestRecord]) -> dict[str, Any]:
    recs = list(records)
    s = summarize(recs, by_class=False)

    def conv(st: Any) -> dict[str, float | int | None]:
        d = st.to_dict()
        return {"mean": d["mean"], "median": d["p50"], "std": None, "p90": d["p90"], "p95": d["p95"],
                "p99": d["p99"], "min": d["min"], "max": d["max"], "count": d["count"]}  # fmt: skip

    ok = [r for r in recs if not r.warmup and r.ok]
    return {
        "dialect": "tailscope",
        "source": SOURCES["tailscope"],
        "requests": {"completed": s.requests.completed, "failed": s.requests.failed + s.requests.incomplete},
        "duration_s": s.duration_s,
        "request_throughput": s.requests_per_s,
        "output_throughput": s.output_tokens_per_s,
        "total_token_throughput": s.total_tokens_per_s,
        "metrics": {
            "ttft_ms": conv(s.ttft_ms),
            "tpot_ms": conv(s.tpot_ms),
            "itl_ms": conv(s.itl_ms),
            "icl_ms": conv(s.icl_ms),
            "e2e_ms": conv(s.e2e_ms),
        },
        "names": {
            "ttft_ms": "TTFT",
            "tpot_ms": "TPOT",
            "itl_ms": "ITL (per token)",
            "icl_ms": "ICL (per chunk)",
            "e2e_ms": "E2E",
        },
        "notes": [
            "Latencies are measured from the intended send time (no coordinated omission); see docs/metrics.md.",
            f"{len(ok)} successful non-warmup requests.",
        ],
    }


def _bench_duration_s(measured: Sequence[RequestRecord]) -> float:
    if not measured:
        return 0.0
    start = min(r.scheduled_ns for r in measured)
    ends = [e for r in measured if (e := r.closed_ns) is not None]
    return max(0.0, (max(ends) - start) / 1e9) if ends else 0.0


_IMPL: dict[str, Callable[[Iterable[RequestRecord]], dict[str, Any]]] = {
    "tailscope": _tailscope,
    "vllm": _vllm,
    "sglang": _sglang,
    "aiperf": _aiperf,
    "guidellm": _guidellm,
}


def summarize_dialect(records: Iterable[RequestRecord], dialect: str) -> dict[str, Any]:
    """Recompute a run's summary from its records as ``dialect`` defines its metrics.

    Args:
        records: the run's request records (warmup records are left out).
        dialect: tailscope | vllm | sglang | aiperf | guidellm.

    Returns:
        The dialect summary dict described in the module docstring (latencies in ms, throughputs per second).

    Raises:
        ValueError: for an unknown dialect (the CLI converts it to a ConfigError naming the choices).
    """
    key = dialect.strip().lower()
    if key not in _IMPL:
        raise ValueError(f"unknown dialect {dialect!r}: use one of {', '.join(DIALECTS)}")
    return _IMPL[key](records)


def check_dialects(dialects: Iterable[str]) -> None:
    """Refuse an unknown dialect name before any load is sent (ConfigError naming it)."""
    from tailscope.errors import ConfigError

    for d in dialects:
        if d not in DIALECTS:
            raise ConfigError(f"--dialect {d!r}: use one of {', '.join(DIALECTS)}")
