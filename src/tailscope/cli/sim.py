"""``tailscope sim``: predict latency distributions of a deployment for a workload, in virtual time (no GPU)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import typer

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
    model: str = typer.Option("llama-3.1-8b", "--model", help="Catalog model id or a path to a config.json."),
    gpu: str = typer.Option("h100-sxm", "--gpu", help="Catalog GPU id (tailscope catalog gpus)."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel GPUs per replica (per attention-DP rank)."),
    engine: str = typer.Option("vllm", "--engine", help="Serving engine: vllm, sglang or trtllm (costs, defaults)."),
    ep: int = typer.Option(1, "--ep", help="Expert parallelism of an MoE model (divides tp × attention-dp)."),
    attention_dp: int = typer.Option(
        1, "--attention-dp", help="Attention data-parallel ranks per replica (each with --tp GPUs)."
    ),
    replicas: int = typer.Option(1, "--replicas", help="Replicas behind the router (initial count with --autoscale)."),
    router: str = typer.Option(
        "least_outstanding", "--router", help="round_robin, least_outstanding or prefix_affinity."
    ),
    weights_dtype: str | None = typer.Option(
        None, "--weights-dtype", help="bf16, fp8, int8, int4, fp4, mxfp4 (default: the checkpoint's own)."
    ),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="bf16 or fp8 KV cache."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Running requests at most (vLLM default)."),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Tokens per engine step (vLLM default)."
    ),
    gpu_memory_utilization: float = typer.Option(0.9, "--gpu-memory-utilization", help="GPU memory fraction."),
    no_prefix_caching: bool = typer.Option(False, "--no-prefix-caching", help="Disable the prefix cache."),
    calibration: Path | None = typer.Option(None, "--calibration", help="Calibration YAML (efficiencies)."),
    gpu_file: Path | None = typer.Option(None, "--gpu-file", help="YAML file with extra GPUs."),
    autoscale: Path | None = typer.Option(None, "--autoscale", help="Autoscaling policy YAML."),
    profile: Path | None = typer.Option(None, "--profile", help="Workload profile YAML (flags override its fields)."),
    concurrency: int | None = typer.Option(None, "--concurrency", "-c", help="Closed loop: requests kept in flight."),
    rate: float | None = typer.Option(None, "--rate", "-r", help="Open loop: requests per second."),
    arrival: str = typer.Option("poisson", "--arrival", help="Open-loop process: constant, poisson or gamma."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma shape (<1 burstier, 1 = Poisson)."),
    requests: int | None = typer.Option(None, "--requests", "-n", help="Stop after N requests (warmup included)."),
    duration: float | None = typer.Option(
        None, "--duration", help="Stop starting requests after this many (virtual) seconds."
    ),
    input_tokens: str = typer.Option("256", "--input-tokens", help="N, uniform:A:B, normal:M:S, lognormal:MED:SIG."),
    output_tokens: str = typer.Option("128", "--output-tokens", help="Same forms as --input-tokens."),
    warmup: int = typer.Option(0, "--warmup", help="First N requests are warmup: stored, excluded from statistics."),
    seed: int = typer.Option(0, "--seed", help="Seed for lengths and arrivals (same seed → same simulation)."),
    slo: list[str] = typer.Option([], "--slo", help="SLO like ttft_p99=1.5s or tpot_p99=60ms (repeatable)."),
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
    json_out: Path | None = typer.Option(
        None, "--json", metavar="PATH", help="Write run, summary and every request to PATH (- = stdout)."
    ),
    html_out: Path | None = typer.Option(None, "--html", help="Write a self-contained HTML report to this file."),
    db: Path | None = typer.Option(None, "--db", help="Store (default $TAILSCOPE_DB or .tailscope/tailscope.duckdb)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
) -> None:
    """Simulate a deployment in virtual time: TTFT/TPOT/ITL/E2E, throughput, KV cache and queueing, no GPU needed."""

    from tailscope.api.sim import simulate
    from tailscope.cli.common import err_console, json_to_stdout, store_path, typed_params, write_export_chunks
    from tailscope.metrics.document import run_to_json
    from tailscope.report.console import print_summary

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
        hit = res.prefix_hit_rate
        print(
            f"sim: {res.virtual_s:,.1f} s virtual in {res.wall_s:.2f} s ({res.speedup:,.0f}× real time), "
            f"{res.steps:,} engine steps, {res.preemptions:,} preemptions, prefix-cache hit rate "
            f"{'—' if hit is None else f'{hit:.1%}'}, {res.gpu_seconds / 3600:,.2f} GPU-hours"
        )
        if res.kv_transfer_s or res.kv_swapped_tokens or res.recompute_tokens:
            print(
                f"KV: {res.kv_transfer_s:,.1f} s of prefill→decode transfers, {res.kv_swapped_tokens:,} tokens swapped "
                f"to/from host ({res.kv_swap_s:,.2f} s), {res.recompute_tokens:,} tokens recomputed after preemption"
            )
        for t, change, why in res.scale_events:
            print(f"autoscaler: t={t:,.0f}s " + (f"{change:+d} replica(s) ({why})" if change else why))
        if autoscale is not None and res.timeline:
            _stdout().print(_timeline_table(res.timeline))
        if out.prediction_interval is not None:
            rows = ", ".join(
                f"{m} {p} {lo:,.1f}–{hi:,.1f} ms"
                for m, pcts in out.prediction_interval.items()
                for p, (lo, hi) in pcts.items()
            )
            src = out.prediction_interval_source or {}
            if src.get("kind") == "residuals":
                print(f"90% prediction interval (step-model residuals on {src.get('label')}): {rows}")
            else:
                print(f"twin prediction interval (±1σ of the fitted costs): {rows}")
    if json_out is not None:
        write_export_chunks(json_out, out.export_chunks())
        if not json_to_stdout(json_out):
            err.print(f"wrote {json_out}")
    if html_out is not None:
        from tailscope.api.report import write_report  # the HTML report's modules load only when asked for

        write_report(html_out, out)
        err.print(f"wrote {html_out}")
    err.print(f"run {out.run.id} stored (kind sim)")


def _timeline_table(timeline: list[dict[str, Any]], max_rows: int = 24) -> Any:
    """Every k-th 10-second window of the timeline (at most ``max_rows`` rows) as a rich table."""
    from rich.table import Table

    step = max(1, -(-len(timeline) // max_rows))
    t = Table(title="Timeline (10 s windows)", title_justify="left", show_edge=False, header_style="bold")
    for col in ("t (s)", "replicas", "cold", "waiting", "running", "KV use", "TTFT p99 ms", "done"):
        t.add_column(col, justify="right")
    for row in timeline[::step]:
        p99 = row.get("ttft_p99_ms")
        t.add_row(
            f"{row['t_s']:,.0f}",
            str(row["replicas_ready"]),
            str(row["replicas_pending"]),
            str(row["waiting"]),
            str(row["running"]),
            f"{row['kv_usage']:.0%}",
            "—" if p99 is None else f"{p99:,.0f}",
            str(row["completed"]),
        )
    return t


app = command_app()
app.command("sim", help=(sim.__doc__ or "") + "\n" + _EXAMPLES)(sim)


def _stdout() -> Any:
    from tailscope.report.console import stdout_console

    return stdout_console()
