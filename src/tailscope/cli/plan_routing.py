"""``tailscope plan routing``: model tiers behind a router — latency and cost per routing, the cheapest meeting an SLO.

Registered on the ``plan`` group by :mod:`tailscope.cli.plan`; parses, calls :func:`tailscope.plan_routing`, renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import PLAN_ROUTING
from tailscope.cli import common as opt
from tailscope.cli.common import with_flags


@with_flags(PLAN_ROUTING.values())  # the options of tailscope.plan_routing (api/_flags.py)
def routing(
    db: opt.Db = None,
    json_out: Path | None = typer.Option(None, "--json", help="Also write JSON here ('-' = stdout only JSON)."),
    **options: Any,
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

    options["shares"] = options["shares"] or None
    plan = plan_routing(**options, store=store_path(db))
    emit_answer(plan.to_dict(), json_out, lambda _con: typer.echo(routing_text(plan)))
    raise typer.Exit(plan.exit_code)
