"""What a report page shows that is computed, not drawn: the diagnosis of a run, its per-turn summaries, the bootstrap
comparison of several runs, a sweep's curve and knee, and a trace's waterfall rows with its critical path.

The renderers of :mod:`tailscope.report` receive these prepared models and only draw them. Everything here is pure
(records, summaries and spans in; JSON-ready dicts and :class:`~tailscope.report.html.ReportRun` out): it reads no
store and no file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from tailscope.metrics.document import clean_json
from tailscope.metrics.server import summarize_server
from tailscope.metrics.sessions import rebuilt_session_summary
from tailscope.metrics.summary import summarize
from tailscope.records import RequestRecord, Span
from tailscope.report.html import ReportRun, lookup
from tailscope.trace.critical_path import critical_path
from tailscope.trace.facts import span_layers
from tailscope.trace.tree import build_tree
from tailscope.verify.compare import compare_runs
from tailscope.verify.diagnose import diagnose
from tailscope.verify.rundata import RunData
from tailscope.workload.sweep import knee_of

#: Spans drawn per trace waterfall at most (the first ones in depth-first order).
MAX_WATERFALL_SPANS = 400


def run_item(data: RunData) -> ReportRun:
    """A run as its report page shows it: the summary (computed when none was stored), findings and turns."""
    summary: dict[str, Any]
    if data.summary:
        summary = dict(data.summary)
    else:  # a run still going, one that crashed before it was summarised, or an export without a summary
        summary = summarize(data.records).to_dict()
        summary["server"] = summarize_server(data.samples)
        if (sessions := rebuilt_session_summary(data.records, data.settings or {})) is not None:
            summary["sessions"] = sessions
    run = dict(data.run) if data.run else {"id": data.id, "kind": data.kind}
    item = ReportRun(run, clean_json(summary), data.records, data.samples, data.tags)
    return with_findings(item, settings=data.settings)


def with_findings(item: ReportRun, *, settings: Mapping[str, Any] | None = None) -> ReportRun:
    """``item`` with its diagnosis (``tailscope diagnose``'s findings, highest impact first) and per-turn summaries."""
    settings = settings if settings is not None else (item.run.get("settings") or {})
    found = diagnose(item.records, item.samples, settings=settings) if item.records else []
    return replace(item, findings=tuple(f.to_dict() for f in found), per_turn=per_turn(item.records))


def per_turn(records: Sequence[RequestRecord]) -> dict[str, dict[str, Any]]:
    """Summaries per session turn (``{"0": summary, "1": …}``) when the run has two turns or more, else ``{}``.

    Conversations only: a call-graph session's ``turn`` (an agent's, a trace → load replay's) is the call's index in
    dispatch order, not a turn of a conversation, so such a run has no turn table (its steps are told by name)."""
    if any(r.step is not None or r.depends_on for r in records):
        return {}
    turns = sorted({r.turn for r in records if r.turn is not None})
    if len(turns) < 2:
        return {}
    return {str(t): summarize([r for r in records if r.turn == t], by_class=False).to_dict() for t in turns}


def comparison(items: Sequence[ReportRun], *, resamples: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """The bootstrap comparison of the runs against the first (``tailscope compare``'s JSON), or None when a run
    has no records to resample (the page then shows the differences unmarked)."""
    data = [
        RunData(id=str(i.run.get("id")), kind=str(i.run.get("kind", "bench")), records=tuple(i.records)) for i in items
    ]
    if any(not d.records for d in data):
        return None
    doc: dict[str, Any] = compare_runs(data, resamples=resamples, rng=np.random.default_rng(seed)).to_dict()
    return doc


def sweep_points(items: Sequence[ReportRun]) -> dict[str, Any] | None:
    """Sweep curves when the runs share a ``sweep_id`` and differ in concurrency or rate (else ``None``).

    Returns:
        ``{"sweep_id", "param", "points": [{"run", "load", "out_tok_s", "rps", "ttft_p50", "ttft_p99",
        "e2e_p99"}], "knee": index or None, "slo": [{"metric", "threshold_ms"}]}``; points sorted by load, the knee
        found by :func:`tailscope.workload.sweep.knee_of` (requests/s against E2E p50, as on the console).
    """
    ids = {i.run.get("sweep_id") for i in items}
    if len(items) < 2 or len(ids) != 1 or None in ids:
        return None
    param = None
    for name in ("concurrency", "rate"):
        vals = [(i.run.get("settings") or {}).get(name) for i in items]
        if all(isinstance(v, int | float) for v in vals) and len(set(vals)) > 1:
            param = name
            break
    if param is None:
        return None
    points = []
    for i in items:
        s = i.summary
        points.append(
            {
                "run": i.run.get("id"),
                "load": float((i.run.get("settings") or {})[param]),
                "out_tok_s": lookup(s, "output_tokens_per_s"),
                "rps": lookup(s, "requests_per_s"),
                "ttft_p50": lookup(s, "ttft_ms.p50"),
                "ttft_p99": lookup(s, "ttft_ms.p99"),
                "e2e_p50": lookup(s, "e2e_ms.p50"),
                "e2e_p99": lookup(s, "e2e_ms.p99"),
            }
        )
    points.sort(key=lambda p: p["load"])
    knee = knee_of([(p["load"], p["rps"], p["e2e_p50"]) for p in points])
    slo = [
        {"metric": str(x.get("slo", "")), "threshold_ms": x.get("threshold_ms")}
        for x in (items[0].summary.get("slo") or [])
    ]
    return {"sweep_id": next(iter(ids)), "param": param, "points": points, "knee": knee, "slo": slo}


def _preorder(children: Sequence[Sequence[int]], roots: Sequence[int]) -> list[tuple[int, int]]:
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
