"""Self-contained HTML reports: one run, a comparison of several, sweep curves — one file that works offline.

The page is rendered by jinja2 with autoescaping on. Numbers in tables and cards come straight from the run's summary
dict (the JSON export's ``summary``); each carries ``data-key``/``data-value`` so tests can check it against the
export. Chart data travels as one JSON document inside ``<script type="application/json">`` (``<``, ``>`` and ``&``
escaped, so user text cannot close the tag), read by the embedded script and drawn with the embedded plotly.js
(basic bundle, MIT, see ``templates/vendor/plotly-LICENSE.txt``). A Content-Security-Policy with a per-page nonce
forbids every network fetch and every script but the page's own.

The renderers draw the model they are given: a run's findings and per-turn summaries, a comparison's bootstrap marks
and a sweep's knee are prepared by the library (:func:`tailscope.report_html`, :mod:`tailscope.api._pages`).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailscope.errors import ConfigError
from tailscope.files import write_text
from tailscope.metrics.document import clean_json
from tailscope.records import RequestRecord, ServerSample
from tailscope.report import html_data as hd
from tailscope.report.stat_table import FROM_SENT_ROWS, LATENCY_ROWS, STAT_COLUMNS

_TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True, slots=True)
class ReportRun:
    """One run as the report reads it.

    Attributes:
        run: the export's ``run`` object (:func:`tailscope.metrics.document.run_to_json`).
        summary: the export's ``summary`` object (``RunSummary.to_dict()`` plus ``server``).
        records: every request record of the run.
        samples: scraped server samples.
        tags: the run's tags in the store.
        findings: the run's diagnosis (``Finding.to_dict()`` of each finding, highest impact first), prepared by the
            caller (:func:`tailscope.write_report`); empty: no findings section.
        per_turn: summaries per session turn (``{"0": summary, …}``), prepared by the caller; empty: no turn table.
        join: the run joined with a trace set (``tailscope trace join --json``'s document, ``per_request`` left out),
            prepared by the caller (``report RUN --traces SET``); empty: no "client and tree" section.
    """

    run: Mapping[str, Any]
    summary: Mapping[str, Any]
    records: Sequence[RequestRecord] = ()
    samples: Sequence[ServerSample] = ()
    tags: Sequence[str] = field(default_factory=tuple)
    findings: Sequence[Mapping[str, Any]] = ()
    per_turn: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    join: Mapping[str, Any] = field(default_factory=dict)


def fmt_num(v: Any) -> str:
    """How a number is shown: ``—`` when undefined, thousands separators from 1,000, else 3 significant-ish digits."""
    if v is None or isinstance(v, bool):
        return "—" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    x = float(v)
    if x != x:
        return "—"
    if x in (float("inf"), float("-inf")):
        return "∞" if x > 0 else "-∞"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def lookup(summary: Mapping[str, Any], key: str) -> Any:
    """A summary value by dotted key (``ttft_ms.p99``, ``requests.failed``); ``None`` when absent."""
    cur: Any = summary
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _data_json(data: Any) -> str:
    text = json.dumps(clean_json(data), separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


@functools.cache
def _asset(name: str) -> str:
    return (_TEMPLATES / name).read_text(encoding="utf-8")


@functools.cache
def _env() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = fmt_num
    env.filters["pct"] = lambda v: "—" if v is None else f"{100.0 * float(v):.1f} %"
    env.globals["lookup"] = lookup
    env.globals["LATENCY_ROWS"] = (*LATENCY_ROWS, *FROM_SENT_ROWS)
    env.globals["STAT_COLUMNS"] = STAT_COLUMNS
    return env


def _run_label(run: Mapping[str, Any], tags: Sequence[str]) -> str:
    rid = str(run.get("id", "?"))
    return f"{rid} ({', '.join(tags)})" if tags else rid


def _chart_run(item: ReportRun, *, gantt: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": item.run.get("id"),
        "label": _run_label(item.run, item.tags),
        "charts": hd.latency_charts(item.records),
        "series": hd.time_series(item.records, item.samples),
        "summary": item.summary,
    }
    if gantt:
        out["gantt"] = hd.gantt_sample(item.records)
    # a simulation's replica/autoscaler timeline joins the scraped server series on the same time axis
    # (newer sims store that timeline as server samples too: then only the scale events are added)
    sim_rows = hd.sim_series(item.summary.get("sim"), events_only=bool(item.samples))
    out["series"]["server"] = sim_rows + out["series"]["server"]
    return out


def _page(template: str, context: dict[str, Any], data: dict[str, Any], *, nav: bool = False) -> str:
    nonce = secrets.token_urlsafe(16)
    return str(
        _env()
        .get_template(template)
        .render(
            **context,
            nav=nav,
            nonce=nonce,
            data_json=_data_json(data),
            plotly_js=_asset("vendor/plotly-basic.min.js"),
            report_js=_asset("report.js"),
            report_css=_asset("report.css"),
        )
    )


def render_run_report(item: ReportRun, *, nav: bool = False) -> str:
    """The HTML report of one run (a complete, self-contained page; ``nav`` adds the dashboard's back link).

    Draws ``item`` as given: its findings and per-turn summaries are prepared by the caller.
    """
    data = {"mode": "run", "runs": [_chart_run(item, gantt=True)]}
    ctx = {
        "mode": "run",
        "title": f"tailscope run {item.run.get('id', '')}",
        "item": item,
        "per_turn": dict(item.per_turn),
        "findings": list(item.findings),
        "classes": dict(item.summary.get("classes") or {}),
        "join": dict(item.join),
    }
    return _page("report.html.j2", ctx, data, nav=nav)


def render_compare_page(
    items: Sequence[ReportRun],
    *,
    comparison: Mapping[str, Any] | None = None,
    sweep: Mapping[str, Any] | None = None,
    nav: bool = False,
) -> str:
    """The HTML comparison of two or more runs (the first is the reference).

    Args:
        items: the runs.
        comparison: the bootstrap comparison (``tailscope compare``'s JSON) that marks significant differences;
            None: the differences are shown unmarked.
        sweep: the sweep's curve and knee (:func:`tailscope.api._pages.sweep_points`); None: no sweep section.
        nav: add the dashboard's back link.

    Raises:
        ConfigError: with fewer than two runs.
    """
    if len(items) < 2:
        raise ConfigError("a comparison needs at least two runs")
    runs = [_chart_run(i, gantt=False) for i in items]
    labels = [_run_label(i.run, i.tags) for i in items]
    if sweep is not None:  # in a sweep the swept value tells the runs apart better than their ids
        loads = {p["run"]: p["load"] for p in sweep["points"]}
        labels = [
            f"{sweep['param']}={loads[i.run.get('id')]:g} · {label}" for i, label in zip(items, labels, strict=True)
        ]
    for r, label in zip(runs, labels, strict=True):
        r["label"] = label
    data = {"mode": "compare", "runs": runs, "sweep": sweep}
    ctx = {
        "mode": "compare",
        "title": "tailscope comparison of " + ", ".join(str(i.run.get("id")) for i in items),
        "items": list(items),
        "labels": labels,
        "cmp": comparison,
        "sweep": sweep,
    }
    return _page("report.html.j2", ctx, data, nav=nav)


def render_run_index(
    rows: Sequence[Mapping[str, Any]],
    trace_sets: Sequence[Any],
    *,
    store: str,
    exists: bool,
    kind: str = "",
    tag: str = "",
    q: str = "",
    limit: int = 500,
) -> str:
    """The dashboard's list page: one row per run (``{"run": Run, "tags", "summary", "finished_at"}``), newest first,
    and the store's trace sets (objects with ``name``, ``source``, ``updated_at``, ``spans``, ``traces``)."""
    return str(
        _env()
        .get_template("dashboard.html.j2")
        .render(
            rows=rows,
            kind=kind,
            tag=tag,
            q=q,
            store=store,
            exists=exists,
            limit=limit,
            trace_sets=trace_sets,
            lookup=lookup,
            fmt=fmt_num,
        )
    )


def write_html(path: str | os.PathLike[str], html: str) -> Path:
    """Write a page, creating the folder.

    Raises:
        ConfigError: naming the path when it cannot be written.
    """
    write_text(path, html, "--html")
    return Path(path)
