"""Console renderers of the plan family: the typed results of :func:`tailscope.plan_kv`,
:func:`tailscope.plan_estimate`, :func:`tailscope.plan_capacity`, :func:`tailscope.plan_napkin`,
:func:`tailscope.plan_cost` and :func:`tailscope.plan_budget`, printed on a rich console (they compute nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from tailscope.plan.budget import BudgetPlan, LayerBudget
from tailscope.plan.capacity import CapacityPlan
from tailscope.plan.estimate import Estimate
from tailscope.plan.kv import KvPlan
from tailscope.plan.napkin import CostPlan, NapkinCapacity, UnitCost
from tailscope.plan.routing import Projection, RoutingPlan

GB = 1e9


def print_rows(con: Console, title: str, rows: Sequence[tuple[str, str]], assumptions: Sequence[str] = ()) -> None:
    """A two-column table of labelled figures, then the assumptions behind them."""
    t = Table(title=title, title_justify="left", show_header=False, show_edge=False, box=None)
    t.add_column(style="bold")
    t.add_column(justify="right")
    for k, v in rows:
        t.add_row(k, v)
    con.print(t)
    if assumptions:
        con.print("[dim]assumptions:[/]")
        for a in assumptions:
            con.print(f"[dim]  · {a}[/]")


def print_kv(con: Console, p: KvPlan) -> None:
    context = p.context
    rows = [
        ("KV bytes per token", f"{p.bytes_per_token:,} B ({p.bytes_per_token / 1024:,.1f} KiB)"),
        (f"KV per sequence at {context:,} tokens", f"{p.per_sequence_bytes / GB:,.3f} GB"),
        (
            f"weights ({p.weights_dtype})",
            f"{p.weights_bytes / GB:,.1f} GB total, {p.weights_per_gpu_bytes / GB:,.1f} GB/GPU",
        ),
    ]
    if p.kv_capacity_tokens is not None:
        rows.append((f"KV capacity on {p.tp} × {p.gpu}", f"{p.kv_capacity_tokens:,} tokens"))
        rows.append((f"max concurrent sequences of {context:,}", f"{p.max_sequences:,}"))
    print_rows(con, f"{p.model}: KV cache and memory", rows, p.assumptions)


def print_estimate(con: Console, e: Estimate, *, title: str, calibration: Any = None) -> None:
    rows = [
        ("prefill", f"{e.prefill_ms:,.1f} ms ({e.prefill_bound}-bound)"),
        ("TTFT (with front end)", f"{e.ttft_ms:,.1f} ms"),
        ("TPOT", f"{e.tpot_ms:,.2f} ms ({e.decode_bound}-bound decode, step {e.decode_step_ms:.2f} ms)"),
        ("E2E", f"{e.e2e_ms:,.0f} ms"),
        ("replica throughput", f"{e.output_tokens_per_s:,.0f} output tok/s, {e.requests_per_s:,.2f} req/s"),
    ]
    print_rows(con, title, rows, (*e.assumptions, f"calibration: {calibration or 'catalog defaults'}"))


def print_napkin(con: Console, n: NapkinCapacity) -> None:
    rows = [(f"step {i + 1}", s) for i, s in enumerate(n.steps())] + [("GPUs", f"{n.gpus}")]
    notes = ["every GPU sustains --gpu-tokens-s"]
    if n.slo_tokens_per_user_s is not None:
        notes.append(f"each stream needs ≥ {n.slo_tokens_per_user_s:.1f} tok/s to meet the SLO ({n.slo_derivation})")
    print_rows(con, "Capacity (napkin)", rows, notes)


def print_capacity(con: Console, plan: CapacityPlan, model: str, gpu: str, elapsed: float) -> None:
    t = Table(
        title=f"{model} on {gpu}: capacity for {plan.target_rps:g} req/s (+{plan.headroom:.0%} headroom)",
        title_justify="left",
        show_edge=False,
        header_style="bold",
    )
    for c in ("", "replica", "replicas", "GPUs", "$/h", "analytic", "sims", "observed at the answer"):
        t.add_column(c)
    for o in plan.options:
        observed = ""
        if o.check is not None:
            observed = ", ".join(f"{k} {v:,.0f} ms" if v is not None else f"{k} —" for k, v in o.check.observed.items())
        t.add_row(
            "★" if plan.best is not None and o is plan.best else "",
            o.shape.label(),
            "—" if o.replicas is None else str(o.replicas),
            "—" if o.gpus is None else str(o.gpus),
            "—" if o.usd_per_hour is None else f"{o.usd_per_hour:,.2f}",
            "—" if o.analytic_replicas is None else str(o.analytic_replicas),
            str(o.sims),
            observed or o.note,
        )
    con.print(t)
    if plan.best is None:
        con.print("[red]no configuration meets the SLO within the limits[/]")
    else:
        b = plan.best
        con.print(
            f"[green]answer: {b.replicas} replica(s) × {b.shape.label()} = {b.gpus} GPUs[/] — re-checked by simulation "
            f"({_check_text(b.check)}; search took {elapsed:.1f} s)"
        )
    for s in plan.assumptions:
        con.print(f"[dim]  · {s}[/]")


def print_cost(con: Console, c: CostPlan) -> None:
    rows = [
        ("throughput", f"{c.output_tokens_per_s:,.0f} output tok/s, {c.requests_per_s:,.2f} req/s on {c.gpus} GPUs"),
        ("$ per 1M output tokens", f"{c.usd_per_million_output_tokens:,.4f}"),
        ("$ per request", f"{c.usd_per_request:,.6f}"),
    ]
    if c.api_usd_per_request is not None:
        rows.append(("API $ per request", f"{c.api_usd_per_request:,.6f}"))
        if c.cached_share or c.cache_write_share:
            rows.append((
                "API input $ per 1M",
                f"{c.api_usd_per_million_input_effective:,.4f} effective ({c.cached_share:.0%} cache reads at "
                f"{c.cache_read_mult:g}×, {c.cache_write_share:.0%} writes at {c.cache_write_mult:g}×)",
            ))  # fmt: skip
        if c.break_even_daily_requests is not None:
            ops = f" (incl. {c.ops_usd_per_month:,.0f} $/month operations)" if c.ops_usd_per_month else ""
            rows.append(("break-even", f"{c.break_even_daily_requests:,.0f} requests/day for {c.gpus} GPUs{ops}"))
    if c.daily_requests is not None:
        ops = " incl. operations" if c.ops_usd_per_month else ""
        rows.append(("self-host $/day", f"{c.self_host_usd_per_day:,.2f} ({c.gpus_for_daily} GPUs{ops})"))
        rows.append(("API $/day", f"{c.api_usd_per_day:,.2f}"))
    assumptions = [f"throughput from {c.source}", "GPUs billed every hour and kept busy at that throughput"]
    if c.ops_usd_per_month:
        assumptions.append("operations cost spread over 30 days a month")
    print_rows(con, "Cost", rows, assumptions)


def print_unit_cost(con: Console, u: UnitCost) -> None:
    rows = [(f"step {i + 1}", s) for i, s in enumerate(u.steps())]
    rows.append(("$ per 1M tokens", f"{u.usd_per_million_tokens:,.4f}"))
    print_rows(con, "Unit cost (a day's figures)", rows, ["compare this figure before and after each change"])


def print_budget(con: Console, plan: BudgetPlan, out: Any = None) -> None:
    def row(lb: LayerBudget) -> str:
        text = f"{lb.budget_ms:,.0f} ms ({lb.share:.0%})"
        if lb.buffered_ms is not None:
            text += f" → p99 ≤ {lb.buffered_ms:,.1f} ms after its {plan.buffer_per_layer:.0%} buffer"
        if lb.tail_ms is not None:
            text += f"; adds {lb.tail_ms:,.1f} ms at the tail {'✓' if lb.holds else '✗'}"
        return text

    rows = [(f"{lb.layer}", row(lb)) for lb in plan.layers]
    rows.insert(0, ("usable after buffer", f"{plan.usable_ms:,.0f} ms of {plan.target_ms:,.0f} ms"))
    if plan.e2e_p99_ms is not None and plan.tail_e2e_ms is not None:
        rows.insert(
            1,
            (
                "traces: end-to-end",
                f"p99 {plan.e2e_p99_ms:,.0f} ms; the {plan.tail_traces} traces ≥ p99 average {plan.tail_e2e_ms:,.0f} "
                "ms (each layer: what it adds to them on the critical path)",
            ),
        )
    print_rows(con, "Latency budget", rows)
    for f in plan.findings:
        con.print(f"[red]✗ {f}[/]")
    if plan.ok:
        con.print("[green]✓ the budgets hold[/]")
    if out:
        con.print(f"wrote {out}")


def _check_text(c: Any) -> str:
    """``N requests over W s of arrivals, steady state`` (or ``transient only`` / ``queue grows``), and the scope."""
    if c is None:
        return "0 requests"
    if c.window_s is None:
        return f"{c.requests:,} requests"
    scope = ", one replica's share of the load" if c.scope == "one replica" else ""
    need = f" < the {c.needed_window_s:,.0f} s a queue needs" if c.transient_only else ""
    return f"{c.requests:,} requests over {c.window_s:,.0f} s of arrivals{scope}: {c.steady}{need}"


def capacity_notes(confidence: dict[str, Any] | None, has_best: bool, disagg: dict[str, Any] | None) -> list[str]:
    """The lines under the capacity table: the confidence the answer holds with, the disaggregated split."""
    lines = []
    if confidence is not None and has_best:
        lines.append(f"meets the SLOs with ≥ 90% confidence (intervals from the residuals on {confidence['label']})")
    if disagg is not None:
        if disagg["answer"] is None:
            lines.append(f"disaggregated: none of {len(disagg['tried'])} splits simulated met the SLOs")
        else:
            d = disagg
            lines.append(f"disaggregated: {d['answer']} ({d['deployment']}; "
                         f"{d['gpus']} GPUs; {len(d['tried'])} simulated)")  # fmt: skip
        for widths, why in disagg.get("unfit", {}).items():
            lines.append(f"disaggregated: not simulated with {widths}: {why}")
    return lines


def _projection_line(label: str, p: Projection, saving: float | None) -> str:
    shares = ", ".join(f"{k} {v:.0%}" for k, v in p.shares.items())
    cost = f"${p.cost_per_1m_requests:,.0f} per 1M requests"
    if p.routed:
        cost += f" (router ${p.router_cost_per_request * 1e6:,.0f})"
    change = f", {saving:+.0%} cost" if saving is not None else ""
    slo = "" if p.meets_slo is None else ("  meets SLO" if p.meets_slo else "  misses SLO")
    return f"{label:<10} P50 {p.p50_ms:,.0f} ms  P95 {p.p95_ms:,.0f} ms  {cost}{change}  [{shares}]{slo}"


def routing_text(plan: RoutingPlan) -> str:
    """``tailscope plan routing``: the tiers, router, classes and SLO, then the baseline, the given routing and the
    cheapest one meeting the SLO, each with its P50/P95 and cost per 1M requests."""
    lines = ["Tiers (least capable first):"]
    for t in plan.tiers:
        price = f"${t.cost(plan.tokens_in, plan.tokens_out) * 1e6:,.0f} per 1M requests"
        lines.append(f"  {t.name:<12} P50 {t.p50_ms:,.0f} ms  P95 {t.p95_ms:,.0f} ms  {price}  ({t.source})")
    if plan.router is not None:
        r = plan.router
        lines.append(f"  router {r.name}: P50 {r.p50_ms:,.0f} ms, P95 {r.p95_ms:,.0f} ms, "
                     f"${r.cost(plan.tokens_in, plan.tokens_out) * 1e6:,.0f} per 1M requests")  # fmt: skip
    lines.append("Classes: " + ", ".join(f"{c.name} {c.share:.0%} (≥ {c.min_tier})" for c in plan.classes))
    slo = " and ".join(
        f"{k} ≤ {v:,.0f} ms" for k, v in (("P50", plan.slo_p50_ms), ("P95", plan.slo_p95_ms)) if v is not None
    )
    lines += [f"SLO: {slo or 'none (cheapest routing)'}", "", _projection_line("baseline", plan.baseline, None)]
    if plan.given is not None:
        lines.append(_projection_line("given", plan.given, plan.saving(plan.given)))
    if plan.best is not None:
        lines.append(_projection_line("cheapest", plan.best, plan.saving()))
        lines.append("  routing: " + ", ".join(f"{c} → {t}" for c, t in plan.best.assignment.items()))
    else:
        lines.append("no routing meets the SLO")
    lines.extend(f"note: {n}" for n in plan.notes)
    return "\n".join(lines)
