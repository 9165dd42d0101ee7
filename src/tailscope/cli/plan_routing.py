"""``tailscope plan routing``: model tiers behind a router — latency and cost per routing, the cheapest meeting an SLO.

Registered on the ``plan`` group by :mod:`tailscope.cli.plan`; parses, calls :func:`tailscope.plan_routing`, renders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def _line(label: str, p: Any, saving: float | None) -> str:
    shares = ", ".join(f"{k} {v:.0%}" for k, v in p.shares.items())
    cost = f"${p.cost_per_1m_requests:,.0f} per 1M requests"
    if p.routed:
        cost += f" (router ${p.router_cost_per_request * 1e6:,.0f})"
    change = f", {saving:+.0%} cost" if saving is not None else ""
    slo = "" if p.meets_slo is None else ("  meets SLO" if p.meets_slo else "  misses SLO")
    return f"{label:<10} P50 {p.p50_ms:,.0f} ms  P95 {p.p95_ms:,.0f} ms  {cost}{change}  [{shares}]{slo}"


def routing(
    tier: list[str] = typer.Option(
        [], "--tier", help="A tier, least capable first: name=haiku,p50=800ms,p95=1.5s,in=0.8,out=4 (or run=RUN_ID)."
    ),
    klass: list[str] = typer.Option([], "--class", help="A request class NAME:SHARE:MIN_TIER, e.g. simple:0.8:haiku."),
    router: str | None = typer.Option(
        None, "--router", help="The router: name=cls,p50=60ms,p95=120ms,in=0.8,out=4,tokens_in=300,tokens_out=5."
    ),
    table: Path | None = typer.Option(None, "--table", help="YAML with tiers:, classes:, router: (flags add to it)."),
    tokens_in: float = typer.Option(1000.0, "--tokens-in", help="Mean input tokens per request."),
    tokens_out: float = typer.Option(300.0, "--tokens-out", help="Mean output tokens per request."),
    share: list[str] = typer.Option([], "--share", help="Project this routing: TIER=SHARE (repeatable)."),
    slo_p50: str | None = typer.Option(None, "--slo-p50", help="P50 latency SLO, e.g. 1s."),
    slo_p95: str | None = typer.Option(None, "--slo-p95", help="P95 latency SLO, e.g. 3s."),
    seed: int = typer.Option(0, "--seed", help="Monte Carlo seed."),
    db: Path | None = typer.Option(None, "--db"),
    json_out: Path | None = typer.Option(None, "--json", help="Also write JSON here ('-' = stdout only JSON)."),
) -> None:
    """Route request classes to model tiers (template / small / mid / frontier) behind a router: P50/P95 latency and
    cost per 1M requests against sending everything to the top tier, and the cheapest routing meeting the SLO.

    Example: tailscope plan routing --tier name=haiku,p50=0.8s,p95=1.6s,in=0.8,out=4 \\
        --tier name=opus,p50=3s,p95=6s,in=15,out=75 --class simple:0.9:haiku --class hard:0.1:opus \\
        --router name=cls,p50=60ms,p95=120ms,in=0.8,out=4,tokens_in=300,tokens_out=5 --slo-p95 5s
    """
    from tailscope.api.routing import plan_routing
    from tailscope.cli.common import store_path, write_text

    plan = plan_routing(tiers=tier, classes=klass, router=router, table=table, tokens_in=tokens_in,
                        tokens_out=tokens_out, shares=share or None, slo_p50=slo_p50, slo_p95=slo_p95, seed=seed,
                        store=store_path(db))  # fmt: skip
    doc = plan.to_dict()
    text = json.dumps(doc, indent=1, default=str)
    if json_out is not None and str(json_out) == "-":
        print(text)
        raise typer.Exit(plan.exit_code)
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
    lines.append(f"SLO: {slo or 'none (cheapest routing)'}")
    lines.append("")
    lines.append(_line("baseline", plan.baseline, None))
    if plan.given is not None:
        lines.append(_line("given", plan.given, plan.saving(plan.given)))
    if plan.best is not None:
        lines.append(_line("cheapest", plan.best, plan.saving()))
        lines.append("  routing: " + ", ".join(f"{c} → {t}" for c, t in plan.best.assignment.items()))
    else:
        lines.append("no routing meets the SLO")
    lines.extend(f"note: {n}" for n in plan.notes)
    typer.echo("\n".join(lines))
    if json_out is not None:
        write_text(json_out, text, "--json")
    raise typer.Exit(plan.exit_code)
