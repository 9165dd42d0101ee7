"""A Grafana dashboard for a contract: one panel per golden signal, the contract's limits drawn as thresholds.

Panels query the recording rules of :mod:`tailscope.verify.alerts` (load both files together). The datasource is a
dashboard variable, so the JSON imports into any Grafana with a Prometheus datasource.
"""

from __future__ import annotations

from typing import Any

from tailscope.verify.alerts import GOLDEN_QUANTILES, HISTOGRAMS, quantile_record, series
from tailscope.verify.contract import Contract, percentile_label

_DS = {"type": "prometheus", "uid": "${datasource}"}


def _thresholds(limit: float | None, *, lower_is_bad: bool = False) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"color": "red" if lower_is_bad else "green", "value": None}]
    if limit is not None:
        steps.append({"color": "green" if lower_is_bad else "red", "value": limit})
    return {"mode": "absolute", "steps": steps}


def _panel(
    pid: int, title: str, targets: list[tuple[str, str]], unit: str, limit: float | None, *, lower_is_bad: bool = False
) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": _DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * ((pid - 1) % 2), "y": 8 * ((pid - 1) // 2)},
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "thresholds": _thresholds(limit, lower_is_bad=lower_is_bad),
                "custom": {"thresholdsStyle": {"mode": "line" if limit is not None else "off"}},
            },
            "overrides": [],
        },
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "datasource": _DS}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def dashboard(contract: Contract) -> dict[str, Any]:
    """The dashboard JSON (Grafana schema 39) for ``contract``."""
    limits: dict[tuple[str, str | None], float] = {}
    mins: dict[str, float] = {}
    for s in contract.slos:
        if s.request_class is not None:
            continue
        if s.max is not None:
            limits[(s.metric, s.percentile)] = s.max
        if s.min is not None:
            mins[s.metric] = s.min
    panels: list[dict[str, Any]] = []
    for metric, (_, short, _) in HISTOGRAMS.items():
        stats = set(GOLDEN_QUANTILES) if metric in ("ttft_ms", "e2e_ms") else set()
        stats |= {p for (m, p) in limits if m == metric and p not in (None, "mean", "max")}
        if not stats:
            continue
        ordered = sorted(stats, key=lambda p: float(p[1:].replace("999", "99.9")))
        targets = [(series(quantile_record(metric, p), contract), f"{short} {percentile_label(p)}") for p in ordered]
        limit = min((v / 1000.0 for (m, p), v in limits.items() if m == metric), default=None)
        panels.append(_panel(len(panels) + 1, f"{short.upper()} quantiles", targets, "s", limit))
    panels.append(
        _panel(
            len(panels) + 1,
            "Error ratio",
            [(series("tailscope:error_ratio", contract), "5xx / all")],
            "percentunit",
            limits.get(("error_rate", None)),
        )
    )
    rps_min = mins.get("requests_per_s", mins.get("goodput_rps"))
    panels.append(
        _panel(
            len(panels) + 1,
            "Throughput",
            [(series("tailscope:requests_per_s", contract), "requests/s")],
            "reqps",
            rps_min,
            lower_is_bad=True,
        )
    )
    panels.append(
        _panel(
            len(panels) + 1,
            "Output tokens/s",
            [(series("tailscope:output_tokens_per_s", contract), "tokens/s")],
            "short",
            mins.get("output_tokens_per_s"),
            lower_is_bad=True,
        )
    )
    panels.append(
        _panel(
            len(panels) + 1,
            "Saturation",
            [
                (series("tailscope:requests_waiting", contract), "waiting"),
                (series("tailscope:requests_running", contract), "running"),
                (series("tailscope:preemptions_per_s", contract), "preemptions/s"),
            ],
            "short",
            None,
        )
    )
    panels.append(
        _panel(
            len(panels) + 1,
            "KV-cache usage",
            [(series("tailscope:kv_cache_usage", contract), "kv usage")],
            "percentunit",
            0.9,
        )
    )
    return {
        "title": f"tailscope — {contract.name}",
        "uid": f"tailscope-{''.join(c if c.isalnum() else '-' for c in contract.name.lower())[:30]}",
        "tags": ["tailscope", "llm", "slo"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus", "hide": 0}
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }
