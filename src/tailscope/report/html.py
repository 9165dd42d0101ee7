"""Self-contained HTML reports: one run, a comparison of several, sweep curves — one file that works offline.

The page is rendered by jinja2 with autoescaping on. Numbers in tables and cards come straight from the run's summary
dict (the JSON export's ``summary``); each carries ``data-key``/``data-value`` so tests can check it against the
export. Chart data travels as one JSON document inside ``<script type="application/json">`` (``<``, ``>`` and ``&``
escaped, so user text cannot close the tag), read by the embedded script and drawn with the embedded plotly.js
(basic bundle, MIT, see ``templates/vendor/plotly-LICENSE.txt``). A Content-Security-Policy with a per-page nonce
forbids every network fetch and every script but the page's own.
"""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tailscope.errors import ConfigError
from tailscope.metrics.document import clean_json
from tailscope.records import RequestRecord, ServerSample
from tailscope.report import html_data as hd

_TEMPLATES = Path(__file__).parent / "templates"
#: Latency rows of the percentile table: label, summary key.
LATENCY_ROWS: tuple[tuple[str, str], ...] = (
    ("TTFT", "ttft_ms"),
    ("TPOT", "tpot_ms"),
    ("ITL", "itl_ms"),
    ("E2E", "e2e_ms"),
    ("max stall", "max_stall_ms"),
    ("send lag", "send_lag_ms"),
    ("TTFT from sent", "ttft_from_sent_ms"),
    ("E2E from sent", "e2e_from_sent_ms"),
)
STAT_COLUMNS: tuple[str, ...] = ("mean", "p50", "p90", "p95", "p99", "p999", "max", "count")


@dataclass(frozen=True, slots=True)
class ReportRun:
    """One run as the report reads it.

    Attributes:
        run: the export's ``run`` object (:func:`tailscope.metrics.document.run_to_json`).
        summary: the export's ``summary`` object (``RunSummary.to_dict()`` plus ``server``).
        records: every request record of the run.
        samples: scraped server samples.
        tags: the run's tags in the store.
    """

    run: Mapping[str, Any]
    summary: Mapping[str, Any]
    records: Sequence[RequestRecord] = ()
    samples: Sequence[ServerSample] = ()
    tags: Sequence[str] = field(default_factory=tuple)


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
    env.globals["LATENCY_ROWS"] = LATENCY_ROWS
    env.globals["STAT_COLUMNS"] = STAT_COLUMNS
    return env


def _run_label(run: Mapping[str, Any], tags: Sequence[str]) -> str:
    rid = str(run.get("id", "?"))
    return f"{rid} ({', '.join(tags)})" if tags else rid


def _per_turn(records: Sequence[RequestRecord]) -> dict[str, dict[str, Any]]:
    from tailscope.metrics.summary import summarize

    turns = sorted({r.turn for r in records if r.turn is not None})
    if len(turns) < 2:
        return {}
    return {str(t): summarize([r for r in records if r.turn == t], by_class=False).to_dict() for t in turns}


def _findings(item: ReportRun) -> list[dict[str, Any]]:
    """The diagnosis rules' findings for the run (``tailscope diagnose``), highest impact first."""
    try:
        from tailscope.verify.diagnose import diagnose
    except ImportError:  # the gate is optional for reports
        return []
    if not item.records:
        return []
    return [f.to_dict() for f in diagnose(item.records, item.samples, settings=item.run.get("settings") or {})]


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
    """The HTML report of one run (a complete, self-contained page; ``nav`` adds the dashboard's back link)."""
    data = {"mode": "run", "runs": [_chart_run(item, gantt=True)]}
    ctx = {
        "mode": "run",
        "title": f"tailscope run {item.run.get('id', '')}",
        "item": item,
        "per_turn": _per_turn(item.records),
        "findings": _findings(item),
        "classes": dict(item.summary.get("classes") or {}),
    }
    return _page("report.html.j2", ctx, data, nav=nav)


def _compare(items: Sequence[ReportRun], resamples: int, seed: int) -> dict[str, Any] | None:
    try:
        from tailscope.verify.compare import compare_runs
        from tailscope.verify.rundata import RunData
    except ImportError:  # the gate is optional for the report; without it differences are shown unmarked
        return None
    import numpy as np

    data = [
        RunData(id=str(i.run.get("id")), kind=str(i.run.get("kind", "bench")), records=tuple(i.records)) for i in items
    ]
    if any(not d.records for d in data):
        return None
    result = compare_runs(data, resamples=resamples, rng=np.random.default_rng(seed))
    doc: dict[str, Any] = result.to_dict()
    return doc


def sweep_points(items: Sequence[ReportRun]) -> dict[str, Any] | None:
    """Sweep curves when the runs share a ``sweep_id`` and differ in concurrency or rate (else ``None``).

    Returns:
        ``{"sweep_id", "param", "points": [{"run", "load", "out_tok_s", "rps", "ttft_p50", "ttft_p99",
        "e2e_p99"}], "knee": index or None, "slo": [{"metric", "threshold_ms"}]}``; points sorted by load, the knee
        found by :func:`tailscope.workload.sweep.find_knee` on output tok/s against TTFT p99.
    """
    from tailscope.workload.sweep import SweepPoint, find_knee

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
                "e2e_p99": lookup(s, "e2e_ms.p99"),
            }
        )
    points.sort(key=lambda p: p["load"])
    usable = [p for p in points if p["out_tok_s"] is not None and p["ttft_p99"] is not None]
    knee_i = find_knee([SweepPoint(p["load"], p["out_tok_s"], p["ttft_p99"]) for p in usable]) if usable else None
    knee = points.index(usable[knee_i]) if knee_i is not None else None
    slo = [
        {"metric": str(x.get("slo", "")), "threshold_ms": x.get("threshold_ms")}
        for x in (items[0].summary.get("slo") or [])
    ]
    return {"sweep_id": next(iter(ids)), "param": param, "points": points, "knee": knee, "slo": slo}


def render_compare_report(
    items: Sequence[ReportRun], *, resamples: int = 1000, seed: int = 0, nav: bool = False
) -> str:
    """The HTML comparison of two or more runs (the first is the reference), with sweep curves for a sweep.

    Raises:
        ConfigError: with fewer than two runs.
    """
    if len(items) < 2:
        raise ConfigError("a comparison needs at least two runs")
    cmp = _compare(items, resamples, seed)
    sweep = sweep_points(items)
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
        "cmp": cmp,
        "sweep": sweep,
    }
    return _page("report.html.j2", ctx, data, nav=nav)


def write_html(path: str | Path, html: str) -> Path:
    """Write a page, creating the folder.

    Raises:
        ConfigError: naming the path when it cannot be written.
    """
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(html, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write the HTML report ({exc.strerror})") from None
    return p


def write_html_report(
    path: str | Path,
    run_json: Mapping[str, Any],
    summary: Mapping[str, Any],
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample] = (),
    *,
    tags: Sequence[str] = (),
) -> Path:
    """Render one run's report and write it to ``path`` (what ``bench --html PATH`` calls).

    Args:
        path: the output file.
        run_json: :func:`tailscope.metrics.document.run_to_json` of the run.
        summary: the summary dict, as exported (``RunSummary.to_dict()`` plus ``server``).
        records: the run's request records.
        samples: the run's scraped server samples.
        tags: tags to show.
    """
    return write_html(path, render_run_report(ReportRun(run_json, summary, records, samples, tuple(tags))))
