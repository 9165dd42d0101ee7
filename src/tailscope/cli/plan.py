"""``tailscope plan``: KV budgets, request-time estimates, capacity with SLOs, cost and latency budgets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tailscope.cli import common as opt
from tailscope.cli.common import command_app, emit_answer
from tailscope.errors import ConfigError

plan_app = command_app(
    help=(
        "Capacity planning that shows its assumptions.\n\n"
        "Example: tailscope plan kv --model llama-3.1-70b --kv-dtype fp8 --context 8192 --gpu h100-sxm --tp 4"
    ),
    no_args_is_help=True,
)


_JSON = typer.Option(None, "--json", help="Also write the answer as JSON to this file ('-' = stdout only JSON).")
_CAL = typer.Option(None, "--calibration", help="Calibration file (e.g. a digital twin's twin.yaml).")


@plan_app.command("kv")
def kv(
    model: opt.Model,
    context: int = typer.Option(..., "--context", help="Tokens per sequence (prompt + output)."),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="bf16, fp8 or int8."),
    weights_dtype: opt.WeightsDtype = None,
    gpu: str | None = typer.Option(None, "--gpu", help="GPU catalog id (for capacity and concurrency)."),
    tp: opt.Tp = 1,
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization"),
    json_out: Path | None = _JSON,
) -> None:
    """Bytes per token, per-sequence KV, weights, KV capacity and max concurrent sequences.

    Example: tailscope plan kv --model llama-3.1-70b --kv-dtype fp8 --context 8192 --gpu h100-sxm --tp 4
    """
    from tailscope.api.plan import plan_kv
    from tailscope.report.plan_console import print_kv

    p = plan_kv(model, context=context, kv_dtype=kv_dtype, weights_dtype=weights_dtype, gpu=gpu, tp=tp,
                gpu_memory_utilization=gpu_memory_utilization)  # fmt: skip
    emit_answer(p.to_dict(), json_out, lambda con: print_kv(con, p))


@plan_app.command("estimate")
def estimate(
    model: opt.Model,
    gpu: opt.Gpu,
    input_tokens: int = typer.Option(..., "--input-tokens"),
    output_tokens: int = typer.Option(..., "--output-tokens"),
    concurrency: int = typer.Option(1, "--concurrency", help="Steady requests in flight on the replica."),
    tp: opt.Tp = 1,
    weights_dtype: opt.WeightsDtype = None,
    kv_dtype: opt.KvDtype = "bf16",
    calibration: Path | None = _CAL,
    json_out: Path | None = _JSON,
) -> None:
    """Prefill time, TPOT and E2E, and which roofline regime bounds each phase.

    Example: tailscope plan estimate --model llama-3.1-8b --gpu a100-80gb --input-tokens 500 --output-tokens 300
    """
    from tailscope.api.plan import plan_estimate
    from tailscope.report.plan_console import print_estimate

    e = plan_estimate(model, gpu, input_tokens=input_tokens, output_tokens=output_tokens, concurrency=concurrency,
                      tp=tp, weights_dtype=weights_dtype, kv_dtype=kv_dtype, calibration=calibration)  # fmt: skip
    title = f"{model} on {tp} × {gpu}: {input_tokens} in / {output_tokens} out at concurrency {concurrency}"
    emit_answer(e.to_dict(), json_out, lambda con: print_estimate(con, e, title=title, calibration=calibration))


@plan_app.command("capacity")
def capacity(
    model: str | None = typer.Option(None, "--model"),
    gpu: str | None = typer.Option(None, "--gpu"),
    profile: opt.Profile = None,
    input_tokens: str = typer.Option("512", "--input-tokens", help="Length spec when no profile is given."),
    output_tokens: str | None = typer.Option(
        None, "--output-tokens", help="Length spec when no profile is given (256); napkin form: mean output tokens."
    ),
    target_rps: float | None = typer.Option(None, "--target-rps", help="Requests/s the fleet must serve."),
    slo: list[str] = typer.Option([], "--slo", help="SLO like ttft_p99=1.5s (repeatable)."),
    headroom: float = typer.Option(0.2, "--headroom", help="Extra load fraction to plan for."),
    tp: str = typer.Option("1,2,4,8", "--tp", help="TP degrees to consider, e.g. 1,2,4."),
    max_replicas: int = typer.Option(1024, "--max-replicas", help="The most replicas of one configuration."),
    gpu_price: float | None = typer.Option(None, "--gpu-price", help="USD per GPU-hour (ranks by cost)."),
    weights_dtype: opt.WeightsDtype = None,
    kv_dtype: opt.KvDtype = "bf16",
    calibration: Path | None = _CAL,
    sim_requests: int = typer.Option(
        1500, "--sim-requests", help="The fewest requests per simulation (more when the steady window needs them)."
    ),
    steady_window: float = typer.Option(
        30.0, "--steady-window", help="Seconds of arrivals each simulation covers at least (queues reach steady state)."
    ),
    max_sim_requests: int = typer.Option(
        20_000, "--max-sim-requests", help="Most requests per simulation (beyond: one replica's share is simulated)."
    ),
    users: int | None = typer.Option(None, "--users", help="Napkin form: concurrent users."),
    tokens_per_user_s: float | None = typer.Option(None, "--tokens-per-user-s", help="Napkin form."),
    gpu_tokens_s: float | None = typer.Option(None, "--gpu-tokens-s", help="Napkin form: tokens/s one GPU gives."),
    engine: opt.Engine = "vllm",
    confidence: bool = typer.Option(
        False, "--confidence", help="Pass only when every SLO holds at the high end of the 90% prediction interval."
    ),
    disagg: str | None = typer.Option(
        None, "--disagg", help="Also size prefill/decode pools: auto, or prefill=1x2,decode=2x1;prefill=2x2,decode=3x1."
    ),
    json_out: Path | None = _JSON,
) -> None:
    """Cheapest configuration meeting the SLO at the target load (simulation-backed), or the napkin form.

    Examples:

      tailscope plan capacity --model llama-3.1-8b --gpu h100-sxm --target-rps 20 \\
          --slo ttft_p99=1.5s --slo tpot_p99=50ms

      tailscope plan capacity --users 100 --tokens-per-user-s 25 --gpu-tokens-s 1400 --headroom 0.2

      tailscope plan capacity --users 100 --tokens-per-user-s 25 --gpu-tokens-s 1400 --slo e2e_p95=8s \
          --output-tokens 350   # each stream needs ≥ 44 tok/s to finish 350 tokens within 8 s
    """
    from tailscope.report.plan_console import capacity_notes, print_capacity, print_napkin

    if users is not None or tokens_per_user_s is not None or gpu_tokens_s is not None:
        if users is None or gpu_tokens_s is None or (tokens_per_user_s is None and not slo):
            raise ConfigError(
                "the napkin form needs --users, --gpu-tokens-s and --tokens-per-user-s (or an --slo giving the rate)"
            )
        from tailscope.api.cost import plan_napkin

        try:
            mean_out = float(output_tokens) if output_tokens is not None else None
        except ValueError:
            raise ConfigError(f"--output-tokens {output_tokens!r}: the napkin form takes a mean, e.g. 350") from None
        n = plan_napkin(users=users, tokens_per_user_s=tokens_per_user_s, gpu_tokens_s=gpu_tokens_s,
                        headroom=headroom, slo=slo, output_tokens=mean_out)  # fmt: skip
        emit_answer(n.to_dict(), json_out, lambda con: print_napkin(con, n))
        return
    if model is None or gpu is None or target_rps is None:
        raise ConfigError("plan capacity needs --model, --gpu and --target-rps (or the napkin form: --users …)")
    from tailscope.api.capacity import plan_capacity

    r = plan_capacity(model, gpu, target_rps=target_rps, slo=slo, profile=profile, input_tokens=input_tokens,
                      output_tokens=output_tokens or "256", headroom=headroom, tp=tp, max_replicas=max_replicas,
                      gpu_price=gpu_price, weights_dtype=weights_dtype, kv_dtype=kv_dtype, calibration=calibration,
                      sim_requests=sim_requests, engine=engine, steady_window_s=steady_window,
                      max_sim_requests=max_sim_requests, confidence=confidence, disagg=disagg)  # fmt: skip

    def render(con: Any) -> None:
        print_capacity(con, r.plan, r.model, r.gpu, r.search_seconds)
        for line in capacity_notes(r.confidence, r.best is not None, r.disagg):
            con.print(line)

    emit_answer(r.to_dict(), json_out, render)


@plan_app.command("cost")
def cost(
    gpu_price: float | None = typer.Option(None, "--gpu-price", help="USD per GPU-hour."),
    run: str | None = typer.Option(None, "--run", help="A stored bench or sim run (id, prefix, latest)."),
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs behind the run (sim runs know their own)."),
    api_price_in: float | None = typer.Option(None, "--api-price-in", help="API USD per 1M input tokens."),
    api_price_out: float | None = typer.Option(None, "--api-price-out", help="API USD per 1M output tokens."),
    daily_requests: int | None = typer.Option(None, "--daily-requests"),
    ops_usd_per_month: float = typer.Option(
        0.0, "--ops-usd-per-month", help="Operations cost of self-hosting (people, on-call), in the break-even."
    ),
    cached_share: float = typer.Option(0.0, "--cached-share", help="Share of API input tokens read from its cache."),
    cache_write_share: float = typer.Option(0.0, "--cache-write-share", help="Share of API input tokens written."),
    cache_read_mult: float = typer.Option(0.1, "--cache-read-mult", help="Cache reads × the input price."),
    cache_write_mult: float = typer.Option(1.25, "--cache-write-mult", help="Cache writes × the input price."),
    tokens_per_day: float | None = typer.Option(
        None, "--tokens-per-day", help="Unit cost: tokens served in a day (with --gpu-hours and/or --bill)."
    ),
    gpu_hours: float | None = typer.Option(None, "--gpu-hours", help="Unit cost: GPU-hours used that day."),
    bill: float | None = typer.Option(None, "--bill", help="Unit cost: the day's bill in USD."),
    db: opt.Db = None,
    json_out: Path | None = _JSON,
) -> None:
    """$ per 1M output tokens and per request from a measured or simulated run; self-host vs API break-even (with
    operations cost and cached-token pricing); or the unit cost per 1M tokens from a day's tokens, GPU-hours and bill.

    Examples:

      tailscope plan cost --gpu-price 2.5 --run latest --api-price-in 0.15 --api-price-out 0.60 \\
          --daily-requests 500000 --ops-usd-per-month 8000 --cached-share 0.6

      tailscope plan cost --tokens-per-day 2e9 --gpu-hours 192 --gpu-price 2.5
    """
    from tailscope.cli.common import store_path
    from tailscope.report.plan_console import print_cost, print_unit_cost

    if tokens_per_day is not None:
        from tailscope.api.cost import plan_unit_cost

        u = plan_unit_cost(tokens_per_day=tokens_per_day, gpu_hours=gpu_hours, bill=bill, gpu_price=gpu_price)
        emit_answer(u.to_dict(), json_out, lambda con: print_unit_cost(con, u))
        return
    from tailscope.api.cost import plan_cost

    if run is None:
        raise ConfigError(
            "plan cost needs --run RUN_ID (a stored bench or sim run) to take the throughput from, "
            "or --tokens-per-day N with --gpu-hours/--bill for the unit cost"
        )
    if gpu_price is None:
        raise ConfigError("plan cost --run needs --gpu-price USD per GPU-hour")
    c = plan_cost(gpu_price=gpu_price, run=run, gpus=gpus, api_price_in=api_price_in, api_price_out=api_price_out,
                  daily_requests=daily_requests, ops_usd_per_month=ops_usd_per_month, cached_share=cached_share,
                  cache_write_share=cache_write_share, cache_read_mult=cache_read_mult,
                  cache_write_mult=cache_write_mult, store=store_path(db))  # fmt: skip
    emit_answer(c.to_dict(), json_out, lambda con: print_cost(con, c))


@plan_app.command("budget")
def budget(
    target: str = typer.Option(..., "--target", help="End-to-end latency target, e.g. 300ms."),
    layer: list[str] = typer.Option([], "--layer", help="LAYER=DURATION, e.g. gateway=50ms (repeatable)."),
    buffer: float | None = typer.Option(
        None, "--buffer", help="Fraction of the target held back (default 0.2; 0 with --buffer-per-layer)."
    ),
    buffer_per_layer: float = typer.Option(
        0.0, "--buffer-per-layer", help="Each layer keeps this buffer: it commits to budget ÷ (1 + B), e.g. 0.2."
    ),
    from_traces: str | None = typer.Option(
        None,
        "--from-traces",
        help="Trace set: judge each layer on what it adds to the tail traces (≥ p99) along their critical paths "
        "(budgets from those shares unless --layer is given).",
    ),
    out: Path | None = typer.Option(None, "--out", help="Write a performance contract (tailscope gate format)."),
    db: opt.Db = None,
    json_out: Path | None = _JSON,
) -> None:
    """Per-layer latency budgets with a buffer; flags layers that cannot hold (exit 1); writes a contract.

    Examples:

      tailscope plan budget --target 300ms --layer gateway=50ms --layer inference=120ms --buffer 0.2 --out c.yaml

      tailscope plan budget --target 300ms --layer gateway=50ms --layer inference=120ms --layer retrieval=80ms \
          --layer network=50ms --buffer-per-layer 0.2   # inference p99 ≤ 100 ms

      tailscope plan budget --target 4s --from-traces before   # the tail's critical path vs the budgets
    """
    from tailscope.api.budget import plan_budget
    from tailscope.cli.common import store_path
    from tailscope.report.plan_console import print_budget

    plan = plan_budget(target, layers=layer, buffer=buffer, buffer_per_layer=buffer_per_layer, traces=from_traces,
                       out=out, store=store_path(db))  # fmt: skip
    doc = plan.to_dict()
    doc["contract"] = plan.contract()
    emit_answer(doc, json_out, lambda con: print_budget(con, plan, out))
    if not plan.ok:
        raise typer.Exit(1)


# model routing and tiers (issue 24 item 11) lives in its own module
from tailscope.cli.plan_routing import routing as _routing  # noqa: E402

plan_app.command("routing")(_routing)
