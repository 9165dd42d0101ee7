"""``tailscope plan routing``: model tiers behind a router — latency and cost per routing, the cheapest meeting an SLO.

Registered on the ``plan`` group by :mod:`tailscope.cli.plan`; parses, calls :func:`tailscope.plan_routing`, renders.
"""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli import common as opt


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
    db: opt.Db = None,
    json_out: Path | None = typer.Option(None, "--json", help="Also write JSON here ('-' = stdout only JSON)."),
) -> None:
    """Route request classes to model tiers (template / small / mid / frontier) behind a router: P50/P95 latency and
    cost per 1M requests against sending everything to the top tier, and the cheapest routing meeting the SLO.

    Example: tailscope plan routing --tier name=haiku,p50=0.8s,p95=1.6s,in=0.8,out=4 \\
        --tier name=opus,p50=3s,p95=6s,in=15,out=75 --class simple:0.9:haiku --class hard:0.1:opus \\
        --router name=cls,p50=60ms,p95=120ms,in=0.8,out=4,tokens_in=300,tokens_out=5 --slo-p95 5s
    """
    from tailscope.api.routing import plan_routing
    from tailscope.cli.common import emit_answer, store_path
    from tailscope.report.plan_console import routing_text

    plan = plan_routing(tiers=tier, classes=klass, router=router, table=table, tokens_in=tokens_in,
                        tokens_out=tokens_out, shares=share or None, slo_p50=slo_p50, slo_p95=slo_p95, seed=seed,
                        store=store_path(db))  # fmt: skip
    emit_answer(plan.to_dict(), json_out, lambda _con: typer.echo(routing_text(plan)))
    raise typer.Exit(plan.exit_code)
