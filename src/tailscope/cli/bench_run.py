"""The work behind ``tailscope bench``: resolve flags into a BenchConfig, run it, render, export.

Imported lazily by :mod:`tailscope.cli.bench` so that ``--help`` stays fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console

from tailscope.client.openai import Timeouts
from tailscope.errors import ConfigError
from tailscope.metrics.slo import parse_slo
from tailscope.records import Target
from tailscope.report.console import print_summary, stdout_console
from tailscope.report.json_export import build_export, write_export
from tailscope.report.live import live_progress
from tailscope.runner.bench import BenchConfig, BenchResult, run_bench
from tailscope.runner.loadgen import DispatchConfig
from tailscope.runner.progress import Progress
from tailscope.workload.lengths import parse_length_spec
from tailscope.workload.simple import LoadShape, simple_requests
from tailscope.workload.spec import RequestSpec

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BenchArgs:
    """The raw flags of ``tailscope bench``."""

    url: str | None
    model: str | None
    endpoint: str
    profile: Path | None
    concurrency: int | None
    rate: float | None
    arrival: str
    burstiness: float
    requests: int | None
    duration: float | None
    warmup: int
    input_tokens: str
    output_tokens: str
    seed: int
    slo: tuple[str, ...]
    json_out: Path | None
    tokenizer: Path | None
    api_key_env: str
    ignore_eos: bool
    continuous_usage: bool
    timeout_connect: float
    timeout_first_token: float
    timeout_total: float
    metrics_url: str
    max_rate: float | None
    builtin_model: str
    builtin_gpu: str
    db: Path | None
    quiet: bool
    workers: int | None = None  # --workers: load-generator worker processes / actors
    ray: str | None = None  # --ray: run the workers as Ray actors (auto, local or an address)
    replay: Path | None = None
    replay_format: str = "auto"
    time_scale: float = 1.0
    dialects: tuple[str, ...] = ()
    sweep: str | None = None
    find_max: bool = False
    find_max_tolerance: float = 0.05
    html_out: Path | None = None
    http_client: str = "raw"
    explicit: frozenset[str] | None = None  # flags typed on the command line; None = built in code (see bench_workload)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when installed (lower client overhead), else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def resolve(args: BenchArgs) -> tuple[BenchConfig, Iterator[RequestSpec], Progress]:
    """Turn flags into a validated config and request stream (raises ConfigError/ProfileError on bad input)."""
    if args.endpoint not in ("chat", "completions"):
        raise ConfigError(f"--endpoint {args.endpoint!r}: use chat or completions")
    if args.profile is not None or args.replay is not None:
        from tailscope.cli.bench_workload import resolve_workload

        return resolve_workload(args, resolve)
    slos = tuple(parse_slo(s) for s in args.slo)
    concurrency = args.concurrency
    if concurrency is None and args.rate is None:
        concurrency = 1
    shape = LoadShape(
        concurrency=concurrency,
        rate=args.rate,
        arrival=args.arrival,
        burstiness=args.burstiness,
        requests=args.requests,
        duration_s=args.duration,
        warmup=args.warmup,
    )
    shape.validate()
    if args.max_rate is not None and args.rate is not None and args.rate > args.max_rate:
        raise ConfigError(f"--rate {args.rate:g} exceeds --max-rate {args.max_rate:g}; lower the rate or raise the cap")
    for name, value in (
        ("--timeout-connect", args.timeout_connect),
        ("--timeout-first-token", args.timeout_first_token),
        ("--timeout-total", args.timeout_total),
    ):
        if not value > 0:
            raise ConfigError(f"{name} must be > 0 seconds (got {value})")
    in_dist = parse_length_spec(args.input_tokens, what="--input-tokens")
    out_dist = parse_length_spec(args.output_tokens, what="--output-tokens")
    metrics_url: str | None = None if args.metrics_url == "off" else args.metrics_url
    specs = simple_requests(shape, in_dist, out_dist, seed=args.seed)
    settings: dict[str, Any] = {
        "mode": "open" if shape.open_loop else "closed",
        "concurrency": concurrency,
        "rate": args.rate,
        "arrival": args.arrival if shape.open_loop else None,
        "burstiness": args.burstiness if shape.open_loop else None,
        "requests": args.requests,
        "duration_s": args.duration,
        "warmup": args.warmup,
        "input_tokens": str(in_dist),
        "output_tokens": str(out_dist),
        "endpoint": args.endpoint,
        "ignore_eos": args.ignore_eos,
        "slo": [s.key + "=" + f"{s.threshold_ms:g}ms" for s in slos],
        "tokenizer": str(args.tokenizer) if args.tokenizer else None,
        "api_key_env": args.api_key_env,
        "timeouts_s": [args.timeout_connect, args.timeout_first_token, args.timeout_total],
    }
    cfg = BenchConfig(
        url=args.url,
        model=args.model,
        endpoint=args.endpoint,
        api_key_env=args.api_key_env,
        ignore_eos=args.ignore_eos,
        continuous_usage=args.continuous_usage,
        timeouts=Timeouts(args.timeout_connect, args.timeout_first_token, args.timeout_total),
        dispatch=DispatchConfig(concurrency=concurrency, duration_s=args.duration),
        requested_rate=args.rate,
        seed=args.seed,
        slos=slos,
        tokenizer=str(args.tokenizer) if args.tokenizer else None,
        metrics_url=metrics_url,
        db=str(args.db) if args.db else None,
        settings=settings,
        builtin_model=args.builtin_model,
        builtin_gpu=args.builtin_gpu,
        http_client=args.http_client,
    )
    progress = Progress(total=args.requests, duration_s=args.duration)
    return cfg, specs, progress


def check_dialects(dialects: tuple[str, ...]) -> None:
    """Refuse an unknown ``--dialect`` before any load is sent."""
    from tailscope.metrics.dialects import DIALECTS

    for d in dialects:
        if d not in DIALECTS:
            raise ConfigError(f"--dialect {d!r}: use one of {', '.join(DIALECTS)}")


def main_bench(args: BenchArgs) -> int:
    """Run ``tailscope bench``; returns the exit code."""
    if args.sweep is not None or args.find_max:
        from tailscope.cli.bench_sweep import main_sweep

        return main_sweep(args)
    check_dialects(args.dialects)
    cfg, specs, progress = resolve(args)
    err = Console(stderr=True)

    def on_target(t: Target) -> None:
        if t.builtin:
            err.print(f"[cyan]target: {t.description} at {t.url}[/]")
        else:
            err.print(f"target: {t.url} model {t.model}")

    with live_progress(progress, quiet=args.quiet, console=err):
        if args.workers is not None or args.ray is not None:
            from tailscope.runner.workers import check_worker_flags, describe_workers, run_bench_distributed

            n = check_worker_flags(args.workers, args.ray)
            result: BenchResult = run_async(
                run_bench_distributed(
                    cfg, specs, workers=n, ray_address=args.ray, progress=progress, on_target=on_target
                )
            )
            for line in describe_workers(result.extra.get("workers", [])):
                err.print(line)
        else:
            result = run_async(run_bench(cfg, specs, progress=progress, on_target=on_target))
    summary = result.summary.to_dict()
    summary["server"] = result.server
    summary.update(result.extra)
    from tailscope.report.json_export import run_to_json

    out = stdout_console()
    print_summary(run_to_json(result.run), summary, out)
    if args.dialects:
        from tailscope.metrics.dialects import summarize_dialect
        from tailscope.report.console import dialect_renderable

        summary["dialects"] = {d: summarize_dialect(result.records, d) for d in args.dialects}
        for d in args.dialects:
            out.print(dialect_renderable(summary["dialects"][d]))
    if args.json_out is not None:
        write_export(args.json_out, build_export(result.run, summary, result.records))
        err.print(f"wrote {args.json_out}")
    if args.html_out is not None:
        from tailscope.report.html import write_html_report

        write_html_report(args.html_out, run_to_json(result.run), summary, result.records, result.samples)
        err.print(f"wrote {args.html_out}")
    if result.signal_name:
        err.print(f"[yellow]interrupted by {result.signal_name}: run {result.run.id} kept as incomplete[/]")
    return result.exit_code
