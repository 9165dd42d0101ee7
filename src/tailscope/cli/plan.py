"""``tailscope plan``: KV budgets, request-time estimates, capacity with SLOs, cost and latency budgets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from tailscope.cli.common import command_app
from tailscope.errors import ConfigError

plan_app = command_app(
    help=(
        "Capacity planning that shows its assumptions.\n\n"
        "Example: tailscope plan kv --model llama-3.1-70b --kv-dtype fp8 --context 8192 --gpu h100-sxm --tp 4"
    ),
    no_args_is_help=True,
)


def _emit(doc: dict[str, Any], json_out: Path | None, render: Callable[[Any], None]) -> None:
    """Print the table (or only JSON with ``--json -``) and write JSON when asked."""
    import json

    from tailscope.cli.common import write_text
    from tailscope.report.console import stdout_console

    text = json.dumps(doc, indent=1, default=str)
    if json_out is not None and str(json_out) == "-":
        print(text)
        return
    render(stdout_console())
    if json_out is not None:
        write_text(json_out, text, "--json")


_JSON = typer.Option(None, "--json", help="Also write the answer as JSON to this file ('-' = stdout only JSON).")
_CAL = typer.Option(None, "--calibration", help="Calibration file (e.g. a digital twin's twin.yaml).")


@plan_app.command("kv")
def kv(
    model: str = typer.Option(..., "--model", help="Catalog id or a config.json path."),
    context: int = typer.Option(..., "--context", help="Tokens per sequence (prompt + output)."),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="bf16, fp8 or int8."),
    weights_dtype: str | None = typer.Option(None, "--weights-dtype", help="bf16, fp8, int8 or int4."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU catalog id (for capacity and concurrency)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
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
    _emit(p.to_dict(), json_out, lambda con: print_kv(con, p))


@plan_app.command("estimate")
def estimate(
    model: str = typer.Option(..., "--model", help="Catalog id or a config.json path."),
    gpu: str = typer.Option(..., "--gpu", help="GPU catalog id."),
    input_tokens: int = typer.Option(..., "--input-tokens"),
    output_tokens: int = typer.Option(..., "--output-tokens"),
    concurrency: int = typer.Option(1, "--concurrency", help="Steady requests in flight on the replica."),
    tp: int = typer.Option(1, "--tp"),
    weights_dtype: str | None = typer.Option(None, "--weights-dtype"),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype"),
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
    _emit(e.to_dict(), json_out, lambda con: print_estimate(con, e, title=title, calibration=calibration))


@plan_app.command("capacity")
def capacity(
    model: str | None = typer.Option(None, "--model"),
    gpu: str | None = typer.Option(None, "--gpu"),
    profile: Path | None = typer.Option(None, "--profile", help="Workload profile (lengths and mix)."),
    input_tokens: str = typer.Option("512", "--input-tokens", help="Length spec when no profile is given."),
    output_tokens: str = typer.Option("256", "--output-tokens", help="Length spec when no profile is given."),
    target_rps: float | None = typer.Option(None, "--target-rps", help="Requests/s the fleet must serve."),
    slo: list[str] = typer.Option([], "--slo", help="SLO like ttft_p99=1.5s (repeatable)."),
    headroom: float = typer.Option(0.2, "--headroom", help="Extra load fraction to plan for."),
    tp: str = typer.Option("1,2,4,8", "--tp", help="TP degrees to consider, e.g. 1,2,4."),
    max_replicas: int = typer.Option(64, "--max-replicas"),
    gpu_price: float | None = typer.Option(None, "--gpu-price", help="USD per GPU-hour (ranks by cost)."),
    weights_dtype: str | None = typer.Option(None, "--weights-dtype"),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype"),
    calibration: Path | None = _CAL,
    sim_requests: int = typer.Option(1500, "--sim-requests", help="Requests per simulation of a configuration."),
    users: int | None = typer.Option(None, "--users", help="Napkin form: concurrent users."),
    tokens_per_user_s: float | None = typer.Option(None, "--tokens-per-user-s", help="Napkin form."),
    gpu_tokens_s: float | None = typer.Option(None, "--gpu-tokens-s", help="Napkin form: tokens/s one GPU gives."),
    engine: str = typer.Option("vllm", "--engine", help="Serving engine: vllm, sglang or trtllm."),
    json_out: Path | None = _JSON,
) -> None:
    """Cheapest configuration meeting the SLO at the target load (simulation-backed), or the napkin form.

    Examples:

      tailscope plan capacity --model llama-3.1-8b --gpu h100-sxm --target-rps 20 \\
          --slo ttft_p99=1.5s --slo tpot_p99=50ms

      tailscope plan capacity --users 100 --tokens-per-user-s 25 --gpu-tokens-s 1400 --headroom 0.2
    """
    from tailscope.report.plan_console import print_capacity, print_napkin

    if users is not None or tokens_per_user_s is not None or gpu_tokens_s is not None:
        if users is None or tokens_per_user_s is None or gpu_tokens_s is None:
            raise ConfigError("the napkin form needs --users, --tokens-per-user-s and --gpu-tokens-s together")
        from tailscope.api.plan import plan_napkin

        n = plan_napkin(users=users, tokens_per_user_s=tokens_per_user_s, gpu_tokens_s=gpu_tokens_s, headroom=headroom)
        _emit(n.to_dict(), json_out, lambda con: print_napkin(con, n))
        return
    if model is None or gpu is None or target_rps is None:
        raise ConfigError("plan capacity needs --model, --gpu and --target-rps (or the napkin form: --users …)")
    from tailscope.api.plan import plan_capacity

    r = plan_capacity(model, gpu, target_rps=target_rps, slo=slo, profile=profile, input_tokens=input_tokens,
                      output_tokens=output_tokens, headroom=headroom, tp=tp, max_replicas=max_replicas,
                      gpu_price=gpu_price, weights_dtype=weights_dtype, kv_dtype=kv_dtype, calibration=calibration,
                      sim_requests=sim_requests, engine=engine)  # fmt: skip
    _emit(r.to_dict(), json_out, lambda con: print_capacity(con, r.plan, r.model, r.gpu, r.search_seconds))


@plan_app.command("cost")
def cost(
    gpu_price: float = typer.Option(..., "--gpu-price", help="USD per GPU-hour."),
    run: str | None = typer.Option(None, "--run", help="A stored bench or sim run (id, prefix, latest)."),
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs behind the run (sim runs know their own)."),
    api_price_in: float | None = typer.Option(None, "--api-price-in", help="API USD per 1M input tokens."),
    api_price_out: float | None = typer.Option(None, "--api-price-out", help="API USD per 1M output tokens."),
    daily_requests: int | None = typer.Option(None, "--daily-requests"),
    db: Path | None = typer.Option(None, "--db"),
    json_out: Path | None = _JSON,
) -> None:
    """$ per 1M output tokens and per request from a measured or simulated run; self-host vs API break-even.

    Example: tailscope plan cost --gpu-price 2.5 --run latest --api-price-in 0.15 --api-price-out 0.60 \\
        --daily-requests 500000
    """
    from tailscope.api.plan import plan_cost
    from tailscope.cli.common import store_path
    from tailscope.report.plan_console import print_cost

    if run is None:
        raise ConfigError("plan cost needs --run RUN_ID (a stored bench or sim run) to take the throughput from")
    c = plan_cost(gpu_price=gpu_price, run=run, gpus=gpus, api_price_in=api_price_in, api_price_out=api_price_out,
                  daily_requests=daily_requests, store=store_path(db))  # fmt: skip
    _emit(c.to_dict(), json_out, lambda con: print_cost(con, c))


@plan_app.command("budget")
def budget(
    target: str = typer.Option(..., "--target", help="End-to-end latency target, e.g. 300ms."),
    layer: list[str] = typer.Option([], "--layer", help="LAYER=DURATION, e.g. gateway=50ms (repeatable)."),
    buffer: float = typer.Option(0.2, "--buffer", help="Fraction of the target held back."),
    from_traces: str | None = typer.Option(None, "--from-traces", help="Trace set: budgets from critical-path shares."),
    out: Path | None = typer.Option(None, "--out", help="Write a performance contract (tailscope gate format)."),
    db: Path | None = typer.Option(None, "--db"),
    json_out: Path | None = _JSON,
) -> None:
    """Per-layer latency budgets with a buffer; flags layers that cannot hold; writes a contract.

    Example: tailscope plan budget --target 300ms --layer gateway=50ms --layer inference=120ms --buffer 0.2 --out c.yaml
    """
    from tailscope.api.plan import plan_budget
    from tailscope.cli.common import store_path
    from tailscope.report.plan_console import print_budget

    plan = plan_budget(target, layers=layer, buffer=buffer, traces=from_traces, out=out, store=store_path(db))
    doc = plan.to_dict()
    doc["contract"] = plan.contract()
    _emit(doc, json_out, lambda con: print_budget(con, plan, out))


# model routing and tiers (issue 24 item 11) lives in its own module
from tailscope.cli.plan_routing import routing as _routing  # noqa: E402

plan_app.command("routing")(_routing)
