"""HTML report of a trace set (analysis) or of two sets (diff), in the same self-contained page style as run reports.

Shows the root operations' latency, the critical-path layer shares at the median and in the tail, the operations, the
waterfall patterns with their projected savings, retries, and a waterfall (Gantt) of a chosen trace — the slowest and
the median one — with its critical path highlighted. With a second set, the diff's explanations and layer deltas.
Numbers are those of :func:`tailscope.trace.analysis.analyze_facts` and :func:`tailscope.trace.diff.diff_sets`.
"""

from __future__ import annotations

from typing import Any

from tailscope.records import Span
from tailscope.report.html import _page
from tailscope.store.db import Database

#: Spans drawn per trace waterfall at most (the first ones in depth-first order).
MAX_WATERFALL_SPANS = 400


def _preorder(children: tuple[tuple[int, ...], ...], roots: tuple[int, ...]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    stack = [(r, 0) for r in reversed(roots)]
    while stack:
        i, d = stack.pop()
        out.append((i, d))
        stack.extend((c, d + 1) for c in reversed(children[i]))
    return out


def trace_waterfall(spans: list[Span], label: str) -> dict[str, Any]:
    """One trace as rows for the waterfall chart: spans depth-first (ms from the trace start) and the critical path.

    Returns:
        ``{"trace_id", "label", "duration_ms", "rows": [{"name", "service", "layer", "depth", "start_ms", "end_ms",
        "span_id"}], "path": [{"row", "start_ms", "end_ms"}], "truncated": bool}``.
    """
    from tailscope.trace.critical_path import critical_path
    from tailscope.trace.facts import span_layers
    from tailscope.trace.tree import build_tree

    tree = build_tree(spans)
    layers = span_layers(tree)
    order = _preorder(tree.children, tree.roots)
    truncated = len(order) > MAX_WATERFALL_SPANS
    order = order[:MAX_WATERFALL_SPANS]
    t0 = min((s.start_ns for s in tree.spans), default=0)
    row_of: dict[str, int] = {}
    rows = []
    for k, (i, depth) in enumerate(order):
        s = tree.spans[i]
        row_of[s.span_id] = k
        rows.append(
            {
                "span_id": s.span_id,
                "name": s.name,
                "service": s.service,
                "layer": layers[i],
                "depth": depth,
                "start_ms": (s.start_ns - t0) / 1e6,
                "end_ms": (s.end_ns - t0) / 1e6,
            }
        )
    cp = critical_path(tree)
    path = [
        {"row": row_of[seg.span_id], "start_ms": (seg.start_ns - t0) / 1e6, "end_ms": (seg.end_ns - t0) / 1e6}
        for seg in cp.segments
        if seg.span_id in row_of
    ]
    return {
        "trace_id": tree.trace_id,
        "label": label,
        "duration_ms": tree.duration_ns / 1e6,
        "rows": rows,
        "path": path,
        "truncated": truncated,
    }


def render_trace_report(db: Database, set_name: str, after: str | None = None, *, nav: bool = False) -> str:
    """The HTML report of one trace set, or of the diff ``set_name`` → ``after``.

    Raises:
        NotFoundError: when a set is not in the store.
    """
    from tailscope.store.spans import SpanStore
    from tailscope.trace.analysis import analyze_facts
    from tailscope.trace.diff import diff_sets
    from tailscope.trace.ingest.sets import set_facts

    store = SpanStore(db)
    info = store.get_set(set_name)
    facts = set_facts(store, set_name)
    diff = None
    shown = set_name
    if after is not None:
        store.get_set(after)
        facts_after = set_facts(store, after)
        diff = diff_sets(facts, facts_after)
        facts, shown = facts_after, after
    analysis = analyze_facts(facts)
    chosen: list[tuple[str, str]] = []
    if facts:
        ordered = sorted(facts, key=lambda f: (f.duration_ns, f.trace_id))
        chosen.append((ordered[-1].trace_id, "slowest"))
        median = ordered[len(ordered) // 2]
        if median.trace_id != ordered[-1].trace_id:
            chosen.append((median.trace_id, "median"))
    waterfalls = []
    for trace_id, label in chosen:
        _, spans = store.load_trace(shown, trace_id)
        waterfalls.append(trace_waterfall(spans, f"{label} trace {trace_id}"))
    layers = {
        bucket: {name: v.get("share", 0.0) for name, v in (b.get("composition") or {}).items()}
        for bucket, b in analysis["layers"].items()
    }
    data = {"mode": "traces", "runs": [], "layers": layers, "waterfalls": waterfalls, "diff": diff}
    title = f"tailscope trace set {set_name}" if after is None else f"tailscope trace diff {set_name} → {after}"
    ctx = {
        "mode": "traces",
        "title": title,
        "set_info": info,
        "shown": shown,
        "analysis": analysis,
        "diff": diff,
        "before": set_name if after is not None else None,
    }
    return _page("traces.html.j2", ctx, data, nav=nav)
