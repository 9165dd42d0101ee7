"""Chart data for the HTML report: curves, histograms, time series and a Gantt sample, computed from raw records.

The statistics a page shows (percentile tables, cards) are never computed here: they come from the summary dict, the
same object the JSON export carries. This module only shapes what the charts draw, and it bounds its output so that a
page stays small however long the run was: CDFs keep every point up to ``CDF_EXACT_MAX`` samples and a quantile grid
dense in the tail beyond it (the maximum is always kept), time series use at most ``MAX_WINDOWS`` windows, and the
Gantt chart shows a sample of requests (evenly spread in send order, plus the slowest).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tailscope.metrics import request as rq
from tailscope.records import RequestRecord, ServerSample, Status

#: Latency metrics with charts: key in the summary, label.
METRICS: tuple[tuple[str, str], ...] = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E"))
#: CDFs of at most this many samples keep every sample.
CDF_EXACT_MAX = 2000
#: Time-series windows at most.
MAX_WINDOWS = 200
#: Requests drawn in the Gantt chart (the sample; statistics always use every request).
GANTT_LIMIT = 300
#: Of those, the slowest (by E2E) always included.
GANTT_SLOWEST = 20
#: Server metrics drawn before any other (when more than ``MAX_SERVER_SERIES`` were scraped).
PREFERRED_SERIES = frozenset(
    {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "sglang:num_queue_reqs",
        "sglang:num_running_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "tgi_queue_size",
        "tgi_batch_current_size",
        "tailscope:replicas_ready",
        "tailscope:replicas_pending",
    }
)
#: Server series drawn at most, and points per series.
MAX_SERVER_SERIES = 16
MAX_SERVER_POINTS = 1000


def _s(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def metric_samples(records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """Per-request latency samples (ms) of successful, non-warmup requests — the same population as the summary.

    Returns:
        ``ttft_ms``, ``tpot_ms``, ``e2e_ms`` (one value per request where defined) and ``itl_ms`` (every gap).
    """
    ttft: list[float] = []
    tpot: list[float] = []
    e2e: list[float] = []
    itl: list[float] = []
    for r in records:
        if r.warmup or r.status is not Status.OK:
            continue
        for dst, v in ((ttft, rq.ttft_ms(r)), (tpot, rq.tpot_ms(r)), (e2e, rq.e2e_ms(r))):
            if v is not None:
                dst.append(v)
        itl.extend(rq.itl_samples_ms(r))
    return {
        k: np.asarray(v, dtype=np.float64)
        for k, v in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e), ("itl_ms", itl))
    }


def cdf_points(values: np.ndarray, *, exact_max: int = CDF_EXACT_MAX) -> dict[str, list[float]]:
    """Empirical CDF as ``{"x": values (ms), "y": fractions}``.

    Up to ``exact_max`` samples every sample is a point; beyond, points sit at a grid of fractions that is linear to
    0.9 and then geometric toward 1 (so p99, p99.9 and the maximum stay visible). ``y`` of the i-th smallest of n is
    ``(i + 1) / n``.
    """
    v = np.sort(values[np.isfinite(values)])
    n = int(v.size)
    if n == 0:
        return {"x": [], "y": []}
    if n <= exact_max:
        idx = np.arange(n)
    else:
        body = np.linspace(0.0, 0.9, 400, endpoint=False)
        tail = 1.0 - np.geomspace(0.1, 1.0 / n, 600)
        p = np.concatenate([body, tail])
        idx = np.unique(np.clip(np.ceil(p * n).astype(np.int64) - 1, 0, n - 1))
        if idx[-1] != n - 1:
            idx = np.append(idx, n - 1)
    return {"x": [float(x) for x in v[idx]], "y": [float(i + 1) / n for i in idx]}


def histogram(values: np.ndarray, *, bins: int = 60) -> dict[str, Any]:
    """Counts over ``bins`` bins: logarithmic when the values span more than 50×, else linear.

    Returns:
        ``{"edges": [...], "counts": [...], "log": bool}`` (``edges`` has one more entry than ``counts``).
    """
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {"edges": [], "counts": [], "log": False}
    lo, hi = float(v.min()), float(v.max())
    if hi <= lo:
        return {"edges": [lo, lo + max(abs(lo) * 0.01, 1e-3)], "counts": [int(v.size)], "log": False}
    use_log = lo > 0 and hi / lo > 50
    edges = np.geomspace(lo, hi, bins + 1) if use_log else np.linspace(lo, hi, bins + 1)
    counts, edges = np.histogram(v, bins=edges)
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts], "log": bool(use_log)}


def nice_window_s(duration_s: float, max_windows: int = MAX_WINDOWS) -> float:
    """A 1-2-5 window width (s) giving about 100 and at most ``max_windows`` windows over ``duration_s``."""
    if duration_s <= 0:
        return 1.0
    raw = duration_s / min(100, max_windows)
    exp = math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        w = m * 10.0**exp
        if w >= raw and duration_s / w <= max_windows:
            return max(w, 1e-3)
    return max(10.0 ** (exp + 1), 1e-3)


def _window_quantile(values: np.ndarray, keys: np.ndarray, n: int, q: float) -> list[float | None]:
    out: list[float | None] = [None] * n
    if values.size == 0:
        return out
    order = np.argsort(keys, kind="stable")
    k_sorted = keys[order]
    v_sorted = values[order]
    bounds = np.searchsorted(k_sorted, np.arange(n + 1))
    for i in range(n):
        a, b = int(bounds[i]), int(bounds[i + 1])
        if b > a:
            out[i] = float(np.quantile(v_sorted[a:b], q))
    return out


def time_series(records: Sequence[RequestRecord], samples: Sequence[ServerSample]) -> dict[str, Any]:
    """Series over the run on one time axis (seconds since the run start), every request included (warmup too).

    Returns:
        ``t`` (window starts, s), ``window_s``, ``in_flight`` (mean requests between send and end in each window),
        ``out_tok_s`` (output tokens arriving per second), ``ttft_p50_ms``/``ttft_p99_ms`` (of requests scheduled in
        the window; ``None`` where none), ``completed``/``errors`` (per window, by end time) and ``server``: a list of
        ``{"name", "labels", "t", "v", "rate"}`` (``rate`` true when a ``_total`` counter was turned into per-second).
    """
    ends = [r.end_ns for r in records if r.end_ns is not None]
    starts = [r.scheduled_ns for r in records]
    t_end_ns = max([*ends, *starts, *(s.t_ns for s in samples), 0])
    duration_s = t_end_ns / 1e9
    w = nice_window_s(duration_s)
    n = max(1, math.ceil(duration_s / w + 1e-9))
    edges = np.arange(n + 1) * w
    out: dict[str, Any] = {"t": [float(x) for x in edges[:-1]], "window_s": w}

    sent = np.array([(r.sent_ns if r.sent_ns is not None else r.scheduled_ns) / 1e9 for r in records], dtype=np.float64)
    fin = np.array([(r.end_ns if r.end_ns is not None else t_end_ns) / 1e9 for r in records], dtype=np.float64)
    in_flight = []
    for i in range(n):
        lo, hi = edges[i], edges[i + 1]
        overlap = np.clip(np.minimum(fin, hi) - np.maximum(sent, lo), 0.0, None)
        in_flight.append(float(overlap.sum() / w) if sent.size else 0.0)
    out["in_flight"] = in_flight

    times: list[int] = []
    toks: list[int] = []
    for r in records:
        if r.chunk_times_ns:
            times.extend(r.chunk_times_ns)
            toks.extend(r.chunk_tokens if len(r.chunk_tokens) == len(r.chunk_times_ns) else [1] * len(r.chunk_times_ns))
    tok_counts, _ = np.histogram(
        np.asarray(times, dtype=np.float64) / 1e9, bins=edges, weights=np.asarray(toks, dtype=np.float64)
    )
    out["out_tok_s"] = [float(c / w) for c in tok_counts]

    ttft_v, ttft_k = [], []
    for r in records:
        v = rq.ttft_ms(r) if r.status is Status.OK else None
        if v is not None:
            ttft_v.append(v)
            ttft_k.append(min(int(r.scheduled_ns / 1e9 // w), n - 1))
    tv, tk = np.asarray(ttft_v, dtype=np.float64), np.asarray(ttft_k, dtype=np.int64)
    out["ttft_p50_ms"] = _window_quantile(tv, tk, n, 0.5)
    out["ttft_p99_ms"] = _window_quantile(tv, tk, n, 0.99)

    def per_window(ts: list[float]) -> list[int]:
        c, _ = np.histogram(np.asarray(ts, dtype=np.float64), bins=edges)
        return [int(x) for x in c]

    out["completed"] = per_window([r.end_ns / 1e9 for r in records if r.status is Status.OK and r.end_ns is not None])
    out["errors"] = per_window(
        [(r.end_ns if r.end_ns is not None else r.scheduled_ns) / 1e9 for r in records if r.status is Status.ERROR]
    )
    out["server"] = server_series(samples)
    return out


def server_series(samples: Sequence[ServerSample]) -> list[dict[str, Any]]:
    """Scraped server metrics as series: gauges as they are, ``*_total`` counters as per-second rates.

    Histogram parts (``_bucket``, ``_sum``, ``_count``) are left out; at most ``MAX_SERVER_SERIES`` series, each
    thinned to ``MAX_SERVER_POINTS`` points by taking every k-th sample.
    """
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for s in samples:
        if s.name.endswith(("_bucket", "_sum", "_count", "_created")):
            continue
        groups.setdefault((s.name, s.labels), []).append((s.t_ns / 1e9, s.value))
    out: list[dict[str, Any]] = []

    def rank(key: tuple[str, str]) -> tuple[int, str, str]:
        # queue depth, running, KV usage and the replica counts first: they explain latency most often
        return (0 if key[0] in PREFERRED_SERIES else 1, key[0], key[1])

    for (name, labels), pts in sorted(groups.items(), key=lambda kv: rank(kv[0]))[:MAX_SERVER_SERIES]:
        pts.sort()
        rate = name.endswith("_total")
        if rate:
            pts = [
                (t1, (v1 - v0) / (t1 - t0)) for (t0, v0), (t1, v1) in itertools.pairwise(pts) if t1 > t0 and v1 >= v0
            ]
        step = max(1, math.ceil(len(pts) / MAX_SERVER_POINTS))
        pts = pts[::step]
        out.append(
            {
                "name": name,
                "labels": labels,
                "t": [p[0] for p in pts],
                "v": [_finite(p[1]) for p in pts],
                "rate": rate,
            }
        )
    return out


#: Simulation timeline columns drawn (summary ``sim.timeline``), each as its own row on the run's time axis.
SIM_COLUMNS: tuple[str, ...] = ("replicas_ready", "replicas_pending", "waiting", "running", "kv_usage")


def sim_series(sim: Any, *, events_only: bool = False) -> list[dict[str, Any]]:
    """A simulation's replica/autoscaler timeline (summary ``sim``) as series shaped like :func:`server_series`.

    Scale events become one more series, ``sim:scale_events`` (the replica-count change at each decision).

    Args:
        sim: the summary's ``sim`` object (anything else gives no series).
        events_only: only the scale events — for runs whose timeline is already stored as server samples.
    """
    if not isinstance(sim, dict):
        return []
    rows = [] if events_only else [r for r in sim.get("timeline") or [] if isinstance(r, dict) and "t_s" in r]
    out: list[dict[str, Any]] = []
    for col in SIM_COLUMNS:
        if any(col in r for r in rows):
            pts = [(float(r["t_s"]), r.get(col)) for r in rows]
            out.append(
                {
                    "name": f"sim:{col}",
                    "labels": "",
                    "t": [t for t, _ in pts],
                    "v": [None if v is None else _finite(float(v)) for _, v in pts],
                    "rate": False,
                    "shape": "linear",  # snapshots at window ends, not values held over the next window
                }
            )
    events = [e for e in sim.get("scale_events") or [] if isinstance(e, list | tuple) and len(e) >= 2]
    if events:
        out.append(
            {
                "name": "sim:scale_events",
                "labels": "",
                "t": [float(e[0]) for e in events],
                "v": [float(e[1]) for e in events],
                "rate": False,
                "markers": True,
            }
        )
    return out


def gantt_sample(
    records: Sequence[RequestRecord], *, limit: int = GANTT_LIMIT, slowest: int = GANTT_SLOWEST
) -> dict[str, Any]:
    """A sample of requests for the timeline: evenly spread in schedule order, plus the slowest by E2E.

    Returns:
        ``{"total": n, "shown": k, "rows": [...]}``; each row has ``id``, ``class``, ``status``, ``error`` and the
        phase boundaries in seconds: ``scheduled`` → ``sent`` (queue) → ``first`` (prefill) → ``end`` (decode).
    """
    ordered = sorted(records, key=lambda r: (r.scheduled_ns, r.id))
    n = len(ordered)
    if n <= limit:
        chosen = ordered
    else:
        slow = sorted((r for r in ordered if r.end_ns is not None), key=lambda r: r.end_ns - r.scheduled_ns)  # type: ignore[operator]
        keep = {r.id for r in slow[-slowest:]}
        for i in np.linspace(0, n - 1, limit - len(keep)).round().astype(int):
            keep.add(ordered[int(i)].id)
        chosen = [r for r in ordered if r.id in keep]
    rows = [
        {
            "id": r.id,
            "class": r.request_class,
            "status": r.status.value,
            "error": r.error.value if r.error else None,
            "scheduled": _s(r.scheduled_ns),
            "sent": _s(r.sent_ns),
            "first": _s(r.first_token_ns),
            "end": _s(r.end_ns),
            "warmup": r.warmup,
        }
        for r in chosen
    ]
    return {"total": n, "shown": len(rows), "rows": rows}


def latency_charts(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """CDF and histogram per latency metric: ``{metric: {"label", "cdf", "hist", "n"}}``."""
    samples = metric_samples(records)
    return {
        key: {
            "label": label,
            "cdf": cdf_points(samples[key]),
            "hist": histogram(samples[key]),
            "n": int(samples[key].size),
        }
        for key, label in METRICS
    }
