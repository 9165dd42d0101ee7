"""``tailscope compare``: which differences between runs are real (bootstrap intervals on every percentile)."""

from __future__ import annotations

from pathlib import Path

import typer

from tailscope.cli import common as opt
from tailscope.cli.common import command_app, json_or_render, json_path_option, write_text

_HELP = """Compare runs against the first one: per metric and percentile, the change, its confidence interval and a
significance mark (* when the interval excludes zero). Works on bench, sim and trace runs and on export files alike.

Examples:

  tailscope compare latest:main latest

  tailscope compare RUN_A RUN_B RUN_C --metrics ttft_ms,tpot_ms --json -

  tailscope compare RUN_A RUN_B --gpu-price 2.5 --gpus 1   # also each run's $ per 1M output tokens
"""


def compare(
    runs: list[str] = typer.Argument(..., help="Two or more runs: ids, prefixes, latest, latest:TAG or export.json."),
    metrics: str | None = typer.Option(
        None, "--metrics", help="Comma-separated: ttft_ms,tpot_ms,itl_ms,e2e_ms,output_tokens_per_s,error_rate,…"
    ),
    percentiles: str = typer.Option("p50,p90,p99", "--percentiles", help="Statistics for latency metrics."),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence level of the intervals."),
    resamples: int = typer.Option(2000, "--resamples", help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    json_out: Path | None = json_path_option("the comparison"),
    markdown: Path | None = typer.Option(None, "--markdown", help="Also write the table as markdown here."),
    gpu_price: float | None = typer.Option(
        None, "--gpu-price", help="USD per GPU-hour: show each run's $ per 1M output tokens."
    ),
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs behind each run (sim runs know their own)."),
    db: opt.Db = None,
) -> None:
    from tailscope.api.verify import compare as run_compare
    from tailscope.report.verify import compare_markdown, compare_text

    result = run_compare(
        runs,
        metrics=metrics,
        percentiles=percentiles,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        gpu_price=gpu_price,
        gpus=gpus,
        store=db,
    )
    json_or_render(result.to_dict(), json_out, lambda: typer.echo(compare_text(result), nl=False))
    if markdown is not None:
        write_text(markdown, compare_markdown(result), "--markdown")


app = command_app()
app.command("compare", help=_HELP)(compare)
