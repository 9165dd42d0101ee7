"""HTML report of a trace set (analysis) or of two sets (diff), in the same self-contained page style as run reports.

Shows the root operations' latency, the critical-path layer shares at the median and in the tail, the operations, the
waterfall patterns with their projected savings, retries, and a waterfall (Gantt) of chosen traces — the slowest and
the median one — with their critical paths highlighted. With a second set, the diff's explanations and layer deltas.
The numbers are prepared by the caller (:func:`tailscope.report_html` reads the store and runs
:func:`tailscope.trace.analysis.analyze_facts` and :func:`tailscope.trace.diff.diff_sets`); this module only draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tailscope.report.html import _page


@dataclass(frozen=True, slots=True)
class TraceReport:
    """What a trace-set page shows.

    Attributes:
        set_info: the set as the store describes it (``name``, ``source``, ``updated_at``, …).
        shown: the set the analysis is of (the "after" set of a diff).
        analysis: :func:`tailscope.trace.analysis.analyze_facts` of ``shown``.
        waterfalls: trace waterfalls (:func:`tailscope.api._pages.trace_waterfall`), slowest first.
        diff: :func:`tailscope.trace.diff.diff_sets` of before → after, or None for one set.
        before: the "before" set of a diff (None for one set).
    """

    set_info: Any
    shown: str
    analysis: Mapping[str, Any]
    waterfalls: Sequence[Mapping[str, Any]] = ()
    diff: Mapping[str, Any] | None = None
    before: str | None = None


def render_trace_report(page: TraceReport, *, nav: bool = False) -> str:
    """The HTML report of one trace set, or of a diff (``page.before`` → ``page.shown``)."""
    analysis = page.analysis
    layers = {
        bucket: {name: v.get("share", 0.0) for name, v in (b.get("composition") or {}).items()}
        for bucket, b in analysis["layers"].items()
    }
    data = {"mode": "traces", "runs": [], "layers": layers, "waterfalls": list(page.waterfalls), "diff": page.diff}
    name = page.before if page.before is not None else page.shown
    title = f"tailscope trace set {name}" if page.before is None else f"tailscope trace diff {name} → {page.shown}"
    ctx = {
        "mode": "traces",
        "title": title,
        "set_info": page.set_info,
        "shown": page.shown,
        "analysis": analysis,
        "diff": page.diff,
        "before": page.before,
    }
    return _page("traces.html.j2", ctx, data, nav=nav)
