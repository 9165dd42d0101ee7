"""Console renderers of the digital twin: a fitted twin (:func:`tailscope.calibrate`) and a check of its prediction
against a measurement (:func:`tailscope.twin_check`). They compute nothing."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tailscope.engine.twin import TwinModel


def print_twin(con: Console, twin: TwinModel, path: Path | None, notes: Mapping[str, str]) -> None:
    """The fitted coefficients with their standard errors, the server's facts, the fit's residuals and notes."""
    t = Table(title=f"digital twin of {twin.facts.url or twin.facts.model}", title_justify="left", show_edge=False)
    t.add_column("coefficient")
    t.add_column("fitted", justify="right")
    t.add_column("± stderr", justify="right")
    c, s = twin.coefficients.to_dict(), twin.stderr.to_dict()
    for k, v in c.items():
        t.add_row(k, f"{v:,.2f} µs", f"{s[k]:,.2f}")
    con.print(t)
    f = twin.facts
    con.print(
        f"server: KV {f.num_blocks:,} blocks × {f.block_size} = {f.kv_capacity_tokens:,} tokens, max_num_seqs "
        f"{f.max_num_seqs}, max_model_len {f.max_model_len}, prefix caching {f.enable_prefix_caching}"
    )
    r = twin.residuals
    con.print(
        f"fit residuals: decode median |err| {r.get('decode_rel_mad', 0):.1%}, "
        f"prefill {r.get('prefill_rel_mad', 0):.1%}"
        f" ({twin.fitted_on.get('decode_observations')} decode, {twin.fitted_on.get('prefill_observations')} prefill"
        f", {twin.fitted_on.get('loaded_ttft_observations')} loaded-TTFT observations)"
    )
    if twin.send_lag is not None:
        q = twin.send_lag.quantiles_ms
        con.print(
            f"client send lag (open loop, added to predicted arrivals): median {q[len(q) // 2]:.2f} ms, "
            f"max {q[-1]:.2f} ms"
        )
    for name, note in notes.items():
        con.print(f"{name}: {note}")
    if path is not None:
        con.print(f"wrote {path}")


#: a steady-decode ratio outside [1 / this, this] is called out as the server's speed, not the workload
STEADY_BAND = 1.15


def print_twin_check(con: Console, result: Mapping[str, Any]) -> None:
    """Predicted vs measured per metric and percentile, the anchors' factors, and the verdict."""
    t = Table(title="twin check: predicted vs measured", title_justify="left", show_edge=False, header_style="bold")
    for c in ("metric", "pct", "predicted", "interval (±1σ)", "measured", "error", ""):
        t.add_column(c, justify="left" if c in ("metric", "pct", "") else "right")

    def f(v: float | None) -> str:
        return "—" if v is None else f"{v:,.1f}"

    for r in result["rows"]:
        err = r["error"]
        mark = "" if not r["gated"] else ("[green]ok[/]" if r["within"] else "[red]MISS[/]")
        interval = "" if r["low"] is None else f"{f(r['low'])}–{f(r['high'])}"
        t.add_row(
            r["metric"],
            r["percentile"],
            f(r["predicted"]),
            interval,
            f(r["measured"]),
            "—" if err is None else f"{err:+.1%}",
            mark,
        )
    con.print(t)
    a = result.get("anchor")
    if a:
        un = a["unanchored_errors"]
        gated = ", ".join(f"{k} {v:+.0%}" for k, v in un.items() if v is not None and k.split(".")[1] in ("p50", "p90"))
        prefill = f", prefill times ×{a['prefill_factor']:.2f}" if a.get("prefill_factor") else ""
        con.print(
            f"anchored: decode times ×{a['decode_factor']:.2f} the calibration's (anchor TPOT "
            f"{' / '.join(f'{m:.2f}' for m in a['measured_tpot_ms'])} ms){prefill}; without the anchor: {gated}"
        )
    steady = result.get("steady_decode") or {}
    if steady.get("ratio") is not None:
        both = [(k, v) for k, v in steady["by_streams"].items() if v["measured_ms"] is not None and v["predicted_ms"]]
        by = ", ".join(
            f"{k} stream{'s' if k != '1' else ''} {v['measured_ms']:.2f} / {v['predicted_ms']:.2f} ms"
            for k, v in both[:4]
        )
        ratio = steady["ratio"]
        hint = ""
        if not 1 / STEADY_BAND <= ratio <= STEADY_BAND:
            hint = (
                f" — the server decoded at another speed than the twin during the check: a TPOT miss here is drift "
                f"{'the anchor missed ' if result.get('anchor') else '(try --anchor) '}or the fit, not the workload"
            )
        con.print(
            f"steady decode (gaps with no arrival in progress, measured / twin at equal batch): ×{ratio:.2f} ({by})"
            + hint
        )
    verdict = "[green]PASS[/]" if result["passed"] else "[red]FAIL[/]"
    con.print(f"{verdict} (tolerance {result['tolerance']:.0%} on TTFT and TPOT p50/p90)")
