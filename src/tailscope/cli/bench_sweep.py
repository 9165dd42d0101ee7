"""``bench --sweep`` and ``bench --find-max``: several bench runs in one invocation (imported lazily).

Each point resolves exactly as a single ``bench`` with that point's ``--concurrency``/``--rate`` typed on the command
line (so it overrides a profile's arrival), runs with live progress, and is stored as its own run with the sweep id.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from rich.console import Console

from tailscope.cli.bench_run import BenchArgs, resolve, run_async
from tailscope.errors import ConfigError
from tailscope.records import Target
from tailscope.report.console import stdout_console
from tailscope.report.json_export import _clean as clean_json
from tailscope.report.json_export import run_to_json, write_export
from tailscope.report.live import live_progress
from tailscope.report.sweep_console import find_max_renderable, sweep_renderable
from tailscope.runner.bench import BenchConfig, BenchResult, run_bench
from tailscope.runner.progress import Progress
from tailscope.runner.sweep_run import PointRun, run_find_max, run_sweep
from tailscope.workload.spec import RequestSpec
from tailscope.workload.sweep import parse_sweep


def point_args(args: BenchArgs, param: str, value: float) -> BenchArgs:
    """The flags of one point: ``--concurrency`` or ``--rate`` set as if typed (the other one cleared)."""
    explicit = set(args.explicit) if args.explicit is not None else None
    if param == "concurrency":
        a = replace(args, concurrency=round(value), rate=None, sweep=None, find_max=False)
        drop, add = "rate", "concurrency"
    else:
        a = replace(args, rate=value, concurrency=None, sweep=None, find_max=False)
        drop, add = "concurrency", "rate"
    if explicit is not None:
        explicit.discard(drop)
        explicit.add(add)
        a = replace(a, explicit=frozenset(explicit))
    return a


def main_sweep(args: BenchArgs) -> int:
    """Run a sweep or a capacity search; returns the exit code (130/143 when interrupted)."""
    if args.sweep is not None and args.find_max:
        raise ConfigError("--sweep and --find-max exclude each other; run one, then the other")
    if args.dialects:
        raise ConfigError(
            "--dialect applies to single runs; show a sweep's runs with `tailscope runs show ID --dialect`"
        )
    err = Console(stderr=True)
    shown: list[Target] = []

    def on_target(t: Target) -> None:
        if not shown:
            shown.append(t)
            what = f"the built-in simulated engine ({t.description})" if t.builtin else f"{t.url} model {t.model}"
            err.print(f"target: {what}")

    def build(param: str, value: float) -> tuple[BenchConfig, Iterator[RequestSpec], Progress]:
        return resolve(point_args(args, param, value))

    def execute(cfg: BenchConfig, specs: Iterator[RequestSpec], progress: Progress) -> BenchResult:
        with live_progress(progress, quiet=args.quiet, console=err):
            result: BenchResult = run_async(run_bench(cfg, specs, progress=progress, on_target=on_target))
        return result

    out = stdout_console()
    doc: dict[str, Any]
    if args.sweep is not None:
        spec = parse_sweep(args.sweep)
        build(spec.param, spec.values[0])  # bad flags fail before any load
        outcome = run_sweep(spec, build, execute)
        doc = outcome.to_dict()
        out.print(sweep_renderable(doc))
        points = outcome.points
        interrupted = outcome.interrupted
        key = "sweep"
    else:
        if args.concurrency is not None:
            raise ConfigError("--find-max searches open-loop rates; drop --concurrency (--rate sets the start rate)")
        start = args.rate if args.rate is not None else 1.0
        cfg, _specs, _progress = build("rate", start)
        if not cfg.slos:
            raise ConfigError("--find-max needs an SLO to search against: --slo ttft_p99=1.5s (or slo: in the profile)")
        if not args.find_max_tolerance > 0:
            raise ConfigError(f"--find-max-tolerance must be > 0 (got {args.find_max_tolerance})")
        max_rate = args.max_rate if args.max_rate is not None else 10_000.0
        found = run_find_max(build, execute, start=start, max_rate=max_rate, rel_tol=args.find_max_tolerance)
        doc = found.to_dict()
        out.print(find_max_renderable(doc))
        points = found.probes
        interrupted = found.interrupted
        key = "find_max"
    if args.json_out is not None:
        write_export(args.json_out, clean_json({key: doc, "runs": [_run_doc(p) for p in points]}))
        err.print(f"wrote {args.json_out}")
    if args.html_out is not None and len(points) >= 2:
        from tailscope.report.html import ReportRun, render_compare_report, write_html
        from tailscope.report.json_export import run_to_json

        items = [
            ReportRun(
                run_to_json(p.result.run),
                {**p.result.summary.to_dict(), "server": p.result.server},
                p.result.records,
                p.result.samples,
            )
            for p in points
        ]
        write_html(args.html_out, render_compare_report(items))  # the sweep curves, knee and SLO lines
        err.print(f"wrote {args.html_out}")
    last = points[-1].result if points else None
    if interrupted and last is not None:
        err.print(f"[yellow]interrupted by {last.signal_name}: {len(points)} run(s) kept[/]")
        return last.exit_code
    return 0


def _run_doc(p: PointRun) -> dict[str, Any]:
    summary = p.result.summary.to_dict()
    summary["server"] = p.result.server
    summary.update(p.result.extra)
    return {"load": p.load, "run": run_to_json(p.result.run), "summary": summary}
