"""HTML view of a what-if: the latency distributions before and after (CDFs drawn as inline SVG), the percentiles
with their intervals, the critical-path moves and, with ``--rank``, the ranked fixes and their greedy order.

A self-contained page in the style of the other reports; it draws the document :func:`tailscope.whatif` returns and
runs no script.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tailscope.report.html import _asset, _env

_W, _H, _PAD_L, _PAD_B, _PAD_T, _PAD_R = 720, 320, 64, 40, 16, 16


def _ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    span = hi - lo if hi > lo else 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + k * step for k in range(int((hi - first) / step) + 1)]


def cdf_svg(quantiles: Sequence[float], series: Mapping[str, Sequence[float]]) -> str:
    """Empirical CDFs (x: latency ms, y: share of traces) of each series as one SVG (``before`` grey, ``after`` red)."""
    values = [v for s in series.values() for v in s]
    if not values:
        return ""
    lo, hi = 0.0, max(values) * 1.02 or 1.0
    pw, ph = _W - _PAD_L - _PAD_R, _H - _PAD_T - _PAD_B

    def x(v: float) -> float:
        return _PAD_L + (v - lo) / (hi - lo) * pw

    def y(q: float) -> float:
        return _PAD_T + (1.0 - q) * ph

    colours = {"before": "#888", "after": "#c0392b"}
    parts = [f'<svg viewBox="0 0 {_W} {_H}" width="100%" role="img" aria-label="latency CDF before and after">']
    for t in _ticks(lo, hi):
        parts.append(f'<line x1="{x(t):.1f}" y1="{_PAD_T}" x2="{x(t):.1f}" y2="{_PAD_T + ph}" stroke="#eee"/>')
        parts.append(f'<text x="{x(t):.1f}" y="{_H - 22}" font-size="11" text-anchor="middle">{t:g}</text>')
    for q in (0.5, 0.95, 0.99):
        parts.append(f'<line x1="{_PAD_L}" y1="{y(q):.1f}" x2="{_PAD_L + pw}" y2="{y(q):.1f}" stroke="#ddd" '
                     'stroke-dasharray="3,3"/>')  # fmt: skip
        parts.append(f'<text x="{_PAD_L - 6}" y="{y(q) + 4:.1f}" font-size="11" text-anchor="end">p{q * 100:g}</text>')
    parts.append(f'<text x="{_PAD_L + pw / 2}" y="{_H - 4}" font-size="12" text-anchor="middle">latency (ms)</text>')
    for name, vals in series.items():
        pts = " ".join(f"{x(v):.1f},{y(q):.1f}" for q, v in zip(quantiles, vals, strict=True))
        parts.append(f'<polyline fill="none" stroke="{colours.get(name, "#333")}" stroke-width="2" points="{pts}"/>')
    for k, name in enumerate(series):
        parts.append(f'<text x="{_PAD_L + pw - 80}" y="{_PAD_T + ph - 30 + 16 * k}" font-size="12" '
                     f'fill="{colours.get(name, "#333")}">— {name}</text>')  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)


def render_whatif_page(doc: Mapping[str, Any], *, title: str | None = None) -> str:
    """The page of one what-if document (:meth:`tailscope.api.whatif.WhatIfResult.to_dict`)."""
    dist = doc.get("distribution") or {}
    svg = ""
    if dist and doc.get("changes"):
        svg = cdf_svg(dist["quantiles"], {"before": dist["before_ms"], "after": dist["after_ms"]})
    elif dist:
        svg = cdf_svg(dist["quantiles"], {"before": dist["before_ms"]})
    page_title = title or f"tailscope what-if {doc.get('set', '')}"
    template = _env().get_template("whatif.html.j2")
    return str(template.render(doc=doc, svg=svg, title=page_title, report_css=_asset("report.css")))
