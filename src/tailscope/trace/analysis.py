"""Set analyses over per-trace facts: percentiles, where the tail's time goes, retries, gaps, waterfalls.

Buckets: the *median bucket* holds the traces whose duration lies between the 40th and 60th percentile; the *tail
bucket* the traces at or above the 99th percentile (``tail_p95_bucket``: at or above the 95th). Within a bucket, the
share of a layer or operation is its exclusive critical-path time divided by the bucket's total critical-path time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tailscope.metrics.percentiles import compute_stats
from tailscope.trace.facts import TraceFacts
from tailscope.trace.layers import LAYERS

NS_PER_MS = 1_000_000


def _ms(ns: float) -> float:
    return round(ns / NS_PER_MS, 3)


@dataclass(frozen=True, slots=True)
class Bucket:
    """Traces selected by duration percentile."""

    name: str
    facts: tuple[TraceFacts, ...]
    min_ns: int
    max_ns: int


def buckets(facts: Sequence[TraceFacts]) -> dict[str, Bucket]:
    """The median bucket (p40–p60), the tail bucket (≥ p99) and the p95 tail bucket of a set of traces."""
    if not facts:
        return {}
    durations = np.fromiter((f.duration_ns for f in facts), dtype=np.float64, count=len(facts))
    q40, q60, q95, q99 = np.quantile(durations, [0.40, 0.60, 0.95, 0.99])

    def pick(name: str, lo: float, hi: float) -> Bucket:
        chosen = tuple(f for f in facts if lo <= f.duration_ns <= hi)
        if not chosen:  # tiny sets: fall back to the trace nearest the bound
            chosen = (min(facts, key=lambda f: abs(f.duration_ns - lo)),)
        return Bucket(name, chosen, min(f.duration_ns for f in chosen), max(f.duration_ns for f in chosen))

    top = float(durations.max())
    return {
        "median_bucket": pick("median_bucket", q40, q60),
        "tail_bucket": pick("tail_bucket", q99, top),
        "tail_p95_bucket": pick("tail_p95_bucket", q95, top),
    }


def composition(bucket: Bucket, attr: str) -> dict[str, dict[str, float]]:
    """Per key (layer or operation): mean ms per trace on the critical path and share of the bucket's path time."""
    totals: dict[str, int] = {}
    for f in bucket.facts:
        for key, ns in getattr(f, attr).items():
            totals[key] = totals.get(key, 0) + ns
    grand = sum(totals.values()) or 1
    n = len(bucket.facts)
    order = sorted(totals, key=lambda k: -totals[k])
    return {k: {"ms_per_trace": _ms(totals[k] / n), "share": round(totals[k] / grand, 4)} for k in order}


def _bucket_dict(bucket: Bucket, attr: str) -> dict[str, Any]:
    return {
        "traces": len(bucket.facts),
        "min_ms": _ms(bucket.min_ns),
        "max_ms": _ms(bucket.max_ns),
        "composition": composition(bucket, attr),
    }


def _stats_ms(values: Iterable[int]) -> dict[str, Any]:
    arr = np.fromiter(values, dtype=np.float64) / NS_PER_MS
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in compute_stats(arr).to_dict().items()}


def waterfall_table(facts: Sequence[TraceFacts], *, limit: int = 20) -> list[dict[str, Any]]:
    """Waterfall patterns ranked by total projected saving, with the projected p50/p99 of the whole set."""
    if not facts:
        return []
    durations = np.fromiter((f.duration_ns for f in facts), dtype=np.float64, count=len(facts))
    p50, p99 = (float(x) for x in np.quantile(durations, [0.5, 0.99]))
    by_pattern: dict[str, dict[int, int]] = {}
    for k, f in enumerate(facts):
        for g in f.waterfalls:
            per_trace = by_pattern.setdefault(g.pattern, {})
            per_trace[k] = per_trace.get(k, 0) + g.saving_ns
    rows: list[dict[str, Any]] = []
    for pattern, savings in by_pattern.items():
        projected = durations.copy()
        idx = np.fromiter(savings.keys(), dtype=np.int64, count=len(savings))
        cut = np.fromiter(savings.values(), dtype=np.float64, count=len(savings))
        projected[idx] = np.maximum(projected[idx] - cut, 0.0)
        q50, q99 = (float(x) for x in np.quantile(projected, [0.5, 0.99]))
        total = float(cut.sum())
        rows.append(
            {
                "pattern": pattern,
                "traces": len(savings),
                "share_of_traces": round(len(savings) / len(facts), 4),
                "total_saving_ms": _ms(total),
                "mean_saving_ms": _ms(total / len(savings)),
                "projected_p50_ms": _ms(q50),
                "projected_p99_ms": _ms(q99),
                "p50_saving_ms": _ms(p50 - q50),
                "p99_saving_ms": _ms(p99 - q99),
            }
        )
    rows.sort(key=lambda r: (-r["total_saving_ms"], r["pattern"]))
    return rows[:limit]


def analyze_facts(facts: Sequence[TraceFacts], *, root_op: str | None = None) -> dict[str, Any]:
    """The ``trace analyze`` result as a JSON-ready dict.

    Keys (stable): ``traces``, ``root_ops`` (latency percentiles per root operation, ms), ``layers``
    (``median_bucket``, ``tail_bucket``, ``tail_p95_bucket``), ``operations``, ``waterfalls``, ``retries``,
    ``anomalies``.

    Args:
        facts: per-trace facts of one set.
        root_op: analyse only traces whose root operation has this name.
    """
    if root_op is not None:
        facts = [f for f in facts if f.root_op == root_op]
    roots: dict[str, list[int]] = {}
    for f in facts:
        roots.setdefault(f.root_op, []).append(f.duration_ns)
    root_ops = {op: _stats_ms(d) for op, d in sorted(roots.items(), key=lambda kv: (-len(kv[1]), kv[0]))}
    bks = buckets(facts)
    layers = {name: _bucket_dict(b, "path_layer") for name, b in bks.items()}
    for b in layers.values():
        comp = b["composition"]
        for layer in LAYERS:
            comp.setdefault(layer, {"ms_per_trace": 0.0, "share": 0.0})
    op_path = {name: composition(b, "path_op") for name, b in bks.items()}
    return {
        "traces": {"count": len(facts), "spans": sum(f.spans for f in facts)},
        "root_ops": root_ops,
        "layers": layers,
        "operations": operation_table(facts, op_path),
        "waterfalls": waterfall_table(facts),
        "retries": retry_table(facts),
        "anomalies": anomaly_table(facts),
    }


def operation_table(facts: Sequence[TraceFacts], op_path: dict[str, dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Per operation: spans, traces, mean duration, self share, gaps per trace, fan-out and its share of each
    bucket's critical path (``op_path``: :func:`composition` of ``path_op`` per bucket), ordered by tail share."""
    # Per operation: spans, traces, duration, self, gap, gap on path, widest fan-out, most children (a list per
    # operation: this loop runs once per operation per trace, and list slots cost less than dict keys and max()).
    ops: dict[str, list[int]] = {}
    for f in facts:
        for name, o in f.ops.items():
            acc = ops.get(name)
            if acc is None:
                acc = ops[name] = [0, 0, 0, 0, 0, 0, 0, 0]
            acc[0] += o.count
            acc[1] += 1
            acc[2] += o.duration_ns
            acc[3] += o.self_ns
            acc[4] += o.gap_ns
            acc[5] += o.gap_path_ns
            if o.fanout > acc[6]:
                acc[6] = o.fanout
            if o.children > acc[7]:
                acc[7] = o.children
    operations: dict[str, dict[str, Any]] = {}
    for name, (spans_n, traces_n, duration, self_ns, gap, gap_path, fanout, children) in ops.items():
        operations[name] = {
            "spans": spans_n,
            "traces": traces_n,
            "mean_ms": _ms(duration / spans_n),
            "self_share": round(self_ns / duration, 4) if duration else 0.0,
            "gap_ms_per_trace": _ms(gap / traces_n),
            "gap_on_path_ms_per_trace": _ms(gap_path / traces_n),
            "fanout_max": fanout,
            "children_max": children,
            "median_bucket_share": op_path.get("median_bucket", {}).get(name, {}).get("share", 0.0),
            "tail_bucket_share": op_path.get("tail_bucket", {}).get(name, {}).get("share", 0.0),
            "tail_p95_bucket_share": op_path.get("tail_p95_bucket", {}).get(name, {}).get("share", 0.0),
        }
    return dict(sorted(operations.items(), key=lambda kv: (-kv[1]["tail_bucket_share"], -kv[1]["spans"], kv[0])))


def retry_table(facts: Sequence[TraceFacts]) -> list[dict[str, Any]]:
    """Per retried operation: groups, traces, extra attempts and the path time of failed attempts, costliest first."""
    retries: dict[str, dict[str, Any]] = {}
    for f in facts:
        for r in f.retries:
            row = retries.setdefault(r.op, {"groups": 0, "traces": set(), "extra_attempts": 0, "cost_ns": 0})
            row["groups"] += 1
            row["traces"].add(f.trace_id)
            row["extra_attempts"] += r.attempts - 1
            row["cost_ns"] += r.cost_ns
    return [
        {
            "op": op,
            "groups": row["groups"],
            "traces": len(row["traces"]),
            "extra_attempts": row["extra_attempts"],
            "path_cost_ms": _ms(row["cost_ns"]),
            "path_cost_ms_per_trace": _ms(row["cost_ns"] / len(row["traces"])),
        }
        for op, row in sorted(retries.items(), key=lambda kv: -kv[1]["cost_ns"])
    ]


def anomaly_table(facts: Sequence[TraceFacts]) -> dict[str, dict[str, int]]:
    """Per anomaly kind: its count and the traces that have it."""
    anomalies: dict[str, int] = {}
    traces_with: dict[str, int] = {}
    for f in facts:
        for key, v in f.anomalies.items():
            anomalies[key] = anomalies.get(key, 0) + v
            traces_with[key] = traces_with.get(key, 0) + 1
    return {k: {"count": anomalies[k], "traces": traces_with[k]} for k in sorted(anomalies)}
