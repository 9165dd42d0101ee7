"""The runs trend: a console table and a self-contained HTML page (inline SVG charts, no scripts) with the change
points marked (consumes the prepared :class:`~tailscope.metrics.trend.RunsTrend` only)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from tailscope.metrics.trend import RunsTrend
from tailscope.units import format_ms

_LABELS = (
    ("ttft_ms.p50", "TTFT p50"),
    ("ttft_ms.p99", "TTFT p99"),
    ("tpot_ms.p50", "TPOT p50"),
    ("tpot_ms.p99", "TPOT p99"),
)


def _tokens(v: float | None) -> str:
    if v is None:
        return "—"
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= div:
            return f"{v / div:,.2f}{unit}"
    return f"{v:,.0f}"


def print_trend(con: Console, trend: RunsTrend) -> None:
    """One row per run (oldest first, ▲/▼ where a series steps), the change points, and the tokens per day."""
    if not trend.points:
        con.print("no runs match (see --tag, --since, --kind)")
        return
    t = Table(show_edge=False, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    t.add_column("run", no_wrap=True)
    t.add_column("started", no_wrap=True)
    for _, name in _LABELS:
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("tokens", justify="right", no_wrap=True)
    t.add_column("tags")
    steps = {(c.index, c.series): c for c in trend.change_points}
    for i, p in enumerate(trend.points):
        cells = []
        for label, _ in _LABELS:
            v = p.values.get(label)
            c = steps.get((i, label))
            mark = "" if c is None else (" ▲" if c.after > c.before else " ▼")
            cells.append(("—" if v is None else format_ms(v)) + mark)
        tokens = (
            None
            if p.input_tokens is None and p.output_tokens is None
            else (p.input_tokens or 0) + (p.output_tokens or 0)
        )
        t.add_row(p.run_id, p.started_at[:16].replace("T", " "), *cells, _tokens(tokens), ", ".join(p.tags))
    con.print(t)
    if trend.change_points:
        con.print("[bold]change points[/]")
        for c in trend.change_points:
            con.print(f"  {'▲' if c.after > c.before else '▼'} {c.describe()}", highlight=False)
    else:
        con.print("no change points (no step beyond the runs' noise)")
    if trend.daily:
        d = Table(title="tokens per day", title_justify="left", show_edge=False, header_style="bold",
                  box=box.SIMPLE_HEAD, pad_edge=False)  # fmt: skip
        for name in ("day", "runs", "input", "output", "total"):
            d.add_column(name, justify="left" if name == "day" else "right")
        for day in trend.daily:
            d.add_row(day.day, str(day.runs), _tokens(day.input_tokens), _tokens(day.output_tokens),
                      _tokens(day.total_tokens))  # fmt: skip
        con.print(d)
    con.print(f"[dim]method: {trend.method}[/]", highlight=False)


# -- HTML -------------------------------------------------------------------------------------------------------------

_W, _H, _PAD = 860, 220, 48
_COLORS = {"p50": "#2b6cb0", "p99": "#c05621"}


def _chart(title: str, labels: Sequence[str], trend: RunsTrend) -> str:
    n = len(trend.points)
    series = {label: trend.series(label) for label in labels}
    vals = [v for vs in series.values() for v in vs if v is not None]
    if not vals:
        return f"<h2>{html.escape(title)}</h2><p>no data</p>"
    top = max(vals) * 1.1 or 1.0

    def x(i: int) -> float:
        return _PAD + (i * (_W - 2 * _PAD) / max(n - 1, 1))

    def y(v: float) -> float:
        return _H - _PAD / 2 - v / top * (_H - _PAD)

    parts = [f'<svg viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" aria-label="{html.escape(title)}">']
    parts.append(f'<line x1="{_PAD}" y1="{y(0):.1f}" x2="{_W - _PAD}" y2="{y(0):.1f}" stroke="#999"/>')
    for frac in (0.5, 1.0):
        tick = top / 1.1 * frac
        parts.append(
            f'<text x="4" y="{y(tick) + 4:.1f}" font-size="11" fill="#555">{html.escape(format_ms(tick))}</text>'
        )
        parts.append(f'<line x1="{_PAD}" y1="{y(tick):.1f}" x2="{_W - _PAD}" y2="{y(tick):.1f}" stroke="#eee"/>')
    for c in trend.change_points:
        if c.series in labels:
            parts.append(
                f'<line x1="{x(c.index):.1f}" y1="{_PAD / 4}" x2="{x(c.index):.1f}" y2="{y(0):.1f}" stroke="#c53030" '
                f'stroke-dasharray="4 3"><title>{html.escape(c.describe())}</title></line>'
            )
    for label, s in series.items():
        color = _COLORS["p99" if label.endswith("p99") else "p50"]
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(s) if v is not None)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>')
        for i, v in enumerate(s):
            if v is not None:
                run = trend.points[i]
                tip = f"{run.run_id} {run.started_at[:16]} {label} {format_ms(v)}"
                parts.append(
                    f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{color}"><title>{html.escape(tip)}</title>'
                    "</circle>"
                )
    legend = " · ".join(
        f'<span style="color:{_COLORS["p99" if lb.endswith("p99") else "p50"]}">{html.escape(lb)}</span>'
        for lb in labels
    )
    parts.append("</svg>")
    return (
        f"<h2>{html.escape(title)}</h2><p>{legend} · <span style='color:#c53030'>┆ change point</span></p>"
        + "".join(parts)
    )


def render_trend_html(trend: RunsTrend) -> str:
    """A self-contained page: TTFT and TPOT charts (p50, p99) with change points, the change list and tokens/day."""
    rows = "".join(
        f"<tr><td>{html.escape(p.run_id)}</td><td>{html.escape(p.started_at[:16].replace('T', ' '))}</td>"
        + "".join(
            f"<td>{'—' if p.values.get(lb) is None else html.escape(format_ms(p.values.get(lb)))}"
            + ("&nbsp;⚑" if lb in p.changes else "")
            + "</td>"
            for lb, _ in _LABELS
        )
        + f"<td>{html.escape(', '.join(p.tags))}</td></tr>"
        for p in trend.points
    )
    changes = "".join(f"<li>{html.escape(c.describe())}</li>" for c in trend.change_points) or "<li>none</li>"
    daily = "".join(
        f"<tr><td>{d.day}</td><td>{d.runs}</td><td>{_tokens(d.input_tokens)}</td><td>{_tokens(d.output_tokens)}</td>"
        f"<td>{_tokens(d.total_tokens)}</td></tr>"
        for d in trend.daily
    )
    head = "".join(f"<th>{name}</th>" for _, name in _LABELS)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>tailscope runs trend</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
        "td,th{padding:2px 10px;text-align:right;border-bottom:1px solid #eee}td:first-child,th:first-child"
        "{text-align:left}</style></head><body><h1>Runs trend</h1>"
        f"<p>{len(trend.points)} runs; filters: {html.escape(str({k: v for k, v in trend.filters.items() if v}))}</p>"
        + _chart("TTFT", ("ttft_ms.p50", "ttft_ms.p99"), trend)
        + _chart("TPOT", ("tpot_ms.p50", "tpot_ms.p99"), trend)
        + f"<h2>Change points</h2><ul>{changes}</ul>"
        + f"<h2>Runs</h2><table><tr><th>run</th><th>started</th>{head}<th>tags</th></tr>{rows}</table>"
        + "<h2>Tokens per day</h2><table><tr><th>day</th><th>runs</th><th>input</th><th>output</th><th>total</th></tr>"
        + f"{daily}</table><p><small>method: {html.escape(trend.method)}</small></p></body></html>"
    )
