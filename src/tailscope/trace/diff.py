"""Why did latency move between two trace sets? A ranked list of explanations.

Method (``docs/trace.md``): root operations are matched by name. For each matched operation the latency
distributions are compared, then the critical-path composition of the *tail bucket* (traces ≥ p99 of that operation,
or ≥ p95 when the p99 bucket has fewer than 20 traces) and of the median bucket. Per operation the inclusive
critical-path time per tail trace (time on the path inside that operation's subtrees) before and after gives the
operation's contribution to the tail's change. Explanations, ranked by contribution in the direction the tail moved:

* ``became_critical`` — the operation was (almost) off the tail path before and is on it now: the path moved;
* ``slower_on_path`` / ``faster_on_path`` — it was and stays on the path and its path time changed;
* ``faster_with_slack`` — its mean duration dropped but its tail path time did not drop as much: the saving fell into
  slack (a parallel branch was or became the longer one);
* ``gap_growth`` — parent time with no child running (queueing, pool waits) on the tail path grew;
* ``new_retries`` — more retry attempts per trace;
* ``fanout_changed`` — the widest concurrency under the operation changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tailscope.trace.analysis import NS_PER_MS, _stats_ms, buckets, composition
from tailscope.trace.facts import TraceFacts

MIN_TAIL_TRACES = 20
#: An operation is "off the path" when its tail path time is below this fraction of the tail's mean duration.
OFF_PATH_FRACTION = 0.05
#: Operations holding at least this fraction of the tail's path before and after wrap the whole request (skipped).
WRAPPER_FRACTION = 0.95


def _ms(ns: float) -> float:
    return round(ns / NS_PER_MS, 3)


def _tail(facts: Sequence[TraceFacts]) -> tuple[str, list[TraceFacts]]:
    bks = buckets(facts)
    tail = bks["tail_bucket"]
    if len(tail.facts) < MIN_TAIL_TRACES:
        return "p95", list(bks["tail_p95_bucket"].facts)
    return "p99", list(tail.facts)


def _mean_map(facts: Sequence[TraceFacts], attr: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in facts:
        for k, v in getattr(f, attr).items():
            out[k] = out.get(k, 0.0) + v
    n = len(facts) or 1
    return {k: v / n for k, v in out.items()}


def _op_means(facts: Sequence[TraceFacts]) -> dict[str, dict[str, float]]:
    acc: dict[str, list[float]] = {}
    for f in facts:
        for name, o in f.ops.items():
            row = acc.setdefault(name, [0.0, 0.0, 0.0, 0.0])
            row[0] += o.count
            row[1] += o.duration_ns
            row[2] += o.fanout
            row[3] += 1
    return {
        k: {"mean_ns": v[1] / v[0] if v[0] else 0.0, "fanout": v[2] / v[3] if v[3] else 0.0} for k, v in acc.items()
    }


def _retry_rate(facts: Sequence[TraceFacts]) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in facts:
        for r in f.retries:
            out[r.op] = out.get(r.op, 0.0) + (r.attempts - 1)
    n = len(facts) or 1
    return {k: v / n for k, v in out.items()}


def _gap_path(facts: Sequence[TraceFacts]) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in facts:
        for name, o in f.ops.items():
            if o.gap_path_ns:
                out[name] = out.get(name, 0.0) + o.gap_path_ns
    n = len(facts) or 1
    return {k: v / n for k, v in out.items()}


def explain(before: Sequence[TraceFacts], after: Sequence[TraceFacts], root_op: str) -> dict[str, Any]:
    """Compare one root operation's traces before and after; see the module docstring for the method."""
    d_before = np.fromiter((f.duration_ns for f in before), dtype=np.float64)
    d_after = np.fromiter((f.duration_ns for f in after), dtype=np.float64)
    stats_b, stats_a = _stats_ms(f.duration_ns for f in before), _stats_ms(f.duration_ns for f in after)
    p99_b, p99_a = float(np.quantile(d_before, 0.99)), float(np.quantile(d_after, 0.99))
    direction = 1.0 if p99_a >= p99_b else -1.0
    tail_name_b, tail_b = _tail(before)
    tail_name_a, tail_a = _tail(after)
    tail_name = "p99" if tail_name_b == tail_name_a == "p99" else "p95"
    if tail_name == "p95":
        tail_b = list(buckets(before)["tail_p95_bucket"].facts)
        tail_a = list(buckets(after)["tail_p95_bucket"].facts)
    incl_b, incl_a = _mean_map(tail_b, "incl_op"), _mean_map(tail_a, "incl_op")
    tail_mean_a = float(np.mean([f.duration_ns for f in tail_a])) if tail_a else 0.0
    tail_mean_b = float(np.mean([f.duration_ns for f in tail_b])) if tail_b else 0.0
    off_b = OFF_PATH_FRACTION * tail_mean_b
    means_b, means_a = _op_means(before), _op_means(after)
    branch: dict[str, str] = {}
    for f in list(tail_a) + list(tail_b):
        for k, v in f.branch.items():
            branch.setdefault(k, v)
    explanations: list[dict[str, Any]] = []
    for op in sorted(set(incl_b) | set(incl_a) | set(means_b) | set(means_a)):
        if op == root_op:
            continue
        pb, pa = incl_b.get(op, 0.0), incl_a.get(op, 0.0)
        if pb >= WRAPPER_FRACTION * tail_mean_b and pa >= WRAPPER_FRACTION * tail_mean_a:
            continue  # a wrapper around (almost) the whole path: its change is the total, not an explanation
        dp = pa - pb
        mb = means_b.get(op, {}).get("mean_ns", 0.0)
        ma = means_a.get(op, {}).get("mean_ns", 0.0)
        dd = ma - mb if op in means_b and op in means_a else 0.0
        row = {
            "op": op,
            "branch": branch.get(op, op),
            "tail_path_before_ms": _ms(pb),
            "tail_path_after_ms": _ms(pa),
            "impact_ms": _ms(dp),
            "mean_duration_before_ms": _ms(mb),
            "mean_duration_after_ms": _ms(ma),
        }
        if dp > 0 and pb <= off_b:
            kind = "became_critical"
            detail = f"{op} became critical: +{_ms(dp):g} ms per tail trace on the path (the path moved)"
        elif dd < 0 and dp > dd / 2:
            kind = "faster_with_slack"
            detail = (
                f"{op} got faster by {_ms(-dd):g} ms on average but its tail path time changed by {_ms(dp):+g} ms "
                "(the saving fell into slack)"
            )
        elif dp > 0:
            kind = "slower_on_path"
            detail = f"{op} got slower on the tail path: +{_ms(dp):g} ms per tail trace"
        elif dp < 0:
            kind = "faster_on_path"
            detail = f"{op} got faster on the tail path: {_ms(dp):g} ms per tail trace"
        else:
            continue
        if abs(dp) < 1e-9 and kind != "faster_with_slack":
            continue
        explanations.append({"kind": kind, "detail": detail, **row})
    gaps_b, gaps_a = _gap_path(tail_b), _gap_path(tail_a)
    for op in sorted(set(gaps_b) | set(gaps_a)):
        dg = gaps_a.get(op, 0.0) - gaps_b.get(op, 0.0)
        if abs(dg) >= 0.01 * max(tail_mean_a, tail_mean_b, 1.0):
            explanations.append(
                {
                    "kind": "gap_growth",
                    "op": op,
                    "branch": branch.get(op, op),
                    "impact_ms": _ms(dg),
                    "detail": f"gaps under {op} on the tail path changed by {_ms(dg):+g} ms per tail trace "
                    "(queueing or waits with no child running)",
                }
            )
    rb, ra = _retry_rate(before), _retry_rate(after)
    rcost_b, rcost_a = _retry_cost(tail_b), _retry_cost(tail_a)
    for op in sorted(set(rb) | set(ra)):
        dr = ra.get(op, 0.0) - rb.get(op, 0.0)
        if dr > 0:
            dc = rcost_a.get(op, 0.0) - rcost_b.get(op, 0.0)
            explanations.append(
                {
                    "kind": "new_retries",
                    "op": op,
                    "branch": branch.get(op, op),
                    "impact_ms": _ms(dc),
                    "detail": f"{op}: {dr:.2f} more retry attempts per trace, "
                    f"{_ms(dc):+g} ms per tail trace on the path",
                }
            )
    for op in sorted(set(means_b) & set(means_a)):
        fb, fa = means_b[op]["fanout"], means_a[op]["fanout"]
        if fb and abs(fa - fb) >= 0.5:
            explanations.append(
                {
                    "kind": "fanout_changed",
                    "op": op,
                    "branch": branch.get(op, op),
                    "impact_ms": 0.0,
                    "detail": f"{op}: mean fan-out width {fb:.1f} → {fa:.1f}",
                }
            )
    explanations.sort(key=lambda e: (-direction * e["impact_ms"], e["op"] != e["branch"], e["op"]))
    bks_b, bks_a = buckets(before), buckets(after)
    composition_rows: dict[str, Any] = {}
    for name in ("median_bucket", "tail_bucket"):
        cb = composition(bks_b[name], "path_layer")
        ca = composition(bks_a[name], "path_layer")
        composition_rows[name] = {
            layer: {
                "before_ms": cb.get(layer, {}).get("ms_per_trace", 0.0),
                "after_ms": ca.get(layer, {}).get("ms_per_trace", 0.0),
                "delta_ms": round(
                    ca.get(layer, {}).get("ms_per_trace", 0.0) - cb.get(layer, {}).get("ms_per_trace", 0.0), 3
                ),
            }
            for layer in sorted(set(cb) | set(ca))
        }
    return {
        "root_op": root_op,
        "before": stats_b,
        "after": stats_a,
        "delta_p50_ms": _ms(float(np.quantile(d_after, 0.5)) - float(np.quantile(d_before, 0.5))),
        "delta_p99_ms": _ms(p99_a - p99_b),
        "tail": tail_name,
        "tail_traces": {"before": len(tail_b), "after": len(tail_a)},
        "layers": composition_rows,
        "explanations": explanations,
    }


def _retry_cost(facts: Sequence[TraceFacts]) -> dict[str, float]:
    out: dict[str, float] = {}
    for f in facts:
        for r in f.retries:
            out[r.op] = out.get(r.op, 0.0) + r.cost_ns
    n = len(facts) or 1
    return {k: v / n for k, v in out.items()}


def diff_sets(before: Sequence[TraceFacts], after: Sequence[TraceFacts]) -> dict[str, Any]:
    """Diff two trace sets: matched root operations with ranked explanations, plus unmatched operations.

    Returns:
        ``{"root_ops": {op: explain(...)}, "only_before": [...], "only_after": [...]}`` — root operations sorted by
        traffic.
    """
    by_b: dict[str, list[TraceFacts]] = {}
    by_a: dict[str, list[TraceFacts]] = {}
    for f in before:
        by_b.setdefault(f.root_op, []).append(f)
    for f in after:
        by_a.setdefault(f.root_op, []).append(f)
    matched = sorted(set(by_b) & set(by_a), key=lambda op: (-(len(by_b[op]) + len(by_a[op])), op))
    return {
        "root_ops": {op: explain(by_b[op], by_a[op], op) for op in matched},
        "only_before": sorted(set(by_b) - set(by_a)),
        "only_after": sorted(set(by_a) - set(by_b)),
    }
