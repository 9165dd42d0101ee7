"""``tailscope plan``: KV budgets, request-time estimates, capacity with SLOs, cost, latency budgets, model routing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.api._flags import PLAN_BUDGET, PLAN_CAPACITY, PLAN_COST, PLAN_ESTIMATE, PLAN_KV, PLAN_ROUTING
from tailscope.cli import common as opt
from tailscope.cli.common import command_app, emit_answer, with_flags
from tailscope.errors import ConfigError

plan_app = command_app(
    help=(
        "Capacity planning that shows its assumptions.\n\n"
        "Example: tailscope plan kv --model llama-3.1-70b --kv-dtype fp8 --context 8192 --gpu h100-sxm --tp 4"
    ),
    no_args_is_help=True,
)


_JSON = typer.Option(None, "--json", help="Also write the answer as JSON to this file ('-' = stdout only JSON).")


@plan_app.command("kv")
@with_flags(PLAN_KV.values())
def kv(json_out: Path | None = _JSON, **options: Any) -> None:
    """Bytes per token, per-sequence KV, weights, KV capacity and max concurrent sequences.

    Example: tailscope plan kv --model llama-3.1-70b --kv-dtype fp8 --context 8192 --gpu h100-sxm --tp 4
    """
    from tailscope.api.plan import plan_kv
    from tailscope.report.plan_console import print_kv

    p = plan_kv(**options)
    emit_answer(p.to_dict(), json_out, lambda con: print_kv(con, p))


@plan_app.command("estimate")
@with_flags(PLAN_ESTIMATE.values())
def estimate(json_out: Path | None = _JSON, **options: Any) -> None:
    """Prefill time, TPOT and E2E, and which roofline regime bounds each phase.

    Example: tailscope plan estimate --model llama-3.1-8b --gpu a100-80gb --input-tokens 500 --output-tokens 300
    """
    from tailscope.api.plan import plan_estimate
    from tailscope.report.plan_console import print_estimate

    e, o = plan_estimate(**options), options
    gpus, lengths = o["tp"] * o["attention_dp"], f"{o['input_tokens']} in / {o['output_tokens']} out"
    title = f"{o['model']} on {gpus} × {o['gpu']}: {lengths} at concurrency {o['concurrency']}"
    emit_answer(e.to_dict(), json_out, lambda con: print_estimate(con, e, title=title, calibration=o["calibration"]))


@plan_app.command("capacity")
@with_flags(PLAN_CAPACITY.values())
def capacity(json_out: Path | None = _JSON, **options: Any) -> None:
    """Cheapest configuration meeting the SLO at the target load (simulation-backed), or the napkin form.

    Examples:

      tailscope plan capacity --model llama-3.1-8b --gpu h100-sxm --target-rps 20 \\
          --slo ttft_p99=1.5s --slo tpot_p99=50ms

      tailscope plan capacity --users 100 --tokens-per-user-s 25 --gpu-tokens-s 1400 --headroom 0.2

      tailscope plan capacity --users 100 --tokens-per-user-s 25 --gpu-tokens-s 1400 --slo e2e_p95=8s \\
          --output-tokens 350   # each stream needs ≥ 44 tok/s to finish 350 tokens within 8 s
    """
    from tailscope.report.plan_console import capacity_notes, print_capacity, print_napkin

    napkin = {k: options.pop(k) for k in ("users", "tokens_per_user_s", "gpu_tokens_s")}
    slo, output_tokens = options["slo"], options.pop("output_tokens")
    users, per_user, per_gpu = napkin.values()
    if users is not None or per_user is not None or per_gpu is not None:
        if users is None or per_gpu is None or (per_user is None and not slo):
            raise ConfigError(
                "the napkin form needs --users, --gpu-tokens-s and --tokens-per-user-s (or an --slo giving the rate)"
            )
        from tailscope.api.cost import plan_napkin

        try:
            mean_out = float(output_tokens) if output_tokens is not None else None
        except ValueError:
            raise ConfigError(f"--output-tokens {output_tokens!r}: the napkin form takes a mean, e.g. 350") from None
        n = plan_napkin(**napkin, headroom=options["headroom"], slo=slo, output_tokens=mean_out)
        emit_answer(n.to_dict(), json_out, lambda con: print_napkin(con, n))
        return
    if options["model"] is None or options["gpu"] is None or options["target_rps"] is None:
        raise ConfigError("plan capacity needs --model, --gpu and --target-rps (or the napkin form: --users …)")
    from tailscope.api.capacity import plan_capacity

    steady_window_s = options.pop("steady_window")
    r = plan_capacity(**options, output_tokens=output_tokens or "256", steady_window_s=steady_window_s)

    def render(con: Any) -> None:
        print_capacity(con, r.plan, r.model, r.gpu, r.search_seconds)
        for line in capacity_notes(r.confidence, r.best is not None, r.disagg):
            con.print(line)

    emit_answer(r.to_dict(), json_out, render)


@plan_app.command("cost")
@with_flags(PLAN_COST.values())
def cost(db: opt.Db = None, json_out: Path | None = _JSON, **options: Any) -> None:
    """$ per 1M output tokens and per request from a measured or simulated run; self-host vs API break-even (with
    operations cost and cached-token pricing); or the unit cost per 1M tokens from a day's tokens, GPU-hours and bill.

    Examples:

      tailscope plan cost --gpu-price 2.5 --run latest --api-price-in 0.15 --api-price-out 0.60 \\
          --daily-requests 500000 --ops-usd-per-month 8000 --cached-share 0.6

      tailscope plan cost --tokens-per-day 2e9 --gpu-hours 192 --gpu-price 2.5
    """
    from tailscope.cli.common import store_path
    from tailscope.report.plan_console import print_cost, print_unit_cost

    unit = {k: options.pop(k) for k in ("tokens_per_day", "gpu_hours", "bill")}
    if unit["tokens_per_day"] is not None:
        from tailscope.api.cost import plan_unit_cost

        u = plan_unit_cost(**unit, gpu_price=options["gpu_price"])
        emit_answer(u.to_dict(), json_out, lambda con: print_unit_cost(con, u))
        return
    from tailscope.api.cost import plan_cost

    if options["run"] is None:
        raise ConfigError(
            "plan cost needs --run RUN_ID (a stored bench or sim run) to take the throughput from, "
            "or --tokens-per-day N with --gpu-hours/--bill for the unit cost"
        )
    if options["gpu_price"] is None:
        raise ConfigError("plan cost --run needs --gpu-price USD per GPU-hour")
    c = plan_cost(**options, store=store_path(db))
    emit_answer(c.to_dict(), json_out, lambda con: print_cost(con, c))


@plan_app.command("budget")
@with_flags(PLAN_BUDGET.values())
def budget(db: opt.Db = None, json_out: Path | None = _JSON, **options: Any) -> None:
    """Per-layer latency budgets with a buffer; flags layers that cannot hold (exit 1); writes a contract.

    Examples:

      tailscope plan budget --target 300ms --layer gateway=50ms --layer inference=120ms --buffer 0.2 --out c.yaml

      tailscope plan budget --target 300ms --layer gateway=50ms --layer inference=120ms --layer retrieval=80ms \\
          --layer network=50ms --buffer-per-layer 0.2   # inference p99 ≤ 100 ms

      tailscope plan budget --target 4s --from-traces before   # the tail's critical path vs the budgets
    """
    from tailscope.api.budget import plan_budget
    from tailscope.cli.common import store_path
    from tailscope.report.plan_console import print_budget

    plan = plan_budget(**options, store=store_path(db))
    doc = plan.to_dict()
    doc["contract"] = plan.contract()
    emit_answer(doc, json_out, lambda con: print_budget(con, plan, options["out"]))
    if not plan.ok:
        raise typer.Exit(1)


@plan_app.command("routing")
@with_flags(PLAN_ROUTING.values())  # model routing and tiers (issue 24 item 11): tailscope.plan_routing
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
