"""``tailscope sim``: predict latency distributions of a deployment for a workload, in virtual time (no GPU)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import typer

from tailscope.cli import common as opt
from tailscope.cli.common import command_app

_EXAMPLES = """
Examples:

  tailscope sim --model llama-3.1-8b --gpu h100-sxm --rate 20 --requests 10000 --input-tokens uniform:200:1800

  tailscope sim --profile support-chat.yaml --model llama-3.1-8b --gpu h100-sxm --replicas 2 --json sim.json

  tailscope sim --profile p.yaml --model ./config.json --gpu l40s --tp 2 --autoscale policy.yaml --duration 3600

  tailscope sim --model qwen3-32b --gpu h100-sxm --tp 4 --concurrency 64 --requests 2000 \\
      --input-tokens 1024 --output-tokens 512 --calibration my-cluster.yaml

  tailscope sim --model deepseek-ai/DeepSeek-R1 --gpu b200_sxm --engine sglang --tp 8 --ep 8 \\
      --weights-dtype fp4 --kv-dtype fp8 --concurrency 64 --input-tokens 1024 --output-tokens 1024
"""


def sim(
    ctx: typer.Context,
    model: opt.Model = "llama-3.1-8b",
    gpu: opt.Gpu = "h100-sxm",
    tp: opt.Tp = 1,
    engine: opt.Engine = "vllm",
    ep: opt.Ep = 1,
    attention_dp: int = typer.Option(
        1, "--attention-dp", help="Attention data-parallel ranks per replica (each with --tp GPUs)."
    ),
    replicas: int = typer.Option(1, "--replicas", help="Replicas behind the router (initial count with --autoscale)."),
    router: str = typer.Option(
        "least_outstanding", "--router", help="round_robin, least_outstanding or prefix_affinity."
    ),
    weights_dtype: opt.WeightsDtype = None,
    kv_dtype: opt.KvDtype = "bf16",
    max_num_seqs: opt.MaxNumSeqs = None,
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None,
    gpu_memory_utilization: opt.GpuMemoryUtilization = 0.9,
    no_prefix_caching: opt.NoPrefixCaching = False,
    calibration: opt.Calibration = None,
    gpu_file: opt.GpuFile = None,
    autoscale: Path | None = typer.Option(None, "--autoscale", help="Autoscaling policy YAML."),
    profile: opt.Profile = None,
    concurrency: opt.Concurrency = None,
    rate: opt.Rate = None,
    arrival: opt.Arrival = "poisson",
    burstiness: opt.Burstiness = 1.0,
    requests: opt.Requests = None,
    duration: opt.Duration = None,
    input_tokens: opt.InputTokens = "256",
    output_tokens: opt.OutputTokens = "128",
    warmup: opt.Warmup = 0,
    seed: int = typer.Option(0, "--seed", help="Seed for lengths and arrivals (same seed → same simulation)."),
    slo: list[str] = opt.SLO,
    disagg: str | None = typer.Option(
        None, "--disagg", help="Prefill/decode pools: prefill=WORKERSxTP,decode=WORKERSxTP (replaces --replicas/--tp)."
    ),
    spec_draft: int = typer.Option(0, "--spec-draft", help="Speculative decoding: draft tokens per step (0 = off)."),
    spec_accept: float = typer.Option(0.7, "--spec-accept", help="Acceptance rate of each draft token (0–1)."),
    spec_draft_model: str | None = typer.Option(
        None, "--spec-draft-model", help="Draft model id (default: 0.1 × the target's decode step per draft token)."
    ),
    kv_offload_gib: float = typer.Option(
        0.0, "--kv-offload-gib", help="Host memory (GiB/replica) for preempted KV: swap instead of recompute."
    ),
    from_traces: str | None = typer.Option(
        None, "--from-traces", metavar="SET", help="Simulate an ingested trace set's LLM calls as call graphs."
    ),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Multiply trace times (0.5 = replay twice as fast)."),
    json_out: opt.ExportOut = None,
    html_out: opt.HtmlOut = None,
    db: opt.Db = None,
    quiet: opt.Quiet = False,
) -> None:
    """Simulate a deployment in virtual time: TTFT/TPOT/ITL/E2E, throughput, KV cache and queueing, no GPU needed."""

    from tailscope.api.sim import simulate
    from tailscope.cli.common import err_console, json_to_stdout, store_path, typed_params, write_export_chunks
    from tailscope.metrics.document import run_to_json
    from tailscope.report.console import print_summary
    from tailscope.report.sim_console import print_sim

    err = err_console()

    def progress(done: int, virtual_s: float) -> None:
        if not quiet:
            err.print(f"simulated {done:,} requests ({virtual_s:,.0f} s of virtual time)")

    out = simulate(
        model=model, gpu=gpu, tp=tp, engine=engine, ep=ep, attention_dp=attention_dp, replicas=replicas,
        router=router, weights_dtype=weights_dtype, kv_dtype=kv_dtype, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens, gpu_memory_utilization=gpu_memory_utilization,
        prefix_caching=not no_prefix_caching, calibration=calibration, gpu_file=gpu_file, autoscale=autoscale,
        profile=profile, concurrency=concurrency, rate=rate, arrival=arrival, burstiness=burstiness,
        requests=requests, duration=duration, input_tokens=input_tokens, output_tokens=output_tokens, warmup=warmup,
        seed=seed, slo=slo, disagg=disagg, spec_draft=spec_draft, spec_accept=spec_accept,
        spec_draft_model=spec_draft_model, kv_offload_gib=kv_offload_gib, from_traces=from_traces,
        time_scale=time_scale, store=store_path(db), progress=progress,
        explicit=typed_params(ctx),
    )  # fmt: skip
    res = out.sim
    # --json -: stdout holds the JSON document only, the text goes to stderr
    text_to = contextlib.redirect_stdout(sys.stderr) if json_to_stdout(json_out) else contextlib.nullcontext()
    with text_to:
        err.print(f"[cyan]target: {out.run.target.description}[/]")
        print_summary(run_to_json(out.run), out.summary_dict(), _stdout())
        print_sim(_stdout(), res, timeline=autoscale is not None, interval=out.prediction_interval,
                  interval_source=out.prediction_interval_source)  # fmt: skip
    if json_out is not None:
        write_export_chunks(json_out, out.export_chunks())
        if not json_to_stdout(json_out):
            err.print(f"wrote {json_out}")
    if html_out is not None:
        from tailscope.api.report import write_report  # the HTML report's modules load only when asked for

        write_report(html_out, out)
        err.print(f"wrote {html_out}")
    err.print(f"run {out.run.id} stored (kind sim)")


app = command_app()
app.command("sim", help=(sim.__doc__ or "") + "\n" + _EXAMPLES)(sim)


def _stdout() -> Any:
    from tailscope.report.console import stdout_console

    return stdout_console()
