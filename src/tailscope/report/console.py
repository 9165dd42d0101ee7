"""Console rendering of run summaries with rich (consumes summary dicts only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tailscope.report.stat_table import LATENCY_ROWS, STAT_COLUMNS
from tailscope.units import format_ms

if TYPE_CHECKING:
    from tailscope.records import Target


def _num(v: float | None) -> str:
    if v is None:
        return "—"
    if v != v:
        return "—"
    if v == float("inf"):
        return "∞"
    return f"{v:,.0f}" if abs(v) >= 10_000 else f"{v:.1f}"


#: the mark of a percentile estimated from fewer samples than a 95 % interval needs
THIN = "*"


def target_line(t: Target) -> str:
    """The target a bench runs against, in console markup: the built-in engine's description, or URL and model."""
    return f"[cyan]target: {t.description} at {t.url}[/]" if t.builtin else f"target: {t.url} model {t.model}"


def latency_table(summary: dict[str, Any], title: str = "Latency in ms, from the intended send time") -> Table:
    """TTFT/TPOT/ITL/E2E percentiles table (milliseconds); percentiles from too few samples are marked ``*``."""
    thin_any = False
    t = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    t.add_column("metric")
    for c in STAT_COLUMNS:
        t.add_column("p99.9" if c == "p999" else c, justify="right")
    for label, key in LATENCY_ROWS:
        st = summary.get(key) or {}
        thin = set(st.get("too_few") or ())
        thin_any = thin_any or bool(thin)
        cells = [
            str(st.get("count", 0)) if c == "count" else _num(st.get(c)) + (THIN if c in thin else "")
            for c in STAT_COLUMNS
        ]
        t.add_row(label, *cells)
    if thin_any:
        t.caption = f"{THIN} too few samples for a 95 % interval of that percentile (p99 needs 368, p99.9 3,688)"
        t.caption_justify = "left"
    return t


def _first_wave_line(fw: dict[str, Any]) -> str:
    """The opening burst against the rest: send lag p99 and TTFT p99 (from the intended time)."""

    def p99(key: str) -> str:
        return format_ms((fw.get(key) or {}).get("p99"))

    return (
        f"{fw['count']} requests due before any had finished: send lag p99 {p99('send_lag_ms')} "
        f"(rest {p99('rest_send_lag_ms')}), TTFT p99 {p99('ttft_ms')} (rest {p99('rest_ttft_ms')}; "
        f"{p99('ttft_from_sent_ms')} from the actual send)"
    )


def _fmt_rate(x: float | None, unit: str) -> str:
    return "—" if x is None else f"{x:,.2f} {unit}"


def _gpu_line(gpu: dict[str, Any]) -> str:
    """``summary.gpu`` in one line: utilisation, memory, bandwidth, power, energy per output token, host CPU."""
    bits = []
    if "util_pct" in gpu:
        util = gpu["util_pct"]
        bits.append(f"{gpu.get('gpus', 1)} × util mean {util['mean']:.0f} % (max {util['max']:.0f})")
    if "memory_used_mib" in gpu:
        total = gpu.get("memory_total_mib")
        bits.append(
            f"memory max {gpu['memory_used_mib']['max'] / 1024:.1f}"
            + (f" / {total / 1024:.1f} GiB" if total else " GiB")
        )
    if "dram_active" in gpu:
        bits.append(f"DRAM active {gpu['dram_active']['mean']:.0%}")
    if "power_w" in gpu:
        bits.append(f"power {gpu['power_w']['mean']:.0f} W")
    if "energy_per_output_token_j" in gpu:
        bits.append(f"{gpu['energy_per_output_token_j']:.3g} J/output token")
    if "cpu_busy_pct" in gpu:
        bits.append(f"host CPU {gpu['cpu_busy_pct']:.0f} %")
    return ", ".join(bits) or "no figures (the exporter exposed none of the DCGM fields)"


def summary_renderable(run: dict[str, Any], summary: dict[str, Any]) -> Group:
    """Everything ``bench`` and ``runs show`` print for one run."""
    parts: list[Any] = []
    req = summary.get("requests", {})
    target = run.get("target", {})
    head = Text()
    head.append(f"run {run.get('id')}", style="bold")
    head.append(f"  {run.get('kind', 'bench')}  {run.get('status', '')}\n")
    head.append(f"target {target.get('url')}  model {target.get('model')}")
    if target.get("builtin"):
        head.append(f"\nbuilt-in simulated engine: {target.get('description')}", style="cyan")
    parts.append(head)
    warnings = summary.get("warnings") or []
    if warnings:
        parts.append(Panel("\n".join(f"⚠ {w}" for w in warnings), title="warnings", border_style="yellow"))
    parts.append(latency_table(summary))
    rates = Table(show_header=False, show_edge=False, box=None)
    rates.add_column(style="bold")
    rates.add_column(justify="right")
    rates.add_row(
        "requests",
        f"{req.get('completed', 0)} ok / {req.get('failed', 0)} failed / {req.get('incomplete', 0)} incomplete"
        f" (+{req.get('warmup', 0)} warmup)",
    )
    rates.add_row("duration", f"{summary.get('duration_s', 0):.2f} s")
    rates.add_row("output tokens/s", _fmt_rate(summary.get("output_tokens_per_s"), "tok/s"))
    rates.add_row("total tokens/s", _fmt_rate(summary.get("total_tokens_per_s"), "tok/s"))
    rates.add_row("requests/s", _fmt_rate(summary.get("requests_per_s"), "req/s"))
    rates.add_row("goodput", _fmt_rate(summary.get("goodput_rps"), "req/s"))
    fw = summary.get("first_wave") or {}
    if fw.get("count"):
        rates.add_row("first wave", _first_wave_line(fw))
    pv = summary.get("perceived") or {}
    if pv.get("requests"):
        rates.add_row("perceived", _perceived_line(pv))
    rs = summary.get("reasoning") or {}
    if rs.get("requests"):
        ttfa, rt, at = rs["ttfa_ms"], rs["reasoning_tokens"], rs["answer_tokens"]
        rates.add_row(
            "reasoning",
            f"{rs['requests']} requests: first answer token p50 {format_ms(ttfa.get('p50'))}, p99 "
            f"{format_ms(ttfa.get('p99'))}; reasoning {rt.get('p50') or 0:.0f} / answer {at.get('p50') or 0:.0f} "
            "tokens (p50)",
        )
    pc = summary.get("prompt_cache") or {}
    if pc.get("hit_rate") is not None:
        rates.add_row(
            "prompt cache (usage)",
            f"{pc['hit_rate']:.1%} of {pc['prompt_tokens']:,} prompt tokens cached ({pc['requests']} requests)",
        )
    adj = summary.get("error_adjusted_ms") or {}
    if req.get("failed"):
        rates.add_row(
            "error-adjusted p99", f"TTFT {format_ms(adj.get('ttft_p99'))}, E2E {format_ms(adj.get('e2e_p99'))}"
        )
    errors = summary.get("errors") or {}
    if errors:
        rates.add_row("errors", ", ".join(f"{k}={v}" for k, v in errors.items()))
    for s in summary.get("slo") or []:
        verdict = "[green]pass[/]" if s["passed"] else "[red]FAIL[/]"
        rates.add_row(f"SLO {s['slo']}", f"{format_ms(s['observed_ms'])} ≤ {format_ms(s['threshold_ms'])}  {verdict}")
    server = summary.get("server") or {}
    for key, label in (("queue_depth", "server queue"), ("running", "server running"), ("kv_usage", "KV usage")):
        if key in server:
            v = server[key]
            rates.add_row(label, f"mean {v['mean']:.2f}, max {v['max']:.2f}")
    if server.get("prefix_cache_hit_rate") is not None:
        rates.add_row("prefix-cache hit rate", f"{server['prefix_cache_hit_rate']:.1%}")
    spec = server.get("spec_decode") or {}
    if spec.get("acceptance_rate") is not None:
        tpot = (summary.get("tpot_ms") or {}).get("p50")
        rates.add_row(
            "spec decode",
            f"{spec['acceptance_rate']:.1%} of {spec['draft_tokens']:,.0f} draft tokens accepted (TPOT p50 "
            f"{format_ms(tpot)})",
        )
    gpu = summary.get("gpu") or {}
    if gpu:
        rates.add_row("GPU", _gpu_line(gpu))
    parts.append(rates)
    classes = summary.get("classes") or {}
    if classes:
        ct = Table(title="Per class", title_justify="left", show_edge=False, header_style="bold")
        for c in ("class", "ok", "failed", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99"):
            ct.add_column(c, justify="left" if c == "class" else "right")
        for name, cs in classes.items():
            ct.add_row(
                name,
                str(cs["requests"]["completed"]),
                str(cs["requests"]["failed"]),
                format_ms(cs["ttft_ms"]["p50"]),
                format_ms(cs["ttft_ms"]["p99"]),
                format_ms(cs["tpot_ms"]["p50"]),
                format_ms(cs["tpot_ms"]["p99"]),
                format_ms(cs["e2e_ms"]["p99"]),
            )
        parts.append(ct)
    parts.extend(_group_tables(summary))
    mixed = summary.get("mixed") or {}
    if mixed:
        parts.append(mixed_table(mixed))
    sessions = summary.get("sessions")
    if isinstance(sessions, dict):
        parts.append(Text(sessions_line(sessions)))
        if sessions.get("by_step"):
            parts.append(steps_table(sessions["by_step"]))
    return Group(*parts)


def sessions_line(s: dict[str, Any]) -> str:
    """Session-level metrics in one line: sessions, failed (and incomplete, when any), duration and time per step
    (p50/p99), steps."""
    dur, step, steps = s.get("duration_ms") or {}, s.get("step_ms") or {}, s.get("steps") or {}
    mean_steps = steps.get("mean")
    cut = f"  incomplete {s['incomplete']}" if s.get("incomplete") else ""
    return (
        f"sessions {s.get('sessions')}  failed {s.get('failed')}{cut}  duration p50 {format_ms(dur.get('p50'))} "
        f"p99 {format_ms(dur.get('p99'))}  time per step p50 {format_ms(step.get('p50'))} "
        f"p99 {format_ms(step.get('p99'))}  steps/session " + ("—" if mean_steps is None else f"{mean_steps:.1f}")
    )


def steps_table(by_step: dict[str, Any]) -> Table:
    """Agent sessions: time per step (due time → end, complete sessions) for each step name."""
    t = Table(title="Agent steps (due → end)", title_justify="left", show_edge=False, header_style="bold")
    for c in ("step", "calls", "p50", "p99", "max"):
        t.add_column(c, justify="left" if c == "step" else "right")
    for name, st in by_step.items():
        t.add_row(name, str(st.get("count", 0)), format_ms(st.get("p50")), format_ms(st.get("p99")),
                  format_ms(st.get("max")))  # fmt: skip
    return t


def _share(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"


def _perceived_line(pv: dict[str, Any]) -> str:
    """Slow streams, stalls and slow first tokens in one line (docs/metrics.md, perceived)."""
    per = pv.get("stalls_per_request")
    return (
        f"{_share(pv.get('slow_stream_share'))} slower than reading ({pv['reading_tokens_per_s']:g} tok/s), "
        f"{'—' if per is None else f'{per:.2f}'} stalls ≥ {pv['stall_ms']:g} ms per request "
        f"({_share(pv.get('stalled_share'))} of requests), {_share(pv.get('slow_ttft_share'))} first token "
        f"> {pv['slow_ttft_ms'] / 1000:g} s"
    )


def _group_tables(summary: dict[str, Any]) -> list[Table]:
    """TTFT/E2E by session turn and by shared vs unshared prefix (only when the run had them)."""
    out: list[Table] = []
    for key, title, label in (
        ("turns", "By session turn (context grows turn by turn)", "turn"),
        ("shared_prefix", "Shared vs unshared prefix", "prefix"),
    ):
        groups = summary.get(key) or {}
        if not groups or (key == "turns" and (summary.get("sessions") or {}).get("by_step")):
            continue  # an agent's "turns" are its calls in dispatch order: its steps are told by name instead
        t = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
        for c in (label, "ok", "TTFT p50", "TTFT p99", "E2E p50", "E2E p99"):
            t.add_column(c, justify="left" if c == label else "right")
        for name, g in groups.items():
            ttft, e2e = g.get("ttft_ms") or {}, g.get("e2e_ms") or {}
            t.add_row(
                str(name),
                str(g.get("count", 0)),
                format_ms(ttft.get("p50")),
                format_ms(ttft.get("p99")),
                format_ms(e2e.get("p50")),
                format_ms(e2e.get("p99")),
            )
        out.append(t)
    return out


def mixed_table(mixed: dict[str, Any]) -> Table:
    """Plain HTTP traffic sent beside the LLM load: one row per target (latency in ms from the scheduled time)."""
    t = Table(title="Mixed traffic (plain HTTP)", title_justify="left", show_edge=False, header_style="bold")
    for c in ("target", "ok", "failed", "req/s", "p50", "p99", "max", "errors"):
        t.add_column(c, justify="left" if c in ("target", "errors") else "right")
    for name, m in mixed.items():
        lat = m.get("latency_ms") or {}
        errors = m.get("errors") or {}
        t.add_row(
            name,
            str(m.get("ok", 0)),
            str(m.get("failed", 0)),
            f"{m.get('requests_per_s', 0.0):.2f}",
            format_ms(lat.get("p50")),
            format_ms(lat.get("p99")),
            format_ms(lat.get("max")),
            ", ".join(f"{k}={v}" for k, v in errors.items()) or "—",
        )
    return t


_DIALECT_COLS = ("mean", "median", "p90", "p99", "max", "count")  # p95 and std are in the JSON


def dialect_renderable(d: dict[str, Any]) -> Group:
    """A summary recomputed in another tool's dialect (``metrics.dialects.summarize_dialect`` output)."""
    name = d.get("dialect", "?")
    t = Table(
        title=f"As {name} defines its metrics (ms unless named otherwise)",
        title_justify="left",
        show_edge=False,
        header_style="bold",
    )
    t.add_column(f"{name} metric", min_width=18, ratio=1)
    for c in _DIALECT_COLS:
        t.add_column(c, justify="right", no_wrap=True)
    names = d.get("names") or {}
    for key, st in (d.get("metrics") or {}).items():
        cells = [_num(st.get(c)) if c != "count" else str(st.get("count", 0)) for c in _DIALECT_COLS]
        label = Text(str(names.get(key) or key))
        if key in names:
            label.append(f" {key}", style="dim")  # the key it is stored under in the JSON
        t.add_row(label, *cells)
    req = d.get("requests") or {}
    rates = Table(show_header=False, show_edge=False, box=None)
    rates.add_column(style="bold")
    rates.add_column(justify="right")
    rates.add_row("requests", f"{req.get('completed', 0)} completed / {req.get('failed', 0)} failed")
    rates.add_row("duration", f"{d.get('duration_s') or 0:.2f} s")
    rates.add_row("request throughput", _fmt_rate(d.get("request_throughput"), "req/s"))
    rates.add_row("output throughput", _fmt_rate(d.get("output_throughput"), "tok/s"))
    rates.add_row("total token throughput", _fmt_rate(d.get("total_token_throughput"), "tok/s"))
    notes = Text("\n".join(f"· {n}" for n in d.get("notes") or []), style="dim")
    src = Text(f"definitions: {d.get('source', '')}", style="dim")
    return Group(t, rates, notes, src)


def stdout_console() -> Console:
    """The console for command output: the terminal's width on a terminal, 120 columns when piped (tables of
    percentiles are wider than 80 and should not wrap in logs and CI output)."""
    import sys

    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 120)


def print_summary(run: dict[str, Any], summary: dict[str, Any], console: Console | None = None) -> None:
    """Print a run's summary."""
    (console or stdout_console()).print(summary_renderable(run, summary))
