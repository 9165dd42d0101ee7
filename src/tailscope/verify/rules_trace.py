"""Diagnosis rules over a trace analysis (the ``trace analyze`` JSON): engineering layers, waterfalls, retries.

The input is the dict of :func:`tailscope.trace.analysis.analyze_facts` (keys ``root_ops``, ``layers``,
``operations``, ``waterfalls``, ``retries``); only those keys are read, so a hand-written dict works in tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailscope.verify.findings import Finding, RunView, clip01

#: a non-inference layer dominates at this share of the tail bucket's critical path.
LAYER_SHARE = 0.3
#: pool waits: parent time with no child running, on the critical path, per trace (share of the root p50).
GAP_SHARE = 0.1
#: waterfalls and retries matter when they cost this share of the root p99.
PATTERN_SHARE = 0.05
ENGINEERING_LAYERS = ("gateway", "network", "retrieval", "business", "agent")


def _root_p(trace: Mapping[str, Any], key: str) -> float | None:
    roots = trace.get("root_ops") or {}
    if not roots:
        return None
    first = next(iter(roots.values()))
    value = first.get(key) if isinstance(first, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def layers_dominate(v: RunView) -> Finding | None:
    """Gateway, retrieval, network or business layers take a large share of the slow traces' critical path."""
    t = v.trace
    if not t:
        return None
    tail = ((t.get("layers") or {}).get("tail_bucket") or {}).get("composition") or {}
    heavy = sorted(
        (
            (name, float(row.get("share", 0.0)), float(row.get("ms_per_trace", 0.0)))
            for name, row in tail.items()
            if name in ENGINEERING_LAYERS and float(row.get("share", 0.0)) >= LAYER_SHARE
        ),
        key=lambda x: -x[1],
    )
    p50 = _root_p(t, "p50")
    gaps = []
    for op, row in (t.get("operations") or {}).items():
        g = float(row.get("gap_on_path_ms_per_trace", 0.0))
        if p50 and g >= GAP_SHARE * p50:
            gaps.append((op, g))
    if not heavy and not gaps:
        return None
    evidence = [
        f"{name}: {share:.0%} of the tail traces' critical path ({ms:.0f} ms per trace)" for name, share, ms in heavy
    ]
    evidence += [f"{op}: {g:.0f} ms per trace waiting with no child running (pool or queue wait)" for op, g in gaps]
    inference = float((tail.get("inference") or {}).get("share", 0.0))
    evidence.append(f"inference: {inference:.0%} of the tail critical path")
    names = ", ".join(n for n, _, _ in heavy) or ", ".join(op for op, _ in gaps)
    return Finding(
        rule="layers_dominate",
        title=f"Engineering layers dominate the critical path ({names})",
        symptom="slow requests spend their time outside the model",
        evidence=tuple(evidence),
        cause="dependencies on the request path (gateway, retrieval, database pools, external APIs) are slow or "
        "queue; faster inference would not fix the tail",
        actions=(
            "give each dependency its own contract (layers: in the contract) and gate it",
            "size connection pools and worker counts for peak concurrency; watch pool wait time",
            "cache or precompute retrieval; set timeouts and hedged requests on slow dependencies",
        ),
        impact=clip01(max([s for _, s, _ in heavy], default=0.3)),
    )


def waterfalls(v: RunView) -> Finding | None:
    """Sequential calls that could run in parallel sit on the critical path."""
    t = v.trace
    if not t:
        return None
    p99 = _root_p(t, "p99")
    rows = [w for w in t.get("waterfalls") or [] if p99 and float(w.get("p99_saving_ms", 0.0)) >= PATTERN_SHARE * p99]
    if not rows:
        return None
    top = rows[0]
    return Finding(
        rule="waterfalls",
        title="Waterfalls: sequential calls on the critical path",
        symptom=f"independent calls run one after another ({top.get('pattern')})",
        evidence=tuple(
            f"{w.get('pattern')}: in {w.get('share_of_traces', 0):.0%} of traces; running them in parallel would cut "
            f"p99 by {w.get('p99_saving_ms', 0):.0f} ms (to {w.get('projected_p99_ms', 0):.0f} ms)"
            for w in rows[:3]
        ),
        cause="calls without data dependencies are awaited in sequence",
        actions=(
            "issue independent calls concurrently (asyncio.gather / futures) and await them together",
            "batch repeated calls to the same dependency into one request",
        ),
        impact=clip01(float(top.get("p99_saving_ms", 0.0)) / p99) if p99 else 0.3,
    )


def retries(v: RunView) -> Finding | None:
    """Failed attempts that were retried cost time on the critical path."""
    t = v.trace
    if not t:
        return None
    p99 = _root_p(t, "p99")
    rows = [
        r for r in t.get("retries") or [] if p99 and float(r.get("path_cost_ms_per_trace", 0.0)) >= PATTERN_SHARE * p99
    ]
    if not rows:
        return None
    return Finding(
        rule="retries",
        title="Retries on the critical path",
        symptom="requests wait for failed attempts before a retry succeeds",
        evidence=tuple(
            f"{r.get('op')}: {r.get('extra_attempts', 0)} extra attempts in {r.get('traces', 0)} traces, "
            f"{r.get('path_cost_ms_per_trace', 0):.0f} ms of critical path per affected trace"
            for r in rows[:3]
        ),
        cause="a dependency fails or times out intermittently; each retry adds its timeout to the latency",
        actions=(
            "fix the failing dependency first (error logs at the retry times)",
            "shorten timeouts before retrying; use hedged requests for idempotent calls",
            "cap retries with a budget and exponential backoff so retries do not amplify overload",
        ),
        impact=clip01(float(rows[0].get("path_cost_ms_per_trace", 0.0)) / p99) if p99 else 0.3,
    )
