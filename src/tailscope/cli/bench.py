"""``tailscope bench``: load-test an OpenAI-compatible endpoint (or the built-in engine) and report what users feel."""

from __future__ import annotations

from pathlib import Path

import typer

_EXAMPLES = """
Examples:

  tailscope bench --requests 200 --concurrency 16            # built-in simulated engine, no server needed

  tailscope bench --url http://127.0.0.1:8000 --model tiny --concurrency 16 --requests 500 \\
      --input-tokens uniform:100:900 --output-tokens 256 --json out.json

  tailscope bench --url http://127.0.0.1:8000 --rate 8 --arrival poisson --duration 120 --warmup 10 \\
      --slo ttft_p99=1.5s --slo tpot_p99=60ms

  tailscope bench --url http://10.0.0.7:8000 --rate 400 --duration 300 --workers 4   # 4 local worker processes

  tailscope bench --url http://127.0.0.1:8000 --profile examples/support-chat.yaml --rate 5 --duration 60

  tailscope bench --url http://127.0.0.1:8000 --replay trace.jsonl --time-scale 0.5 --dialect vllm

  tailscope bench --url http://127.0.0.1:8000 --sweep concurrency=1,2,4,8,16 --requests 200

  tailscope bench --url http://127.0.0.1:8000 --find-max --duration 30 --slo ttft_p99=1.5s --slo tpot_p99=60ms
"""


def bench(
    ctx: typer.Context,
    url: str | None = typer.Option(
        None, "--url", help="API root of the target (http://HOST:PORT). Omit to run the built-in simulated engine."
    ),
    model: str | None = typer.Option(None, "--model", help="Model name to request (default: the first listed)."),
    endpoint: str = typer.Option("chat", "--endpoint", help="chat (/v1/chat/completions) or completions."),
    profile: Path | None = typer.Option(None, "--profile", help="Workload profile YAML (flags override its fields)."),
    concurrency: int | None = typer.Option(None, "--concurrency", "-c", help="Closed loop: requests kept in flight."),
    rate: float | None = typer.Option(None, "--rate", "-r", help="Open loop: requests per second."),
    arrival: str = typer.Option("poisson", "--arrival", help="Open-loop process: constant, poisson or gamma."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma shape (<1 burstier, 1 = Poisson)."),
    requests: int | None = typer.Option(None, "--requests", "-n", help="Stop after N requests (warmup included)."),
    duration: float | None = typer.Option(None, "--duration", help="Stop starting requests after this many seconds."),
    warmup: int = typer.Option(0, "--warmup", help="First N requests are warmup: stored, excluded from statistics."),
    input_tokens: str = typer.Option("256", "--input-tokens", help="N, uniform:A:B, normal:M:S, lognormal:MED:SIG."),
    output_tokens: str = typer.Option("128", "--output-tokens", help="Same forms as --input-tokens (max_tokens)."),
    seed: int = typer.Option(0, "--seed", help="Seed for lengths, prompts and arrivals."),
    slo: list[str] = typer.Option([], "--slo", help="SLO like ttft_p99=1.5s or tpot_p99=60ms (repeatable)."),
    json_out: Path | None = typer.Option(None, "--json", help="Write run, summary and every request to this file."),
    html_out: Path | None = typer.Option(None, "--html", help="Write a self-contained HTML report to this file."),
    tokenizer: Path | None = typer.Option(None, "--tokenizer", help="tokenizer.json for exact prompt/token counts."),
    api_key_env: str = typer.Option("OPENAI_API_KEY", "--api-key-env", help="Environment variable holding the key."),
    ignore_eos: bool = typer.Option(True, "--ignore-eos/--no-ignore-eos", help="Send ignore_eos (vLLM/SGLang)."),
    continuous_usage: bool = typer.Option(
        True, "--continuous-usage/--no-continuous-usage", help="Ask vLLM for usage on every chunk."
    ),
    timeout_connect: float = typer.Option(10.0, "--timeout-connect", help="Connect timeout (s)."),
    timeout_first_token: float = typer.Option(120.0, "--timeout-first-token", help="First-token timeout (s)."),
    timeout_total: float = typer.Option(600.0, "--timeout-total", help="Whole-request timeout (s)."),
    metrics_url: str = typer.Option("auto", "--metrics-url", help="Prometheus URL to scrape: auto, off or a URL."),
    max_rate: float | None = typer.Option(None, "--max-rate", help="Refuse schedules faster than this (req/s)."),
    workers: int | None = typer.Option(
        None, "--workers", help="Spread the load over N worker processes (Ray actors with --ray); docs/scale-out.md."
    ),
    ray: str | None = typer.Option(
        None, "--ray", help="Run the --workers as Ray actors: auto (running cluster), local, or a cluster address."
    ),
    builtin_model: str = typer.Option("llama-3.1-8b", "--builtin-model", help="Model of the built-in engine."),
    builtin_gpu: str = typer.Option("h100-sxm", "--builtin-gpu", help="GPU of the built-in engine."),
    db: Path | None = typer.Option(None, "--db", help="Store (default $TAILSCOPE_DB or .tailscope/tailscope.duckdb)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No live progress (for CI)."),
    http_client: str = typer.Option(
        "raw", "--http-client", help="raw (lean, stamps tokens at the socket; default) or aiohttp."
    ),
    replay: Path | None = typer.Option(
        None, "--replay", help="Replay a trace (JSONL timestamp_s/input_tokens/output_tokens, Mooncake or Azure CSV)."
    ),
    replay_format: str = typer.Option("auto", "--replay-format", help="auto, tailscope, mooncake or azure."),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Multiply trace times (0.5 = replay twice as fast)."),
    dialect: list[str] = typer.Option(
        [], "--dialect", help="Also report as tailscope, vllm, aiperf, guidellm or sglang define metrics (repeatable)."
    ),
    sweep: str | None = typer.Option(
        None, "--sweep", help="Run several points: concurrency=1,2,4,8 or rate=1:20:8 (START:STOP:POINTS)."
    ),
    find_max: bool = typer.Option(False, "--find-max", help="Search the highest rate that meets --slo (bounded runs)."),
    find_max_tolerance: float = typer.Option(
        0.05, "--find-max-tolerance", help="Stop the search when the bracket is within this fraction."
    ),
) -> None:
    """Load-test an endpoint: TTFT, TPOT, ITL, E2E percentiles, throughput and goodput."""
    from tailscope.cli.bench_run import BenchArgs, main_bench

    code = main_bench(
        BenchArgs(
            url=url,
            model=model,
            endpoint=endpoint,
            profile=profile,
            concurrency=concurrency,
            rate=rate,
            arrival=arrival,
            burstiness=burstiness,
            requests=requests,
            duration=duration,
            warmup=warmup,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            seed=seed,
            slo=tuple(slo),
            json_out=json_out,
            html_out=html_out,
            tokenizer=tokenizer,
            api_key_env=api_key_env,
            ignore_eos=ignore_eos,
            continuous_usage=continuous_usage,
            timeout_connect=timeout_connect,
            timeout_first_token=timeout_first_token,
            timeout_total=timeout_total,
            metrics_url=metrics_url,
            max_rate=max_rate,
            workers=workers,
            ray=ray,
            builtin_model=builtin_model,
            builtin_gpu=builtin_gpu,
            db=db,
            quiet=quiet,
            http_client=http_client,
            replay=replay,
            replay_format=replay_format,
            time_scale=time_scale,
            dialects=tuple(dialect),
            sweep=sweep,
            find_max=find_max,
            find_max_tolerance=find_max_tolerance,
            explicit=_explicit(ctx),
        )
    )
    raise typer.Exit(code)


def _explicit(ctx: typer.Context) -> frozenset[str]:
    """Names of the parameters typed on the command line (they override a profile's fields; defaults do not)."""
    given: set[str] = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        # by name: typer may vendor its own click, whose ParameterSource is a different class
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given.add(name)
    return frozenset(given)


def register(app: typer.Typer) -> None:
    app.command("bench", help=(bench.__doc__ or "") + "\n" + _EXAMPLES)(bench)
