"""Console tables for sweeps and capacity searches (consume the JSON-able outcome dicts only)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tailscope.units import format_ms


def _rate(x: float | None) -> str:
    return "—" if x is None else f"{x:,.2f}"


def _load(param: str, v: float) -> str:
    return f"{v:g}" if param == "concurrency" else f"{v:.3g}"


def points_table(rows: list[dict[str, Any]], *, title: str, knee: int | None = None, verdicts: bool = False) -> Table:
    """One row per point: throughput, goodput and latency percentiles (ms); the knee row is marked.

    Run ids are left out to fit 80 columns; :func:`run_ids_line` lists them.
    """
    param = rows[0]["param"] if rows else "load"
    t = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    cols = [
        "conc." if param == "concurrency" else param,
        "ok/fail",
        "req/s",
        "tok/s",
        "goodput",
        "TTFT p50",
        "TTFT p99",
        "TPOT p99",
        "E2E p99",
    ]
    cols.append("verdict" if verdicts else "note")
    for c in cols:
        t.add_column(c, justify="left" if c in ("note", "verdict") else "right")
    for i, r in enumerate(rows):
        if verdicts:
            note = "[green]pass[/]" if r.get("passed") else f"[red]fail[/] {r.get('reason') or ''}".rstrip()
        else:
            note = "[bold cyan]← knee[/]" if knee == i else ""
            if r.get("saturated"):
                note = (note + " saturated").strip()
        t.add_row(
            _load(param, r["load"]),
            f"{r['completed']}/{r['failed']}",
            _rate(r["requests_per_s"]),
            _rate(r["output_tokens_per_s"]),
            _rate(r["goodput_rps"]),
            format_ms(r["ttft_p50_ms"]),
            format_ms(r["ttft_p99_ms"]),
            format_ms(r["tpot_p99_ms"]),
            format_ms(r["e2e_p99_ms"]),
            note,
        )
    return t


def run_ids_line(rows: list[dict[str, Any]], sweep_id: str) -> Text:
    """The stored run of each point (``tailscope runs show ID``)."""
    ids = ", ".join(f"{r['load']:g}→{r['run_id']}" for r in rows)
    return Text(f"runs of sweep {sweep_id}: {ids}", style="dim")


def sweep_renderable(outcome: dict[str, Any]) -> Group:
    """``SweepOutcome.to_dict()`` as a table plus a knee line."""
    rows = outcome["points"]
    knee = outcome.get("knee")
    t = points_table(rows, title=f"Sweep {outcome['sweep_id']} over {outcome['param']}", knee=knee and knee["index"])
    if knee is None:
        line = Text("no knee: latency never rose faster than throughput over these points")
    else:
        line = Text(
            f"knee at {outcome['param']} = {knee['load']:g}: beyond it latency (E2E p50) rises faster than "
            "throughput (requests/s)",
            style="bold",
        )
    parts: list[Any] = [t, line, run_ids_line(rows, outcome["sweep_id"])]
    if outcome.get("interrupted"):
        parts.append(Text("sweep interrupted: the table holds the points measured so far", style="yellow"))
    if outcome.get("stopped"):
        parts.append(Text(f"sweep stopped: {outcome['stopped']}", style="red"))
    return Group(*parts)


def find_max_renderable(outcome: dict[str, Any]) -> Group:
    """``FindMaxOutcome.to_dict()``: every probe in order, then the answer with its uncertainty."""
    t = points_table(outcome["probes"], title=f"Capacity search {outcome['sweep_id']} (probes in order)", verdicts=True)
    style = "bold green" if outcome.get("rate") is not None else "bold red"
    parts: list[Any] = [
        t,
        Text(outcome["description"], style=style),
        run_ids_line(outcome["probes"], outcome["sweep_id"]),
    ]
    if outcome.get("interrupted"):
        parts.append(Text("search interrupted: no answer", style="yellow"))
    return Group(*parts)


def repeat_renderable(doc: dict[str, Any]) -> Group:
    """Repeated runs of one bench: each run's headline figures, their spread, and the precision reached."""
    t = Table(title=f"{len(doc['runs'])} runs of the same workload", title_justify="left", show_edge=False,
              header_style="bold")  # fmt: skip
    for c in ("figure", "median", "min", "max", "spread"):
        t.add_column(c, justify="left" if c == "figure" else "right")
    for key, v in doc["across"].items():
        ms = key.endswith(("p50", "p90", "p99"))
        fmt = format_ms if ms else _rate
        spread = "—"
        if v["median"] and v["min"] is not None and v["max"] is not None:
            spread = f"±{(v['max'] - v['min']) / 2 / v['median']:.1%}"
        t.add_row(key, fmt(v["median"]), fmt(v["min"]), fmt(v["max"]), spread)
    parts: list[Any] = [t, Text("runs: " + ", ".join(doc["runs"]), style="dim")]
    p = doc.get("precision")
    if p:
        rel = p["rel_half_width"]
        state = "[green]met[/]" if p["met"] else "[red]not met[/]"
        parts.append(
            Text.from_markup(
                f"precision {p['target']}: {format_ms(p['estimate'])} (95 % interval {format_ms(p['low'])}–"
                f"{format_ms(p['high'])}, ±{'—' if rel is None else f'{rel:.1%}'}) over {p['samples']:,} pooled "
                f"samples — {state} ({doc['stopped']})"
            )
        )
    return Group(*parts)
