"""``tailscope bench``: load-test an OpenAI-compatible endpoint (or the built-in engine) and report what users feel.

Parse → :class:`~tailscope.runner.options.BenchOptions` → :func:`tailscope.bench` (or :func:`tailscope.sweep`,
:func:`tailscope.find_max`) → render. Options a profile can also set are passed only when typed, so a profile's value
wins over a flag's default.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tailscope.api._flags import BENCH_FLAGS
from tailscope.api.bench import RepeatedBench, bench_repeat
from tailscope.api.bench import bench as run_bench
from tailscope.api.bench import find_max as run_find_max
from tailscope.api.bench import sweep as run_sweep
from tailscope.cli import common as opt
from tailscope.cli.common import (
    command_app,
    err_console,
    store_path,
    typed_params,
    with_flags,
    write_export,
    write_report_html,
)
from tailscope.errors import ConfigError
from tailscope.files import check_output, to_stdout
from tailscope.metrics.verdict import Verdict
from tailscope.records import Target
from tailscope.report.console import dialect_renderable, print_summary, stdout_console, target_line
from tailscope.report.live import live_progress
from tailscope.runner.options import BenchOptions

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

Without --rate the load is a closed loop with --concurrency requests in flight (default 1). --rate with
--concurrency is an open loop capped at that many in flight (vLLM bench's --request-rate with --max-concurrency): a
request due while every slot is taken waits, and its latencies still count from its scheduled time.

Exit codes: 0 the run met its SLOs with at most --max-error-rate failed requests; 1 bad input or the target could
not be reached (nothing was sent), or the store could not keep every record (disk full: the result is printed, the
run stored incomplete); 3 the run finished but missed an SLO or had too many failures (--no-fail: 0); 130/143
interrupted by SIGINT/SIGTERM (completed records are kept).
"""

if TYPE_CHECKING:
    from tailscope.runner.sweep_run import FindMaxOutcome, SweepOutcome

#: the exit code of a run that finished but failed its verdict (an SLO missed, too many failed requests)
EXIT_VERDICT = 3

app = command_app()


@app.command("bench", help=(
    "Load-test an endpoint: TTFT, TPOT, ITL, E2E percentiles, throughput and goodput.\n\n" + _EXAMPLES
))  # fmt: skip
@with_flags(BENCH_FLAGS.values())  # url, model, the workload, the client: BenchOptions fields (api/_flags.py)
def bench(
    ctx: typer.Context,
    json_out: opt.ExportOut = None,
    html_out: opt.HtmlOut = None,
    db: opt.Db = None,
    quiet: opt.Quiet = False,
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
    repeat: int | None = typer.Option(None, "--repeat", help="Run the same workload N times; pool and compare."),
    until_precise: str | None = typer.Option(
        None, "--until-precise", help="Repeat until a percentile is this precise, e.g. ttft_ms.p99=5% (95 % CI)."
    ),
    max_repeats: int = typer.Option(10, "--max-repeats", help="Most runs --until-precise makes."),
    max_error_rate: float = typer.Option(
        0.01, "--max-error-rate", help="Fail (exit 3) when more than this share of requests fails (default 1 %)."
    ),
    no_fail: bool = typer.Option(False, "--no-fail", help="Exit 0 even when an SLO or --max-error-rate fails."),
    **_options: Any,
) -> None:
    options = BenchOptions.from_flags(ctx.params, typed_params(ctx))
    check_output(json_out, "--json")  # an unwritable output is refused before any load, not after the run
    check_output(html_out, "--html")
    if dialect:
        from tailscope.metrics.dialects import check_dialects

        check_dialects(dialect)
    err = err_console()
    out = err if to_stdout(json_out) else stdout_console()  # --json -: stdout holds the JSON document only
    shown: list[Target] = []

    def show_target(t: Target) -> None:  # a sweep calls it for every point: print the target once
        if not shown:
            shown.append(t)
            err.print(target_line(t))

    hooks: dict[str, Any] = {
        "store": store_path(db), "handle_signals": True, "watch": lambda p: live_progress(p, quiet=quiet, console=err),
        "on_target": show_target,
    }  # fmt: skip
    if sweep is not None or find_max:
        raise typer.Exit(_sweep_or_search(options, hooks, sweep, find_max_tolerance, json_out, html_out, bool(dialect)))
    if repeat is not None or until_precise is not None:
        repeated = bench_repeat(options, repeat=repeat, until_precise=until_precise, max_repeats=max_repeats, **hooks)
        raise typer.Exit(_repeated(repeated, json_out, out, max_error_rate, no_fail))
    result = run_bench(options=options, **hooks)
    if "workers" in result.extra:
        from tailscope.runner.workers.driver import describe_workers

        for line in describe_workers(result.extra["workers"]):
            err.print(line)
    summary = result.summary_dict()
    from tailscope.metrics.document import run_to_json  # numpy: after the run

    print_summary(run_to_json(result.run), summary, out)
    if dialect:
        from tailscope.metrics.dialects import summarize_dialect

        summary["dialects"] = {d: summarize_dialect(result.records, d) for d in dialect}
        for d in dialect:
            out.print(dialect_renderable(summary["dialects"][d]))
    if json_out is not None:
        from tailscope.metrics.document import build_export

        write_export(json_out, build_export(result.run, summary, result.records))
    if html_out is not None:
        write_report_html(html_out, result)
    if result.signal_name:
        err.print(f"[yellow]interrupted by {result.signal_name}: run {result.run.id} kept as incomplete[/]")
        raise typer.Exit(result.exit_code)
    if result.store_error:  # the result is whole (printed above), the store is not: exit 1, as for a store error
        err.print(f"tailscope: error: {result.store_error}", style="red", highlight=False, soft_wrap=True)
        raise typer.Exit(result.exit_code)
    raise typer.Exit(_verdict_code(result.verdict(max_error_rate=max_error_rate), no_fail))


def _verdict_code(verdict: Verdict, no_fail: bool) -> int:
    """Print each failed check; the exit code: 0, or 3 when a check failed (unless ``--no-fail``)."""
    for reason in verdict.reasons:
        err_console().print(f"[red]FAIL[/] {reason}")
    return 0 if verdict.passed or no_fail else EXIT_VERDICT


def _sweep_or_search(
    options: BenchOptions, hooks: dict[str, Any], points: str | None, tolerance: float, json_out: Path | None,
    html_out: Path | None, dialects: bool,
) -> int:  # fmt: skip
    """Run a sweep or a capacity search and render it; returns the exit code (130/143 when interrupted)."""
    from tailscope.report.sweep_console import find_max_renderable, sweep_renderable

    if dialects:
        raise ConfigError(
            "--dialect applies to single runs; show a sweep's runs with `tailscope runs show ID --dialect`"
        )
    out = err_console() if to_stdout(json_out) else stdout_console()
    outcome: SweepOutcome | FindMaxOutcome
    if points is not None:
        outcome = sw = run_sweep(points, options, **hooks)
        runs, shown = sw.points, sweep_renderable(sw.to_dict())
    else:
        outcome = fm = run_find_max(options, tolerance=tolerance, **hooks)
        runs, shown = fm.probes, find_max_renderable(fm.to_dict())
    out.print(shown)
    if json_out is not None:
        write_export(json_out, outcome.export())
    if html_out is not None and len(runs) >= 2:
        write_report_html(html_out, [p.result for p in runs])  # the sweep curves, knee and SLO lines
    if outcome.interrupted and runs:
        err_console().print(f"[yellow]interrupted by {runs[-1].result.signal_name}: {len(runs)} run(s) kept[/]")
        return runs[-1].result.exit_code
    outcome.raise_if_stopped()  # the target stopped answering: exit 1 after the runs kept were shown
    return 0


def _repeated(out: RepeatedBench, json_out: Path | None, con: Any, max_error_rate: float, no_fail: bool) -> int:
    """``--repeat`` / ``--until-precise``: the runs, their spread, the pooled latencies; returns the exit code."""
    from tailscope.report.console import latency_table
    from tailscope.report.sweep_console import repeat_renderable

    doc = out.to_dict()
    con.print(repeat_renderable(doc))
    con.print(latency_table(doc["pooled"], title=f"Pooled over {len(out.runs)} runs, ms from the intended send time"))
    if json_out is not None:
        write_export(json_out, out.export())
    if out.stopped == "interrupted":
        return out.runs[-1].exit_code
    return _verdict_code(out.verdict(max_error_rate=max_error_rate), no_fail)
